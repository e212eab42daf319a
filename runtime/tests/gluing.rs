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

/// The router's cover (`gluing::router`): blocks that route a sample
/// alike glue to one routing; a block that routes it otherwise is named
/// by the obstructions of both its overlaps.
#[test]
fn the_routers_cover_glues_where_adjacent_blocks_agree() {
    use tokitai_runtime::gluing::{router::block_name, router_site};
    let same: Vec<f32> = (0..9).flat_map(|_| [0.5f32, 0.25, 0.125, 0.125]).collect();
    let g = glue(&router_site(&same, 1e-3).unwrap(), &Device::Cpu).unwrap();
    assert!(g.obstructions.is_empty(), "{:?}", g.obstructions);
    assert_eq!(g.overlaps.len(), 8);
    assert_eq!(g.section.as_ref().map(Vec::len), Some(17 * 4));
    assert_eq!(&g.section.unwrap()[..4], &[0.5, 0.25, 0.125, 0.125]);

    let mut odd = same.clone();
    odd[3 * 4..4 * 4].copy_from_slice(&[0.25, 0.5, 0.125, 0.125]);
    let g = glue(&router_site(&odd, 0.1).unwrap(), &Device::Cpu).unwrap();
    assert_eq!(g.section, None);
    let named: Vec<[String; 2]> = g.obstructions.iter().map(|o| match o {
        Obstruction::IncompatibleOverlap { opens, residual, decided: true, .. } => {
            assert_eq!(*residual, 0.5, "|0.5 - 0.25| + |0.25 - 0.5|");
            opens.clone()
        }
        other => panic!("unexpected obstruction {:?}", other),
    }).collect();
    assert_eq!(named, vec![[block_name(2), block_name(3)], [block_name(3), block_name(4)]]);
    assert_eq!(block_name(8), "numerical");
    // The wrong number of values is an error naming the sections.
    let e = router_site(&same[..35], 0.1).unwrap_err();
    assert!(e.to_string().contains("router sections") && e.to_string().contains("36"), "{}", e);
}

/// The site of a real sample: the router's forward pass on the CPU
/// (`moe::sheaf::forward`), one sample's block routings as sections. Each
/// overlap's computed residual is the L1 distance of the two blocks'
/// routings (rounded to f16, as the site stores them) within the proved
/// interval, and gluing accepts exactly the overlaps whose interval lies
/// below the tolerance.
#[test]
fn a_real_samples_block_routings_form_a_site() {
    use half::f16;
    use tokitai_runtime::gluing::router_site;
    use tokitai_runtime::moe::sheaf::{block_of_columns, forward};
    use tokitai_runtime::{DType, Tensor};
    let (b, d) = (3usize, 96usize);
    let mut seed = 7u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as f64 / (1u64 << 31) as f64
    };
    let x: Vec<f16> = (0..b * d).map(|_| f16::from_f64(next())).collect();
    let w: Vec<f16> = (0..d * 6).map(|_| f16::from_f64(0.25 * next() - 0.125)).collect();
    let logits: Vec<f16> = (0..b * 6).map(|_| f16::from_f64(4.0 * next() - 2.0)).collect();
    let dev = Device::Cpu;
    let x = Tensor::from_f16(&[b, d], x).unwrap();
    let w = Tensor::from_f16(&[d, 6], w).unwrap();
    let logits = Tensor::from_f16(&[b, 6], logits).unwrap();
    let blk = Tensor::from_i32(&[d], block_of_columns()).unwrap();
    let mut probs = Tensor::output(&[b, 4], DType::F32, &dev).unwrap();
    let tape = forward(&dev, &x, &logits, &w, &blk, &mut probs).unwrap();
    let routings = tape.block_routings(1).unwrap();
    assert!(tape.block_routings(3).is_err(), "sample 3 of 3 is outside the batch");
    let rounded: Vec<f64> = routings.iter().map(|v| f16::from_f32(*v).to_f64()).collect();
    let l1 = |u: usize| (0..4).map(|e| (rounded[u * 4 + e] - rounded[(u + 1) * 4 + e]).abs()).sum::<f64>();
    // A tolerance in the middle of the distances, so some overlaps agree
    // and some do not.
    let mut distances: Vec<f64> = (0..8).map(l1).collect();
    distances.sort_by(f64::total_cmp);
    let tolerance = (distances[3] + distances[4]) / 2.0;
    let g = glue(&router_site(&routings, tolerance).unwrap(), &dev).unwrap();
    assert_eq!(g.overlaps.len(), 8);
    for (u, o) in g.overlaps.iter().enumerate() {
        let exact = l1(u);
        assert!(o.exact.0 <= exact && exact <= o.exact.1, "overlap {}: L1 {} outside {:?}", u, exact, o.exact);
        assert_eq!(o.agrees, o.exact.1 <= tolerance, "overlap {}", u);
        if o.agrees {
            assert!(exact <= tolerance);
        }
    }
    assert!(g.overlaps.iter().any(|o| o.agrees) && g.overlaps.iter().any(|o| !o.agrees), "{:?} at {}", distances, tolerance);
    assert_eq!(g.section.is_some(), g.obstructions.is_empty());
}

/// The router example in `examples/sites` is what `router_site_file`
/// writes for nine blocks of which one (cat3) routes otherwise.
#[test]
fn the_router_example_file_is_the_router_site() {
    let mut probs: Vec<f32> = (0..9).flat_map(|_| [0.5f32, 0.25, 0.125, 0.125]).collect();
    probs[12..16].copy_from_slice(&[0.25, 0.5, 0.125, 0.125]);
    let text = tokitai_runtime::gluing::router_site_file(&probs, 0.1).unwrap();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/sites/router.json");
    if std::env::var_os("TOKITAI_WRITE_EXAMPLES").is_some() {
        std::fs::write(path, format!("{}\n", text)).unwrap();
    }
    assert_eq!(std::fs::read_to_string(path).unwrap().trim_end(), text, "rerun with TOKITAI_WRITE_EXAMPLES=1 to rewrite it");
}
