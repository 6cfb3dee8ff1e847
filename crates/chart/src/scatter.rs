//! X-y scatters with whiskers on both coordinates, optionally on one shared
//! range with the y = x diagonal (predicted against measured).

use super::{esc, fmt_num, legend, nice_range, Colour, Frame, LegendEntry};
use std::fmt::Write;

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
    let ((xlo, xhi), (ylo, yhi)) = axis_ranges(points, diagonal);
    f.y_axis(&mut s, ylo, yhi, ylabel, false);
    let x_of = |x: f64| f.left + f.pw() * (x - xlo) / (xhi - xlo);
    let axis_y = f.top + f.ph();
    for i in 0..=5 {
        let v = xlo + (xhi - xlo) * i as f64 / 5.0;
        f.x_tick_label(&mut s, x_of(v), v);
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
    let y_of = |y: f64| f.y_of(y, ylo, yhi);
    for p in points {
        draw_point(&mut s, p, x_of, y_of, xlabel, ylabel);
    }
    legend(&mut s, f.left, axis_y + 40.0, legend_entries);
    s.push_str("</svg>");
    s
}

/// The x and y axis ranges of a scatter: from the points and their drawn
/// whiskers, one shared range when `diagonal`.
fn axis_ranges(points: &[ScatterPoint], diagonal: bool) -> ((f64, f64), (f64, f64)) {
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
    if diagonal {
        let all = xs.clone().chain(ys.clone());
        let (lo, hi) = nice_range(all.clone().fold(0.0, f64::min), all.fold(0.0, f64::max));
        ((lo, hi), (lo, hi))
    } else {
        let (ylo, yhi) = nice_range(ys.clone().fold(0.0, f64::min), ys.fold(0.0, f64::max));
        let (xlo, xhi) = nice_range(xs.clone().fold(0.0, f64::min), xs.fold(0.0, f64::max));
        ((xlo, xhi), (ylo, yhi))
    }
}

/// One point of a scatter with its whiskers and hover text (the labels of
/// both axes, its coordinates and their intervals); non-finite points are
/// not drawn.
fn draw_point(
    s: &mut String,
    p: &ScatterPoint,
    x_of: impl Fn(f64) -> f64,
    y_of: impl Fn(f64) -> f64,
    xlabel: &str,
    ylabel: &str,
) {
    if !(p.x.is_finite() && p.y.is_finite()) {
        return;
    }
    let (px, py) = (x_of(p.x), y_of(p.y));
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
            ya = y_of(a),
            yb = y_of(b),
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
