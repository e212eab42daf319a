//! The p-adic valuation-skip product (issue 23) on the CPU path: the
//! skipping kernels with their certificates equal the dense product and
//! certificate computed independently on the host, on adversarial inputs
//! for both compiled moduli; bad input is refused naming what is wrong.
//! (The same comparison on the GPU is `tokitai-gpucheck --padic`.)

use tokitai_runtime::padic::{adversarial, matmul, product, reference, Form, Matrix, PadicError};
use tokitai_runtime::Device;

#[test]
fn the_skipping_product_equals_the_dense_one_on_adversarial_inputs() {
    let dev = Device::Cpu;
    for (p, k) in [(2u64, 16u32), (3, 10)] {
        let mut skipped_somewhere = false;
        let mut evaluated_somewhere = false;
        for (name, a, b) in adversarial(p, k, 7, 37, 5, 11) {
            let got = matmul(p, k, &a, &b, &dev).unwrap_or_else(|e| panic!("{}^{} {}: {}", p, k, name, e));
            let want = reference(p, k, &a, &b);
            assert_eq!(got, want, "{}^{}: {}", p, k, name);
            for form in [Form::Dense, Form::Skip] {
                assert_eq!(product(form, p, k, &a, &b, &dev).unwrap(), want.c, "{}^{}: {} by {:?}", p, k, name, form);
            }
            skipped_somewhere |= got.skipped.iter().any(|s| *s > 0);
            evaluated_somewhere |= got.evaluated.iter().any(|s| *s > 0);
            match name {
                "zeros" | "every product skipped" => assert!(got.evaluated.iter().all(|e| *e == 0), "{}: {:?}", name, got.evaluated),
                "none skipped" => assert!(got.skipped.iter().all(|s| *s == 0) && got.margin.iter().all(|m| *m == k as i32 + 1), "{}", name),
                "valuations at the threshold" => assert!(got.margin.contains(&0) && got.evaluated.iter().any(|e| *e > 0), "{}: {:?}", name, got.margin),
                _ => {}
            }
        }
        assert!(skipped_somewhere && evaluated_somewhere, "{}^{}: the cases must both skip and compute", p, k);
    }
}

#[test]
fn bad_input_is_refused_naming_the_entry() {
    let dev = Device::Cpu;
    let a = Matrix { rows: 2, cols: 2, data: vec![1, 2, 3, 4] };
    let big = Matrix { rows: 2, cols: 2, data: vec![1, 2, 3, 65536] };
    let e = matmul(2, 16, &a, &big, &dev).unwrap_err();
    assert!(matches!(e, PadicError::NotResidue { matrix: "B", row: 1, col: 1, value: 65536, q: 65536 }), "{:?}", e);
    assert!(e.to_string().contains("matrix B, row 1, column 1: 65536 is not a residue modulo 65536"), "{}", e);
    let e = matmul(5, 3, &a, &a, &dev).unwrap_err();
    assert!(e.to_string().contains("no kernel is compiled for modulus 5^3") && e.to_string().contains("2^16 and 3^10"), "{}", e);
    let short = Matrix { rows: 2, cols: 3, data: vec![1, 2, 3, 4] };
    assert!(matmul(2, 16, &short, &a, &dev).unwrap_err().to_string().contains("matrix A: 2 x 3 needs 6 entries, got 4"));
    let wide = Matrix { rows: 2, cols: 3, data: vec![0; 6] };
    assert!(matches!(matmul(2, 16, &wide, &a, &dev).unwrap_err(), PadicError::Inner { a_cols: 3, b_rows: 2 }));
}

#[test]
fn the_command_line_multiplies_the_example_files_and_names_bad_input() {
    let bin = env!("CARGO_BIN_EXE_tokitai-padic");
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/padic");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().unwrap();
    let (a, b) = (format!("{}/a.txt", dir), format!("{}/b.txt", dir));
    let ok = run(&[&a, &b]);
    let out = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    // Worked by hand: row 1 of A times column 0 of B is four products
    // that 2^16 divides, all skipped.
    assert!(out.contains("14592 50\n0 6912\n6912 123\n"), "{}", out);
    assert!(out.contains("18 products evaluated, 6 skipped"), "{}", out);
    assert!(out.contains("vp(a) + vp(b) = 16 (margin 0"), "{}", out);
    // A modulus with no kernel, a bad modulus, a non-residue entry.
    let none = run(&[&a, &b, "--modulus", "5^3"]);
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("no kernel is compiled for modulus 5^3"));
    let composite = run(&[&a, &b, "--modulus", "6^3"]);
    assert!(String::from_utf8_lossy(&composite.stderr).contains("p = 6 is not prime: 6 = 2 * 3"), "{}", String::from_utf8_lossy(&composite.stderr));
    let small = run(&[&a, &b, "--modulus", "3^10"]);
    assert!(String::from_utf8_lossy(&small.stderr).contains("matrix A, row 2, column 0: 65535 is not a residue modulo 59049"), "{}", String::from_utf8_lossy(&small.stderr));
    let dir = std::env::temp_dir().join(format!("tokitai-padic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ragged = dir.join("ragged.txt");
    std::fs::write(&ragged, "1 2\n3\n").unwrap();
    let bad = run(&[ragged.to_str().unwrap(), &b]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ragged.txt:2: this row has 1 entries, the first has 2"), "{}", String::from_utf8_lossy(&bad.stderr));
    std::fs::remove_dir_all(&dir).ok();
}
