//! Process exit statuses shared by every `smplab` command, so scripts can tell
//! failures apart. Documented in README.md; keep both in step.

/// Success.
pub const OK: i32 = 0;
/// An unexpected internal error (a bug in smplab: please report it).
pub const INTERNAL: i32 = 1;
/// Bad input: malformed or invalid workload/spec file, bad command-line value.
pub const BAD_INPUT: i32 = 2;
/// /dev/kvm is missing or cannot be used.
pub const KVM_UNAVAILABLE: i32 = 3;
/// The kernel image is not a bootable ELF64 with a PVH entry point.
pub const BAD_KERNEL: i32 = 4;
/// A resource request the host cannot meet (more vCPUs than KVM allows, memory).
pub const RESOURCE_LIMIT: i32 = 5;
/// The guest crashed: triple fault, shutdown, emulation failure, guest exception.
pub const GUEST_CRASH: i32 = 6;
/// The run was still going at its timeout, or the guest watchdog fired.
pub const TIMEOUT: i32 = 7;
/// An external tool (QEMU, Chromium) is missing or failed.
pub const EXTERNAL_TOOL: i32 = 8;
/// The workload failed at run time (e.g. a thread could not be created or pinned).
pub const RUN_FAILED: i32 = 9;
/// A partial result: some points of a lab sweep failed (the others were
/// stored), or an incomplete trace was shown as far as it was recorded.
pub const PARTIAL: i32 = 10;
/// `smplab trace`: the program to trace does not exist or cannot be executed.
pub const PROGRAM_NOT_FOUND: i32 = 11;
/// `smplab trace`: the program cannot be traced (a static binary: no dynamic
/// loader, so LD_PRELOAD cannot reach its pthread calls).
pub const NOT_TRACEABLE: i32 = 12;
/// A trace file is corrupt, truncated or not a smplab trace.
pub const BAD_TRACE: i32 = 13;
/// `smplab claims check`: a recomputed figure differs from the ledger's
/// stated value by more than its tolerance.
pub const CLAIM_DRIFT: i32 = 14;
/// `smplab claims check`: a docs table of figures differs from what the
/// ledger renders (run `smplab claims render`).
pub const STALE_DOCS: i32 = 15;
/// Linux guests: the initramfs is missing, unreadable or not a cpio archive,
/// or the program (or a library it needs) cannot be put into or found in it.
pub const BAD_INITRAMFS: i32 = 16;
/// Linux guests: the guest kernel brought fewer CPUs online than the vCPUs
/// requested.
pub const VCPUS_OFFLINE: i32 = 17;
/// Linux guests: the guest stopped without the init's result line (the init
/// did not run, crashed, or wrote a malformed result).
pub const NO_RESULT: i32 = 18;
/// A Linux guest (`--executor linux`, `linux-qemu`) cannot boot on this
/// host's KVM: PVM offers no hardware-style virtualization (run inside the
/// nested AMD-V host, docs/nested-host.md).
pub const NO_HARDWARE_KVM: i32 = 19;
/// smplab-vmm: one of its threads made a system call its seccomp filter does
/// not allow (the message names the thread and the call; crates/vmm/src/seccomp.rs).
pub const SECCOMP_VIOLATION: i32 = 20;
/// `smplab claims check` / `audit`: a doc the ledger lists as audited states
/// a figure that is neither a claim nor exempt with its reason.
pub const UNCLAIMED_FIGURE: i32 = 21;
/// `smplab trace`: the traced program was killed by signal N: the status is
/// 128 + N (as a shell reports it); the trace so far is kept, marked incomplete.
pub const SIGNAL_BASE: i32 = 128;

/// Print an error the way every `smplab` command does: `smplab: <message>` on
/// stderr, the prefix on every line (a list of spec problems stays greppable).
pub fn report_error(message: impl std::fmt::Display) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    for line in message.to_string().lines() {
        // Nothing useful can be done when stderr itself is gone.
        let _ = writeln!(err, "smplab: {line}");
    }
}

/// `println!` that ignores a closed stdout (`smplab demo | head` must not
/// panic on EPIPE). Every command prints its tables through this.
#[macro_export]
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// `print!` that ignores a closed stdout.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}
