//! smplab sim: a discrete-event simulator of SMP virtual machines on shared and
//! overcommitted hosts.
//!
//! It runs the same workload model as the native and VM executors
//! (`smplab_workload::Program`) on a modeled host — pCPUs in LLC domains, a
//! host scheduler, VMs with vCPUs, a guest OS, and VMM mechanisms costed from a
//! [`Platform`] profile — and produces the shared [`RunRecord`], one per VM,
//! including the same model run without virtualization (`native_wall_ns`).
//! See docs/sim.md for the model, the profiles and the command;
//! docs/sim-reproduction.md for the reproduction targets.
//!
//! Comments cite the papers whose figures the model reproduces by author,
//! section and figure:
//! - Ding & Shan, "Diagnosing Virtualization Overhead for Multi-threaded
//!   Computation on Multicore Platforms";
//! - Kulkarni & Kulkarni, "Benchmarking Multiprocessing Parameters in a
//!   Virtualized Multi-Core Environment";
//! - Wells, Chakraborty & Sohi ("Wells et al."), "Hardware Support for Spin
//!   Management in Overcommitted Virtual Machines";
//! - Partheymüller, "Adding SMP Support to a User-Level VMM" (the Seoul VMM).
//!
//! The host's scheduling has two owners (`smplab_record::config::Decider`).
//! `linux` and `fair` are the simulator's model of the host kernel
//! (per-pCPU run queues, vruntime, load balancing). The user-level policies
//! — `rr`, `gang`, `partition`, `spin`, ..., each optionally with
//! `+safepoint:GRACE` — are `smplab_policy::Scheduler`'s decisions, the same
//! code smplab-vmm's real scheduler runs, which the simulator drives with
//! simulated events (halts and wakes, PLE/SDB exits, samples, slice ends).
//!
//! ```no_run
//! use smplab_sim::{simulate, Platform, Scenario, VmSpec};
//! let vm = VmSpec::from_workload("dedup", Some(16), 0.1, 16).unwrap();
//! let s = Scenario::new(Platform::builtin("kvm2015").unwrap(), 16, vec![vm]);
//! let records = simulate(&s).unwrap();
//! println!("{}", records[0].to_json_pretty());
//! ```

pub mod amdahl;
pub mod breakdown;
mod code;
mod engine;
mod error;
mod events;
pub mod platform;
mod record;
pub mod scenario;
pub mod spec;

pub use error::SimError;
pub use events::bare_heap;
pub use platform::Platform;
pub use scenario::{
    BadPlacementRange, DeviceSync, Devices, Idle, Placement, Ple, Policy, PolicyKind, Scenario,
    Sdb, SyncMode, Topology, VmSpec,
};
pub use smplab_record::RunRecord;

use smplab_record::config::Decider;

use rayon::prelude::*;
use std::time::Instant;

/// Simulate a scenario: one record per VM, in VM order.
pub fn simulate(s: &Scenario) -> Result<Vec<RunRecord>, SimError> {
    simulate_inner(s, None).map(|(records, _)| records)
}

/// Simulate the scenario of a spec file (`smplab sim --spec FILE.toml`):
/// one record per VM; errors in the file name file:line:col.
pub fn simulate_spec(path: &std::path::Path) -> Result<Vec<RunRecord>, SimError> {
    simulate(&spec::load(path)?)
}

/// What the tuner of [`simulate_tuned`] did.
pub use engine::tune::{TuneLog, VmDecision};

/// Simulate a scenario under Kulkarni & Kulkarni's adaptive tuner (`smplab_policy::tune`):
/// one record per VM and every decision the tuner took, in time order. The
/// scenario's settings are where the tuner starts; it needs the `fair`
/// policy on the whole host.
pub fn simulate_tuned(
    s: &Scenario,
    tuner: &smplab_policy::tune::TunerConfig,
) -> Result<(Vec<RunRecord>, TuneLog), SimError> {
    // The tuner sets the slice and the affinities of the simulator's model of
    // the host kernel (engine/tune.rs); a user-level policy keeps its own.
    match s.policy.kind.decider() {
        Decider::HostKernel | Decider::SimulatedKernel => simulate_inner(s, Some(tuner)),
        Decider::UserLevel => Err(SimError::Scenario(format!(
            "the tuner sets time slices and affinity itself: use the fair-share policy (fair or linux), not {}",
            s.policy
        ))),
    }
}

fn simulate_inner(
    s: &Scenario,
    tuner: Option<&smplab_policy::tune::TunerConfig>,
) -> Result<(Vec<RunRecord>, TuneLog), SimError> {
    let started = Instant::now();
    let mut sim = engine::Sim::new(s)?;
    if let Some(t) = tuner {
        sim.enable_tuner(t);
    }
    let out = sim.run(s.horizon_ns)?;
    let log = sim.tune_log();
    let host_seconds = started.elapsed().as_secs_f64();
    let native = if s.virtualized && s.native_reference {
        native_walls(s)?
    } else {
        vec![None; s.vms.len()]
    };
    Ok((record::records(s, &out, &native, host_seconds), log))
}

/// Ding & Shan's weighted speedup: the sum over instances of (wall time of one
/// instance alone) / (its wall time here). 1.0 means the same throughput as
/// one VM alone; `records` are the VMs of one multi-VM run.
pub fn weighted_speedup(alone_wall_ns: u64, records: &[RunRecord]) -> f64 {
    records
        .iter()
        .filter(|r| r.timing.wall_ns > 0)
        .map(|r| alone_wall_ns as f64 / r.timing.wall_ns as f64)
        .sum()
}

/// What a run costs and how the host's time was spent, without records.
#[derive(Debug, Clone, PartialEq)]
pub struct RawRun {
    /// Events processed (stale events discarded by lazy deletion excluded).
    pub events: u64,
    /// Stale events popped and discarded.
    pub stale_events: u64,
    /// Simulated end time.
    pub end_ns: u64,
    /// Per pCPU: busy time (summed over causes) and idle time; each pair
    /// sums to `end_ns` (exact accounting).
    pub pcpu_totals: Vec<(u64, u64)>,
}

/// Which event loop runs a scenario. Both give the same results
/// (tests/partitioned.rs); they differ in speed on large hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One queue for the whole host, events in simulated-time order.
    Sequential,
    /// One LLC domain after another between the host's load balances
    /// (engine/partition.rs), where every VM is confined to one LLC domain
    /// and the kernel model schedules without the tuner; sequential
    /// otherwise. The default.
    Partitioned,
}

/// The number of partitions `Engine::Partitioned` runs the scenario in
/// (`None`: it runs sequentially).
pub fn partitions(s: &Scenario) -> Result<Option<u32>, SimError> {
    let sim = engine::Sim::new(s)?;
    Ok(sim.partition_count())
}

/// Simulate a scenario with the engine chosen: one record per VM.
pub fn simulate_with(s: &Scenario, engine: Engine) -> Result<Vec<RunRecord>, SimError> {
    let started = Instant::now();
    let mut sim = engine::Sim::new(s)?;
    let out = sim.run_with(s.horizon_ns, engine)?;
    let host_seconds = started.elapsed().as_secs_f64();
    let native = if s.virtualized && s.native_reference {
        native_walls(s)?
    } else {
        vec![None; s.vms.len()]
    };
    Ok(record::records(s, &out, &native, host_seconds))
}

/// Run without building records (for benchmarks, the scale check and the
/// accounting tests).
pub fn simulate_raw(s: &Scenario) -> Result<RawRun, SimError> {
    simulate_raw_with(s, Engine::Partitioned)
}

/// `simulate_raw` with the engine chosen.
pub fn simulate_raw_with(s: &Scenario, engine: Engine) -> Result<RawRun, SimError> {
    let mut sim = engine::Sim::new(s)?;
    let out = sim.run_with(s.horizon_ns, engine)?;
    Ok(RawRun {
        events: out.events,
        stale_events: out.stale_events,
        end_ns: out.end_ns,
        pcpu_totals: out.pcpu_totals,
    })
}

/// The bare-metal reference of one VM: wall time, cores, time by cause.
#[derive(Debug, Clone)]
pub(crate) struct NativeRef {
    pub wall_ns: u64,
    pub cores: u32,
    pub by_cause: [u64; breakdown::N],
}

/// The same workload on bare metal: one core per vCPU (at most the host's
/// pCPUs), no VMM costs. Identical VMs share one reference run.
fn native_walls(s: &Scenario) -> Result<Vec<Option<NativeRef>>, SimError> {
    let mut cache: Vec<(usize, NativeRef)> = Vec::new();
    let mut out = Vec::with_capacity(s.vms.len());
    for (i, vm) in s.vms.iter().enumerate() {
        let cores = vm.vcpus.min(s.pcpus);
        if let Some((_, w)) = cache.iter().find(|(j, _)| {
            let o = &s.vms[*j];
            o.vcpus.min(s.pcpus) == cores && o.program == vm.program
        }) {
            out.push(Some(w.clone()));
            continue;
        }
        let mut spec = vm.clone();
        spec.vcpus = cores;
        spec.idle = Idle::Hlt;
        spec.placement = Placement::Float;
        spec.ple = Ple::Off;
        spec.apicv = false;
        spec.sdb = None;
        spec.devices = None;
        let n = Scenario {
            platform: s.platform.clone(),
            pcpus: s.pcpus,
            topology: s.topology,
            policy: Policy::fair(),
            seed: s.seed,
            vms: vec![spec],
            virtualized: false,
            horizon_ns: s.horizon_ns,
            native_reference: false,
        };
        let mut sim = engine::Sim::new(&n)?;
        let r = sim.run(n.horizon_ns)?;
        let w = NativeRef {
            wall_ns: r.vms[0].wall_ns,
            cores,
            by_cause: r.vms[0].by_cause,
        };
        cache.push((i, w.clone()));
        out.push(Some(w));
    }
    Ok(out)
}

/// Run many scenarios in parallel over the local cores (rayon), with a
/// progress bar on stderr when `progress` is set. Results in input order.
pub fn sweep(scenarios: &[Scenario], progress: bool) -> Vec<Result<Vec<RunRecord>, SimError>> {
    let bar = if progress {
        let b = indicatif::ProgressBar::new(scenarios.len() as u64);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} sim sweep [{bar:40}] {pos}/{len} scenarios, {elapsed} elapsed, eta {eta}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let out = scenarios
        .par_iter()
        .map(|s| {
            let r = simulate(s);
            bar.inc(1);
            r
        })
        .collect();
    bar.finish_and_clear();
    out
}

/// A simulated time or count computed in floating point, as whole units.
///
/// Float-to-integer `as` saturates at the bounds and maps NaN to 0, which is
/// the clamp wanted: a negative or NaN model output means "none", and an
/// overflowing one cannot occur for the bounded inputs specs allow.
pub(crate) fn units_from_f64(x: f64) -> u64 {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let units = x as u64;
    units
}
