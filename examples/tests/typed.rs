//! The typed oracle wrappers: named dims, element-typed slices.

use half::f16;
use tokitai_examples::{moe, softmax};

#[test]
fn typed_softmax_rows_sum_to_one() {
    let dims = softmax::softmax_fwd::Dims { R: 3, C: 5 };
    let x: Vec<f16> = (0..15).map(|i| f16::from_f32((i as f32 * 0.37).sin() * 4.0)).collect();
    let mut y = vec![f16::ZERO; 15];
    softmax::softmax_fwd::mirror_typed(dims, &x, &mut y).unwrap();
    let exact = softmax::softmax_fwd::exact_typed(dims, &x).unwrap();
    for r in 0..3 {
        let row: f64 = exact.y[r * 5..r * 5 + 5].iter().sum();
        assert!((row - 1.0).abs() < 1e-12, "exact row {} sums to {}", r, row);
        let mrow: f32 = y[r * 5..r * 5 + 5].iter().map(|v| v.to_f32()).sum();
        assert!((mrow - 1.0).abs() < 5e-3, "mirror row {} sums to {}", r, mrow);
    }
}

#[test]
fn typed_top2_picks_the_two_largest_with_ties_to_the_lower_index() {
    let dims = moe::top2::Dims { R: 2, E: 4 };
    let p = [0.1f32, 0.4, 0.4, 0.1, 0.7, 0.1, 0.15, 0.05];
    let (mut i0, mut i1, mut w0, mut w1) = (vec![0i32; 2], vec![0i32; 2], vec![0f32; 2], vec![0f32; 2]);
    moe::top2::mirror_typed(dims, &p, &mut i0, &mut i1, &mut w0, &mut w1).unwrap();
    assert_eq!((i0.clone(), i1.clone()), (vec![1, 0], vec![2, 2]));
    assert_eq!((w0, w1), (vec![0.4, 0.7], vec![0.4, 0.15]));
}

#[test]
fn typed_gather_rejects_an_index_outside_its_contract() {
    let dims = moe::gather_rows::Dims { T: 2, D: 3, R: 1 };
    let x = vec![f16::ONE; 6];
    let mut y = vec![f16::ZERO; 3];
    let err = moe::gather_rows::mirror_typed(dims, &x, &[2], &mut y).unwrap_err();
    assert!(err.contains("idx in [0, T)"), "{}", err);
}
