//! The one way a workload runs: `execute(program, config)`. `smplab run`, the
//! lab's sweeps, diagnosis, calibration and the demo all come through here,
//! so availability checks, host checks and the record's configuration are
//! done once, the same for every caller.

use crate::availability::{kvm_unavailable, on_path};

pub mod host;
pub mod sim;

use smplab_record::config::{GuestSettings, RunConfig};
use smplab_record::{exit, Executor, RunRecord, WorkloadInfo};
use smplab_workload::Program;
use std::path::PathBuf;
use std::time::Duration;

/// How a run is carried out, as opposed to what runs: nothing here changes
/// the measurement, so none of it is part of a configuration's identity.
#[derive(Debug, Clone)]
pub struct RunLimits {
    /// Give up on a run after this long (the guest watchdog fires at 90%).
    pub timeout: Duration,
    /// Show the guest console (vm, qemu).
    pub show_console: bool,
    /// QEMU binary; `None`: `qemu-system-x86_64` on PATH.
    pub qemu_binary: Option<PathBuf>,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            timeout: Duration::from_secs(300),
            show_console: false,
            qemu_binary: None,
        }
    }
}

impl RunLimits {
    fn qemu(&self) -> String {
        self.qemu_binary
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "qemu-system-x86_64".into())
    }
}

/// Why a run produced no record.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// The executor cannot run on this host at all.
    #[error("{executor} runs are not possible here: {reason}")]
    Unavailable {
        executor: Executor,
        reason: String,
        status: i32,
    },
    /// The configuration is not valid (it should have been caught earlier,
    /// at the flag or the spec).
    #[error("invalid configuration: {}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<smplab_record::config::ConfigError>),
    /// The host lacks what the configuration names (CPUs).
    #[error("this host cannot provide it: {0}")]
    Host(#[from] smplab_record::cpus::CpuListError),
    #[error(transparent)]
    Native(#[from] smplab_native::NativeError),
    /// A guest run failed; `vm` is its index when several ran at once.
    #[error("{}{source}", .vm.map(|v| format!("VM {v}: ")).unwrap_or_default())]
    Guest {
        vm: Option<u32>,
        source: smplab_guest::GuestError,
    },
    #[error(transparent)]
    Sim(#[from] sim::SimRunError),
    #[error("VM thread {0} panicked (a bug in smplab: please report it)")]
    Panicked(u32),
    /// A host run (`vm` with a host policy) could not start.
    #[error(transparent)]
    HostRun(#[from] crate::host::HostRunError),
    /// One VM of a host run failed (the others ran to their end).
    #[error("VM {vm} of the host run: {error}")]
    HostVm { vm: usize, error: String },
}

impl ExecuteError {
    /// The process exit status (`smplab_record::exit`).
    pub fn exit_status(&self) -> i32 {
        match self {
            ExecuteError::Unavailable { status, .. } => *status,
            ExecuteError::Invalid(_) => exit::BAD_INPUT,
            ExecuteError::Host(_) => exit::RESOURCE_LIMIT,
            ExecuteError::Native(e) => e.exit_status(),
            ExecuteError::Guest { source, .. } => source.exit_status(),
            ExecuteError::Sim(e) => e.exit_status(),
            ExecuteError::Panicked(_) => exit::INTERNAL,
            ExecuteError::HostRun(e) => e.exit_status(),
            ExecuteError::HostVm { .. } => exit::RUN_FAILED,
        }
    }

    /// Whether the executor is missing here (a sweep stores the point as
    /// skipped, to be tried again), rather than the run having failed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ExecuteError::Unavailable { .. })
    }
}

/// `Err` when `executor` cannot run on this host at all: the one check of
/// KVM and QEMU every caller uses.
pub fn availability(executor: Executor, limits: &RunLimits) -> Result<(), ExecuteError> {
    let unavailable = |reason: String, status: i32| ExecuteError::Unavailable {
        executor,
        reason,
        status,
    };
    match executor {
        Executor::Native | Executor::Sim => Ok(()),
        Executor::Vm => {
            kvm_unavailable().map_or(Ok(()), |r| Err(unavailable(r, exit::KVM_UNAVAILABLE)))
        }
        Executor::Qemu => {
            if let Some(r) = kvm_unavailable() {
                return Err(unavailable(r, exit::KVM_UNAVAILABLE));
            }
            if on_path(&limits.qemu()) {
                Ok(())
            } else {
                Err(unavailable(
                    format!(
                        "QEMU ({}) is not installed: apt-get install qemu-system-x86",
                        limits.qemu()
                    ),
                    exit::EXTERNAL_TOOL,
                ))
            }
        }
    }
}

fn host_cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Run `program` as `config` says: one record per VM (one for native). Every
/// record carries `config` as given (`RunRecord::run`).
pub fn execute(
    program: &Program,
    info: &WorkloadInfo,
    config: &RunConfig,
    limits: &RunLimits,
) -> Result<Vec<RunRecord>, ExecuteError> {
    config
        .validate(Some(program.total_threads()))
        .map_err(ExecuteError::Invalid)?;
    availability(config.executor(), limits)?;
    config.check_host_cpus(host_cores())?;
    let mut records = match config {
        RunConfig::Native(n) => {
            let opts = smplab_native::NativeOptions {
                pin: n.placement.cpus(host_cores()),
                timeout: Some(limits.timeout),
                io_thread_cpus: n.io_thread_cpus.0.clone(),
            };
            vec![smplab_native::run(program, info.clone(), &opts)?]
        }
        RunConfig::Vm(v) if v.host_policy.is_some() => {
            host::run(program, info, v, limits, host_cores())?
        }
        RunConfig::Vm(v) => {
            let mut opts = guest_options(&v.guest, limits);
            opts.sync = v.sync;
            opts.irqchip = v.irqchip;
            opts.vmm_halt_poll = Duration::from_nanos(v.vmm_halt_poll_ns);
            run_guests(program, info, &v.guest, &opts, Executor::Vm)?
        }
        RunConfig::Qemu(q) => {
            let opts = guest_options(&q.guest, limits);
            run_guests(program, info, &q.guest, &opts, Executor::Qemu)?
        }
        RunConfig::Sim(s) => sim::run(program, info, s, limits.timeout)?,
    };
    for r in &mut records {
        r.run = Some(config.clone());
    }
    Ok(records)
}

fn guest_options(g: &GuestSettings, limits: &RunLimits) -> smplab_guest::VmRunOptions {
    smplab_guest::VmRunOptions {
        vcpus: g.vcpus,
        idle: g.idle,
        pin: g.placement.cpus(host_cores()),
        timeout: limits.timeout,
        show_console: limits.show_console,
        timer_hz: g.timer_hz,
        mem_bytes: g.mem_bytes,
        qemu_binary: limits.qemu_binary.clone(),
        irq_affinity: g.irq_affinity.clone(),
        io_thread_cpus: g.io_thread_cpus.0.clone(),
        ..Default::default()
    }
}

/// One guest, or K at once on their own threads (seed 000's consolidation
/// runs).
///
/// smplab-vmm VMs share one [`smplab_guest::StartGate`]: each guest boots,
/// creates its workers and waits until every sibling is ready, so the K
/// workloads start together instead of one boot time apart. QEMU has no such
/// gate (its guests release their own workers, and their windows are on each
/// guest's own TSC, so their overlap cannot be computed either): the record
/// says `start_gate = "none"`. After the runs, each record gets
/// `window_overlap`, the fraction of the union of the K workload windows
/// during which all K ran ([`smplab_record::overlap_of_records`]), or
/// `window_overlap_error` when it cannot be computed.
fn run_guests(
    program: &Program,
    info: &WorkloadInfo,
    g: &GuestSettings,
    opts: &smplab_guest::VmRunOptions,
    executor: Executor,
) -> Result<Vec<RunRecord>, ExecuteError> {
    let gate = (g.vms > 1 && executor == Executor::Vm)
        .then(|| smplab_guest::StartGate::new(g.vms as usize, gate_max_wait(opts.timeout)));
    let one = |vm: u32| -> Result<RunRecord, ExecuteError> {
        let r = match executor {
            Executor::Qemu => smplab_guest::run_qemu(program, info.clone(), opts),
            _ => {
                let mut opts = opts.clone();
                opts.start_gate = gate.clone();
                smplab_guest::run_vm(program, info.clone(), &opts)
            }
        };
        let mut r = r.map_err(|source| ExecuteError::Guest {
            vm: (g.vms > 1).then_some(vm),
            source,
        })?;
        r.set_config("vm_index", vm);
        Ok(r)
    };
    if g.vms <= 1 {
        return Ok(vec![one(0)?]);
    }
    let mut records = std::thread::scope(|s| {
        let handles: Vec<_> = (0..g.vms).map(|vm| s.spawn(move || one(vm))).collect();
        handles
            .into_iter()
            .zip(0..)
            .map(|(h, vm)| h.join().unwrap_or(Err(ExecuteError::Panicked(vm))))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let overlap = smplab_record::overlap_of_records(&records);
    for r in &mut records {
        if gate.is_none() {
            r.set_config("start_gate", "none");
        }
        match &overlap {
            Ok(x) => r.set_config("window_overlap", *x),
            Err(e) => r.set_config("window_overlap_error", e.to_string()),
        }
    }
    Ok(records)
}

/// How long the first VM at the start gate waits for its siblings: their
/// boots run in parallel, so a quarter of the run's time limit is far more
/// than any boot spread and still leaves the run most of its time.
fn gate_max_wait(timeout: Duration) -> Duration {
    timeout / 4
}
