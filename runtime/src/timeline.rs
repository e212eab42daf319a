//! A device timeline (issue 20): when a GPU step's kernels ran, and where
//! the device sat idle between them. A step's wall time is its kernels'
//! time plus the gaps; Nsight Compute gives the first (one kernel at a
//! time, serialised), this gives the second, in the same run.
//!
//! While on (`Device::timeline_start`), the CUDA backend brackets each
//! launch on its main stream with two timing events and stamps each host
//! wait for the device (a read-back, a synchronisation). A gap before a
//! kernel is the device waiting for the host: for a read-back the host
//! asked for (the device drained, then idled while the host used the
//! result and queued the next launch), or for the host's queueing alone
//! (kernels shorter than the host's launch cost). The events cost the host
//! about a microsecond each, so a stretch of kernels shorter than that
//! shows somewhat more queueing gap than an untimed run has.
//!
//! Backend-neutral: this holds what was recorded, sums it, and draws it.

use std::collections::BTreeMap;
use std::fmt::Write;

/// One kernel on the device: from its begin event to its end event, in
/// microseconds from the first recorded launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub kernel: String,
    pub begin_us: f64,
    pub end_us: f64,
    /// The host waits for the device (their kinds) between the previous
    /// launch's queueing and this one's: what the device's idle time
    /// before this kernel was spent on.
    pub after_waits: Vec<&'static str>,
    /// After a wait: the host's time from the wait's return to queueing
    /// this launch (what the host did with the result), microseconds.
    pub host_after_wait_us: Option<f64>,
    /// The step (`Timeline::marks` index) this launch belongs to.
    pub step: usize,
}

/// What the device did over the recorded launches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub spans: Vec<Span>,
    /// Each marked step's label (`Device::timeline_mark`).
    pub marks: Vec<String>,
}

/// A step's (or the whole timeline's) time, split.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    pub launches: usize,
    /// From the first kernel's begin to the last one's end.
    pub span_us: f64,
    /// Inside kernels.
    pub busy_us: f64,
    /// Idle before a kernel queued after a host wait for the device.
    pub idle_after_wait_us: f64,
    /// Idle before a kernel the host had not yet queued (no wait between).
    pub idle_queueing_us: f64,
}

/// One idle stretch: the kernels around it and its cause.
#[derive(Clone, Debug, PartialEq)]
pub struct Gap {
    pub step: usize,
    pub before: String,
    pub after: String,
    pub us: f64,
    pub after_waits: Vec<&'static str>,
    pub host_after_wait_us: Option<f64>,
}

impl Timeline {
    /// The split of step `step`'s launches (`None`: all of them).
    pub fn split(&self, step: Option<usize>) -> Split {
        let mut s = Split::default();
        let mut prev_end: Option<f64> = None;
        let mut first = None;
        for sp in self.spans.iter().filter(|sp| step.is_none_or(|k| sp.step == k)) {
            s.launches += 1;
            first.get_or_insert(sp.begin_us);
            s.busy_us += (sp.end_us - sp.begin_us).max(0.0);
            if let Some(p) = prev_end {
                let idle = (sp.begin_us - p).max(0.0);
                if sp.after_waits.is_empty() {
                    s.idle_queueing_us += idle;
                } else {
                    s.idle_after_wait_us += idle;
                }
            }
            prev_end = Some(sp.end_us);
            s.span_us = sp.end_us - first.unwrap_or(sp.begin_us);
        }
        s
    }

    /// The idle stretches within steps, longest first.
    pub fn gaps(&self) -> Vec<Gap> {
        let mut out: Vec<Gap> = self
            .spans
            .windows(2)
            .filter(|w| w[0].step == w[1].step)
            .map(|w| Gap { step: w[1].step, before: w[0].kernel.clone(), after: w[1].kernel.clone(), us: (w[1].begin_us - w[0].end_us).max(0.0), after_waits: w[1].after_waits.clone(), host_after_wait_us: w[1].host_after_wait_us })
            .collect();
        out.sort_by(|a, b| b.us.total_cmp(&a.us));
        out
    }

    /// Device time per kernel name over every recorded launch: (name,
    /// launches, busy microseconds), the largest first.
    pub fn by_kernel(&self) -> Vec<(String, usize, f64)> {
        let mut m: BTreeMap<&str, (usize, f64)> = BTreeMap::new();
        for sp in &self.spans {
            let e = m.entry(&sp.kernel).or_default();
            e.0 += 1;
            e.1 += sp.end_us - sp.begin_us;
        }
        let mut v: Vec<_> = m.into_iter().map(|(k, (n, us))| (k.to_string(), n, us)).collect();
        v.sort_by(|a, b| b.2.total_cmp(&a.2));
        v
    }

    /// A text report: each step's split, then the longest gaps.
    pub fn report(&self, gaps: usize) -> String {
        let mut out = String::new();
        let row = |out: &mut String, label: &str, s: &Split| {
            let _ = writeln!(out, "  {:<14} {:>5} launches  span {:>8.1} us  busy {:>8.1} us ({:>4.1}%)  idle after host waits {:>7.1} us  idle while the host queued {:>7.1} us", label, s.launches, s.span_us, s.busy_us, 100.0 * s.busy_us / s.span_us.max(1e-9), s.idle_after_wait_us, s.idle_queueing_us);
        };
        for (k, label) in self.marks.iter().enumerate() {
            row(&mut out, label, &self.split(Some(k)));
        }
        let steps = self.marks.len().max(1) as f64;
        let _ = writeln!(out, "  device time by kernel, per step (launches, us):");
        for (name, n, us) in self.by_kernel().iter().take(gaps) {
            let _ = writeln!(out, "    {:>8.1} us  {:>5.1}  {}", us / steps, *n as f64 / steps, name);
        }
        let _ = writeln!(out, "  longest gaps within a step:");
        for g in self.gaps().iter().take(gaps) {
            let cause = match (g.after_waits.is_empty(), g.host_after_wait_us) {
                (true, _) => "host queueing".to_string(),
                (false, Some(h)) => format!("after {}; queued {:.1} us after the wait returned", g.after_waits.join(", "), h),
                (false, None) => format!("after {}", g.after_waits.join(", ")),
            };
            let _ = writeln!(out, "    {:>8.1} us  {} -> {}  ({}; {})", g.us, g.before, g.after, cause, self.marks.get(g.step).map_or("", |s| s.as_str()));
        }
        out
    }

    /// The timeline as an SVG picture: one lane per step, kernels as bars
    /// (coloured by family), idle stretches after a host wait in red, those
    /// while the host queued in orange.
    pub fn svg(&self) -> String {
        let lanes = self.marks.len().max(1);
        let starts: Vec<f64> = (0..lanes).map(|k| self.spans.iter().find(|s| s.step == k).map_or(0.0, |s| s.begin_us)).collect();
        let widest = (0..lanes).map(|k| self.split(Some(k)).span_us).fold(1.0, f64::max);
        let (left, width, lane_h, top) = (150.0, 1400.0, 46.0, 40.0);
        let x = |us: f64| left + width * us / widest;
        let mut svg = String::new();
        let height = top + lane_h * lanes as f64 + 70.0;
        let _ = writeln!(svg, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">"#, left + width + 20.0, height);
        let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/><text x="10" y="20" font-size="14">Device timeline per step: kernels as bars; red: idle after a host wait; orange: idle while the host queued</text>"#);
        for k in 0..lanes {
            let y = top + lane_h * k as f64;
            let s = self.split(Some(k));
            let label = self.marks.get(k).cloned().unwrap_or_else(|| "all".into());
            let _ = writeln!(svg, r#"<text x="10" y="{:.1}">{}</text><text x="10" y="{:.1}" fill="gray">{:.0} us, {:.0}% busy</text>"#, y + 16.0, xml(&label), y + 32.0, s.span_us, 100.0 * s.busy_us / s.span_us.max(1e-9));
            let mut prev: Option<&Span> = None;
            for sp in self.spans.iter().filter(|sp| sp.step == k) {
                let (a, b) = (sp.begin_us - starts[k], sp.end_us - starts[k]);
                if let Some(p) = prev {
                    let idle = sp.begin_us - p.end_us;
                    if idle > 0.0 {
                        let colour = if sp.after_waits.is_empty() { "#f39c12" } else { "#e74c3c" };
                        let _ = writeln!(svg, r#"<rect x="{:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{}"><title>idle {:.1} us before {}</title></rect>"#, x(p.end_us - starts[k]), y + 30.0, (x(a) - x(p.end_us - starts[k])).max(0.3), 8.0, colour, idle, xml(&sp.kernel));
                    }
                }
                let _ = writeln!(svg, r#"<rect x="{:.2}" y="{:.1}" width="{:.2}" height="{:.1}" fill="{}"><title>{} {:.1} us</title></rect>"#, x(a), y + 4.0, (x(b) - x(a)).max(0.3), 24.0, family_colour(&sp.kernel), xml(&sp.kernel), b - a);
                prev = Some(sp);
            }
        }
        // The time axis, and the families' colours.
        let y = top + lane_h * lanes as f64 + 10.0;
        for t in 0..=10 {
            let us = widest * t as f64 / 10.0;
            let _ = writeln!(svg, r#"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="gray"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle">{4:.0} us</text>"#, x(us), y, y + 5.0, y + 18.0, us);
        }
        for (i, (family, colour)) in FAMILIES.iter().enumerate() {
            let lx = left + 130.0 * i as f64;
            let _ = writeln!(svg, r#"<rect x="{:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#, lx, y + 30.0, colour, lx + 16.0, y + 41.0, family);
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Kernel families by name, and their colours (the first match wins).
const FAMILIES: [(&str, &str); 7] = [("contraction", "#2c7fb8"), ("layernorm", "#41ab5d"), ("gelu", "#a1d99b"), ("column sum", "#756bb1"), ("optimizer", "#636363"), ("moe routing", "#fd8d3c"), ("other", "#bdbdbd")];

fn family_colour(kernel: &str) -> &'static str {
    let family = if kernel.starts_with("linear") || kernel.starts_with("gemm") {
        0
    } else if kernel.starts_with("layernorm") {
        1
    } else if kernel.starts_with("gelu") {
        2
    } else if kernel.contains("_col") || kernel.starts_with("bias_grad") || kernel.starts_with("col_") {
        3
    } else if kernel.starts_with("adamw") || kernel.starts_with("sgd") || kernel.starts_with("row_norm") || kernel.starts_with("sum_") {
        4
    } else if ["gather", "combine", "router", "top2", "scatter"].iter().any(|p| kernel.starts_with(p)) {
        5
    } else {
        6
    };
    FAMILIES[family].1
}

fn xml(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(kernel: &str, begin_us: f64, end_us: f64, waits: &[&'static str], step: usize) -> Span {
        Span { kernel: kernel.into(), begin_us, end_us, after_waits: waits.to_vec(), host_after_wait_us: (!waits.is_empty()).then_some(20.0), step }
    }

    #[test]
    fn a_step_splits_into_kernels_and_the_two_kinds_of_idle() {
        let t = Timeline {
            spans: vec![span("linear_fwd", 0.0, 10.0, &[], 0), span("gelu_fwd", 12.0, 15.0, &[], 0), span("gather_rows", 40.0, 41.0, &["read-back"], 0), span("adamw", 100.0, 130.0, &[], 1)],
            marks: vec!["step 1".into(), "step 2".into()],
        };
        let s = t.split(Some(0));
        assert_eq!(s.launches, 3);
        assert_eq!(s.span_us, 41.0);
        assert_eq!(s.busy_us, 14.0);
        assert_eq!(s.idle_queueing_us, 2.0);
        assert_eq!(s.idle_after_wait_us, 25.0);
        assert_eq!(s.span_us, s.busy_us + s.idle_queueing_us + s.idle_after_wait_us);
        // The gap between steps counts in neither step.
        assert_eq!(t.split(Some(1)).span_us, 30.0);
        let gaps = t.gaps();
        assert_eq!(gaps.len(), 2);
        assert_eq!((gaps[0].before.as_str(), gaps[0].after.as_str(), gaps[0].us), ("gelu_fwd", "gather_rows", 25.0));
        assert!(t.report(5).contains("after read-back; queued 20.0 us after the wait returned"), "{}", t.report(5));
        let svg = t.svg();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("#e74c3c").count(), 1, "one red gap: the idle after the read-back");
        assert_eq!(svg.matches(r##"fill="#f39c12""##).count(), 1, "one orange gap: the host's queueing");
        assert_eq!(t.by_kernel()[0], ("adamw".to_string(), 1, 30.0));
    }
}
