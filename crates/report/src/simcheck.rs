//! The simulator beside the measurements (Ye et al.): each measured
//! configuration with a simulated twin, per metric, on a predicted-versus-
//! measured scatter, with the error table.

use super::data::{colour, executor_legend, pct_ci, slowdown_ci, wall_ci, weighted_speedup_ci};
use super::{Ctx, Page};
use smplab_analysis::metrics::{
    error_reads_in_points, prediction_error_by_metric, Prediction, Results,
};
use smplab_chart::{self as chart, esc, fmt_num, ScatterPoint};
use smplab_experiment::point::Point;
use smplab_record::Executor;
use smplab_stats::MedianCi;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The 95% interval of one prediction metric of `p` over its repetitions,
/// by the same definitions as the value [`Results::predictions`] reports.
fn metric_ci(r: &Results, p: &Point, metric: &str) -> Option<MedianCi> {
    match metric {
        "slowdown" => slowdown_ci(r, p),
        "wall time (s)" => wall_ci(r, p),
        "weighted speedup" => weighted_speedup_ci(r, p),
        "idle fraction" => per_rep_ci(r, p, |one, q| Some(one.idle_fraction(q)?.median)),
        "exits/s" => per_rep_ci(r, p, |one, q| one.workload_exits_per_s(q)),
        _ => None,
    }
}

/// A metric of each repetition on its own (metrics' definition applied to a
/// one-repetition view), and the interval of their median.
fn per_rep_ci(
    r: &Results,
    p: &Point,
    metric: impl Fn(&Results, &Point) -> Option<f64>,
) -> Option<MedianCi> {
    let samples: Vec<f64> = r
        .get(p)?
        .iter()
        .filter_map(|e| metric(&Results::from_entries(vec![*e]), p))
        .collect();
    MedianCi::of(&samples)
}

/// The simulator section: predicted against measured per metric, the error
/// table and every pair.
pub fn render(ctx: &Ctx, page: &mut Page) {
    let preds = &ctx.predictions;
    if preds.is_empty() {
        return;
    }
    let r = ctx.results;
    // Measured configuration label → its point (for colour and intervals).
    let by_label: BTreeMap<String, &Point> = r
        .points()
        .filter(|p| p.executor().is_real_vm())
        .map(|p| (p.label(), p))
        .collect();
    let metrics: BTreeSet<&str> = preds.iter().map(|p| p.metric.as_str()).collect();
    let used: BTreeSet<Executor> = preds
        .iter()
        .filter_map(|p| Some(by_label.get(&p.label)?.executor()))
        .collect();
    let legend = executor_legend(used.iter().copied());
    let mut h = String::from("<p>Each measured configuration beside the simulator's prediction of the same configuration; points on the dashed diagonal are exact. Colour: the measured executor. Whiskers: 95% intervals over repetitions, horizontal of the measurement, vertical of the simulation (none where a side ran once or repeated exactly). Wall time is only comparable against a platform calibrated to this host.</p><div class=\"grid\">");
    for m in &metrics {
        let k = if *m == "slowdown" { 100.0 } else { 1.0 };
        let range = |ci: Option<MedianCi>| ci.map(|c| (c.lo * k, c.hi * k));
        let pts: Vec<ScatterPoint> = preds
            .iter()
            .filter(|p| p.metric == *m)
            .map(|p| {
                let measured = by_label.get(&p.label).copied();
                let sim = measured.and_then(|q| r.sim_twin(q, None));
                ScatterPoint {
                    colour: colour(measured.map_or(Executor::Vm, Point::executor)),
                    x: p.measured * k,
                    y: p.predicted * k,
                    x_range: range(measured.and_then(|q| metric_ci(r, q, m))),
                    y_range: range(sim.and_then(|q| metric_ci(r, q, m))),
                    label: p.label.clone(),
                }
            })
            .collect();
        let unit = if *m == "slowdown" { " (%)" } else { "" };
        h.push_str(&chart::xy_scatter(
            &format!("Predicted vs measured: {m} (whiskers: 95% interval)"),
            &format!("measured {m}{unit}"),
            &format!("predicted {m}{unit}"),
            true,
            &legend,
            &pts,
        ));
    }
    h.push_str("</div><table><tr><th>metric</th><th>pairs</th><th>median |relative error|</th><th>largest</th><th>measured 0 (no relative error)</th><th>median |absolute error|</th><th>slowdown as VM/native ratio: median |relative error|</th></tr>");
    error_rows(&mut h, preds);
    h.push_str("</table><details><summary>Every pair</summary><div class=\"scroll\"><table><tr><th>configuration</th><th>metric</th><th>measured</th><th>predicted</th><th>error</th><th>predicted inside the measured interval?</th></tr>");
    pair_rows(&mut h, r, preds, &by_label);
    h.push_str("</table></div></details>");
    page.section("sim", "Simulator vs measurement", &h);
}

/// The rows of the error table: per metric its pairs, the median and largest
/// |relative error|, the pairs measured 0, the median |absolute error| and,
/// for slowdowns, the error of the VM/native ratio (the held-out tables').
fn error_rows(h: &mut String, preds: &[Prediction]) {
    for (m, e) in prediction_error_by_metric(preds) {
        let (rel, largest) = e.rel.map_or((String::from("—"), String::from("—")), |s| {
            (
                format!("{:.1}%", s.median * 100.0),
                format!("{:.1}%", s.max * 100.0),
            )
        });
        let abs = match e.abs {
            Some(a) if error_reads_in_points(&m) => format!("{:.1} pp", a.median * 100.0),
            Some(a) => fmt_num(a.median),
            None => String::from("—"),
        };
        let ratio = e
            .ratio
            .map_or(String::from("—"), |r| format!("{:.1}%", r.median * 100.0));
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{rel}</td><td>{largest}</td><td>{}</td><td>{abs}</td><td>{ratio}</td></tr>",
            esc(&m),
            e.pairs,
            e.rel_undefined
        );
    }
}

/// The rows of every pair: measured, predicted, the relative error and, for
/// slowdowns, whether the prediction is inside the measured interval.
fn pair_rows(
    h: &mut String,
    r: &Results,
    preds: &[Prediction],
    by_label: &BTreeMap<String, &Point>,
) {
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
}
