//! Hand-written SVG charts: bars, stacked bars, lines, histograms, scatter.
//! Plain strings, no scripts, so a report opens offline in any browser.
//! Data are drawn only in [`palette`] colours; axes, grid and text in
//! [`NEUTRALS`].
//!
//! This module owns what every chart shares: text escaping, number
//! formatting, "nice" axis ranges, the plot frame with its axes, gridlines
//! and legends. The charts are in `bars` (bars, stacked bars, histograms),
//! `lines`, `intervals` (forest plots) and `scatter`, re-exported here.

pub mod palette;

pub use palette::Colour;
use std::fmt::Write;

mod bars;
mod intervals;
mod lines;
mod scatter;

pub use bars::{bar_chart, histogram, stacked_bars, Bar, StackRow};
pub use intervals::{interval_chart, IntervalRow};
pub use lines::{line_chart, Line};
pub use scatter::{xy_scatter, ScatterPoint};

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

    /// A tick label under the X axis at pixel `x`, reading `v`.
    fn x_tick_label(&self, s: &mut String, x: f64, v: f64) {
        let _ = write!(
            s,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\">{v}</text>",
            y = self.top + self.ph() + 14.0,
            v = fmt_num(v)
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

/// Vertical gridlines at the five steps of `[lo, hi]` from `top` down to the
/// horizontal axis at `axis_y`, each labelled below the axis (the x axis of
/// the horizontal charts).
fn x_gridlines(s: &mut String, x_of: impl Fn(f64) -> f64, lo: f64, hi: f64, top: f64, axis_y: f64) {
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

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
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

#[cfg(test)]
mod tests;
