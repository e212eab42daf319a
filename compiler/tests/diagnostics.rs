//! Every check of the front end, shown on a program that fails it: the
//! rendered diagnostic (file:line:col, caret, help) is snapshot-tested.

use tokitai_compiler::span::SourceFile;

/// (snapshot name, expected code, program)
const BAD: &[(&str, &str, &str)] = &[
    ("parse_unexpected_token", "E0102", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] }"),
    ("parse_eof", "E0101", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i];"),
    ("parse_bad_char", "E0100", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] @ 2.0; }"),
    ("parse_unterminated_comment", "E0100", "/* never closed\nkernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; }"),
    ("parse_number_suffix", "E0100", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] * 2.0f; }"),
    ("parse_assign_in_requires", "E0102", "kernel f(x: f32[N]) -> (y: f32[N]) requires N = 4 { y[i] = x[i]; }"),
    ("unknown_name", "E0201", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = xx[i]; }"),
    ("unknown_function", "E0201", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = tanhh(x[i]); }"),
    ("unbound_index", "E0207", "kernel f(x: f32[N, M]) -> (y: f32[N]) { y[i] = x[i, j]; }"),
    ("duplicate_param", "E0202", "kernel f(x: f32[N], x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; }"),
    ("duplicate_item", "E0208", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; }\nkernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; }"),
    ("assign_to_input", "E0604", "kernel f(x: f32[N]) -> (y: f32[N]) { x[i] = 1.0; y[i] = x[i]; }"),
    ("lhs_rank", "E0403", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i, j] = x[i]; }"),
    ("rhs_rank", "E0403", "kernel f(x: f32[N, M]) -> (y: f32[N]) { y[i] = x[i]; }"),
    ("narrowing", "E0302", "kernel f(x: f32[N]) -> (y: f16[N]) { y[i] = x[i] * 2.0; }"),
    ("int_float_mix", "E0301", "kernel f(x: f32[N], k: i32[N]) -> (y: f32[N]) { y[i] = x[i] + k[i]; }"),
    ("int_literal_in_float", "E0301", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] * 2; }"),
    ("bool_arithmetic", "E0304", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = select((x[i] > 0.0) + true, 1.0, 0.0); }"),
    ("float_remainder", "E0304", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] % 2.0; }"),
    ("float_index", "E0304", "kernel f(x: f32[N], p: f32[N]) -> (y: f32[N]) { y[i] = x[p[i]]; }"),
    ("shape_mismatch", "E0401", "kernel f(a: f32[M, K], b: f32[L, N]) -> (c: f32[M, N]) { c[m, n] = sum(k) a[m, k] * b[k, n]; }"),
    ("literal_shape_mismatch", "E0401", "kernel f(a: f32[4]) -> (c: f32[5]) { c[i] = a[i]; }"),
    ("cannot_infer_range", "E0404", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i] + sum(k) 1.0; }"),
    ("race_neighbour", "E0501", "kernel f(x: inout f32[N]) { x[i] = x[i + 1] * 0.5; }"),
    ("race_transposed", "E0501", "kernel f(x: f32[N, N]) -> (y: f32[N, N]) { t[i, j] = x[i, j] * 2.0; y[i, j] = t[j, i]; }"),
    ("read_before_defined", "E0605", "kernel f(x: f32[N]) -> (y: f32[N], z: f32[N]) { y[i] = z[i]; z[i] = x[i]; }"),
    ("self_reference", "E0605", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = y[i] + x[i]; }"),
    ("output_never_defined", "E0602", "kernel f(x: f32[N]) -> (y: f32[N], z: f32[N]) { y[i] = x[i]; }"),
    ("defined_twice", "E0601", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x[i]; y[i] = 2.0 * x[i]; }"),
    ("unused_intermediate", "E0603", "kernel f(x: f32[N]) -> (y: f32[N]) { t[i] = x[i] * 2.0; y[i] = x[i]; }"),
    ("indirect_without_contract", "E0701", "kernel f(x: f32[T, D], idx: i32[R]) -> (y: f32[R, D]) { y[r, d] = x[idx[r], d]; }"),
    ("indirect_contract_too_wide", "E0702", "kernel f(x: f32[T, D], idx: i32[R]) -> (y: f32[R, D]) requires idx in [0, R) { y[r, d] = x[idx[r], d]; }"),
    ("tolerance_on_input", "E0708", "kernel f(x: f32[N]) -> (y: f32[N]) tolerance x: abs 1e-3 { y[i] = x[i]; }"),
    ("tolerance_kind", "E0708", "kernel f(x: f32[N]) -> (y: f32[N]) tolerance y: absolute 1e-3 { y[i] = x[i]; }"),
    ("empty_domain", "E0707", "kernel f(x: f32[N]) -> (y: f32[N]) domain x in [1.0, -1.0] { y[i] = x[i]; }"),
    ("requires_contradiction", "E0704", "kernel f(x: f32[N]) -> (y: f32[N]) requires N == 4, N == 5 { y[i] = x[i]; }"),
    ("fn_recursion", "E0213", "fn g(v: f32) -> f32 { g(v) }\nkernel f(x: f32[N]) -> (y: f32[N]) { y[i] = g(x[i]); }"),
    ("fn_arity", "E0305", "fn g(v: f32) -> f32 { v * v }\nkernel f(x: f32[N]) -> (y: f32[N]) { y[i] = g(x[i], x[i]); }"),
    ("builtin_arity", "E0305", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = exp(x[i], 2.0); }"),
    ("reduction_range_start", "E0406", "kernel f(x: f32[N]) -> (y: f32) { y = sum(k in 1..N) x[k]; }"),
    ("no_kernel", "E0209", "fn g(v: f32) -> f32 { v }"),
    ("tensor_as_scalar", "E0405", "kernel f(x: f32[N]) -> (y: f32[N]) { y[i] = x * 2.0; }"),
    ("modulus_not_prime", "E0330", "kernel f(a: u32[N]) -> (c: u32[N]) modulus 91^2 requires a in [0, 8281) { c[i] = mulmod(a[i], a[i]); }"),
    ("modulus_too_large", "E0330", "kernel f(a: u32[N]) -> (c: u32[N]) modulus 3^21 requires a in [0, 9) { c[i] = mulmod(a[i], a[i]); }"),
    ("modulus_twice", "E0330", "kernel f(a: u32[N]) -> (c: u32[N]) modulus 2^8 modulus 3^5 requires a in [0, 243) { c[i] = mulmod(a[i], a[i]); }"),
    ("residue_without_modulus", "E0331", "kernel f(a: u32[N]) -> (c: u32[N]) requires a in [0, 256) { c[i] = mulmod(a[i], a[i]); }"),
    ("operand_not_a_residue", "E0332", "kernel f(a: u32[N], b: u32[N]) -> (c: u32[N]) modulus 2^8 requires a in [0, 256) { c[i] = mulmod(a[i], b[i]); }"),
    ("operand_range_too_wide", "E0332", "kernel f(a: u32[N]) -> (c: u32[N]) modulus 2^8 requires a in [0, 257) { c[i] = addmod(a[i], 1); }"),
    ("summod_of_floats", "E0304", "kernel f(a: f32[N, K]) -> (c: u32[N]) modulus 2^8 { c[i] = summod(k) a[i, k]; }"),
    ("scalar_indexed", "E0206", "kernel f(x: f32[N], s: f32) -> (y: f32[N]) { y[i] = x[i] * s[i]; }"),
    ("tensor_in_requires", "E0206", "kernel f(x: f32[N]) -> (y: f32[N]) requires x > 0.0 { y[i] = x[i]; }"),
    ("no_schedule", "E0801", "kernel f(x: f32[N], z: f32[M]) -> (y: f32[N], w: f32[M]) { y[i] = x[i]; w[j] = z[j]; }"),
    ("shadowing_index", "E0204", "kernel f(x: f32[N]) -> (y: f32[N]) { y[N] = x[N]; }"),
    ("exp_of_int", "E0304", "kernel f(k: i32[N]) -> (y: f32[N]) { y[i] = exp(k[i]); }"),
];

#[test]
fn every_check_has_a_diagnostic() {
    assert!(BAD.len() >= 30);
    for (name, code, src) in BAD {
        let file = SourceFile::new(format!("{}.tk", name), *src);
        let checked = match tokitai_compiler::driver::check_source(&file) {
            c if c.program.is_none() => c,
            _ => {
                // Scheduling errors surface at compile time.
                match tokitai_compiler::build::compile_source(file.clone(), &tokitai_compiler::target::Target::default_cuda()) {
                    Err(tokitai_compiler::build::BuildError::Source { diagnostics, .. }) => tokitai_compiler::driver::Checked { program: None, diagnostics },
                    _ => panic!("{} compiled but must fail with {}", name, code),
                }
            }
        };
        let errors: Vec<_> = checked.diagnostics.iter().filter(|d| d.is_error()).collect();
        assert!(errors.iter().any(|d| d.code == *code), "{}: expected {}, got {:?}", name, code, errors.iter().map(|d| d.code).collect::<Vec<_>>());
        let rendered: String = checked.diagnostics.iter().map(|d| d.render(&file)).collect::<Vec<_>>().join("\n");
        assert!(rendered.contains(&format!("{}.tk:", name)), "diagnostic names the file and position:\n{}", rendered);
        insta::with_settings!({ snapshot_path => "../../snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(format!("diag__{}", name), rendered);
        });
    }
}
