//! Random well-formed `.tk` programs from proptest strategies over the
//! language's syntax: kernels of five shapes (pointwise, row reductions,
//! contractions, gathers through an index tensor, argmax), every dtype,
//! expression trees over the builtins, `requires` on dims and scalars,
//! numeric and magnitude `domain`s, `tolerance`s as numbers and as
//! formulas. Syntax is always well formed; meaning is not: about one kernel
//! in five carries a fault the checker or the prover must name (a race, an
//! index past the end, an unchecked indirection, mixed int and float, a
//! missing narrowing, contradictory `requires`, a tolerance too tight).

use proptest::prelude::*;

/// An expression over `leaves` (indices taken modulo their number, so a
/// tree fits any kernel).
#[derive(Clone, Debug)]
pub enum Expr {
    Leaf(usize),
    Lit(f64),
    Un(&'static str, Box<Expr>),
    Neg(Box<Expr>),
    Bin(&'static str, Box<Expr>, Box<Expr>),
    MinMax(&'static str, Box<Expr>, Box<Expr>),
    Select(Box<Expr>, Box<Expr>, Box<Expr>, Box<Expr>),
}

const UNARY: &[&str] = &["exp", "log", "tanh", "sqrt", "rsqrt", "abs", "sq"];
const BINARY: &[&str] = &["+", "-", "*", "/"];
const LITERALS: &[f64] = &[0.0, 1.0, 0.5, 2.0, 1e-3, 0.044715, 0.7978845608, 65504.0, 1e-30, 3.0e38, 1e300];

fn expr() -> impl Strategy<Value = Expr> {
    let leaf = prop_oneof![4 => (0usize..8).prop_map(Expr::Leaf), 1 => prop::sample::select(LITERALS).prop_map(Expr::Lit)];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (prop::sample::select(UNARY), inner.clone()).prop_map(|(f, e)| Expr::Un(f, Box::new(e))),
            inner.clone().prop_map(|e| Expr::Neg(Box::new(e))),
            (prop::sample::select(BINARY), inner.clone(), inner.clone()).prop_map(|(o, a, b)| Expr::Bin(o, Box::new(a), Box::new(b))),
            (prop::sample::select(&["min", "max"][..]), inner.clone(), inner.clone()).prop_map(|(f, a, b)| Expr::MinMax(f, Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone(), inner.clone(), inner).prop_map(|(a, b, c, d)| Expr::Select(Box::new(a), Box::new(b), Box::new(c), Box::new(d))),
        ]
    })
}

fn literal(v: f64) -> String {
    let s = format!("{:?}", v);
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{}.0", s)
    }
}

impl Expr {
    pub fn render(&self, leaves: &[String]) -> String {
        match self {
            Expr::Leaf(i) => leaves[i % leaves.len()].clone(),
            Expr::Lit(v) => literal(*v),
            Expr::Un(f, e) => format!("{}({})", f, e.render(leaves)),
            Expr::Neg(e) => format!("-({})", e.render(leaves)),
            Expr::Bin(o, a, b) => format!("({} {} {})", a.render(leaves), o, b.render(leaves)),
            Expr::MinMax(f, a, b) => format!("{}({}, {})", f, a.render(leaves), b.render(leaves)),
            Expr::Select(a, b, c, d) => format!("select({} < {}, {}, {})", a.render(leaves), b.render(leaves), c.render(leaves), d.render(leaves)),
        }
    }
}

/// The kernel's shape.
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    Pointwise,
    RowReduce,
    Contraction,
    Gather,
    Argmax,
}

/// What goes wrong on purpose (the checker or the prover must say so).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    None,
    /// Reads the next element of a tensor the kernel writes.
    Race,
    /// Reads one past the end.
    PastEnd,
    /// Indirection without a value contract on the index.
    UncheckedIndex,
    /// An integer tensor added to a float.
    MixedTypes,
    /// A wider value stored without its narrowing cast.
    NoNarrowing,
    /// `requires` that no shape meets.
    Contradiction,
    /// A tolerance no rounding meets.
    TooTight,
}

#[derive(Clone, Debug)]
pub struct Kernel {
    pub shape: Shape,
    pub input: &'static str,
    pub acc: &'static str,
    pub output: &'static str,
    pub inputs: usize,
    pub scalar: bool,
    pub body: Expr,
    pub second: Expr,
    pub reduction: &'static str,
    pub upper: Option<u32>,
    pub extra_lower: Option<u32>,
    pub domain: Option<(bool, f64)>,
    pub tolerance: Option<(bool, f64, f64)>,
    pub fault: Fault,
    pub inout: bool,
    pub doc: bool,
}

fn float() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["f16", "bf16", "f32", "f64"][..])
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        20 => Just(Fault::None),
        1 => Just(Fault::Race),
        1 => Just(Fault::PastEnd),
        1 => Just(Fault::UncheckedIndex),
        1 => Just(Fault::MixedTypes),
        1 => Just(Fault::NoNarrowing),
        1 => Just(Fault::Contradiction),
        1 => Just(Fault::TooTight),
    ]
}

pub fn kernel() -> impl Strategy<Value = Kernel> {
    let shape = prop_oneof![3 => Just(Shape::Pointwise), 3 => Just(Shape::RowReduce), 2 => Just(Shape::Contraction), 1 => Just(Shape::Gather), 1 => Just(Shape::Argmax)];
    let types = (float(), prop::sample::select(&["f32", "f64"][..]), float());
    let parts = (1usize..=3, any::<bool>(), expr(), expr(), prop::sample::select(&["sum", "max", "min"][..]));
    let contracts = (
        prop::option::of(prop::sample::select(&[64u32, 1024, 4096, 65536, 1 << 20][..])),
        prop::option::of(prop::sample::select(&[2u32, 64, 128][..])),
        prop::option::of((any::<bool>(), prop::sample::select(&[1.0f64, 4.0, 8.0, 100.0, 65504.0][..]))),
        prop::option::of((any::<bool>(), prop::sample::select(&[0.0f64, 1e-6, 1e-3, 1e-2][..]), prop::sample::select(&[0.0f64, 1e-3, 4e-3, 1e-2][..]))),
    );
    (shape, types, parts, contracts, fault(), any::<bool>(), any::<bool>()).prop_map(|(shape, (input, acc, output), (inputs, scalar, body, second, reduction), (upper, extra_lower, domain, tolerance), fault, inout, doc)| Kernel {
        shape,
        input,
        acc,
        output,
        inputs,
        scalar,
        body,
        second,
        reduction,
        upper,
        extra_lower,
        domain,
        tolerance,
        fault,
        inout,
        doc,
    })
}

/// `e` rendered over `leaves`, with every leaf it leaves out added (an
/// input or scalar never read is refused, which would stop most
/// generated kernels at the checker).
fn using_all(e: &Expr, leaves: &[String]) -> String {
    let mut s = e.render(leaves);
    for l in leaves {
        if !s.contains(l.as_str()) {
            s = format!("({} + {})", s, l);
        }
    }
    s
}

impl Kernel {
    /// The kernel as `.tk` text, named `name`.
    pub fn render(&self, name: &str) -> String {
        let acc = self.acc;
        let cast = |e: String| if self.fault == Fault::NoNarrowing { e } else { format!("{}({})", self.output, e) };
        let names = ["x", "x2", "x3"];
        let mut params: Vec<String> = Vec::new();
        let mut requires: Vec<String> = Vec::new();
        let mut domain: Vec<String> = Vec::new();
        let (dims, out_decl, body): (Vec<&str>, String, String) = match self.shape {
            Shape::Pointwise => {
                let ix = if self.fault == Fault::PastEnd { "i + 1" } else { "i" };
                let mut leaves: Vec<String> = (0..self.inputs).map(|k| format!("{}({}[{}])", acc, names[k], ix)).collect();
                for n in names.iter().take(self.inputs) {
                    params.push(format!("{}: {}[N]", n, self.input));
                }
                if self.scalar {
                    params.push("s: f32".into());
                    leaves.push(format!("{}(s)", acc));
                    requires.push("s > 0.0".into());
                }
                if self.fault == Fault::MixedTypes {
                    params.push("k: i32[N]".into());
                    leaves.push("k[i]".into());
                }
                let mut stmt = format!("    y[i] = {};\n", cast(using_all(&self.body, &leaves)));
                if self.fault == Fault::Race {
                    stmt.push_str(&format!("    y[i] = {}({}(y[i + 1]) + {}(x[i]));\n", self.output, acc, acc));
                }
                (vec!["N"], format!("y: {}[N]", self.output), stmt)
            }
            Shape::RowReduce => {
                let ix = if self.fault == Fault::PastEnd { "c + 1" } else { "c" };
                let leaves: Vec<String> = (0..self.inputs).map(|k| format!("{}({}[r, {}])", acc, names[k], ix)).collect();
                for n in names.iter().take(self.inputs) {
                    params.push(format!("{}: {}[R, C]", n, self.input));
                }
                let mut second_leaves: Vec<String> = leaves.clone();
                second_leaves.push("m[r]".into());
                if self.fault == Fault::MixedTypes {
                    params.push("k: i32[R]".into());
                    second_leaves.push("k[r]".into());
                }
                let mut stmt = format!("    m[r] = {}(c) {};\n    y[r, c] = {};\n", self.reduction, using_all(&self.body, &leaves), cast(using_all(&self.second, &second_leaves)));
                if self.fault == Fault::Race {
                    stmt.push_str(&format!("    z[r] = sum(c) {}(y[r, c]);\n", acc));
                }
                let outs = if self.fault == Fault::Race { format!("y: {}[R, C], z: {}[R]", self.output, acc) } else { format!("y: {}[R, C]", self.output) };
                (vec!["R", "C"], outs, stmt)
            }
            Shape::Contraction => {
                params.push(format!("x: {}[M, K]", self.input));
                params.push(format!("w: {}[K, N]", self.input));
                let kk = if self.fault == Fault::PastEnd { "k + 1" } else { "k" };
                let mut sum = format!("sum(k) {acc}(x[m, {kk}]) * {acc}(w[k, n])");
                if self.inputs > 1 {
                    params.push(format!("b: {}[N]", self.input));
                    sum = format!("{} + {}(b[n])", sum, acc);
                }
                if self.fault == Fault::MixedTypes {
                    params.push("k2: i32[N]".into());
                    sum = format!("{} + k2[n]", sum);
                }
                let stmt = format!("    y[m, n] = {};\n", cast(sum));
                (vec!["M", "K", "N"], format!("y: {}[M, N]", self.output), stmt)
            }
            Shape::Gather => {
                params.push(format!("x: {}[T, D]", self.input));
                params.push("idx: i32[R]".into());
                if self.fault != Fault::UncheckedIndex {
                    requires.push("idx in [0, T)".into());
                }
                let stmt = format!("    y[r, d] = {};\n", if self.fault == Fault::NoNarrowing { format!("{}(x[idx[r], d])", acc) } else { "x[idx[r], d]".to_string() });
                let out = if self.fault == Fault::NoNarrowing { self.output } else { self.input };
                (vec!["T", "D", "R"], format!("y: {}[R, D]", out), stmt)
            }
            Shape::Argmax => {
                params.push(format!("x: {}[R, C]", self.input));
                let ix = if self.fault == Fault::PastEnd { "c + 1" } else { "c" };
                let stmt = format!("    i[r] = argmax(c) {}(x[r, {}]);\n", acc, ix);
                (vec!["R", "C"], "i: i32[R]".into(), stmt)
            }
        };
        for d in &dims {
            requires.push(format!("{} >= 1", d));
            if let Some(u) = self.upper {
                requires.push(format!("{} <= {}", d, u));
            }
        }
        if dims.len() > 1 {
            requires.push(format!("{} <= 1000000000", dims.join(" * ")));
        }
        if let Some(l) = self.extra_lower {
            requires.push(format!("{} >= {}", dims[dims.len() - 1], l));
        }
        if self.fault == Fault::Contradiction {
            requires.push(format!("{} <= 0", dims[0]));
        }
        if let Some((magnitude, a)) = self.domain {
            let x = if magnitude { "[-X, X]".to_string() } else { format!("[{}, {}]", literal(-a), literal(a)) };
            domain.push(format!("x in {}", x));
        }
        if self.inout && matches!(self.shape, Shape::Pointwise) && self.fault == Fault::None {
            params[0] = format!("x: inout {}[N]", self.input);
        }
        let float_out = !matches!(self.shape, Shape::Argmax);
        let tolerance = match (self.tolerance, float_out) {
            (Some((formula, a, r)), true) => {
                let (a, r) = if self.fault == Fault::TooTight { (0.0, 0.0) } else { (a, r) };
                let abs = if formula && self.domain.is_some_and(|d| d.0) { format!("{} * X + {}", literal(a.max(1e-7)), literal(a)) } else { literal(a) };
                Some(format!("    tolerance y: abs {}, rel {}\n", abs, literal(r)))
            }
            _ => None,
        };
        let mut text = String::new();
        if self.doc {
            text.push_str(&format!("/// A generated {:?} kernel.\n", self.shape));
        }
        text.push_str(&format!("kernel {}({}) -> ({})\n", name, params.join(", "), out_decl));
        text.push_str(&format!("    requires {}\n", requires.join(", ")));
        if !domain.is_empty() {
            text.push_str(&format!("    domain   {}\n", domain.join(", ")));
        }
        if let Some(t) = tolerance {
            text.push_str(&t);
        }
        text.push_str("{\n");
        text.push_str(&body);
        text.push_str("}\n");
        text
    }
}

/// A program of one to three generated kernels, as `.tk` text; half of
/// them define the `sq` helper their expressions may call (the others
/// call an unknown function when they do).
pub fn program() -> impl Strategy<Value = String> {
    (prop::collection::vec(kernel(), 1..=3), any::<bool>()).prop_map(|(ks, helper)| {
        let mut text = String::from("// generated by tokitai-fuzz\n");
        if helper {
            text.push_str("fn sq(v: f32) -> f32 { v * v }\n\n");
        }
        for (i, k) in ks.iter().enumerate() {
            text.push_str(&k.render(&format!("k{}", i)));
            text.push('\n');
        }
        text
    })
}
