//! Helpers shared by the integration tests that edit a KernelIr by hand.

use tokitai_compiler::kir::{Fragment, IExpr, KStmt};

/// Rewrite the base of every fragment load of operand `which`; whether
/// there was one.
pub fn edit_fragment_loads(body: &mut [KStmt], which: Fragment, f: &dyn Fn(IExpr) -> IExpr) -> bool {
    let mut any = false;
    for s in body {
        any |= match s {
            KStmt::FragmentLoad { src, which: w, .. } if *w == which => {
                src.base = f(src.base.clone());
                true
            }
            KStmt::For { body, .. } => edit_fragment_loads(body, which, f),
            KStmt::If { then, els, .. } => edit_fragment_loads(then, which, f) | edit_fragment_loads(els, which, f),
            _ => false,
        };
    }
    any
}
