//! One section per workload: every configuration's slowdown with its 95%
//! interval (aggregated into distributions when a sweep has many), and a
//! table of the configurations behind it.

use super::data::{
    colour, differs_from_native, display_label, executor_legend, executor_name, executor_rank,
    noise_badge, num_ci, pct_ci, rows_link, slowdown_ci, slowdown_row, slug, wall_ci,
};
use super::{Ctx, Page};
use smplab_chart::{self as chart, esc, IntervalRow};
use smplab_experiment::point::Point;
use smplab_record::Executor;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Above this many configurations a workload's chart shows distributions
/// per executor and size instead of one row per configuration.
const MAX_ROWS: usize = 24;
/// Rows of the per-workload table; the rest are in the raw data.
const MAX_TABLE_ROWS: usize = 16;

/// Quantile of sorted values (linear interpolation).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let x = q * (sorted.len() - 1) as f64;
    // In 0..len for q in 0..=1; f64 `as` usize saturates (NaN to 0), which
    // is the clamp wanted.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let i = x.floor() as usize;
    let f = x - x.floor();
    let next = sorted[(i + 1).min(sorted.len() - 1)];
    sorted[i] + (next - sorted[i]) * f
}

fn chart_rows(ctx: &Ctx, points: &[&Point]) -> (Vec<IntervalRow>, bool) {
    let r = ctx.results;
    if points.len() <= MAX_ROWS {
        let rows = points
            .iter()
            .filter_map(|p| {
                let ci = slowdown_ci(r, p)?;
                Some(slowdown_row(display_label(p, true), &ci, p.executor()))
            })
            .collect();
        return (rows, false);
    }
    // Many configurations: one row per executor, vCPUs and VMs with the
    // distribution of their medians (box: quartiles; whiskers: min–max).
    // (colour, vCPUs, VMs) → (executor, configuration medians).
    type Groups = BTreeMap<(usize, Option<u32>, u32), (Executor, Vec<f64>)>;
    let mut groups = Groups::new();
    for p in points {
        if let Some(ci) = slowdown_ci(r, p) {
            groups
                .entry((executor_rank(p.executor()), p.vcpus(), p.vms()))
                .or_insert_with(|| (p.executor(), vec![]))
                .1
                .push(ci.median * 100.0);
        }
    }
    let rows = groups
        .into_iter()
        .map(|((_, vcpus, vms), (e, mut v))| {
            v.sort_by(f64::total_cmp);
            IntervalRow {
                label: format!(
                    "{} {}vCPU{} · {} configs",
                    executor_name(e),
                    vcpus.unwrap_or(0),
                    if vms > 1 {
                        format!(" ×{vms}vm")
                    } else {
                        String::new()
                    },
                    v.len()
                ),
                median: quantile(&v, 0.5),
                lo: v[0],
                hi: v[v.len() - 1],
                quartiles: Some((quantile(&v, 0.25), quantile(&v, 0.75))),
                colour: colour(e),
                note: format!("{} configurations", v.len()),
            }
        })
        .collect();
    (rows, true)
}

pub fn render(ctx: &Ctx, page: &mut Page) {
    let r = ctx.results;
    let mut by_workload: BTreeMap<&str, Vec<&Point>> = BTreeMap::new();
    for p in r.points() {
        by_workload.entry(p.workload.as_str()).or_default().push(p);
    }
    if by_workload.is_empty() {
        return;
    }
    let mut h = String::from("<p>Every configuration of each workload: slowdown versus native, median and 95% interval over repetitions (whiskers). Colours are executors, the same in every plot.</p>");
    for (w, points) in &by_workload {
        let wid = slug(w);
        let _ = write!(h, "<h3 id=\"wl-{wid}\">{}</h3>", esc(w));
        let mut virt: Vec<&Point> = points
            .iter()
            .copied()
            .filter(|p| p.executor() != Executor::Native)
            .collect();
        virt.sort_by_key(|p| (executor_rank(p.executor()), p.vcpus(), p.vms(), p.label()));
        let (rows, aggregated) = chart_rows(ctx, &virt);
        if !rows.is_empty() {
            let used: Vec<Executor> = virt.iter().map(|p| p.executor()).collect();
            h.push_str("<figure>");
            h.push_str(&chart::interval_chart(
                &if aggregated {
                    format!("{w}: slowdown distribution over {} configurations", virt.len())
                } else {
                    format!("{w}: slowdown versus native")
                },
                if aggregated {
                    "slowdown vs native (%): dot median, box quartiles, whiskers min–max of configuration medians"
                } else {
                    "slowdown vs native (%), whiskers: 95% interval"
                },
                &rows,
                &executor_legend(used),
            ));
            h.push_str("</figure>");
        }
        h.push_str("<table><tr><th>configuration</th><th>reps</th><th>wall time, ms</th><th>slowdown vs native</th><th>vs native</th></tr>");
        let mut shown: Vec<&Point> = points.clone();
        // The default set-up first, then by executor and size.
        shown.sort_by_key(|p| {
            (
                !super::data::is_default_setup(p),
                executor_rank(p.executor()),
                p.vcpus(),
                p.vms(),
            )
        });
        for p in shown.iter().take(MAX_TABLE_ROWS) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&display_label(p, true)),
                r.get(p).map_or(0, |v| v.len()),
                num_ci(wall_ci(r, p), 1e3, 2),
                pct_ci(slowdown_ci(r, p)),
                differs_from_native(r, p).map_or("", noise_badge)
            );
        }
        h.push_str("</table>");
        let _ = write!(
            h,
            "<p class=\"muted\">{} configuration{}{}: {}.</p>",
            points.len(),
            if points.len() == 1 { "" } else { "s" },
            if points.len() > MAX_TABLE_ROWS {
                format!(", the first {MAX_TABLE_ROWS} above")
            } else {
                String::new()
            },
            rows_link(w, "all rows in the raw data")
        );
    }
    page.section("workloads", "Per workload", &h);
}
