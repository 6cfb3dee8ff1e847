//! Line charts over a numeric x axis, with whiskers where a line's points
//! are medians of repetitions.

use super::{esc, fmt_num, nice_range, Colour, Frame};
use std::fmt::Write;

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
        f.x_tick_label(&mut s, x_of(x), x);
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
