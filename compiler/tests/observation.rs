//! The contract monitor's observation of a kernel's outputs (issue 18):
//! the runtime trusts an observed range as the whole output's, so every
//! store to an observed output must fold its value, every kernel of an
//! example and all its variants must observe the same outputs, except a
//! row schedule's observing twins, which all observe the same ones and
//! stand in for a keyed variant or the kernel (the runtime passes the
//! words by the launched variant's list), and only outputs whose every
//! element is written (coverage proved) may be observed.

use std::path::{Path, PathBuf};
use tokitai_compiler::build::compile_source;
use tokitai_compiler::kir::{KStmt, KernelIr};
use tokitai_compiler::schedule::observe::{observing_twin, TWIN_SUFFIX};
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "tk")).collect();
    v.sort();
    v
}

/// Stores to `buf` anywhere in `body`.
fn stores_to(body: &[KStmt], buf: usize) -> usize {
    body.iter()
        .map(|s| match s {
            KStmt::Store { buf: b, .. } | KStmt::VecStore { buf: b, .. } if *b == buf => 1,
            KStmt::For { body, .. } => stores_to(body, buf),
            KStmt::If { then, els, .. } => stores_to(then, buf) + stores_to(els, buf),
            _ => 0,
        })
        .sum()
}

/// Does `line` index `name` as a whole word (`y[`, not `out_y.v[`)?
fn indexes(line: &str, name: &str) -> bool {
    let pat = format!("{}[", name);
    line.match_indices(&pat).any(|(i, _)| i == 0 || !line[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.'))
}

/// The printed lines that store to `name` (a plain or a vector store).
fn printed_stores<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let vector = format!(">*>({} + ", name);
    let plain = |l: &str| indexes(l, name) && l.contains("] = ") && !l.contains(&format!("= {}[", name));
    text.lines().filter(|l| !l.trim_start().starts_with("//")).filter(|l| plain(l) || (l.contains(&vector) && !l.contains("const tk_vec"))).collect()
}

fn check(ir: &KernelIr) {
    let text = tokitai_compiler::codegen::hip::print_kernel(ir);
    for &b in &ir.observed {
        assert!(ir.coverage.iter().any(|c| c.buf == b), "{}: `{}` is observed without a coverage proof", ir.name, ir.bufs[b].name);
        let name = &ir.bufs[b].name;
        let lines = printed_stores(&text, name);
        assert_eq!(lines.len(), stores_to(&ir.body, b), "{}: the printed stores to `{}`:\n{}", ir.name, name, lines.join("\n"));
        for l in lines {
            let folded = l.contains("tk_observe(") || text.lines().skip_while(|x| *x != l).nth(1).is_some_and(|next| next.trim_start().starts_with("if (tk_obs_on) { tk_observe("));
            assert!(folded, "{}: a store to `{}` is not observed: {}", ir.name, name, l.trim());
        }
    }
    // A related pair's check follows every store of each of its outputs.
    for (j, r) in ir.related.iter().enumerate() {
        assert!(ir.observed.contains(&r.square) && ir.observed.contains(&r.bound), "{}: a relation between outputs not observed", ir.name);
        let checks = text.lines().filter(|l| l.contains(&format!("tk_relate(tk_rel{},", j))).count();
        assert!(checks > 0, "{}: relation {} checked nowhere", ir.name, j);
    }
    let flushes = ir.body.iter().filter(|s| matches!(s, KStmt::ObserveFlush { .. })).count();
    assert_eq!(flushes, usize::from(!ir.observed.is_empty()), "{}: one merge, at the end of the body", ir.name);
    if !ir.observed.is_empty() {
        assert!(matches!(ir.body.last(), Some(KStmt::ObserveFlush { .. })), "{}: the merge ends the body", ir.name);
    }
}

#[test]
fn every_store_to_an_observed_output_is_folded_and_variants_observe_alike() {
    let (mut observed, mut twins) = (0, 0);
    for target in [Target::default_cuda(), Target::default_hip()] {
        for path in examples() {
            let text = std::fs::read_to_string(&path).unwrap();
            let arts = compile_source(SourceFile::new(path.display().to_string(), text), &target).unwrap_or_else(|e| panic!("{}", e));
            for ((ir, variants), k) in arts.kernels.iter().zip(&arts.variants).zip(&arts.program.kernels) {
                check(ir);
                observed += usize::from(!ir.observed.is_empty());
                let names = |x: &KernelIr| x.observed.iter().map(|b| x.bufs[*b].name.clone()).collect::<Vec<_>>();
                // A row schedule's observing twins (`<name>_obs`) all observe
                // the same outputs, the rest what the kernel observes.
                let is_twin = |x: &KernelIr| x.name.ends_with(TWIN_SUFFIX);
                let twin_names = variants.iter().find(|v| is_twin(&v.ir)).map(|v| names(&v.ir));
                for v in variants {
                    check(&v.ir);
                    if is_twin(&v.ir) {
                        twins += 1;
                        assert!(ir.observed.is_empty(), "{}: a twin of a kernel that observes itself", v.ir.name);
                        assert_eq!(Some(names(&v.ir)), twin_names, "{}: twins observe other outputs", v.ir.name);
                        assert!(!v.ir.observed.is_empty(), "{}: a twin that observes nothing", v.ir.name);
                        assert!(v.keys.0 > v.keys.1, "{}: a twin is launched only in place of its original, never by its key", v.ir.name);
                        // Its original: the kernel or a variant a launch takes by key.
                        let original = v.ir.name.strip_suffix(TWIN_SUFFIX).unwrap();
                        let keyed = variants.iter().any(|o| o.ir.name == original && o.keys.0 <= o.keys.1 && o.guard == v.guard);
                        assert!(original == ir.name || keyed, "{}: no original to stand in for", v.ir.name);
                    } else {
                        assert_eq!(names(&v.ir), names(ir), "{}: variant {} observes other outputs", ir.name, v.ir.name);
                    }
                }
                // Every keyed variant that can have a twin has one (the
                // warp-specialised contractions have none: `_ws`, `_ws8`).
                for o in variants.iter().filter(|o| o.keys.0 <= o.keys.1) {
                    let twin = format!("{}{}", o.ir.name, TWIN_SUFFIX);
                    let has = variants.iter().any(|v| v.ir.name == twin);
                    assert_eq!(has, observing_twin(&o.ir, k).is_some(), "{}: its observing twin", o.ir.name);
                    assert!(!(has && (o.ir.name.ends_with("_ws") || o.ir.name.ends_with("_ws8"))), "{}: a warp-specialised form with a twin", o.ir.name);
                }
            }
        }
    }
    assert!(observed > 15, "only {} kernels observe their outputs", observed);
    assert!(twins > 40, "only {} observing twins", twins);
}

/// `body`'s statements, nested ones included, in order.
fn flat(body: &[KStmt]) -> Vec<&KStmt> {
    body.iter()
        .flat_map(|s| {
            let inner = match s {
                KStmt::For { body, .. } => flat(body),
                KStmt::If { then, els, .. } => flat(then).into_iter().chain(flat(els)).collect(),
                _ => Vec::new(),
            };
            std::iter::once(s).chain(inner)
        })
        .collect()
}

/// AdamW checks `m * m <= 64 v` on the moments it stores: one check for
/// each element of every pair of stores, none where a store of either is
/// unpaired (the relation is then left to the probes), and the words are
/// a block after the outputs' (the prover checks the merge in bounds).
#[test]
fn adamw_checks_its_moments_relation_on_every_pair_it_stores() {
    let path = examples().into_iter().find(|p| p.ends_with("optim.tk")).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let arts = compile_source(SourceFile::new(path.display().to_string(), text), &Target::default_cuda()).unwrap();
    let (ir, k) = arts.kernels.iter().zip(&arts.program.kernels).find(|(ir, _)| ir.name == "adamw").unwrap();
    assert_eq!(ir.related.len(), 1, "adamw relates m and v");
    let r = &ir.related[0];
    assert_eq!((ir.bufs[r.square].name.as_str(), ir.bufs[r.bound].name.as_str(), r.factor), ("m", "v", 64.0));
    assert_eq!(k.relations[r.relation].text, "m * m <= 64.0 * v");
    assert_eq!(ir.observation_blocks(), 4, "theta, m, v, and the relation");
    // One check per element stored: a vector store of 8 takes 8 checks.
    let stmts = flat(&ir.body);
    let stored: u32 = stmts.iter().map(|s| match s {
        KStmt::Store { buf, .. } if *buf == r.bound => 1,
        KStmt::VecStore { buf, width, .. } if *buf == r.bound => *width,
        _ => 0,
    }).sum();
    let checks = stmts.iter().filter(|s| matches!(s, KStmt::ObserveRelation { fold: 0, .. })).count() as u32;
    assert_eq!(checks, stored, "a check for each element of `v` stored");
    // SGD has no relation between its outputs (`g * g <= nsq` is between inputs).
    let sgd = arts.kernels.iter().find(|ir| ir.name == "sgd_momentum").unwrap();
    assert!(sgd.related.is_empty());
}

/// A store of `m` with no partner store of `v` beside it: the relation is
/// not checked at all (a partial check would vouch for values it never
/// saw), and the kernel still observes both outputs.
#[test]
fn an_unpaired_store_leaves_the_relation_to_the_probes() {
    let src = r#"
kernel rel(m: inout f32[N], v: inout f32[N], g: f32[N])
    requires N >= 1, N <= 1000000
    domain m in [-1.0, 1.0], v in [0.0, 1.0], g in [-1.0, 1.0], m * m <= 4.0 * v
{
    m[i] = 0.5 * m[i] + g[i];
    v[i] = v[i] + g[i] * g[i];
}
"#;
    let arts = compile_source(SourceFile::new("rel.tk", src), &Target::default_cuda()).unwrap_or_else(|e| panic!("{}", e));
    let ir = &arts.kernels[0];
    assert_eq!(ir.observed.len(), 2, "both outputs observed");
    // Paired as lowered: a check for each element stored.
    let paired = !ir.related.is_empty();
    let mut unpaired = ir.clone();
    // Drop every store of `v`: each store of `m` is then alone.
    fn drop_stores(body: &mut Vec<KStmt>, buf: usize) {
        body.retain(|s| !matches!(s, KStmt::Store { buf: b, .. } | KStmt::VecStore { buf: b, .. } if *b == buf));
        for s in body {
            match s {
                KStmt::For { body, .. } => drop_stores(body, buf),
                KStmt::If { then, els, .. } => {
                    drop_stores(then, buf);
                    drop_stores(els, buf);
                }
                _ => {}
            }
        }
    }
    let v = unpaired.bufs.iter().position(|b| b.name == "v").unwrap();
    drop_stores(&mut unpaired.body, v);
    let mut body = unpaired.body.clone();
    // Remove the checks `relate` placed, then relate again.
    fn drop_checks(body: &mut Vec<KStmt>) {
        body.retain(|s| !matches!(s, KStmt::ObserveRelation { .. }));
        for s in body {
            match s {
                KStmt::For { body, .. } => drop_checks(body),
                KStmt::If { then, els, .. } => {
                    drop_checks(then);
                    drop_checks(els);
                }
                _ => {}
            }
        }
    }
    drop_checks(&mut body);
    unpaired.body = body;
    unpaired.related.clear();
    tokitai_compiler::schedule::observe::relate(&mut unpaired, &arts.program.kernels[0]);
    assert!(paired, "the lowered kernel pairs its stores");
    assert!(unpaired.related.is_empty(), "an unpaired store of `m`: no check");
    assert!(!flat(&unpaired.body).iter().any(|s| matches!(s, KStmt::ObserveRelation { .. })));
}
