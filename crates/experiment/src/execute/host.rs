//! The lab's executor for host runs: a `vm` run configuration with a host
//! policy (`VmSettings::host_policy`) runs its `vms` VMs of the workload in
//! one smplab-vmm process under that policy, exactly as `smplab host` runs a
//! spec of `count` identical VMs. Each VM gives one record, every record
//! carries the host's section (`RunRecord::host_run`), so sweeps, the
//! results store and reports take host runs like any other.

use crate::execute::{ExecuteError, RunLimits};
use crate::host::{run_host, HostSpec, HostVm, VmOutcome};
use smplab_record::config::VmSettings;
use smplab_record::{RunRecord, WorkloadInfo};
use smplab_vmm::host::Sampling;
use smplab_workload::Program;
use std::time::Duration;

/// The host spec a host-run configuration stands for: `vms` identical VMs
/// on the placement's CPUs (all of this host's under `float`), sampling at
/// `host_sample_ns` (smplab-vmm's default interval unless set) with spin
/// detection, pinned and tuned as `host_pinned` and `host_tuner` say.
pub fn spec_of(
    program: &Program,
    info: &WorkloadInfo,
    v: &VmSettings,
    limits: &RunLimits,
    host_cores: usize,
) -> HostSpec {
    let vm = HostVm {
        workload: info.name.clone(),
        program: program.clone(),
        info: info.clone(),
        vcpus: v.guest.vcpus,
        sync: v.sync,
        idle: v.guest.idle,
        cmdline: String::new(),
        irq_affinity: v.guest.irq_affinity.clone(),
    };
    HostSpec {
        cpus: v
            .guest
            .placement
            .cpus(host_cores)
            .unwrap_or_else(|| (0..host_cores.max(1)).collect()),
        policy: v.host_policy.unwrap_or_default(),
        sampling: Sampling {
            interval: v
                .host_sample_ns
                .map_or(Sampling::default().interval, Duration::from_nanos),
            ..Sampling::default()
        },
        timeout: limits.timeout,
        // `linux` pins its vCPU threads unless told not to; a user-level
        // policy places vCPUs itself, floating unless told to pin them.
        pin: v.host_pinned.unwrap_or(true),
        tune: v.host_tuner,
        vcpu_affinity: if v.host_pinned == Some(true) && spec_policy_is_user_level(v) {
            smplab_policy::tune::VcpuAffinity::Pinned
        } else {
            smplab_policy::tune::VcpuAffinity::Floating
        },
        vms: vec![vm; v.guest.vms.max(1) as usize],
    }
}

/// Run the host configuration; one record per VM, in VM order.
pub fn run(
    program: &Program,
    info: &WorkloadInfo,
    v: &VmSettings,
    limits: &RunLimits,
    host_cores: usize,
) -> Result<Vec<RunRecord>, ExecuteError> {
    let spec = spec_of(program, info, v, limits, host_cores);
    let run = run_host(&spec, None, limits.show_console)?;
    let mut records = Vec::with_capacity(run.records.len());
    for outcome in run.records {
        match outcome {
            VmOutcome::Ok(mut r) => {
                r.host_run = Some(run.host.clone());
                records.push(*r);
            }
            VmOutcome::Failed { vm, error } => return Err(ExecuteError::HostVm { vm, error }),
        }
    }
    Ok(records)
}

fn spec_policy_is_user_level(v: &VmSettings) -> bool {
    v.host_policy.is_some_and(|h| h.is_user_level())
}
