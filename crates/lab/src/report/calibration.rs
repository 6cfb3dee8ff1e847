//! The calibration of this host as a table: each simulator profile field,
//! its value and interval, how it was measured; what could not be measured.

use super::{Ctx, Page};
use crate::svg::esc;
use std::fmt::Write;

pub fn render(ctx: &Ctx, page: &mut Page) {
    let Some(cal) = &ctx.opts.calibration else {
        return;
    };
    let mut h = String::from("<p>Costs measured on this host and written into the simulator's platform profile (medians over repetitions; brackets: range).</p><table><tr><th>profile field</th><th>value</th><th>range</th><th class=\"l\">how it was measured</th></tr>");
    for e in &cal.estimates {
        let unit = if e.field.ends_with("_per_iter") {
            "ns/iter"
        } else {
            "ns"
        };
        let _ = write!(
            h,
            "<tr><td><code>{}</code></td><td>{:.1} {unit}</td><td>{}</td><td class=\"l\">{}</td></tr>",
            esc(e.field),
            e.value,
            e.spread
                .map_or("–".into(), |(a, b)| format!("{a:.1} – {b:.1}")),
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
        h.push_str("<table><tr><th>KVM's own halt statistics (no profile field)</th><th class=\"l\">value</th></tr>");
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
