//! The project's charts as standalone SVG, drawn with plotters (its SVG
//! backend writes text as `<text>` elements, so no font is read): line
//! charts (loss curves, routing accuracy, expert balance, with a log axis
//! where values span decades), the report's log-log scatter of proved
//! bounds against observed errors, and its bars of error over tolerance.

use plotters::coord::ranged1d::ValueFormatter;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One named line of `(x, y)` points.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

const COLOURS: [RGBColor; 6] = [RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xd6, 0x27, 0x28), RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0xff, 0x7f, 0x0e), RGBColor(0x94, 0x67, 0xbd), RGBColor(0x8c, 0x56, 0x4b)];
const SOUND: RGBColor = RGBColor(0x3b, 0x7d, 0xd8);
const UNSOUND: RGBColor = RGBColor(0xd8, 0x3b, 0x3b);

/// Does a positive range span enough decades for a log axis?
fn spans_decades(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo >= 100.0
}

/// `[lo, hi]` of the finite values, padded; `(0, 1)` when there are none.
fn range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (lo, hi) = values.filter(|v| v.is_finite()).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    let span = if hi > lo { hi - lo } else { lo.abs().max(1e-3) };
    (lo - pad * span, hi + pad * span)
}

/// Draw on an SVG of `w x h` held in a string; plotting errors (which the
/// backend only raises for invalid ranges, excluded above) leave what was
/// drawn.
fn svg(w: u32, h: u32, draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<(), Box<dyn std::error::Error>>) -> String {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let _ = draw(&root);
        let _ = root.present();
    }
    out
}

/// A chart of `series` against a shared x axis, a legend naming each
/// (non-finite points are left out). The y axis is logarithmic where every
/// value is positive and they span two decades or more.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let finite = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite();
    let pts = || series.iter().flat_map(|s| s.points.iter().filter(finite));
    let (x0, x1) = range(pts().map(|p| p.0), 0.0);
    let (ylo, yhi) = pts().map(|p| p.1).fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let log = spans_decades(ylo, yhi);
    svg(640, 400, |root| {
        let mut chart = ChartBuilder::on(root);
        chart.caption(title, ("sans-serif", 16)).margin(12).x_label_area_size(36).y_label_area_size(60);
        if log {
            let mut c = chart.build_cartesian_2d(x0..x1, (ylo / 1.2..yhi * 1.2).log_scale())?;
            draw_lines(&mut c, x_label, y_label, series)
        } else {
            let (y0, y1) = range(pts().map(|p| p.1), 0.05);
            let mut c = chart.build_cartesian_2d(x0..x1, y0..y1)?;
            draw_lines(&mut c, x_label, y_label, series)
        }
    })
}

/// The mesh, one line per series (finite points) and the legend.
fn draw_lines<'a, X, Y>(c: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>, x_label: &str, y_label: &str, series: &[Series]) -> Result<(), Box<dyn std::error::Error>>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    c.configure_mesh().x_desc(x_label).y_desc(y_label).y_label_formatter(&|v| tick(*v)).x_label_formatter(&|v| tick(*v)).draw()?;
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let p: Vec<(f64, f64)> = s.points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()).copied().collect();
        c.draw_series(LineSeries::new(p, colour.stroke_width(2)))?.label(s.name.clone()).legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3)));
    }
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
    Ok(())
}

/// Log-log scatter of named points `(name, x, y)`, blue where `y >= x`
/// (below the diagonal read as `x <= y`: sound), red elsewhere, with the
/// diagonal dashed; `notes` are lines printed under the chart.
pub fn loglog_scatter(title: &str, x_label: &str, y_label: &str, points: &[(String, f64, f64)], notes: &[String]) -> String {
    let positive: Vec<&(String, f64, f64)> = points.iter().filter(|p| p.1 > 0.0 && p.2 > 0.0 && p.1.is_finite() && p.2.is_finite()).collect();
    let lo = positive.iter().map(|p| p.1.min(p.2)).fold(f64::INFINITY, f64::min).log10().floor().min(-8.0);
    let hi = positive.iter().map(|p| p.1.max(p.2)).fold(f64::NEG_INFINITY, f64::max).log10().ceil().max(0.0);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() { (10f64.powf(lo), 10f64.powf(hi)) } else { (1e-8, 1.0) };
    let h = 560 + 16 * notes.len() as u32;
    svg(640, h, |root| {
        let (top, bottom) = root.split_vertically(560);
        let mut c = ChartBuilder::on(&top).caption(title, ("sans-serif", 14)).margin(12).x_label_area_size(40).y_label_area_size(60).build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())?;
        c.configure_mesh().x_desc(x_label).y_desc(y_label).x_label_formatter(&|v| format!("{:.0e}", v)).y_label_formatter(&|v| format!("{:.0e}", v)).draw()?;
        c.draw_series(DashedLineSeries::new(vec![(lo, lo), (hi, hi)], 6, 4, BLACK.stroke_width(1)))?;
        c.draw_series(positive.iter().map(|p| Circle::new((p.1, p.2), 4, if p.1 <= p.2 { SOUND.filled() } else { UNSOUND.filled() })))?;
        for (i, note) in notes.iter().enumerate() {
            bottom.draw(&Text::new(note.clone(), (16, 4 + 16 * i as i32), ("sans-serif", 12)))?;
        }
        Ok(())
    })
}

/// Horizontal bars, one per named value, blue up to `limit` and red past
/// it, with `limit` marked by a dashed line labelled `limit_label`.
pub fn bars(title: &str, rows: &[(String, f64)], limit: f64, limit_label: &str) -> String {
    let n = rows.len().max(1) as u32;
    let top = rows.iter().map(|r| r.1).filter(|v| v.is_finite()).fold(limit * 1.2, f64::max);
    // Row i from the top is segment n - 1 - i (segments count upwards).
    let row = |seg: u32| if seg < n { rows.get((n - 1 - seg) as usize) } else { None };
    svg(760, 80 + 18 * n, |root| {
        let mut c = ChartBuilder::on(root).caption(title, ("sans-serif", 14)).margin(12).x_label_area_size(30).y_label_area_size(240).build_cartesian_2d(0.0..top, (0..n).into_segmented())?;
        c.configure_mesh()
            .disable_y_mesh()
            .y_labels(n as usize)
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(seg) => row(*seg).map(|r| r.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .x_label_formatter(&|v| tick(*v))
            .draw()?;
        c.draw_series(rows.iter().enumerate().map(|(i, (_, v))| {
            let seg = n - 1 - i as u32;
            let v = if v.is_finite() { v.min(top) } else { top };
            let mut bar = Rectangle::new([(0.0, SegmentValue::Exact(seg)), (v, SegmentValue::Exact(seg + 1))], if v <= limit { SOUND.filled() } else { UNSOUND.filled() });
            bar.set_margin(3, 3, 0, 0);
            bar
        }))?;
        c.draw_series(DashedLineSeries::new(vec![(limit, SegmentValue::Exact(0)), (limit, SegmentValue::Last)], 6, 4, BLACK.stroke_width(1)))?.label(limit_label).legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).position(SeriesLabelPosition::LowerRight).draw()?;
        Ok(())
    })
}

/// A tick label: short, round, in scientific notation outside 1e-3..1e5.
fn tick(t: f64) -> String {
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

/// The text of a chart, for tests: every non-empty `<text>` element's
/// content in order, and the number of lines drawn with more than two points (the
/// series; axes, ticks and legend marks have two).
pub fn summary(svg: &str) -> (Vec<String>, usize) {
    let mut texts = Vec::new();
    let mut rest = svg;
    while let Some(at) = rest.find("<text") {
        let after = &rest[at..];
        let Some(open) = after.find('>') else { break };
        let Some(close) = after.find("</text>") else { break };
        let text = after[open + 1..close].trim();
        if !text.is_empty() {
            texts.push(text.to_string());
        }
        rest = &after[close..];
    }
    let lines = svg.split("<polyline").skip(1).filter(|p| p.split("points=\"").nth(1).and_then(|q| q.split('"').next()).is_some_and(|q| q.split_whitespace().count() > 2)).count();
    (texts, lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_names_every_series_and_skips_non_finite_points() {
        let a = Series { name: "loss <a>".into(), points: vec![(1.0, 0.5), (2.0, 0.25), (3.0, 0.2), (4.0, f64::NAN)] };
        let b = Series { name: "b".into(), points: vec![(1.0, 0.4), (2.0, 0.3), (3.0, 0.1)] };
        let svg = line_chart("t", "step", "loss", &[a, b]);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        let (texts, lines) = summary(&svg);
        assert_eq!(lines, 2, "{}", svg);
        assert!(texts.iter().any(|t| t == "loss &lt;a&gt;"), "{:?}", texts);
        assert!(["t", "step", "loss", "b"].iter().all(|w| texts.iter().any(|t| t == w)), "{:?}", texts);
        assert!(!svg.contains("NaN"));
        let empty = line_chart("t", "x", "y", &[]);
        assert!(empty.contains("</svg>"));
    }

    #[test]
    fn values_that_span_decades_get_a_log_axis() {
        let s = Series { name: "loss".into(), points: (1..=50).map(|i| (i as f64, 10f64.powf(-(i as f64) / 10.0))).collect() };
        let (texts, _) = summary(&line_chart("t", "step", "loss", &[s]));
        // Decade ticks in scientific notation.
        assert!(texts.iter().any(|t| t.contains("e-")), "{:?}", texts);
        let flat = Series { name: "loss".into(), points: vec![(1.0, 0.5), (2.0, 0.4)] };
        assert!(!summary(&line_chart("t", "step", "loss", &[flat])).0.iter().any(|t| t.contains("e-")));
    }

    #[test]
    fn bars_and_scatter_carry_their_labels() {
        let svg = bars("ratio", &[("k.y".into(), 0.5), ("k.z".into(), 1.5)], 1.0, "tolerance");
        let (texts, _) = summary(&svg);
        assert!(["ratio", "k.y", "k.z", "tolerance"].iter().all(|w| texts.iter().any(|t| t == w)), "{:?}", texts);
        let svg = loglog_scatter("bounds", "observed", "proved", &[("a".into(), 1e-6, 1e-5), ("b".into(), 1e-4, 1e-5)], &["no error observed: c".into()]);
        let (texts, _) = summary(&svg);
        assert!(["bounds", "observed", "proved", "no error observed: c"].iter().all(|w| texts.iter().any(|t| t == w)), "{:?}", texts);
        assert_eq!(svg.matches("<circle").count(), 2);
    }
}
