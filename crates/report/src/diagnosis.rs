//! Diagnoses found in the store (Ding & Shan §IV, Fig. 3): the slowdown of the
//! baseline and of each factor removed, with intervals; the baseline
//! decomposed into credits; and which low-level rates move with the slowdown
//! across configurations (Ye et al.'s macro versus micro).

use super::data::{colour, executor_legend, executor_name, noise_badge, pct_ci, slug};
use super::findings::{credits, diag_slowdown_ci, Credit};
use super::{Ctx, Page};
use crate::diagnosis_charts::factor_colour;
use smplab_analysis::diagnose::{Attribution, Plan, INTERACTION, REMAINDER};
use smplab_analysis::metrics::Results;
use smplab_chart::{self as chart, esc, IntervalRow, ScatterPoint, StackRow};
use smplab_record::Executor;
use smplab_stats::MedianCi;
use std::fmt::Write;

/// One diagnosis: its heading, the attribution table and the charts.
fn one(ctx: &Ctx, plan: &Plan, a: &Attribution, h: &mut String) {
    let r = ctx.results;
    let _ = write!(
        h,
        "<h3 id=\"diag-{}-{}\">{} on {} ({} vCPUs{})</h3>",
        slug(&a.workload),
        a.executor,
        esc(&a.workload),
        executor_name(a.executor),
        a.vcpus,
        if a.vms > 1 {
            format!(", {} VMs at once", a.vms)
        } else {
            String::new()
        }
    );
    let shown = Shown {
        r,
        plan,
        a,
        base: diag_slowdown_ci(r, a, &plan.baseline),
        cs: credits(r, plan, a),
    };
    attribution_table(&shown, h);
    attribution_charts(&shown, h);
}

/// A diagnosis as the report shows it: its plan and attribution, the
/// baseline's slowdown interval and the factors' credits.
struct Shown<'a> {
    r: &'a Results<'a>,
    plan: &'a Plan,
    a: &'a Attribution,
    base: Option<MedianCi>,
    cs: Vec<Credit>,
}

/// The attribution as a table: the baseline, each factor's credit with its
/// noise badge, the interaction and the remainder, with what they mean.
fn attribution_table(shown: &Shown, h: &mut String) {
    let (r, plan, a, base, cs) = (shown.r, shown.plan, shown.a, shown.base, &shown.cs);
    let _ = write!(
        h,
        "<p>Baseline (HLT idle, as written, floating vCPUs, global device lock{}): slowdown {} against native {:.2} ms. Each factor is removed on its own; its credit is the baseline slowdown minus the slowdown without it.</p>",
        if a.executor == Executor::Sim { ", PLE on, no APICv" } else { "" },
        pct_ci(base),
        a.native_wall_s.median * 1e3
    );
    h.push_str("<table><tr><th>factor removed</th><th class=\"l\">how</th><th>slowdown without it</th><th>credit, pp</th><th>wall time vs baseline</th></tr>");
    for c in cs {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{:+.1}</td><td>{}</td></tr>",
            esc(&c.factor),
            esc(&c.removal),
            pct_ci(c.without),
            c.credit * 100.0,
            noise_badge(c.outside_noise)
        );
    }
    if let (Some(all), Some(i)) = (a.all_removed, a.interaction) {
        let _ = write!(
            h,
            "<tr><td>interaction</td><td class=\"l\">what no single removal explains (factors overlap or compound)</td><td></td><td>{:+.1}</td><td></td></tr><tr><td>remainder</td><td class=\"l\">every factor above removed at once</td><td>{}</td><td>{:+.1}</td><td></td></tr>",
            i * 100.0,
            pct_ci(diag_slowdown_ci(r, a, &plan.all_removed)),
            all.median * 100.0
        );
        if a.baseline.median > 0.0 && all.median > 0.5 * a.baseline.median {
            let _ = write!(
                h,
                "</table><p class=\"note\">Most of the slowdown ({:.0}% of it) remains with every factor removed: its main cause is not among these factors.{}</p>",
                (all.median / a.baseline.median * 100.0).min(999.0),
                if a.pvm_host {
                    " On this PVM host guest kernel code (blocking, wakeups, IPIs, the scheduler) runs in KVM's instruction emulator, about 1000× slower than natively — the likely remainder."
                } else {
                    ""
                }
            );
        } else {
            h.push_str("</table>");
        }
    } else {
        h.push_str("</table>");
    }
    for m in &a.missing {
        let _ = write!(
            h,
            "<p class=\"muted\">{}: no successful run, not attributed.</p>",
            esc(m)
        );
    }
    for (factor, why) in &a.not_applicable {
        let _ = write!(
            h,
            "<p class=\"muted\">{}: not applicable, not run ({}).</p>",
            esc(factor),
            esc(why)
        );
    }
    if a.too_few_pairs() {
        h.push_str("<p class=\"note\">Fewer than 6 repetitions: the paired ratios have no 95% interval, so no factor is credited.</p>");
    }
    h.push_str("<p class=\"muted\">Factors interact, so credits need not add up; the interaction line is the difference. The baseline and each variant run interleaved, one repetition of each back to back, the order reversed every other repetition; a credit is <i>within noise</i> when the 95% interval of the paired ratio (wall time without the factor ÷ the baseline's, repetition by repetition) holds 1.</p>");
}

/// Fig. 3: each configuration's slowdown with its interval, and the baseline
/// slowdown split into credits (one colour per factor in every diagnosis).
fn attribution_charts(shown: &Shown, h: &mut String) {
    let (r, plan, a, base, cs) = (shown.r, shown.plan, shown.a, shown.base, &shown.cs);
    // Fig. 3: each configuration's slowdown with its interval.
    let colour = colour(a.executor);
    let mut rows = Vec::new();
    let mut push = |label: String, ci: Option<MedianCi>| {
        if let Some(c) = ci {
            rows.push(IntervalRow {
                label,
                median: c.median * 100.0,
                lo: c.lo * 100.0,
                hi: c.hi * 100.0,
                quartiles: None,
                colour,
                note: format!("{} repetitions", c.n),
            });
        }
    };
    push("baseline".into(), base);
    for c in cs {
        push(format!("− {}", c.factor), c.without);
    }
    push(
        "− every factor".into(),
        diag_slowdown_ci(r, a, &plan.all_removed),
    );
    h.push_str("<div class=\"grid\">");
    h.push_str(&chart::interval_chart(
        &format!(
            "{} on {}: slowdown with each factor removed",
            a.workload,
            executor_name(a.executor)
        ),
        "slowdown vs native (%), whiskers: 95% interval",
        &rows,
        &executor_legend([a.executor]),
    ));
    // One colour per factor in every diagnosis (`diagnose::factor_colour`),
    // in the order of `diagnose::FACTORS`.
    let mut series = Vec::new();
    let mut vals: Vec<f64> = Vec::new();
    for f in smplab_analysis::diagnose::FACTORS {
        if let Some(c) = cs.iter().find(|c| c.factor == f.name) {
            series.push((c.factor.clone(), factor_colour(f.name)));
            vals.push(c.credit * 100.0);
        }
    }
    if let (Some(all), Some(i)) = (a.all_removed, a.interaction) {
        series.push((INTERACTION.into(), factor_colour(INTERACTION)));
        vals.push(i * 100.0);
        series.push((REMAINDER.into(), factor_colour(REMAINDER)));
        vals.push(all.median * 100.0);
    }
    h.push_str(&chart::stacked_bars(
        &format!("{}: baseline slowdown split into credits", a.workload),
        "percentage points of slowdown (negative: removing the factor made it slower)",
        &series,
        &[StackRow {
            label: format!("{} {}", a.workload, executor_name(a.executor)),
            values: vals,
            total_range: None,
            notes: vec![],
        }],
    ));
    h.push_str("</div>");
}

fn correlations(ctx: &Ctx) -> String {
    let mut corr = String::new();
    for e in Executor::virtualized() {
        let c = smplab_analysis::metrics::correlate_with_slowdown(ctx.results, e);
        let Some(top) = c.first() else {
            continue;
        };
        let _ = write!(
            corr,
            "<div><h4>{}: {} configurations</h4><table><tr><th>low-level rate (per second)</th><th>Pearson r with slowdown</th></tr>",
            executor_name(e),
            top.pairs.len()
        );
        for x in c.iter().take(6) {
            let _ = write!(
                corr,
                "<tr><td>{}</td><td>{:+.2}</td></tr>",
                esc(&x.micro),
                x.r
            );
        }
        corr.push_str("</table></div>");
        let pts: Vec<ScatterPoint> = top
            .pairs
            .iter()
            .map(|(l, x, y)| ScatterPoint {
                colour: colour(e),
                x: *x,
                y: *y * 100.0,
                x_range: None,
                y_range: None,
                label: l.clone(),
            })
            .collect();
        corr.push_str(&chart::xy_scatter(
            &format!(
                "{}: slowdown vs {} (r = {:+.2})",
                executor_name(e),
                top.micro,
                top.r
            ),
            &format!("{} per second", top.micro),
            "slowdown vs native (%)",
            false,
            &executor_legend([e]),
            &pts,
        ));
    }
    corr
}

pub fn render(ctx: &Ctx, page: &mut Page) {
    let mut h = String::new();
    for (plan, a) in &ctx.diagnoses {
        one(ctx, plan, a, &mut h);
    }
    let corr = correlations(ctx);
    if !corr.is_empty() {
        h.push_str("<h3 id=\"macro-micro\">Which low-level rates move with the slowdown</h3><p>Within one executor, every low-level rate (exits by reason, guest IPIs, halts, wakeups, context switches, blocks, spins) correlated with the slowdown across the one-VM configurations, strongest first. A correlation across workloads points at a candidate; the diagnoses above test causes.</p><div class=\"grid\">");
        h.push_str(&corr);
        h.push_str("</div>");
    }
    if !h.is_empty() {
        page.section("diagnosis", "Diagnosis", &h);
    }
}
