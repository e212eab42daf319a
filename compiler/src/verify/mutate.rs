//! Mutation testing of the verifier: bugs injected into `KernelIr` (the
//! object that is printed and proved). Each mutant must be refuted.

use crate::kir::*;

/// One injected bug.
#[derive(Clone, Debug)]
pub struct Mutant {
    pub operator: &'static str,
    pub description: String,
    pub ir: KernelIr,
}

/// Every statement position, as a path of child indices.
type Site = Vec<usize>;

fn sites(body: &[KStmt], prefix: &mut Site, out: &mut Vec<Site>) {
    for (i, s) in body.iter().enumerate() {
        prefix.push(i);
        out.push(prefix.clone());
        match s {
            KStmt::For { body, .. } => {
                prefix.push(0);
                sites(body, prefix, out);
                prefix.pop();
            }
            KStmt::If { then, els, .. } => {
                prefix.push(0);
                sites(then, prefix, out);
                prefix.pop();
                prefix.push(1);
                sites(els, prefix, out);
                prefix.pop();
            }
            KStmt::SkipWhen { body, .. } => {
                prefix.push(0);
                sites(body, prefix, out);
                prefix.pop();
            }
            _ => {}
        }
        prefix.pop();
    }
}

/// The statement list holding a site, and the site's index in it (paths
/// alternate a statement index and a child list: 0 body/then, 1 else).
fn parent<'a>(body: &'a mut Vec<KStmt>, site: &[usize]) -> Option<(&'a mut Vec<KStmt>, usize)> {
    if site.len() == 1 {
        return Some((body, site[0]));
    }
    let list = match body.get_mut(site[0])? {
        KStmt::For { body, .. } => body,
        KStmt::If { then, els, .. } => {
            if site[1] == 0 {
                then
            } else {
                els
            }
        }
        KStmt::SkipWhen { body, .. } => body,
        _ => return None,
    };
    parent(list, &site[2..])
}

fn at<'a>(body: &'a mut Vec<KStmt>, site: &[usize]) -> Option<&'a mut KStmt> {
    let (list, i) = parent(body, site)?;
    list.get_mut(i)
}

/// Add a mutant made by `f` at `site`, if `f` applies there.
fn mutate_at(all: &mut Vec<Mutant>, ir: &KernelIr, operator: &'static str, description: String, f: &dyn Fn(&mut KStmt) -> bool, site: &Site) {
    let mut m = ir.clone();
    if at(&mut m.body, site).is_some_and(f) {
        all.push(Mutant { operator, description: format!("{}: {}", ir.name, description), ir: m });
    }
}

/// Apply `f` to the condition of the first `skip_if` in the statement's
/// own value (not in nested statements, which are sites of their own).
fn on_skip_condition(s: &mut KStmt, f: &mut dyn FnMut(&mut VExpr) -> bool) -> bool {
    fn find(e: &mut VExpr, f: &mut dyn FnMut(&mut VExpr) -> bool) -> bool {
        match &mut e.kind {
            VKind::Call(crate::tir::Builtin::SkipIf, args) => f(&mut args[0]),
            VKind::Unary(_, a) | VKind::Cast(a) => find(a, f),
            VKind::ShflXor { value, .. } => find(value, f),
            VKind::Binary(_, a, b) => find(a, f) || find(b, f),
            VKind::Fma(a, b, c) | VKind::Select(a, b, c) => find(a, f) || find(b, f) || find(c, f),
            VKind::Call(_, args) => args.iter_mut().any(|a| find(a, f)),
            _ => false,
        }
    }
    match s {
        KStmt::Decl { init: Some(v), .. } | KStmt::Assign { value: v, .. } | KStmt::Store { value: v, .. } | KStmt::ArraySet { value: v, .. } => find(v, f),
        _ => false,
    }
}

/// Add a mutant made by `f` on the statement list holding `site`, given
/// the site's index in it (a statement removed, moved or wrapped), if `f`
/// applies there.
fn mutate_list(all: &mut Vec<Mutant>, ir: &KernelIr, operator: &'static str, description: String, site: &Site, f: impl FnOnce(&mut Vec<KStmt>, usize) -> bool) {
    let mut m = ir.clone();
    if parent(&mut m.body, site).is_some_and(|(l, i)| f(l, i)) {
        all.push(Mutant { operator, description: format!("{}: {}", ir.name, description), ir: m });
    }
}

/// Is a loop body (down its single-statement nest) one fold `m = min(m,
/// ...)`? (A tile skip's minimum, `schedule::tile_skip`.)
fn folds_minimum(body: &[KStmt]) -> bool {
    match body {
        [KStmt::For { body, .. }] => folds_minimum(body),
        [KStmt::Assign { value: VExpr { kind: VKind::Call(crate::tir::Builtin::Min, _), .. }, .. }] => true,
        _ => false,
    }
}

/// [`mutate_list`] removing the statement at `site`.
fn remove_at(all: &mut Vec<Mutant>, ir: &KernelIr, operator: &'static str, description: String, site: &Site) {
    mutate_list(all, ir, operator, description, site, |l, i| {
        l.remove(i);
        true
    });
}

fn plus_one(e: &IExpr) -> IExpr {
    e.clone().add(IExpr::c(1))
}

/// Replace the first dim `from` in an index term by `to`.
fn swap_dim(e: &IExpr, from: usize, to: usize) -> Option<IExpr> {
    let b = |x: &IExpr| swap_dim(x, from, to);
    Some(match e {
        IExpr::Dim(d) if *d == from => IExpr::Dim(to),
        IExpr::Add(x, y) => match b(x) {
            Some(nx) => IExpr::Add(Box::new(nx), y.clone()),
            None => IExpr::Add(x.clone(), Box::new(b(y)?)),
        },
        IExpr::Mul(x, y) => match b(x) {
            Some(nx) => IExpr::Mul(Box::new(nx), y.clone()),
            None => IExpr::Mul(x.clone(), Box::new(b(y)?)),
        },
        _ => return None,
    })
}

/// Scale the first multiplication of an index term (a wrong stride).
fn wrong_stride(e: &IExpr) -> Option<IExpr> {
    Some(match e {
        IExpr::Mul(x, y) => IExpr::Mul(x.clone(), Box::new(y.clone().add(IExpr::c(1)))),
        IExpr::Add(x, y) => match wrong_stride(x) {
            Some(nx) => IExpr::Add(Box::new(nx), y.clone()),
            None => IExpr::Add(x.clone(), Box::new(wrong_stride(y)?)),
        },
        _ => return None,
    })
}

/// Does a loop run at most one iteration per thread for every launch its
/// kernel admits? (`end - start <= step`, with `end` a dim bounded by
/// `requires` or a constant, `start` and `step` constants or the thread id.)
fn at_most_one_iteration(k: &crate::tir::Kernel, ir: &KernelIr, start: &IExpr, end: &IExpr, step: &IExpr) -> bool {
    let upper = match end {
        IExpr::Const(c) => Some(*c),
        IExpr::Dim(d) => k.dims.iter().position(|x| x.name == ir.dims[*d]).and_then(|i| k.dim_upper_bound(crate::tir::Dim::Sym(i))),
        _ => None,
    };
    let lowest_start = match start {
        IExpr::Const(c) => Some(*c),
        IExpr::Tid | IExpr::BlockIdx(_) => Some(0),
        _ => None,
    };
    match (upper, lowest_start, step) {
        (Some(u), Some(s), IExpr::Const(st)) => u - s <= *st,
        _ => false,
    }
}

/// All mutants of one kernel.
pub fn mutants(k: &crate::tir::Kernel, ir: &KernelIr) -> Vec<Mutant> {
    let mut all = Vec::new();
    let mut list = Vec::new();
    sites(&ir.body, &mut Vec::new(), &mut list);
    for site in &list {
        let stmt = {
            let mut b = ir.body.clone();
            match at(&mut b, site) {
                Some(s) => s.clone(),
                None => continue,
            }
        };
        match &stmt {
            KStmt::For { var, .. } => {
                let name = &ir.ivars[*var];
                let end_plus_one = |s: &mut KStmt| {
                    if let KStmt::For { end, .. } = s {
                        *end = plus_one(end);
                    }
                    true
                };
                let double_step = |s: &mut KStmt| {
                    if let KStmt::For { step, .. } = s {
                        *step = step.clone().mul(IExpr::c(2));
                    }
                    true
                };
                let start_late = |s: &mut KStmt| {
                    if let KStmt::For { start, .. } = s {
                        *start = plus_one(start);
                    }
                    true
                };
                mutate_at(&mut all, ir, "off-by-one bound", format!("loop `{}` runs one iteration too far", name), &end_plus_one, site);
                // A loop that runs at most one iteration per thread for every
                // launch `requires` admits (a whole-tensor reduction's single
                // row; a reduction over E <= 64 experts strided by 256) runs
                // the same with any larger stride: that mutant is equivalent,
                // not a bug, so it is not generated.
                let single = match &stmt {
                    KStmt::For { start: IExpr::BlockIdx(_) | IExpr::Const(0), end: IExpr::Const(1), .. } => true,
                    KStmt::For { start, end, step, .. } => at_most_one_iteration(k, ir, start, end, step),
                    _ => false,
                };
                if !single {
                    mutate_at(&mut all, ir, "wrong stride", format!("loop `{}` steps twice as far", name), &double_step, site);
                }
                mutate_at(&mut all, ir, "off-by-one bound", format!("loop `{}` starts one late", name), &start_late, site);
            }
            KStmt::If { .. } => {
                let drop_guard = |s: &mut KStmt| {
                    if let KStmt::If { cond, els, .. } = s {
                        *cond = Cond::True;
                        els.clear();
                    }
                    true
                };
                mutate_at(&mut all, ir, "dropped guard", "a guard is removed".into(), &drop_guard, site);
            }
            KStmt::Store { buf, .. } | KStmt::VecStore { buf, .. } => {
                let name = ir.bufs[*buf].name.clone();
                mutate_at(&mut all, ir, "off-by-one index", format!("the write of `{}` is one element off", name), &|s| match s {
                    KStmt::Store { index, .. } => {
                        *index = plus_one(index);
                        true
                    }
                    KStmt::VecStore { base, .. } => {
                        *base = plus_one(base);
                        true
                    }
                    _ => false,
                }, site);
                for from in 0..ir.dims.len() {
                    for to in 0..ir.dims.len() {
                        if from != to {
                            let d = format!("the write of `{}` uses `{}` where `{}` belongs", name, ir.dims[to], ir.dims[from]);
                            mutate_at(&mut all, ir, "swapped dims", d, &|s| match s {
                                KStmt::Store { index, .. } => swap_dim(index, from, to).map(|n| *index = n).is_some(),
                                _ => false,
                            }, site);
                        }
                    }
                }
                mutate_at(&mut all, ir, "wrong stride", format!("the write of `{}` uses a wrong row stride", name), &|s| match s {
                    KStmt::Store { index, .. } => wrong_stride(index).map(|n| *index = n).is_some(),
                    _ => false,
                }, site);
            }
            KStmt::LetInt { var, value } if !matches!(value, IExpr::Const(_)) => {
                let name = ir.ivars[*var].clone();
                let is_tile_origin = name == "m0" || name == "n0";
                if is_tile_origin {
                    mutate_at(&mut all, ir, "overlapping tiles", format!("tile origin `{}` advances by half a tile", name), &|s| match s {
                        KStmt::LetInt { value: IExpr::Mul(_, c), .. } => {
                            if let IExpr::Const(v) = **c {
                                **c = IExpr::c(v / 2);
                            }
                            true
                        }
                        _ => false,
                    }, site);
                } else {
                    let let_plus_one = |s: &mut KStmt| {
                        if let KStmt::LetInt { value, .. } = s {
                            *value = plus_one(value);
                        }
                        true
                    };
                    mutate_at(&mut all, ir, "off-by-one index", format!("`{}` is computed one too high", name), &let_plus_one, site);
                }
            }
            // The warpgroup unit's protocol: each of its waits and fences
            // deleted.
            KStmt::WgmmaWait { .. } | KStmt::WgmmaFence | KStmt::ProxyFence => {
                // A wait that lets one group more run on, where that
                // group exists: the groups committed in its statement list
                // since the last full wait, its own included, outnumber
                // `pending` (else the mutant waits for nothing either, like
                // the wait that only commits a slab's first chain: an
                // equivalent mutant). A list that inherits groups (a loop
                // body entered with some running) may lose a mutant here,
                // never a bug.
                if let KStmt::WgmmaWait { pending } = &stmt {
                    let pending = *pending;
                    let d = format!("a wait for the warpgroup unit leaves {} groups running instead of {}", pending + 1, pending);
                    mutate_list(&mut all, ir, "late wgmma wait", d, site, |l, i| {
                        let committed = 1 + l[..i].iter().rev().take_while(|s| !matches!(s, KStmt::WgmmaWait { pending: 0 })).filter(|s| matches!(s, KStmt::WgmmaWait { .. })).count();
                        if committed > pending as usize {
                            l[i] = KStmt::WgmmaWait { pending: pending + 1 };
                        }
                        committed > pending as usize
                    });
                }
                let (operator, what) = match &stmt {
                    KStmt::WgmmaWait { .. } => ("missing wgmma wait", "a wait for the warpgroup unit"),
                    KStmt::WgmmaFence => ("missing wgmma fence", "a wgmma.fence"),
                    _ => ("missing proxy fence", "a proxy fence after shared stores"),
                };
                remove_at(&mut all, ir, operator, format!("{} is removed", what), site);
            }
            // The monitor's observation: a warp merging past its output's
            // slots (into the next output's, or past the buffer), and the
            // merge run by half of each warp only (its shuffles then wait
            // for lanes that never come).
            KStmt::ObserveFlush { .. } => {
                mutate_at(&mut all, ir, "observation past its slots", "the warps merge one slot array further".into(), &|s| match s {
                    KStmt::ObserveFlush { slot } => {
                        *slot = slot.clone().add(IExpr::c(OBSERVE_SLOTS));
                        true
                    }
                    _ => false,
                }, site);
                mutate_list(&mut all, ir, "divergent observation merge", "only half of each warp runs the observation's merge".into(), site, |l, i| {
                    let flush = l.remove(i);
                    let half = Cond::Lt(IExpr::Tid.rem(IExpr::c(32)), IExpr::c(16));
                    l.insert(i, KStmt::If { cond: half, then: vec![flush], els: vec![] });
                    true
                });
            }
            // Asynchronous copies: a wait deleted, a wait that lets one
            // more group in flight, a wait moved past the barrier after
            // it, a commit deleted, a copy's predicate dropped.
            KStmt::CpAsyncWait { pending } => {
                remove_at(&mut all, ir, "missing copy wait", "a wait for asynchronous copies is removed".into(), site);
                let later = *pending + 1;
                mutate_at(&mut all, ir, "late copy wait", format!("a copy wait lets {} groups in flight, not {}", later, pending), &|s| match s {
                    KStmt::CpAsyncWait { pending } => {
                        *pending += 1;
                        true
                    }
                    _ => false,
                }, site);
                mutate_list(&mut all, ir, "wait after barrier", "a copy wait is moved past the barrier after it".into(), site, |l, i| {
                    let Some(j) = l[i..].iter().position(|s| matches!(s, KStmt::Barrier)) else { return false };
                    let wait = l.remove(i);
                    l.insert(i + j, wait);
                    true
                });
            }
            KStmt::CpAsyncCommit => {
                remove_at(&mut all, ir, "missing copy commit", "a commit of asynchronous copies is removed".into(), site);
            }
            KStmt::CpAsync { buf, .. } => {
                let name = ir.bufs[*buf].name.clone();
                mutate_at(&mut all, ir, "dropped guard", format!("the copy of `{}` reads past the operand's end", name), &|s| match s {
                    KStmt::CpAsync { valid, .. } => {
                        *valid = Cond::True;
                        true
                    }
                    _ => false,
                }, site);
            }
            // A bulk copy: its box moved by one 16-byte chunk (into the
            // neighbouring box or stage).
            KStmt::TmaLoad { map, .. } => {
                let name = ir.tensor_maps[*map].name.clone();
                mutate_at(&mut all, ir, "shifted bulk copy", format!("the bulk copy through `{}` lands 8 elements further", name), &|s| match s {
                    KStmt::TmaLoad { base, .. } => {
                        *base = base.clone().add(IExpr::c(8));
                        true
                    }
                    _ => false,
                }, site);
            }
            // A producer ring's mbarriers: a wait or an arrival deleted, a
            // wait for the other phase (its parity flipped), an arrival that
            // expects one chunk fewer than its bulk copies bring (the phase
            // could complete with a copy in flight), an allowance that takes
            // more registers than the block's pool holds.
            KStmt::MbarWait { bar, .. } | KStmt::MbarArrive { bar, .. } | KStmt::CpAsyncArrive { bar, .. } | KStmt::MbarExpectTx { bar, .. } => {
                let name = &ir.mbarriers[*bar].name;
                let waits = matches!(stmt, KStmt::MbarWait { .. });
                let (operator, what) = if waits { ("missing mbarrier wait", "a wait") } else { ("missing mbarrier arrival", "an arrival") };
                remove_at(&mut all, ir, operator, format!("{} on `{}` is removed", what, name), site);
                if matches!(stmt, KStmt::MbarExpectTx { .. }) {
                    mutate_at(&mut all, ir, "wrong transaction bytes", format!("the arrival at `{}` expects 16 bytes fewer than its copies bring", name), &|s| match s {
                        KStmt::MbarExpectTx { bytes, .. } => {
                            *bytes -= 16;
                            true
                        }
                        _ => false,
                    }, site);
                }
                if waits {
                    mutate_at(&mut all, ir, "swapped barrier phase", format!("the wait on `{}` waits for the other phase", name), &|s| match s {
                        KStmt::MbarWait { parity, .. } => {
                            *parity = parity.clone().add(IExpr::c(1)).rem(IExpr::c(2));
                            true
                        }
                        _ => false,
                    }, site);
                }
            }
            KStmt::SetMaxRegisters { grow: true, .. } => {
                mutate_at(&mut all, ir, "register allowance beyond the pool", "the growing allowance takes 8 registers more".into(), &|s| match s {
                    KStmt::SetMaxRegisters { regs, .. } => {
                        *regs += 8;
                        true
                    }
                    _ => false,
                }, site);
            }
            KStmt::Barrier => {
                remove_at(&mut all, ir, "missing barrier", "a barrier is removed".into(), site);
                mutate_at(&mut all, ir, "misplaced barrier", "a barrier is reached by the first warp only".into(), &|s| {
                    *s = KStmt::If { cond: IExpr::Tid.lt(IExpr::c(32)), then: vec![KStmt::Barrier], els: vec![] };
                    true
                }, site);
            }
            _ => {}
        }
    }
    // A wrong skip rule (issue 23): a `skip_if` that leaves out products
    // one valuation short of the threshold, or every product.
    for site in &list {
        let lower = |s: &mut KStmt| {
            on_skip_condition(s, &mut |c| match &mut c.kind {
                VKind::Binary(crate::syntax::ast::BinOp::Ge, _, t) => match &mut t.kind {
                    VKind::Const(crate::tir::Const::Int(v)) if *v > 0 => {
                        *v -= 1;
                        true
                    }
                    _ => false,
                },
                _ => false,
            })
        };
        mutate_at(&mut all, ir, "skip threshold one low", "a product is skipped at vp(a) + vp(b) >= k - 1".into(), &lower, site);
        let always = |s: &mut KStmt| {
            on_skip_condition(s, &mut |c| {
                *c = VExpr::new(VKind::Const(crate::tir::Const::Bool(true)), crate::types::Dtype::Bool);
                true
            })
        };
        mutate_at(&mut all, ir, "unconditional skip", "every product is skipped".into(), &always, site);
    }
    // A wrong tile skip (issue 23): a valuation tile left stale where its
    // operand slot is written, a minimum over part of the slab, and a
    // threshold one low.
    for site in &list {
        let Some(stmt) = ({
            let mut b = ir.body.clone();
            at(&mut b, site).cloned()
        }) else {
            continue;
        };
        match &stmt {
            KStmt::SharedSet { arr, value: VExpr { kind: VKind::Call(crate::tir::Builtin::Vp, _), .. }, .. } => {
                remove_at(&mut all, ir, "stale valuation tile", format!("a write of `{}` is left out: the slot keeps an older valuation", ir.shared[*arr].name), site);
            }
            KStmt::For { body, .. } if folds_minimum(body) => {
                let name = &ir.ivars[match &stmt { KStmt::For { var, .. } => *var, _ => unreachable!() }];
                mutate_at(&mut all, ir, "partial minimum", format!("the minimum's loop `{}` stops one short of the slab", name), &|s| match s {
                    KStmt::For { end, .. } => {
                        *end = end.clone().sub(IExpr::c(1));
                        true
                    }
                    _ => false,
                }, site);
            }
            KStmt::SkipWhen { .. } => {
                mutate_at(&mut all, ir, "tile skip threshold one low", "a slab is skipped where its minima sum to k - 1".into(), &|s| match s {
                    KStmt::SkipWhen { cond: VExpr { kind: VKind::Binary(crate::syntax::ast::BinOp::Ge, _, t), .. }, .. } => match &mut t.kind {
                        VKind::Const(crate::tir::Const::Int(v)) if *v > 0 => {
                            *v -= 1;
                            true
                        }
                        _ => false,
                    },
                    _ => false,
                }, site);
            }
            _ => {}
        }
    }
    // A skipped k-block: the contraction's slab loop starts one slab late.
    if let Schedule::Contraction { bk, .. } | Schedule::TensorCore { bk, .. } | Schedule::Warpgroup { bk, .. } = ir.schedule {
        for site in &list {
            let mut m = ir.clone();
            if let Some(KStmt::For { var, start, .. }) = at(&mut m.body, site) {
                if m.ivars[*var] == "k0" {
                    *start = IExpr::c(bk as i64);
                    all.push(Mutant { operator: "skipped k-block", description: format!("{}: the first k slab is skipped", ir.name), ir: m });
                }
            }
        }
    }
    // A swapped stage of a ring of slabs: the pipelined loop reads the
    // stage its slab has not reached and fills the one it is in.
    for site in &list {
        let mut m = ir.clone();
        if let Some(KStmt::LetInt { var, value }) = at(&mut m.body, site) {
            if m.ivars[*var] == "stage" {
                // The next stage: `1 - s` for two of them.
                let stages = m.shared.iter().filter_map(|s| s.ring).map(|r| r.stages).max().unwrap_or(2) as i64;
                *value = if stages == 2 { IExpr::c(1).sub(value.clone()) } else { value.clone().add(IExpr::c(1)).rem(IExpr::c(stages)) };
                all.push(Mutant { operator: "swapped stage", description: format!("{}: the ring reads the other stage", ir.name), ir: m });
            }
        }
    }
    all
}

/// Run every mutant of every kernel; the kill rate for the report. A
/// kernel's results are kept in the proof cache: its mutants are a function
/// of its printed IR, and whether each is refuted of the verifier's
/// version (part of every cache row).
pub fn summary(kernels: &[(&crate::tir::Kernel, &KernelIr)], timeout_ms: u32) -> tokitai_contracts::report::MutationSummary {
    use std::collections::BTreeMap;
    let cfg = tokitai_contracts::z3_backend::Config { timeout_ms };
    let key = |k: &crate::tir::Kernel, ir: &KernelIr| crate::cache::Key::builder("mutants").part(crate::cache::fingerprint(k)).part(crate::cache::fingerprint(ir)).part(timeout_ms.to_string()).finish();
    let store = crate::cache::global();
    let mut results: Vec<Option<Vec<(String, String, bool)>>> = kernels.iter().map(|(k, ir)| store.and_then(|c| c.get(&key(k, ir)))).collect();
    let missing: Vec<usize> = (0..kernels.len()).filter(|i| results[*i].is_none()).collect();
    let run = run_kernels(&missing.iter().map(|i| kernels[*i]).collect::<Vec<_>>(), &cfg);
    for (i, outcomes) in missing.into_iter().zip(run) {
        let rows: Vec<(String, String, bool)> = outcomes.into_iter().map(|(m, killed)| (m.operator.to_string(), m.description, killed)).collect();
        if let Some(c) = store {
            c.put(&key(kernels[i].0, kernels[i].1), &rows);
        }
        results[i] = Some(rows);
    }
    let mut by: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut survivors = Vec::new();
    for (operator, description, killed) in results.into_iter().flatten().flatten() {
        let e = by.entry(operator).or_default();
        e.0 += 1;
        if killed {
            e.1 += 1;
        } else {
            survivors.push(description);
        }
    }
    let mutants_n = by.values().map(|v| v.0).sum();
    let refuted = by.values().map(|v| v.1).sum();
    tokitai_contracts::report::MutationSummary { mutants: mutants_n, refuted, by_operator: by.into_iter().map(|(k, (n, r))| (k, n, r)).collect(), survivors }
}

/// Every mutant of each kernel (with the KernelIr it was proved on, as
/// `build::Artifacts::proved_kernels` gives them), with whether the
/// verifier refuted it; mutants are checked in parallel, results in a
/// fixed order.
pub fn run_all(kernels: &[(&crate::tir::Kernel, &KernelIr)], cfg: &tokitai_contracts::z3_backend::Config) -> Vec<(Mutant, bool)> {
    run_kernels(kernels, cfg).into_iter().flatten().collect()
}

/// The mutants of each kernel with whether each was refuted, per kernel;
/// all mutants of all kernels are checked in parallel.
fn run_kernels(kernels: &[(&crate::tir::Kernel, &KernelIr)], cfg: &tokitai_contracts::z3_backend::Config) -> Vec<Vec<(Mutant, bool)>> {
    use rayon::prelude::*;
    if kernels.is_empty() {
        return Vec::new();
    }
    let all: Vec<(usize, &crate::tir::Kernel, Mutant)> = kernels.iter().enumerate().flat_map(|(i, (k, ir))| mutants(k, ir).into_iter().map(move |m| (i, *k, m))).collect();
    let progress = crate::progress::task("mutation test");
    progress.add(all.len());
    let done: Vec<(usize, Mutant, bool)> = all
        .into_par_iter()
        .map(|(i, k, m)| {
            let killed = crate::timings::time(&k.name, "mutation", || super::first_refutation(k, &m.ir, cfg).is_some());
            progress.step();
            (i, m, killed)
        })
        .collect();
    let refuted = done.iter().filter(|d| d.2).count();
    progress.finish(&format!("{} of {} mutants of {} kernels refuted", refuted, done.len(), kernels.len()));
    let mut per: Vec<Vec<(Mutant, bool)>> = kernels.iter().map(|_| Vec::new()).collect();
    for (i, m, killed) in done {
        per[i].push((m, killed));
    }
    per
}
