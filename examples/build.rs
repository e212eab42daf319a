// Compile every kernel of examples/ops through the build-script API.
fn main() {
    let mut files: Vec<_> = std::fs::read_dir("ops")
        .expect("examples/ops exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tk"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed=ops");
    // Code only: the runtime's build script proves these same kernels. Said
    // here, not left to the `verify` feature: Cargo unifies the features of
    // build dependencies, and the runtime's turns it on for this one too
    // (the proofs and tolerance walks at build-script opt-level took 19 s
    // of CI's build, issue 17).
    if let Err(e) = tokitai_compiler::Build::new().files(&files).verify(false).compile() {
        eprintln!("{}", e);
        std::process::exit(1);
    }
}
