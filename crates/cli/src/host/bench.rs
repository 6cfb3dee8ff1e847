//! `smplab host bench`: seed 000's weighted speedup of two 2-vCPU VMs sharing
//! the host CPUs, for every policy against `linux`, on the spinlock-like,
//! streamcluster-like and dedup-like profiles (docs/host.md).
//!
//! Per repetition and profile: one VM alone under `linux` on the same host
//! CPUs (its "alone" wall), then both VMs together under each policy. Weighted
//! speedup = Σ over VMs of alone ÷ shared workload wall (1.0: the host's
//! CPUs are used as well as by the VMs one after the other). Each policy's
//! figure is also divided by `linux`'s of the same repetition. A policy's
//! sampling overhead is the alone wall under that policy ÷ the alone wall
//! under `linux` (one VM, nothing to schedule but the sampling).

use clap::Args;
use serde::Serialize;
use smplab_experiment::host::{run_host, weighted_speedup, HostRun};
use smplab_experiment::host::{HostSpec, HostVm};
use smplab_record::config::{Decider, HostPolicy, SimSettings};
use smplab_record::exit;
use smplab_vmm::host::Sampling;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workload profiles (built-in names or files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spinlock,streamcluster,dedup"
    )]
    pub profiles: Vec<String>,
    /// Policies besides `linux` (always measured: the baseline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rr:4ms,gang:4ms,partition,spin:4ms,rr:4ms+safepoint:1ms"
    )]
    pub policies: Vec<String>,
    /// Workload scale (small: guest runs are slow here).
    #[arg(long, default_value_t = 0.05)]
    pub scale: f64,
    /// Workload threads per VM (default: 2, one per vCPU).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Repetitions (the spread is their min..max).
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// Host CPUs.
    #[arg(long, default_value = "0-1")]
    pub cpus: String,
    /// Scheduler sampling interval.
    #[arg(long, default_value = "1ms")]
    pub sample: String,
    /// Simulator platform profile for the `sim` column: a built-in name or a
    /// profile file (e.g. the one `smplab calibrate` wrote for this host).
    #[arg(long, default_value = smplab_record::config::DEFAULT_PLATFORM)]
    pub platform: String,
    /// Limit per run, seconds.
    #[arg(long, default_value_t = 240)]
    pub timeout_s: u64,
    /// Write every figure and run as JSON here.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// One policy on one profile.
#[derive(Debug, Serialize, Default)]
pub struct Cell {
    pub profile: String,
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
    pub spin_detection: Vec<smplab_vmm::host::SpinDetection>,
    pub failures: Vec<String>,
    /// The simulator's weighted speedup for the same configuration (default
    /// platform profile or `--platform`; user-level policies are
    /// smplab-policy's decisions driven by the simulator).
    pub sim_weighted_speedup: Option<f64>,
    pub sim_error: Option<String>,
}

/// The simulator's settings for `policy` on 2-vCPU VMs and `pcpus` pCPUs.
/// `linux` is the simulator's model of the host kernel (fair share at the
/// platform's slice); every user-level policy is smplab-policy's, as here,
/// driven by the simulator (`spin` with its software spin detector).
fn sim_settings(policy: HostPolicy, pcpus: usize, vms: u32, platform: &str) -> SimSettings {
    let mut s = SimSettings::new(2, platform);
    s.pcpus = u32::try_from(pcpus).ok();
    s.vms = vms;
    s.policy = match policy.kind.decider() {
        Decider::HostKernel | Decider::SimulatedKernel => HostPolicy::fair(),
        Decider::UserLevel => policy,
    };
    s
}

/// Σ alone/shared in the simulator (alone: one VM under its `linux`).
fn sim_prediction(
    vm: &HostVm,
    policy: HostPolicy,
    pcpus: usize,
    timeout: Duration,
    platform: &str,
) -> Result<f64, String> {
    let wall = |s: &SimSettings| -> Result<Vec<f64>, String> {
        let recs = smplab_experiment::execute::sim::run(&vm.program, &vm.info, s, timeout)
            .map_err(|e| e.to_string())?;
        #[allow(clippy::cast_precision_loss)] // seconds
        Ok(recs.iter().map(|r| r.timing.wall_ns as f64 / 1e9).collect())
    };
    let linux = HostPolicy::parse("linux").unwrap_or_default();
    let alone = wall(&sim_settings(linux, pcpus, 1, platform))?;
    let shared = wall(&sim_settings(policy, pcpus, 2, platform))?;
    let a = alone.first().copied().unwrap_or(f64::NAN);
    weighted_speedup(&[a, a], &shared).ok_or_else(|| "no shared walls".to_string())
}

fn spec_for(
    profile: &str,
    args: &BenchArgs,
    policy: HostPolicy,
    cpus: &[usize],
) -> Result<HostSpec, String> {
    let vm = HostVm::two_vcpus(profile, args.threads, args.scale, Default::default())?;
    let sampling = Sampling {
        interval: Duration::from_nanos(
            smplab_record::config::parse_duration(&args.sample).map_err(|e| e.to_string())?,
        ),
        ..Sampling::default()
    };
    Ok(HostSpec {
        cpus: cpus.to_vec(),
        policy,
        sampling,
        timeout: Duration::from_secs(args.timeout_s),
        pin: true,
        tune: false,
        vcpu_affinity: smplab_policy::tune::VcpuAffinity::Floating,
        vms: vec![vm.clone(), vm],
    })
}

fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn spread(v: &[f64]) -> String {
    let s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return "n/a".into();
    }
    let lo = s.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.2} [{lo:.2}..{hi:.2}]", median(&s))
}

fn sum_walls(run: &HostRun) -> Option<Vec<f64>> {
    run.walls_s().into_iter().collect()
}

/// Run the bench; the process exit status.
pub fn bench(args: &BenchArgs) -> i32 {
    let (cpus, policies) = match parse_cpus_and_policies(args) {
        Ok(parsed) => parsed,
        Err(status) => return status,
    };
    let mut cells: Vec<Cell> = Vec::new();
    for profile in &args.profiles {
        let mut row: Vec<Cell> = policies
            .iter()
            .map(|p| Cell {
                profile: profile.clone(),
                policy: p.to_string(),
                ..Cell::default()
            })
            .collect();
        for rep in 0..args.reps {
            if let Err(status) = run_rep(profile, rep, args, &policies, &cpus, &mut row) {
                return status;
            }
        }
        add_sim_predictions(&mut row, &policies, profile, args, &cpus);
        cells.extend(row);
    }
    print_table(&cells);
    if let Some(out) = &args.output {
        let json = serde_json::to_string_pretty(&cells).unwrap_or_default();
        if let Err(e) = std::fs::write(out, json) {
            exit::report_error(format!("cannot write {}: {e}", out.display()));
            return exit::INTERNAL;
        }
    }
    if cells.iter().any(|c| !c.failures.is_empty()) {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

/// `--cpus` and the policies to compare, `linux` (the baseline) first; on a
/// bad value, the error is reported and the exit status returned.
fn parse_cpus_and_policies(args: &BenchArgs) -> Result<(Vec<usize>, Vec<HostPolicy>), i32> {
    let cpus = smplab_record::cpus::parse_cpu_list(&args.cpus).map_err(|e| {
        exit::report_error(format!("--cpus: {e}"));
        exit::BAD_INPUT
    })?;
    let mut policies = vec![HostPolicy::parse("linux").unwrap_or_default()];
    for p in &args.policies {
        let policy = p.parse::<HostPolicy>().map_err(|e| {
            exit::report_error(format!("--policies: {e}"));
            exit::BAD_INPUT
        })?;
        policies.push(policy);
    }
    Ok((cpus, policies))
}

/// Repetition `rep` of `profile` under every policy, in order, into `row`
/// (one cell per policy): each policy's alone run, then the shared run, with
/// the linux alone wall and weighted speedup of this repetition as the
/// references. A run that cannot start ends the bench: its exit status.
fn run_rep(
    profile: &str,
    rep: u32,
    args: &BenchArgs,
    policies: &[HostPolicy],
    cpus: &[usize],
    row: &mut [Cell],
) -> Result<(), i32> {
    let mut alone_linux = f64::NAN;
    let mut linux_ws = f64::NAN;
    for (policy, cell) in policies.iter().zip(row.iter_mut()) {
        let spec = spec_for(profile, args, *policy, cpus).map_err(|e| {
            exit::report_error(format!("{profile}: {e}"));
            exit::BAD_INPUT
        })?;
        let alone = match run_host(&spec, Some(&[0]), false) {
            Ok(r) => sum_walls(&r).and_then(|w| w.first().copied()),
            Err(e) => {
                exit::report_error(&e);
                return Err(e.exit_status());
            }
        };
        let Some(alone) = alone else {
            cell.failures
                .push(format!("rep {rep}: the alone run failed"));
            continue;
        };
        if !policy.is_user_level() {
            alone_linux = alone;
        }
        cell.sampling_overhead.push(alone / alone_linux);
        let shared = match run_host(&spec, None, false) {
            Ok(r) => r,
            Err(e) => {
                exit::report_error(&e);
                return Err(e.exit_status());
            }
        };
        for o in &shared.records {
            if let smplab_experiment::host::VmOutcome::Failed { vm, error } = o {
                cell.failures.push(format!("rep {rep} VM {vm}: {error}"));
            }
        }
        let Some(walls) = sum_walls(&shared) else {
            continue;
        };
        // The alone wall under linux is the reference for every policy.
        let ws = weighted_speedup(&[alone_linux, alone_linux], &walls).unwrap_or(f64::NAN);
        if !policy.is_user_level() {
            linux_ws = ws;
        }
        cell.weighted_speedup.push(ws);
        cell.vs_linux.push(ws / linux_ws);
        record_host_figures(cell, &shared);
        eprintln!(
            "{profile} rep {rep} {policy}: alone {alone:.3} s, shared {walls:.3?} s, weighted speedup {ws:.2}"
        );
    }
    Ok(())
}

/// The host scheduler's and the guests' figures of one shared run: spins
/// detected, samples, yields, preemptions, steal and guest spin iterations.
fn record_host_figures(cell: &mut Cell, shared: &HostRun) {
    let h = &shared.host;
    cell.spins_detected.push(h.spin_detection.spins_detected);
    cell.spin_detection.push(h.spin_detection.clone());
    cell.samples.push(h.spin_detection.samples);
    cell.yields.push(h.vms.iter().map(|v| v.yields).sum());
    cell.preemptions
        .push(h.vms.iter().map(|v| v.preemptions).sum());
    #[allow(clippy::cast_precision_loss)] // ms
    cell.steal_ms
        .push(h.vms.iter().map(|v| v.steal_ns).sum::<u64>() as f64 / 1e6);
    cell.guest_spin_iterations.push(
        shared
            .records
            .iter()
            .filter_map(|o| o.record())
            .map(|r| r.counters.spin_iterations)
            .sum(),
    );
}

/// The simulator's weighted speedup for each policy's cell of a profile.
fn add_sim_predictions(
    row: &mut [Cell],
    policies: &[HostPolicy],
    profile: &str,
    args: &BenchArgs,
    cpus: &[usize],
) {
    for (policy, cell) in policies.iter().zip(row.iter_mut()) {
        if let Ok(spec) = spec_for(profile, args, *policy, cpus) {
            match sim_prediction(
                &spec.vms[0],
                *policy,
                cpus.len(),
                spec.timeout,
                &args.platform,
            ) {
                Ok(ws) => cell.sim_weighted_speedup = Some(ws),
                Err(e) => cell.sim_error = Some(e),
            }
        }
    }
}

fn print_table(cells: &[Cell]) {
    println!(
        "{:<14} {:<24} {:>22} {:>22} {:>22} {:>10} {:>8}",
        "profile",
        "policy",
        "weighted speedup",
        "vs linux",
        "sampling overhead",
        "spins/samples",
        "yields"
    );
    for c in cells {
        let spins: u64 = c.spins_detected.iter().sum();
        let samples: u64 = c.samples.iter().sum();
        let yields: u64 = c.yields.iter().sum();
        println!(
            "{:<14} {:<24} {:>22} {:>22} {:>22} {:>6}/{:<6} {:>6} {:>6}",
            c.profile,
            c.policy,
            spread(&c.weighted_speedup),
            spread(&c.vs_linux),
            spread(&c.sampling_overhead),
            spins,
            samples,
            yields,
            c.sim_weighted_speedup
                .map_or_else(|| "n/a".to_string(), |w| format!("{w:.2}"))
        );
        let mut t = smplab_record::hostsched::SpinTruth::default();
        for d in &c.spin_detection {
            t.add(&d.truth);
        }
        if t.samples > 0 {
            println!(
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
            println!("    simulator: {e}");
        }
        for f in &c.failures {
            println!("    failed: {f}");
        }
    }
}
