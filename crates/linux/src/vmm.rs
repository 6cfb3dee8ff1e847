//! The Linux guest on smplab-vmm: the kernel and initramfs through
//! `smplab_vmm::run_vm`, the console into a file (so an error still has its
//! tail), boot-to-init from the workload window's "ready", which the init
//! writes first.

use crate::error::{LinuxError, CONSOLE_TAIL_LINES};
use crate::marker::{console_tail, guest_outcome, panicked};
use crate::tempdir::TempDir;
use crate::{initramfs, kernel, nanos, section_from, LinuxGuestConfig, LinuxRun, Program};
use smplab_record::linux::LinuxHost;
use smplab_record::window::monotonic_ns;
use smplab_vmm::{ConsoleSink, KernelImage, VmConfig, VmmError};

/// Run `program` in a Linux guest on smplab-vmm.
pub fn run_on_smplab_vmm(
    cfg: &LinuxGuestConfig,
    program: &Program,
) -> Result<LinuxRun, LinuxError> {
    let name = program.argv.first().ok_or(LinuxError::NoProgram)?.clone();
    let (kernel, _kind) = kernel::read_kernel(&cfg.kernel)?;
    let initramfs = initramfs::build(program, cfg.initrd.as_deref())?;
    let initramfs_bytes = u64::try_from(initramfs.bytes.len()).unwrap_or(u64::MAX);
    let dir = TempDir::new("vmm")?;
    let console_path = dir.path().join("console");
    let mut vm = VmConfig::new(KernelImage::Bytes(kernel));
    vm.cmdline = cfg.cmdline.clone();
    // The initramfs as PVH module 0, where a PVH kernel takes it
    // (docs/guest-abi.md).
    vm.modules = vec![initramfs.bytes];
    vm.vcpus = cfg.vcpus;
    vm.mem_bytes = cfg.mem_bytes;
    vm.sync = cfg.sync;
    vm.irqchip = cfg.irqchip;
    vm.placement = cfg.placement.clone();
    vm.io_cpu = cfg.io_cpu;
    vm.timeout = Some(cfg.timeout);
    vm.console = ConsoleSink::File(console_path.clone());
    let started_ns = monotonic_ns();
    let outcome = smplab_vmm::run_vm(&vm);
    let console =
        String::from_utf8_lossy(&std::fs::read(&console_path).unwrap_or_default()).into_owned();
    let tail = || console_tail(&console, CONSOLE_TAIL_LINES);
    let run = match outcome {
        Ok(run) => run,
        Err(_) if panicked(&console) => return Err(LinuxError::GuestPanic { console: tail() }),
        Err(VmmError::Timeout { .. }) => {
            return Err(LinuxError::Timeout {
                seconds: cfg.timeout.as_secs_f64(),
                console: tail(),
            })
        }
        Err(VmmError::GuestCrash { reason, .. }) => {
            return Err(LinuxError::GuestCrash {
                reason,
                console: tail(),
            })
        }
        Err(e) => return Err(LinuxError::Vmm(e)),
    };
    let result = guest_outcome(&console, &name, cfg.vcpus)?;
    let mut section = section_from(LinuxHost::SmplabVmm, program, &initramfs.exec_path, &result);
    section.boot_to_init_ns = run
        .section
        .window
        .as_ref()
        .map(|w| w.ready_ns.saturating_sub(started_ns));
    section.guest_init_clock_ns = Some(result.init_clock_ns);
    section.total_ns = Some(nanos(run.wall));
    section.initramfs_bytes = Some(initramfs_bytes);
    Ok(LinuxRun {
        section,
        vmm: Some(run.section),
        console,
    })
}
