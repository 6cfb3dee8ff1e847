//! Bar charts: vertical bars with whiskers, horizontal stacked bars (a
//! total split into its parts) and log-bucketed latency histograms.

use super::{
    esc, fmt_ns, fmt_num, legend, nice_max, nice_range, palette, truncate, x_gridlines, Frame,
};
use super::{Colour, LegendEntry};
use std::fmt::Write;

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
    x_gridlines(&mut s, x_of, lo, hi, top, axis_y);
    let _ = write!(
        s,
        "<text x=\"{cx:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\">{u}</text>",
        cx = left + pw / 2.0,
        ty = axis_y + 27.0,
        u = esc(unit)
    );
    for (ri, row) in rows.iter().enumerate() {
        let y = top + ri as f64 * row_h;
        stack_row(&mut s, row, series, y, row_h, left, x_of);
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

/// One row of a stacked-bar chart at height `y`: its label, its segments
/// (positive ones right of zero, negative ones left, each with its hover
/// note) and the whisker of its total.
fn stack_row(
    s: &mut String,
    row: &StackRow,
    series: &[LegendEntry],
    y: f64,
    row_h: f64,
    left: f64,
    x_of: impl Fn(f64) -> f64,
) {
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
