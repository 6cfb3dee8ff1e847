//! The one place the execute path calls smplab-linux (crates/linux): its
//! initramfs builder and init, run on smplab-vmm, on QEMU and natively.
//! The requests here are what the run configuration resolved to; the
//! results become records.

use smplab_linux::{LinuxError, LinuxGuestConfig, LinuxRun, Program};
use smplab_record::config::{Irqchip, Placement, QemuMachine, SyncMode};
use smplab_record::{Executor, Outcome, RunRecord, WorkloadInfo};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A run of a real program in a Linux guest.
pub(crate) struct Guest<'a> {
    pub argv: &'a [String],
    pub kernel: PathBuf,
    pub initrd: Option<&'a Path>,
    pub include: &'a [PathBuf],
    pub vcpus: u32,
    pub mem_bytes: u64,
    pub placement: &'a Placement,
    pub host_cores: usize,
    pub timeout: Duration,
    pub show_console: bool,
}

/// Why a real program's run failed: smplab-linux's typed error.
pub type LinuxRunError = LinuxError;

fn program(argv: &[String], include: &[PathBuf]) -> Program {
    let mut p = Program::new(argv.iter().cloned());
    p.include = include.to_vec();
    p
}

/// smplab-vmm pins vCPU i to the i-th CPU; QEMU confines its process to
/// the set (the same reading as the smplab guest's placement).
fn placement(p: &Placement, host_cores: usize, qemu: bool) -> smplab_vmm::Placement {
    match p.cpus(host_cores) {
        None => smplab_vmm::Placement::Floating,
        Some(cpus) if qemu => smplab_vmm::Placement::Confined(cpus),
        Some(cpus) => smplab_vmm::Placement::Pinned(cpus),
    }
}

fn guest_config(req: &Guest, qemu: bool) -> LinuxGuestConfig {
    let mut cfg = LinuxGuestConfig::new(req.kernel.clone());
    cfg.initrd = req.initrd.map(Path::to_path_buf);
    cfg.vcpus = req.vcpus;
    cfg.mem_bytes = req.mem_bytes;
    cfg.placement = placement(req.placement, req.host_cores, qemu);
    cfg.timeout = req.timeout;
    cfg
}

/// The record of a finished run: the init's wall time of the program is
/// the record's wall time; a program that did not exit 0 is a failed run.
fn record(executor: Executor, run: LinuxRun, show_console: bool) -> RunRecord {
    if show_console && !run.console.is_empty() {
        eprint!("{}", run.console);
    }
    let mut r = RunRecord::new(executor, WorkloadInfo::for_program(&run.section.argv));
    r.timing.wall_ns = run.section.wall_ns;
    r.timing.total_ns = run.section.total_ns;
    if !run.section.exit.success() {
        r.outcome = Outcome::Failed {
            reason: format!(
                "`{}` ended with status {}; its output ended: {}",
                run.section.argv.first().cloned().unwrap_or_default(),
                run.section.exit.shell_status(),
                run.section.output_tail.trim()
            ),
        };
    }
    r.vmm = run.vmm;
    r.linux = Some(run.section);
    r
}

pub(crate) fn run_native(argv: &[String], timeout: Duration) -> Result<RunRecord, LinuxRunError> {
    let run = smplab_linux::run_native(&program(argv, &[]), timeout)?;
    Ok(record(Executor::Native, run, false))
}

pub(crate) fn run_on_smplab_vmm(
    req: &Guest,
    sync: SyncMode,
    irqchip: Irqchip,
) -> Result<RunRecord, LinuxRunError> {
    let mut cfg = guest_config(req, false);
    cfg.sync = sync;
    cfg.irqchip = irqchip;
    let run = smplab_linux::run_on_smplab_vmm(&cfg, &program(req.argv, req.include))?;
    Ok(record(Executor::Linux, run, req.show_console))
}

pub(crate) fn run_on_qemu(
    req: &Guest,
    machine: QemuMachine,
    qemu: Option<PathBuf>,
) -> Result<RunRecord, LinuxRunError> {
    let mut cfg = guest_config(req, true);
    cfg.qemu.binary = qemu;
    cfg.qemu.machine = match machine {
        QemuMachine::Microvm => smplab_linux::QemuMachine::Microvm,
        QemuMachine::Q35 => smplab_linux::QemuMachine::Q35,
    };
    let run = smplab_linux::run_on_qemu(&cfg, &program(req.argv, req.include))?;
    Ok(record(Executor::LinuxQemu, run, req.show_console))
}
