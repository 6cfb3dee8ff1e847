//! The first screen: per workload, the slowdown with its 95% interval, the
//! factors that explain it (largest first, credit and noise status), the
//! remedy that helped most, and whether the simulator agreed — each linked to
//! the plot and the rows it came from.

use super::data::{
    self, differs_from_native, executor_legend, executor_name, headline, pct_ci, rows_link,
    slowdown_ci, slug, wall_ci,
};
use super::{Ctx, Page};
use smplab_analysis::diagnose::{Attribution, Plan};
use smplab_analysis::metrics::Results;
use smplab_chart::{self as chart, esc, IntervalRow};
use smplab_experiment::point::Point;
use smplab_record::Executor;
use smplab_stats::MedianCi;
use std::fmt::Write;

/// A factor's credit and whether removing it changed the wall time outside
/// the noise.
pub(crate) struct Credit {
    pub factor: String,
    pub removal: String,
    /// Percentage points of slowdown (`s0 − s_f`).
    pub credit: f64,
    pub without: Option<MedianCi>,
    pub outside_noise: bool,
}

/// The credits of a diagnosis, largest first.
pub(crate) fn credits(results: &Results, plan: &Plan, a: &Attribution) -> Vec<Credit> {
    let mut out: Vec<Credit> = a
        .rows
        .iter()
        .filter_map(|r| {
            let (f, p) = plan.removed.iter().find(|(f, _)| f.name == r.factor)?;
            Some(Credit {
                factor: f.name.to_string(),
                removal: f.removal.to_string(),
                credit: r.contribution,
                without: diag_slowdown_ci(results, a, p),
                // The paired ratio's interval (interleaved runs), not two
                // independent intervals.
                outside_noise: r.credited,
            })
        })
        .collect();
    out.sort_by(|x, y| y.credit.total_cmp(&x.credit));
    out
}

/// Slowdown of a diagnosis point against the diagnosis's native time (the
/// original program's), with its interval.
pub(crate) fn diag_slowdown_ci(results: &Results, a: &Attribution, p: &Point) -> Option<MedianCi> {
    if a.executor == Executor::Sim {
        return slowdown_ci(results, p);
    }
    let native = a.native_wall_s.median;
    (native > 0.0).then_some(())?;
    MedianCi::of(
        &data::wall_samples(results, p)
            .iter()
            .map(|w| w / native - 1.0)
            .collect::<Vec<_>>(),
    )
}

/// The change that lowered the slowdown most, outside the noise: a factor
/// removal of the diagnosis (or all at once) or, without a diagnosis, a
/// sibling configuration of the headline in the sweep.
fn remedy(ctx: &Ctx, diag: Option<&(Plan, Attribution)>, hp: &Point) -> String {
    let r = ctx.results;
    if let Some((plan, a)) = diag {
        let Some(base) = wall_ci(r, &plan.baseline) else {
            return "–".into();
        };
        let mut options: Vec<(String, &Point)> = plan
            .removed
            .iter()
            .map(|(f, p)| (f.removal.to_string(), p))
            .collect();
        options.push(("every factor removed at once".into(), &plan.all_removed));
        let best = options
            .into_iter()
            .filter_map(|(how, p)| {
                let w = wall_ci(r, p)?;
                (w.hi < base.lo).then_some((how, p, w.median))
            })
            .min_by(|x, y| x.2.total_cmp(&y.2));
        return match best {
            Some((how, p, _)) => format!(
                "{}: {} → {}",
                esc(&how),
                pct_ci(diag_slowdown_ci(r, a, &plan.baseline)),
                pct_ci(diag_slowdown_ci(r, a, p))
            ),
            None => "<span class=\"muted\">nothing outside the noise</span>".into(),
        };
    }
    let Some(base) = wall_ci(r, hp) else {
        return "–".into();
    };
    let best = r
        .points()
        .filter(|q| {
            q.executor() == hp.executor()
                && q.workload == hp.workload
                && q.vcpus() == hp.vcpus()
                && q.vms() == 1
                && q.scale == hp.scale
                && q.study.is_none()
                && q.config_key() != hp.config_key()
        })
        .filter_map(|q| {
            let w = wall_ci(r, q)?;
            (w.hi < base.lo).then_some((q, w.median))
        })
        .min_by(|x, y| x.1.total_cmp(&y.1));
    match best {
        Some((q, _)) => {
            // What differs, in the words of the configuration labels.
            let have: Vec<String> = hp.label().split(' ').map(String::from).collect();
            let changed: Vec<String> = q
                .label()
                .split(' ')
                .filter(|t| !have.iter().any(|h| h == t))
                .map(String::from)
                .collect();
            format!(
                "{}: {} → {}",
                esc(&changed.join(" ")),
                pct_ci(slowdown_ci(r, hp)),
                pct_ci(slowdown_ci(r, q))
            )
        }
        None => "<span class=\"muted\">– (no faster configuration outside the noise)</span>".into(),
    }
}

/// The simulator's slowdown for `hp` beside the measured interval.
fn sim_agreement(ctx: &Ctx, hp: &Point, measured: Option<MedianCi>) -> String {
    let label = hp.label();
    let Some(pred) = ctx
        .predictions
        .iter()
        .find(|p| p.label == label && p.metric == "slowdown")
    else {
        return "<span class=\"muted\">not simulated</span>".into();
    };
    let Some(m) = measured else {
        return "–".into();
    };
    let inside = m.lo <= pred.predicted && pred.predicted <= m.hi;
    format!(
        "predicted {} vs measured {}: {} <a href=\"#sim\">→ plot</a>",
        data::pct(pred.predicted),
        data::pct(m.median),
        if inside {
            "<span class=\"sig\">agrees (inside the measured interval)</span>".to_string()
        } else {
            format!(
                "<span class=\"noise\">off by {:+.0} pp</span>",
                (pred.predicted - m.median) * 100.0
            )
        }
    )
}

/// The "why" cell: the diagnosis's credits, largest first, with noise status.
fn why_cell(ctx: &Ctx, w: &str, diag: Option<&(Plan, Attribution)>) -> String {
    let r = ctx.results;
    let wid = slug(w);
    match diag {
        Some((plan, a)) => {
            let cs = credits(r, plan, a);
            let mut s = format!(
                "<span class=\"muted\">diagnosis on {} ({} vCPUs):</span> ",
                executor_name(a.executor),
                a.vcpus
            );
            let parts: Vec<String> = cs
                .iter()
                .take(4)
                .map(|c| {
                    format!(
                        "{} {:+.0} pp {}",
                        esc(&c.factor),
                        c.credit * 100.0,
                        super::data::noise_badge(c.outside_noise)
                    )
                })
                .collect();
            s.push_str(&parts.join("; "));
            if let Some(all) = a.all_removed {
                let _ = write!(
                    s,
                    "; <i>not explained by any factor: {:+.0}%</i>",
                    all.median * 100.0
                );
            }
            let _ = write!(
                s,
                " <a href=\"#diag-{}-{}\">→ diagnosis</a>",
                wid,
                a.executor
            );
            s
        }
        None => format!(
            "<span class=\"muted\">not diagnosed (<code>smplab diagnose --workload {}</code>)</span>",
            esc(w)
        ),
    }
}

/// The slowdown cell of a workload's row: the primary executor's slowdown
/// `ci` with its noise badge, then the other executors at the same size and
/// the simulator at its largest.
fn slowdown_cell(r: &Results, w: &str, hp: &Point, ci: Option<MedianCi>) -> String {
    let mut cell = format!(
        "{} ({}, {} vCPU{}) {}",
        pct_ci(ci),
        executor_name(hp.executor()),
        hp.vcpus().unwrap_or(0),
        if hp.vcpus() == Some(1) { "" } else { "s" },
        differs_from_native(r, hp).map_or("", super::data::noise_badge)
    );
    // The other executors at the same size; the simulator also at its largest.
    let mut seen = vec![hp.config_key()];
    for e in Executor::virtualized() {
        let same = headline(r, w, e, hp.vcpus()).filter(|q| q.vcpus() == hp.vcpus());
        let largest = (e == Executor::Sim)
            .then(|| headline(r, w, e, None))
            .flatten();
        for q in [same, largest].into_iter().flatten() {
            if seen.contains(&q.config_key()) {
                continue;
            }
            seen.push(q.config_key());
            let _ = write!(
                cell,
                "<br><span class=\"muted\">{} {} vCPU{}: {}</span>",
                executor_name(e),
                q.vcpus().unwrap_or(0),
                if q.vcpus() == Some(1) { "" } else { "s" },
                pct_ci(slowdown_ci(r, q))
            );
        }
    }
    cell
}

/// The rows of the slowdown figure for a workload: each executor's headline
/// at the primary's size, and the executors drawn.
fn slowdown_rows(
    r: &Results,
    w: &str,
    hp: &Point,
    rows: &mut Vec<IntervalRow>,
    used: &mut Vec<Executor>,
) {
    for q in data::EXECUTORS
        .iter()
        .filter_map(|e| headline(r, w, *e, hp.vcpus()))
    {
        if let Some(ci) = slowdown_ci(r, q) {
            used.push(q.executor());
            let label = format!(
                "{w} · {} {}vCPU",
                executor_name(q.executor()),
                q.vcpus().unwrap_or(0)
            );
            rows.push(data::slowdown_row(label, &ci, q.executor()));
        }
    }
}

/// The findings section: per workload its slowdown, why, what helped most and
/// whether the simulator agreed, then the slowdown figure.
pub fn render(ctx: &Ctx, page: &mut Page) {
    let r = ctx.results;
    let mut h = String::new();
    if ctx.workloads.is_empty() {
        h.push_str("<p>No successful runs in this store yet: nothing to conclude. The failed and skipped points are listed under raw data.</p>");
        page.section("findings", "Findings", &h);
        return;
    }
    let executors: Vec<&str> = data::EXECUTORS
        .iter()
        .filter(|e| r.points().any(|p| p.executor() == **e))
        .map(|e| executor_name(*e))
        .collect();
    let _ = write!(
        h,
        "<p class=\"lead\">{} workload{} ({}) on {}: how much slower each runs in a VM, why, what helped, and whether the simulator agreed.</p>",
        ctx.workloads.len(),
        if ctx.workloads.len() == 1 { "" } else { "s" },
        esc(&ctx.workloads.join(", ")),
        esc(&executors.join(", "))
    );
    h.push_str("<table class=\"findings\"><tr><th>workload</th><th>slowdown in a VM</th><th>why: factors, largest first (credit in percentage points)</th><th>what helped most</th><th>simulator vs measurement</th></tr>");
    let mut rows: Vec<IntervalRow> = Vec::new();
    let mut used = Vec::new();
    for w in &ctx.workloads {
        let primary = Executor::virtualized().find_map(|e| headline(r, w, e, None));
        let wid = slug(w);
        let Some(hp) = primary else {
            let _ = write!(
                h,
                "<tr><td><a href=\"#wl-{wid}\">{}</a></td><td colspan=\"4\" class=\"muted\">only native runs, or no run in the default set-up: see the per-workload section</td></tr>",
                esc(w)
            );
            continue;
        };
        let ci = slowdown_ci(r, hp);
        let cell = slowdown_cell(r, w, hp, ci);
        slowdown_rows(r, w, hp, &mut rows, &mut used);

        // Why: the measured diagnosis if there is one, else the simulated.
        let diag = ctx
            .diagnoses
            .iter()
            .filter(|(_, a)| &a.workload == w)
            .min_by_key(|(_, a)| a.executor == Executor::Sim);
        let why = why_cell(ctx, w, diag);
        let _ = write!(
            h,
            "<tr id=\"finding-{wid}\"><td><a href=\"#wl-{wid}\">{}</a><br><span class=\"muted\"><a href=\"#wl-{wid}\">plot</a> · {}</span></td><td>{cell}</td><td>{why}</td><td>{}</td><td>{}</td></tr>",
            esc(w),
            rows_link(w, "rows"),
            remedy(ctx, diag, hp),
            if hp.executor() == Executor::Sim {
                "<span class=\"muted\">simulated only</span>".to_string()
            } else {
                sim_agreement(ctx, hp, ci)
            }
        );
    }
    h.push_str("</table><p class=\"muted\">Slowdown: wall time over native wall time, minus one; median over repetitions with its 95% interval in brackets († fewer than 6 repetitions: the range, covering the median with less than 95%). <span class=\"sig\">outside noise</span>: the intervals do not overlap; <span class=\"noise\">~ within noise</span>: they do. pp: percentage points of slowdown.</p>");
    let x = super::overcommit::exclusions(r);
    if x.runs > 0 {
        let _ = write!(
            h,
            "<p>Overcommit: {} <a href=\"#overcommit\">→ weighted speedup</a></p>",
            super::overcommit::exclusion_sentence(&x)
        );
    }
    if !rows.is_empty() {
        h.push_str("<figure id=\"fig-slowdown\">");
        h.push_str(&chart::interval_chart(
            "Slowdown versus native per workload and executor (median, 95% interval)",
            "slowdown vs native (%)",
            &rows,
            &executor_legend(used),
        ));
        h.push_str("</figure>");
    }
    page.section("findings", "Findings", &h);
}
