//! The Rust surface of the kernel language: a `#[kernel]` function read
//! into `.tk` source text, with every piece of that text tied to the Rust
//! token it came from (so the compiler's diagnostics land on the user's
//! tokens).
//!
//! | `.tk`                                | `#[kernel]` Rust                                  |
//! |--------------------------------------|---------------------------------------------------|
//! | `x: f16[M, K]`                       | `x: Tensor<f16, (M, K)>` (`Tensor<f16, (N,)>`, `Tensor<f32, ()>`) |
//! | `x: f16[R, 6]` (literal dims)        | `x: Tensor<f16, { [R, 6] }>`                      |
//! | `theta: inout f16[G, C]`             | `theta: InOut<f16, (G, C)>`                       |
//! | `-> (y: f16[M, N])`                  | a parameter `y: Out<f16, (M, N)>`                 |
//! | `lr: f32` (scalar)                   | `lr: f32`                                         |
//! | `requires M >= 1, idx in [0, T)`     | `requires(M >= 1, idx in 0..T)`                   |
//! | `domain x in [-1.0, 1.0]`            | `domain(x in -1.0..=1.0)`                         |
//! | `tolerance y: abs 1e-3, rel 1e-3`    | `tolerance(y: abs 1e-3, rel 1e-3)`                |
//! | `ensures i0 in [0, E)`               | `ensures(i0 in 0..E)`                             |
//! | `y[m, n] = e;`                       | `y[[m, n]] = e;` (`y[i] = e;` with one index)     |
//! | `x[idx[r], d]`                       | `x[[idx[r], d]]`                                  |
//! | `sum(k) e`, `max(c) e`, `argmax(e) e`| `sum(\|k\| e)`, `max(\|c\| e)`, `argmax(\|e\| e)` |
//! | `sum(k in 0..K) e`                   | `sum(0..K, \|k\| e)`                              |
//! | `f16(e)`, `exp(e)`, `select(c, a, b)`| the same calls                                    |
//! | `{ let v = e; f(v) }`                | the same block                                    |
//! | `/// doc`                            | `/// doc`                                         |
//!
//! The clauses are arguments of the attribute:
//! `#[kernel(requires(...), domain(...), tolerance(...), ensures(...))]`.
//! Ranges use Rust's own notation (`a..b` half-open, `a..=b` closed)
//! because a half-open bracket `[a, b)` is not a Rust token tree.

use proc_macro2::{Delimiter, Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::{BinOp, Expr, FnArg, GenericArgument, Lit, Pat, PathArguments, ReturnType, Stmt, Type, UnOp};

/// `.tk` text and, for each stretch of it, the Rust span it came from.
#[derive(Default)]
pub struct TkText {
    pub text: String,
    spans: Vec<(usize, usize, Span)>,
}

impl TkText {
    fn push(&mut self, s: &str, span: Span) {
        let lo = self.text.len();
        self.text.push_str(s);
        self.spans.push((lo, self.text.len(), span));
    }
    fn raw(&mut self, s: &str) {
        self.text.push_str(s);
    }
    /// The Rust spans of the text from byte `lo` to byte `hi`: the first
    /// and last pieces that overlap it.
    pub fn span_of(&self, lo: usize, hi: usize) -> Option<(Span, Span)> {
        let overlapping: Vec<&(usize, usize, Span)> = self.spans.iter().filter(|(a, b, _)| *a < hi.max(lo + 1) && *b > lo).collect();
        Some((overlapping.first()?.2, overlapping.last()?.2))
    }
}

/// What the attribute says.
#[derive(Default)]
pub struct Clauses {
    requires: Option<(Span, TokenStream)>,
    ensures: Option<(Span, TokenStream)>,
    domain: Option<(Span, TokenStream)>,
    tolerance: Option<(Span, TokenStream)>,
}

/// `requires(...), domain(...), tolerance(...), ensures(...)`, each at
/// most once.
pub fn parse_clauses(attr: TokenStream) -> syn::Result<Clauses> {
    let mut c = Clauses::default();
    let mut it = attr.into_iter().peekable();
    while let Some(tt) = it.next() {
        let TokenTree::Ident(name) = &tt else {
            return Err(syn::Error::new(tt.span(), "expected a contract clause: `requires(...)`, `domain(...)`, `tolerance(...)` or `ensures(...)`"));
        };
        let body = match it.next() {
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Parenthesis => g.stream(),
            _ => return Err(syn::Error::new(name.span(), format!("`{}` takes its conditions in parentheses: `{}(...)`", name, name))),
        };
        let slot = match name.to_string().as_str() {
            "requires" => &mut c.requires,
            "ensures" => &mut c.ensures,
            "domain" => &mut c.domain,
            "tolerance" => &mut c.tolerance,
            other => return Err(syn::Error::new(name.span(), format!("unknown contract clause `{}` (expected requires, ensures, domain or tolerance)", other))),
        };
        if slot.is_some() {
            return Err(syn::Error::new(name.span(), format!("`{}` is given twice; list every condition in one `{}(...)`", name, name)));
        }
        *slot = Some((name.span(), body));
        match it.next() {
            None => {}
            Some(TokenTree::Punct(p)) if p.as_char() == ',' => {}
            Some(other) => return Err(syn::Error::new(other.span(), "expected `,` between contract clauses")),
        }
    }
    Ok(c)
}

/// Tokens as `.tk` text, each tied to its span (joint punctuation kept
/// together: `>=`, `..`).
fn tokens(out: &mut TkText, ts: TokenStream) {
    let mut joint = false;
    for tt in ts {
        if !joint && !out.text.ends_with([' ', '(', '[', '\n']) {
            out.raw(" ");
        }
        joint = false;
        match tt {
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::None => ("", ""),
                };
                out.push(open, g.span_open());
                tokens(out, g.stream());
                out.push(close, g.span_close());
            }
            TokenTree::Punct(p) => {
                out.push(&p.as_char().to_string(), p.span());
                joint = p.spacing() == proc_macro2::Spacing::Joint;
            }
            other => out.push(&other.to_string(), other.span()),
        }
    }
}

/// Split at top-level commas.
fn split_commas(ts: TokenStream) -> Vec<TokenStream> {
    let mut parts = vec![TokenStream::new()];
    for tt in ts {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => parts.push(TokenStream::new()),
            _ => parts.last_mut().expect("never empty").extend([tt]),
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// One condition: `name in lo..hi` / `name in lo..=hi` becomes
/// `name in [lo, hi)` / `[lo, hi]`; anything else is copied.
fn condition(out: &mut TkText, item: TokenStream) -> syn::Result<()> {
    let trees: Vec<TokenTree> = item.clone().into_iter().collect();
    let at = trees.iter().position(|t| matches!(t, TokenTree::Ident(i) if i == "in"));
    let Some(at) = at else {
        tokens(out, item);
        return Ok(());
    };
    let lhs: TokenStream = trees[..at].iter().cloned().collect();
    let rhs: TokenStream = trees[at + 1..].iter().cloned().collect();
    let range: syn::ExprRange = syn::parse2(rhs.clone()).map_err(|_| syn::Error::new(trees[at].span(), "a range condition reads `name in lo..hi` (half-open) or `name in lo..=hi` (closed)"))?;
    let (Some(lo), Some(hi)) = (&range.start, &range.end) else {
        return Err(syn::Error::new_spanned(&range, "the range needs both ends: `lo..hi` or `lo..=hi`"));
    };
    tokens(out, lhs);
    out.push(" in", trees[at].span());
    out.push(" [", lo.span());
    tokens(out, quote::quote!(#lo));
    out.raw(",");
    tokens(out, quote::quote!(#hi));
    let close = if matches!(range.limits, syn::RangeLimits::Closed(_)) { "]" } else { ")" };
    out.push(close, hi.span());
    Ok(())
}

fn clause(out: &mut TkText, keyword: &str, c: &Option<(Span, TokenStream)>, ranges: bool) -> syn::Result<()> {
    let Some((span, body)) = c else { return Ok(()) };
    out.raw("\n    ");
    out.push(keyword, *span);
    let items = split_commas(body.clone());
    if items.is_empty() {
        return Err(syn::Error::new(*span, format!("`{}()` is empty", keyword)));
    }
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.raw(",");
        }
        if ranges {
            condition(out, item)?;
        } else {
            tokens(out, item);
        }
    }
    Ok(())
}

/// A parameter's type: a tensor (with its role) or a scalar.
enum ParamKind {
    Tensor { role: &'static str, dtype: String, dims: Vec<(String, Span)> },
    Scalar(String),
}

const DTYPES: [&str; 8] = ["f16", "bf16", "f32", "f64", "i32", "u32", "i64", "bool"];

fn single_ident(ty: &Type) -> Option<(String, Span)> {
    match ty {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 && p.path.segments[0].arguments.is_none() => Some((p.path.segments[0].ident.to_string(), p.path.segments[0].ident.span())),
        _ => None,
    }
}

fn param_kind(ty: &Type) -> syn::Result<ParamKind> {
    if let Some((name, span)) = single_ident(ty) {
        if DTYPES.contains(&name.as_str()) {
            return Ok(ParamKind::Scalar(name));
        }
        return Err(syn::Error::new(span, format!("`{}` is not a kernel parameter type: use a dtype ({}) for a scalar, or `Tensor<dtype, (dims)>`, `InOut<...>`, `Out<...>`", name, DTYPES.join(", "))));
    }
    let Type::Path(p) = ty else { return Err(syn::Error::new(ty.span(), "expected `Tensor<dtype, (dims)>`, `InOut<...>`, `Out<...>` or a scalar dtype")) };
    let seg = p.path.segments.last().ok_or_else(|| syn::Error::new(ty.span(), "expected a type"))?;
    let role = match seg.ident.to_string().as_str() {
        "Tensor" => "input",
        "InOut" => "inout",
        "Out" => "output",
        other => return Err(syn::Error::new(seg.ident.span(), format!("`{}` is not a kernel parameter type: use `Tensor<dtype, (dims)>`, `InOut<...>`, `Out<...>` or a scalar dtype", other))),
    };
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return Err(syn::Error::new(seg.ident.span(), format!("`{}` needs a dtype and a shape: `{}<f16, (M, N)>`", seg.ident, seg.ident)));
    };
    let args: Vec<&GenericArgument> = args.args.iter().collect();
    let [GenericArgument::Type(dt), shape] = args.as_slice() else {
        return Err(syn::Error::new(seg.span(), format!("`{}` takes two arguments: a dtype and a shape, as in `{}<f16, (M, N)>`", seg.ident, seg.ident)));
    };
    let dtype = match single_ident(dt) {
        Some((d, _)) if DTYPES.contains(&d.as_str()) => d,
        _ => return Err(syn::Error::new(dt.span(), format!("unknown dtype (expected one of {})", DTYPES.join(", ")))),
    };
    let dims = match shape {
        GenericArgument::Type(Type::Tuple(t)) => t.elems.iter().map(|e| single_ident(e).ok_or_else(|| syn::Error::new(e.span(), "a dim is a name (`N`); for a literal dim write the shape as `{ [R, 6] }`"))).collect::<syn::Result<Vec<_>>>()?,
        GenericArgument::Type(Type::Paren(p)) => vec![single_ident(&p.elem).ok_or_else(|| syn::Error::new(p.elem.span(), "a dim is a name"))?],
        GenericArgument::Const(Expr::Block(b)) => match b.block.stmts.as_slice() {
            [Stmt::Expr(Expr::Array(a), None)] => a
                .elems
                .iter()
                .map(|e| match e {
                    Expr::Path(p) if p.path.segments.len() == 1 => Ok((p.path.segments[0].ident.to_string(), e.span())),
                    Expr::Lit(l) => match &l.lit {
                        Lit::Int(i) if i.suffix().is_empty() => Ok((i.base10_digits().to_string(), e.span())),
                        _ => Err(syn::Error::new(e.span(), "a literal dim is an unsuffixed integer")),
                    },
                    _ => Err(syn::Error::new(e.span(), "a dim is a name or an integer")),
                })
                .collect::<syn::Result<Vec<_>>>()?,
            _ => return Err(syn::Error::new(b.span(), "a shape block reads `{ [R, 6] }`")),
        },
        other => return Err(syn::Error::new(other.span(), "the shape is a tuple of dims: `(M, N)`, `(N,)` or `()`")),
    };
    Ok(ParamKind::Tensor { role, dtype, dims })
}

fn param_text(out: &mut TkText, name: &syn::Ident, kind: &ParamKind) {
    out.push(&name.to_string(), name.span());
    out.raw(": ");
    match kind {
        ParamKind::Scalar(d) => out.push(d, name.span()),
        ParamKind::Tensor { role, dtype, dims } => {
            if *role == "inout" {
                out.raw("inout ");
            }
            out.push(dtype, name.span());
            out.raw("[");
            for (i, (d, span)) in dims.iter().enumerate() {
                if i > 0 {
                    out.raw(", ");
                }
                out.push(d, *span);
            }
            out.raw("]");
        }
    }
}

/// `(a: f16[N], b: f32)`: parameters or outputs.
fn param_list(out: &mut TkText, params: &[(syn::Ident, ParamKind)]) {
    out.raw("(");
    for (i, (n, k)) in params.iter().enumerate() {
        if i > 0 {
            out.raw(", ");
        }
        param_text(out, n, k);
    }
    out.raw(")");
}

/// The `.tk` source of one `#[kernel]` function.
pub fn kernel_source(clauses: &Clauses, f: &syn::ItemFn) -> syn::Result<TkText> {
    let mut out = TkText::default();
    for a in &f.attrs {
        if a.path().is_ident("doc") {
            if let syn::Meta::NameValue(nv) = &a.meta {
                if let Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) = &nv.value {
                    out.push(&format!("///{}\n", s.value()), a.span());
                    continue;
                }
            }
        }
        return Err(syn::Error::new(a.span(), "only doc comments may sit on a #[kernel] function"));
    }
    let sig = &f.sig;
    if let Some(g) = sig.generics.params.first() {
        return Err(syn::Error::new(g.span(), "a kernel has no generic parameters: dims are named in the tensor shapes"));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return Err(syn::Error::new(ty.span(), "a kernel returns nothing: declare outputs as parameters `y: Out<dtype, (dims)>`"));
    }
    if let Some(x) = sig.asyncness.map(|a| a.span()).or(sig.unsafety.map(|u| u.span())).or(sig.constness.map(|c| c.span())) {
        return Err(syn::Error::new(x, "a kernel is a plain `fn` (not async, unsafe or const)"));
    }
    let mut params = Vec::new();
    let mut outputs = Vec::new();
    for arg in &sig.inputs {
        let FnArg::Typed(pt) = arg else { return Err(syn::Error::new(arg.span(), "a kernel takes no `self`")) };
        let Pat::Ident(pi) = &*pt.pat else { return Err(syn::Error::new(pt.pat.span(), "a kernel parameter is a plain name")) };
        let kind = param_kind(&pt.ty)?;
        if matches!(kind, ParamKind::Tensor { role: "output", .. }) {
            outputs.push((pi.ident.clone(), kind));
        } else {
            params.push((pi.ident.clone(), kind));
        }
    }
    out.push("kernel", sig.fn_token.span);
    out.raw(" ");
    out.push(&sig.ident.to_string(), sig.ident.span());
    param_list(&mut out, &params);
    if !outputs.is_empty() {
        out.raw(" -> ");
        param_list(&mut out, &outputs);
    }
    clause(&mut out, "requires", &clauses.requires, true)?;
    clause(&mut out, "ensures", &clauses.ensures, true)?;
    clause(&mut out, "domain", &clauses.domain, true)?;
    clause(&mut out, "tolerance", &clauses.tolerance, false)?;
    out.raw("\n");
    out.push("{", f.block.brace_token.span.open());
    for s in &f.block.stmts {
        out.raw("\n    ");
        statement(&mut out, s)?;
    }
    out.raw("\n");
    out.push("}", f.block.brace_token.span.close());
    out.raw("\n");
    Ok(out)
}

/// `what` (the tokens `at`) is not in the subset; the error covers them.
fn outside(at: &dyn quote::ToTokens, what: &str) -> syn::Error {
    syn::Error::new_spanned(at, format!("{} is outside the kernel subset of Rust (a statement is `target[[i, j]] = expr;`; expressions use arithmetic, comparisons, calls of builtins and casts, indexing, reductions `sum(|k| ...)` and blocks)", what))
}

fn name_of(e: &Expr) -> Option<&syn::Ident> {
    match e {
        Expr::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 && p.path.segments[0].arguments.is_none() => Some(&p.path.segments[0].ident),
        _ => None,
    }
}

fn index_list(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::Array(a) => a.elems.iter().collect(),
        other => vec![other],
    }
}

fn statement(out: &mut TkText, s: &Stmt) -> syn::Result<()> {
    let Stmt::Expr(Expr::Assign(a), Some(semi)) = s else {
        return Err(outside(s, "this statement"));
    };
    match &*a.left {
        Expr::Index(ix) => {
            let target = name_of(&ix.expr).ok_or_else(|| syn::Error::new(ix.expr.span(), "the target of a definition is a tensor name"))?;
            out.push(&target.to_string(), target.span());
            out.push("[", ix.bracket_token.span.open());
            for (i, v) in index_list(&ix.index).into_iter().enumerate() {
                if i > 0 {
                    out.raw(", ");
                }
                let n = name_of(v).ok_or_else(|| syn::Error::new(v.span(), "a definition's indices are plain names (`y[[m, n]] = ...`)"))?;
                out.push(&n.to_string(), n.span());
            }
            out.push("]", ix.bracket_token.span.close());
        }
        other => {
            let target = name_of(other).ok_or_else(|| syn::Error::new(other.span(), "the target of a definition is a tensor name"))?;
            out.push(&target.to_string(), target.span());
        }
    }
    out.push(" =", a.eq_token.span);
    out.raw(" ");
    expr(out, &a.right)?;
    out.push(";", semi.span);
    Ok(())
}

fn binop(op: &BinOp) -> Option<&'static str> {
    Some(match op {
        BinOp::Add(_) => "+",
        BinOp::Sub(_) => "-",
        BinOp::Mul(_) => "*",
        BinOp::Div(_) => "/",
        BinOp::Rem(_) => "%",
        BinOp::And(_) => "&&",
        BinOp::Or(_) => "||",
        BinOp::Eq(_) => "==",
        BinOp::Ne(_) => "!=",
        BinOp::Lt(_) => "<",
        BinOp::Le(_) => "<=",
        BinOp::Gt(_) => ">",
        BinOp::Ge(_) => ">=",
        _ => return None,
    })
}

const REDUCTIONS: [&str; 4] = ["sum", "max", "min", "argmax"];

fn expr(out: &mut TkText, e: &Expr) -> syn::Result<()> {
    match e {
        Expr::Binary(b) => {
            let op = binop(&b.op).ok_or_else(|| outside(&b.op, "this operator"))?;
            expr(out, &b.left)?;
            out.raw(" ");
            out.push(op, b.op.span());
            out.raw(" ");
            expr(out, &b.right)
        }
        Expr::Unary(u) => {
            let op = match u.op {
                UnOp::Neg(_) => "-",
                UnOp::Not(_) => "!",
                _ => return Err(outside(&u.op, "this operator")),
            };
            out.push(op, u.op.span());
            expr(out, &u.expr)
        }
        Expr::Lit(l) => match &l.lit {
            Lit::Int(i) if i.suffix().is_empty() => {
                out.push(i.base10_digits(), i.span());
                Ok(())
            }
            Lit::Float(x) if x.suffix().is_empty() => {
                out.push(x.base10_digits(), x.span());
                Ok(())
            }
            Lit::Bool(b) => {
                out.push(if b.value { "true" } else { "false" }, b.span);
                Ok(())
            }
            other => Err(syn::Error::new(other.span(), "a kernel literal is an unsuffixed integer or float, or a bool (the dtype comes from the context or a cast)")),
        },
        Expr::Paren(p) => {
            out.push("(", p.paren_token.span.open());
            expr(out, &p.expr)?;
            out.push(")", p.paren_token.span.close());
            Ok(())
        }
        Expr::Path(_) => {
            let n = name_of(e).ok_or_else(|| outside(e, "this path"))?;
            out.push(&n.to_string(), n.span());
            Ok(())
        }
        Expr::Index(ix) => {
            let n = name_of(&ix.expr).ok_or_else(|| syn::Error::new(ix.expr.span(), "only a tensor name is indexed"))?;
            out.push(&n.to_string(), n.span());
            out.push("[", ix.bracket_token.span.open());
            expr_list(out, index_list(&ix.index))?;
            out.push("]", ix.bracket_token.span.close());
            Ok(())
        }
        Expr::Call(c) => {
            let f = name_of(&c.func).ok_or_else(|| syn::Error::new(c.func.span(), "only builtins and casts are called, by name"))?;
            let fname = f.to_string();
            let args: Vec<&Expr> = c.args.iter().collect();
            let closure = args.last().and_then(|a| if let Expr::Closure(cl) = a { Some(cl) } else { None });
            if let (true, Some(cl)) = (REDUCTIONS.contains(&fname.as_str()), closure) {
                return reduction(out, f, &args, cl);
            }
            out.push(&fname, f.span());
            out.push("(", c.paren_token.span.open());
            expr_list(out, args)?;
            out.push(")", c.paren_token.span.close());
            Ok(())
        }
        Expr::Block(b) => {
            if let Some(l) = &b.label {
                return Err(outside(l, "a labelled block"));
            }
            out.push("{", b.block.brace_token.span.open());
            let n = b.block.stmts.len();
            for (i, s) in b.block.stmts.iter().enumerate() {
                out.raw(" ");
                match s {
                    Stmt::Local(l) if i + 1 < n => let_stmt(out, l)?,
                    Stmt::Expr(e, None) if i + 1 == n => expr(out, e)?,
                    other => return Err(syn::Error::new(other.span(), "a block is `{ let a = ...; ...; value }`: lets, then the value without a semicolon")),
                }
            }
            out.raw(" ");
            out.push("}", b.block.brace_token.span.close());
            Ok(())
        }
        Expr::Closure(c) => Err(syn::Error::new_spanned(c, "a closure stands only as the body of a reduction: `sum(|k| ...)`")),
        other => Err(outside(other, "this expression")),
    }
}

/// Expressions separated by commas (indices, call arguments).
fn expr_list(out: &mut TkText, items: Vec<&Expr>) -> syn::Result<()> {
    for (i, e) in items.into_iter().enumerate() {
        if i > 0 {
            out.raw(", ");
        }
        expr(out, e)?;
    }
    Ok(())
}

fn let_stmt(out: &mut TkText, l: &syn::Local) -> syn::Result<()> {
    let (name, ty) = match &l.pat {
        Pat::Ident(pi) => (&pi.ident, None),
        Pat::Type(pt) => match &*pt.pat {
            Pat::Ident(pi) => (&pi.ident, Some(single_ident(&pt.ty).ok_or_else(|| syn::Error::new(pt.ty.span(), "a let's type is a dtype"))?)),
            other => return Err(syn::Error::new(other.span(), "a let binds a plain name")),
        },
        other => return Err(syn::Error::new(other.span(), "a let binds a plain name")),
    };
    let init = l.init.as_ref().ok_or_else(|| syn::Error::new(l.span(), "a let needs a value"))?;
    if let Some((_, d)) = &init.diverge {
        return Err(outside(&**d, "`let ... else`"));
    }
    out.push("let", l.let_token.span);
    out.raw(" ");
    out.push(&name.to_string(), name.span());
    if let Some((d, span)) = ty {
        out.raw(": ");
        out.push(&d, span);
    }
    out.raw(" = ");
    expr(out, &init.expr)?;
    out.push(";", l.semi_token.span);
    Ok(())
}

/// `sum(|k| body)` or `sum(lo..hi, |k| body)`, as `(sum(k) (body))` or
/// `(sum(k in lo..hi) (body))`: parenthesised, so that it binds as written.
fn reduction(out: &mut TkText, f: &syn::Ident, args: &[&Expr], cl: &syn::ExprClosure) -> syn::Result<()> {
    let inputs: Vec<&Pat> = cl.inputs.iter().collect();
    let [Pat::Ident(var)] = inputs.as_slice() else {
        return Err(syn::Error::new(cl.inputs.span(), format!("a reduction's closure takes one index: `{}(|k| ...)`", f)));
    };
    out.raw("(");
    out.push(&f.to_string(), f.span());
    out.raw("(");
    out.push(&var.ident.to_string(), var.ident.span());
    match args {
        [_] => {}
        [Expr::Range(r), _] => {
            let (Some(lo), Some(hi), syn::RangeLimits::HalfOpen(_)) = (&r.start, &r.end, &r.limits) else {
                return Err(syn::Error::new(r.span(), "a reduction's range is half-open with both ends: `lo..hi`"));
            };
            out.raw(" in ");
            expr(out, lo)?;
            out.raw("..");
            expr(out, hi)?;
        }
        _ => return Err(syn::Error::new(f.span(), format!("a reduction reads `{}(|k| ...)` or `{}(lo..hi, |k| ...)`", f, f))),
    }
    out.raw(") (");
    expr(out, &cl.body)?;
    out.raw("))");
    Ok(())
}
