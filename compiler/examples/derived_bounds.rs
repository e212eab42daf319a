//! The bound each kernel's analysis derives in launch-time magnitudes, for
//! every kernel and schedule variant of a `.tk` file, on CUDA sm_90 and HIP
//! gfx90a and gfx942, as tab-separated lines `target kernel output abs
//! rel`: where a tolerance formula comes from (take the largest over the
//! lines, `bench/derived_bounds_max.py`). A kernel whose tolerance is over
//! a numeric domain prints 0.
//!
//! `cargo run --release -p tokitai-compiler --example derived_bounds -- examples/ops/layernorm.tk`
use tokitai_compiler::accuracy::magnitude;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;
fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: derived_bounds FILE.tk");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("{}: {}", path, e);
        std::process::exit(2);
    });
    let checked = tokitai_compiler::driver::check_source(&SourceFile::new(&path, &text));
    let Some(program) = checked.program else {
        eprintln!("{}: does not check (run `tokitaic check` for the diagnostics)", path);
        std::process::exit(1);
    };
    for tname in ["cuda-sm90", "hip-gfx90a", "hip-gfx942"] {
        let target: Target = tname.parse().expect("a known target");
        let irs = tokitai_compiler::schedule::schedule_program(&program, &target).unwrap();
        for (k, ir) in program.kernels.iter().zip(&irs) {
            let mut all = vec![(k.clone(), ir.clone())];
            for v in tokitai_compiler::schedule::schedule_variants(k, &target, ir).unwrap() {
                all.push((v.kernel(k).into_owned(), v.ir.clone()));
            }
            for (kk, vir) in &all {
                let a = magnitude::analyze(kk, vir);
                for o in &a.outputs {
                    println!("{}\t{}\t{}\t{}\t{:e}", tname, vir.name, o.output, a.show(&o.abs), o.rel);
                }
            }
        }
    }
}
