//! Hand-written SVG charts: bars, stacked bars, lines, histograms, scatter.
//! Plain strings, no scripts, so a report opens offline in any browser.
//! Data are drawn only in [`palette`] colours; axes, grid and text in
//! [`NEUTRALS`].

pub mod palette;

pub use palette::Colour;
use std::fmt::Write;

/// The colours of everything that is not data: background, axes and text,
/// gridlines, the y = x diagonal.
pub const NEUTRALS: [&str; 4] = ["#ffffff", "#333333", "#dddddd", "#888888"];

/// A legend entry: a name and the colour it is drawn in.
pub type LegendEntry = (String, Colour);

/// Escape text for XML/HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum ≥ v: 1, 2, 2.5 or 5 × 10^k.
pub fn nice_max(v: f64) -> f64 {
    if !(v.is_finite()) || v <= 0.0 {
        return 1.0;
    }
    let e = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * e >= v {
            return m * e;
        }
    }
    10.0 * e
}

/// An axis range covering `[lo, hi]` (and 0) in exactly five "nice" steps
/// (1, 2, 2.5 or 5 × 10^k), so every tick label is round.
pub fn nice_range(lo: f64, hi: f64) -> (f64, f64) {
    let lo = if lo.is_finite() { lo.min(0.0) } else { 0.0 };
    let hi = if hi.is_finite() { hi.max(0.0) } else { 0.0 };
    if hi - lo <= 0.0 {
        return (0.0, 1.0);
    }
    let mut step = nice_max((hi - lo) / 5.0);
    loop {
        let a = (lo / step).floor() * step;
        if a + 5.0 * step >= hi - 1e-12 * step {
            return (a, a + 5.0 * step);
        }
        step = nice_max(step * 1.0001);
    }
}

pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        // Whole numbers (tick labels, counts, VM and vCPU numbers) without decimals.
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

struct Frame {
    w: f64,
    h: f64,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
}

impl Frame {
    fn new(w: f64, h: f64, left: f64, bottom: f64) -> Self {
        Frame {
            w,
            h,
            left,
            right: 20.0,
            top: 34.0,
            bottom,
        }
    }
    fn pw(&self) -> f64 {
        self.w - self.left - self.right
    }
    fn ph(&self) -> f64 {
        self.h - self.top - self.bottom
    }
    fn open(&self, title: &str) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" style=\"max-width:100%;height:auto\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\"><title>{t}</title><rect x=\"0\" y=\"0\" width=\"{w}\" height=\"{h}\" fill=\"#ffffff\"/><text x=\"{cx}\" y=\"18\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">{t}</text>",
            w = self.w,
            h = self.h,
            t = esc(title),
            cx = self.w / 2.0
        )
    }
    /// The X axis line at the bottom of the plot area, with its label (the
    /// caller writes the tick labels, which differ between charts).
    fn x_axis_line(&self, s: &mut String, label: &str) {
        let axis_y = self.top + self.ph();
        let _ = write!(
            s,
            "<line x1=\"{x0}\" y1=\"{axis_y}\" x2=\"{x1}\" y2=\"{axis_y}\" stroke=\"#333333\"/><text x=\"{cx}\" y=\"{ly}\" text-anchor=\"middle\">{xl}</text>",
            x0 = self.left,
            x1 = self.left + self.pw(),
            cx = self.left + self.pw() / 2.0,
            ly = axis_y + 30.0,
            xl = esc(label)
        );
    }

    /// Y axis from `lo` to `hi` with gridlines and a label.
    fn y_axis(&self, s: &mut String, lo: f64, hi: f64, label: &str, log: bool) {
        let ticks = 5;
        for i in 0..=ticks {
            let f = i as f64 / ticks as f64;
            let y = self.top + self.ph() * (1.0 - f);
            let v = if log {
                10f64.powf(lo + (hi - lo) * f)
            } else {
                lo + (hi - lo) * f
            };
            let _ = write!(
                s,
                "<line x1=\"{x0}\" y1=\"{y:.1}\" x2=\"{x1}\" y2=\"{y:.1}\" stroke=\"#dddddd\"/><text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{v}</text>",
                x0 = self.left,
                x1 = self.left + self.pw(),
                tx = self.left - 4.0,
                ty = y + 4.0,
                v = fmt_num(v)
            );
        }
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"{y0}\" x2=\"{x}\" y2=\"{y1}\" stroke=\"#333333\"/><text transform=\"translate(12 {cy}) rotate(-90)\" text-anchor=\"middle\">{l}</text>",
            x = self.left,
            y0 = self.top,
            y1 = self.top + self.ph(),
            cy = self.top + self.ph() / 2.0,
            l = esc(label)
        );
    }
    fn y_of(&self, v: f64, lo: f64, hi: f64) -> f64 {
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.0 };
        self.top + self.ph() * (1.0 - f.clamp(-0.05, 1.05))
    }
}

/// A legend, one row per entry.
fn legend(s: &mut String, x: f64, y: f64, entries: &[LegendEntry]) {
    for (row, (n, c)) in entries.iter().enumerate() {
        let yy = y + row as f64 * 15.0;
        let _ = write!(
            s,
            "<rect x=\"{x}\" y=\"{y0:.1}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{tx}\" y=\"{ty:.1}\">{n}</text>",
            y0 = yy,
            tx = x + 14.0,
            ty = yy + 9.0,
            n = esc(n)
        );
    }
}

/// One bar per item with an optional error range `(lo, hi)`.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub range: Option<(f64, f64)>,
    pub colour: Colour,
}

/// Vertical bars with whiskers; `unit` labels the y axis.
pub fn bar_chart(title: &str, unit: &str, bars: &[Bar], legend_entries: &[LegendEntry]) -> String {
    let h = 340.0;
    let w = (120.0 + bars.len() as f64 * 34.0).clamp(420.0, 1100.0);
    let f = Frame::new(w, h, 56.0, 120.0);
    let mut s = f.open(title);
    let (lo, hi) = nice_range(
        bars.iter()
            .map(|b| b.range.map_or(b.value, |r| r.0.min(b.value)))
            .fold(0.0, f64::min),
        bars.iter()
            .map(|b| b.range.map_or(b.value, |r| r.1.max(b.value)))
            .fold(0.0, f64::max),
    );
    f.y_axis(&mut s, lo, hi, unit, false);
    let slot = f.pw() / bars.len().max(1) as f64;
    let y0 = f.y_of(0.0, lo, hi);
    for (i, b) in bars.iter().enumerate() {
        let x = f.left + slot * i as f64 + slot * 0.15;
        let bw = slot * 0.7;
        let y = f.y_of(b.value, lo, hi);
        let _ = write!(
            s,
            "<rect class=\"bar\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{bw:.1}\" height=\"{hh:.1}\" fill=\"{c}\"><title>{l}: {v}</title></rect>",
            top = y.min(y0),
            hh = (y - y0).abs().max(0.5),
            c = b.colour,
            l = esc(&b.label),
            v = fmt_num(b.value)
        );
        if let Some((a, z)) = b.range {
            let cx = x + bw / 2.0;
            let _ = write!(
                s,
                "<line class=\"whisker\" x1=\"{cx:.1}\" y1=\"{ya:.1}\" x2=\"{cx:.1}\" y2=\"{yz:.1}\" stroke=\"#333333\"/>",
                ya = f.y_of(a, lo, hi),
                yz = f.y_of(z, lo, hi)
            );
        }
        let lx = x + bw / 2.0;
        let ly = f.top + f.ph() + 8.0;
        let _ = write!(
            s,
            "<text transform=\"translate({lx:.1} {ly:.1}) rotate(45)\" font-size=\"10\">{}</text>",
            esc(&truncate(&b.label, 28))
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{x0}\" y1=\"{y0:.1}\" x2=\"{x1}\" y2=\"{y0:.1}\" stroke=\"#333333\"/>",
        x0 = f.left,
        x1 = f.left + f.pw()
    );
    legend(&mut s, f.left + 8.0, f.top + 4.0, legend_entries);
    s.push_str("</svg>");
    s
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
}

/// One row of a stacked-bar chart: segment values, one per series, and the
/// interval of the row's total where there were repetitions.
pub struct StackRow {
    pub label: String,
    pub values: Vec<f64>,
    /// `(lo, hi)` of the total, drawn as a whisker at the bar's end.
    pub total_range: Option<(f64, f64)>,
    /// Hover text per segment (e.g. its own interval); empty for none.
    pub notes: Vec<String>,
}

/// Horizontal stacked bars: each row is a label and segment values, one per
/// series (negative segments drawn left of zero); series with an empty name
/// take no legend row.
pub fn stacked_bars(title: &str, unit: &str, series: &[LegendEntry], rows: &[StackRow]) -> String {
    let row_h = 26.0;
    let named: Vec<LegendEntry> = series.iter().filter(|x| !x.0.is_empty()).cloned().collect();
    let h = 70.0 + rows.len() as f64 * row_h + named.len() as f64 * 15.0 + 20.0;
    let w = 900.0;
    let left = 220.0;
    let mut s = Frame::new(w, h, left, 0.0).open(title);
    let pos = rows
        .iter()
        .map(|r| {
            let sum = r.values.iter().filter(|v| **v > 0.0).sum::<f64>();
            r.total_range.map_or(sum, |t| sum.max(t.1))
        })
        .fold(0.0, f64::max);
    let neg = rows
        .iter()
        .map(|r| -r.values.iter().filter(|v| **v < 0.0).sum::<f64>())
        .fold(0.0, f64::max);
    let (lo, hi) = nice_range(-neg, pos);
    let pw = w - left - 30.0;
    let x_of = |v: f64| left + pw * (v - lo) / (hi - lo);
    let top = 34.0;
    let axis_y = top + rows.len() as f64 * row_h + 4.0;
    for i in 0..=5 {
        let v = lo + (hi - lo) * i as f64 / 5.0;
        let x = x_of(v);
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"#dddddd\"/><text x=\"{x:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{v}</text>",
            ty = axis_y + 13.0,
            v = fmt_num(v)
        );
    }
    let _ = write!(
        s,
        "<text x=\"{cx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{u}</text>",
        cx = left + pw / 2.0,
        ty = axis_y + 27.0,
        u = esc(unit)
    );
    for (ri, row) in rows.iter().enumerate() {
        let y = top + ri as f64 * row_h;
        let _ = write!(
            s,
            "<text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{l}</text>",
            tx = left - 6.0,
            ty = y + row_h / 2.0 + 4.0,
            l = esc(&truncate(&row.label, 34))
        );
        let (mut pos_at, mut neg_at) = (0.0, 0.0);
        for (si, &v) in row.values.iter().enumerate() {
            if v == 0.0 || !v.is_finite() {
                continue;
            }
            let (a, b) = if v > 0.0 {
                let a = pos_at;
                pos_at += v;
                (a, pos_at)
            } else {
                let a = neg_at;
                neg_at += v;
                (neg_at, a)
            };
            let (name, c) = series
                .get(si)
                .map_or(("", palette::REFERENCE), |x| (x.0.as_str(), x.1));
            let note = row.notes.get(si).map_or("", String::as_str);
            let _ = write!(
                s,
                "<rect class=\"seg\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{bh:.1}\" fill=\"{c}\"><title>{l} — {n}: {v}{sp}{note}</title></rect>",
                x = x_of(a),
                y = y + 3.0,
                bw = (x_of(b) - x_of(a)).max(0.5),
                bh = row_h - 6.0,
                l = esc(&row.label),
                n = esc(name),
                v = fmt_num(v),
                sp = if note.is_empty() { "" } else { " " },
                note = esc(note)
            );
        }
        if let Some((a, b)) = row
            .total_range
            .filter(|r| r.0.is_finite() && r.1.is_finite() && r.1 > r.0)
        {
            let yc = y + row_h / 2.0;
            let _ = write!(
                s,
                "<path class=\"whisker\" d=\"M{xa:.1} {yc:.1}H{xb:.1}M{xa:.1} {y1:.1}V{y2:.1}M{xb:.1} {y1:.1}V{y2:.1}\" stroke=\"#333333\" stroke-width=\"1.5\" fill=\"none\"><title>{l}: total {ta}–{tb}</title></path>",
                xa = x_of(a),
                xb = x_of(b),
                y1 = yc - 6.0,
                y2 = yc + 6.0,
                l = esc(&row.label),
                ta = fmt_num(a),
                tb = fmt_num(b)
            );
        }
    }
    let x0 = x_of(0.0);
    let _ = write!(
        s,
        "<line x1=\"{x0:.1}\" y1=\"{top}\" x2=\"{x0:.1}\" y2=\"{axis_y:.1}\" stroke=\"#333333\"/>"
    );
    legend(&mut s, left, axis_y + 38.0, &named);
    s.push_str("</svg>");
    s
}

/// A line series: name, points `(x, y)`, dashed or solid, its colour
/// and, when the points are medians of repetitions, their intervals.
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
    pub colour: Colour,
    /// `(lo, hi)` per point, drawn as whiskers; empty for none.
    pub ranges: Vec<(f64, f64)>,
}

/// A legend of line samples (solid or dashed), one row per line.
fn line_legend(s: &mut String, x: f64, y: f64, lines: &[Line]) {
    for (row, l) in lines.iter().enumerate() {
        let yy = y + row as f64 * 15.0;
        let _ = write!(
            s,
            "<line x1=\"{x}\" y1=\"{ly:.1}\" x2=\"{x2}\" y2=\"{ly:.1}\" stroke=\"{c}\" stroke-width=\"2\"{d}/><text x=\"{tx}\" y=\"{ty:.1}\">{n}</text>",
            ly = yy + 5.0,
            x2 = x + 22.0,
            c = l.colour,
            d = if l.dashed { " stroke-dasharray=\"6 4\"" } else { "" },
            tx = x + 28.0,
            ty = yy + 9.0,
            n = esc(&l.name)
        );
    }
}

/// Lines over a numeric x axis, with whiskers where a line has ranges.
pub fn line_chart(title: &str, xlabel: &str, ylabel: &str, lines: &[Line]) -> String {
    let f = Frame::new(520.0, 340.0, 56.0, 56.0 + lines.len() as f64 * 15.0);
    let mut s = f.open(title);
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let xmax = xs.clone().fold(f64::MIN, f64::max);
    let xmin = xs.fold(f64::MAX, f64::min);
    let (xmin, xmax) = if xmax > xmin {
        (xmin, xmax)
    } else {
        (xmin - 1.0, xmin + 1.0)
    };
    let top = lines
        .iter()
        .flat_map(|l| {
            l.points
                .iter()
                .map(|p| p.1)
                .chain(l.ranges.iter().map(|r| r.1))
        })
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (lo, hi) = nice_range(0.0, top);
    f.y_axis(&mut s, lo, hi, ylabel, false);
    // Keep the end points off the axes so their whiskers stay visible.
    let pad = (xmax - xmin) * 0.04;
    let x_of = |x: f64| f.left + f.pw() * (x - xmin + pad) / (xmax - xmin + 2.0 * pad);
    let axis_y = f.top + f.ph();
    let mut xt: Vec<f64> = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .collect();
    xt.sort_by(f64::total_cmp);
    xt.dedup();
    for x in xt {
        let _ = write!(
            s,
            "<text x=\"{px:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{v}</text>",
            px = x_of(x),
            ty = axis_y + 14.0,
            v = fmt_num(x)
        );
    }
    f.x_axis_line(&mut s, xlabel);
    for l in lines {
        let c = l.colour;
        let pts: Vec<String> = l
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", x_of(x), f.y_of(y, lo, hi)))
            .collect();
        let _ = write!(
            s,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"{d} points=\"{p}\"/>",
            d = if l.dashed { " stroke-dasharray=\"6 4\"" } else { "" },
            p = pts.join(" ")
        );
        for (i, &(x, y)) in l.points.iter().enumerate() {
            let px = x_of(x);
            let range = l
                .ranges
                .get(i)
                .filter(|r| r.0.is_finite() && r.1.is_finite());
            if let Some(&(a, b)) = range {
                let _ = write!(
                    s,
                    "<path class=\"whisker\" d=\"M{px:.1} {ya:.1}V{yb:.1}M{l:.1} {ya:.1}H{r:.1}M{l:.1} {yb:.1}H{r:.1}\" stroke=\"{c}\" fill=\"none\"/>",
                    ya = f.y_of(a, lo, hi),
                    yb = f.y_of(b, lo, hi),
                    l = px - 4.0,
                    r = px + 4.0
                );
            }
            let interval = range.map_or(String::new(), |r| {
                format!(" [{}–{}]", fmt_num(r.0), fmt_num(r.1))
            });
            let _ = write!(
                s,
                "<circle cx=\"{px:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"><title>{n}: {x}, {y}{interval}</title></circle>",
                f.y_of(y, lo, hi),
                n = esc(&l.name),
                x = fmt_num(x),
                y = fmt_num(y)
            );
        }
    }
    line_legend(&mut s, f.left, axis_y + 40.0, lines);
    s.push_str("</svg>");
    s
}

/// One row of an interval chart: a median with its interval, optionally the
/// interquartile box of a distribution.
pub struct IntervalRow {
    pub label: String,
    pub median: f64,
    pub lo: f64,
    pub hi: f64,
    /// `(q1, q3)` when the row summarises many configurations.
    pub quartiles: Option<(f64, f64)>,
    pub colour: Colour,
    /// Hover text (counts, coverage).
    pub note: String,
}

/// Horizontal rows of median dots with interval whiskers (a forest plot)
/// around a zero line: readable with long labels and any number of rows
/// up to a few dozen.
pub fn interval_chart(
    title: &str,
    unit: &str,
    rows: &[IntervalRow],
    legend_entries: &[LegendEntry],
) -> String {
    let row_h = 22.0;
    let left = 300.0;
    let w = 820.0;
    let legend_rows = legend_entries.len();
    let h = 34.0 + rows.len() as f64 * row_h + 44.0 + legend_rows as f64 * 15.0;
    let mut s = Frame::new(w, h, left, 0.0).open(title);
    let fin = |v: &f64| v.is_finite();
    let (lo, hi) = nice_range(
        rows.iter()
            .flat_map(|r| [r.lo, r.median])
            .filter(fin)
            .fold(0.0, f64::min),
        rows.iter()
            .flat_map(|r| [r.hi, r.median])
            .filter(fin)
            .fold(0.0, f64::max),
    );
    let pw = w - left - 30.0;
    let x_of = |v: f64| left + pw * ((v - lo) / (hi - lo)).clamp(-0.02, 1.02);
    let top = 34.0;
    let axis_y = top + rows.len() as f64 * row_h + 4.0;
    for i in 0..=5 {
        let v = lo + (hi - lo) * i as f64 / 5.0;
        let x = x_of(v);
        let _ = write!(
            s,
            "<line x1=\"{x:.1}\" y1=\"{top}\" x2=\"{x:.1}\" y2=\"{axis_y:.1}\" stroke=\"#dddddd\"/><text x=\"{x:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{v}</text>",
            ty = axis_y + 13.0,
            v = fmt_num(v)
        );
    }
    let _ = write!(
        s,
        "<line x1=\"{x0:.1}\" y1=\"{top}\" x2=\"{x0:.1}\" y2=\"{axis_y:.1}\" stroke=\"#333333\"/><line x1=\"{left}\" y1=\"{axis_y:.1}\" x2=\"{r:.1}\" y2=\"{axis_y:.1}\" stroke=\"#333333\"/><text x=\"{cx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{u}</text>",
        x0 = x_of(0.0),
        r = left + pw,
        cx = left + pw / 2.0,
        ty = axis_y + 28.0,
        u = esc(unit)
    );
    for (i, r) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h + row_h / 2.0;
        let c = r.colour;
        let _ = write!(
            s,
            "<text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{l}</text>",
            tx = left - 8.0,
            ty = y + 4.0,
            l = esc(&truncate(&r.label, 48))
        );
        if !(r.median.is_finite() && r.lo.is_finite() && r.hi.is_finite()) {
            continue;
        }
        if let Some((q1, q3)) = r.quartiles {
            let _ = write!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y0:.1}\" width=\"{bw:.1}\" height=\"10\" fill=\"{c}\" fill-opacity=\"0.35\" stroke=\"{c}\"/>",
                x = x_of(q1),
                y0 = y - 5.0,
                bw = (x_of(q3) - x_of(q1)).max(1.0)
            );
        }
        let _ = write!(
            s,
            "<path class=\"whisker\" d=\"M{a:.1} {y:.1}H{b:.1}M{a:.1} {y1:.1}V{y2:.1}M{b:.1} {y1:.1}V{y2:.1}\" stroke=\"{c}\" stroke-width=\"1.5\" fill=\"none\"/><circle class=\"pt\" cx=\"{m:.1}\" cy=\"{y:.1}\" r=\"4.5\" fill=\"{c}\"><title>{l}: {v} [{lo}–{hi}] {n}</title></circle>",
            a = x_of(r.lo),
            b = x_of(r.hi),
            y1 = y - 5.0,
            y2 = y + 5.0,
            m = x_of(r.median),
            l = esc(&r.label),
            v = fmt_num(r.median),
            lo = fmt_num(r.lo),
            hi = fmt_num(r.hi),
            n = esc(&r.note)
        );
    }
    legend(&mut s, left, axis_y + 40.0, legend_entries);
    s.push_str("</svg>");
    s
}

/// A latency histogram from log-spaced `(upper bound ns, count)` buckets:
/// `ylabel` says what was counted, the bars are drawn in the colour of the
/// legend `entry`.
pub fn histogram(title: &str, ylabel: &str, buckets: &[(u64, u64)], entry: &LegendEntry) -> String {
    let f = Frame::new(420.0, 300.0, 56.0, 72.0);
    let mut s = f.open(title);
    let colour = entry.1;
    let hi = nice_max(buckets.iter().map(|b| b.1 as f64).fold(0.0, f64::max));
    f.y_axis(&mut s, 0.0, hi, ylabel, false);
    let slot = f.pw() / buckets.len().max(1) as f64;
    for (i, &(ub, c)) in buckets.iter().enumerate() {
        let x = f.left + slot * i as f64 + 1.0;
        let y = f.y_of(c as f64, 0.0, hi);
        let _ = write!(
            s,
            "<rect class=\"bin\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{bh:.1}\" fill=\"{col}\"><title>≤ {ub} ns: {c}</title></rect>",
            bw = (slot - 2.0).max(0.5),
            bh = (f.top + f.ph() - y).max(0.5),
            col = colour
        );
        if buckets.len() <= 16 || i % 2 == 0 {
            let _ = write!(
                s,
                "<text transform=\"translate({tx:.1} {ty:.1}) rotate(45)\" font-size=\"9\">{l}</text>",
                tx = x + slot / 2.0,
                ty = f.top + f.ph() + 8.0,
                l = fmt_ns(ub)
            );
        }
    }
    f.x_axis_line(&mut s, "");
    let _ = write!(
        s,
        "<text x=\"{cx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">latency, upper bound of each log₂ bucket</text>",
        cx = f.left + f.pw() / 2.0,
        ty = f.h - 6.0
    );
    legend(
        &mut s,
        f.left + f.pw() * 0.55,
        f.top + 4.0,
        std::slice::from_ref(entry),
    );
    s.push_str("</svg>");
    s
}

pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.1}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1}µs", ns as f64 / 1e3)
    } else {
        format!("{ns}ns")
    }
}

/// One point of an x-y scatter, with the intervals of its coordinates
/// where they were repeated.
pub struct ScatterPoint {
    pub colour: Colour,
    pub x: f64,
    pub y: f64,
    /// `(lo, hi)` of x, drawn as a horizontal whisker.
    pub x_range: Option<(f64, f64)>,
    /// `(lo, hi)` of y, drawn as a vertical whisker.
    pub y_range: Option<(f64, f64)>,
    /// Hover text.
    pub label: String,
}

/// A whisker range worth drawing: finite and of non-zero width.
fn drawn_range(r: Option<(f64, f64)>) -> Option<(f64, f64)> {
    r.filter(|r| r.0.is_finite() && r.1.is_finite() && r.1 > r.0)
}

/// An x-y scatter, both axes from the data and the whiskers (sharing one
/// range when `diagonal`, which also draws y = x).
pub fn xy_scatter(
    title: &str,
    xlabel: &str,
    ylabel: &str,
    diagonal: bool,
    legend_entries: &[LegendEntry],
    points: &[ScatterPoint],
) -> String {
    let f = Frame::new(
        520.0,
        420.0,
        56.0,
        60.0 + legend_entries.len() as f64 * 15.0,
    );
    let mut s = f.open(title);
    let fin = |v: &f64| v.is_finite();
    let xs = points
        .iter()
        .flat_map(|p| {
            let r = drawn_range(p.x_range);
            [Some(p.x), r.map(|r| r.0), r.map(|r| r.1)]
        })
        .flatten()
        .filter(fin);
    let ys = points
        .iter()
        .flat_map(|p| {
            let r = drawn_range(p.y_range);
            [Some(p.y), r.map(|r| r.0), r.map(|r| r.1)]
        })
        .flatten()
        .filter(fin);
    let (ylo, yhi, xlo, xhi) = if diagonal {
        let all = xs.clone().chain(ys.clone());
        let (lo, hi) = nice_range(all.clone().fold(0.0, f64::min), all.fold(0.0, f64::max));
        (lo, hi, lo, hi)
    } else {
        let (ylo, yhi) = nice_range(ys.clone().fold(0.0, f64::min), ys.fold(0.0, f64::max));
        let (xlo, xhi) = nice_range(xs.clone().fold(0.0, f64::min), xs.fold(0.0, f64::max));
        (ylo, yhi, xlo, xhi)
    };
    f.y_axis(&mut s, ylo, yhi, ylabel, false);
    let x_of = |x: f64| f.left + f.pw() * (x - xlo) / (xhi - xlo);
    let axis_y = f.top + f.ph();
    for i in 0..=5 {
        let v = xlo + (xhi - xlo) * i as f64 / 5.0;
        let _ = write!(
            s,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\">{v}</text>",
            x = x_of(v),
            y = axis_y + 14.0,
            v = fmt_num(v)
        );
    }
    f.x_axis_line(&mut s, xlabel);
    if diagonal {
        let _ = write!(
            s,
            "<line class=\"diagonal\" x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#888888\" stroke-dasharray=\"4 4\"/>",
            x_of(xlo),
            f.y_of(ylo, ylo, yhi),
            x_of(xhi),
            f.y_of(yhi, ylo, yhi)
        );
    }
    for p in points {
        if !(p.x.is_finite() && p.y.is_finite()) {
            continue;
        }
        let (px, py) = (x_of(p.x), f.y_of(p.y, ylo, yhi));
        let c = p.colour;
        let mut interval = String::new();
        if let Some((a, b)) = drawn_range(p.x_range) {
            let _ = write!(
                s,
                "<path class=\"whisker\" d=\"M{xa:.1} {py:.1}H{xb:.1}M{xa:.1} {y1:.1}V{y2:.1}M{xb:.1} {y1:.1}V{y2:.1}\" stroke=\"{c}\" fill=\"none\"/>",
                xa = x_of(a),
                xb = x_of(b),
                y1 = py - 3.0,
                y2 = py + 3.0
            );
            let _ = write!(interval, " [{}–{}]", fmt_num(a), fmt_num(b));
        }
        let mut y_interval = String::new();
        if let Some((a, b)) = drawn_range(p.y_range) {
            let _ = write!(
                s,
                "<path class=\"whisker\" d=\"M{px:.1} {ya:.1}V{yb:.1}M{x1:.1} {ya:.1}H{x2:.1}M{x1:.1} {yb:.1}H{x2:.1}\" stroke=\"{c}\" fill=\"none\"/>",
                ya = f.y_of(a, ylo, yhi),
                yb = f.y_of(b, ylo, yhi),
                x1 = px - 3.0,
                x2 = px + 3.0
            );
            let _ = write!(y_interval, " [{}–{}]", fmt_num(a), fmt_num(b));
        }
        let _ = write!(
            s,
            "<circle class=\"pt\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"4\" fill=\"{c}\"><title>{l}: {xl} {a}{interval}, {yl} {b}{y_interval}</title></circle>",
            l = esc(&p.label),
            xl = esc(xlabel),
            yl = esc(ylabel),
            a = fmt_num(p.x),
            b = fmt_num(p.y)
        );
    }
    legend(&mut s, f.left, axis_y + 40.0, legend_entries);
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axis_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(0.7), 1.0);
        assert_eq!(nice_max(1.2), 2.0);
        assert_eq!(nice_max(2.2), 2.5);
        assert_eq!(nice_max(430.0), 500.0);
        assert_eq!(nice_range(-1.0, 52.0), (-20.0, 80.0));
        assert_eq!(nice_range(0.0, 2.0), (0.0, 2.5));
        let (a, b) = nice_range(-306.0, 1546.0);
        assert!(a <= -306.0 && b >= 1546.0);
    }

    #[test]
    fn charts_are_well_formed_and_escaped() {
        let blue = palette::EXECUTORS[0];
        let b = bar_chart(
            "a<b",
            "x",
            &[Bar {
                label: "q&a".into(),
                value: -0.5,
                range: Some((-0.7, 0.2)),
                colour: blue,
            }],
            &[],
        );
        assert!(b.starts_with("<svg") && b.ends_with("</svg>"));
        assert!(b.contains("a&lt;b") && b.contains("q&amp;a"));
        assert!(!b.contains("NaN"));
        let s = stacked_bars(
            "t",
            "u",
            &[
                ("a".into(), palette::category(0)),
                ("b".into(), palette::category(1)),
            ],
            &[StackRow {
                label: "r".into(),
                values: vec![1.0, -0.5],
                total_range: Some((0.8, 1.3)),
                notes: vec!["1 [0.9–1.1]".into()],
            }],
        );
        assert_eq!(s.matches("class=\"seg\"").count(), 2);
        assert_eq!(s.matches("class=\"whisker\"").count(), 1);
        assert!(s.contains(palette::category(1).hex()) && s.contains("1 [0.9–1.1]"));
        let l = line_chart(
            "t",
            "x",
            "y",
            &[Line {
                name: "m".into(),
                points: vec![(1.0, 1.0), (2.0, 1.8)],
                dashed: true,
                colour: palette::EXECUTORS[2],
                ranges: vec![(0.9, 1.1), (1.5, 2.0)],
            }],
        );
        assert!(l.contains("polyline") && !l.contains("NaN"));
        assert_eq!(l.matches("class=\"whisker\"").count(), 2);
        assert!(l.contains(palette::EXECUTORS[2].hex()));
        let h = histogram("h", "exits", &[(1024, 5), (2048, 9)], &("vm".into(), blue));
        assert_eq!(h.matches("class=\"bin\"").count(), 2);
        let sc = xy_scatter(
            "s",
            "measured",
            "predicted",
            true,
            &[("slowdown".into(), blue)],
            &[
                ScatterPoint {
                    colour: blue,
                    x: 1.0,
                    y: 0.8,
                    x_range: Some((0.9, 1.2)),
                    y_range: Some((0.8, 0.8)),
                    label: "x".into(),
                },
                ScatterPoint {
                    colour: blue,
                    x: 2.0,
                    y: 2.1,
                    x_range: None,
                    y_range: Some((1.9, 2.3)),
                    label: "y".into(),
                },
            ],
        );
        assert_eq!(sc.matches("class=\"pt\"").count(), 2);
        // Zero-width ranges (one repetition) draw no whisker.
        assert_eq!(sc.matches("class=\"whisker\"").count(), 2);
        let rows = [
            IntervalRow {
                label: "vm <dedup>".into(),
                median: 35.0,
                lo: 30.0,
                hi: 41.0,
                quartiles: None,
                colour: blue,
                note: String::new(),
            },
            IntervalRow {
                label: "sim".into(),
                median: f64::NAN,
                lo: 0.0,
                hi: 1.0,
                quartiles: Some((1.0, 2.0)),
                colour: palette::EXECUTORS[2],
                note: String::new(),
            },
        ];
        let ic = interval_chart("i", "slowdown %", &rows, &[("vm".into(), blue)]);
        assert_eq!(
            ic.matches("class=\"whisker\"").count(),
            1,
            "NaN rows are not drawn"
        );
        assert!(ic.contains("vm &lt;dedup&gt;") && !ic.contains("NaN"));
    }
}
