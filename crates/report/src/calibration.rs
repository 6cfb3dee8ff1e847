//! The calibration of this host as a table: each simulator profile field,
//! its value and interval, how it was measured; what could not be measured.

use super::{Ctx, Page};
use smplab_chart::{esc, fmt_ns};
use std::fmt::Write;

pub fn render(ctx: &Ctx, page: &mut Page) {
    let Some(cal) = &ctx.opts.calibration else {
        return;
    };
    let mut h = String::from("<p>Costs measured on this host and written into the simulator's platform profile (medians over repetitions; brackets: range).</p><table><tr><th>profile field</th><th>value</th><th>range</th><th class=\"l\">how it was measured</th></tr>");
    for e in &cal.estimates {
        // Nanosecond costs span ns to ms: scaled units read better.
        let fmt = |v: f64| {
            if e.field.ends_with("_per_iter") {
                format!("{v:.1} ns/iter")
            } else {
                // Non-negative; f64 `as` u64 saturates (NaN to 0).
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let ns = v.max(0.0).round() as u64;
                fmt_ns(ns)
            }
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            esc(e.field),
            fmt(e.value),
            e.spread
                .map_or("–".into(), |(a, b)| format!("{} – {}", fmt(a), fmt(b))),
            esc(&e.how)
        );
    }
    for (f, why) in &cal.unmeasured {
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>not measured</td><td></td><td class=\"l\">{}</td></tr>",
            esc(f),
            esc(why)
        );
    }
    h.push_str("</table>");
    if !cal.info.is_empty() {
        h.push_str("<table><tr><th>Fit residuals and KVM's own halt statistics (no profile field)</th><th class=\"l\">value</th></tr>");
        for (what, v) in &cal.info {
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"l\">{}</td></tr>",
                esc(what),
                esc(v)
            );
        }
        h.push_str("</table>");
    }
    page.section("calibration", "Calibration", &h);
}
