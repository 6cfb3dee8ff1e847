//! The Linux guest on smplab-vmm: the kernel and initramfs through
//! `smplab_vmm::run_vm`, the console into a file (so an error still has its
//! tail), boot-to-init from the workload window's "ready", which the init
//! writes first.

use crate::error::{LinuxError, PanicEnd, CONSOLE_TAIL_LINES};
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
    vm.initrd = Some(initramfs.bytes);
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
        Err(e) if panicked(&console) => {
            let end = match e {
                VmmError::Timeout { .. } => PanicEnd::StillRunning,
                VmmError::GuestCrash { reason, .. } => PanicEnd::Crashed(reason),
                other => PanicEnd::Crashed(other.to_string()),
            };
            return Err(LinuxError::GuestPanic {
                end,
                console: tail(),
            });
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_record::exit;
    use std::path::PathBuf;

    #[test]
    fn bad_input_is_refused_before_a_vm_is_made() {
        let dir = std::env::temp_dir().join(format!("smplab-linux-v-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("junk"), b"junk").unwrap();
        let mut cfg = LinuxGuestConfig::new(dir.join("junk"));
        let e = run_on_smplab_vmm(&cfg, &Program::new(["/bin/true"])).unwrap_err();
        assert!(matches!(e, LinuxError::BadKernel { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_KERNEL);

        let mut bz = vec![0u8; 0x300];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        std::fs::write(dir.join("bz"), &bz).unwrap();
        cfg.kernel = dir.join("bz");
        cfg.initrd = Some(PathBuf::from("/no/such/initramfs"));
        let e = run_on_smplab_vmm(&cfg, &Program::new(["/bin/true"])).unwrap_err();
        assert!(matches!(e, LinuxError::InitrdRead { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INITRAMFS);
        assert!(e.to_string().contains("/no/such/initramfs"), "{e}");

        cfg.initrd = None;
        let e = run_on_smplab_vmm(&cfg, &Program::new(["smplab-no-such-program-xyz"])).unwrap_err();
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
