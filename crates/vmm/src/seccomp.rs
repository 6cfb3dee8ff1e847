//! seccomp-bpf filters per thread kind, after Firecracker's per-thread
//! filters (vCPU, VMM, API) and Cloud Hypervisor's: whatever a guest makes
//! a device-emulation bug do, the thread cannot make a system call it does
//! not need (no files, sockets, processes or threads).
//!
//! - Which calls each kind may make: `crate::seccomp_filters`, one list per
//!   kind, each call with why.
//! - When: each thread installs its own filter at the end of its set-up
//!   ([`ThreadFilter::install`]); seccomp filters are per thread and
//!   inherited by threads it creates, so only threads that end with the VM
//!   are filtered. The thread that calls `run_vm` (a test thread, a lab
//!   worker that goes on to write the store) builds, waits, stops and
//!   collects: it never handles a guest access and is never filtered.
//! - On or off: on by default; a command's `--no-seccomp` sets the
//!   process's default off ([`set_process_default`]), which
//!   `VmConfig::new` and every thread without a scope take. `run_vm`
//!   enters a [`SeccompScope`] with `VmConfig::seccomp` on the calling
//!   thread, and every spawn site takes its [`ThreadFilter`] from the scope
//!   of the thread that spawns (threads started outside `run_vm`, such as
//!   the host scheduler's ticker, follow the process default).
//! - A violation: `SECCOMP_RET_TRAP` raises SIGSYS on the offending thread;
//!   the handler reports the thread kind, its name and the system call
//!   (number and name) on stderr and ends the process with
//!   `smplab_record::exit::SECCOMP_VIOLATION`. Trap rather than
//!   `KILL_PROCESS`: a killed process cannot say which thread or call it was.

pub use crate::seccomp_filters::ThreadKind;
use crate::seccomp_filters::{allowed, Args};
use crate::seccomp_names::syscall_name;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;

impl ThreadKind {
    /// The system calls this kind may make, as `name` or `name(REQUEST|...)`,
    /// each with why.
    pub fn allowed_calls(self) -> Vec<(String, &'static str)> {
        allowed(self)
            .iter()
            .map(|a| {
                (
                    match a.args {
                        Args::Any => a.name.to_string(),
                        Args::Ioctl(requests) => format!(
                            "{}({})",
                            a.name,
                            requests
                                .iter()
                                .map(|r| r.name)
                                .collect::<Vec<_>>()
                                .join("|")
                        ),
                        Args::Arg0(value) => format!("{}(arg0={value})", a.name),
                    },
                    a.why,
                )
            })
            .collect()
    }
}

impl std::fmt::Display for ThreadKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("the seccomp filter of the {kind} thread cannot be built: {reason} (a bug in smplab-vmm's filter lists)")]
    Build { kind: ThreadKind, reason: String },
    #[error("the seccomp filter of the {kind} thread cannot be installed: {reason}; run with --no-seccomp on a kernel without seccomp-bpf")]
    Install { kind: ThreadKind, reason: String },
    #[error("the SIGSYS handler for seccomp violations cannot be installed: {0}")]
    Handler(std::io::Error),
}

impl SeccompError {
    /// As an I/O error, for the thread errors that carry one.
    pub fn into_io(self) -> std::io::Error {
        std::io::Error::other(self.to_string())
    }
}

/// The process's default: on, unless a command's `--no-seccomp` said off.
static PROCESS_DEFAULT: AtomicBool = AtomicBool::new(true);

/// Set the process's default (a command's `--no-seccomp`: `false`), before
/// any VM is configured.
pub fn set_process_default(on: bool) {
    PROCESS_DEFAULT.store(on, Ordering::Relaxed);
}

/// Whether filters are on unless a run says otherwise (`VmConfig::new`).
pub fn process_default() -> bool {
    PROCESS_DEFAULT.load(Ordering::Relaxed)
}

thread_local! {
    /// Whether threads this thread spawns install their filters (`None`:
    /// the process default).
    static FILTERS_FOR_SPAWNS: Cell<Option<bool>> = const { Cell::new(None) };
    /// The filtered thread's kind (`ThreadKind::index` + 1; 0: none) and
    /// index, read by the SIGSYS handler: const-initialized and without a
    /// destructor, so reading it there is a plain thread-local load.
    static FILTERED_AS: Cell<(u8, u32)> = const { Cell::new((0, 0)) };
}

/// While alive, threads spawned by this thread install their filters iff
/// `on` (the previous setting comes back on drop).
pub struct SeccompScope {
    previous: Option<bool>,
}

impl SeccompScope {
    pub fn enter(on: bool) -> SeccompScope {
        SeccompScope {
            previous: FILTERS_FOR_SPAWNS.with(|f| f.replace(Some(on))),
        }
    }
}

impl Drop for SeccompScope {
    fn drop(&mut self) {
        FILTERS_FOR_SPAWNS.with(|f| f.set(self.previous));
    }
}

/// A thread's filter, taken on the spawning thread, installed on the new one.
#[derive(Clone, Copy, Debug)]
pub struct ThreadFilter {
    kind: ThreadKind,
    on: bool,
}

impl ThreadFilter {
    /// The filter of a `kind` thread about to be spawned from this thread,
    /// per this thread's [`SeccompScope`].
    pub fn for_spawn(kind: ThreadKind) -> ThreadFilter {
        ThreadFilter {
            kind,
            on: FILTERS_FOR_SPAWNS
                .with(Cell::get)
                .unwrap_or_else(process_default),
        }
    }

    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Install the filter on the calling thread (`index`: the vCPU's, else 0).
    /// Call it last in the thread's set-up.
    pub fn install(self, index: u32) -> Result<(), SeccompError> {
        if !self.on {
            return Ok(());
        }
        // The thread's first allocation attaches it to a malloc arena, which
        // may read /sys/devices/system/cpu/online: do it before the filter.
        std::hint::black_box(Vec::<u64>::with_capacity(16));
        install_sigsys_handler()?;
        let program = program(self.kind)?;
        FILTERED_AS.with(|f| f.set((self.kind.code(), index)));
        seccompiler::apply_filter(program).map_err(|e| SeccompError::Install {
            kind: self.kind,
            reason: e.to_string(),
        })?;
        if PROBE.load(Ordering::Relaxed) == self.kind.code() {
            probe_forbidden_call();
        }
        Ok(())
    }

    /// [`ThreadFilter::install`] for a thread that cannot hand an error back:
    /// a failure ends the process with a message (after
    /// [`prepare`] succeeded on this host it does not happen).
    pub fn install_or_exit(self, index: u32) {
        if let Err(e) = self.install(index) {
            eprintln!("smplab: {e}");
            std::process::exit(smplab_record::exit::SECCOMP_VIOLATION);
        }
    }
}

/// Build every kind's filter and install the SIGSYS handler, on the thread
/// that starts a VM, so a host without seccomp fails there with an error
/// rather than on a device thread.
pub fn prepare(on: bool) -> Result<(), SeccompError> {
    if !on {
        return Ok(());
    }
    for kind in ThreadKind::ALL {
        program(kind)?;
    }
    install_sigsys_handler()
}

/// The compiled filter of `kind`, built once per process.
fn program(kind: ThreadKind) -> Result<&'static BpfProgram, SeccompError> {
    static PROGRAMS: [OnceLock<Result<BpfProgram, String>>; 5] = [const { OnceLock::new() }; 5];
    PROGRAMS[kind.index()]
        .get_or_init(|| build(kind).map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|reason| SeccompError::Build {
            kind,
            reason: reason.clone(),
        })
}

fn build(kind: ThreadKind) -> Result<BpfProgram, seccompiler::BackendError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    // A call allowed with any arguments anywhere in the list stays so.
    let mut unconditional = std::collections::BTreeSet::new();
    for call in allowed(kind) {
        let entry = rules.entry(call.nr).or_default();
        let mut add = |arg: u8, value: u64| -> Result<(), seccompiler::BackendError> {
            let condition =
                SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)?;
            entry.push(SeccompRule::new(vec![condition])?);
            Ok(())
        };
        match call.args {
            Args::Any => {
                unconditional.insert(call.nr);
            }
            Args::Ioctl(requests) => {
                for request in requests {
                    add(1, request.number)?;
                }
            }
            Args::Arg0(value) => add(0, value)?,
        }
    }
    for nr in unconditional {
        // seccompiler: an empty rule list matches the call unconditionally.
        rules.insert(nr, Vec::new());
    }
    SeccompFilter::new(
        rules,
        SeccompAction::Trap,
        SeccompAction::Allow,
        TargetArch::x86_64,
    )?
    .try_into()
}

/// The handler's view of `siginfo_t` for SIGSYS (`_sigsys` in the kernel's
/// `siginfo.h`: after the three ints and padding, the call address, the
/// system call number and the audit architecture).
#[repr(C)]
struct SigsysInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    call_addr: *mut libc::c_void,
    syscall: libc::c_int,
    arch: libc::c_uint,
}

/// `si_code` of a SIGSYS raised by a seccomp filter.
const SYS_SECCOMP: libc::c_int = 1;

fn install_sigsys_handler() -> Result<(), SeccompError> {
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let outcome = INSTALLED.get_or_init(|| {
        // SAFETY: a zeroed sigaction is valid (empty mask, no flags); we set
        // a handler with the SA_SIGINFO signature and install it process-wide.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigsys as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(libc::SIGSYS, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
            }
        }
        Ok(())
    });
    outcome.map_err(|errno| SeccompError::Handler(std::io::Error::from_raw_os_error(errno)))
}

/// A fixed buffer the handler formats into: no allocation in a signal handler.
struct StackText {
    bytes: [u8; 512],
    len: usize,
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.bytes.len() - self.len;
        let n = s.len().min(room);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

extern "C" fn on_sigsys(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    use std::fmt::Write;
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers;
    // for SIGSYS its union holds `_sigsys`, whose layout SigsysInfo mirrors.
    let info = unsafe { &*info.cast::<SigsysInfo>() };
    if info.code != SYS_SECCOMP {
        return; // a SIGSYS someone sent: not ours to report
    }
    let (kind, index) = FILTERED_AS
        .try_with(Cell::get)
        .ok()
        .and_then(|(code, i)| Some((ThreadKind::ALL.into_iter().find(|k| k.code() == code)?, i)))
        .map_or(("unknown", 0), |(k, i)| (k.name(), i));
    let mut text = StackText {
        bytes: [0; 512],
        len: 0,
    };
    let nr = i64::from(info.syscall);
    let thread = ThreadKind::parse(kind).map_or("?", ThreadKind::thread_name);
    let _ = write!(
        text,
        "smplab: seccomp violation: the {kind} thread ({thread}"
    );
    if kind == ThreadKind::Vcpu.name() {
        let _ = write!(text, "{index}");
    }
    let _ = writeln!(
        text,
        ") made system call {nr} ({}), which its filter does not allow \
         (crates/vmm/src/seccomp_filters.rs); smplab-vmm stops (exit status {})",
        syscall_name(nr),
        smplab_record::exit::SECCOMP_VIOLATION
    );
    // SAFETY: write(2) and _exit(2) are async-signal-safe; the buffer is a
    // live local; both calls are in every filter's list.
    unsafe {
        libc::write(2, text.bytes.as_ptr().cast(), text.len);
        libc::_exit(smplab_record::exit::SECCOMP_VIOLATION);
    }
}

/// Test hook: the kind (+1) whose threads make a forbidden call right after
/// installing their filter (0: none).
static PROBE: AtomicU8 = AtomicU8::new(0);

/// Test hook: from now on, every `kind` thread makes one forbidden system
/// call (`getppid`) right after installing its filter, which ends the
/// process with the violation report. For tests that run a VM in a child
/// process and check the report; never set it in a process that must live.
#[doc(hidden)]
pub fn probe_after_install(kind: ThreadKind) {
    PROBE.store(kind.code(), Ordering::Relaxed);
}

fn probe_forbidden_call() {
    // SAFETY: getppid has no arguments and no effects; no filter allows it.
    unsafe { libc::syscall(libc::SYS_getppid) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_builds_and_lists_its_calls() {
        for kind in ThreadKind::ALL {
            let program = build(kind).unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert!(!program.is_empty());
            let calls: Vec<String> = kind.allowed_calls().into_iter().map(|c| c.0).collect();
            assert!(calls.iter().any(|c| c == "futex"), "{kind}: {calls:?}");
            assert!(!calls.iter().any(|c| c.starts_with("getppid")));
            assert!(!calls.iter().any(|c| c.starts_with("socket")));
            assert!(!calls.iter().any(|c| c.starts_with("openat")));
            assert!(!calls.iter().any(|c| c.starts_with("execve")));
            assert_eq!(ThreadKind::parse(kind.name()), Some(kind));
        }
        let vcpu: Vec<String> = ThreadKind::Vcpu
            .allowed_calls()
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert!(vcpu.iter().any(|c| c.contains("KVM_RUN")), "{vcpu:?}");
        let ticker: Vec<String> = ThreadKind::Ticker
            .allowed_calls()
            .into_iter()
            .map(|c| c.0)
            .collect();
        assert!(!ticker.iter().any(|c| c.contains("KVM_RUN")), "{ticker:?}");
    }

    #[test]
    fn the_kvm_request_numbers_match_the_kernels() {
        // The values of linux/kvm.h on x86-64 (as strace decodes them).
        use crate::seccomp_filters as f;
        assert_eq!(f::KVM_RUN.number, 0xae80);
        assert_eq!(f::KVM_GET_REGS.number, 0x8090_ae81);
        assert_eq!(f::KVM_SET_REGS.number, 0x4090_ae82);
        assert_eq!(f::KVM_GET_SREGS.number, 0x8138_ae83);
        assert_eq!(f::KVM_INTERRUPT.number, 0x4004_ae86);
        assert_eq!(f::KVM_IRQ_LINE.number, 0x4008_ae61);
        assert_eq!(f::KVM_NMI.number, 0xae9a);
        assert_eq!(f::KVM_RESET_DIRTY_RINGS.number, 0xaec7);
        assert_eq!(syscall_name(libc::SYS_getppid), "getppid");
        assert_eq!(syscall_name(100_000), "?");
    }

    #[test]
    fn a_scope_switches_spawned_filters_and_restores() {
        assert!(ThreadFilter::for_spawn(ThreadKind::Io).is_on());
        {
            let _off = SeccompScope::enter(false);
            assert!(!ThreadFilter::for_spawn(ThreadKind::Io).is_on());
        }
        assert!(ThreadFilter::for_spawn(ThreadKind::Io).is_on());
    }
}
