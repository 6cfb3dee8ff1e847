//! Macro versus micro (Ye et al.): which low-level rate moves with the
//! slowdown? Per-second rates of low-level events per configuration and
//! their Pearson correlation with the slowdown across configurations.

use super::exits::{RESULT_STREAM, WINDOW_PORT};
use super::Results;
use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_record::{Executor, RunRecord};
use std::collections::BTreeMap;

/// Per-second rates of low-level events of one configuration (medians over
/// repetitions): exits by reason (`exit:REASON`), guest IPIs, halts, wakeups
/// and context switches, workload blocks and spin iterations.
pub fn micro_rates(results: &Results, p: &Point) -> BTreeMap<String, f64> {
    let mut out: BTreeMap<String, f64> = BTreeMap::new();
    for (k, s) in results.exits_per_s(p) {
        if k != RESULT_STREAM && k != WINDOW_PORT {
            out.insert(format!("exit:{k}"), s.median);
        }
    }
    let rate = |f: Counter| {
        results.per_rep(p, |r| {
            let wall = r.timing.wall_ns as f64 / 1e9;
            (wall > 0.0).then_some(f(r)? as f64 / wall)
        })
    };
    type Counter = fn(&RunRecord) -> Option<u64>;
    let fields: [(&str, Counter); 6] = [
        ("guest IPIs", |r| Some(r.guest.as_ref()?.ipis_sent)),
        ("guest halts", |r| Some(r.guest.as_ref()?.halts)),
        ("guest wakeups", |r| Some(r.guest.as_ref()?.wakeups)),
        ("guest context switches", |r| {
            Some(r.guest.as_ref()?.context_switches)
        }),
        ("blocks", |r| Some(r.counters.blocks)),
        ("spin iterations", |r| Some(r.counters.spin_iterations)),
    ];
    for (name, f) in fields {
        if let Some(s) = rate(f) {
            out.insert(name.to_string(), s.median);
        }
    }
    out
}

/// Pearson correlation of two equally long series; `None` when either is
/// constant or there are fewer than three pairs.
pub fn pearson(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len();
    if n < 3 || ys.len() != n {
        return None;
    }
    let mx = xs.iter().sum::<f64>() / n as f64;
    let my = ys.iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in xs.iter().zip(ys) {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

/// One micro rate's correlation with the slowdown across configurations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Correlation {
    pub micro: String,
    pub r: f64,
    /// `(configuration label, micro rate, slowdown)` pairs.
    pub pairs: Vec<(String, f64, f64)>,
}

/// For the one-VM configurations of `executor` (outside studies), correlate
/// each micro rate with the slowdown; strongest |r| first. A missing rate
/// counts as 0 when other configurations have it (an absent exit reason did
/// not happen).
pub fn correlate_with_slowdown(results: &Results, executor: Executor) -> Vec<Correlation> {
    // (label, slowdown, micro rates) per configuration.
    type Row = (String, f64, BTreeMap<String, f64>);
    let rows: Vec<Row> = results
        .points()
        .filter(|p| p.executor() == executor && p.vms() == 1 && p.study.is_none())
        .filter_map(|p| {
            Some((
                p.label(),
                results.slowdown(p)?.median,
                micro_rates(results, p),
            ))
        })
        .collect();
    let names: std::collections::BTreeSet<&String> = rows.iter().flat_map(|r| r.2.keys()).collect();
    let mut out: Vec<Correlation> = names
        .into_iter()
        .filter_map(|name| {
            let xs: Vec<f64> = rows
                .iter()
                .map(|r| r.2.get(name).copied().unwrap_or(0.0))
                .collect();
            let ys: Vec<f64> = rows.iter().map(|r| r.1).collect();
            let r = pearson(&xs, &ys)?;
            Some(Correlation {
                micro: name.clone(),
                r,
                pairs: rows
                    .iter()
                    .zip(&xs)
                    .map(|(row, x)| (row.0.clone(), *x, row.1))
                    .collect(),
            })
        })
        .collect();
    out.sort_by(|a, b| b.r.abs().total_cmp(&a.r.abs()));
    out
}
