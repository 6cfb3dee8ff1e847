//! `smplab tune host-matrix`: the seed 001 matrix on the real multi-VM host
//! (`smplab host`, docs/host.md) at this machine's scale: 2 VMs of 2 vCPUs
//! on 2 host CPUs (overcommit 2), per profile:
//!
//! - vCPU affinity × time slice: `linux` with the vCPU threads pinned
//!   (vCPU i on host CPU i) or floating, the host kernel's own slice; and the
//!   user-level `fair:SLICE` scheduler at 1, 4 and 16 ms, floating (it grants
//!   any free CPU) or, at 1 and 4 ms, pinned (the scheduler's per-vCPU
//!   affinity: vCPU i of both VMs on host CPU i).
//! - interrupt affinity (profiles with `io` ops only): vCPU 0, vCPU 1,
//!   balanced, and under `fair` `running` (the scheduler keeps the guest's
//!   routing page pointed at the VM's running vCPUs: vBalance).
//!
//! Repetitions are interleaved (all configurations of rep 0, then rep 1...).
//! A configuration the host refuses is listed as failed with the reason.

use crate::bench::HostCpus;
use clap::Args;
use smplab_analysis::tune::winners::{winners_table, Cell, HostSetting, Setting};
use smplab_experiment::host::run_host;
use smplab_experiment::host::spec::{HostSpec, HostVm};
use smplab_policy::tune::VcpuAffinity;
use smplab_record::config::{HostPolicy, IrqAffinity, PolicyKind, Timeout};
use smplab_record::exit::{self, report_error};
use smplab_record::{outln, Executor};
use smplab_vmm::host::Sampling;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct HostMatrixArgs {
    /// Workloads: cache-sensitive, resched-IPI-heavy, I/O-heavy.
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
    pub host_cpus: HostCpus,
    /// Time limit of one run (`120s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "120s")]
    pub timeout: Timeout,
    /// Write the cells (every run's throughput) as JSON here, for `smplab
    /// tune winners --host FILE`.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

const MS: u64 = 1_000_000;

fn linux() -> HostPolicy {
    HostPolicy {
        kind: PolicyKind::Linux,
        ..HostPolicy::default()
    }
}

fn fair(slice_ms: u64) -> HostPolicy {
    HostPolicy::fair().with_slice(slice_ms * MS)
}

/// The matrix's settings for a workload with (`io`) or without device
/// interrupts.
fn configs(io: bool) -> Vec<HostSetting> {
    // (policy, vCPU i on host CPU i)
    let policies = [
        (linux(), true),
        (linux(), false),
        (fair(1), false),
        (fair(4), false),
        (fair(16), false),
        (fair(1), true),
        (fair(4), true),
    ];
    let irqs = |user_level: bool| -> Vec<IrqAffinity> {
        if !io {
            return vec![IrqAffinity::default()];
        }
        let mut list = vec![
            IrqAffinity::Vcpus(vec![0]),
            IrqAffinity::Vcpus(vec![1]),
            IrqAffinity::Balanced,
        ];
        if user_level {
            list.push(IrqAffinity::Running);
        }
        list
    };
    let mut out = Vec::new();
    for (policy, pinned) in policies {
        for irq in irqs(policy.is_user_level()) {
            out.push(HostSetting {
                policy,
                pinned,
                irq,
                tuner: false,
            });
        }
    }
    // The tuner from the default user-level slice and from the longest.
    for policy in [fair(4), fair(16)] {
        out.push(HostSetting {
            policy,
            pinned: false,
            irq: IrqAffinity::default(),
            tuner: true,
        });
    }
    out
}

fn spec_for(a: &HostMatrixArgs, workload: &str, c: &HostSetting) -> Result<HostSpec, String> {
    let vm = HostVm::two_vcpus(workload, 2, a.scale, c.irq.clone())?;
    let user_level = c.policy.is_user_level();
    Ok(HostSpec {
        cpus: a.host_cpus.0.clone(),
        policy: c.policy,
        sampling: Sampling::default(),
        timeout: a.timeout.duration(),
        // `linux` pins the vCPU threads; a user-level policy grants CPUs
        // itself, with its own per-vCPU affinity.
        pin: !user_level && c.pinned,
        tune: c.tuner,
        vcpu_affinity: if user_level && c.pinned {
            VcpuAffinity::Pinned
        } else {
            VcpuAffinity::Floating
        },
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
    if !(a.scale.is_finite() && a.scale > 0.0) {
        report_error("--scale: give a positive scale");
        return exit::BAD_INPUT;
    }
    if let Some(why) = smplab_experiment::availability::kvm_unavailable() {
        report_error(format!("KVM is not usable here: {why}"));
        return exit::KVM_UNAVAILABLE;
    }
    let mut plan: Vec<(String, HostSetting)> = Vec::new();
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
            executor: Executor::Vm,
            workload: w.clone(),
            setting: Setting::Host(c.clone()),
            throughput: Vec::new(),
        })
        .collect();
    let mut failures: Vec<(String, String)> = Vec::new();
    for rep in 0..a.reps {
        for ((w, c), cell) in plan.iter().zip(&mut cells) {
            let label = format!("{w} {c} (rep {rep})");
            let spec = match spec_for(a, w, c) {
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
    if let Some(path) = &a.output {
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
