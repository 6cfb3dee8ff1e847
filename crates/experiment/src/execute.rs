//! The one way a workload runs: `execute(program, config)`. `smplab run`, the
//! lab's sweeps, diagnosis, calibration and the demo all come through here,
//! so availability checks, host checks and the record's configuration are
//! done once, the same for every caller.

mod guest;
pub mod host;
pub mod linux;
mod native;
pub mod sim;

pub use linux::{execute_program, KernelError, ProgramError, RealProgram};

use smplab_record::config::RunConfig;
use smplab_record::interference::HostCounters;
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
            timeout: smplab_record::config::DEFAULT_TIMEOUT.duration(),
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
    /// A workload model given to an executor that runs real programs only.
    #[error("--executor {0} runs a real program, not a workload model: give it after `--` (e.g. `smplab run --executor {0} -- pigz -p 2 -k FILE`; a spec: program = [...])")]
    ProgramsOnly(Executor),
    /// A real program given to an executor that runs workload models only.
    #[error("--executor {0} runs workload models, not real programs: use --executor linux, linux-qemu or native for a program (or model it: smplab trace, then smplab trace model)")]
    ModelsOnly(Executor),
    #[error(transparent)]
    Program(#[from] ProgramError),
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Linux(#[from] linux::LinuxRunError),
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
            ExecuteError::ProgramsOnly(_) | ExecuteError::ModelsOnly(_) => exit::BAD_INPUT,
            ExecuteError::Program(e) => e.exit_status(),
            ExecuteError::Kernel(_) => exit::BAD_INPUT,
            ExecuteError::Linux(e) => e.exit_status(),
        }
    }

    /// Whether the executor is missing here (a sweep stores the point as
    /// skipped, to be tried again), rather than the run having failed.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ExecuteError::Unavailable { .. })
    }
}

/// One executor's way of running a workload, implemented on its settings
/// type, one file each (`native.rs`, `guest.rs` for vm and qemu, `sim.rs`),
/// and registered in [`executor_of`] and [`availability`].
pub trait Execute {
    /// Run `program` with these settings: one record per VM (one for
    /// native). The configuration is valid and the executor available.
    fn run(
        &self,
        program: &Program,
        info: &WorkloadInfo,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<Vec<RunRecord>, ExecuteError>;
}

/// The registry: the executor a configuration runs a model on (`None`:
/// it runs real programs only, `linux::execute_program`). The match is
/// exhaustive, so an executor that is not registered does not compile.
fn executor_of(config: &RunConfig) -> Option<&dyn Execute> {
    match config {
        RunConfig::Native(s) => Some(s),
        RunConfig::Vm(s) => Some(s),
        RunConfig::Qemu(s) => Some(s),
        RunConfig::Sim(s) => Some(s),
        RunConfig::Linux(_) | RunConfig::LinuxQemu(_) => None,
    }
}

/// `Err` when `executor` cannot run on this host at all: the one check of
/// KVM and QEMU every caller uses.
pub fn availability(executor: Executor, limits: &RunLimits) -> Result<(), ExecuteError> {
    let check = match executor {
        Executor::Native => native::availability,
        Executor::Vm => guest::vm_availability,
        Executor::Qemu => guest::qemu_availability,
        Executor::Sim => sim::availability,
        Executor::Linux => linux::linux_availability,
        Executor::LinuxQemu => linux::linux_qemu_availability,
    };
    check(limits).map_err(|(reason, status)| ExecuteError::Unavailable {
        executor,
        reason,
        status,
    })
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
    let executor = executor_of(config).ok_or(ExecuteError::ProgramsOnly(config.executor()))?;
    config
        .validate(Some(program.total_threads()))
        .map_err(ExecuteError::Invalid)?;
    availability(config.executor(), limits)?;
    let cores = host_cores();
    config.check_host_cpus(cores)?;
    // What other tenants take from the host during a measured run (the
    // simulator's time is modelled, not measured).
    let measured = config.executor() != Executor::Sim;
    let start = measured.then(HostCounters::read).flatten();
    let mut records = executor.run(program, info, limits, cores)?;
    let interference = start.zip(HostCounters::read()).map(|(a, b)| a.until(&b));
    for r in &mut records {
        r.run = Some(config.clone());
        if r.interference.is_none() {
            r.interference = interference;
        }
    }
    Ok(records)
}
