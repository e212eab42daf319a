//! The verification report: its JSON follows the documented schema
//! (contracts/schema/report-v6.schema.json); its Markdown and LaTeX are
//! snapshot-tested with timings redacted.

use serde_json::Value;
use std::path::Path;
use tokitai_compiler::build::compile_source;
use tokitai_compiler::span::SourceFile;
use tokitai_compiler::target::Target;

/// Check a value against the subset of JSON Schema the schema file uses:
/// type, const, enum, required, properties, items.
fn check(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(|x| x.as_str()).collect(),
            _ => vec![],
        };
        let ok = types.iter().any(|t| match *t {
            "object" => v.is_object(),
            "array" => v.is_array(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean(),
            "null" => v.is_null(),
            _ => false,
        });
        if !ok {
            return Err(format!("{}: expected {:?}, found {}", at, types, v));
        }
    }
    if v.is_null() {
        return Ok(());
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            return Err(format!("{}: expected {}, found {}", at, c, v));
        }
    }
    if let Some(Value::Array(e)) = schema.get("enum") {
        if !e.contains(v) {
            return Err(format!("{}: {} is not one of {:?}", at, v, e));
        }
    }
    if let Some(Value::Array(req)) = schema.get("required") {
        for r in req {
            let r = r.as_str().unwrap();
            if v.get(r).is_none() {
                return Err(format!("{}: missing `{}`", at, r));
            }
        }
    }
    if let (Some(Value::Object(props)), Some(obj)) = (schema.get("properties"), v.as_object()) {
        for (k, s) in props {
            if let Some(x) = obj.get(k) {
                check(s, x, &format!("{}.{}", at, k))?;
            }
        }
        for k in obj.keys() {
            if !props.contains_key(k) {
                return Err(format!("{}: `{}` is not in the schema", at, k));
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(items, x, &format!("{}[{}]", at, i))?;
        }
    }
    Ok(())
}

fn report() -> tokitai_contracts::report::Report {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let arts: Vec<_> = ["gelu.tk", "moe.tk"]
        .iter()
        .map(|f| {
            let p = dir.join(f);
            compile_source(SourceFile::new(format!("examples/ops/{}", f), std::fs::read_to_string(p).unwrap()), &Target::default_cuda()).unwrap_or_else(|e| panic!("{}", e))
        })
        .collect();
    tokitai_compiler::report::build(&arts, "cuda-sm90", None)
}

#[test]
fn report_json_follows_the_documented_schema() {
    let schema: Value = serde_json::from_str(include_str!("../../contracts/schema/report-v6.schema.json")).unwrap();
    let r = report();
    let json: Value = serde_json::from_str(&r.to_json()).unwrap();
    check(&schema, &json, "report").unwrap();
    assert_eq!(json["schema_version"], tokitai_contracts::report::SCHEMA_VERSION);
    // Every kernel fully proved, every observed error within tolerance.
    for k in json["kernels"].as_array().unwrap() {
        assert!(k["obligations"].as_array().unwrap().iter().all(|o| o["status"] == "proved"), "{}", k["name"]);
        assert!(k["errors"].as_array().unwrap().iter().all(|e| e["within"] == true), "{}", k["name"]);
    }
    // The checker itself rejects a report that breaks the schema.
    let mut broken = json.clone();
    broken["kernels"][0]["obligations"][0]["status"] = Value::from("maybe");
    assert!(check(&schema, &broken, "report").is_err());
    let mut missing = json.clone();
    missing.as_object_mut().unwrap().remove("non_claims");
    assert!(check(&schema, &missing, "report").is_err());
}

#[test]
fn the_report_lists_each_kernels_tuning_candidates_with_their_proof_status() {
    let r = report();
    let kernel = |n: &str| r.kernels.iter().find(|k| k.name == n).unwrap_or_else(|| panic!("{} reported", n));
    // router_softmax's cached form is proved and emitted.
    let c = kernel("router_softmax").candidates.iter().find(|c| c.name == "router_softmax_c128x1").expect("a cached candidate");
    assert_eq!(c.status, "proved");
    assert!(c.proved > 0 && c.reason.is_empty() && c.schedule.contains("cached in registers"), "{:?}", c);
    // router_bwd's cached forms miss its tolerance: rejected, with why.
    let rejected: Vec<_> = kernel("router_bwd").candidates.iter().filter(|c| c.status == "rejected").collect();
    assert!(!rejected.is_empty());
    assert!(rejected.iter().all(|c| c.proved == 0 && c.reason.contains("exceeds the declared tolerance")), "{:?}", rejected);
    let md = r.to_markdown(true);
    assert!(md.contains("| `router_softmax_c128x1` | row-reduction, cached in registers block=128 runs=1 width=8 |"), "{}", md);
}

#[test]
fn report_markdown_and_latex_snapshots() {
    let r = report();
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("report__markdown", r.to_markdown(true));
        insta::assert_snapshot!("report__latex", r.to_latex(true));
    });
    // The plots (plotters): what stays stable is snapshotted, their titles,
    // axis names, row labels and notes, not the pixels or the ticks.
    let stable = |svg: &str| {
        let (texts, _) = tokitai_contracts::plot::summary(svg);
        texts.into_iter().filter(|t| t.parse::<f64>().is_err() && !t.contains("e-") && !t.contains("e0")).collect::<Vec<_>>().join("\n")
    };
    let errors = r.error_plot_svg();
    assert!(errors.starts_with("<svg"));
    let (labels, _) = tokitai_contracts::plot::summary(&errors);
    let outputs: Vec<String> = r.kernels.iter().flat_map(|k| k.errors.iter().map(move |e| format!("{}.{}", k.name, e.output))).collect();
    for o in &outputs {
        assert_eq!(labels.iter().filter(|l| *l == o).count(), outputs.iter().filter(|x| *x == o).count(), "each bar labelled once: {} in {:?}", o, labels);
    }
    let bounds = r.bounds_plot_svg();
    let sampled = r.kernels.iter().flat_map(|k| &k.errors).filter(|e| e.sampled.max_error > 0.0 && e.sampled.proved_over_observed.is_some_and(f64::is_finite)).count();
    assert_eq!(bounds.matches("<circle").count(), sampled, "one point per output with an observed error");
    insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!("report__error_plot_labels", stable(&errors));
        insta::assert_snapshot!("report__bounds_plot_labels", stable(&bounds));
    });
}

/// A recorded run's counts (`--run-coverage`): per kernel the bound's form
/// and the share of launches covered; the run's totals; the JSON keeps them
/// under the schema.
#[test]
fn a_recorded_run_shows_each_kernels_share_of_covered_launches() {
    use tokitai_contracts::report::{KernelRunCoverage, RunCoverage};
    let mut r = report();
    let mut run = RunCoverage { mode: "strict".into(), device: "cpu (2 threads)".into(), kernels: Default::default() };
    run.kernels.insert("router_bwd".into(), KernelRunCoverage { launches: 40, covered: 40, ..Default::default() });
    run.kernels.insert("gelu_fwd".into(), KernelRunCoverage { launches: 20, covered: 15, first_outside: Some("input `x` has values in [-9, 1], outside its domain [-8, 8]".into()), ..Default::default() });
    r.run = Some(run.clone());
    let md = r.to_markdown(true);
    assert!(md.contains("## Launches of a recorded run"), "{}", md);
    assert!(md.contains("60 launches, 55 covered by a proved bound (91.67%)"), "{}", md);
    assert!(md.contains("| `router_bwd` | magnitude formula | 40 | 40 | 100.00% |  |"), "{}", md);
    assert!(md.contains("| `gelu_fwd` | domain | 20 | 15 | 75.00% | input `x` has values in [-9, 1], outside its domain [-8, 8] |"), "{}", md);
    let json: Value = serde_json::from_str(&r.to_json()).unwrap();
    let schema: Value = serde_json::from_str(include_str!("../../contracts/schema/report-v6.schema.json")).unwrap();
    check(&schema, &json, "report").unwrap();
    let back: RunCoverage = serde_json::from_value(json["run"].clone()).unwrap();
    assert_eq!(back, run);
}

#[test]
fn the_report_shows_a_tuning_table_and_whether_it_was_made_for_this_code() {
    use tokitai_contracts::tuning::{fingerprint, CandidateTiming, ClassTuning, KernelTuning, TableFile, SCHEMA};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/ops");
    let arts = compile_source(SourceFile::new("examples/ops/softmax.tk", std::fs::read_to_string(dir.join("softmax.tk")).unwrap()), &Target::default_cuda()).unwrap();
    let i = arts.program.kernels.iter().position(|k| k.name == "softmax_fwd").unwrap();
    let sources: Vec<(String, String)> = std::iter::once(&arts.kernels[i]).chain(arts.variants[i].iter().map(|v| &v.ir).filter(|ir| !tokitai_compiler::schedule::observe::is_twin(&ir.name))).map(|ir| (ir.name.clone(), tokitai_compiler::codegen::hip::kernel_source(ir))).collect();
    let current = fingerprint("softmax_fwd", sources.iter().map(|(n, s)| (n.as_str(), s.as_str())));
    let timing = |name: &str, ms: Option<f64>| CandidateTiming { name: name.into(), schedule: String::new(), status: if ms.is_some() { "proved" } else { "not admitted" }.into(), ms, note: String::new() };
    let class = ClassTuning {
        class: vec![16, 10],
        dims: vec![65536, 1024],
        choice: "softmax_fwd_c128x1_fi".into(),
        default: "softmax_fwd_c128x1".into(),
        candidates: vec![timing("softmax_fwd_c128x1", Some(0.125)), timing("softmax_fwd_c128x1_fi", Some(0.1)), timing("softmax_fwd_c512x2", None)],
    };
    let table = |fp: &str| {
        let mut t = TableFile { schema: SCHEMA, device: "NVIDIA H200-sm_90".into(), driver: 13000, kernels: Default::default() };
        t.kernels.insert("softmax_fwd".into(), KernelTuning { fingerprint: fp.into(), classes: [("R<=65536 C<=1024".to_string(), class.clone())].into_iter().collect() });
        serde_json::to_vec(&t).unwrap()
    };
    let path = std::env::temp_dir().join(format!("tokitai-report-tuning-{}.json", std::process::id()));
    std::fs::write(&path, table(&current)).unwrap();
    let t = tokitai_compiler::report::read_tuning(&path, std::slice::from_ref(&arts)).unwrap();
    assert!(t.kernels[0].current);
    let c = &t.kernels[0].classes[0];
    assert_eq!((c.choice.as_str(), c.timed, c.untimed), ("softmax_fwd_c128x1_fi", 2, 1));
    assert!((c.speedup.unwrap() - 1.25).abs() < 1e-12);
    let mut r = tokitai_compiler::report::build(std::slice::from_ref(&arts), "cuda-sm90", None);
    r.tuning = Some(t);
    let md = r.to_markdown(true);
    assert!(md.contains("| `softmax_fwd` | `R<=65536 C<=1024` | `softmax_fwd_c128x1_fi` | `softmax_fwd_c128x1` | 1.25x | 2 / 3 | yes |"), "{}", md);
    let schema: Value = serde_json::from_str(include_str!("../../contracts/schema/report-v6.schema.json")).unwrap();
    check(&schema, &serde_json::from_str(&r.to_json()).unwrap(), "report").unwrap();
    // A table made for other code: shown as such, never taken as current.
    std::fs::write(&path, table(&"0".repeat(64))).unwrap();
    let t = tokitai_compiler::report::read_tuning(&path, std::slice::from_ref(&arts)).unwrap();
    assert!(!t.kernels[0].current);
    // Not a table: a clear error naming the file.
    std::fs::write(&path, b"[1, 2]").unwrap();
    let e = tokitai_compiler::report::read_tuning(&path, std::slice::from_ref(&arts)).unwrap_err();
    assert!(e.contains("not a tuning table") && e.contains(&path.display().to_string()), "{}", e);
    let _ = std::fs::remove_file(&path);
}
