//! Checking: AST to typed IR.
//!
//! Name resolution, dtype rules (widening implicit, narrowing written, no
//! silent int/float mixing), shape agreement of every use of an index
//! variable, the race rule for tensors written in the kernel, and the
//! definition rules (every output defined once, every intermediate used).
//! The checker collects as many diagnostics as it can and never panics.

mod contracts;
mod expr;
mod races;
mod residue;

use crate::diag::Diagnostic;
use crate::span::{SourceFile, Span};
use crate::syntax::ast;
use crate::tir::*;
use std::collections::HashMap;

/// Check a parsed file. Returns the program when there is no error, and the
/// diagnostics (warnings included) either way.
pub fn check_file(file: &ast::File, src: &SourceFile) -> (Option<Program>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    let mut fns: HashMap<String, &ast::FnDef> = HashMap::new();
    let mut item_names: HashMap<String, Span> = HashMap::new();
    for item in &file.items {
        let name = match item {
            ast::Item::Kernel(k) => &k.name,
            ast::Item::Fn(f) => &f.name,
        };
        if let Some(prev) = item_names.get(&name.name) {
            diags.push(
                Diagnostic::error("E0208", format!("`{}` is defined twice in this file", name.name), name.span)
                    .with_label("second definition")
                    .with_secondary(*prev, "first defined here")
                    .with_help("rename one of them"),
            );
            continue;
        }
        item_names.insert(name.name.clone(), name.span);
        if let ast::Item::Fn(f) = item {
            if crate::tir::Builtin::from_name(&f.name.name).is_some() {
                diags.push(
                    Diagnostic::error("E0208", format!("`{}` is a builtin and cannot be redefined", f.name.name), f.name.span)
                        .with_label("builtin name")
                        .with_help("choose another name for this helper"),
                );
                continue;
            }
            fns.insert(f.name.name.clone(), f);
        }
    }
    // Check each helper once on its own, so that its errors are reported once.
    let mut bad_fns = std::collections::HashSet::new();
    for f in fns.values() {
        let mut kc = KernelChecker::new(src, &fns);
        kc.check_fn_standalone(f);
        if kc.diags.iter().any(|d| d.is_error()) {
            bad_fns.insert(f.name.name.clone());
        }
        diags.extend(kc.diags);
    }
    let good_fns: HashMap<String, &ast::FnDef> =
        fns.iter().filter(|(n, _)| !bad_fns.contains(*n)).map(|(n, f)| (n.clone(), *f)).collect();
    let mut kernels = Vec::new();
    for item in &file.items {
        if let ast::Item::Kernel(k) = item {
            let mut kc = KernelChecker::new(src, &good_fns);
            kc.bad_fns = bad_fns.clone();
            let kernel = kc.check_kernel(k);
            diags.extend(kc.diags);
            if let Some(kernel) = kernel {
                kernels.push(kernel);
            }
        }
    }
    if kernels.is_empty() && !diags.iter().any(|d| d.is_error()) {
        diags.push(
            Diagnostic::error("E0209", "no kernel in this file", Span::new(0, 0))
                .with_label("expected at least one `kernel` item")
                .with_help("a file holds `kernel` and `fn` items, e.g. `kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; }`"),
        );
    }
    diags.sort_by_key(|d| (d.span.lo, d.code));
    if diags.iter().any(|d| d.is_error()) {
        (None, diags)
    } else {
        (Some(Program { kernels }), diags)
    }
}

/// What a name in scope refers to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Entity {
    Tensor(TensorId),
    Scalar(ScalarId),
    Dim(DimId),
}

/// A plain use of an index variable on one tensor axis, for shape agreement.
#[derive(Clone, Debug)]
pub(crate) struct VarUse {
    pub var: VarId,
    pub dim: Dim,
    pub span: Span,
    pub what: String,
}

pub(crate) struct KernelChecker<'a> {
    pub src: &'a SourceFile,
    pub fns: &'a HashMap<String, &'a ast::FnDef>,
    pub bad_fns: std::collections::HashSet<String>,
    pub diags: Vec<Diagnostic>,
    pub dims: Vec<DimInfo>,
    pub tensors: Vec<TensorInfo>,
    pub scalars: Vec<ScalarInfo>,
    pub names: HashMap<String, Entity>,
    pub vars: Vec<VarInfo>,
    /// Extent of each var as far as known while checking (None: to infer).
    pub var_extent: Vec<Option<Dim>>,
    pub locals: Vec<LocalInfo>,
    pub var_uses: Vec<VarUse>,
    pub dim_parent: Vec<usize>,
    pub dim_value: Vec<Option<i64>>,
    pub fn_stack: Vec<String>,
}

impl<'a> KernelChecker<'a> {
    fn new(src: &'a SourceFile, fns: &'a HashMap<String, &'a ast::FnDef>) -> Self {
        KernelChecker {
            src,
            fns,
            bad_fns: Default::default(),
            diags: Vec::new(),
            dims: Vec::new(),
            tensors: Vec::new(),
            scalars: Vec::new(),
            names: HashMap::new(),
            vars: Vec::new(),
            var_extent: Vec::new(),
            locals: Vec::new(),
            var_uses: Vec::new(),
            dim_parent: Vec::new(),
            dim_value: Vec::new(),
            fn_stack: Vec::new(),
        }
    }

    pub fn error(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    pub fn has_errors(&self) -> bool {
        self.diags.iter().any(|d| d.is_error())
    }

    pub fn dim_find(&mut self, mut d: usize) -> usize {
        while self.dim_parent[d] != d {
            self.dim_parent[d] = self.dim_parent[self.dim_parent[d]];
            d = self.dim_parent[d];
        }
        d
    }

    pub fn dims_equal(&mut self, a: Dim, b: Dim) -> bool {
        match (a, b) {
            (Dim::Lit(x), Dim::Lit(y)) => x == y,
            (Dim::Sym(x), Dim::Sym(y)) => self.dim_find(x) == self.dim_find(y),
            (Dim::Sym(x), Dim::Lit(v)) | (Dim::Lit(v), Dim::Sym(x)) => {
                let r = self.dim_find(x);
                self.dim_value[r] == Some(v)
            }
        }
    }

    pub fn dim_name(&self, d: Dim) -> String {
        match d {
            Dim::Sym(id) => self.dims[id].name.clone(),
            Dim::Lit(v) => v.to_string(),
        }
    }

    fn dim_of(&mut self, d: &ast::DimExpr) -> Option<Dim> {
        match d {
            ast::DimExpr::Lit(v, span) => {
                if *v < 1 {
                    self.error(
                        Diagnostic::error("E0402", format!("dimension `{}` is not positive", v), *span)
                            .with_label("every axis has at least one element")
                            .with_help("use a literal of 1 or more, or a symbolic dim such as `N`"),
                    );
                    return None;
                }
                Some(Dim::Lit(*v))
            }
            ast::DimExpr::Named(id) => match self.names.get(&id.name) {
                Some(Entity::Dim(d)) => Some(Dim::Sym(*d)),
                Some(_) => {
                    self.error(
                        Diagnostic::error("E0210", format!("`{}` is a parameter, not a dimension", id.name), id.span)
                            .with_label("used as a dimension here")
                            .with_help("dimension names must differ from parameter names"),
                    );
                    None
                }
                None => {
                    let dim = self.dims.len();
                    self.dims.push(DimInfo { name: id.name.clone(), span: id.span });
                    self.dim_parent.push(dim);
                    self.dim_value.push(None);
                    self.names.insert(id.name.clone(), Entity::Dim(dim));
                    Some(Dim::Sym(dim))
                }
            },
        }
    }

    fn declare_param(&mut self, p: &ast::Param, is_output: bool) -> Option<Param> {
        if let Some(prev) = self.names.get(&p.name.name) {
            let what = match prev {
                Entity::Dim(_) => "a dimension",
                _ => "a parameter",
            };
            self.error(
                Diagnostic::error("E0202", format!("`{}` is declared twice", p.name.name), p.name.span)
                    .with_label(format!("already {}", what))
                    .with_help("every parameter, output and dimension needs its own name"),
            );
            return None;
        }
        if p.inout && is_output {
            self.error(
                Diagnostic::error("E0211", format!("output `{}` cannot be `inout`", p.name.name), p.span)
                    .with_label("outputs are written already")
                    .with_help("an `inout` tensor belongs in the parameter list: `x: inout f32[N]`"),
            );
            return None;
        }
        match &p.shape {
            None if !is_output => {
                if p.inout {
                    self.error(
                        Diagnostic::error("E0211", format!("scalar `{}` cannot be `inout`", p.name.name), p.span)
                            .with_label("scalars are passed by value")
                            .with_help("make it a rank-0 tensor output instead: `-> (s: f32)`"),
                    );
                    return None;
                }
                let id = self.scalars.len();
                self.scalars.push(ScalarInfo { name: p.name.name.clone(), dtype: p.dtype, span: p.span });
                self.names.insert(p.name.name.clone(), Entity::Scalar(id));
                Some(Param::Scalar(id))
            }
            shape => {
                let mut dims = Vec::new();
                for d in shape.iter().flatten() {
                    dims.push(self.dim_of(d)?);
                }
                let role = if is_output {
                    TensorRole::Output
                } else if p.inout {
                    TensorRole::Inout
                } else {
                    TensorRole::Input
                };
                let id = self.tensors.len();
                self.tensors.push(TensorInfo {
                    name: p.name.name.clone(),
                    dtype: p.dtype,
                    shape: dims,
                    role,
                    span: p.span,
                    value_range: None,
                });
                self.names.insert(p.name.name.clone(), Entity::Tensor(id));
                Some(Param::Tensor(id))
            }
        }
    }

    pub fn new_var(&mut self, name: &ast::Ident, kind: VarKind, extent: Option<Dim>) -> VarId {
        let id = self.vars.len();
        self.vars.push(VarInfo { name: name.name.clone(), extent: Dim::Lit(1), kind, span: name.span });
        self.var_extent.push(extent);
        id
    }

    fn check_kernel(&mut self, k: &ast::Kernel) -> Option<Kernel> {
        let mut params = Vec::new();
        for p in &k.params {
            if let Some(p) = self.declare_param(p, false) {
                params.push(p);
            }
        }
        for p in &k.outputs {
            if let Some(p) = self.declare_param(p, true) {
                params.push(p);
            }
        }
        if self.has_errors() {
            return None;
        }
        if k.outputs.is_empty() && !self.tensors.iter().any(|t| t.role == TensorRole::Inout) {
            self.error(
                Diagnostic::error("E0212", format!("kernel `{}` has no outputs", k.name.name), k.name.span)
                    .with_label("nothing is written")
                    .with_help("declare outputs with `-> (y: f32[N])` or an `inout` parameter"),
            );
            return None;
        }
        let requires = self.check_requires(k);
        let modulus = self.check_modulus(k);
        let stmts = self.check_body(k);
        // A declared modulus that is not one was reported already: its
        // builtins would only repeat it.
        let declared = k.clauses.iter().any(|c| matches!(c, ast::Clause::Modulus { .. }));
        if let (Some(stmts), false) = (&stmts, declared && modulus.is_none()) {
            self.check_residues(&k.name.name, modulus, stmts);
        }
        let ensures = self.check_ensures(k);
        let domain = self.check_domain(k);
        let relations = self.check_relations(k, domain.as_deref().unwrap_or_default());
        let tolerance = self.check_tolerance(k, domain.as_deref().unwrap_or_default());
        let stmts = stmts?;
        if self.has_errors() {
            return None;
        }
        let graph = self.check_races_and_definitions(k, &stmts, &params)?;
        self.lint_contracts(k, &tolerance, &domain);
        let dim_class = (0..self.dims.len()).map(|d| self.dim_find(d)).collect::<Vec<_>>();
        let dim_value = (0..self.dims.len()).map(|d| self.dim_value[dim_class[d]]).collect();
        Some(Kernel {
            name: k.name.name.clone(),
            doc: k.docs.join("\n"),
            span: k.span,
            dims: self.dims.clone(),
            tensors: self.tensors.clone(),
            scalars: self.scalars.clone(),
            params,
            vars: self.vars.clone(),
            locals: self.locals.clone(),
            stmts,
            requires,
            ensures: ensures.unwrap_or_default(),
            domain: domain.unwrap_or_default(),
            relations: relations.unwrap_or_default(),
            tolerance: tolerance.unwrap_or_default(),
            modulus,
            dim_class,
            dim_value,
            graph,
        })
    }

    /// Check every statement; on success every var has its extent.
    fn check_body(&mut self, k: &ast::Kernel) -> Option<Vec<Stmt>> {
        let mut stmts = Vec::new();
        let mut written: HashMap<TensorId, Span> = HashMap::new();
        let mut ok = true;
        for s in &k.body {
            match self.check_stmt(s, &mut written) {
                Some(stmt) => stmts.push(stmt),
                None => ok = false,
            }
        }
        if k.body.is_empty() {
            self.error(
                Diagnostic::error("E0602", format!("kernel `{}` has an empty body", k.name.name), k.name.span)
                    .with_label("no statement defines its outputs")
                    .with_help("define each output, e.g. `y[i] = x[i];`"),
            );
            ok = false;
        }
        if ok {
            Some(stmts)
        } else {
            None
        }
    }

    fn check_stmt(&mut self, s: &ast::Stmt, written: &mut HashMap<TensorId, Span>) -> Option<Stmt> {
        let first_var = self.vars.len();
        let first_use = self.var_uses.len();
        // Resolve the target: an output or inout, or a new intermediate.
        let target = match self.names.get(&s.target.name).copied() {
            Some(Entity::Tensor(t)) => {
                if self.tensors[t].role == TensorRole::Input {
                    self.error(
                        Diagnostic::error("E0604", format!("cannot assign to input `{}`", s.target.name), s.target.span)
                            .with_label("inputs are read-only")
                            .with_secondary(self.tensors[t].span, "declared as an input here")
                            .with_help(format!(
                                "declare it `{}: inout {}[...]` to update it in place",
                                s.target.name, self.tensors[t].dtype
                            )),
                    );
                    return None;
                }
                if let Some(prev) = written.get(&t) {
                    self.error(
                        Diagnostic::error("E0601", format!("`{}` is defined twice", s.target.name), s.target.span)
                            .with_label("second definition")
                            .with_secondary(*prev, "first defined here")
                            .with_help("every element is written exactly once: combine the two definitions"),
                    );
                    return None;
                }
                Some(t)
            }
            Some(Entity::Scalar(_)) => {
                self.error(
                    Diagnostic::error("E0604", format!("cannot assign to scalar `{}`", s.target.name), s.target.span)
                        .with_label("scalars are read-only inputs")
                        .with_help("use a rank-0 output instead: `-> (s: f32)` and `s = ...;`"),
                );
                return None;
            }
            Some(Entity::Dim(_)) => {
                self.error(
                    Diagnostic::error("E0604", format!("cannot assign to dimension `{}`", s.target.name), s.target.span)
                        .with_label("dimensions are fixed at launch")
                        .with_help("choose another name for this tensor"),
                );
                return None;
            }
            None => None,
        };
        let indices: Vec<ast::Ident> = s.indices.clone().unwrap_or_default();
        if let Some(t) = target {
            let rank = self.tensors[t].shape.len();
            if indices.len() != rank {
                self.error(
                    Diagnostic::error(
                        "E0403",
                        format!("`{}` has rank {} but is defined with {} index{}", s.target.name, rank, indices.len(), if indices.len() == 1 { "" } else { "es" }),
                        s.target.span,
                    )
                    .with_label(format!("expected {} index variable{}", rank, if rank == 1 { "" } else { "s" }))
                    .with_secondary(self.tensors[t].span, "declared here")
                    .with_help(self.example_lhs(t)),
                );
                return None;
            }
        }
        // Free variables, one per left-hand-side index.
        let mut scope: Vec<(String, VarId)> = Vec::new();
        for (axis, ix) in indices.iter().enumerate() {
            if scope.iter().any(|(n, _)| *n == ix.name) {
                self.error(
                    Diagnostic::error("E0203", format!("index variable `{}` appears twice on the left", ix.name), ix.span)
                        .with_label("repeated")
                        .with_help("each axis needs its own index variable, e.g. `y[i, j]`; a diagonal is not a definition"),
                );
                return None;
            }
            if let Some(e) = self.names.get(&ix.name) {
                let what = match e {
                    Entity::Dim(_) => "dimension",
                    Entity::Scalar(_) => "scalar",
                    Entity::Tensor(_) => "tensor",
                };
                self.error(
                    Diagnostic::error("E0204", format!("index variable `{}` shadows the {} `{}`", ix.name, what, ix.name), ix.span)
                        .with_label("shadows")
                        .with_help("use a lower-case index name such as `i`"),
                );
                return None;
            }
            let extent = target.map(|t| self.tensors[t].shape[axis]);
            let v = self.new_var(ix, VarKind::Free, extent);
            scope.push((ix.name.clone(), v));
        }
        let value = self.infer_expr(&s.value, &mut expr::Scope::statement(scope.clone()));
        let (value, flex) = value?;
        // Extents: reconcile every plain use of every var created here.
        if !self.resolve_var_extents(first_var, first_use) {
            return None;
        }
        let vars: Vec<VarId> = scope.iter().map(|(_, v)| *v).collect();
        let target = match target {
            Some(t) => {
                let dt = self.tensors[t].dtype;
                let value = self.coerce(value, flex, dt, &format!("`{}`", s.target.name), s.value.span)?;
                written.insert(t, s.target.span);
                return Some(Stmt { target: t, vars, value, span: s.span });
            }
            None => {
                let value = self.finalize(value, flex);
                let shape = vars.iter().map(|v| self.vars[*v].extent).collect();
                let id = self.tensors.len();
                self.tensors.push(TensorInfo {
                    name: s.target.name.clone(),
                    dtype: value.ty,
                    shape,
                    role: TensorRole::Intermediate,
                    span: s.target.span,
                    value_range: None,
                });
                self.names.insert(s.target.name.clone(), Entity::Tensor(id));
                written.insert(id, s.target.span);
                (id, value)
            }
        };
        Some(Stmt { target: target.0, vars, value: target.1, span: s.span })
    }

    fn example_lhs(&self, t: TensorId) -> String {
        const NAMES: [&str; 6] = ["i", "j", "k", "l", "m", "n"];
        let t = &self.tensors[t];
        if t.shape.is_empty() {
            format!("a rank-0 tensor is defined without brackets: `{} = ...;`", t.name)
        } else {
            let ix: Vec<&str> = (0..t.shape.len()).map(|i| NAMES.get(i).copied().unwrap_or("x")).collect();
            format!("write `{}[{}] = ...;`", t.name, ix.join(", "))
        }
    }

    /// Every plain use of a var on an axis must agree with its extent (or
    /// with each other, when the extent is inferred).
    fn resolve_var_extents(&mut self, first_var: VarId, first_use: usize) -> bool {
        let mut ok = true;
        for v in first_var..self.vars.len() {
            let uses: Vec<VarUse> = self.var_uses[first_use..].iter().filter(|u| u.var == v).cloned().collect();
            let declared = self.var_extent[v];
            let (extent, origin) = match (declared, uses.first()) {
                (Some(d), _) => (d, None),
                (None, Some(u)) => (u.dim, Some(u.clone())),
                (None, None) => {
                    let name = self.vars[v].name.clone();
                    let help = match self.vars[v].kind {
                        VarKind::Reduction => format!("give the range explicitly: `sum({} in 0..K)`", name),
                        VarKind::Free => format!("index a tensor with `{}` on the right-hand side, or declare the tensor as an output with its shape", name),
                    };
                    self.error(
                        Diagnostic::error("E0404", format!("cannot infer the range of index `{}`", name), self.vars[v].span)
                            .with_label("no tensor axis is indexed by this variable alone")
                            .with_help(help),
                    );
                    ok = false;
                    continue;
                }
            };
            for u in &uses {
                if !self.dims_equal(extent, u.dim) {
                    let name = self.vars[v].name.clone();
                    let (a, b) = (self.dim_name(extent), self.dim_name(u.dim));
                    let mut d = Diagnostic::error(
                        "E0401",
                        format!("index `{}` ranges over `{}` but is used on an axis of length `{}`", name, a, b),
                        u.span,
                    )
                    .with_label(format!("{} has length `{}`", u.what, b));
                    d = match &origin {
                        Some(o) => d.with_secondary(o.span, format!("{} gives `{}` its range `{}`", o.what, name, a)),
                        None => d.with_secondary(self.vars[v].span, format!("`{}` ranges over `{}` here", name, a)),
                    };
                    let help = match (extent, u.dim) {
                        (Dim::Sym(_), _) | (_, Dim::Sym(_)) => format!("if they are equal, say so: `requires {} == {}`", a, b),
                        _ => "the two lengths are different literals: the shapes disagree".to_string(),
                    };
                    self.error(d.with_help(help));
                    ok = false;
                    break;
                }
            }
            self.vars[v].extent = extent;
        }
        ok
    }
}
