//! The CSV exports beside the page: results.csv (one row per record),
//! metrics.csv (one row per configuration), exits.csv, predictions.csv.

use smplab_analysis::metrics::{Results, Summary};
use smplab_experiment::point::Point;
use smplab_experiment::store::{Status, Store};

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
    use smplab_record::config::RunConfig;
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

/// `predictions.csv`: simulator predictions beside measurements, with the
/// relative error (`NaN` when the measured value is 0) and the absolute
/// error `predicted − measured` in the metric's unit.
pub fn predictions_csv(results: &Results) -> String {
    let mut out = csv_row(
        &[
            "configuration",
            "metric",
            "measured",
            "predicted",
            "rel_error",
            "abs_error",
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
            p.abs_error().to_string(),
        ]));
    }
    out
}
