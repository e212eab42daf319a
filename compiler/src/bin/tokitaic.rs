fn main() {
    let path = std::env::args().nth(1).unwrap();
    let target: tokitai_compiler::target::Target = std::env::args().nth(2).unwrap_or("hip-gfx90a".into()).parse().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let f = tokitai_compiler::span::SourceFile::new(path, text);
    let c = tokitai_compiler::driver::check_source(&f);
    for d in &c.diagnostics { eprintln!("{}", d.render(&f)); }
    let p = c.program.unwrap();
    match tokitai_compiler::schedule::schedule_program(&p, &target) {
        Ok(irs) => print!("{}", tokitai_compiler::codegen::hip::module_source(&irs)),
        Err(ds) => for d in ds { eprintln!("{}", d.render(&f)); }
    }
}
