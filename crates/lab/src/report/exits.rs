//! Exits per second by reason (stacked, per configuration) and the latency
//! distributions the VMM records: exit handling and the global device lock.

use super::data::{colour_index, is_default_setup};
use super::{Ctx, Page};
use crate::metrics::{merge_histograms, Summary, RESULT_STREAM};
use crate::svg;
use smplab_record::LatencyHistogram;
use std::collections::BTreeMap;
use std::fmt::Write;

const MAX_ROWS: usize = 30;
const MAX_HISTOGRAMS: usize = 6;

fn stacks(ctx: &Ctx) -> Option<String> {
    let r = ctx.results;
    let mut exit_rows: Vec<(usize, String, BTreeMap<String, Summary>)> = r
        .points()
        .filter(|p| p.study.is_none() && is_default_setup(p))
        .map(|p| {
            let mut e = r.exits_per_s(p);
            // Written after the workload: in exits.csv, not in the stacks.
            e.remove(RESULT_STREAM);
            (colour_index(p.executor()), p.label(), e)
        })
        .filter(|(_, _, m)| !m.is_empty())
        .collect();
    if exit_rows.is_empty() {
        return None;
    }
    exit_rows.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let total = exit_rows.len();
    exit_rows.truncate(MAX_ROWS);
    let mut totals: BTreeMap<String, f64> = BTreeMap::new();
    for (_, _, m) in &exit_rows {
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
        .map(|(_, l, m)| {
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
    let mut h = String::from("<p>Exits during the workload, medians over repetitions, in the default set-up; the guest's result stream, written after the workload, is in exits.csv as <code>result_stream</code>. QEMU runs carry no exit counts.</p><figure>");
    h.push_str(&svg::stacked_bars(
        "Exits per second by reason",
        "exits per second (all vCPUs, all VMs)",
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

fn histograms(ctx: &Ctx) -> String {
    let r = ctx.results;
    let mut exit_h = Vec::new();
    let mut lock_h = Vec::new();
    for p in r
        .points()
        .filter(|p| p.study.is_none() && is_default_setup(p))
    {
        if exit_h.len() < MAX_HISTOGRAMS {
            if let Some(hh) = r.exit_latency_histogram(p) {
                exit_h.push(svg::histogram(
                    &format!("Exit handling: {}", p.label()),
                    &hh.buckets,
                    colour_index(p.executor()),
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
                    lock_h.push(svg::histogram(
                        &format!("Device-lock wait: {}", p.label()),
                        &m.buckets,
                        colour_index(p.executor()),
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
