//! Interval charts (forest plots): horizontal rows of medians with their
//! intervals around a zero line, optionally with an interquartile box.

use super::{esc, fmt_num, legend, nice_range, truncate, x_gridlines, Colour, Frame, LegendEntry};
use std::fmt::Write;

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
    x_gridlines(&mut s, x_of, lo, hi, top, axis_y);
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
