//! Raw data, last: every configuration in a table that sorts (click a
//! heading) and filters (type words), collapsed; the failed and skipped
//! points with their reasons; the CSV exports. Also the terminal summary.

use super::data::{num_ci, pct_ci, slowdown_ci, sort_value, wall_ci, weighted_speedup_ci};
use super::{Ctx, Page};
use smplab_analysis::metrics::Results;
use smplab_chart::{self as chart, esc};
use smplab_experiment::store::Status;
use std::fmt::Write;

fn configurations(ctx: &Ctx) -> String {
    let r = ctx.results;
    let mut h = format!(
        "<details id=\"raw\"><summary>All {} configurations (click a heading to sort)</summary><p><label>Filter: <input id=\"raw-filter\" type=\"search\" placeholder=\"words, e.g. dedup vm\" size=\"30\"></label></p><div class=\"scroll\"><table id=\"raw-table\"><thead><tr>",
        r.configs.len()
    );
    for (i, th) in [
        "configuration",
        "reps",
        "wall ms",
        "slowdown vs native",
        "weighted speedup",
        "idle",
        "spin",
        "exits/s",
        "exit p50 / p99",
        "lock wait p99",
    ]
    .iter()
    .enumerate()
    {
        let _ = write!(
            h,
            "<th data-sort=\"{}\"{}>{th}</th>",
            i,
            if i == 0 { " class=\"l\"" } else { "" }
        );
    }
    h.push_str("</tr></thead><tbody>");
    for p in r.points() {
        let reps = r.get(p).map_or(0, |v| v.len());
        let wall = wall_ci(r, p);
        let slow = slowdown_ci(r, p);
        let ws = (p.vms() > 1).then(|| weighted_speedup_ci(r, p)).flatten();
        let idle = r.idle_fraction(p);
        let exits = r.workload_exits_per_s(p);
        let el = r.exit_latency(p);
        let lw = r.lock_wait(p);
        let spin = r
            .spin_fraction(p)
            .map(|s| (s.median, format!("{:.1}%", s.median * 100.0)))
            .or_else(|| {
                r.spin_rate(p)
                    .filter(|s| s.median > 0.0)
                    .map(|s| (s.median, format!("{}/s", chart::fmt_num(s.median))))
            });
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{reps}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td><td{}>{}</td></tr>",
            esc(&super::data::display_label(p, false)),
            sort_value(wall.map(|c| c.median)),
            num_ci(wall, 1e3, 2),
            sort_value(slow.map(|c| c.median)),
            pct_ci(slow),
            sort_value(ws.map(|c| c.median)),
            num_ci(ws, 1.0, 2),
            sort_value(idle.map(|s| s.median)),
            idle.map_or("–".into(), |s| format!("{:.1}%", s.median * 100.0)),
            sort_value(spin.as_ref().map(|s| s.0)),
            spin.map_or("–".into(), |s| s.1),
            sort_value(exits),
            exits.filter(|x| *x > 0.0).map_or("–".into(), chart::fmt_num),
            sort_value(el.map(|e| e[0].median)),
            el.map_or("–".into(), |e| format!(
                "{} / {}",
                ns_of(e[0].median),
                ns_of(e[2].median)
            )),
            sort_value(lw.map(|e| e[2].median)),
            lw.map_or("–".into(), |e| ns_of(e[2].median)),
        );
    }
    h.push_str("</tbody></table></div><p class=\"muted\">Brackets: 95% interval of the median († fewer than 6 repetitions: the range). Spin: simulated spin time share, or spin-loop iterations per second for measured runs.</p></details>");
    h
}

fn problems(ctx: &Ctx) -> String {
    let latest = ctx.store.latest();
    let problems: Vec<_> = latest.iter().filter(|e| !e.is_ok()).collect();
    if problems.is_empty() {
        return String::new();
    }
    let mut h = format!(
        "<details id=\"problems\" open><summary>{} failed or skipped points</summary><table><tr><th>point</th><th>status</th><th class=\"l\">reason</th></tr>",
        problems.len()
    );
    for e in problems {
        let (st, reason) = match &e.status {
            Status::Failed { reason } => ("failed", reason.as_str()),
            Status::Skipped { reason } => ("skipped", reason.as_str()),
            Status::Ok => ("ok", ""),
        };
        let _ = write!(
            h,
            "<tr><td>{} (rep {})</td><td>{st}</td><td class=\"l\">{}</td></tr>",
            esc(&e.point.label()),
            e.point.rep,
            esc(reason.lines().next().unwrap_or(""))
        );
    }
    h.push_str("</table></details>");
    h
}

pub fn render(ctx: &Ctx, page: &mut Page) {
    let mut h = String::from("<p>CSV exports beside this page: <a href=\"results.csv\">results.csv</a> (one row per run), <a href=\"metrics.csv\">metrics.csv</a> (one row per configuration), <a href=\"exits.csv\">exits.csv</a>, <a href=\"predictions.csv\">predictions.csv</a>. Definitions: docs/lab.md.</p>");
    h.push_str(&problems(ctx));
    h.push_str(&configurations(ctx));
    page.section("raw-data", "Raw data", &h);
}

/// A short text table of every configuration (for `lab run`'s last words).
pub fn text_summary(results: &Results, max_rows: usize) -> String {
    let mut out = format!(
        "{:<60} {:>4} {:>10} {:>11} {:>8} {:>10}\n",
        "configuration", "reps", "wall ms", "slowdown", "idle", "exits/s"
    );
    for (i, p) in results.points().enumerate() {
        if i == max_rows {
            out.push_str(&format!(
                "... {} more in the report\n",
                results.configs.len() - max_rows
            ));
            break;
        }
        let exits: f64 = results.workload_exits_per_s(p).unwrap_or(0.0);
        let mut label = p.label();
        if label.chars().count() > 60 {
            label = label.chars().take(59).collect::<String>() + "…";
        }
        out.push_str(&format!(
            "{:<60} {:>4} {:>10} {:>11} {:>8} {:>10}\n",
            label,
            results.get(p).map_or(0, |v| v.len()),
            results
                .wall(p)
                .map_or("–".into(), |s| format!("{:.2}", s.median * 1e3)),
            results
                .slowdown(p)
                .map_or("–".into(), |s| format!("{:+.1}%", s.median * 100.0)),
            results
                .idle_fraction(p)
                .map_or("–".into(), |s| format!("{:.0}%", s.median * 100.0)),
            if exits > 0.0 {
                chart::fmt_num(exits)
            } else {
                "–".into()
            }
        ));
    }
    out
}

/// A median in ns, printed in scaled units.
fn ns_of(median: f64) -> String {
    // Latency medians are non-negative; f64 `as` u64 saturates (NaN to 0).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ns = median as u64;
    chart::fmt_ns(ns)
}
