//! Sheaf gluing (issue 23): sections glue exactly when every overlap
//! agrees within the tolerance, as far as the residual kernel's proved
//! bound can tell; otherwise the obstructions name the opens; a bad file
//! is an error naming the item.

use proptest::prelude::*;
use tokitai_runtime::gluing::{glue, Obstruction, Site};
use tokitai_runtime::Device;

fn site(text: &str) -> Site {
    Site::parse(text).unwrap_or_else(|e| panic!("{}", e))
}

fn two_opens(u: &[f64], v: &[f64], tolerance: f64) -> Site {
    site(&format!(
        r#"{{"points": 8, "tolerance": {}, "opens": [{{"name": "U", "points": [0, 1, 2, 3, 4]}}, {{"name": "V", "points": [3, 4, 5, 6, 7]}}],
            "cover": ["U", "V"], "intersections": [{{"opens": ["U", "V"], "points": [3, 4]}}],
            "sections": [{{"open": "U", "values": {:?}}}, {{"open": "V", "values": {:?}}}]}}"#,
        tolerance, u, v
    ))
}

#[test]
fn agreeing_sections_glue_to_the_global_section() {
    let s = site(include_str!("../../examples/sites/two_opens.json"));
    let g = glue(&s, &Device::Cpu).unwrap();
    assert!(g.obstructions.is_empty(), "{:?}", g.obstructions);
    assert_eq!(g.section, Some(vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]));
    assert_eq!(g.overlaps.len(), 1);
    assert_eq!((g.overlaps[0].residual, g.overlaps[0].exact), (0.0, (0.0, 0.0)), "equal halves differ by exactly 0");
}

#[test]
fn every_obstruction_is_found_and_names_its_opens() {
    let s = site(include_str!("../../examples/sites/obstructed.json"));
    let g = glue(&s, &Device::Cpu).unwrap();
    assert_eq!(g.section, None);
    let names = |o: &[&str; 2]| [o[0].to_string(), o[1].to_string()];
    assert!(g.obstructions.contains(&Obstruction::InvalidCover { uncovered: vec![8, 9] }), "{:?}", g.obstructions);
    assert!(g.obstructions.contains(&Obstruction::MissingOverlap { opens: names(&["U", "W"]), points: vec![0] }));
    assert!(g.obstructions.contains(&Obstruction::MissingSection { open: "W".into() }));
    let incompatible: Vec<&Obstruction> = g.obstructions.iter().filter(|o| matches!(o, Obstruction::IncompatibleOverlap { .. })).collect();
    assert_eq!(incompatible.len(), 1, "{:?}", g.obstructions);
    let Obstruction::IncompatibleOverlap { opens, residual, decided, .. } = incompatible[0] else { unreachable!() };
    // U's second value at point 3 is 4, V's is 4.5.
    assert_eq!((opens, *residual, *decided), (&names(&["U", "V"]), 0.5, true));
    assert_eq!(g.obstructions.len(), 4, "{:?}", g.obstructions);
}

#[test]
fn an_overlap_within_the_kernels_rounding_of_the_tolerance_is_not_glued() {
    // The residual is exactly 0.5 (|1.5 - 1| + 0): the proved bound puts it
    // in [0.5 - e, 0.5 + e]. A tolerance above the interval glues, one
    // inside it is undecided (not glued), one below it is incompatible.
    let (u, v) = ([0.0, 0.5, 1.0, 1.5, 2.0], [1.0, 2.0, 2.5, 3.0, 3.5]);
    let g = glue(&two_opens(&u, &v, 0.5001), &Device::Cpu).unwrap();
    assert!(g.section.is_some() && g.obstructions.is_empty(), "{:?}", g.obstructions);
    let exact = g.overlaps[0].exact;
    assert!(exact.0 < 0.5 && 0.5 < exact.1, "{:?}", exact);
    let g = glue(&two_opens(&u, &v, 0.5), &Device::Cpu).unwrap();
    assert!(matches!(g.obstructions.as_slice(), [Obstruction::IncompatibleOverlap { decided: false, .. }]), "{:?}", g.obstructions);
    assert_eq!(g.section, None);
    let g = glue(&two_opens(&u, &v, 0.4999), &Device::Cpu).unwrap();
    assert!(matches!(g.obstructions.as_slice(), [Obstruction::IncompatibleOverlap { decided: true, .. }]), "{:?}", g.obstructions);
}

proptest! {
    /// Soundness of the decision: glued only if the exact residual (in f64
    /// from the f16 values) is within the tolerance; refused as decided
    /// only if it is beyond; and the exact residual is always inside the
    /// interval the proved bound gives.
    #[test]
    fn the_decision_agrees_with_the_exact_residual(
        u in proptest::collection::vec(-300.0f64..300.0, 5),
        delta in proptest::collection::vec(prop_oneof![Just(0.0f64), -1.0f64..1.0, -1e-3f64..1e-3], 2),
        tolerance in prop_oneof![Just(0.0f64), 0.0f64..2.0],
    ) {
        let mut v: Vec<f64> = vec![u[3] + delta[0], u[4] + delta[1], 1.0, 2.0, 3.0];
        v.iter_mut().for_each(|x| *x = half::f16::from_f64(*x).to_f64());
        let s = two_opens(&u, &v, tolerance);
        let g = glue(&s, &Device::Cpu).unwrap();
        let h = |x: f64| half::f16::from_f64(x).to_f64();
        let exact = (h(u[3]) - v[0]).abs() + (h(u[4]) - v[1]).abs();
        let (lo, hi) = g.overlaps[0].exact;
        prop_assert!(lo <= exact && exact <= hi, "exact {} outside [{}, {}]", exact, lo, hi);
        if g.section.is_some() {
            prop_assert!(exact <= tolerance);
        }
        if g.obstructions.iter().any(|o| matches!(o, Obstruction::IncompatibleOverlap { decided: true, .. })) {
            prop_assert!(exact > tolerance);
        }
    }
}

#[test]
fn a_bad_file_is_an_error_naming_the_item() {
    let cases: &[(&str, &str)] = &[
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0, 1]}, {"name": "V", "points": [1, 2, 3]}], "cover": ["U", "V"], "intersections": [{"opens": ["U", "V"], "points": [1, 2]}]}"#, "intersections[0] \"U\" and \"V\": point 2 is not in \"U\""),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0, 1]}], "cover": ["U"], "sections": [{"open": "U", "values": [1]}]}"#, "sections[0] \"U\": 1 values, but the open has 2 points of 1 values each: 2 expected"),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0, 1]}], "cover": ["U", "Z"]}"#, "cover[1]: no open is named \"Z\""),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0, 7]}], "cover": ["U"]}"#, "opens[0] \"U\": point 7 is outside the space"),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0]}, {"name": "U", "points": [1]}], "cover": ["U"]}"#, "opens[1] \"U\": another open has this name"),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0]}], "cover": ["U"], "sections": [{"open": "U", "values": [70000]}]}"#, "beyond f16's 65504"),
        (r#"{"points": 4, "opens": [{"name": "U", "points": [0]}, {"name": "V", "points": [1]}], "inclusions": [["U", "V"]], "cover": ["U"]}"#, "inclusions[0] \"U\" in \"V\": point 0 of \"U\" is not in \"V\""),
        (r#"{"points": 4, "opens": [], "cover": ["U"], "bogus": 1}"#, "the file: not a site file: unknown field `bogus`"),
        (r#"{"points": 4, "opens": [], "cover": ["U"]"#, "the file: not a site file: EOF while parsing"),
        (r#"{"points": 4, "tolerance": -1, "opens": [], "cover": []}"#, "tolerance: -1 is not a finite number >= 0"),
    ];
    for (text, expected) in cases {
        match Site::parse(text) {
            Ok(_) => panic!("accepted: {}", text),
            Err(e) => assert!(e.to_string().contains(expected), "{:?} does not contain {:?}", e.to_string(), expected),
        }
    }
}

#[test]
fn the_command_line_glues_refuses_and_rejects_with_its_exit_codes() {
    let bin = env!("CARGO_BIN_EXE_tokitai-glue");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/sites");
    let run = |site: &str| std::process::Command::new(bin).arg(site).output().unwrap();
    let ok = run(&format!("{}/two_opens.json", dir));
    assert_eq!(ok.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("glued: a global section of 8 points"));
    let refused = run(&format!("{}/obstructed.json", dir));
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stdout).contains("obstruction: missing section: the cover's open \"W\" has none"));
    let missing = run("/nonexistent/site.json");
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/site.json"));
}
