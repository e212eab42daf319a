//! Line charts as standalone SVG (loss curves, routing accuracy, expert
//! balance): no plotting dependency, opens in any browser.

use std::fmt::Write;

/// One named line of `(x, y)` points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Ticks at round numbers covering `[lo, hi]`.
fn ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= 6.0).unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 {
        out.push(t);
        t += step;
    }
    out
}

/// A chart of `series` (non-finite points are left out).
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.iter().filter(finite).copied()).collect();
    let (mut x0, mut x1, mut y0, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, f64::INFINITY, f64::NEG_INFINITY);
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if all.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + y0.abs().max(1e-3);
    }
    let pad = (y1 - y0) * 0.05;
    let (y0, y1) = (y0 - pad, y1 + pad);
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + (1.0 - (y - y0) / (y1 - y0)) * ph;
    let mut s = String::new();
    let _ = writeln!(s, r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#);
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(s, r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#, LEFT + pw / 2.0, escape(title));
    for t in ticks(y0, y1) {
        let y = sy(t);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##, LEFT + pw, LEFT - 6.0, y + 4.0, fmt_tick(t));
    }
    for t in ticks(x0, x1) {
        let x = sx(t);
        let _ = writeln!(s, r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##, TOP + ph, TOP + ph + 16.0, fmt_tick(t));
    }
    let _ = writeln!(s, r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#);
    let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#, LEFT + pw / 2.0, H - 10.0, escape(x_label));
    let _ = writeln!(s, r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#, TOP + ph / 2.0, TOP + ph / 2.0, escape(y_label));
    for (i, ser) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<String> = ser.points.iter().filter(finite).map(|(x, y)| format!("{:.1},{:.1}", sx(*x), sy(*y))).collect();
        if !pts.is_empty() {
            let _ = writeln!(s, r#"<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"/>"#, colour, pts.join(" "));
        }
        let ly = TOP + 10.0 + 18.0 * i as f64;
        let _ = writeln!(s, r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#, W - RIGHT + 10.0, W - RIGHT + 30.0, colour, W - RIGHT + 36.0, ly + 4.0, escape(&ser.name));
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_tick(t: f64) -> String {
    let a = t.abs();
    if a == 0.0 {
        "0".into()
    } else if !(1e-3..1e5).contains(&a) {
        format!("{:.0e}", t)
    } else {
        let s = format!("{:.4}", t);
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_draws_every_series_and_skips_non_finite_points() {
        let a = Series { name: "loss <a>".into(), points: vec![(1.0, 0.5), (2.0, 0.25), (3.0, f64::NAN)] };
        let b = Series { name: "b".into(), points: vec![(1.0, 0.4), (3.0, 0.1)] };
        let svg = line_chart("t", "step", "loss", &[a, b]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("loss &lt;a&gt;"));
        assert!(!svg.contains("NaN"));
        let empty = line_chart("t", "x", "y", &[]);
        assert!(empty.contains("</svg>"));
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 1.0), vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]);
        let t = ticks(0.013, 0.161);
        assert!(t.len() >= 3 && t.len() <= 7, "{:?}", t);
        assert!(t.iter().all(|v| (0.013..=0.161).contains(v)));
    }
}
