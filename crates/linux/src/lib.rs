//! smplab-linux: runs a host program in a Linux guest and returns a typed
//! result (docs/linux.md). It builds an initramfs from the program, its
//! libraries and the user's files around a small static init (`init/init.c`,
//! built by `build.rs`), boots it on smplab-vmm ([`run_on_smplab_vmm`]) or
//! QEMU ([`run_on_qemu`]), and reads the init's result from the console. The
//! same init runs the program natively ([`run_native`]), so all three time
//! the same interval.

pub mod error;
pub mod initramfs;
pub mod kernel;
pub mod libs;
pub mod marker;
mod native;
pub mod qemu;
mod qmp;
mod tempdir;
pub mod vmm;

pub use error::{LinuxError, PanicEnd};
pub use kernel::{find_kernel, KernelKind};
pub use native::run_native;
pub use qemu::{run_on_qemu, QemuAccel, QemuMachine, QemuOptions};
pub use vmm::run_on_smplab_vmm;

use smplab_record::linux::LinuxSection;
use smplab_record::vmm::VmmSection;
use smplab_vmm::{Irqchip, Placement, SyncMode};
use std::path::PathBuf;
use std::time::Duration;

/// The init (a static x86-64 executable), `/init` in every initramfs.
pub static INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/smplab-linux-init"));

/// The kernel command line unless one is given: the console on the first
/// serial port, a panic reboots at once (so a panicked guest ends instead of
/// hanging until the timeout), the init is `/init`.
pub const DEFAULT_CMDLINE: &str = "console=ttyS0 quiet panic=-1 rdinit=/init";

/// A program to run: its argument vector (`argv[0]` a path, or a name looked
/// up on `PATH`), environment and the files it needs besides its libraries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Program {
    pub argv: Vec<String>,
    /// The program's environment (only this; `PATH` is added when missing,
    /// [`initramfs::DEFAULT_PATH`]).
    pub env: Vec<(String, String)>,
    /// Files and directories put into the initramfs at the same absolute path.
    pub include: Vec<PathBuf>,
}

impl Program {
    /// A program from its argument vector.
    pub fn new<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Program {
            argv: argv.into_iter().map(Into::into).collect(),
            ..Program::default()
        }
    }
}

/// How to run the Linux guest.
#[derive(Debug, Clone)]
pub struct LinuxGuestConfig {
    /// A bzImage or a PVH ELF ([`find_kernel`] finds a default).
    pub kernel: PathBuf,
    /// An initramfs to boot instead of one built from the program; the
    /// program must be in it. The init's part is appended to it.
    pub initrd: Option<PathBuf>,
    /// The kernel command line ([`DEFAULT_CMDLINE`]).
    pub cmdline: String,
    pub vcpus: u32,
    pub mem_bytes: u64,
    /// smplab-vmm only: device synchronization.
    pub sync: SyncMode,
    /// smplab-vmm only (QEMU takes only the in-kernel one here).
    pub irqchip: Irqchip,
    /// smplab-vmm: the vCPU threads; QEMU: the whole process, on every CPU
    /// the placement names.
    pub placement: Placement,
    /// smplab-vmm only: the I/O thread's CPU (iothread and hybrid sync).
    pub io_cpu: Option<usize>,
    /// The whole run, boot to power-off.
    pub timeout: Duration,
    pub qemu: QemuOptions,
}

impl LinuxGuestConfig {
    /// Defaults: 1 vCPU, 512 MiB, fine sync, the in-kernel irqchip,
    /// floating, 300 s.
    pub fn new(kernel: PathBuf) -> Self {
        LinuxGuestConfig {
            kernel,
            initrd: None,
            cmdline: DEFAULT_CMDLINE.to_string(),
            vcpus: 1,
            mem_bytes: 512 << 20,
            sync: SyncMode::Fine,
            irqchip: Irqchip::Kernel,
            placement: Placement::Floating,
            io_cpu: None,
            timeout: Duration::from_secs(300),
            qemu: QemuOptions::default(),
        }
    }
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct LinuxRun {
    pub section: LinuxSection,
    /// smplab-vmm's own section (exits, KVM binary stats, the window).
    pub vmm: Option<VmmSection>,
    /// The guest's console (native: empty).
    pub console: String,
}

/// Nanoseconds of a duration, saturating.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The section's common part from the init's result.
pub(crate) fn section_from(
    host: smplab_record::linux::LinuxHost,
    program: &Program,
    exec_path: &str,
    result: &marker::InitResult,
) -> LinuxSection {
    LinuxSection {
        host,
        argv: program.argv.clone(),
        program_path: exec_path.to_string(),
        wall_ns: result.wall_ns,
        exit: result.exit(),
        output_bytes: result.output_bytes,
        output_tail: result.tail_text(),
        cpus_online: Some(result.cpus()),
        ..LinuxSection::default()
    }
}
