//! Weighted speedup as VMs are added (seed 000 Fig. 2): one chart per workload
//! and VM size, one line per executor, whiskers the 95% interval.

use super::data::{colour_index, executor_name, is_default_setup, weighted_speedup_ci};
use super::{Ctx, Page};
use crate::point::Point;
use crate::svg::{self, esc, Line};
use smplab_record::Executor;
use std::collections::BTreeMap;
use std::fmt::Write;

const MAX_CHARTS: usize = 15;

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
            .entry(colour_index(p.executor()))
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
        for (&colour, families) in by_exec {
            // The family with the most VM counts stands for the executor.
            let Some(members) = families.values().max_by_key(|m| m.len()) else {
                continue;
            };
            let mut pts: Vec<(u32, crate::stats::MedianCi)> = members
                .iter()
                .filter(|p| p.vms() > 1)
                .filter_map(|p| Some((p.vms(), weighted_speedup_ci(r, p)?)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            pts.push((
                1,
                crate::stats::MedianCi {
                    median: 1.0,
                    lo: 1.0,
                    hi: 1.0,
                    n: 1,
                    coverage: 1.0,
                },
            ));
            pts.sort_by_key(|x| x.0);
            kmax = kmax.max(pts.last().map_or(1, |x| x.0));
            lines.push(Line {
                name: executor_name(members[0].executor()).into(),
                points: pts.iter().map(|(k, c)| (*k as f64, c.median)).collect(),
                dashed: false,
                colour,
                ranges: pts.iter().map(|(_, c)| (c.lo, c.hi)).collect(),
            });
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
            colour: 8,
            ranges: vec![],
        });
        out.push(svg::line_chart(
            &format!("{w}, {vcpus} vCPUs per VM: weighted speedup"),
            "VMs running at once (K)",
            "weighted speedup Σ T₁/T_K,i",
            &lines,
        ));
    }
    if out.is_empty() {
        return;
    }
    let mut h = String::from("<p>Weighted speedup Σ T₁/T_K,i over the K VMs running the same workload at once: 1 is the throughput of one VM alone, K perfect scaling. Whiskers: 95% interval over repetitions. The simulator's host has as many CPUs as one VM has vCPUs, so K VMs overcommit it K-fold.</p><div class=\"grid\">");
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
