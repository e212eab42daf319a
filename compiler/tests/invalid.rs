//! The held programs of `examples/invalid/`: each passes the checker but
//! must be refuted by the prover, with the obligation its first line names.
//! Their counterexample diagnostics are snapshot-tested.

use std::path::Path;
use tokitai_compiler::build::{compile_source, BuildError};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

#[test]
fn every_invalid_program_is_refuted_with_its_obligation() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/invalid");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    files.sort();
    assert!(files.len() >= 6);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let expect = text.lines().next().and_then(|l| l.strip_prefix("// expect: ")).unwrap_or_else(|| panic!("{} lacks an `// expect:` line", f.display())).to_string();
        let code = expect.split_whitespace().next().unwrap();
        let name = format!("examples/invalid/{}", f.file_name().unwrap().to_string_lossy());
        // The checker accepts it: only the prover may reject it.
        let checked = tokitai_compiler::driver::check_source(&SourceFile::new(name.clone(), text.clone()));
        assert!(checked.program.is_some(), "{} must pass the checker", name);
        match compile_source(SourceFile::new(name.clone(), text), &Target::default_cuda()) {
            Err(BuildError::Source { diagnostics, rendered, .. }) => {
                assert!(diagnostics.iter().any(|d| d.code == code), "{}: expected {}, got:\n{}", name, code, rendered);
                assert!(rendered.contains("counterexample") || code == "E0901", "{}: the refutation names a counterexample:\n{}", name, rendered);
                let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
                let first = diagnostics.iter().find(|d| d.code == code).unwrap();
                let src = SourceFile::new(name.clone(), std::fs::read_to_string(&f).unwrap());
                insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
                    insta::assert_snapshot!(format!("refuted__{}", stem), first.render(&src));
                });
            }
            Ok(_) => panic!("{} compiled, but must be refuted with {}", name, code),
            Err(e) => panic!("{}: {}", name, e),
        }
    }
}
