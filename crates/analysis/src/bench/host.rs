//! The view of `smplab host bench` (built-in spec `bench-host`): the
//! weighted speedup of two 2-vCPU VMs sharing the host CPUs under every
//! policy against `linux` (docs/host.md).
//!
//! Per repetition and workload: one VM alone under each policy (`vms = 1`)
//! and both together (`vms = 2`). Weighted speedup = Σ over VMs of alone ÷
//! shared workload wall, the alone wall being `linux`'s of the same
//! repetition (1.0: the host's CPUs are used as well as by the VMs one after
//! the other). Each policy's figure is also divided by `linux`'s of the same
//! repetition. A policy's sampling overhead is its alone wall ÷ `linux`'s
//! alone wall (one VM, nothing to schedule but the sampling). The simulator's
//! figure is the same quotient over its points (median over repetitions).

use super::failure;
use serde::Serialize;
use smplab_experiment::host::{weighted_speedup, workload_wall_s};
use smplab_experiment::store::Entry;
use smplab_record::config::{Decider, HostPolicy, RunConfig};
use smplab_record::hostsched::{SpinDetection, SpinTruth};
use smplab_record::RunRecord;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One policy on one workload.
#[derive(Debug, Serialize, Default)]
pub struct Cell {
    pub workload: String,
    pub policy: String,
    /// Per repetition.
    pub weighted_speedup: Vec<f64>,
    pub vs_linux: Vec<f64>,
    pub sampling_overhead: Vec<f64>,
    pub spins_detected: Vec<u64>,
    pub samples: Vec<u64>,
    pub yields: Vec<u64>,
    pub preemptions: Vec<u64>,
    /// The guests' own spin iterations (both VMs).
    pub guest_spin_iterations: Vec<u64>,
    pub steal_ms: Vec<f64>,
    /// The spin detector's figures per repetition, with its ground truth
    /// (the guest's own spin word: true and false positives, misses,
    /// episodes caught, detection latency).
    pub spin_detection: Vec<SpinDetection>,
    pub failures: Vec<String>,
    /// The simulator's weighted speedup for the same configuration (median
    /// over repetitions; user-level policies are smplab-policy's decisions
    /// driven by the simulator).
    pub sim_weighted_speedup: Option<f64>,
    /// Why the simulator has no figure for the policy (set by the bench,
    /// which leaves out the configurations the simulator refuses).
    pub sim_error: Option<String>,
}

/// The spin detector against the guest's spin word, on one line: sample
/// precision and recall, false detections per sample, long episodes caught,
/// median detection latency (sampling intervals) and the samples' share of
/// the vCPUs' run time `run_ns`.
pub fn detector_summary(s: &SpinDetection, run_ns: u64) -> String {
    let t = &s.truth;
    let pct = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0));
    let ratio = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
    #[allow(clippy::cast_precision_loss)] // ns totals far below 2^52
    let cost = (run_ns > 0).then(|| s.mean_sample_ns * s.samples as f64 / run_ns as f64);
    format!(
        "precision {}, recall {}, false {} of {} samples, long episodes caught {}/{}, median latency {} intervals, sampling {} of run time",
        ratio(t.precision()),
        ratio(t.recall()),
        pct(t.false_positive_rate()),
        t.samples,
        t.episodes_long_detected,
        t.episodes_long,
        t.median_latency_intervals()
            .map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
        pct(cost)
    )
}

/// The simulator's policy for a host policy's column: `linux` is the
/// simulator's model of the host kernel, fair share at the platform's slice.
pub fn sim_policy(policy: HostPolicy) -> HostPolicy {
    match policy.kind.decider() {
        Decider::HostKernel | Decider::SimulatedKernel => HostPolicy::fair(),
        Decider::UserLevel => policy,
    }
}

/// Stored runs of one workload, by (policy, VMs, repetition).
#[derive(Default)]
struct Runs<'a> {
    vm: BTreeMap<(String, u32, u32), &'a Entry>,
    sim: BTreeMap<(String, u32, u32), &'a Entry>,
}

fn walls(records: &[RunRecord]) -> Vec<f64> {
    records.iter().map(workload_wall_s).collect()
}

/// The cells of the stored entries, workloads and policies in the order the
/// entries first name them (`linux` first).
pub fn cells(entries: &[&Entry]) -> Vec<Cell> {
    let mut workloads: Vec<String> = Vec::new();
    let mut policies: Vec<HostPolicy> = vec![HostPolicy::parse("linux").unwrap_or_default()];
    let mut runs: BTreeMap<String, Runs> = BTreeMap::new();
    for e in entries {
        let w = &e.point.workload;
        if !workloads.contains(w) {
            workloads.push(w.clone());
        }
        let r = runs.entry(w.clone()).or_default();
        match &e.point.config {
            RunConfig::Vm(v) => {
                let Some(p) = v.host_policy else { continue };
                if !policies.contains(&p) {
                    policies.push(p);
                }
                r.vm.insert((p.to_string(), v.guest.vms, e.point.rep), *e);
            }
            RunConfig::Sim(s) => {
                r.sim.insert((s.policy.to_string(), s.vms, e.point.rep), *e);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for w in &workloads {
        let Some(r) = runs.get(w) else { continue };
        let reps = r.vm.keys().map(|k| k.2 + 1).max().unwrap_or(0);
        let mut row: Vec<Cell> = policies
            .iter()
            .map(|p| Cell {
                workload: w.clone(),
                policy: p.to_string(),
                ..Cell::default()
            })
            .collect();
        for rep in 0..reps {
            add_rep(&mut row, &policies, r, rep);
        }
        for (cell, policy) in row.iter_mut().zip(&policies) {
            cell.sim_weighted_speedup = sim_speedup(r, *policy, &policies[0]);
        }
        out.extend(row);
    }
    out
}

/// The first VM's workload wall of an entry that ran (s).
fn alone_wall(e: Option<&&Entry>) -> Option<f64> {
    let e = e.filter(|e| e.is_ok())?;
    e.records.first().map(workload_wall_s)
}

/// Repetition `rep` of every policy into `row`.
fn add_rep(row: &mut [Cell], policies: &[HostPolicy], r: &Runs, rep: u32) {
    let key = |p: &HostPolicy, vms: u32| (p.to_string(), vms, rep);
    let linux = &policies[0];
    let alone_linux = alone_wall(r.vm.get(&key(linux, 1))).unwrap_or(f64::NAN);
    let shared_ws = |p: &HostPolicy| -> Option<f64> {
        let e = r.vm.get(&key(p, 2)).filter(|e| e.is_ok())?;
        weighted_speedup(&[alone_linux, alone_linux], &walls(&e.records))
    };
    let linux_ws = shared_ws(linux).unwrap_or(f64::NAN);
    for (policy, cell) in policies.iter().zip(row.iter_mut()) {
        let alone_entry = r.vm.get(&key(policy, 1));
        let Some(alone) = alone_wall(alone_entry) else {
            let why = alone_entry
                .and_then(|e| failure(e))
                .unwrap_or_else(|| "not run".into());
            cell.failures
                .push(format!("rep {rep}: the alone run failed: {why}"));
            continue;
        };
        cell.sampling_overhead.push(alone / alone_linux);
        let Some(shared) = r.vm.get(&key(policy, 2)) else {
            continue;
        };
        if let Some(why) = failure(shared) {
            cell.failures.push(format!("rep {rep}: {why}"));
            continue;
        }
        let ws = shared_ws(policy).unwrap_or(f64::NAN);
        cell.weighted_speedup.push(ws);
        cell.vs_linux.push(ws / linux_ws);
        record_host_figures(cell, &shared.records);
    }
}

/// The host scheduler's and the guests' figures of one shared run: spins
/// detected, samples, yields, preemptions, steal and guest spin iterations.
fn record_host_figures(cell: &mut Cell, records: &[RunRecord]) {
    if let Some(h) = records.first().and_then(|r| r.host_run.as_ref()) {
        cell.spins_detected.push(h.spin_detection.spins_detected);
        cell.spin_detection.push(h.spin_detection.clone());
        cell.samples.push(h.spin_detection.samples);
        cell.yields.push(h.vms.iter().map(|v| v.yields).sum());
        cell.preemptions
            .push(h.vms.iter().map(|v| v.preemptions).sum());
        #[allow(clippy::cast_precision_loss)] // ms
        cell.steal_ms
            .push(h.vms.iter().map(|v| v.steal_ns).sum::<u64>() as f64 / 1e6);
    }
    cell.guest_spin_iterations
        .push(records.iter().map(|r| r.counters.spin_iterations).sum());
}

/// The simulator's weighted speedup of `policy` (alone: one VM under the
/// simulator's `linux`), the median over repetitions.
fn sim_speedup(r: &Runs, policy: HostPolicy, linux: &HostPolicy) -> Option<f64> {
    let alone_policy = sim_policy(*linux).to_string();
    let shared_policy = sim_policy(policy).to_string();
    let per_rep: Vec<f64> = r
        .sim
        .iter()
        .filter(|((p, vms, _), e)| *p == shared_policy && *vms == 2 && e.is_ok())
        .filter_map(|((_, _, rep), e)| {
            let alone = r.sim.get(&(alone_policy.clone(), 1, *rep))?;
            let a = alone
                .records
                .first()
                .map(|x| x.timing.wall_ns as f64 / 1e9)?;
            let shared: Vec<f64> = e
                .records
                .iter()
                .map(|x| x.timing.wall_ns as f64 / 1e9)
                .collect();
            weighted_speedup(&[a, a], &shared)
        })
        .collect();
    smplab_stats::median(&per_rep)
}

/// `median [min..max]` of the finite values, two decimals; `n/a` for none.
fn spread(v: &[f64]) -> String {
    let s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let Some(median) = smplab_stats::median(&s) else {
        return "n/a".into();
    };
    let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{median:.2} [{lo:.2}..{hi:.2}]")
}

/// The bench's table.
pub fn table(cells: &[Cell]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:<24} {:>22} {:>22} {:>22} {:>13} {:>6} {:>6}",
        "workload",
        "policy",
        "weighted speedup",
        "vs linux",
        "sampling overhead",
        "spins/samples",
        "yields",
        "sim"
    );
    for c in cells {
        let spins: u64 = c.spins_detected.iter().sum();
        let samples: u64 = c.samples.iter().sum();
        let yields: u64 = c.yields.iter().sum();
        let _ = writeln!(
            out,
            "{:<14} {:<24} {:>22} {:>22} {:>22} {:>13} {:>6} {:>6}",
            c.workload,
            c.policy,
            spread(&c.weighted_speedup),
            spread(&c.vs_linux),
            spread(&c.sampling_overhead),
            format!("{spins}/{samples}"),
            yields,
            c.sim_weighted_speedup
                .map_or_else(|| "n/a".to_string(), |w| format!("{w:.2}"))
        );
        let mut t = SpinTruth::default();
        for d in &c.spin_detection {
            t.add(&d.truth);
        }
        if t.samples > 0 {
            let _ = writeln!(
                out,
                "    ground truth: {} samples spinning, detected {} (true {} / false {}), missed {}; episodes caught {}/{}, mean latency {:.0} us",
                t.true_positives + t.false_negatives,
                t.true_positives + t.false_positives,
                t.true_positives,
                t.false_positives,
                t.false_negatives,
                t.episodes_detected,
                t.episodes_sampled,
                t.mean_detect_latency_ns() / 1000.0
            );
        }
        if let Some(e) = &c.sim_error {
            let _ = writeln!(out, "    simulator: {e}");
        }
        for f in &c.failures {
            let _ = writeln!(out, "    failed: {f}");
        }
    }
    out
}
