//! The p-adic valuation-skip product (issue 23) as a library call: `C =
//! A B mod p^k` through the proved kernels of `examples/ops/padic.tk`, a
//! product `a b` left out where `vp(a) + vp(b) >= k`, with each output's
//! certificate.
//!
//! The kernels are compiled for the moduli they declare (2^16 and 3^10);
//! [`matmul`] picks the one for the requested modulus and checks every
//! entry is a residue first (`requires a in [0, p^k)`), naming the first
//! that is not.

use crate::kernels::padic;
use crate::{DType, Device, Error, Result, Tensor};
use std::fmt;

/// The moduli a kernel is compiled for, `(p, k)`.
pub const MODULI: [(u64, u32); 2] = [(2, 16), (3, 10)];

/// `C = A B mod p^k` with each output's certificate (row-major `m x n`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Product {
    pub p: u64,
    pub k: u32,
    pub m: usize,
    pub n: usize,
    pub c: Vec<u32>,
    /// Products computed for each output.
    pub evaluated: Vec<u32>,
    /// Products left out (`K - evaluated`).
    pub skipped: Vec<u32>,
    /// The smallest `vp(a) + vp(b)` among the products left out, `2k + 1`
    /// where none was.
    pub min_skipped: Vec<u32>,
    /// `min_skipped - k` (`k + 1` where nothing was left out).
    pub margin: Vec<i32>,
}

/// Why a product cannot be computed, naming what is wrong.
#[derive(Debug)]
pub enum PadicError {
    /// No kernel is compiled for `p^k`.
    NoKernel { p: u64, k: u32 },
    /// `rows x cols` does not match the data's length.
    Shape { matrix: &'static str, rows: usize, cols: usize, len: usize },
    /// A's columns and B's rows differ.
    Inner { a_cols: usize, b_rows: usize },
    /// An entry outside `[0, p^k)`.
    NotResidue { matrix: &'static str, row: usize, col: usize, value: u64, q: u64 },
    /// The launch itself failed.
    Launch(Error),
}

impl fmt::Display for PadicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadicError::NoKernel { p, k } => write!(
                f,
                "no kernel is compiled for modulus {}^{}: the proved kernels are for {} (examples/ops/padic.tk declares one kernel family per modulus)",
                p,
                k,
                MODULI.iter().map(|(p, k)| format!("{}^{}", p, k)).collect::<Vec<_>>().join(" and ")
            ),
            PadicError::Shape { matrix, rows, cols, len } => write!(f, "matrix {}: {} x {} needs {} entries, got {}", matrix, rows, cols, rows * cols, len),
            PadicError::Inner { a_cols, b_rows } => write!(f, "A has {} columns but B has {} rows", a_cols, b_rows),
            PadicError::NotResidue { matrix, row, col, value, q } => write!(f, "matrix {}, row {}, column {}: {} is not a residue modulo {} (entries lie in [0, {}))", matrix, row, col, value, q, q),
            PadicError::Launch(e) => write!(f, "{}", e),
        }
    }
}

impl std::error::Error for PadicError {}

impl From<Error> for PadicError {
    fn from(e: Error) -> PadicError {
        PadicError::Launch(e)
    }
}

/// A matrix of `rows x cols` entries, row-major, as read from a user.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<u64>,
}

impl Matrix {
    fn residues(&self, name: &'static str, q: u64) -> std::result::Result<Vec<u32>, PadicError> {
        if self.data.len() != self.rows * self.cols {
            return Err(PadicError::Shape { matrix: name, rows: self.rows, cols: self.cols, len: self.data.len() });
        }
        self.data
            .iter()
            .enumerate()
            .map(|(i, &v)| if v < q { Ok(v as u32) } else { Err(PadicError::NotResidue { matrix: name, row: i / self.cols.max(1), col: i % self.cols.max(1), value: v, q }) })
            .collect()
    }
}

/// `A B mod p^k` on `dev` with the skipping kernel and its certificate.
pub fn matmul(p: u64, k: u32, a: &Matrix, b: &Matrix, dev: &Device) -> std::result::Result<Product, PadicError> {
    let (ta, tb, mut c) = operands(p, k, a, b, dev)?;
    let (m, n) = (a.rows, b.cols);
    let out = |dtype| Tensor::zeros(&[m, n], dtype, dev);
    let (mut ev, mut sk, mut ms, mut mg) = (out(DType::U32)?, out(DType::U32)?, out(DType::U32)?, out(DType::I32)?);
    match p {
        2 => padic::padic_matmul_p2::launch(dev, &ta, &tb, &mut c, &mut ev, &mut sk, &mut ms, &mut mg)?,
        _ => padic::padic_matmul_p3::launch(dev, &ta, &tb, &mut c, &mut ev, &mut sk, &mut ms, &mut mg)?,
    }
    let ints = |t: &Tensor| -> Result<Vec<u32>> { Ok(t.to_f64_vec()?.into_iter().map(|x| x as u32).collect()) };
    Ok(Product { p, k, m, n, c: ints(&c)?, evaluated: ints(&ev)?, skipped: ints(&sk)?, min_skipped: ints(&ms)?, margin: mg.to_f64_vec()?.into_iter().map(|x| x as i32).collect() })
}

/// Which kernel of a modulus computes a bare product (no certificate).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Every product computed (`padic_dense_p*`).
    Dense,
    /// Products skipped by valuation (`padic_skip_p*`).
    Skip,
}

/// Device tensors of `A` and `B` and an output for `A B`, the inputs
/// checked to be residues (for timing launches of [`launch_product`]).
pub fn operands(p: u64, k: u32, a: &Matrix, b: &Matrix, dev: &Device) -> std::result::Result<(Tensor, Tensor, Tensor), PadicError> {
    if !MODULI.contains(&(p, k)) {
        return Err(PadicError::NoKernel { p, k });
    }
    let q = p.pow(k);
    let (da, db) = (a.residues("A", q)?, b.residues("B", q)?);
    if a.cols != b.rows {
        return Err(PadicError::Inner { a_cols: a.cols, b_rows: b.rows });
    }
    let ta = Tensor::from_buf(&[a.rows, a.cols], crate::abi::tk_rt::Buf::U32(da))?.to_device(dev)?;
    let tb = Tensor::from_buf(&[b.rows, b.cols], crate::abi::tk_rt::Buf::U32(db))?.to_device(dev)?;
    let c = Tensor::zeros(&[a.rows, b.cols], DType::U32, dev)?;
    Ok((ta, tb, c))
}

/// One launch of the bare product kernel of `form` for modulus `p^k`
/// (`operands` made the tensors).
pub fn launch_product(form: Form, p: u64, dev: &Device, a: &Tensor, b: &Tensor, c: &mut Tensor) -> Result<()> {
    match (form, p) {
        (Form::Dense, 2) => padic::padic_dense_p2::launch(dev, a, b, c),
        (Form::Skip, 2) => padic::padic_skip_p2::launch(dev, a, b, c),
        (Form::Dense, _) => padic::padic_dense_p3::launch(dev, a, b, c),
        (Form::Skip, _) => padic::padic_skip_p3::launch(dev, a, b, c),
    }
}

/// `A B mod p^k` by the bare kernel of `form`.
pub fn product(form: Form, p: u64, k: u32, a: &Matrix, b: &Matrix, dev: &Device) -> std::result::Result<Vec<u32>, PadicError> {
    let (ta, tb, mut c) = operands(p, k, a, b, dev)?;
    launch_product(form, p, dev, &ta, &tb, &mut c)?;
    Ok(c.to_f64_vec()?.into_iter().map(|x| x as u32).collect())
}

/// The dense product and certificate computed on the host in `u64`,
/// independently of the kernels and their oracles: what [`matmul`] must
/// equal (tests and the GPU check compare with it).
pub fn reference(p: u64, k: u32, a: &Matrix, b: &Matrix) -> Product {
    let q = p.pow(k);
    // The contracts crate's valuation: the one the kernels' proofs define.
    let modulus = tokitai_contracts::residue::Modulus { p, k };
    let v = |x: u64| modulus.valuation(x);
    let (m, n, inner) = (a.rows, b.cols, a.cols);
    let mut out = Product { p, k, m, n, c: vec![0; m * n], evaluated: vec![0; m * n], skipped: vec![0; m * n], min_skipped: vec![2 * k + 1; m * n], margin: vec![0; m * n] };
    for i in 0..m {
        for j in 0..n {
            let (mut acc, mut evaluated) = (0u64, 0u32);
            let at = i * n + j;
            for t in 0..inner {
                let (x, y) = (a.data[i * inner + t], b.data[t * n + j]);
                acc = (acc + x * y % q) % q;
                let s = v(x) + v(y);
                if s >= k {
                    out.min_skipped[at] = out.min_skipped[at].min(s);
                } else {
                    evaluated += 1;
                }
            }
            out.c[at] = acc as u32;
            out.evaluated[at] = evaluated;
            out.skipped[at] = inner as u32 - evaluated;
            out.margin[at] = out.min_skipped[at] as i32 - k as i32;
        }
    }
    out
}

/// Inputs that probe the skip rule at its edges, each `(name, A, B)`:
/// zeros (every product skipped: `vp(0) = k`), `p^k - 1` everywhere (the
/// largest residues, nothing skipped for these moduli), high valuations,
/// every product skipped, none skipped, valuations summing to exactly
/// `k - 1` or `k` (the threshold), and uniform residues. Shapes are ragged
/// (`m x inner` by `inner x n`, none a multiple of a tile).
pub fn adversarial(p: u64, k: u32, m: usize, inner: usize, n: usize, seed: u64) -> Vec<(&'static str, Matrix, Matrix)> {
    let q = p.pow(k);
    let mut rng = crate::check::Rng::new(seed);
    // A residue of valuation exactly `j` (`j < k`), or 0 for `j >= k`.
    let of_valuation = |j: u32, rng: &mut crate::check::Rng| -> u64 {
        if j >= k {
            return 0;
        }
        let unit = loop {
            let u = rng.range(1, (q / p.pow(j)) as i64 - 1) as u64;
            if !u.is_multiple_of(p) {
                break u;
            }
        };
        p.pow(j) * unit % q
    };
    let mut fill = |rows: usize, cols: usize, f: &mut dyn FnMut(usize, &mut crate::check::Rng) -> u64| Matrix { rows, cols, data: (0..rows * cols).map(|i| f(i, &mut rng)).collect() };
    let half = k / 2;
    let zeros = (fill(m, inner, &mut |_, _| 0), fill(inner, n, &mut |_, _| 0));
    let top = (fill(m, inner, &mut |_, _| q - 1), fill(inner, n, &mut |_, _| q - 1));
    let high = (fill(m, inner, &mut |_, r| of_valuation(r.range(half as i64, k as i64) as u32, r)), fill(inner, n, &mut |_, r| of_valuation(r.range(half as i64, k as i64) as u32, r)));
    let all = (fill(m, inner, &mut |_, r| of_valuation(r.range(half as i64, k as i64) as u32, r)), fill(inner, n, &mut |_, r| of_valuation(r.range((k - half) as i64, k as i64) as u32, r)));
    let none = (fill(m, inner, &mut |_, r| of_valuation(0, r)), fill(inner, n, &mut |_, r| of_valuation(0, r)));
    // A's row i has valuation (i + t) % k at column t; B's valuation at row
    // t is k - 1 - ((t + c) % 2): sums straddle the threshold.
    let edge = (
        fill(m, inner, &mut |x, r| of_valuation(((x / inner + x % inner) % k as usize) as u32, r)),
        fill(inner, n, &mut |x, r| of_valuation((k as usize - 1 - (x / n + x % n) % 2) as u32, r)),
    );
    // Blocks of 64 rows x 32 k of A and 32 k x 64 columns of B, each of
    // high valuation or of units (A's where (row block + k block) % 3 != 0,
    // B's where (k block + column block) is even), so that whole slabs of
    // some tiles are skipped and others not; every other high block of A
    // holds one entry a valuation short of ceil(k / 2), whose slabs must
    // not be skipped.
    let short = k.div_ceil(2) - 1;
    let blocks = (
        fill(m, inner, &mut |x, r| {
            let (row, col) = (x / inner, x % inner);
            let (bi, bk) = (row / 64, col / 32);
            if (bi + bk) % 3 == 0 {
                of_valuation(0, r)
            } else if bk % 2 == 0 && row % 64 == 17 && col % 32 == 5 {
                of_valuation(short, r)
            } else {
                of_valuation(r.range(k.div_ceil(2) as i64, k as i64) as u32, r)
            }
        }),
        fill(inner, n, &mut |x, r| {
            let (bk, bj) = ((x / n) / 32, (x % n) / 64);
            if (bk + bj) % 2 == 0 {
                of_valuation(r.range((k / 2) as i64, k as i64) as u32, r)
            } else {
                of_valuation(0, r)
            }
        }),
    );
    let uniform = (fill(m, inner, &mut |_, r| r.range(0, q as i64 - 1) as u64), fill(inner, n, &mut |_, r| r.range(0, q as i64 - 1) as u64));
    vec![
        ("zeros", zeros.0, zeros.1),
        ("p^k - 1", top.0, top.1),
        ("high valuations", high.0, high.1),
        ("every product skipped", all.0, all.1),
        ("none skipped", none.0, none.1),
        ("valuations at the threshold", edge.0, edge.1),
        ("high-valuation blocks", blocks.0, blocks.1),
        ("uniform", uniform.0, uniform.1),
    ]
}
