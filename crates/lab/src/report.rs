//! `smplab lab report`: one self-contained HTML page (inline SVG, no scripts,
//! no external resources) plus CSV exports, from a results store.

use crate::diagnose;
use crate::metrics::{prediction_error_by_metric, Results, Summary};
use crate::point::Point;
use crate::store::{Status, Store};
use crate::svg::{self, esc, Bar, Line};
use smplab_record::config::RunConfig;
use smplab_record::Executor;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: cannot write report: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    pub title: String,
    /// Free-text notes shown at the top (what was skipped and why, ...).
    pub notes: Vec<String>,
    /// Extra preformatted sections `(heading, text)` (the demo's calibration).
    pub sections: Vec<(String, String)>,
}

/// Files a report wrote.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub html: PathBuf,
    pub csv: Vec<PathBuf>,
}

fn pct(s: Option<Summary>) -> String {
    match s {
        Some(s) => format!(
            "{:+.1}% <span class=\"sp\">[{:+.1}, {:+.1}]</span>",
            s.median * 100.0,
            s.min * 100.0,
            s.max * 100.0
        ),
        None => "–".into(),
    }
}
fn frac(s: Option<Summary>) -> String {
    s.map_or("–".into(), |s| format!("{:.1}%", s.median * 100.0))
}
fn num(s: Option<Summary>) -> String {
    s.map_or("–".into(), |s| svg::fmt_num(s.median))
}
fn secs(s: Option<Summary>) -> String {
    s.map_or("–".into(), |s| {
        format!(
            "{:.3} <span class=\"sp\">±{:.1}%</span>",
            s.median,
            s.rel_spread() * 100.0
        )
    })
}
fn ns(s: Option<&Summary>) -> String {
    s.map_or("–".into(), |s| svg::fmt_ns(s.median as u64))
}

fn executor_index(e: Executor) -> usize {
    match e {
        Executor::Native => 7,
        Executor::Vm => 0,
        Executor::Qemu => 1,
        Executor::Sim => 2,
    }
}

/// Family of a point for per-VM-count lines: everything but `vms`.
fn without_vms(p: &Point) -> String {
    let mut q = p.clone();
    q.config.set_vms(1);
    q.config_key()
}

/// Render the page.
pub fn render_html(store: &Store, opts: &ReportOptions) -> String {
    let results = Results::new(store);
    let latest = store.latest();
    let mut h = String::new();
    let title = if opts.title.is_empty() {
        "smplab lab report".to_string()
    } else {
        opts.title.clone()
    };
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t}</title><style>\
body{{font-family:sans-serif;margin:24px;max-width:1200px;color:#222}}\
table{{border-collapse:collapse;margin:8px 0;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}}\
td:first-child,th:first-child{{text-align:left}}th{{background:#f0f0f0}}.sp{{color:#777;font-size:11px}}\
h2{{border-bottom:1px solid #aaa;margin-top:32px}}figure{{margin:8px 0}}.note{{background:#fff8dc;padding:6px 10px;border-left:4px solid #e6b800}}\
svg{{margin:4px 8px 4px 0;vertical-align:top}}</style></head><body><h1>{t}</h1>",
        t = esc(&title)
    );

    // Header: where and what.
    let ok = latest.iter().filter(|e| e.is_ok()).count();
    let failed = latest
        .iter()
        .filter(|e| matches!(e.status, Status::Failed { .. }))
        .count();
    let skipped = latest
        .iter()
        .filter(|e| matches!(e.status, Status::Skipped { .. }))
        .count();
    let _ = write!(
        h,
        "<p>{} points: {ok} ok, {failed} failed, {skipped} skipped. Store: <code>{}</code>.</p>",
        latest.len(),
        esc(&store.path().display().to_string())
    );
    if let Some(r) = latest.iter().flat_map(|e| e.records.iter()).next() {
        let _ = write!(
            h,
            "<p>Host: {} · {} cores · kernel {} · KVM {:?}{}.</p>",
            esc(&r.host.cpu_model),
            r.host.cores,
            esc(&r.host.kernel),
            r.host.kvm.backing,
            if r.host.nested { " (nested)" } else { "" }
        );
    }
    for n in &opts.notes {
        let _ = write!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    h.push_str("<p>Medians over repetitions; brackets and ± give the range (min–max). Slowdown is wall time over native wall time minus one (simulator: over its own native model). CSV exports: <a href=\"results.csv\">results.csv</a>, <a href=\"metrics.csv\">metrics.csv</a>, <a href=\"exits.csv\">exits.csv</a>, <a href=\"predictions.csv\">predictions.csv</a>. Definitions: docs/lab.md.</p>");

    for (title, text) in &opts.sections {
        let _ = write!(h, "<h2>{}</h2><pre>{}</pre>", esc(title), esc(text));
    }

    // Summary table.
    h.push_str("<h2>Summary</h2><table><tr><th>configuration</th><th>reps</th><th>wall s</th><th>slowdown vs native</th><th>weighted speedup</th><th>idle</th><th>spin</th><th>exits/s</th><th>exit p50 / p99</th><th>lock wait p99</th></tr>");
    for p in results.points() {
        let reps = results.get(p).map_or(0, |v| v.len());
        let exits: f64 = results.workload_exits_per_s(p).unwrap_or(0.0);
        let el = results.exit_latency(p);
        let lw = results.lock_wait(p);
        let spin = results
            .spin_fraction(p)
            .map(|s| format!("{:.1}%", s.median * 100.0))
            .or_else(|| {
                results
                    .spin_rate(p)
                    .filter(|s| s.median > 0.0)
                    .map(|s| format!("{}/s iters", svg::fmt_num(s.median)))
            })
            .unwrap_or_else(|| "–".into());
        let ws = if p.vms() > 1 {
            num(results.weighted_speedup(p))
        } else {
            "–".into()
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{reps}</td><td>{}</td><td>{}</td><td>{ws}</td><td>{}</td><td>{spin}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&p.label()),
            secs(results.wall(p)),
            pct(results.slowdown(p)),
            frac(results.idle_fraction(p)),
            if exits > 0.0 { svg::fmt_num(exits) } else { "–".into() },
            el.as_ref().map_or("–".into(), |e| format!("{} / {}", ns(Some(&e[0])), ns(Some(&e[2])))),
            lw.as_ref().map_or("–".into(), |l| ns(Some(&l[2]))),
        );
    }
    h.push_str("</table>");

    // Slowdown bars (Fig. 1).
    let bars: Vec<Bar> = results
        .points()
        .filter(|p| p.vms() == 1 && p.study.is_none())
        .filter_map(|p| {
            let s = results.slowdown(p)?;
            Some(Bar {
                label: p.label(),
                value: s.median * 100.0,
                range: Some((s.min * 100.0, s.max * 100.0)),
                group: executor_index(p.executor()),
            })
        })
        .collect();
    if !bars.is_empty() {
        h.push_str("<h2>Slowdown versus native</h2><figure>");
        let used: BTreeSet<usize> = bars.iter().map(|b| b.group).collect();
        let mut groups = vec![String::new(); 9];
        for e in [
            Executor::Vm,
            Executor::Qemu,
            Executor::Sim,
            Executor::Native,
        ] {
            groups[executor_index(e)] = e.to_string();
        }
        // Legend only for executors present, keeping colour indices stable.
        let legend: Vec<String> = (0..groups.len())
            .map(|i| {
                if used.contains(&i) {
                    groups[i].clone()
                } else {
                    String::new()
                }
            })
            .collect();
        let trimmed: Vec<String> = legend
            .iter()
            .rposition(|s| !s.is_empty())
            .map(|last| legend[..=last].to_vec())
            .unwrap_or_default();
        h.push_str(&svg::bar_chart(
            "Slowdown vs native (%), whiskers: min–max over repetitions",
            "slowdown %",
            &bars,
            &trimmed,
        ));
        h.push_str("</figure>");
    }

    // Throughput versus VMs (Fig. 2).
    let mut families: BTreeMap<String, &Point> = BTreeMap::new();
    for p in results
        .points()
        .filter(|p| p.vms() > 1 && p.study.is_none())
    {
        families.entry(without_vms(p)).or_insert(p);
    }
    let lines: Vec<Line> = families
        .values()
        .take(8)
        .filter_map(|p| {
            let s = results.weighted_speedup_series(p);
            (s.len() >= 2).then(|| {
                let mut q = (*p).clone();
                q.config.set_vms(1);
                Line {
                    name: q.label(),
                    points: s.iter().map(|(k, v)| (*k as f64, v.median)).collect(),
                    dashed: p.executor() == Executor::Sim,
                }
            })
        })
        .collect();
    if !lines.is_empty() {
        h.push_str("<h2>Throughput as VMs are added</h2><p>Weighted speedup Σ T₁/T_K,i (1 = the throughput of one VM alone). Dashed: simulator.</p><figure>");
        h.push_str(&svg::line_chart(
            "Weighted speedup vs number of VMs",
            "VMs",
            "weighted speedup",
            &lines,
        ));
        h.push_str("</figure>");
    }

    // Exit breakdown stacks.
    let exit_rows: Vec<(String, BTreeMap<String, Summary>)> = results
        .points()
        .filter(|p| p.study.is_none())
        .map(|p| {
            let mut e = results.exits_per_s(p);
            // Written after the workload: shown in exits.csv, not in the stacks.
            e.remove(crate::metrics::RESULT_STREAM);
            (p.label(), e)
        })
        .filter(|(_, m)| !m.is_empty())
        .collect();
    if !exit_rows.is_empty() {
        let mut totals: BTreeMap<String, f64> = BTreeMap::new();
        for (_, m) in &exit_rows {
            for (k, s) in m {
                *totals.entry(k.clone()).or_default() += s.median;
            }
        }
        let mut reasons: Vec<(String, f64)> = totals.into_iter().collect();
        reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top: Vec<String> = reasons.iter().take(8).map(|r| r.0.clone()).collect();
        let mut series = top.clone();
        let other = reasons.len() > top.len();
        if other {
            series.push("other".into());
        }
        let rows: Vec<(String, Vec<f64>)> = exit_rows
            .iter()
            .map(|(l, m)| {
                let mut v: Vec<f64> = top
                    .iter()
                    .map(|r| m.get(r).map_or(0.0, |s| s.median))
                    .collect();
                if other {
                    v.push(
                        m.iter()
                            .filter(|(k, _)| !top.contains(k))
                            .map(|(_, s)| s.median)
                            .sum(),
                    );
                }
                (l.clone(), v)
            })
            .collect();
        h.push_str("<h2>Exits by reason</h2><p>During the workload; the guest's result stream, written after it, is in exits.csv as <code>result_stream</code>.</p><figure>");
        h.push_str(&svg::stacked_bars(
            "Exits per second by reason",
            "exits per second (all vCPUs, all VMs)",
            &series,
            &rows,
        ));
        h.push_str("</figure>");
    }

    // Latency histograms.
    let mut hist = String::new();
    for p in results.points().filter(|p| p.study.is_none()).take(64) {
        if let Some(hh) = results.exit_latency_histogram(p) {
            if hist.matches("<svg").count() < 6 {
                hist.push_str(&svg::histogram(
                    &format!("Exit handling latency: {}", p.label()),
                    &hh.buckets,
                ));
            }
        }
        if let Some(es) = results.get(p) {
            let lw: Vec<&smplab_record::LatencyHistogram> = es
                .iter()
                .flat_map(|e| e.records.iter())
                .filter_map(|r| r.vmm.as_ref()?.global_lock_wait.as_ref())
                .collect();
            if let Some(m) = crate::metrics::merge_histograms(&lw) {
                if hist.matches("<svg").count() < 8 {
                    hist.push_str(&svg::histogram(
                        &format!("Global device-lock wait: {}", p.label()),
                        &m.buckets,
                    ));
                }
            }
        }
    }
    if !hist.is_empty() {
        h.push_str("<h2>Latency distributions</h2><figure>");
        h.push_str(&hist);
        h.push_str("</figure>");
    }

    // Speedup vs vCPUs with the Amdahl projection.
    let mut seen = BTreeSet::new();
    let mut sp = String::new();
    for p in results.points().filter(|p| {
        matches!(p.executor(), Executor::Vm | Executor::Sim | Executor::Qemu)
            && p.vms() == 1
            && p.study.is_none()
    }) {
        let (curve, inputs) = results.speedup_vs_vcpus(p);
        if curve.len() < 2 {
            continue;
        }
        let key: Vec<String> = curve.iter().map(|c| format!("{:?}", c.measured)).collect();
        if !seen.insert(key) {
            continue;
        }
        let mut lines = vec![Line {
            name: "measured".into(),
            points: curve
                .iter()
                .map(|c| (c.vcpus as f64, c.measured.median))
                .collect(),
            dashed: false,
        }];
        if inputs.is_some() {
            lines.push(Line {
                name: "projected, eq. 5.1".into(),
                points: curve
                    .iter()
                    .filter_map(|c| Some((c.vcpus as f64, c.projected?)))
                    .collect(),
                dashed: true,
            });
            lines.push(Line {
                name: "native Amdahl bound".into(),
                points: curve
                    .iter()
                    .filter_map(|c| Some((c.vcpus as f64, c.native_bound?)))
                    .collect(),
                dashed: true,
            });
        }
        let title = format!(
            "Speedup vs vCPUs: {} {}{}{}",
            p.executor(),
            p.workload,
            p.config.sync().map_or(String::new(), |s| format!(" {s}")),
            p.config.idle().map_or(String::new(), |s| format!(" {s}"))
        );
        sp.push_str(&svg::line_chart(
            &title,
            "vCPUs (threads = vCPUs)",
            "speedup",
            &lines,
        ));
        if let Some(i) = inputs {
            let _ = write!(
                sp,
                "<p>Projection inputs: native parallel fraction P = {:.3}; exit handling per vCPU {:.3}%; synchronous share {:.0}%.</p>",
                i.p_native,
                i.exit_handling_per_cpu * 100.0,
                i.sync_share * 100.0
            );
        }
    }
    if !sp.is_empty() {
        h.push_str("<h2>Speedup versus vCPUs</h2><p>Measured speedup (throughput per compute iteration, so profiles whose work grows with the thread count compare fairly) beside seed 004's projection S(N) = 1/((1−P(N)) + P(N)/N) with P(N) = P·(1 − exit handling per CPU · N · synchronous share), inputs from the smallest run. Without device exits the projection coincides with the native Amdahl bound.</p><figure>");
        h.push_str(&sp);
        h.push_str("</figure>");
    }

    // Predicted vs measured.
    let preds = results.predictions(None);
    if !preds.is_empty() {
        let metrics: Vec<String> = preds
            .iter()
            .map(|p| p.metric.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        h.push_str("<h2>Simulator predictions beside measurements</h2><p>Seed 003's combinative evaluation: each measured configuration next to the simulator's prediction of the same configuration. Points on the dashed diagonal are exact.</p><figure>");
        for m in &metrics {
            let pts: Vec<(usize, f64, f64, String)> = preds
                .iter()
                .filter(|p| &p.metric == m)
                .map(|p| (0, p.measured, p.predicted, p.label.clone()))
                .collect();
            h.push_str(&svg::scatter(
                &format!("Predicted vs measured: {m}"),
                std::slice::from_ref(m),
                &pts,
            ));
        }
        h.push_str("</figure><table><tr><th>metric</th><th>pairs</th><th>median |relative error|</th><th>max</th></tr>");
        for (m, s) in prediction_error_by_metric(&preds) {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}%</td></tr>",
                esc(&m),
                s.n,
                s.median * 100.0,
                s.max * 100.0
            );
        }
        h.push_str("</table><table><tr><th>configuration</th><th>metric</th><th>measured</th><th>predicted</th><th>error</th></tr>");
        for p in &preds {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:+.1}%</td></tr>",
                esc(&p.label),
                esc(&p.metric),
                svg::fmt_num(p.measured),
                svg::fmt_num(p.predicted),
                p.rel_error() * 100.0
            );
        }
        h.push_str("</table>");
    }

    // Macro versus micro (seed 003): which low-level rate moves with the slowdown?
    let mut corr = String::new();
    for e in [Executor::Vm, Executor::Qemu, Executor::Sim] {
        let c = crate::metrics::correlate_with_slowdown(&results, e);
        let Some(top) = c.first() else {
            continue;
        };
        let _ = write!(
            corr,
            "<h3>{e}: {} configurations</h3><table><tr><th>micro rate (per second)</th><th>Pearson r with slowdown</th></tr>",
            top.pairs.len()
        );
        for x in c.iter().take(8) {
            let _ = write!(
                corr,
                "<tr><td>{}</td><td>{:+.2}</td></tr>",
                esc(&x.micro),
                x.r
            );
        }
        corr.push_str("</table><figure>");
        let pts: Vec<(usize, f64, f64, String)> = top
            .pairs
            .iter()
            .map(|(l, x, y)| (executor_index(e), *x, *y * 100.0, l.clone()))
            .collect();
        let mut legend = vec![String::new(); executor_index(e) + 1];
        legend[executor_index(e)] = e.to_string();
        corr.push_str(&svg::xy_scatter(
            &format!(
                "{e}: slowdown vs {} per second (r = {:+.2})",
                top.micro, top.r
            ),
            &format!("{} per second", top.micro),
            "slowdown %",
            false,
            &legend,
            &pts,
        ));
        corr.push_str("</figure>");
    }
    if !corr.is_empty() {
        h.push_str("<h2>Macro versus micro</h2><p>Seed 003's combinative evaluation within one executor: every low-level rate (exits by reason, guest IPIs, halts, wakeups, context switches, blocks, spins) correlated with the slowdown across configurations, strongest first. A correlation across different workloads points at a candidate bottleneck; it is not a proof of cause — the diagnosis below tests causes one at a time.</p>");
        h.push_str(&corr);
    }

    // Diagnoses found in the store.
    for plan in diagnose::detect(&results) {
        if let Some(a) = diagnose::attribute(&results, &plan) {
            let _ = write!(
                h,
                "<h2>Diagnosis: {} on {}</h2><pre>{}</pre><figure>{}</figure>",
                esc(&a.workload),
                a.executor,
                esc(&diagnose::table(&a)),
                diagnose::charts(&a)
            );
        }
    }

    // Problems.
    let problems: Vec<_> = latest.iter().filter(|e| !e.is_ok()).collect();
    if !problems.is_empty() {
        h.push_str("<h2>Failed and skipped points</h2><table><tr><th>point</th><th>status</th><th>reason</th></tr>");
        for e in problems {
            let (st, reason) = match &e.status {
                Status::Failed { reason } => ("failed", reason.as_str()),
                Status::Skipped { reason } => ("skipped", reason.as_str()),
                Status::Ok => ("ok", ""),
            };
            let first = reason.lines().next().unwrap_or("");
            let _ = write!(
                h,
                "<tr><td>{} (rep {})</td><td>{st}</td><td style=\"text-align:left\">{}</td></tr>",
                esc(&e.point.label()),
                e.point.rep,
                esc(first)
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    h
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
                svg::fmt_num(exits)
            } else {
                "–".into()
            }
        ));
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv_row(fields: &[String]) -> String {
    let mut s = fields
        .iter()
        .map(|f| csv_field(f))
        .collect::<Vec<_>>()
        .join(",");
    s.push('\n');
    s
}

fn point_fields(p: &Point) -> Vec<String> {
    let o = |v: Option<String>| v.unwrap_or_default();
    vec![
        p.executor().to_string(),
        p.workload.clone(),
        p.variant.as_str().into(),
        p.threads.to_string(),
        p.scale.to_string(),
        p.config.placement().to_string(),
        o(p.vcpus().map(|v| v.to_string())),
        p.vms().to_string(),
        o(p.config.sync().map(|v| v.to_string())),
        o(p.config.idle().map(|v| v.to_string())),
        o(p.config.platform().map(String::from)),
        o(match &p.config {
            RunConfig::Sim(s) => s.ple.map(|v| v.to_string()),
            _ => None,
        }),
        o(match &p.config {
            RunConfig::Sim(s) => Some(s.apicv.to_string()),
            _ => None,
        }),
    ]
}
const POINT_HEADER: &[&str] = &[
    "executor", "workload", "variant", "threads", "scale", "pin", "vcpus", "vms", "sync", "idle",
    "platform", "ple", "apicv",
];

/// `results.csv`: one row per stored record (failed and skipped points get
/// one row with their reason).
pub fn results_csv(store: &Store) -> String {
    let mut header: Vec<String> = POINT_HEADER.iter().map(|s| s.to_string()).collect();
    header.extend(
        [
            "rep",
            "status",
            "reason",
            "vm_index",
            "wall_ns",
            "spin_iterations",
            "blocks",
            "wakeups",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut out = csv_row(&header);
    for e in store.latest() {
        let (st, reason) = match &e.status {
            Status::Ok => ("ok", String::new()),
            Status::Failed { reason } => ("failed", reason.lines().next().unwrap_or("").into()),
            Status::Skipped { reason } => ("skipped", reason.clone()),
        };
        if e.records.is_empty() {
            let mut f = point_fields(&e.point);
            f.extend([e.point.rep.to_string(), st.into(), reason.clone()]);
            f.extend(std::iter::repeat_n(String::new(), 5));
            out.push_str(&csv_row(&f));
        }
        for (i, r) in e.records.iter().enumerate() {
            let mut f = point_fields(&e.point);
            f.extend([
                e.point.rep.to_string(),
                st.into(),
                reason.clone(),
                i.to_string(),
                r.timing.wall_ns.to_string(),
                r.counters.spin_iterations.to_string(),
                r.counters.blocks.to_string(),
                r.counters.wakeups.to_string(),
            ]);
            out.push_str(&csv_row(&f));
        }
    }
    out
}

/// `metrics.csv`: one row per configuration with medians and ranges.
pub fn metrics_csv(results: &Results) -> String {
    let mut header: Vec<String> = POINT_HEADER.iter().map(|s| s.to_string()).collect();
    for m in [
        "wall_s",
        "slowdown",
        "weighted_speedup",
        "idle_fraction",
        "spin_fraction",
    ] {
        for k in ["median", "min", "max"] {
            header.push(format!("{m}_{k}"));
        }
    }
    header.extend(
        [
            "reps",
            "spin_iter_per_s",
            "exits_per_s",
            "exit_p50_ns",
            "exit_p99_ns",
            "lock_wait_p50_ns",
            "lock_wait_p99_ns",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut out = csv_row(&header);
    let f3 = |s: Option<Summary>| -> [String; 3] {
        match s {
            Some(s) => [s.median.to_string(), s.min.to_string(), s.max.to_string()],
            None => Default::default(),
        }
    };
    for p in results.points() {
        let mut f = point_fields(p);
        f.extend(f3(results.wall(p)));
        f.extend(f3(results.slowdown(p)));
        f.extend(f3(if p.vms() > 1 {
            results.weighted_speedup(p)
        } else {
            None
        }));
        f.extend(f3(results.idle_fraction(p)));
        f.extend(f3(results.spin_fraction(p)));
        f.push(results.get(p).map_or(0, |v| v.len()).to_string());
        f.push(
            results
                .spin_rate(p)
                .map_or(String::new(), |s| s.median.to_string()),
        );
        f.push(
            results
                .workload_exits_per_s(p)
                .map_or(String::new(), |x| x.to_string()),
        );
        let el = results.exit_latency(p);
        f.push(el.map_or(String::new(), |e| e[0].median.to_string()));
        f.push(el.map_or(String::new(), |e| e[2].median.to_string()));
        let lw = results.lock_wait(p);
        f.push(lw.map_or(String::new(), |e| e[0].median.to_string()));
        f.push(lw.map_or(String::new(), |e| e[2].median.to_string()));
        out.push_str(&csv_row(&f));
    }
    out
}

/// `exits.csv`: exits per second by reason per configuration.
pub fn exits_csv(results: &Results) -> String {
    let mut header: Vec<String> = POINT_HEADER.iter().map(|s| s.to_string()).collect();
    header.extend(["reason", "median_per_s", "min_per_s", "max_per_s"].map(String::from));
    let mut out = csv_row(&header);
    for p in results.points() {
        for (r, s) in results.exits_per_s(p) {
            let mut f = point_fields(p);
            f.extend([
                r,
                s.median.to_string(),
                s.min.to_string(),
                s.max.to_string(),
            ]);
            out.push_str(&csv_row(&f));
        }
    }
    out
}

/// `predictions.csv`: simulator predictions beside measurements.
pub fn predictions_csv(results: &Results) -> String {
    let mut out = csv_row(
        &[
            "configuration",
            "metric",
            "measured",
            "predicted",
            "rel_error",
        ]
        .map(String::from),
    );
    for p in results.predictions(None) {
        out.push_str(&csv_row(&[
            p.label.clone(),
            p.metric.clone(),
            p.measured.to_string(),
            p.predicted.to_string(),
            p.rel_error().to_string(),
        ]));
    }
    out
}

/// Write `index.html` and the CSV files into `dir`.
pub fn write_report(
    store: &Store,
    dir: &Path,
    opts: &ReportOptions,
) -> Result<ReportFiles, ReportError> {
    let werr = |path: &Path, source| ReportError::Write {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    let results = Results::new(store);
    let mut files = ReportFiles {
        html: dir.join("index.html"),
        csv: vec![],
    };
    let write = |path: &Path, text: &str| -> Result<(), ReportError> {
        // Write to a temporary name and rename, so a reader never sees half a report.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| werr(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| werr(path, e))
    };
    for (name, text) in [
        ("results.csv", results_csv(store)),
        ("metrics.csv", metrics_csv(&results)),
        ("exits.csv", exits_csv(&results)),
        ("predictions.csv", predictions_csv(&results)),
    ] {
        let p = dir.join(name);
        write(&p, &text)?;
        files.csv.push(p);
    }
    write(&files.html, &render_html(store, opts))?;
    Ok(files)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::point::tests::vm_point;
    use crate::store::Entry;
    use crate::testutil::rec;
    use smplab_record::sim::SimSection;
    use smplab_record::vmm::VmmSection;
    use smplab_record::LatencyHistogram;

    /// A store with every kind of result the report draws.
    pub fn sample_store() -> Store {
        let s = 1_000_000_000u64;
        let mut es = vec![];
        for (wl, nat, vm) in [
            ("dedup", 10, 27),
            ("streamcluster", 10, 14),
            ("blackscholes", 10, 10),
        ] {
            for rep in 0..3u32 {
                let mut n = vm_point(wl, 2, rep).native_twin();
                n.rep = rep;
                es.push(Entry::new(
                    n,
                    Status::Ok,
                    0.0,
                    vec![rec(
                        Executor::Native,
                        wl,
                        2,
                        nat * s / 10 + rep as u64 * 10_000_000,
                    )],
                ));
                for vcpus in [1u32, 2] {
                    let mut r = rec(
                        Executor::Vm,
                        wl,
                        vcpus,
                        vm * s / 10 / vcpus as u64 + rep as u64 * 20_000_000,
                    );
                    let mut per = BTreeMap::new();
                    per.insert("io_out".to_string(), 4000 + rep as u64 * 100);
                    per.insert("hlt".to_string(), 1500);
                    per.insert("intr".to_string(), 700);
                    let mut lat = BTreeMap::new();
                    lat.insert(
                        "uart/global".to_string(),
                        LatencyHistogram::from_samples(
                            &(0..200).map(|i| 2000 + i * 50).collect::<Vec<_>>(),
                        ),
                    );
                    r.vmm = Some(VmmSection {
                        sync: "global".into(),
                        vcpus,
                        exits_per_vcpu: vec![per],
                        exit_latency: lat,
                        global_lock_wait: Some(LatencyHistogram::from_samples(&[
                            100, 500, 900, 5000,
                        ])),
                        ..Default::default()
                    });
                    let mut p = vm_point(wl, vcpus, rep);
                    p.threads = vcpus;
                    es.push(Entry::new(p, Status::Ok, 0.0, vec![r]));
                }
                let mut p2 = vm_point(wl, 2, rep);
                p2.config.set_vms(2);
                es.push(Entry::new(
                    p2,
                    Status::Ok,
                    0.0,
                    vec![
                        rec(Executor::Vm, wl, 2, vm * s / 8),
                        rec(Executor::Vm, wl, 2, vm * s / 7),
                    ],
                ));
                let sp = crate::testutil::as_sim(&vm_point(wl, 2, rep), "pvm-here");
                let mut sr = rec(Executor::Sim, wl, 2, vm * s / 9);
                let mut ex = BTreeMap::new();
                ex.insert("hlt".to_string(), 3000);
                ex.insert("ipi".to_string(), 2000);
                sr.sim = Some(SimSection {
                    native_wall_ns: Some(nat * s / 10),
                    vcpus: 2,
                    idle_ns: s / 2,
                    spin_ns: s / 3,
                    exits: ex,
                    ..Default::default()
                });
                es.push(Entry::new(sp, Status::Ok, 0.0, vec![sr]));
            }
        }
        es.push(Entry::new(
            vm_point("volrend", 2, 0),
            Status::Failed {
                reason: "guest crashed: <triple fault>".into(),
            },
            0.0,
            vec![],
        ));
        Store::from_entries(es)
    }

    #[test]
    fn html_has_every_plot_kind_and_no_external_resources() {
        let store = sample_store();
        let html = render_html(
            &store,
            &ReportOptions {
                title: "t".into(),
                notes: vec!["qemu skipped: not installed".into()],
                sections: vec![],
            },
        );
        for section in [
            "Slowdown versus native",
            "Throughput as VMs are added",
            "Exits by reason",
            "Latency distributions",
            "Speedup versus vCPUs",
            "Simulator predictions beside measurements",
            "Macro versus micro",
            "Failed and skipped points",
        ] {
            assert!(html.contains(section), "missing {section}");
        }
        assert!(html.matches("<svg").count() >= 6);
        assert!(!html.contains("<script"));
        assert!(!html.contains("http://") || !html.contains("src=\"http"));
        assert!(!html.contains("NaN"));
        assert!(html.contains("&lt;triple fault&gt;"));
    }

    #[test]
    fn csv_exports() {
        let store = sample_store();
        let results = Results::new(&store);
        let r = results_csv(&store);
        assert!(r.starts_with("executor,workload,"));
        // Every line has the header's column count (no stray commas).
        let cols = r.lines().next().unwrap().split(',').count();
        let failed = r.lines().find(|l| l.contains("failed")).unwrap();
        assert!(failed.contains("guest crashed: <triple fault>"), "{failed}");
        let m = metrics_csv(&results);
        let mcols = m.lines().next().unwrap().split(',').count();
        assert!(m.lines().skip(1).all(|l| l.split(',').count() == mcols));
        assert!(cols > 10);
        assert!(exits_csv(&results).contains("io_out"));
        assert!(predictions_csv(&results).contains("slowdown"));
        let t = text_summary(&results, 5);
        assert_eq!(t.lines().count(), 7, "{t}");
        assert!(t.contains("more in the report"));
    }
}
