//! `smplab tune host-matrix`: the seed 001 matrix on the real multi-VM host
//! (`smplab host`, docs/host.md) at this machine's scale: 2 VMs of 2 vCPUs
//! on 2 host CPUs (overcommit 2), per profile:
//!
//! - vCPU affinity × time slice: `linux` with the vCPU threads pinned
//!   (vCPU i on host CPU i) or floating, the host kernel's own slice; and the
//!   user-level `rr:SLICE` scheduler at 1, 4 and 16 ms, floating (it grants
//!   any free CPU) or, at 1 and 4 ms, pinned (the scheduler's per-vCPU
//!   affinity: vCPU i of both VMs on host CPU i).
//! - interrupt affinity (profiles with `io` ops only): vCPU 0, vCPU 1,
//!   balanced, and under `rr` `running` (the scheduler keeps the guest's
//!   routing page pointed at the VM's running vCPUs: vBalance).
//!
//! Repetitions are interleaved (all configurations of rep 0, then rep 1...).
//! A configuration the host refuses is listed as failed with the reason.

use clap::Args;
use smplab_analysis::tune::winners::{winners_table, Cell};
use smplab_experiment::host::run_host;
use smplab_experiment::host::spec::{HostSpec, HostVm};
use smplab_policy::tune::VcpuAffinity;
use smplab_record::config::{HostPolicy, IrqAffinity};
use smplab_record::exit::{self, report_error};
use smplab_record::outln;
use smplab_vmm::host::Sampling;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct HostMatrixArgs {
    /// Profiles: cache-sensitive, resched-IPI-heavy, I/O-heavy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "streamcluster,dedup,oltp"
    )]
    pub workloads: Vec<String>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Workload scale.
    #[arg(long, default_value_t = 0.5)]
    pub scale: f64,
    /// Host CPUs the VMs share.
    #[arg(long, default_value = "0-1")]
    pub cpus: String,
    /// Per-run timeout, seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout_s: u64,
    /// Write the cells (every run's throughput) as JSON here, for `smplab
    /// tune winners --host FILE`.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

/// One configuration of the host matrix.
#[derive(Debug, Clone)]
struct HostConfig {
    policy: HostPolicy,
    pin: bool,
    irq: IrqAffinity,
    /// User-level policies: the scheduler's vCPU affinity.
    affinity: VcpuAffinity,
    /// Seed 001's tuner sets the slice at run time (starting from the
    /// policy's slice, its long one).
    tune: bool,
}

impl HostConfig {
    fn label(&self) -> String {
        if self.tune {
            let long = self
                .policy
                .time_slice_ns
                .unwrap_or(smplab_policy::DEFAULT_SLICE_NS);
            return format!("tuner from {} us, floating, irq {}", long / 1000, self.irq);
        }
        let slice = match (self.policy.is_user_level(), self.policy.time_slice_ns) {
            (false, _) => "slice linux".to_string(),
            (true, Some(ns)) => format!("slice {} us", ns / 1000),
            (true, None) => format!("slice {} us", smplab_policy::DEFAULT_SLICE_NS / 1000),
        };
        let pinned = if self.policy.is_user_level() {
            self.affinity == VcpuAffinity::Pinned
        } else {
            self.pin
        };
        let aff = if pinned { "pinned" } else { "floating" };
        format!("{slice}, {aff}, irq {}", self.irq)
    }
}

fn configs(io: bool) -> Vec<HostConfig> {
    // (policy, linux pin, user-level affinity)
    let mut policies: Vec<(HostPolicy, bool, VcpuAffinity)> = Vec::new();
    for (text, pin, affinity) in [
        ("linux", true, VcpuAffinity::Floating),
        ("linux", false, VcpuAffinity::Floating),
        ("rr:1ms", false, VcpuAffinity::Floating),
        ("rr:4ms", false, VcpuAffinity::Floating),
        ("rr:16ms", false, VcpuAffinity::Floating),
        ("rr:1ms", false, VcpuAffinity::Pinned),
        ("rr:4ms", false, VcpuAffinity::Pinned),
    ] {
        if let Ok(p) = text.parse::<HostPolicy>() {
            policies.push((p, pin, affinity));
        }
    }
    let irqs = |user_level: bool| -> Vec<IrqAffinity> {
        if !io {
            return vec![IrqAffinity::default()];
        }
        let mut list = vec!["0", "1", "balanced"];
        if user_level {
            list.push("running");
        }
        list.iter().filter_map(|s| s.parse().ok()).collect()
    };
    let mut out = Vec::new();
    for (policy, pin, affinity) in &policies {
        for irq in irqs(policy.is_user_level()) {
            out.push(HostConfig {
                policy: *policy,
                pin: *pin,
                irq,
                affinity: *affinity,
                tune: false,
            });
        }
    }
    // The tuner from the default user-level slice and from the longest.
    for text in ["rr:4ms", "rr:16ms"] {
        if let Ok(policy) = text.parse::<HostPolicy>() {
            out.push(HostConfig {
                policy,
                pin: false,
                irq: IrqAffinity::default(),
                affinity: VcpuAffinity::Floating,
                tune: true,
            });
        }
    }
    out
}

fn spec_for(
    a: &HostMatrixArgs,
    cpus: &[usize],
    workload: &str,
    c: &HostConfig,
) -> Result<HostSpec, String> {
    let vm = HostVm::two_vcpus(workload, 2, a.scale, c.irq.clone())?;
    Ok(HostSpec {
        cpus: cpus.to_vec(),
        policy: c.policy,
        sampling: Sampling::default(),
        timeout: Duration::from_secs(a.timeout_s),
        pin: c.pin,
        tune: c.tune,
        vcpu_affinity: c.affinity,
        vms: vec![vm.clone(), vm],
    })
}

/// One host run's throughput (VM runs per second, summed over its VMs), or
/// why it failed: the first failed VM's first error line.
fn throughput(spec: &HostSpec) -> Result<f64, String> {
    match run_host(spec, None, false) {
        Ok(run) if run.all_ok() => Ok(run.walls_s().iter().flatten().map(|s| 1.0 / s).sum()),
        Ok(run) => Err(run
            .records
            .iter()
            .find_map(|o| match o {
                smplab_experiment::host::VmOutcome::Failed { error, .. } => {
                    Some(error.lines().next().unwrap_or("").to_string())
                }
                smplab_experiment::host::VmOutcome::Ok(_) => None,
            })
            .unwrap_or_default()),
        Err(e) => Err(e.to_string()),
    }
}

pub fn host_matrix(a: &HostMatrixArgs) -> i32 {
    let cpus = match smplab_record::cpus::parse_cpu_list(&a.cpus) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            report_error("--cpus: name at least one host CPU");
            return exit::BAD_INPUT;
        }
        Err(e) => {
            report_error(format!("--cpus: {e}"));
            return exit::BAD_INPUT;
        }
    };
    if !(a.scale.is_finite() && a.scale > 0.0) {
        report_error("--scale: give a positive scale");
        return exit::BAD_INPUT;
    }
    if let Some(why) = smplab_experiment::availability::kvm_unavailable() {
        report_error(format!("KVM is not usable here: {why}"));
        return exit::KVM_UNAVAILABLE;
    }
    let mut plan: Vec<(String, HostConfig)> = Vec::new();
    for w in &a.workloads {
        let program = smplab_workload::Source::resolve(w)
            .map_err(|e| e.to_string())
            .and_then(|s| s.instantiate(Some(2), a.scale).map_err(|e| e.to_string()));
        let io = match program {
            Ok(p) => p.uses_io(),
            Err(e) => {
                report_error(format!("workload {w}: {e}"));
                return exit::BAD_INPUT;
            }
        };
        for c in configs(io) {
            plan.push((w.clone(), c));
        }
    }
    let mut cells: Vec<Cell> = plan
        .iter()
        .map(|(w, c)| Cell {
            executor: "host".into(),
            workload: w.clone(),
            setting: c.label(),
            throughput: Vec::new(),
        })
        .collect();
    let mut failures: Vec<(String, String)> = Vec::new();
    for rep in 0..a.reps {
        for ((w, c), cell) in plan.iter().zip(&mut cells) {
            let label = format!("{w} {} (rep {rep})", c.label());
            let spec = match spec_for(a, &cpus, w, c) {
                Ok(s) => s,
                Err(e) => {
                    failures.push((label, e));
                    continue;
                }
            };
            match throughput(&spec) {
                Ok(t) => {
                    eprintln!("{label}: {t:.2} VM runs/s");
                    cell.throughput.push(t);
                }
                Err(why) => failures.push((label, why)),
            }
        }
    }
    cells.retain(|c| !c.throughput.is_empty());
    outln!("{}", winners_table(&cells));
    if !failures.is_empty() {
        outln!("{} runs failed:", failures.len());
        for (label, why) in failures.iter().take(12) {
            outln!("  {label}: {why}");
        }
    }
    if let Some(path) = &a.out {
        match serde_json::to_string_pretty(&cells) {
            Ok(text) => {
                if let Err(e) = std::fs::write(path, text) {
                    report_error(format!("cannot write {}: {e}", path.display()));
                    return exit::RUN_FAILED;
                }
            }
            Err(e) => {
                report_error(format!("cannot encode the cells: {e}"));
                return exit::INTERNAL;
            }
        }
    }
    if failures.is_empty() {
        exit::OK
    } else {
        exit::PARTIAL
    }
}
