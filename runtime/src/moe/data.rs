//! Datasets (moe.md, "Data"): `synth:quality:N`, `synth:regression:N`, and a
//! SQLite ledger directory. Rows are `INPUT_DIM` inputs and `OUTPUT_DIM`
//! targets as f32; synthetic quality data also records each sample's true
//! expert, so that routing accuracy can be measured.

use super::config::{AUX, CATEGORICAL_BLOCKS, CLASSES, INPUT_DIM, NUMERICAL, N_EXPERTS, OUTPUT_DIM};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use std::fmt;
use std::path::{Path, PathBuf};

/// Rows of inputs and targets.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    pub n: usize,
    /// `n x INPUT_DIM`, row-major.
    pub x: Vec<f32>,
    /// `n x OUTPUT_DIM`, row-major.
    pub y: Vec<f32>,
    /// The expert that generated each sample (synthetic quality data only).
    pub true_expert: Option<Vec<u8>>,
    /// Decisions without an outcome (ledger data), left out and counted.
    pub skipped: usize,
    /// What the data is: the spec it came from.
    pub source: String,
}

impl Dataset {
    /// The samples `idx`, in that order.
    pub fn rows(&self, idx: &[usize]) -> Dataset {
        Dataset {
            n: idx.len(),
            x: idx.iter().flat_map(|&i| self.x[i * INPUT_DIM..(i + 1) * INPUT_DIM].iter().copied()).collect(),
            y: idx.iter().flat_map(|&i| self.y[i * OUTPUT_DIM..(i + 1) * OUTPUT_DIM].iter().copied()).collect(),
            true_expert: self.true_expert.as_ref().map(|e| idx.iter().map(|&i| e[i]).collect()),
            skipped: self.skipped,
            source: self.source.clone(),
        }
    }
}

/// What `--dataset` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSpec {
    Quality(usize),
    Regression(usize),
    Ledger { dir: PathBuf, values: LedgerValues },
}

/// What a ledger's values outside their documented ranges get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LedgerValues {
    /// An error naming the row, column, element and value (the default:
    /// a value outside its range is a broken ledger until someone says
    /// otherwise, and clamping it would train on something else quietly).
    Checked,
    /// Clamped into range, as the older crate did (moe.md): `clamp:DIR`.
    Clamped,
}

#[derive(Debug)]
pub enum DataError {
    BadSpec(String),
    MissingDir(PathBuf),
    MissingFile(PathBuf),
    Sqlite { file: PathBuf, message: String },
    MissingTable { file: PathBuf, table: &'static str },
    BadRow { file: PathBuf, table: &'static str, id: String, column: &'static str, message: String },
    Empty(String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::BadSpec(m) => write!(f, "{}", m),
            DataError::MissingDir(p) => write!(f, "dataset directory {} does not exist", p.display()),
            DataError::MissingFile(p) => write!(f, "dataset file {} does not exist", p.display()),
            DataError::Sqlite { file, message } => write!(f, "{}: {}", file.display(), message),
            DataError::MissingTable { file, table } => write!(f, "{}: no table `{}`", file.display(), table),
            DataError::BadRow { file, table, id, column, message } => write!(f, "{}: table `{}`, decision_group_id {}: column `{}`: {}", file.display(), table, id, column, message),
            DataError::Empty(m) => write!(f, "{}", m),
        }
    }
}

impl std::error::Error for DataError {}

impl DataSpec {
    /// `synth:quality:N`, `synth:regression:N` (N > 0), a ledger directory,
    /// or `clamp:DIR`, a ledger whose out-of-range values are clamped.
    pub fn parse(spec: &str) -> Result<DataSpec, DataError> {
        if let Some(rest) = spec.strip_prefix("synth:") {
            let (kind, n) = rest.split_once(':').ok_or_else(|| DataError::BadSpec(format!("dataset `{}`: expected synth:quality:N or synth:regression:N", spec)))?;
            let n: usize = n.parse().ok().filter(|n| *n > 0).ok_or_else(|| DataError::BadSpec(format!("dataset `{}`: `{}` is not a positive sample count", spec, n)))?;
            return match kind {
                "quality" => Ok(DataSpec::Quality(n)),
                "regression" => Ok(DataSpec::Regression(n)),
                other => Err(DataError::BadSpec(format!("dataset `{}`: unknown synthetic kind `{}` (expected quality or regression)", spec, other))),
            };
        }
        if let Some(dir) = spec.strip_prefix("clamp:") {
            return Ok(DataSpec::Ledger { dir: PathBuf::from(dir), values: LedgerValues::Clamped });
        }
        Ok(DataSpec::Ledger { dir: PathBuf::from(spec), values: LedgerValues::Checked })
    }

    /// The training samples and `held_out` more of the same task, kept
    /// apart for evaluation and deterministic by `seed`. Synthetic data
    /// draws them after the training samples from the same stream (the
    /// training samples are those of `load`); a ledger holds out that many
    /// of its rows (at most a fifth), chosen by a seeded permutation.
    pub fn load_split(&self, seed: u64, held_out: usize) -> Result<(Dataset, Option<Dataset>), DataError> {
        if held_out == 0 {
            return Ok((self.load(seed)?, None));
        }
        let (all, train_n, source) = match self {
            DataSpec::Quality(n) => (synth_quality(n + held_out, seed), *n, format!("synth:quality:{}", n)),
            DataSpec::Regression(n) => (synth_regression(n + held_out, seed), *n, format!("synth:regression:{}", n)),
            DataSpec::Ledger { dir, values } => {
                let all = load_ledger_with(dir, *values)?;
                let held = held_out.min(all.n / 5);
                if held == 0 {
                    return Ok((all, None));
                }
                let mut perm: Vec<usize> = (0..all.n).collect();
                perm.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x4845_4C44));
                let (val, train) = perm.split_at(held);
                let (mut train, mut val) = (train.to_vec(), val.to_vec());
                train.sort_unstable();
                val.sort_unstable();
                return Ok((all.rows(&train), Some(all.rows(&val))));
            }
        };
        let train: Vec<usize> = (0..train_n).collect();
        let val: Vec<usize> = (train_n..all.n).collect();
        let mut t = all.rows(&train);
        t.source = source;
        Ok((t, Some(all.rows(&val))))
    }

    pub fn load(&self, seed: u64) -> Result<Dataset, DataError> {
        match self {
            DataSpec::Quality(n) => Ok(synth_quality(*n, seed)),
            DataSpec::Regression(n) => Ok(synth_regression(*n, seed)),
            DataSpec::Ledger { dir, values } => load_ledger_with(dir, *values),
        }
    }
}

fn gaussian_matrix(rng: &mut ChaCha8Rng, rows: usize, cols: usize, std: f64) -> Vec<f64> {
    let normal = Normal::new(0.0, std).expect("positive std");
    (0..rows * cols).map(|_| normal.sample(rng)).collect()
}

/// `v^T M` for `M` of `v.len() x cols`.
fn project(v: &[f64], m: &[f64], cols: usize) -> Vec<f64> {
    (0..cols).map(|j| v.iter().enumerate().map(|(i, x)| x * m[i * cols + j]).sum()).collect()
}

fn softmax(z: &[f64]) -> Vec<f64> {
    let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = z.iter().map(|x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// The quality-decision task. Per sample: each categorical block gets 1.0
/// at a uniform index and, with probability 0.15, 0.7 at a neighbouring
/// index; 22 numerical features uniform in 0..1000 plus a per-feature bias
/// (uniform in -100..100, fixed by the seed) and jitter (normal, sd 20),
/// divided by 1000. A fixed 96x8 projection gives `x_c`; the true expert is
/// `argmax(x_c R)` (R 8x4); targets are `softmax(W_e x_c + b_e + N(0, 0.1))`
/// (12) and `sigmoid(A_e x_c + a_e)` (8), each value flipped to `1 - p`
/// with probability 0.05. Everything follows from `seed`.
pub fn synth_quality(n: usize, seed: u64) -> Dataset {
    let mut world = ChaCha8Rng::seed_from_u64(seed ^ 0x9E37_79B9_7F4A_7C15);
    let proj = gaussian_matrix(&mut world, INPUT_DIM, 8, 1.0 / (INPUT_DIM as f64).sqrt());
    let router = gaussian_matrix(&mut world, 8, N_EXPERTS, 1.0);
    let w_class: Vec<Vec<f64>> = (0..N_EXPERTS).map(|_| gaussian_matrix(&mut world, 8, CLASSES, 1.5)).collect();
    let b_class: Vec<Vec<f64>> = (0..N_EXPERTS).map(|_| gaussian_matrix(&mut world, 1, CLASSES, 0.5)).collect();
    let w_aux: Vec<Vec<f64>> = (0..N_EXPERTS).map(|_| gaussian_matrix(&mut world, 8, AUX, 1.5)).collect();
    let b_aux: Vec<Vec<f64>> = (0..N_EXPERTS).map(|_| gaussian_matrix(&mut world, 1, AUX, 0.5)).collect();
    let bias: Vec<f64> = (0..NUMERICAL).map(|_| world.random_range(-100.0..100.0)).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let jitter = Normal::new(0.0, 20.0).expect("sd");
    let noise = Normal::new(0.0, 0.1).expect("sd");
    let (mut x, mut y, mut experts) = (Vec::with_capacity(n * INPUT_DIM), Vec::with_capacity(n * OUTPUT_DIM), Vec::with_capacity(n));
    for _ in 0..n {
        let mut row = vec![0.0f64; INPUT_DIM];
        let mut off = 0;
        for &size in &CATEGORICAL_BLOCKS {
            let i = rng.random_range(0..size);
            row[off + i] = 1.0;
            if rng.random_bool(0.15) && size > 1 {
                let j = if i == 0 { 1 } else if i == size - 1 || rng.random_bool(0.5) { i - 1 } else { i + 1 };
                row[off + j] = 0.7;
            }
            off += size;
        }
        for (k, b) in bias.iter().enumerate() {
            row[off + k] = (rng.random_range(0.0..1000.0) + b + jitter.sample(&mut rng)) / 1000.0;
        }
        let xc = project(&row, &proj, 8);
        let logits = project(&xc, &router, N_EXPERTS);
        let e = (0..N_EXPERTS).max_by(|a, b| logits[*a].total_cmp(&logits[*b])).unwrap_or(0);
        let z: Vec<f64> = project(&xc, &w_class[e], CLASSES).iter().zip(&b_class[e]).map(|(v, b)| v + b + noise.sample(&mut rng)).collect();
        let mut target = softmax(&z);
        target.extend(project(&xc, &w_aux[e], AUX).iter().zip(&b_aux[e]).map(|(v, b)| 1.0 / (1.0 + (-(v + b)).exp())));
        for t in target.iter_mut() {
            if rng.random_bool(0.05) {
                *t = 1.0 - *t;
            }
        }
        x.extend(row.iter().map(|v| *v as f32));
        y.extend(target.iter().map(|v| *v as f32));
        experts.push(e as u8);
    }
    Dataset { n, x, y, true_expert: Some(experts), skipped: 0, source: format!("synth:quality:{}", n) }
}

/// Linear regression: `x` uniform in [-0.5, 0.5]^96, `y = x W* + e`,
/// `W*` normal (sd 1/sqrt(96)), noise sd 0.01.
pub fn synth_regression(n: usize, seed: u64) -> Dataset {
    let mut world = ChaCha8Rng::seed_from_u64(seed ^ 0x5851_F42D_4C95_7F2D);
    let w = gaussian_matrix(&mut world, INPUT_DIM, OUTPUT_DIM, 1.0 / (INPUT_DIM as f64).sqrt());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let noise = Normal::new(0.0, 0.01).expect("sd");
    let (mut x, mut y) = (Vec::with_capacity(n * INPUT_DIM), Vec::with_capacity(n * OUTPUT_DIM));
    for _ in 0..n {
        let row: Vec<f64> = (0..INPUT_DIM).map(|_| rng.random_range(-0.5..0.5)).collect();
        let out = project(&row, &w, OUTPUT_DIM);
        x.extend(row.iter().map(|v| *v as f32));
        y.extend(out.iter().map(|v| (*v + noise.sample(&mut rng)) as f32));
    }
    Dataset { n, x, y, true_expert: None, skipped: 0, source: format!("synth:regression:{}", n) }
}

fn open(dir: &Path, file: &str) -> Result<(rusqlite::Connection, PathBuf), DataError> {
    let path = dir.join(file);
    if !path.is_file() {
        return Err(DataError::MissingFile(path));
    }
    let conn = rusqlite::Connection::open_with_flags(&path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| DataError::Sqlite { file: path.clone(), message: e.to_string() })?;
    Ok((conn, path))
}

fn has_table(conn: &rusqlite::Connection, path: &Path, table: &'static str) -> Result<(), DataError> {
    let n: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [table], |r| r.get(0))
        .map_err(|e| DataError::Sqlite { file: path.to_path_buf(), message: e.to_string() })?;
    if n == 0 {
        return Err(DataError::MissingTable { file: path.to_path_buf(), table });
    }
    Ok(())
}

/// A JSON array of exactly `len` numbers.
fn json_numbers(text: &str, len: usize) -> Result<Vec<f64>, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("malformed JSON ({})", e))?;
    let arr = v.as_array().ok_or("expected a JSON array")?;
    if arr.len() != len {
        return Err(format!("expected an array of {} numbers, got {}", len, arr.len()));
    }
    arr.iter().enumerate().map(|(i, x)| x.as_f64().ok_or(format!("element {} is not a number", i))).collect()
}

/// The ledger directory: `quality_decisions.db` joined with
/// `quality_outcomes.db` on `decision_group_id`, the first outcome per group
/// (by `observed_at`). Categorical values (0 or 1) are taken as they are,
/// numerical ones (0..=1000) divided by 1000; the label is the one-hot
/// `outcome_kind` (0..=11) and the aux metrics (in [0, 1]). A value outside
/// its range is an error naming the row ([`LedgerValues::Checked`]); see
/// [`load_ledger_with`] for the older crate's clamping. A decision without
/// an outcome is skipped and counted.
pub fn load_ledger(dir: &Path) -> Result<Dataset, DataError> {
    load_ledger_with(dir, LedgerValues::Checked)
}

/// The ranges a ledger's values are documented to lie in (moe.md).
const NUMERICAL_RANGE: (f64, f64) = (0.0, 1000.0);
const AUX_RANGE: (f64, f64) = (0.0, 1.0);

/// `v` in `[lo, hi]`, or (checked) the message naming element `i`.
fn in_range(v: f64, (lo, hi): (f64, f64), i: usize, values: LedgerValues) -> Result<f64, String> {
    match values {
        LedgerValues::Clamped => Ok(v.clamp(lo, hi)),
        LedgerValues::Checked if (lo..=hi).contains(&v) => Ok(v),
        LedgerValues::Checked => Err(format!("element {} is {}, outside [{}, {}] (`--dataset clamp:DIR` clamps such values, as the older crate did)", i, v, lo, hi)),
    }
}

/// [`load_ledger`], with out-of-range values refused or clamped.
pub fn load_ledger_with(dir: &Path, values: LedgerValues) -> Result<Dataset, DataError> {
    if !dir.is_dir() {
        return Err(DataError::MissingDir(dir.to_path_buf()));
    }
    let (dec, dec_path) = open(dir, "quality_decisions.db")?;
    let (out, out_path) = open(dir, "quality_outcomes.db")?;
    has_table(&dec, &dec_path, "quality_decisions")?;
    has_table(&out, &out_path, "quality_outcomes")?;
    let sql_err = |p: &Path| {
        let p = p.to_path_buf();
        move |e: rusqlite::Error| DataError::Sqlite { file: p.clone(), message: e.to_string() }
    };
    // The first outcome of each group: its kind as stored (checked when a
    // decision uses it) and its aux metrics.
    let mut outcomes: std::collections::HashMap<String, (rusqlite::types::Value, String)> = std::collections::HashMap::new();
    {
        let mut st = out
            .prepare("SELECT CAST(decision_group_id AS TEXT), outcome_kind, aux_metrics_json FROM quality_outcomes ORDER BY observed_at, rowid")
            .map_err(sql_err(&out_path))?;
        let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, rusqlite::types::Value>(1)?, r.get::<_, String>(2)?))).map_err(sql_err(&out_path))?;
        for row in rows {
            let (id, kind, aux) = row.map_err(sql_err(&out_path))?;
            outcomes.entry(id).or_insert((kind, aux));
        }
    }
    let mut st = dec
        .prepare("SELECT CAST(decision_group_id AS TEXT), categorical_json, numerical_json FROM quality_decisions ORDER BY rowid")
        .map_err(sql_err(&dec_path))?;
    let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))).map_err(sql_err(&dec_path))?;
    let (mut x, mut y, mut n, mut skipped) = (Vec::new(), Vec::new(), 0, 0);
    let categorical: usize = CATEGORICAL_BLOCKS.iter().sum();
    for row in rows {
        let (id, cat, num) = row.map_err(sql_err(&dec_path))?;
        let bad = |table, column, message: String, file: &Path| DataError::BadRow { file: file.to_path_buf(), table, id: id.clone(), column, message };
        let cat = json_numbers(&cat, categorical).map_err(|m| bad("quality_decisions", "categorical_json", m, &dec_path))?;
        let num = json_numbers(&num, NUMERICAL).map_err(|m| bad("quality_decisions", "numerical_json", m, &dec_path))?;
        let Some((kind, aux)) = outcomes.get(&id) else {
            skipped += 1;
            continue;
        };
        let aux = json_numbers(aux, AUX).map_err(|m| bad("quality_outcomes", "aux_metrics_json", m, &out_path))?;
        let cat: Vec<f32> = cat
            .iter()
            .enumerate()
            .map(|(i, &v)| match values {
                _ if v == 0.0 || v == 1.0 => Ok(v as f32),
                LedgerValues::Clamped => Ok(1.0),
                LedgerValues::Checked => Err(format!("element {} is {}, not 0 or 1 (`--dataset clamp:DIR` reads any nonzero value as 1, as the older crate did)", i, v)),
            })
            .collect::<Result<_, _>>()
            .map_err(|m| bad("quality_decisions", "categorical_json", m, &dec_path))?;
        let num: Vec<f64> = num.iter().enumerate().map(|(i, &v)| in_range(v, NUMERICAL_RANGE, i, values)).collect::<Result<_, _>>().map_err(|m| bad("quality_decisions", "numerical_json", m, &dec_path))?;
        let aux: Vec<f64> = aux.iter().enumerate().map(|(i, &v)| in_range(v, AUX_RANGE, i, values)).collect::<Result<_, _>>().map_err(|m| bad("quality_outcomes", "aux_metrics_json", m, &out_path))?;
        let class = outcome_class(kind, values).map_err(|m| bad("quality_outcomes", "outcome_kind", m, &out_path))?;
        x.extend(cat);
        x.extend(num.iter().map(|v| (v / NUMERICAL_RANGE.1) as f32));
        y.extend((0..CLASSES).map(|c| if c == class { 1.0f32 } else { 0.0 }));
        y.extend(aux.iter().map(|&v| v as f32));
        n += 1;
    }
    if n == 0 {
        return Err(DataError::Empty(format!("{}: no decision has an outcome ({} skipped)", dir.display(), skipped)));
    }
    let source = match values {
        LedgerValues::Checked => dir.display().to_string(),
        LedgerValues::Clamped => format!("clamp:{}", dir.display()),
    };
    Ok(Dataset { n, x, y, true_expert: None, skipped, source })
}

/// The class an `outcome_kind` names: an integer in 0..CLASSES (clamped
/// into it when `values` says so; anything but an integer is an error).
fn outcome_class(kind: &rusqlite::types::Value, values: LedgerValues) -> Result<usize, String> {
    use rusqlite::types::Value;
    let k = match kind {
        Value::Integer(k) => *k,
        Value::Null => return Err("is NULL, not an outcome class".into()),
        Value::Real(r) => return Err(format!("is {}, not an integer outcome class", r)),
        Value::Text(t) => return Err(format!("is the text {:?}, not an integer outcome class", t)),
        Value::Blob(_) => return Err("is a blob, not an integer outcome class".into()),
    };
    let top = CLASSES as i64 - 1;
    match values {
        LedgerValues::Clamped => Ok(k.clamp(0, top) as usize),
        LedgerValues::Checked if (0..=top).contains(&k) => Ok(k as usize),
        LedgerValues::Checked => Err(format!("is {}, outside 0..={} (`--dataset clamp:DIR` clamps it, as the older crate did)", k, top)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_quality_is_deterministic_and_well_formed() {
        let a = synth_quality(300, 42);
        assert_eq!(a, synth_quality(300, 42));
        assert_ne!(a.x, synth_quality(300, 43).x);
        assert_eq!((a.x.len(), a.y.len()), (300 * INPUT_DIM, 300 * OUTPUT_DIM));
        for r in 0..a.n {
            let row = &a.x[r * INPUT_DIM..(r + 1) * INPUT_DIM];
            let mut off = 0;
            for &s in &CATEGORICAL_BLOCKS {
                let block = &row[off..off + s];
                assert_eq!(block.iter().filter(|v| **v == 1.0).count(), 1, "one hot per block");
                assert!(block.iter().all(|v| [0.0, 0.7, 1.0].contains(v)));
                off += s;
            }
            assert!(a.y[r * OUTPUT_DIM..(r + 1) * OUTPUT_DIM].iter().all(|v| (0.0..=1.0).contains(v)));
        }
        let experts = a.true_expert.as_ref().unwrap();
        for e in 0..N_EXPERTS as u8 {
            assert!(experts.iter().filter(|x| **x == e).count() > 10, "expert {} is used", e);
        }
    }

    #[test]
    fn synthetic_regression_is_linear_plus_small_noise() {
        let d = synth_regression(200, 7);
        assert!(d.x.iter().all(|v| (-0.5..0.5).contains(v)));
        assert_eq!(d, synth_regression(200, 7));
    }

    #[test]
    fn specs_parse_with_clear_errors() {
        assert_eq!(DataSpec::parse("synth:quality:512").unwrap(), DataSpec::Quality(512));
        assert_eq!(DataSpec::parse("synth:regression:9").unwrap(), DataSpec::Regression(9));
        assert_eq!(DataSpec::parse("some/dir").unwrap(), DataSpec::Ledger { dir: "some/dir".into(), values: LedgerValues::Checked });
        assert_eq!(DataSpec::parse("clamp:some/dir").unwrap(), DataSpec::Ledger { dir: "some/dir".into(), values: LedgerValues::Clamped });
        assert_eq!(DataSpec::parse("synth:quality:0").unwrap_err().to_string(), "dataset `synth:quality:0`: `0` is not a positive sample count");
        assert_eq!(DataSpec::parse("synth:images:5").unwrap_err().to_string(), "dataset `synth:images:5`: unknown synthetic kind `images` (expected quality or regression)");
        assert!(DataSpec::parse("synth:quality").is_err());
    }
}
