//! Everything that can go wrong running a program in a Linux guest, each with
//! a message that says what to do and its own exit status
//! (`smplab_record::exit`, README.md "Exit statuses").

use smplab_record::exit;
use smplab_vmm::VmmError;
use std::path::PathBuf;

/// How many console lines an error about the guest carries.
pub const CONSOLE_TAIL_LINES: usize = 20;

/// An error of a Linux-guest or native run. No variant comes with a partial
/// result: a run either returns a whole [`crate::LinuxRun`] or one of these.
#[derive(Debug, thiserror::Error)]
pub enum LinuxError {
    #[error("no Linux kernel given and none found ({searched}); pass one (a bzImage such as /boot/vmlinuz-*, or a PVH ELF) or set SMPLAB_LINUX_KERNEL")]
    KernelNotFound { searched: String },
    #[error("cannot read kernel {path}: {source}; check the path and its permissions")]
    KernelRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("kernel {path} is neither a bzImage (no \"HdrS\" at offset 0x202) nor a PVH ELF ({reason}); give a bzImage such as /boot/vmlinuz-*, or a vmlinux with the PVH note")]
    BadKernel { path: PathBuf, reason: String },
    #[error("cannot read initramfs {path}: {source}; check the path, or leave the initramfs out to have one built from the program")]
    InitrdRead {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("initramfs {path} is not a cpio archive ({reason}); give a newc cpio archive, gzip/xz/zstd-compressed or not")]
    BadInitrd { path: PathBuf, reason: String },
    #[error("the program `{program}` is not in initramfs {path}; put it there, give its path inside the initramfs, or leave the initramfs out to have one built")]
    ProgramNotInInitrd { program: String, path: PathBuf },
    #[error("no program given; name the program to run (and its arguments)")]
    NoProgram,
    #[error("program `{name}` not found (not a path to a file and not on PATH); give its path or install it")]
    ProgramNotFound { name: String },
    #[error("program {path} is not executable (no execute permission, or not a file); chmod +x it or give another path")]
    ProgramNotExecutable { path: PathBuf },
    #[error("{program} needs {library}, which the dynamic loader cannot find on this host (it lists it as not found); install it or set LD_LIBRARY_PATH")]
    LibraryNotFound { program: PathBuf, library: String },
    #[error(
        "cannot put {path} into the initramfs: {reason}; check that it exists and is readable"
    )]
    Include { path: PathBuf, reason: String },
    #[error("cannot run the program's ELF interpreter `{tool}` to list its libraries: {source}; is the program built for this machine?")]
    ToolMissing {
        tool: String,
        source: std::io::Error,
    },
    #[error("the program `{program}` could not be started ({reason}); check that it is a program for this machine and that it and its libraries are there (in a guest: in the initramfs)\n{console}")]
    ProgramFailedToStart {
        program: String,
        reason: String,
        console: String,
    },
    #[error("the guest kernel panicked ({end}); its last console lines:\n{console}")]
    GuestPanic { end: PanicEnd, console: String },
    #[error("the guest crashed: {reason}; its last console lines:\n{console}")]
    GuestCrash { reason: String, console: String },
    #[error("the guest was still running after the {seconds:.1} s timeout (it never powered off); raise the timeout or look at its last console lines:\n{console}")]
    Timeout { seconds: f64, console: String },
    #[error("the program was still running natively after the {seconds:.1} s timeout; it and the init were killed. Raise the timeout, or look at the init's output so far:\n{output}")]
    NativeTimeout { seconds: f64, output: String },
    #[error("{requested} vCPUs requested but the guest kernel brought {online} online; use a kernel built with SMP support for {requested} CPUs (CONFIG_NR_CPUS, no nosmp/maxcpus= on the command line) or ask for fewer\n{console}")]
    VcpusOffline {
        requested: u32,
        online: u32,
        console: String,
    },
    #[error("the guest stopped without the init's result ({reason}); the init did not run or did not finish. Its last console lines:\n{console}")]
    NoResult { reason: String, console: String },
    #[error(transparent)]
    Vmm(#[from] VmmError),
    #[error("QEMU (`{binary}`) not found; install qemu-system-x86 or give its path")]
    QemuMissing { binary: String },
    #[error("QEMU failed ({status}): {stderr}")]
    QemuFailed { status: String, stderr: String },
    #[error("QEMU cannot run {what}; use smplab-vmm for it")]
    QemuUnsupported { what: String },
    #[error("QEMU's QMP socket: {reason}")]
    Qmp { reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

/// How the VM of a guest whose kernel panicked ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PanicEnd {
    /// On its own: the kernel's emergency restart after the panic
    /// (`panic=-1`, [`crate::DEFAULT_CMDLINE`]) reset the machine.
    Restarted,
    /// It was still running at the timeout: nothing ended it.
    StillRunning,
    /// The VMM stopped it as crashed (a triple fault, say).
    Crashed(String),
}

impl std::fmt::Display for PanicEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PanicEnd::Restarted => f.write_str("then restarted, which ended the VM"),
            PanicEnd::StillRunning => f.write_str(
                "and was still running at the timeout: give it panic=-1 to end it at once",
            ),
            PanicEnd::Crashed(reason) => write!(f, "then crashed: {reason}"),
        }
    }
}

impl LinuxError {
    /// The process exit status for this error.
    pub fn exit_status(&self) -> i32 {
        match self {
            LinuxError::KernelNotFound { .. } | LinuxError::BadKernel { .. } => exit::BAD_KERNEL,
            LinuxError::KernelRead { .. }
            | LinuxError::NoProgram
            | LinuxError::QemuUnsupported { .. } => exit::BAD_INPUT,
            LinuxError::InitrdRead { .. }
            | LinuxError::BadInitrd { .. }
            | LinuxError::ProgramNotInInitrd { .. }
            | LinuxError::LibraryNotFound { .. }
            | LinuxError::Include { .. } => exit::BAD_INITRAMFS,
            LinuxError::ProgramNotFound { .. }
            | LinuxError::ProgramNotExecutable { .. }
            | LinuxError::ProgramFailedToStart { .. } => exit::PROGRAM_NOT_FOUND,
            LinuxError::GuestPanic { .. } | LinuxError::GuestCrash { .. } => exit::GUEST_CRASH,
            LinuxError::Timeout { .. } | LinuxError::NativeTimeout { .. } => exit::TIMEOUT,
            LinuxError::VcpusOffline { .. } => exit::VCPUS_OFFLINE,
            LinuxError::NoResult { .. } => exit::NO_RESULT,
            LinuxError::Vmm(e) => e.exit_status(),
            LinuxError::ToolMissing { .. }
            | LinuxError::QemuMissing { .. }
            | LinuxError::QemuFailed { .. }
            | LinuxError::Qmp { .. } => exit::EXTERNAL_TOOL,
            LinuxError::Io { .. } => exit::INTERNAL,
        }
    }
}

/// An I/O error of one step, saying which.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> LinuxError {
    let what = what.into();
    move |source| LinuxError::Io { what, source }
}
