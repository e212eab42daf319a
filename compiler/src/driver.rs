//! The compiler's entry points: source text to checked program, to
//! `KernelIr`, to artifacts. The CLI and the build-script API both call these.

use crate::diag::{Diagnostic, Diagnostics};
use crate::span::SourceFile;
use crate::tir::Program;

/// The result of checking one file: the program (when there is no error)
/// and every diagnostic, warnings included.
pub struct Checked {
    pub program: Option<Program>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Parse and check a source file. Never panics.
pub fn check_source(file: &SourceFile) -> Checked {
    let ast = match crate::syntax::parse_file(&file.text) {
        Ok(ast) => ast,
        Err(d) => return Checked { program: None, diagnostics: vec![d] },
    };
    let (program, diagnostics) = crate::check::check_file(&ast, file);
    Checked { program, diagnostics }
}

/// Parse and check; errors (with warnings) as `Diagnostics`.
pub fn check(file: &SourceFile) -> Result<(Program, Vec<Diagnostic>), Diagnostics> {
    let checked = check_source(file);
    match checked.program {
        Some(p) => Ok((p, checked.diagnostics)),
        None => Err(Diagnostics(checked.diagnostics)),
    }
}
