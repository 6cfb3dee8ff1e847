//! The simulator beside the measurements (seed 003): each measured
//! configuration with a simulated twin, per metric, on a predicted-versus-
//! measured scatter, with the error table.

use super::data::{colour_index, executor_legend, pct_ci, slowdown_ci};
use super::{Ctx, Page};
use crate::metrics::prediction_error_by_metric;
use crate::svg::{self, esc, fmt_num};
use smplab_record::Executor;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

pub fn render(ctx: &Ctx, page: &mut Page) {
    let preds = &ctx.predictions;
    if preds.is_empty() {
        return;
    }
    let r = ctx.results;
    // Measured configuration label → its point (for colour and intervals).
    let by_label: BTreeMap<String, &crate::point::Point> = r
        .points()
        .filter(|p| matches!(p.executor(), Executor::Vm | Executor::Qemu))
        .map(|p| (p.label(), p))
        .collect();
    let metrics: BTreeSet<&str> = preds.iter().map(|p| p.metric.as_str()).collect();
    let used: BTreeSet<Executor> = preds
        .iter()
        .filter_map(|p| Some(by_label.get(&p.label)?.executor()))
        .collect();
    let legend = executor_legend(used.iter().copied());
    let mut h = String::from("<p>Each measured configuration beside the simulator's prediction of the same configuration; points on the dashed diagonal are exact. Colour: the measured executor. Wall time is only comparable against a platform calibrated to this host.</p><div class=\"grid\">");
    for m in &metrics {
        let pts: Vec<(usize, f64, f64, String)> = preds
            .iter()
            .filter(|p| p.metric == *m)
            .map(|p| {
                let c = by_label
                    .get(&p.label)
                    .map_or(colour_index(Executor::Vm), |q| colour_index(q.executor()));
                let k = if *m == "slowdown" { 100.0 } else { 1.0 };
                (c, p.measured * k, p.predicted * k, p.label.clone())
            })
            .collect();
        let unit = if *m == "slowdown" { " (%)" } else { "" };
        h.push_str(&svg::xy_scatter(
            &format!("Predicted vs measured: {m}"),
            &format!("measured {m}{unit}"),
            &format!("predicted {m}{unit}"),
            true,
            &legend,
            &pts,
        ));
    }
    h.push_str("</div><table><tr><th>metric</th><th>pairs</th><th>median |relative error|</th><th>largest</th></tr>");
    for (m, s) in prediction_error_by_metric(preds) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{:.1}%</td><td>{:.1}%</td></tr>",
            esc(&m),
            s.n,
            s.median * 100.0,
            s.max * 100.0
        );
    }
    h.push_str("</table><details><summary>Every pair</summary><div class=\"scroll\"><table><tr><th>configuration</th><th>metric</th><th>measured</th><th>predicted</th><th>error</th><th>predicted inside the measured interval?</th></tr>");
    for p in preds {
        let inside = if p.metric == "slowdown" {
            by_label
                .get(&p.label)
                .and_then(|q| slowdown_ci(r, q))
                .map_or(String::new(), |ci| {
                    format!(
                        "{} {}",
                        if ci.lo <= p.predicted && p.predicted <= ci.hi {
                            "yes"
                        } else {
                            "no"
                        },
                        pct_ci(Some(ci))
                    )
                })
        } else {
            String::new()
        };
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:+.1}%</td><td>{inside}</td></tr>",
            esc(&p.label),
            esc(&p.metric),
            fmt_num(p.measured),
            fmt_num(p.predicted),
            p.rel_error() * 100.0
        );
    }
    h.push_str("</table></div></details>");
    page.section("sim", "Simulator vs measurement", &h);
}
