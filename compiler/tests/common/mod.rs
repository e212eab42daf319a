//! Helpers shared by the integration tests that edit a KernelIr by hand.

use std::path::Path;
use tokitai_compiler::build::{compile_source, Artifacts};
use tokitai_compiler::kir::{Fragment, IExpr, KStmt};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

/// An example of `examples/ops` compiled (and so verified) for `target`.
pub fn compile_example(file: &str, target: &Target) -> Artifacts {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops").join(file);
    compile_source(SourceFile::new(path.display().to_string(), std::fs::read_to_string(&path).unwrap()), target).unwrap_or_else(|e| panic!("{}", e))
}

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
