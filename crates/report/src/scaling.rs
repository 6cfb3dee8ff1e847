//! Speedup versus vCPUs beside the Seoul thesis's eq. 5.1 projection and the native
//! Amdahl bound, one chart per family of configurations.

use super::data::{colour, executor_name, is_default_setup};
use super::{Ctx, Page};
use smplab_analysis::metrics::{AmdahlInputs, SpeedupPoint};
use smplab_chart::{self as chart, esc, Line};
use smplab_experiment::point::Point;
use smplab_record::Executor;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Charts at most; a sweep of thousands of points has hundreds of families.
const MAX_CHARTS: usize = 12;

/// The scaling section: a chart per family of configurations (at most
/// [`MAX_CHARTS`]).
pub fn render(ctx: &Ctx, page: &mut Page) {
    let r = ctx.results;
    let mut families = BTreeSet::new();
    let mut charts = Vec::new();
    let mut skipped = 0;
    for p in r
        .points()
        .filter(|p| p.executor() != Executor::Native && p.vms() == 1 && is_default_setup(p))
    {
        // One chart per family: everything but vCPUs and threads.
        let mut f = p.clone();
        f.config.set_vcpus(0);
        f.threads = 0;
        if !families.insert(f.config_key()) {
            continue;
        }
        if charts.len() >= MAX_CHARTS {
            skipped += 1;
            continue;
        }
        let (curve, inputs) = r.speedup_vs_vcpus(p);
        if curve.len() < 2 {
            continue;
        }
        charts.push(family_chart(p, &curve, inputs));
    }
    if charts.is_empty() {
        return;
    }
    let mut h = String::from("<p>Measured speedup per unit of work (median over repetitions; whiskers: its 95% interval, widened by the interval of the smallest configuration every repetition is divided by) beside the projection of Partheymüller's thesis (Adding SMP Support to a User-Level VMM, eq. 5.1) S(N) = 1/((1−P(N)) + P(N)/N), P(N) = P·(1 − h·N·q), with the native parallel fraction P, exit handling per vCPU h and synchronous share q from the smallest run. Without device exits the projection coincides with the native Amdahl bound.</p><div class=\"grid\">");
    for c in &charts {
        h.push_str(c);
    }
    h.push_str("</div>");
    if skipped > 0 {
        let _ = write!(
            h,
            "<p class=\"muted\">{} more families not drawn; their numbers are in {}.</p>",
            skipped,
            esc("metrics.csv")
        );
    }
    page.section("scaling", "Scaling with vCPUs", &h);
}

/// One family's chart: the measured speedup with its intervals, and with
/// the projection's `inputs` the eq. 5.1 curve and the native Amdahl bound.
fn family_chart(p: &Point, curve: &[SpeedupPoint], inputs: Option<AmdahlInputs>) -> String {
    let c = colour(p.executor());
    let mut lines = vec![Line {
        name: format!(
            "measured, {} (whiskers: 95% interval)",
            executor_name(p.executor())
        ),
        points: curve
            .iter()
            .map(|s| (s.vcpus as f64, s.measured.median))
            .collect(),
        dashed: false,
        colour: c,
        ranges: curve
            .iter()
            .map(|s| (s.measured_ci.lo, s.measured_ci.hi))
            .collect(),
    }];
    if inputs.is_some() {
        lines.push(Line {
            name: "projected, eq. 5.1".into(),
            points: curve
                .iter()
                .filter_map(|s| Some((s.vcpus as f64, s.projected?)))
                .collect(),
            dashed: true,
            colour: c,
            ranges: vec![],
        });
        lines.push(Line {
            name: "native Amdahl bound".into(),
            points: curve
                .iter()
                .filter_map(|s| Some((s.vcpus as f64, s.native_bound?)))
                .collect(),
            dashed: true,
            colour: crate::data::colour(Executor::Native),
            ranges: vec![],
        });
    }
    let mut chart = String::from("<figure>");
    chart.push_str(&chart::line_chart(
        &format!(
            "{} on {}: speedup vs vCPUs",
            p.workload,
            executor_name(p.executor())
        ),
        "vCPUs (threads = vCPUs)",
        "speedup (× one vCPU's throughput)",
        &lines,
    ));
    if let Some(i) = inputs {
        let _ = write!(
            chart,
            "<figcaption class=\"muted\">P = {:.3}; exit handling per vCPU {:.3}%; synchronous share {:.0}%.</figcaption>",
            i.p_native,
            i.exit_handling_per_cpu * 100.0,
            i.sync_share * 100.0
        );
    }
    chart.push_str("</figure>");
    chart
}
