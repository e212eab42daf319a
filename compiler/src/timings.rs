//! Where verification spends its time: seconds per kernel and per phase
//! (symbolic execution, each obligation kind, tolerance derivation,
//! mutation testing, report sampling), for `tokitaic verify --timings`.
//!
//! A process-wide collector: the phases run on rayon threads and inside
//! library calls that have no handle to pass a collector through. Seconds
//! are summed CPU-side per call (two phases running at once on two cores
//! both count in full), so the table says what each phase costs, and the
//! wall time of the run is printed beside it.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Seconds and calls of one (kernel, phase).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Entry {
    pub seconds: f64,
    pub calls: u64,
}

fn table() -> &'static Mutex<BTreeMap<(String, String), Entry>> {
    static TABLE: OnceLock<Mutex<BTreeMap<(String, String), Entry>>> = OnceLock::new();
    TABLE.get_or_init(|| Mutex::new(BTreeMap::new()))
}

/// Add `seconds` to `(kernel, phase)`.
pub fn record(kernel: &str, phase: &str, seconds: f64) {
    if let Ok(mut t) = table().lock() {
        let e = t.entry((kernel.to_string(), phase.to_string())).or_default();
        e.seconds += seconds;
        e.calls += 1;
    }
}

/// Run `f`, adding its time to `(kernel, phase)`.
pub fn time<T>(kernel: &str, phase: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    record(kernel, phase, start.elapsed().as_secs_f64());
    out
}

/// One solver call among the slowest: who asked, for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct Slow {
    pub seconds: f64,
    pub kernel: String,
    pub what: String,
}

/// How many of the slowest obligations are kept.
pub const SLOWEST_KEPT: usize = 12;

fn slowest_list() -> &'static Mutex<Vec<Slow>> {
    static SLOWEST: OnceLock<Mutex<Vec<Slow>>> = OnceLock::new();
    SLOWEST.get_or_init(|| Mutex::new(Vec::new()))
}

/// Offer one obligation's solver time to the list of the slowest (kept
/// sorted, slowest first, at most [`SLOWEST_KEPT`]): a table per kind says
/// which kind is slow, this says which query to fold or split.
pub fn record_obligation(kernel: &str, what: &str, seconds: f64) {
    let Ok(mut list) = slowest_list().lock() else { return };
    if list.len() >= SLOWEST_KEPT && list.last().is_some_and(|s| s.seconds >= seconds) {
        return;
    }
    let at = list.partition_point(|s| s.seconds >= seconds);
    list.insert(at, Slow { seconds, kernel: kernel.to_string(), what: what.to_string() });
    list.truncate(SLOWEST_KEPT);
}

/// The slowest obligations recorded so far, slowest first.
pub fn slowest() -> Vec<Slow> {
    slowest_list().lock().map(|l| l.clone()).unwrap_or_default()
}

/// Everything recorded so far.
pub fn snapshot() -> BTreeMap<(String, String), Entry> {
    table().lock().map(|t| t.clone()).unwrap_or_default()
}

/// Forget everything recorded (tests, or a second run in one process).
pub fn clear() {
    if let Ok(mut t) = table().lock() {
        t.clear();
    }
    if let Ok(mut l) = slowest_list().lock() {
        l.clear();
    }
}

/// A plain-text table: one row per kernel (slowest first, at most `rows`),
/// one column per phase, and a total row.
pub fn render(rows: usize) -> String {
    use std::fmt::Write;
    let snap = snapshot();
    let mut phases: Vec<String> = snap.keys().map(|(_, p)| p.clone()).collect();
    phases.sort();
    phases.dedup();
    let mut per_kernel: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((k, p), e) in &snap {
        per_kernel.entry(k.clone()).or_default().insert(p.clone(), e.seconds);
    }
    let mut kernels: Vec<(String, f64)> = per_kernel.iter().map(|(k, m)| (k.clone(), m.values().sum())).collect();
    kernels.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let width = phases.iter().map(|p| p.len().max(7)).collect::<Vec<_>>();
    let mut out = String::new();
    let _ = write!(out, "{:<28}", "kernel");
    for (p, w) in phases.iter().zip(&width) {
        let _ = write!(out, " {:>w$}", p, w = w);
    }
    let _ = writeln!(out, " {:>8}", "total");
    let mut totals = vec![0.0; phases.len()];
    for (i, (k, sum)) in kernels.iter().enumerate() {
        let m = &per_kernel[k];
        for (j, p) in phases.iter().enumerate() {
            totals[j] += m.get(p).copied().unwrap_or(0.0);
        }
        if i >= rows {
            continue;
        }
        let _ = write!(out, "{:<28}", k);
        for (p, w) in phases.iter().zip(&width) {
            match m.get(p) {
                Some(s) => {
                    let _ = write!(out, " {:>w$.2}", s, w = w);
                }
                None => {
                    let _ = write!(out, " {:>w$}", "-", w = w);
                }
            }
        }
        let _ = writeln!(out, " {:>8.2}", sum);
    }
    if kernels.len() > rows {
        let _ = writeln!(out, "({} more kernels in the total)", kernels.len() - rows);
    }
    let _ = write!(out, "{:<28}", "total");
    for (t, w) in totals.iter().zip(&width) {
        let _ = write!(out, " {:>w$.2}", t, w = w);
    }
    let _ = writeln!(out, " {:>8.2}", totals.iter().sum::<f64>());
    let slow = slowest();
    if !slow.is_empty() {
        let _ = writeln!(out, "slowest obligations:");
        for s in &slow {
            let _ = writeln!(out, "  {:>7.2}s  {}: {}", s.seconds, s.kernel, s.what);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_sum_per_kernel_and_phase_and_render_a_total() {
        record("timings_test_k", "exec", 0.25);
        record("timings_test_k", "exec", 0.5);
        let v = time("timings_test_k", "solve", || 7);
        assert_eq!(v, 7);
        let snap = snapshot();
        let e = snap[&("timings_test_k".to_string(), "exec".to_string())];
        assert_eq!(e.calls, 2);
        assert!((e.seconds - 0.75).abs() < 1e-12);
        let text = render(100);
        let row = text.lines().find(|l| l.starts_with("timings_test_k")).expect("a row for the kernel");
        assert!(row.contains("0.75"), "{}", row);
        assert!(text.lines().any(|l| l.starts_with("total")));
    }

    #[test]
    fn keeps_the_slowest_obligations_in_order() {
        for i in 0..(SLOWEST_KEPT as u32 + 5) {
            record_obligation("timings_slow_k", &format!("goal {}", i), 1000.0 + f64::from(i));
        }
        let kept: Vec<Slow> = slowest().into_iter().filter(|s| s.kernel == "timings_slow_k").collect();
        assert_eq!(kept.len(), SLOWEST_KEPT);
        assert_eq!(kept[0].what, format!("goal {}", SLOWEST_KEPT + 4));
        assert!(kept.windows(2).all(|w| w[0].seconds >= w[1].seconds));
        assert!(render(100).contains(&format!("timings_slow_k: goal {}", SLOWEST_KEPT + 4)));
    }
}
