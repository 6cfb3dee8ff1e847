//! The diagnosis charts (Fig. 3 of Ding & Shan): slowdown per configuration
//! and the baseline slowdown attributed to factors.

use crate::data::colour;
use smplab_analysis::diagnose::{factor_rank, Attribution, INTERACTION, REMAINDER};
use smplab_chart::{palette, Colour};
use smplab_stats::MedianCi;

/// The colour a factor (or [`INTERACTION`], [`REMAINDER`]) is drawn in: the
/// same in every diagnosis, never an executor's colour.
pub fn factor_colour(name: &str) -> Colour {
    palette::category(factor_rank(name))
}

/// The Fig. 3-style charts: slowdown of each configuration (bars), and the
/// baseline slowdown decomposed into factors (one stacked bar).
pub fn charts(a: &Attribution) -> String {
    use smplab_chart::{bar_chart, stacked_bars, Bar, StackRow};
    let colour = colour(a.executor);
    let bar = |label: String, ci: &MedianCi| Bar {
        label,
        value: ci.median * 100.0,
        range: Some((ci.lo * 100.0, ci.hi * 100.0)),
        colour,
    };
    let mut bars = vec![bar("baseline".into(), &a.baseline_ci)];
    for r in &a.rows {
        bars.push(bar(format!("− {}", r.factor), &r.slowdown_without_ci));
    }
    if let Some(all) = &a.all_removed_ci {
        bars.push(bar("− all factors".into(), all));
    }
    let title = format!(
        "{} on {}: slowdown vs native (%, whiskers: 95% interval of the median)",
        a.workload, a.executor
    );
    let mut out = bar_chart(
        &title,
        "slowdown %",
        &bars,
        &[(a.executor.to_string(), colour)],
    );
    let mut series: Vec<(String, Colour)> = a
        .rows
        .iter()
        .map(|r| (r.factor.clone(), factor_colour(&r.factor)))
        .collect();
    // Credits within noise are drawn as 0, as they are counted.
    let mut vals: Vec<f64> = a.rows.iter().map(|r| r.credit() * 100.0).collect();
    if let (Some(all), Some(i)) = (a.all_removed, a.interaction) {
        series.push((INTERACTION.into(), factor_colour(INTERACTION)));
        vals.push(i * 100.0);
        series.push((REMAINDER.into(), factor_colour(REMAINDER)));
        vals.push(all.median * 100.0);
    }
    out.push_str(&stacked_bars(
        &format!("{}: baseline slowdown attributed to factors", a.workload),
        "percentage points of slowdown (negative: removing the factor made it slower; within noise: 0)",
        &series,
        &[StackRow {
            label: format!("{} {}", a.workload, a.executor),
            values: vals,
            total_range: None,
            notes: vec![],
        }],
    ));
    out
}
