//! The learning-rate schedule: linear warm-up over `warmup` steps to `lr`,
//! then cosine decay to `lr * min_ratio` at the last step.

/// Learning rate at `step` (1-based) of `total`.
pub fn learning_rate(step: usize, total: usize, lr: f64, warmup: usize, min_ratio: f64) -> f64 {
    if warmup > 0 && step <= warmup {
        return lr * step as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let t = ((step - warmup.min(step)) as f64 / span).clamp(0.0, 1.0);
    let floor = lr * min_ratio;
    floor + (lr - floor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
}

#[cfg(test)]
mod tests {
    use super::learning_rate;

    #[test]
    fn warms_up_then_decays_to_the_floor() {
        let lr = |s| learning_rate(s, 20, 1e-3, 5, 0.1);
        assert!((lr(1) - 2e-4).abs() < 1e-12);
        assert!((lr(5) - 1e-3).abs() < 1e-12);
        assert!((lr(20) - 1e-4).abs() < 1e-12);
        for s in 5..20 {
            assert!(lr(s + 1) <= lr(s), "decays monotonically after warm-up");
        }
        // No warm-up: full rate at step 0 of the decay.
        assert!((learning_rate(0, 10, 1.0, 0, 0.0) - 1.0).abs() < 1e-12);
    }
}
