//! Exits per second by reason (stacked, per configuration) and the latency
//! distributions the VMM records: exit handling and the global device lock.

use super::data::{colour, executor_name, executor_rank, is_default_setup};
use super::{Ctx, Page};
use smplab_analysis::metrics::{exit_rates, merge_histograms, Results, RESULT_STREAM};
use smplab_chart::{self as chart, palette, StackRow};
use smplab_experiment::point::Point;
use smplab_record::LatencyHistogram;
use smplab_stats::MedianCi;
use std::collections::BTreeMap;
use std::fmt::Write;

const MAX_ROWS: usize = 30;
const MAX_HISTOGRAMS: usize = 6;

/// Exits per second during the workload of each repetition of `p`: by
/// reason (medians and 95% intervals, every reason counted 0 in repetitions
/// without it) and in total. The guest's result stream, written after the
/// workload, is left out.
fn rate_cis(r: &Results, p: &Point) -> (BTreeMap<String, MedianCi>, Option<MedianCi>) {
    let per_rep: Vec<BTreeMap<String, f64>> = r.get(p).map_or_else(Vec::new, |es| {
        es.iter()
            .map(|e| {
                let mut m = exit_rates(&e.records);
                m.remove(RESULT_STREAM);
                m
            })
            .collect()
    });
    let reasons: std::collections::BTreeSet<&String> =
        per_rep.iter().flat_map(|m| m.keys()).collect();
    let by_reason = reasons
        .into_iter()
        .filter_map(|k| {
            let v: Vec<f64> = per_rep
                .iter()
                .map(|m| m.get(k).copied().unwrap_or(0.0))
                .collect();
            Some((k.clone(), MedianCi::of(&v)?))
        })
        .collect();
    let totals: Vec<f64> = per_rep.iter().map(|m| m.values().sum()).collect();
    (by_reason, MedianCi::of(&totals))
}

type ExitRow = (usize, String, BTreeMap<String, MedianCi>, Option<MedianCi>);

fn stacks(ctx: &Ctx) -> Option<String> {
    let r = ctx.results;
    let mut exit_rows: Vec<ExitRow> = r
        .points()
        .filter(|p| p.study.is_none() && is_default_setup(p))
        .map(|p| {
            let (m, total) = rate_cis(r, p);
            (executor_rank(p.executor()), p.label(), m, total)
        })
        .filter(|(_, _, m, _)| !m.is_empty())
        .collect();
    if exit_rows.is_empty() {
        return None;
    }
    exit_rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let total = exit_rows.len();
    exit_rows.truncate(MAX_ROWS);
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for (_, _, m, _) in &exit_rows {
        for (k, s) in m {
            *totals.entry(k.clone()).or_default() += s.median;
        }
    }
    let mut reasons: Vec<(String, f64)> = totals.into_iter().collect();
    reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
    let top: Vec<String> = reasons.iter().take(8).map(|r| r.0.clone()).collect();
    // Exit reasons in category colours (never an executor's), "other" grey.
    let mut series: Vec<(String, chart::Colour)> = top
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), palette::category(i)))
        .collect();
    let other = reasons.len() > top.len();
    if other {
        series.push(("other".into(), palette::REFERENCE));
    }
    let rows: Vec<StackRow> = exit_rows
        .iter()
        .map(|(_, l, m, total)| {
            let mut values: Vec<f64> = top
                .iter()
                .map(|r| m.get(r).map_or(0.0, |s| s.median))
                .collect();
            let mut notes: Vec<String> = top
                .iter()
                .map(|r| m.get(r).map_or(String::new(), interval_note))
                .collect();
            if other {
                values.push(
                    m.iter()
                        .filter(|(k, _)| !top.contains(k))
                        .map(|(_, s)| s.median)
                        .sum(),
                );
                notes.push(String::new());
            }
            StackRow {
                label: l.clone(),
                values,
                total_range: total.filter(|t| t.n > 1).map(|t| (t.lo, t.hi)),
                notes,
            }
        })
        .collect();
    let mut h = String::from("<p>Exits during the workload in the default set-up: each segment the median over repetitions of one reason's rate, the whisker the 95% interval of the total (hover a segment for its own interval). The guest's result stream, written after the workload, is in exits.csv as <code>result_stream</code>. QEMU runs carry no exit counts.</p><figure>");
    h.push_str(&chart::stacked_bars(
        "Exits per second by reason (whiskers: 95% interval of the total)",
        "exits per second during the workload (all vCPUs, all VMs)",
        &series,
        &rows,
    ));
    h.push_str("</figure>");
    if total > MAX_ROWS {
        let _ = write!(
            h,
            "<p class=\"muted\">The first {MAX_ROWS} of {total} configurations; all are in exits.csv.</p>"
        );
    }
    Some(h)
}

/// A reason's interval for hover text, `[lo–hi]` († below 95% coverage).
fn interval_note(c: &MedianCi) -> String {
    if c.n < 2 {
        return String::new();
    }
    format!(
        "[{}–{}]{}",
        chart::fmt_num(c.lo),
        chart::fmt_num(c.hi),
        if c.coverage < 0.95 { "†" } else { "" }
    )
}

fn histograms(ctx: &Ctx) -> String {
    let r = ctx.results;
    let entry = |p: &Point| {
        (
            format!(
                "{}, {} repetitions",
                executor_name(p.executor()),
                r.get(p).map_or(0, Vec::len)
            ),
            colour(p.executor()),
        )
    };
    let mut exit_h = Vec::new();
    let mut lock_h = Vec::new();
    for p in r
        .points()
        .filter(|p| p.study.is_none() && is_default_setup(p))
    {
        if exit_h.len() < MAX_HISTOGRAMS {
            if let Some(hh) = r.exit_latency_histogram(p) {
                exit_h.push(chart::histogram(
                    &format!("Exit handling: {}", p.label()),
                    "exits (all repetitions)",
                    &hh.buckets,
                    &entry(p),
                ));
            }
        }
        if lock_h.len() < MAX_HISTOGRAMS {
            if let Some(es) = r.get(p) {
                let lw: Vec<&LatencyHistogram> = es
                    .iter()
                    .flat_map(|e| e.records.iter())
                    .filter_map(|rec| rec.vmm.as_ref()?.global_lock_wait.as_ref())
                    .collect();
                if let Some(m) = merge_histograms(&lw) {
                    lock_h.push(chart::histogram(
                        &format!("Device-lock wait: {}", p.label()),
                        "lock acquisitions (all repetitions)",
                        &m.buckets,
                        &entry(p),
                    ));
                }
            }
        }
    }
    let mut h = String::new();
    if !exit_h.is_empty() {
        h.push_str("<h3>Exit-handling latency</h3><p class=\"muted\">All repetitions merged; with the built-in workloads mostly the result device (the guest does no other I/O).</p><div class=\"grid\">");
        h.push_str(&exit_h.concat());
        h.push_str("</div>");
    }
    if !lock_h.is_empty() {
        h.push_str("<h3>Global device-lock wait</h3><div class=\"grid\">");
        h.push_str(&lock_h.concat());
        h.push_str("</div>");
    }
    h
}

pub fn render(ctx: &Ctx, page: &mut Page) {
    let mut h = stacks(ctx).unwrap_or_default();
    h.push_str(&histograms(ctx));
    if !h.is_empty() {
        page.section("exits", "Exits and latency", &h);
    }
}
