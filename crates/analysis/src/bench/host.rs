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
//!
//! As in the lab metrics, a shared run whose VMs' workload windows overlap
//! less than 90% is left out (`metrics::MIN_WORKLOAD_OVERLAP`). Repetitions
//! run interleaved (every policy's runs of repetition 0, then of 1, ...), so
//! each policy's figure pairs with `linux`'s and with the round robin's at
//! its slice (`fair`: slicing without a detector) of the same repetition:
//! the paired 95% interval of the ratio (`smplab_stats::paired_ratio`).
//! The spin detector is judged against the guest's spin word
//! ([`detector_summary`]).

use super::failure;
use crate::metrics::{workload_overlap, MIN_WORKLOAD_OVERLAP};
use serde::Serialize;
use smplab_experiment::host::{weighted_speedup, workload_wall_s};
use smplab_experiment::store::Entry;
use smplab_record::config::{Decider, HostPolicy, RunConfig};
use smplab_record::hostsched::{SpinDetection, SpinTruth};
use smplab_record::RunRecord;
use smplab_stats::MedianCi;
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
    /// The vCPUs' run time over the shared runs (ns): what the samples cost
    /// a share of.
    pub run_ns: u64,
    /// The spin detector's figures per repetition, with its ground truth
    /// (the guest's own spin word: true and false positives, misses,
    /// episodes caught, detection latency).
    pub spin_detection: Vec<SpinDetection>,
    pub failures: Vec<String>,
    /// Per repetition that counted: (linux's weighted speedup, this
    /// policy's) and (the round robin's at the same slice, this policy's),
    /// the pairs of the paired intervals below.
    pub pairs_linux: Vec<(f64, f64)>,
    pub pairs_fair: Vec<(f64, f64)>,
    /// The paired 95% interval of this policy's weighted speedup ÷ linux's
    /// and ÷ the round robin's at the same slice (what the policy adds beyond
    /// slicing), over the repetitions.
    pub vs_linux_paired: Option<MedianCi>,
    pub vs_fair_paired: Option<MedianCi>,
    /// Shared runs left out: their VMs' workload windows overlapped less
    /// than `MIN_WORKLOAD_OVERLAP` (the lab metrics' rule).
    pub overlap_excluded: usize,
    /// Alone runs shorter than [`MIN_ALONE_S`]: too short to mean much.
    pub short_alone: usize,
    /// Repetitions left out because the host's steal disturbed one of their
    /// runs (`Entry::disturbed`, the sweep's `--steal-threshold`), each with
    /// why: which run and how much was stolen. Their reruns, when the sweep's
    /// budget allowed one, count instead.
    pub disturbed: Vec<String>,
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

/// The shortest alone run that means something (scale the profile up when
/// the bench flags shorter ones).
pub const MIN_ALONE_S: f64 = 0.1;

/// The round robin at `policy`'s slice among `policies` (the `fair` of the
/// host: the slicing a spin policy adds its detector to), unless `policy`
/// is one itself.
fn fair_of(policy: &HostPolicy, policies: &[HostPolicy]) -> Option<usize> {
    if policy.kind == smplab_record::config::PolicyKind::RoundRobin {
        return None;
    }
    policies.iter().position(|p| {
        p.kind == smplab_record::config::PolicyKind::RoundRobin
            && p.time_slice_ns == policy.time_slice_ns
            && p.safe_point_grace_ns.is_none()
    })
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
            cell.vs_linux_paired = smplab_stats::paired_ratio(&cell.pairs_linux);
            cell.vs_fair_paired = smplab_stats::paired_ratio(&cell.pairs_fair);
        }
        out.extend(row);
    }
    out
}

/// The first VM's workload wall of an entry that ran undisturbed (s).
fn alone_wall(e: Option<&&Entry>) -> Option<f64> {
    let e = e.filter(|e| e.is_ok() && !e.disturbed)?;
    e.records.first().map(workload_wall_s)
}

/// Why a stored run is left out as disturbed (`what` names the run), if it is.
fn disturbance(e: Option<&&Entry>, rep: u32, what: &str) -> Option<String> {
    let e = e.filter(|e| e.is_ok() && e.disturbed)?;
    let steal = e
        .records
        .iter()
        .filter_map(|r| r.interference.as_ref())
        .map(|i| i.steal_fraction)
        .fold(0.0, f64::max);
    Some(format!(
        "rep {rep}: {what} run disturbed, the hypervisor stole {:.1}% of its CPU time",
        steal * 100.0
    ))
}

/// Repetition `rep` of every policy into `row`. A shared run whose VMs'
/// workload windows overlapped less than [`MIN_WORKLOAD_OVERLAP`] did not
/// share the host the whole time: it is left out, as the lab metrics do.
fn add_rep(row: &mut [Cell], policies: &[HostPolicy], r: &Runs, rep: u32) {
    let key = |p: &HostPolicy, vms: u32| (p.to_string(), vms, rep);
    let linux = &policies[0];
    // linux's alone run is every policy's reference: disturbed, the whole
    // repetition is left out.
    if let Some(why) = disturbance(
        r.vm.get(&key(linux, 1)),
        rep,
        "linux's alone (the reference)",
    ) {
        for cell in row.iter_mut() {
            cell.disturbed.push(why.clone());
        }
        return;
    }
    let alone_linux = alone_wall(r.vm.get(&key(linux, 1))).unwrap_or(f64::NAN);
    let overlapped =
        |e: &&&Entry| workload_overlap(&e.records).is_none_or(|f| f >= MIN_WORKLOAD_OVERLAP);
    let shared_ws = |p: &HostPolicy| -> Option<f64> {
        let e =
            r.vm.get(&key(p, 2))
                .filter(|e| e.is_ok() && !e.disturbed)
                .filter(overlapped)?;
        weighted_speedup(&[alone_linux, alone_linux], &walls(&e.records))
    };
    let linux_ws = shared_ws(linux).unwrap_or(f64::NAN);
    let all_ws: Vec<Option<f64>> = policies.iter().map(shared_ws).collect();
    for (i, (policy, cell)) in policies.iter().zip(row.iter_mut()).enumerate() {
        let alone_entry = r.vm.get(&key(policy, 1));
        if let Some(why) = disturbance(alone_entry, rep, "the alone") {
            cell.disturbed.push(why);
            continue;
        }
        let Some(alone) = alone_wall(alone_entry) else {
            let why = alone_entry
                .and_then(|e| failure(e))
                .unwrap_or_else(|| "not run".into());
            cell.failures
                .push(format!("rep {rep}: the alone run failed: {why}"));
            continue;
        };
        if alone < MIN_ALONE_S {
            cell.short_alone += 1;
        }
        cell.sampling_overhead.push(alone / alone_linux);
        let Some(shared) = r.vm.get(&key(policy, 2)) else {
            continue;
        };
        if let Some(why) = failure(shared) {
            cell.failures.push(format!("rep {rep}: {why}"));
            continue;
        }
        if let Some(why) = disturbance(Some(shared), rep, "the shared") {
            cell.disturbed.push(why);
            continue;
        }
        if !overlapped(&shared) {
            cell.overlap_excluded += 1;
            continue;
        }
        let ws = all_ws[i].unwrap_or(f64::NAN);
        cell.weighted_speedup.push(ws);
        // linux's shared run of this repetition may be left out (disturbed,
        // overlapped too little): then there is no pair.
        if linux_ws.is_finite() {
            cell.vs_linux.push(ws / linux_ws);
            cell.pairs_linux.push((linux_ws, ws));
        }
        if let Some(fair) = fair_of(policy, policies).and_then(|f| all_ws[f]) {
            cell.pairs_fair.push((fair, ws));
        }
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
        cell.run_ns += h.vms.iter().map(|v| v.run_ns).sum::<u64>();
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
        let paired = |ci: &Option<MedianCi>| {
            ci.map_or_else(
                || "n/a".to_string(),
                |c| {
                    let sure = if c.excludes(1.0) { ", excludes 1" } else { "" };
                    format!(
                        "{:.2} [{:.2}..{:.2}] ({} pairs, {:.0}%{sure})",
                        c.median,
                        c.lo,
                        c.hi,
                        c.n,
                        c.coverage * 100.0
                    )
                },
            )
        };
        if c.policy != "linux" {
            let _ = writeln!(
                out,
                "    paired: ÷ linux {}; ÷ fair (rr at its slice) {}",
                paired(&c.vs_linux_paired),
                paired(&c.vs_fair_paired)
            );
        }
        if c.overlap_excluded > 0 {
            let _ = writeln!(
                out,
                "    left out: {} shared runs whose VMs overlapped < {:.0}%",
                c.overlap_excluded,
                MIN_WORKLOAD_OVERLAP * 100.0
            );
        }
        if !c.disturbed.is_empty() {
            let _ = writeln!(
                out,
                "    left out: {} repetitions the host's steal disturbed (above --steal-threshold): {}",
                c.disturbed.len(),
                c.disturbed.join("; ")
            );
        }
        if c.short_alone > 0 {
            let _ = writeln!(
                out,
                "    short: {} alone runs under {:.0} ms (raise --scale)",
                c.short_alone,
                MIN_ALONE_S * 1000.0
            );
        }
        if t.samples > 0 {
            let mut d = SpinDetection::default();
            for x in &c.spin_detection {
                d.samples += x.samples;
                d.samples_skipped += x.samples_skipped;
                #[allow(clippy::cast_precision_loss)] // a sum of sample costs
                let cost = x.mean_sample_ns * x.samples as f64;
                d.mean_sample_ns += cost;
            }
            #[allow(clippy::cast_precision_loss)] // a mean
            if d.samples > 0 {
                d.mean_sample_ns /= d.samples as f64;
            }
            d.truth = t;
            let _ = writeln!(out, "    detector: {}", detector_summary(&d, c.run_ns));
            if d.samples_skipped > 0 {
                let _ = writeln!(
                    out,
                    "    samples skipped: {} (no sibling preempted: a verdict could not have acted)",
                    d.samples_skipped
                );
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_experiment::point::Point;
    use smplab_experiment::store::Status;
    use smplab_experiment::testutil::{rec, vm_point};
    use smplab_record::Executor;

    /// A record whose workload ran from `start_ms` to `end_ms` on the host's clock.
    fn ran(start_ms: u64, end_ms: u64) -> RunRecord {
        let ms = 1_000_000;
        let mut r = rec(Executor::Vm, "spinlock", 2, (end_ms - start_ms) * ms);
        r.timing.window = Some(smplab_record::WorkloadWindow {
            clock: smplab_record::WindowClock::HostMonotonic,
            threads_ready_ns: start_ms * ms,
            start_ns: start_ms * ms,
            end_ns: end_ms * ms,
            start_gate: None,
            settle: None,
        });
        r
    }

    fn point(policy: &str, vms: u32, rep: u32) -> Point {
        let mut p = vm_point("spinlock", 2, rep);
        p.config.set_vms(vms);
        if let RunConfig::Vm(v) = &mut p.config {
            v.host_policy = Some(HostPolicy::parse(policy).expect("a policy"));
        }
        p
    }

    /// Seven repetitions: alone 100 ms; shared, linux 200 ms (weighted
    /// speedup 1), rr:4ms 250 ms (0.8), spin:4ms 160 ms (1.25), but spin's
    /// run of repetition 6 had its VMs 50 ms apart: left out, though it
    /// would have counted as faster.
    #[test]
    fn overlap_filter_and_paired_ratios() {
        let mut entries = Vec::new();
        for rep in 0..7 {
            for (policy, shared_ms) in [("linux", 200), ("rr:4ms", 250), ("spin:4ms", 160)] {
                entries.push(Entry::new(
                    point(policy, 1, rep),
                    Status::Ok,
                    0.0,
                    vec![ran(0, 100)],
                ));
                let second = if policy == "spin:4ms" && rep == 6 {
                    ran(50, 150)
                } else {
                    ran(0, shared_ms)
                };
                let first = if policy == "spin:4ms" && rep == 6 {
                    ran(0, 100)
                } else {
                    ran(0, shared_ms)
                };
                entries.push(Entry::new(
                    point(policy, 2, rep),
                    Status::Ok,
                    0.0,
                    vec![first, second],
                ));
            }
        }
        let refs: Vec<&Entry> = entries.iter().collect();
        let cells = cells(&refs);
        assert_eq!(cells.len(), 3);
        let spin = &cells[2];
        assert_eq!(spin.policy, "spin:4ms");
        assert_eq!(spin.overlap_excluded, 1);
        assert_eq!(spin.weighted_speedup.len(), 6);
        let to_linux = spin.vs_linux_paired.expect("pairs");
        assert!((to_linux.median - 1.25).abs() < 1e-9, "{to_linux:?}");
        assert!(to_linux.excludes(1.0), "six equal pairs: {to_linux:?}");
        let to_fair = spin.vs_fair_paired.expect("pairs");
        assert!((to_fair.median - 1.25 / 0.8).abs() < 1e-9, "{to_fair:?}");
        assert_eq!(cells[1].vs_fair_paired, None, "rr is its own fair");
        assert_eq!(cells[1].overlap_excluded, 0);
        assert_eq!(spin.short_alone, 0);
        let t = table(&cells);
        assert!(t.contains("left out: 1 shared runs"), "{t}");
        assert!(t.contains("÷ linux 1.25 [1.25..1.25] (6 pairs"), "{t}");
    }

    /// Four repetitions, linux 200 ms and spin:4ms 160 ms shared: spin's
    /// shared run of repetition 1 and linux's alone run of repetition 3 were
    /// disturbed (20% stolen). Both repetitions leave spin's figures, only
    /// the second leaves linux's, and the table says why.
    #[test]
    fn disturbed_runs_are_left_out_with_their_reason() {
        let stolen = |mut e: Entry| {
            e.disturbed = true;
            for r in &mut e.records {
                r.interference = Some(smplab_record::interference::Interference {
                    steal_fraction: 0.2,
                    ..Default::default()
                });
            }
            e
        };
        let mut entries = Vec::new();
        for rep in 0..4 {
            for (policy, shared_ms) in [("linux", 200), ("spin:4ms", 160)] {
                let alone = Entry::new(point(policy, 1, rep), Status::Ok, 0.0, vec![ran(0, 100)]);
                let shared = Entry::new(
                    point(policy, 2, rep),
                    Status::Ok,
                    0.0,
                    vec![ran(0, shared_ms), ran(0, shared_ms)],
                );
                let linux = policy == "linux";
                entries.push(if linux && rep == 3 {
                    stolen(alone)
                } else {
                    alone
                });
                entries.push(if !linux && rep == 1 {
                    stolen(shared)
                } else {
                    shared
                });
            }
        }
        let refs: Vec<&Entry> = entries.iter().collect();
        let cells = cells(&refs);
        let (linux, spin) = (&cells[0], &cells[1]);
        assert_eq!(linux.disturbed.len(), 1, "{:?}", linux.disturbed);
        assert_eq!(linux.weighted_speedup.len(), 3);
        assert_eq!(spin.disturbed.len(), 2, "{:?}", spin.disturbed);
        assert_eq!(spin.weighted_speedup.len(), 2);
        assert!(spin
            .weighted_speedup
            .iter()
            .all(|w| (w - 1.25).abs() < 1e-9));
        assert_eq!(spin.pairs_linux.len(), 2);
        assert!(
            spin.disturbed[0].starts_with("rep 1: the shared run"),
            "{:?}",
            spin.disturbed
        );
        assert!(
            spin.disturbed[1].starts_with("rep 3: linux's alone"),
            "{:?}",
            spin.disturbed
        );
        let t = table(&cells);
        assert!(
            t.contains("left out: 2 repetitions the host's steal disturbed"),
            "{t}"
        );
        assert!(t.contains("stole 20.0% of its CPU time"), "{t}");
    }
}
