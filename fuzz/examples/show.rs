//! Print campaign input N and what the compiler says of it (debugging
//! the generator): `cargo run -p tokitai-fuzz --example show -- SEED ID`.
fn main() {
    let a: Vec<u64> = std::env::args().skip(1).map(|s| s.parse().expect("a number")).collect();
    let (seed, id) = (a.first().copied().unwrap_or(1), a.get(1).copied().unwrap_or(0));
    let (text, origin) = tokitai_fuzz::campaign::input(seed, id, &tokitai_fuzz::campaign::examples(), &tokitai_fuzz::campaign::example_files());
    println!("// input {} of seed {}: {:?}\n{}", id, seed, origin, text);
    let opts = tokitai_compiler::build::Options { verify: false, ..tokitai_compiler::build::Options::new(tokitai_compiler::target::Target::default_cuda()) };
    match tokitai_compiler::build::compile_with(tokitai_compiler::span::SourceFile::new("fuzz.tk", text), &opts) {
        Ok(_) => println!("compiled"),
        Err(e) => println!("{}", e),
    }
}
