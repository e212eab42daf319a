//! Mutation testing of the verifier: at least 100 bugs injected into the
//! `KernelIr` of the example kernels (off-by-one bounds, dropped guards,
//! wrong strides, swapped dims, missing and misplaced barriers, overlapping
//! tiles, a skipped k-block) must every one be refuted.

use std::collections::BTreeMap;
use std::path::Path;
use tokitai_compiler::build::compile_source;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;
use tokitai_compiler::verify::{first_refutation, mutate::mutants};
use tokitai_contracts::z3_backend::Config;

// Not yet in the default run: it takes many minutes on 2 cores, and two
// obligation kinds it needs are missing (see the notes on issue 3): that a
// register array is fully set before it is stored (lane-loop mutants) and
// that a reduction loop covers its whole range (reduction-loop mutants).
// Run it with `cargo test --release --test mutation -- --ignored`.
#[test]
#[ignore]
fn every_injected_bug_is_refuted() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    files.sort();
    let cfg = Config { timeout_ms: 5_000 };
    let mut per_operator: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut survivors = Vec::new();
    let mut total = 0;
    for f in files {
        let arts = compile_source(SourceFile::new(f.display().to_string(), std::fs::read_to_string(&f).unwrap()), &Target::default_cuda()).unwrap_or_else(|e| panic!("{}", e));
        for (k, ir) in arts.program.kernels.iter().zip(&arts.kernels) {
            for m in mutants(ir) {
                total += 1;
                let killed = first_refutation(k, &m.ir, &cfg);
                let entry = per_operator.entry(m.operator).or_default();
                entry.0 += 1;
                match killed {
                    Some(_) => entry.1 += 1,
                    None => survivors.push(m.description.clone()),
                }
            }
        }
    }
    println!("{:<20} {:>8} {:>8}", "operator", "mutants", "refuted");
    for (op, (n, k)) in &per_operator {
        println!("{:<20} {:>8} {:>8}", op, n, k);
    }
    println!("kill rate: {}/{}", total - survivors.len(), total);
    assert!(total >= 100, "only {} mutants", total);
    assert!(survivors.is_empty(), "{} mutants survived:\n{}", survivors.len(), survivors.join("\n"));
}
