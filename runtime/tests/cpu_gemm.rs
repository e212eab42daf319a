//! The CPU schedule's contraction (`tk_rt::cpu::contract`) on every
//! register tile this machine can run: each output is the chain of fused
//! multiply-adds in k order from 0, bit for bit, on ragged shapes (against
//! every tile's rows and columns, the k block and the tasks), on operands
//! in each stride pattern the linear layers use, in f16 and in f32.
//! (`cpu_schedule.rs` checks the kernels on the machine's best tile.)

use half::f16;
use tokitai_runtime::abi::tk_rt::cpu::{contract_on, plan_on, task_shape, Isa, Operand};
use tokitai_runtime::check::Rng;

/// `sum(k) a(i, k) * b(j, k)`, one fused multiply-add at a time.
fn chain(a: impl Fn(usize, usize) -> f32, b: impl Fn(usize, usize) -> f32, m: usize, n: usize, k: usize) -> Vec<u32> {
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for kk in 0..k {
                acc = a(i, kk).mul_add(b(j, kk), acc);
            }
            out.push(acc.to_bits());
        }
    }
    out
}

/// Element `(i, k)` of `v` at strides `(si, sk)`.
fn at(v: &[f32], si: i64, sk: i64) -> impl Fn(usize, usize) -> f32 + '_ {
    move |i, kk| v[(i as i64 * si + kk as i64 * sk) as usize]
}

/// Strides of a `rows x depth` operand: rows contiguous along k (x of
/// `linear_fwd`), rows across (w of `linear_fwd`), or neither.
fn strides(pattern: usize, rows: usize, depth: usize) -> (i64, i64, usize) {
    match pattern {
        0 => (depth as i64, 1, rows * depth),
        1 => (1, rows as i64, rows * depth),
        // Rows three elements apart along a padded row, k every 3 * rows + 1.
        _ => (3, 3 * rows as i64 + 1, (3 * rows + 1) * depth),
    }
}

#[test]
fn every_tile_sums_the_mirrors_chain_bit_for_bit() {
    let isas: Vec<Isa> = Isa::ALL.into_iter().filter(|i| i.available()).collect();
    assert!(isas.contains(&Isa::Portable));
    let mut rng = Rng::new(0x6e44);
    // Ragged against 8 x 32, 12 x 32 (from 256 rows), 6 x 16 and 4 x 16
    // tiles, the 128-k block and the tasks (64 rows or more, 128
    // columns); 301 x 200 x 600 splits over threads. Each shape is
    // planned for 1 to 64 threads: whole rows, tiles, tiles halved down
    // to one register tile (128 x 128 x 300: a weight gradient's shape).
    // The last three put rows along k (pattern 0) through the packing's
    // 4 x 4 blocks: B's strip of 13 columns (8 + 4 + 1) at 131 k, and
    // 12-row panels of A (262 rows: the last panel 10) at 70 k (a block
    // of 64, then 6: k past the 8 x 8 blocks but inside the 4 x 4 ones).
    // The last three (and 256 x 40) have few columns: their tiles run
    // over the transposed product and are placed transposed.
    let shapes = [(1, 1, 1), (5, 7, 3), (9, 33, 257), (70, 130, 40), (13, 300, 513), (301, 200, 600), (64, 257, 129), (256, 40, 129), (128, 128, 300), (40, 100, 1100), (7, 20, 9), (20, 45, 131), (262, 50, 70), (300, 4, 200), (130, 20, 513), (1000, 20, 70)];
    let mut checked = 0;
    for (case, &(m, n, k)) in shapes.iter().enumerate() {
        let (pa, pb) = (case % 3, (case + 1) % 3);
        let (sai, sak, la) = strides(pa, m, k);
        let (sbj, sbk, lb) = strides(pb, n, k);
        // Values with cancellation, a few large and a few subnormal.
        let mut value = || {
            let u = rng.unit() * 2.0 - 1.0;
            if rng.unit() < 0.02 { u * 1e4 } else if rng.unit() < 0.02 { u * 1e-6 } else { u }
        };
        let a32: Vec<f32> = (0..la).map(|_| value() as f32).collect();
        let b32: Vec<f32> = (0..lb).map(|_| value() as f32).collect();
        let a16: Vec<f16> = a32.iter().map(|&x| f16::from_f32(x)).collect();
        let b16: Vec<f16> = b32.iter().map(|&x| f16::from_f32(x)).collect();
        let want32 = chain(at(&a32, sai, sak), at(&b32, sbj, sbk), m, n, k);
        let a16w: Vec<f32> = a16.iter().map(|x| x.to_f32()).collect();
        let b16w: Vec<f32> = b16.iter().map(|x| x.to_f32()).collect();
        let want16 = chain(at(&a16w, sai, sak), at(&b16w, sbj, sbk), m, n, k);
        for &isa in &isas {
            let (op_a, op_b) = (Operand { data: &a32[..], si: sai, sk: sak }, Operand { data: &b32[..], si: sbj, sk: sbk });
            assert!(op_a.covers(m as i64, k as i64, "a").is_ok() && op_b.covers(n as i64, k as i64, "b").is_ok());
            for threads in [1, 2, 3, 16, 64] {
                let got: Vec<u32> = contract_on(isa, threads, op_a, op_b, m as i64, n as i64, k as i64).iter().map(|x| x.to_bits()).collect();
                assert_eq!(got.len(), m * n);
                let first = (0..got.len()).find(|&e| got[e] != want32[e]);
                assert!(first.is_none(), "{:?} f32 {}x{}x{} on {} threads: first difference at {:?}", isa, m, n, k, threads, first);
            }
            let (op_a, op_b) = (Operand { data: &a16[..], si: sai, sk: sak }, Operand { data: &b16[..], si: sbj, sk: sbk });
            let got: Vec<u32> = contract_on(isa, 16, op_a, op_b, m as i64, n as i64, k as i64).iter().map(|x| x.to_bits()).collect();
            let first = (0..got.len()).find(|&e| got[e] != want16[e]);
            assert!(first.is_none(), "{:?} f16 {}x{}x{}: first difference at {:?}", isa, m, n, k, first);
            checked += 1;
        }
    }
    assert_eq!(checked, shapes.len() * isas.len());
}

#[test]
fn a_wrong_chain_is_told_apart() {
    // Negative control: a chain summed in another order (k from the end)
    // differs from the contraction's somewhere on these values, so the
    // test above would see a tile that reordered its sums.
    let (m, n, k) = (6, 16, 300);
    let mut rng = Rng::new(7);
    let a: Vec<f32> = (0..m * k).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
    let b: Vec<f32> = (0..n * k).map(|_| (rng.unit() * 2.0 - 1.0) as f32).collect();
    let got: Vec<u32> = contract_on(Isa::best(), 2, Operand { data: &a[..], si: k as i64, sk: 1 }, Operand { data: &b[..], si: k as i64, sk: 1 }, m as i64, n as i64, k as i64).iter().map(|x| x.to_bits()).collect();
    let reversed = chain(|i, kk| a[i * k + (k - 1 - kk)], |j, kk| b[j * k + (k - 1 - kk)], m, n, k);
    assert_ne!(got, reversed);
}

#[test]
fn an_unavailable_tile_falls_back_to_the_portable_one() {
    for isa in Isa::ALL.into_iter().filter(|i| !i.available()) {
        let a = [1.5f32, 2.0, -3.0, 0.25];
        let got = contract_on(isa, 2, Operand { data: &a[..], si: 2, sk: 1 }, Operand { data: &a[..], si: 2, sk: 1 }, 2, 2, 2);
        assert_eq!(&got[..], &[6.25, -4.0, -4.0, 9.0625]);
    }
}

#[test]
fn products_with_few_columns_are_tiled_transposed() {
    // nano's last layer (20 columns) and router (4), forward and weight
    // gradient, pad less on the transposed product's tile; a square
    // product and one with few rows do not swap.
    let swapped = |m: i64, n: i64, k: i64| plan_on(Isa::Avx512, 2, m, n, k).swapped();
    if Isa::Avx512.available() {
        for (m, n, k) in [(2048, 20, 128), (4096, 4, 96), (128, 20, 2048), (96, 4, 4096), (256, 40, 129)] {
            assert!(swapped(m, n, k), "{}x{}x{} should swap", m, n, k);
        }
        for (m, n, k) in [(2048, 128, 128), (128, 128, 2048), (7, 20, 9), (20, 2048, 128)] {
            assert!(!swapped(m, n, k), "{}x{}x{} should not swap", m, n, k);
        }
    }
    // Every row block of a swapped plan is still a block of the output's
    // rows, in order, covering them once.
    let plan = plan_on(Isa::Portable, 4, 1000, 3, 70);
    assert!(plan.swapped());
    let mut next = 0;
    for &(lo, hi) in plan.blocks() {
        assert_eq!(lo, next);
        next = hi;
    }
    assert_eq!(next, 1000);
}

#[test]
fn tasks_cover_every_thread_where_the_output_allows() {
    // Many rows: whole rows, 64 a task (8 groups of 8).
    assert_eq!(task_shape(256, 4, 8, 32, 128, false, 16), (8, 4));
    // nano's weight gradient, 128 x 128 (16 groups, 4 strips) over 2048
    // terms on 16 threads: rows halved to one group a task, all columns:
    // 16 tasks.
    assert_eq!(task_shape(16, 4, 8, 32, 2048, false, 16), (1, 4));
    // More threads than register tiles: one tile a task where a tile is
    // worth a task (8 x 32 outputs of 4096 terms: 2 MFLOP), else two or
    // four tiles a task.
    assert_eq!(task_shape(16, 4, 8, 32, 4096, false, 100), (1, 1));
    assert_eq!(task_shape(16, 4, 8, 32, 2048, false, 100), (1, 2));
    assert_eq!(task_shape(16, 4, 8, 32, 1024, false, 100), (1, 4));
    // Where each task packs its strips of B (a short product), rows are
    // never split (each split would pack every strip again): columns are.
    assert_eq!(task_shape(8, 64, 8, 32, 2048, true, 16), (8, 4));
    assert_eq!(task_shape(8, 4, 8, 32, 2048, true, 16), (8, 1));
    // nano b128's 64 x 128 x 128 (2 MFLOP) stays one task on two threads.
    assert_eq!(task_shape(8, 4, 8, 32, 128, true, 2), (8, 4));
    // Whole rows evened out over the threads: 9 groups on two threads
    // are blocks of 5 and 4, not 8 and 1 (72 x 2048 x 2048 ran at half
    // speed).
    assert_eq!(task_shape(9, 64, 8, 32, 2048, false, 2), (5, 64));
    assert_eq!(task_shape(171, 4, 12, 32, 128, false, 2), (6, 4));
    // The same 72 rows as one block packing its own strips: all rows,
    // columns split.
    assert_eq!(task_shape(9, 64, 8, 32, 2048, true, 2), (9, 4));
    // One thread: the first shape, whole rows.
    assert_eq!(task_shape(16, 4, 8, 32, 2048, false, 1), (8, 4));
}

#[test]
fn row_buffers_come_back_from_the_pool() {
    use tokitai_runtime::abi::tk_rt::cpu::Rows;
    // A dropped buffer that holds a request is the one taken for it (no
    // allocation), filled with the value asked for at the length asked for.
    let first = Rows::filled(1000, 1.0);
    let at = first.as_ptr();
    drop(first);
    let again = Rows::filled(600, -2.0);
    assert_eq!(again.as_ptr(), at, "the kept buffer is taken again");
    assert!(again.len() == 600 && again.iter().all(|&v| v == -2.0), "nothing of the earlier user shows");
    // Two buffers alive at once are two buffers.
    let other = Rows::filled(600, 0.0);
    assert_ne!(other.as_ptr(), again.as_ptr(), "a buffer in use is not handed out twice");
}

#[test]
fn a_buffer_written_whole_keeps_its_length_and_grows_with_zeros() {
    use tokitai_runtime::abi::tk_rt::cpu::Rows;
    // `overwritten` skips the fill its users do not need, but a grown part
    // is zeros and the length is the one asked for. Requests of 5 to 8
    // share a size class: the same buffer comes back each time.
    let mut first = Rows::overwritten(8);
    first.copy_from_slice(&[1.0; 8]);
    let at = first.as_ptr();
    drop(first);
    let mut shorter = Rows::overwritten(5);
    assert_eq!((shorter.len(), shorter.as_ptr()), (5, at));
    shorter.copy_from_slice(&[2.0; 5]);
    drop(shorter);
    let longer = Rows::overwritten(7);
    assert_eq!((longer.len(), longer.as_ptr()), (7, at));
    assert!(longer[5..].iter().all(|&v| v == 0.0), "the grown part is zeros: {:?}", &longer[..]);
    // `filled` fills every element, whatever the buffer held.
    drop(longer);
    let filled = Rows::filled(6, 7.0);
    assert!(filled.iter().all(|&v| v == 7.0));
}

#[test]
fn a_small_request_takes_no_large_buffer() {
    use tokitai_runtime::abi::tk_rt::cpu::Rows;
    // A kept buffer is taken for a request of at most a quarter of its
    // capacity: a 16 MB panel does not serve a row of 128.
    let big = Rows::overwritten(1 << 20);
    let at = big.as_ptr();
    drop(big);
    let small = Rows::overwritten(128);
    assert_ne!(small.as_ptr(), at);
    assert!(small.len() == 128);
    let near = Rows::overwritten(300_000);
    assert_eq!(near.as_ptr(), at, "a request within a quarter takes it");
}
