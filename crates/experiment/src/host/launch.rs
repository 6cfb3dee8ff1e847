//! Running a host spec: K VMs of the smplab guest in this process, each on its
//! own thread, their vCPUs under one [`HostScheduler`].

use super::spec::HostSpec;
use serde::Serialize;
use smplab_policy::tune::VcpuAffinity;
use smplab_record::config::IrqAffinity;
use smplab_record::RunRecord;
use smplab_vmm::host::{HostError, HostReport, HostScheduler, HostSlot};

/// What a host run produced: one result per VM (a VM that failed does not
/// stop the others) and the host section.
#[derive(Debug, Serialize)]
pub struct HostRun {
    pub records: Vec<VmOutcome>,
    pub host: HostReport,
    /// The tuner's decisions (`tune = true`), as printed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<String>,
}

/// One VM's record, or why it has none.
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VmOutcome {
    Ok(Box<RunRecord>),
    Failed { vm: usize, error: String },
}

impl VmOutcome {
    pub fn record(&self) -> Option<&RunRecord> {
        match self {
            VmOutcome::Ok(r) => Some(r),
            VmOutcome::Failed { .. } => None,
        }
    }
}

impl HostRun {
    /// The workload wall time (s) of each VM, `None` for a failed one: from
    /// the shared start gate's "go" to the guest's "done" on the host clock
    /// (so time a VM's vCPUs waited for a pCPU before its first worker ran
    /// counts), else the guest's own wall.
    pub fn walls_s(&self) -> Vec<Option<f64>> {
        self.records
            .iter()
            .map(|o| o.record().map(workload_wall_s))
            .collect()
    }

    /// Every VM finished with a record.
    pub fn all_ok(&self) -> bool {
        self.records.iter().all(|o| o.record().is_some())
    }
}

/// Go to done on the host clock, else the guest's wall (s).
pub fn workload_wall_s(r: &RunRecord) -> f64 {
    let ns = match &r.timing.window {
        Some(w) if w.end_ns > w.start_ns => w.end_ns - w.start_ns,
        _ => r.timing.wall_ns,
    };
    #[allow(clippy::cast_precision_loss)] // seconds
    let s = ns as f64 / 1e9;
    s
}

/// Why a host run could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostRunError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("KVM is not usable here: {0}")]
    KvmUnavailable(String),
    /// The spec names a host CPU this process may not use (a run-time
    /// check: a spec may be run on another host).
    #[error("host CPU {cpu} is not among the CPUs this process may use {allowed:?}")]
    NoSuchCpu { cpu: usize, allowed: Vec<usize> },
}

impl HostRunError {
    pub fn exit_status(&self) -> i32 {
        match self {
            HostRunError::KvmUnavailable(_) => smplab_record::exit::KVM_UNAVAILABLE,
            HostRunError::NoSuchCpu { .. } => smplab_record::exit::RESOURCE_LIMIT,
            HostRunError::Host(HostError::Thread(_)) => smplab_record::exit::INTERNAL,
            HostRunError::Host(_) => smplab_record::exit::BAD_INPUT,
        }
    }
}

/// `Err` when `spec` names a host CPU this process may not use.
pub fn check_cpus(spec: &HostSpec) -> Result<(), HostRunError> {
    let allowed = smplab_vmm::placement::allowed_cpus();
    match spec.cpus.iter().find(|c| !allowed.contains(c)) {
        Some(&cpu) => Err(HostRunError::NoSuchCpu { cpu, allowed }),
        None => Ok(()),
    }
}

/// Run every VM of `spec` at once; only the VMs in `only` (all if `None`),
/// which is how a VM's "alone" wall is measured on the same host CPUs.
pub fn run_host(
    spec: &HostSpec,
    only: Option<&[usize]>,
    show_console: bool,
) -> Result<HostRun, HostRunError> {
    if let Some(why) = crate::availability::kvm_unavailable() {
        return Err(HostRunError::KvmUnavailable(why));
    }
    check_cpus(spec)?;
    let chosen: Vec<usize> = match only {
        Some(list) => list
            .iter()
            .copied()
            .filter(|&i| i < spec.vms.len())
            .collect(),
        None => (0..spec.vms.len()).collect(),
    };
    let per_vm: Vec<u32> = chosen.iter().map(|&i| spec.vms[i].vcpus).collect();
    let scheduler = HostScheduler::new(&spec.policy, &per_vm, &spec.cpus, spec.sampling)?;
    // The spec's vCPU affinity, in force before the first grant (`running`
    // interrupt routing is set up by smplab_guest::run_vm).
    for slot in 0..chosen.len() {
        if spec.vcpu_affinity != VcpuAffinity::Floating {
            scheduler.set_vm_affinity(slot, spec.vcpu_affinity)?;
        }
    }
    let start: Vec<(VcpuAffinity, IrqAffinity)> = chosen
        .iter()
        .map(|&vm| (spec.vcpu_affinity, spec.vms[vm].irq_affinity.clone()))
        .collect();
    let gate = smplab_guest::StartGate::new(chosen.len(), spec.timeout / 4);
    let ticker = scheduler.start()?;
    let stop_tuner = std::sync::atomic::AtomicBool::new(false);
    let mut decisions = Vec::new();
    let records = std::thread::scope(|s| {
        let tuner = spec.tune.then(|| {
            let (scheduler, per_vm, start, stop) = (&scheduler, &per_vm, &start, &stop_tuner);
            let long = spec
                .policy
                .time_slice_ns
                .unwrap_or(smplab_policy::DEFAULT_SLICE_NS);
            let interval = spec.sampling.interval;
            s.spawn(move || super::tuned::tune_host(scheduler, per_vm, start, interval, long, stop))
        });
        let handles: Vec<_> = chosen
            .iter()
            .enumerate()
            .map(|(slot, &vm)| {
                let scheduler = scheduler.clone();
                let gate = gate.clone();
                s.spawn(move || {
                    let outcome = run_one(spec, vm, slot, scheduler.clone(), gate, show_console);
                    // A VM that crashed or timed out leaves at once: its
                    // pCPUs go to the others.
                    scheduler.vm_finished(slot);
                    outcome
                })
            })
            .collect();
        let records = handles
            .into_iter()
            .zip(&chosen)
            .map(|(h, &vm)| {
                h.join().unwrap_or_else(|_| VmOutcome::Failed {
                    vm,
                    error: "the VM's thread panicked (a bug in smplab)".into(),
                })
            })
            .collect::<Vec<_>>();
        stop_tuner.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = tuner {
            decisions = t.join().unwrap_or_default();
        }
        records
    });
    let host = scheduler.finish(Some(ticker));
    Ok(HostRun {
        records,
        host,
        decisions,
    })
}

fn run_one(
    spec: &HostSpec,
    vm: usize,
    slot: usize,
    scheduler: HostScheduler,
    gate: smplab_guest::StartGate,
    show_console: bool,
) -> VmOutcome {
    let v = &spec.vms[vm];
    let opts = smplab_guest::VmRunOptions {
        vcpus: v.vcpus,
        sync: v.sync,
        idle: v.idle,
        // Under `linux` vCPU i runs on cpus[i % n] (Ding & Shan's pinning), or
        // anywhere with `pin = false`; a user-level policy re-pins each
        // thread to the CPU it is granted.
        pin: (spec.pin || spec.policy.is_user_level()).then(|| spec.cpus.clone()),
        irq_affinity: v.irq_affinity.clone(),
        timeout: spec.timeout,
        show_console,
        start_gate: Some(gate),
        extra_cmdline: v.cmdline.clone(),
        host: Some(HostSlot {
            scheduler,
            vm: slot,
        }),
        ..Default::default()
    };
    match smplab_guest::run_vm(&v.program, v.info.clone(), &opts) {
        Ok(mut r) => {
            r.set_config("vm_index", vm);
            r.set_config("host_policy", spec.policy.to_string());
            r.set_config("host_cpus", spec.cpus.clone());
            r.set_config("host_pin", spec.pin);
            r.set_config("irq_affinity", v.irq_affinity.to_string());
            if spec.policy.is_user_level() {
                r.set_config("vcpu_affinity", spec.vcpu_affinity.to_string());
            }
            VmOutcome::Ok(Box::new(r))
        }
        Err(e) => VmOutcome::Failed {
            vm,
            error: e.to_string(),
        },
    }
}

/// Σ over VMs of alone ÷ shared wall time (Ding & Shan's weighted speedup).
pub fn weighted_speedup(alone_s: &[f64], shared_s: &[f64]) -> Option<f64> {
    if alone_s.len() != shared_s.len() || shared_s.iter().any(|&s| s.is_nan() || s <= 0.0) {
        return None;
    }
    Some(alone_s.iter().zip(shared_s).map(|(a, s)| a / s).sum())
}
