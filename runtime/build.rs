//! Compile the runtime's kernels (`examples/ops/*.tk`, the one set of
//! sources the examples, tests and benchmarks share) with the compiler's
//! build-script API, proving every obligation: a refuted or unproved kernel
//! fails the build. Each file becomes `OUT_DIR/<stem>.rs` with typed
//! launchers on this crate; `OUT_DIR/abi.rs` holds the support code they
//! share.

use std::path::Path;

fn main() {
    let ops = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut files: Vec<_> = std::fs::read_dir(&ops)
        .expect("examples/ops exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tk"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed={}", ops.display());
    // The pointwise schedule's two-vector rule can be moved for a measurement.
    println!("cargo:rerun-if-env-changed=TOKITAI_TWO_VECTOR_BYTES");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let abi = Path::new(&out).join("abi.rs");
    if let Err(e) = tokitai_compiler::build::write_atomic(&abi, tokitai_compiler::codegen::bindings::support_source().as_bytes()) {
        eprintln!("{}", e);
        std::process::exit(1);
    }
    // Kernels that did not change are not proved again: the outcomes are
    // in the persistent proof cache (`$TOKITAI_CACHE_DIR`, else the user's
    // cache directory), shared with `tokitaic`.
    tokitai_compiler::cache::configure(tokitai_compiler::cache::Location::Default);
    let build = tokitai_compiler::Build::new().files(&files).verify(true).support_module("crate::abi").launchers("crate");
    if let Err(e) = build.compile() {
        eprintln!("{}", e);
        std::process::exit(1);
    }
}
