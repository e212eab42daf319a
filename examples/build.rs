// Compile every kernel of examples/ops through the build-script API.
fn main() {
    let mut files: Vec<_> = std::fs::read_dir("ops")
        .expect("examples/ops exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tk"))
        .collect();
    files.sort();
    println!("cargo:rerun-if-changed=ops");
    if let Err(e) = tokitai_compiler::Build::new().files(&files).compile() {
        eprintln!("{}", e);
        std::process::exit(1);
    }
}
