//! The tile skip's rule (issue 23), proved on the printed `KernelIr`.
//!
//! A `KStmt::SkipWhen { cond, body }` runs `body` unless `cond`. Every
//! other pass reads the body as run; this one proves that where `cond`
//! holds, running it would change nothing the kernel keeps. The argument,
//! each step checked here:
//!
//! 1. **The body's effect.** It has no barrier and writes no memory; the
//!    registers it writes are its own, except accumulator slots updated as
//!    `acc[s] = addmod(acc[s], t)` with `t` = `mulmod(x, y)` or
//!    `skip_if(_, mulmod(x, y))` ([`body_products`]). Each `x` and `y` is
//!    traced through the body's registers to a read of a shared tile,
//!    `tile[g(..)]`.
//! 2. **Staged valuations.** Each minimum the condition reads folds a
//!    valuation tile `v`, and `v` is staged with one operand tile `t`:
//!    every write of `v` is `v[i] = vp(t[i])` right after a write of
//!    `t[i]`, every write of `t` is followed so, and nothing else writes
//!    either ([`staged_tile`]). With shared-race freedom (its own
//!    obligations), every slot written holds `v[i] = vp(t[i])` wherever
//!    no pair is half done.
//! 3. **The minimum.** A condition's local `m` is declared just before a
//!    loop nest whose only statement is `m = min(m, v[f(..)])`, and
//!    nothing between it and the skip writes `m`, `v` or `t` or waits at a
//!    barrier ([`fold_of`]): `m <= v[f(w)]` for every `w` the nest visits.
//! 4. **The obligation** (Z3, per accumulated product): for every product
//!    of the body (its loops in their ranges, any thread), where `cond`
//!    holds, `vp(x) + vp(y) >= k`. The hypotheses are the facts above at
//!    one witness, the fold's loops set to the product's (outermost
//!    first): if the witness lies in the fold's range and reads the
//!    product's slot, then `m <= vp(x)`. A minimum over part of the slab,
//!    or over other slots, leaves the witness out and is refuted.
//!
//! With the modulus's lemmas (`vp(x) + vp(y) >= k` gives `p^k | x y`, so
//! `mulmod(x, y) = 0`), every term the body adds is 0 and `addmod(acc, 0)
//! = acc`. Not claimed: that the loader writes every slot the products
//! read (no schedule's shared reads are proved initialised; a slot never
//! written would make the dense product wrong as well).

use super::residue::{unprovable, Leaves, Reader};
use crate::kir::*;
use crate::tir::{Builtin, Const};
use std::collections::HashMap;
use tokitai_contracts::residue::Modulus;
use tokitai_contracts::{Formula, Obligation, ObligationKind, Term};

/// Does the kernel skip anything by value?
pub fn has_skips(ir: &KernelIr) -> bool {
    let mut found = false;
    each_list(&ir.body, &mut |list| found |= list.iter().any(|s| matches!(s, KStmt::SkipWhen { .. })));
    found
}

/// One obligation per product each tile skip leaves out (distinct ones),
/// or a failing one naming why the skip could not be read.
pub fn obligations(ir: &KernelIr, m: &Modulus) -> Vec<Obligation> {
    let mut out: Vec<Obligation> = Vec::new();
    each_list(&ir.body, &mut |list| {
        for (at, s) in list.iter().enumerate() {
            let KStmt::SkipWhen { cond, body } = s else { continue };
            let obs = skip_obligations(ir, m, &list[..at], cond, body).unwrap_or_else(|why| vec![unprovable(format!("modulo {}: a tile skip that cannot be shown to leave out only zero products: {}", m, why))]);
            for ob in obs {
                if !out.iter().any(|o| o.description == ob.description && o.hypotheses == ob.hypotheses && o.goal == ob.goal) {
                    out.push(ob);
                }
            }
        }
    });
    out
}

/// A loop of the nest around a statement: `start <= var < end`, stepping
/// by `step` from `start`.
#[derive(Clone)]
struct Loop {
    var: IVar,
    start: IExpr,
    end: IExpr,
    step: IExpr,
}

/// A minimum the condition reads: `local = min(local, vtile[index])` over
/// `loops`, starting at most `most`.
struct Fold {
    local: LocalId,
    /// The operand tile the folded valuation tile is staged with.
    tile: SharedId,
    index: IExpr,
    loops: Vec<Loop>,
    most: i128,
}

/// A factor of a product, traced to the shared slot it was read from;
/// `within` are the register-array reads on the way, each `(slot, the
/// loop that filled the array)`: the slot must lie in the loop's range.
struct Read {
    tile: SharedId,
    index: IExpr,
    within: Vec<(IExpr, Loop)>,
}

/// An accumulated product `acc[s] = addmod(acc[s], t(x, y))` of the body,
/// inside `loops`.
struct Product {
    loops: Vec<Loop>,
    factors: [Read; 2],
}

fn skip_obligations(ir: &KernelIr, m: &Modulus, before: &[KStmt], cond: &VExpr, body: &[KStmt]) -> Result<Vec<Obligation>, String> {
    let mut locals = Vec::new();
    locals_of(cond, &mut locals);
    if locals.is_empty() {
        return Err("its condition reads no minimum".into());
    }
    let folds = locals.iter().map(|l| fold_of(ir, before, *l)).collect::<Result<Vec<_>, _>>()?;
    let products = body_products(ir, body)?;
    if products.is_empty() {
        return Err("its body adds no residue products".into());
    }
    let minima = Minima { ir, folds: &folds };
    let reader = Reader { leaves: &minima };
    let condition = reader.formula(cond)?;
    let text = reader.text(cond);
    let lets = int_bindings(ir);
    let term = |e: &IExpr| int_term(ir, &lets, e);
    let k = m.k as i64;
    let mut out = Vec::new();
    for p in &products {
        let mut hyps = vec![Term::var(exec_tid()).within(Term::c(0), Term::c(ir.block as i64)), condition.clone()];
        hyps.extend(p.loops.iter().map(|l| range(l, &term(&IExpr::Var(l.var)), &term)));
        for f in &folds {
            hyps.push(minimum(ir, f).within(Term::c(0), Term::c(f.most as i64 + 1)));
        }
        let mut goals = Vec::new();
        let mut vals = Vec::new();
        for (n, x) in p.factors.iter().enumerate() {
            let v = Term::var(format!("v{}", n));
            hyps.push(v.clone().within(Term::c(0), Term::c(k + 1)));
            let slot = term(&x.index);
            // The product's loops this read depends on, outermost first:
            // the witness the fold's loops take.
            let witness: Vec<&Loop> = p.loops.iter().filter(|l| x.index.mentions(l.var)).collect();
            for f in &folds {
                if f.tile != x.tile || f.loops.len() != witness.len() {
                    continue;
                }
                let at: HashMap<String, Term> = f.loops.iter().zip(&witness).map(|(fl, pl)| (loop_name(ir, fl.var), term(&IExpr::Var(pl.var)))).collect();
                let set = |t: Term| t.subst(&|name| at.get(name).cloned());
                let visited = Formula::and(f.loops.iter().map(|fl| range(fl, &set(term(&IExpr::Var(fl.var))), &|e| set(term(e)))).collect());
                let same_slot = set(term(&f.index)).eq(slot.clone());
                hyps.push(Formula::and(vec![visited, same_slot]).implies(minimum(ir, f).le(v.clone())));
            }
            for (at, l) in &x.within {
                goals.push(range(l, &term(at), &term));
            }
            vals.push(v);
        }
        goals.push(Term::c(k).le(vals[0].clone().add(vals[1].clone())));
        let tiles_read = format!("`{}` and `{}`", ir.shared[p.factors[0].tile].name, ir.shared[p.factors[1].tile].name);
        let description = format!("modulo {}: the tile skip `{}` leaves out only products of {} with vp(a) + vp(b) >= {}", m, text, tiles_read, m.k);
        let mut show = vec![("v0".into(), "vp(a)".into()), ("v1".into(), "vp(b)".into())];
        show.extend(folds.iter().map(|f| (minimum_name(ir, f), ir.locals[f.local].name.clone())));
        out.push(Obligation { kind: ObligationKind::SkipExact, description, origin: (0, 0), hypotheses: hyps, goal: Formula::and(goals), show });
    }
    Ok(out)
}

/// The minima as leaves of the condition.
struct Minima<'a> {
    ir: &'a KernelIr,
    folds: &'a [Fold],
}

impl Leaves for Minima<'_> {
    fn leaf(&self, e: &VExpr) -> Option<Result<(Term, i128), String>> {
        let VKind::Local(l) = e.kind else { return None };
        let f = self.folds.iter().find(|f| f.local == l)?;
        Some(Ok((minimum(self.ir, f), f.most)))
    }
    fn name(&self, e: &VExpr) -> Option<String> {
        let VKind::Local(l) = e.kind else { return None };
        Some(self.ir.locals[l].name.clone())
    }
}

fn minimum(ir: &KernelIr, f: &Fold) -> Term {
    Term::var(minimum_name(ir, f))
}

fn minimum_name(ir: &KernelIr, f: &Fold) -> String {
    format!("{}#{}", ir.locals[f.local].name, f.local)
}

/// The thread id's variable, as the symbolic executor names it.
fn exec_tid() -> &'static str {
    super::exec::TID
}

fn loop_name(ir: &KernelIr, v: IVar) -> String {
    format!("{}#{}", ir.ivars[v], v)
}

/// `start <= at < end` and `(at - start) % step == 0`.
fn range(l: &Loop, at: &Term, term: &dyn Fn(&IExpr) -> Term) -> Formula {
    let start = term(&l.start);
    let mut parts = vec![start.clone().le(at.clone()), at.clone().lt(term(&l.end))];
    if l.step != IExpr::c(1) {
        parts.push(at.clone().sub(start).rem(term(&l.step)).eq(Term::c(0)));
    }
    Formula::and(parts)
}

/// Every `LetInt` of the kernel (each variable is bound once).
fn int_bindings(ir: &KernelIr) -> HashMap<IVar, IExpr> {
    let mut lets = HashMap::new();
    each_list(&ir.body, &mut |list| {
        for s in list {
            if let KStmt::LetInt { var, value } = s {
                lets.insert(*var, value.clone());
            }
        }
    });
    lets
}

/// The term of an index expression: bindings replaced by what they bind,
/// loop variables free (their ranges are hypotheses where they matter).
fn int_term(ir: &KernelIr, lets: &HashMap<IVar, IExpr>, e: &IExpr) -> Term {
    let t = |x: &IExpr| int_term(ir, lets, x);
    match e {
        IExpr::Const(v) => Term::c(*v),
        IExpr::Var(v) => match lets.get(v) {
            Some(bound) => t(bound),
            None => Term::var(loop_name(ir, *v)),
        },
        IExpr::Tid => Term::var(exec_tid()),
        IExpr::Dim(d) => super::exec::dim_var(&ir.dims[*d]),
        IExpr::BlockIdx(a) => Term::var(super::exec::BID[*a as usize]),
        IExpr::GridDim(a) => Term::var(super::exec::GDIM[*a as usize]),
        IExpr::Add(a, b) => t(a).add(t(b)),
        IExpr::Sub(a, b) => t(a).sub(t(b)),
        IExpr::Mul(a, b) => t(a).mul(t(b)),
        IExpr::Div(a, b) => t(a).div(t(b)),
        IExpr::Rem(a, b) => t(a).rem(t(b)),
        IExpr::Min(a, b) => t(a).min(t(b)),
        // Opaque here: a fresh value, so nothing is assumed of it.
        IExpr::Load { access, .. } => Term::var(format!("opaque.load{}", access)),
        IExpr::Select(..) => Term::var(format!("opaque.select{:p}", e)),
    }
}

/// The minimum `local` that the statements before the skip leave: the
/// last statements that touch it must be `Decl local = c` and a loop nest
/// whose innermost statement is `local = min(local, vtile[f])`; after it
/// nothing writes `local`, `vtile` or its operand tile, and no barrier.
fn fold_of(ir: &KernelIr, before: &[KStmt], local: LocalId) -> Result<Fold, String> {
    let name = &ir.locals[local].name;
    let decl = before
        .iter()
        .rposition(|s| matches!(s, KStmt::Decl { local: l, .. } if *l == local))
        .ok_or_else(|| format!("`{}` is not declared in the statements before the skip", name))?;
    let KStmt::Decl { init: Some(VExpr { kind: VKind::Const(Const::Int(most)), .. }), .. } = &before[decl] else {
        return Err(format!("`{}` does not start at a constant", name));
    };
    let Some(nest) = before.get(decl + 1) else { return Err(format!("no loop folds `{}`", name)) };
    let mut loops = Vec::new();
    let mut inner = std::slice::from_ref(nest);
    while let [KStmt::For { var, start, end, step, body, .. }] = inner {
        loops.push(Loop { var: *var, start: start.clone(), end: end.clone(), step: step.clone() });
        inner = body;
    }
    let [KStmt::Assign { local: l, value }] = inner else { return Err(format!("the loop after `{}` is not one fold `{} = min({}, ...)`", name, name, name)) };
    let VKind::Call(Builtin::Min, args) = &value.kind else { return Err(format!("`{}` is not folded with `min`", name)) };
    let read = match (&args[0].kind, &args[1].kind) {
        (VKind::Local(x), VKind::SharedGet { arr, index }) | (VKind::SharedGet { arr, index }, VKind::Local(x)) if *x == local => (*arr, index.clone()),
        _ => return Err(format!("`{}`'s fold does not take the minimum of itself and a shared tile's slot", name)),
    };
    if *l != local || loops.is_empty() {
        return Err(format!("the loop after `{}` folds another value", name));
    }
    let (vtile, index) = read;
    let tile = staged_tile(ir, vtile)?;
    for s in &before[decl + 2..] {
        let mut bad = None;
        each_stmt(std::slice::from_ref(s), &mut |s| match s {
            KStmt::Barrier | KStmt::MbarWait { .. } | KStmt::CpAsyncWait { .. } => bad = Some("a barrier".to_string()),
            KStmt::Assign { local: x, .. } | KStmt::Decl { local: x, .. } if *x == local => bad = Some(format!("a write of `{}`", name)),
            KStmt::SharedSet { arr, .. } | KStmt::SharedVecStore { arr, .. } | KStmt::CpAsync { arr, .. } | KStmt::TmaLoad { arr, .. } if *arr == vtile || *arr == tile => bad = Some(format!("a write of `{}`", ir.shared[*arr].name)),
            _ => {}
        });
        if let Some(what) = bad {
            return Err(format!("{} lies between `{}`'s fold and the skip", what, name));
        }
    }
    Ok(Fold { local, tile, index, loops, most: *most as i128 })
}

/// The operand tile a valuation tile is staged with (see the module's
/// step 2), or why it is not.
fn staged_tile(ir: &KernelIr, vtile: SharedId) -> Result<SharedId, String> {
    let vname = &ir.shared[vtile].name;
    let mut tile: Option<SharedId> = None;
    let mut why: Option<String> = None;
    // Every write of the valuation tile: vp of the slot of `tile` just written.
    each_list(&ir.body, &mut |list| {
        for (at, s) in list.iter().enumerate() {
            match s {
                KStmt::SharedSet { arr, index, value } if *arr == vtile => {
                    let staged = match &value.kind {
                        VKind::Call(Builtin::Vp, x) => match &x[0].kind {
                            VKind::SharedGet { arr: t, index: i } if i == index => match at.checked_sub(1).map(|p| &list[p]) {
                                Some(KStmt::SharedSet { arr: w, index: j, .. }) if w == t && j == index => Some(*t),
                                _ => None,
                            },
                            _ => None,
                        },
                        _ => None,
                    };
                    match (staged, tile) {
                        (Some(t), None) => tile = Some(t),
                        (Some(t), Some(u)) if t == u => {}
                        _ => why = why.clone().or(Some(format!("a write of `{}` is not the valuation of the operand slot written just before it", vname))),
                    }
                }
                KStmt::SharedVecStore { arr, .. } | KStmt::CpAsync { arr, .. } | KStmt::TmaLoad { arr, .. } if *arr == vtile => {
                    why = why.clone().or(Some(format!("`{}` is written other than slot by slot", vname)));
                }
                _ => {}
            }
        }
    });
    if let Some(why) = why {
        return Err(why);
    }
    let tile = tile.ok_or_else(|| format!("`{}` is never written", vname))?;
    let tname = &ir.shared[tile].name;
    // Every write of the operand tile: followed by its valuation's.
    each_list(&ir.body, &mut |list| {
        for (at, s) in list.iter().enumerate() {
            match s {
                KStmt::SharedSet { arr, index, .. } if *arr == tile => {
                    let paired = matches!(list.get(at + 1), Some(KStmt::SharedSet { arr: v, index: i, .. }) if *v == vtile && i == index);
                    if !paired {
                        why = why.clone().or(Some(format!("a write of `{}` is not followed by its valuation's in `{}` (a stale valuation)", tname, vname)));
                    }
                }
                KStmt::SharedVecStore { arr, .. } | KStmt::CpAsync { arr, .. } | KStmt::TmaLoad { arr, .. } if *arr == tile => {
                    why = why.clone().or(Some(format!("`{}` is written other than slot by slot", tname)));
                }
                _ => {}
            }
        }
    });
    match why {
        Some(why) => Err(why),
        None => Ok(tile),
    }
}

/// The body's accumulated products, each factor traced to its shared read;
/// an error where the body does anything skipping could lose.
fn body_products(ir: &KernelIr, body: &[KStmt]) -> Result<Vec<Product>, String> {
    let mut walk = BodyWalk { ir, own: Vec::new(), defs: HashMap::new(), fills: HashMap::new(), loops: Vec::new(), out: Vec::new() };
    walk.block(body)?;
    Ok(walk.out)
}

struct BodyWalk<'a> {
    ir: &'a KernelIr,
    /// Registers declared in the body (its own to write).
    own: Vec<LocalId>,
    /// A scalar's value where it was declared with one and not written
    /// again.
    defs: HashMap<LocalId, Option<VExpr>>,
    /// An array filled by `for v in range: arr[v] = value(v)`, with no other
    /// write: the loop and the value.
    fills: HashMap<LocalId, Option<(Loop, VExpr)>>,
    loops: Vec<Loop>,
    out: Vec<Product>,
}

impl BodyWalk<'_> {
    fn block(&mut self, body: &[KStmt]) -> Result<(), String> {
        for s in body {
            self.stmt(s)?;
        }
        Ok(())
    }

    fn stmt(&mut self, s: &KStmt) -> Result<(), String> {
        match s {
            KStmt::Decl { local, init } => {
                self.own.push(*local);
                self.defs.insert(*local, init.clone());
            }
            KStmt::DeclArray { arr, .. } => {
                self.own.push(*arr);
                self.fills.insert(*arr, None);
            }
            KStmt::Assign { local, .. } if self.own.contains(local) => {
                self.defs.insert(*local, None);
            }
            KStmt::ArraySet { arr, index, value } if self.own.contains(arr) => {
                // A second write, or one not of the fill's form, makes the
                // array's slots unknown.
                let filled = self.fills.get(arr).is_some_and(|f| f.is_some());
                let fill = match (self.loops.last(), index) {
                    (Some(l), IExpr::Var(v)) if l.var == *v && !filled => Some((l.clone(), value.clone())),
                    _ => None,
                };
                self.fills.insert(*arr, fill);
            }
            KStmt::ArraySet { arr, index, value } => self.accumulate(*arr, index, value)?,
            KStmt::LetInt { .. } => {}
            KStmt::For { var, start, end, step, body, .. } => {
                self.loops.push(Loop { var: *var, start: start.clone(), end: end.clone(), step: step.clone() });
                self.block(body)?;
                self.loops.pop();
            }
            // Run or not, the products inside are shown zero for any path.
            KStmt::If { then, els, .. } => {
                self.block(then)?;
                self.block(els)?;
            }
            KStmt::SkipWhen { body, .. } => self.block(body)?,
            KStmt::Assign { local, .. } => return Err(format!("its body writes `{}`, a register it does not own", self.ir.locals[*local].name)),
            other => return Err(format!("its body does more than add products to registers ({})", stmt_kind(other))),
        }
        Ok(())
    }

    /// `acc[s] = addmod(acc[s], t)` with `t` a product of two traced reads.
    fn accumulate(&mut self, acc: LocalId, slot: &IExpr, value: &VExpr) -> Result<(), String> {
        let name = &self.ir.locals[acc].name;
        let VKind::Call(Builtin::AddMod, args) = &value.kind else { return Err(format!("its body sets `{}` other than by `addmod`", name)) };
        let running = matches!(&args[0].kind, VKind::ArrayGet { arr, index } if *arr == acc && index == slot);
        if !running {
            return Err(format!("its body sets `{}` to a sum that does not start from the slot itself", name));
        }
        let product = match &args[1].kind {
            VKind::Call(Builtin::SkipIf, s) => &s[1],
            _ => &args[1],
        };
        let VKind::Call(Builtin::MulMod, f) = &product.kind else { return Err(format!("its body adds to `{}` a term that is not a residue product", name)) };
        let factors = [self.trace(&f[0])?, self.trace(&f[1])?];
        self.out.push(Product { loops: self.loops.clone(), factors });
        Ok(())
    }

    /// The shared slot a register value was read from.
    fn trace(&self, e: &VExpr) -> Result<Read, String> {
        match &e.kind {
            VKind::Local(l) => match self.defs.get(l) {
                Some(Some(v)) => self.trace(v),
                _ => Err(format!("`{}` is not one value read from a tile", self.ir.locals[*l].name)),
            },
            VKind::ArrayGet { arr, index } => match self.fills.get(arr) {
                Some(Some((l, v))) => {
                    let mut read = self.trace(v)?;
                    read.index = read.index.subst_var(l.var, index);
                    read.within = read.within.into_iter().map(|(at, wl)| (at.subst_var(l.var, index), wl)).collect();
                    read.within.push((index.clone(), l.clone()));
                    Ok(read)
                }
                _ => Err(format!("`{}` is not filled by one loop over its slots", self.ir.locals[*arr].name)),
            },
            VKind::SharedGet { arr, index } => Ok(Read { tile: *arr, index: index.clone(), within: Vec::new() }),
            _ => Err("a factor is not a register read from a tile".into()),
        }
    }
}

fn stmt_kind(s: &KStmt) -> &'static str {
    match s {
        KStmt::Barrier => "a barrier",
        KStmt::Store { .. } | KStmt::VecStore { .. } => "a store",
        KStmt::SharedSet { .. } | KStmt::SharedVecStore { .. } => "a shared write",
        _ => "an instruction with effects",
    }
}

/// The locals a value reads.
fn locals_of(e: &VExpr, out: &mut Vec<LocalId>) {
    e.walk(&mut |x| {
        if let VKind::Local(l) = x.kind {
            if !out.contains(&l) {
                out.push(l);
            }
        }
    });
}

/// Every statement list of a body: itself and each nested one.
fn each_list<'a>(body: &'a [KStmt], f: &mut dyn FnMut(&'a [KStmt])) {
    f(body);
    for s in body {
        match s {
            KStmt::For { body, .. } | KStmt::SkipWhen { body, .. } => each_list(body, f),
            KStmt::If { then, els, .. } => {
                each_list(then, f);
                each_list(els, f);
            }
            _ => {}
        }
    }
}

/// Every statement of a body, nested ones included.
fn each_stmt<'a>(body: &'a [KStmt], f: &mut dyn FnMut(&'a KStmt)) {
    each_list(body, &mut |list| list.iter().for_each(&mut *f));
}
