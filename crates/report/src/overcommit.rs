//! Weighted speedup as VMs are added (Ding & Shan Fig. 2): one chart per workload
//! and VM size, one line per executor, whiskers the 95% interval.

use super::data::{colour, executor_name, executor_rank, is_default_setup, weighted_speedup_ci};
use super::{Ctx, Page};
use smplab_analysis::metrics::{Results, MIN_WORKLOAD_OVERLAP};
use smplab_chart::{self as chart, esc, palette, Line};
use smplab_experiment::point::Point;
use smplab_record::Executor;
use std::collections::BTreeMap;
use std::fmt::Write;

const MAX_CHARTS: usize = 15;

/// The overcommit section: a weighted-speedup chart per workload and VM
/// size (at most [`MAX_CHARTS`]), with the left-out repetitions noted.
pub fn render(ctx: &Ctx, page: &mut Page) {
    let r = ctx.results;
    // (workload, vCPUs) → executor → family key → points by VM count.
    type Families<'p> = BTreeMap<usize, BTreeMap<String, Vec<&'p Point>>>;
    let mut charts: BTreeMap<(String, u32), Families> = BTreeMap::new();
    for p in r
        .points()
        .filter(|p| p.executor() != Executor::Native && is_default_setup(p))
    {
        let mut one = p.clone();
        one.config.set_vms(1);
        charts
            .entry((p.workload.clone(), p.vcpus().unwrap_or(0)))
            .or_default()
            .entry(executor_rank(p.executor()))
            .or_default()
            .entry(one.config_key())
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    let mut more = 0;
    for ((w, vcpus), by_exec) in &charts {
        let mut lines = Vec::new();
        let mut kmax = 1u32;
        for families in by_exec.values() {
            // The family with the most VM counts stands for the executor.
            let Some(members) = families.values().max_by_key(|m| m.len()) else {
                continue;
            };
            let Some((line, k)) = executor_line(r, members) else {
                continue;
            };
            kmax = kmax.max(k);
            lines.push(line);
        }
        if lines.is_empty() {
            continue;
        }
        if out.len() >= MAX_CHARTS {
            more += 1;
            continue;
        }
        lines.push(Line {
            name: "perfect scaling (K)".into(),
            points: vec![(1.0, 1.0), (kmax as f64, kmax as f64)],
            dashed: true,
            colour: palette::REFERENCE,
            ranges: vec![],
        });
        out.push(chart::line_chart(
            &format!("{w}, {vcpus} vCPUs per VM: weighted speedup"),
            "VMs running at once (K)",
            "weighted speedup Σ T₁/T_K,i",
            &lines,
        ));
    }
    if out.is_empty() {
        return;
    }
    let mut h = String::from("<p>Weighted speedup Σ T₁/T_K,i over the K VMs running the same workload at once: 1 is the throughput of one VM alone, K perfect scaling. Whiskers: 95% interval over repetitions. The simulator's host has as many CPUs as one VM has vCPUs, so K VMs overcommit it K-fold.</p>");
    h.push_str(&exclusion_note(r));
    h.push_str("<div class=\"grid\">");
    for c in &out {
        h.push_str("<figure>");
        h.push_str(c);
        h.push_str("</figure>");
    }
    h.push_str("</div>");
    if more > 0 {
        let _ = write!(
            h,
            "<p class=\"muted\">{more} more charts not drawn; the numbers are in {}.</p>",
            esc("metrics.csv")
        );
    }
    page.section("overcommit", "Overcommit: VMs sharing the host", &h);
}

/// One executor's line of weighted speedup against the VM count, from 1 VM
/// (exactly 1) to the most VMs of the family's `members`, and that count;
/// None without a multi-VM interval.
fn executor_line(r: &Results, members: &[&Point]) -> Option<(Line, u32)> {
    let mut pts: Vec<(u32, smplab_stats::MedianCi)> = members
        .iter()
        .filter(|p| p.vms() > 1)
        .filter_map(|p| Some((p.vms(), weighted_speedup_ci(r, p)?)))
        .collect();
    if pts.is_empty() {
        return None;
    }
    pts.push((
        1,
        smplab_stats::MedianCi {
            median: 1.0,
            lo: 1.0,
            hi: 1.0,
            n: 1,
            coverage: 1.0,
        },
    ));
    pts.sort_by_key(|x| x.0);
    let line = Line {
        name: format!(
            "{} (whiskers: 95% interval)",
            executor_name(members[0].executor())
        ),
        points: pts.iter().map(|(k, c)| (*k as f64, c.median)).collect(),
        dashed: false,
        colour: colour(members[0].executor()),
        ranges: pts.iter().map(|(_, c)| (c.lo, c.hi)).collect(),
    };
    Some((line, pts.last().map_or(1, |x| x.0)))
}

/// Measured multi-VM repetitions of the whole store left out of weighted
/// speedup and counted without checking, summed from metrics'
/// [`smplab_analysis::metrics::WeightedSpeedup`]. Simulated VMs share the host by
/// construction and are not counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exclusions {
    /// Multi-VM repetitions (of configurations with a 1-VM twin).
    pub runs: usize,
    /// Left out: the VMs' workload windows overlapped less than 90%.
    pub excluded: usize,
    /// Counted, but the records carry no workload windows to check.
    pub unverified: usize,
    /// Configurations with no repetition left.
    pub configs_without_value: usize,
}

pub(crate) fn exclusions(r: &Results) -> Exclusions {
    let mut x = Exclusions::default();
    for p in r
        .points()
        .filter(|p| p.vms() > 1 && p.executor() != Executor::Sim)
    {
        let runs = r.get(p).map_or(0, Vec::len);
        if let Some(w) = r.weighted_speedup_ci(p) {
            x.runs += runs;
            x.excluded += w.excluded;
            x.unverified += w.unverified;
        } else {
            let mut one = p.clone();
            one.config.set_vms(1);
            if r.get(&one).is_some() {
                // A 1-VM twin but no value: every repetition was left out.
                x.runs += runs;
                x.excluded += runs;
                x.configs_without_value += 1;
            }
        }
    }
    x
}

/// One sentence on the runs weighted speedup stands on, as HTML.
pub(crate) fn exclusion_sentence(x: &Exclusions) -> String {
    let mut s = format!(
        "{} of {} measured multi-VM run{} excluded from weighted speedup because their VMs' workload windows overlapped less than {:.0}%",
        x.excluded,
        x.runs,
        if x.runs == 1 { "" } else { "s" },
        MIN_WORKLOAD_OVERLAP * 100.0
    );
    if x.configs_without_value > 0 {
        let _ = write!(
            s,
            " ({} configuration{} left with no value)",
            x.configs_without_value,
            if x.configs_without_value == 1 {
                ""
            } else {
                "s"
            }
        );
    }
    if x.unverified > 0 {
        let _ = write!(
            s,
            "; {} counted unchecked (records without workload windows)",
            x.unverified
        );
    }
    s.push('.');
    s
}

fn exclusion_note(r: &Results) -> String {
    let x = exclusions(r);
    if x.runs == 0 {
        return String::new();
    }
    let class = if x.excluded > 0 || x.unverified > 0 {
        "note"
    } else {
        "muted"
    };
    format!("<p class=\"{class}\">{}</p>", exclusion_sentence(&x))
}
