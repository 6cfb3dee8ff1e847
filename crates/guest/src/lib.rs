//! smplab-guest: a tiny SMP guest kernel that runs the smplab workload model at
//! user level inside a VM, and the host side that boots it on smplab-vmm
//! ([`run_vm`]) or QEMU ([`run_qemu`]) and turns its output into a
//! [`RunRecord`].
//!
//! The kernel (`kernel/`, C and GNU as) is built by `build.rs` with gcc: only the
//! host Rust target exists on smplab machines. It boots through the Xen PVH entry
//! point, starts every vCPU with INIT/SIPI, and runs the workload's threads at
//! CPL3, where even a PVM (nested, emulated-CPL0) host runs them natively. See
//! docs/guest.md for the design and docs/guest-abi.md for the boot contract.
//!
//! This module owns what both VMMs share: the run options, the errors, the
//! checks before a run, the guest command line and the record's common part;
//! `vm` runs the guest on smplab-vmm, `qemu` under QEMU.

mod qemu;
pub mod result;
mod vm;

use smplab_record::config::IrqAffinity;
use smplab_record::{exit, Executor, RunRecord, WorkloadInfo};
use smplab_vmm::{Irqchip, SyncMode, VmmError};
use smplab_workload::Program;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use qemu::{qemu_args, run_qemu};
pub use result::{GuestResult, ResultError};
/// The start gate K VMs share (`VmRunOptions::start_gate`).
pub use smplab_vmm::StartGate;
pub use vm::run_vm;

/// The guest kernel: an ELF64 x86-64 image with a PVH entry point.
pub const GUEST_ELF: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/smplab-guest.elf"));

/// Most vCPUs the guest kernel supports.
pub const MAX_VCPUS: u32 = smplab_record::config::MAX_GUEST_VCPUS;
/// Most workload threads the guest kernel supports.
pub const MAX_THREADS: u32 = smplab_record::config::MAX_GUEST_THREADS;
/// Guest-physical memory the guest can use (its identity map covers 1 GiB).
pub const MAX_MEM_BYTES: u64 = smplab_record::config::MAX_GUEST_MEM_BYTES;

/// What an idle vCPU does (`--idle`): the run configuration's one type.
pub use smplab_record::config::{BadIdlePolicy, IdlePolicy};

/// Options of a guest run, shared by [`run_vm`] and [`run_qemu`] (QEMU ignores
/// `sync` and `io_cpu`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmRunOptions {
    /// vCPUs to boot (1..=64).
    pub vcpus: u32,
    /// smplab-vmm device synchronization mode.
    pub sync: SyncMode,
    /// smplab-vmm interrupt controllers (QEMU: only `Kernel`).
    pub irqchip: Irqchip,
    /// smplab-vmm with `Irqchip::User`: the VMM's halt-poll window.
    pub vmm_halt_poll: Duration,
    pub idle: IdlePolicy,
    /// Host CPUs: vCPU i runs on `pin[i % len]` (smplab-vmm); QEMU is confined
    /// to the set as a whole.
    pub pin: Option<Vec<usize>>,
    /// Host CPU of smplab-vmm's I/O thread.
    pub io_cpu: Option<usize>,
    /// Host-side limit for the whole run; the guest watchdog fires at 90 % of it.
    pub timeout: Duration,
    /// Guest scheduler tick. `None`: tickless when threads <= vCPUs, else 250 Hz
    /// (time slicing so a spinning thread cannot starve one queued behind it).
    pub timer_hz: Option<u32>,
    /// Guest memory; `None` sizes it from the program (at least 64 MiB).
    pub mem_bytes: Option<u64>,
    /// Show the guest console on stdout (otherwise it is captured and attached
    /// to errors).
    pub show_console: bool,
    /// TSC frequency handed to the guest; `None` measures it on the host.
    pub tsc_hz: Option<u64>,
    /// Boot this kernel instead of [`GUEST_ELF`].
    pub kernel: Option<PathBuf>,
    /// QEMU binary (default `qemu-system-x86_64` on PATH).
    pub qemu_binary: Option<PathBuf>,
    /// Extra guest command-line words, appended last (docs/guest-abi.md), e.g.
    /// `selftest=fault`.
    pub extra_cmdline: String,
    /// smplab-vmm only: a start gate shared with the other VMs of a multi-VM
    /// run, so their workloads are released together (docs/guest-abi.md,
    /// window port). Make one with `StartGate::new(k, max_wait)` and give
    /// each of the K runs a clone; `smplab_record::overlap_of_records` then
    /// says how much their windows overlapped.
    pub start_gate: Option<StartGate>,
    /// smplab-vmm only: run the vCPUs under a user-level scheduler shared
    /// with other VMs in this process (`smplab host`, docs/host.md).
    pub host: Option<smplab_vmm::host::HostSlot>,
    /// smplab-vmm only: a handle to change the block interrupt's routing
    /// while the guest runs (docs/guest-abi.md, "The routing page").
    pub irq_route: Option<smplab_vmm::irq_route::IrqRoute>,
    /// Which vCPUs take the block device's interrupt (`io` ops): the guest
    /// programs its IOAPIC redirection entry from it. `Running` needs a
    /// user-level host scheduler ([`VmRunOptions::host`]), which keeps the
    /// guest's routing page on the running vCPUs.
    pub irq_affinity: IrqAffinity,
    /// smplab-vmm only: host CPUs of the thread completing device requests
    /// (empty: not pinned).
    pub io_thread_cpus: Vec<usize>,
}

impl Default for VmRunOptions {
    fn default() -> Self {
        VmRunOptions {
            vcpus: 1,
            sync: SyncMode::Fine,
            irqchip: Irqchip::Kernel,
            vmm_halt_poll: Duration::ZERO,
            idle: IdlePolicy::Hlt,
            pin: None,
            io_cpu: None,
            timeout: Duration::from_secs(120),
            timer_hz: None,
            mem_bytes: None,
            show_console: false,
            tsc_hz: None,
            kernel: None,
            qemu_binary: None,
            extra_cmdline: String::new(),
            start_gate: None,
            host: None,
            irq_route: None,
            irq_affinity: IrqAffinity::default(),
            io_thread_cpus: Vec::new(),
        }
    }
}

/// Why a guest run failed. [`GuestError::exit_status`] maps each to
/// `smplab_record::exit`.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error(transparent)]
    Vmm(#[from] VmmError),
    #[error("{vcpus} vCPUs requested; the smplab guest supports 1..={MAX_VCPUS}")]
    TooManyVcpus { vcpus: u32 },
    #[error("the workload has {threads} threads; the smplab guest runs at most {MAX_THREADS}")]
    TooManyThreads { threads: u32 },
    #[error("the workload needs about {needed} bytes of guest memory; the smplab guest uses at most {MAX_MEM_BYTES} (1 GiB): use a smaller scale or fewer threads")]
    TooMuchMemory { needed: u64 },
    #[error("the guest rejected its command line or program:\n{console}")]
    GuestRejected { console: String },
    #[error("the guest took an exception (CPU fault in the guest kernel or executor):\n{console}")]
    GuestException { console: String },
    #[error("the guest watchdog ended the run after {ms} ms; raise --timeout if the workload is just slow:\n{console}")]
    Watchdog { ms: u64, console: String },
    #[error("the guest stopped with unexpected status {code}:\n{console}")]
    UnexpectedExit { code: u32, console: String },
    #[error("{0}; guest console:\n{1}")]
    BadResult(ResultError, String),
    #[error("QEMU ({binary}) is not installed or not on PATH: install it with `apt-get install qemu-system-x86`")]
    QemuMissing { binary: String },
    #[error("QEMU failed ({status}) without a result; its stderr:\n{stderr}")]
    QemuFailed { status: String, stderr: String },
    #[error("QEMU still running after the {seconds:.1} s timeout; raise --timeout. Guest console so far:\n{console}")]
    QemuTimeout { seconds: f64, console: String },
    #[error("--pin names host CPU {cpu}, which {reason}; this host's CPUs are 0-{last}")]
    NoSuchCpu {
        cpu: usize,
        last: usize,
        reason: &'static str,
    },
    #[error("--pin is empty; give a comma-separated list of host CPUs such as 0,1")]
    EmptyPin,
    #[error("the workload has `io` ops, which the smplab guest runs only on smplab-vmm's block device (QEMU has no device it can drive the same way, docs/vmm.md); use --executor vm, native or sim")]
    IoUnsupported,
    #[error("--irq-affinity {0} needs a user-level host scheduler (smplab host with a policy such as fair) or the simulator; use a vCPU, a list like 0,1 or balanced")]
    IrqAffinityUnsupported(IrqAffinity),
    #[error("--irqchip user applies only to smplab-vmm (--executor vm); QEMU runs with its in-kernel irqchip")]
    QemuUserIrqchip,
    #[error("cannot prepare the QEMU run ({what}): {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl GuestError {
    /// The process exit status (`smplab_record::exit`).
    pub fn exit_status(&self) -> i32 {
        match self {
            GuestError::Vmm(e) => e.exit_status(),
            GuestError::TooManyVcpus { .. } | GuestError::TooMuchMemory { .. } => {
                exit::RESOURCE_LIMIT
            }
            GuestError::TooManyThreads { .. }
            | GuestError::EmptyPin
            | GuestError::IoUnsupported
            | GuestError::IrqAffinityUnsupported(_)
            | GuestError::QemuUserIrqchip => exit::BAD_INPUT,
            GuestError::NoSuchCpu { .. } => exit::RESOURCE_LIMIT,
            GuestError::GuestRejected { .. } => exit::INTERNAL,
            GuestError::GuestException { .. } | GuestError::UnexpectedExit { .. } => {
                exit::GUEST_CRASH
            }
            GuestError::Watchdog { .. } | GuestError::QemuTimeout { .. } => exit::TIMEOUT,
            GuestError::BadResult(..) => exit::GUEST_CRASH,
            GuestError::QemuMissing { .. } | GuestError::QemuFailed { .. } => exit::EXTERNAL_TOOL,
            GuestError::Io { .. } => exit::RUN_FAILED,
        }
    }
}

/// The host's TSC frequency, measured once against the monotonic clock. The
/// guest reads the raw host TSC (KVM without TSC scaling), so this is the rate
/// its `rdtsc` runs at.
pub fn host_tsc_hz() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
        let tsc = || unsafe { core::arch::x86_64::_rdtsc() };
        let t0 = Instant::now();
        let c0 = tsc();
        while t0.elapsed() < Duration::from_millis(50) {
            std::hint::spin_loop();
        }
        let c1 = tsc();
        let ns = t0.elapsed().as_nanos().max(1);
        u64::try_from(u128::from(c1.wrapping_sub(c0)) * 1_000_000_000 / ns).unwrap_or(u64::MAX)
    })
}

/// Guest memory a program needs: kernel + per-thread stacks and private
/// buffers + shared buffers + slack, rounded up to 2 MiB, at least 64 MiB.
pub fn mem_bytes_for(program: &Program) -> u64 {
    let mut need: u64 = 16 << 20;
    for (gi, g) in program.groups.iter().enumerate() {
        let per = 64 * 1024 + program.private_bytes(gi).div_ceil(4096) * 4096 + 4096;
        need = need.saturating_add(per.saturating_mul(g.threads as u64));
    }
    for b in &program.buffers {
        need = need.saturating_add(b.bytes.div_ceil(4096) * 4096 + 4096);
    }
    need = need.saturating_add(need / 8);
    need.div_ceil(2 << 20).saturating_mul(2 << 20).max(64 << 20)
}

/// The guest command line for `opts` (docs/guest-abi.md).
pub fn cmdline(program: &Program, opts: &VmRunOptions, result_serial: bool) -> String {
    let timer_hz = effective_timer_hz(program, opts);
    let tsc_hz = opts.tsc_hz.unwrap_or_else(host_tsc_hz);
    let watchdog_ms = u64::try_from(opts.timeout.as_millis())
        .unwrap_or(u64::MAX)
        .saturating_mul(9)
        / 10;
    let mut line = format!(
        "cpus={} idle={} timer_hz={} tsc_hz={} watchdog_ms={} result={} console=on",
        opts.vcpus,
        opts.idle,
        timer_hz,
        tsc_hz,
        watchdog_ms,
        if result_serial { "serial" } else { "port" }
    );
    if program.uses_io() {
        let targets: Vec<String> = io_irq_targets(&opts.irq_affinity, opts.vcpus)
            .iter()
            .map(u32::to_string)
            .collect();
        line.push_str(" io_irq=");
        line.push_str(&targets.join(","));
    }
    if !opts.extra_cmdline.trim().is_empty() {
        line.push(' ');
        line.push_str(opts.extra_cmdline.trim());
    }
    line
}

/// The vCPUs the guest routes the block interrupt to, one interrupt each in
/// turn (`IrqAffinity::target` order): a set as given (at most 64 entries,
/// wrapped into range like `target`), balanced as every vCPU.
pub fn io_irq_targets(affinity: &IrqAffinity, vcpus: u32) -> Vec<u32> {
    let len = match affinity {
        IrqAffinity::Vcpus(set) => set.len().clamp(1, 64),
        IrqAffinity::Balanced | IrqAffinity::Running => vcpus.clamp(1, 64) as usize,
    };
    (0..len as u64).map(|k| affinity.target(k, vcpus)).collect()
}

fn effective_timer_hz(program: &Program, opts: &VmRunOptions) -> u32 {
    opts.timer_hz
        .unwrap_or(if program.total_threads() > opts.vcpus {
            250
        } else {
            0
        })
        .min(5000)
}

fn check(program: &Program, opts: &VmRunOptions) -> Result<u64, GuestError> {
    if opts.vcpus == 0 || opts.vcpus > MAX_VCPUS {
        return Err(GuestError::TooManyVcpus { vcpus: opts.vcpus });
    }
    let threads = program.total_threads();
    if threads > MAX_THREADS {
        return Err(GuestError::TooManyThreads { threads });
    }
    if program.uses_io() && opts.irq_affinity == IrqAffinity::Running && !running_kept(opts) {
        return Err(GuestError::IrqAffinityUnsupported(IrqAffinity::Running));
    }
    let mem = opts.mem_bytes.unwrap_or_else(|| mem_bytes_for(program));
    if mem > MAX_MEM_BYTES {
        return Err(GuestError::TooMuchMemory { needed: mem });
    }
    if let Some(pin) = &opts.pin {
        check_pin(pin)?;
    }
    Ok(mem)
}

/// Check a pin list against the host before anything is started (QEMU's
/// affinity is set in its forked child, where a bad CPU cannot be reported
/// well): a CPU beyond what a `cpu_set_t` holds or the host has, or one this
/// process may not use, is [`GuestError::NoSuchCpu`].
pub fn check_pin(pin: &[usize]) -> Result<(), GuestError> {
    if pin.is_empty() {
        return Err(GuestError::EmptyPin);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and
    // sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into it.
    let allowed = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        (libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0)
            .then_some(set)
    };
    let last = cores.saturating_sub(1).max(
        (0..CPU_SET_BITS)
            // SAFETY: i < CPU_SET_BITS, the capacity of the set.
            .filter(|&i| allowed.is_some_and(|set| unsafe { libc::CPU_ISSET(i, &set) }))
            .max()
            .unwrap_or(0),
    );
    for &cpu in pin {
        let reason = if cpu >= CPU_SET_BITS {
            Some("is beyond the 1024 CPUs a CPU set can name")
        } else if cpu > last {
            Some("does not exist")
        } else {
            // SAFETY: cpu < CPU_SET_BITS, the capacity of the set.
            allowed
                .filter(|set| !unsafe { libc::CPU_ISSET(cpu, set) })
                .map(|_| "this process may not run on")
        };
        if let Some(reason) = reason {
            return Err(GuestError::NoSuchCpu { cpu, last, reason });
        }
    }
    Ok(())
}

/// CPUs a `libc::cpu_set_t` can hold (CPU_SETSIZE).
const CPU_SET_BITS: usize = 8 * std::mem::size_of::<libc::cpu_set_t>();

/// Map a guest exit status (port 0x501) to success or an error.
fn check_exit(code: u32, console: &[u8], watchdog_ms: u64) -> Result<(), GuestError> {
    let console = String::from_utf8_lossy(console).into_owned();
    match code {
        0 => Ok(()),
        1 => Err(GuestError::GuestRejected { console }),
        2 => Err(GuestError::GuestException { console }),
        3 => Err(GuestError::Watchdog {
            ms: watchdog_ms,
            console,
        }),
        code => Err(GuestError::UnexpectedExit { code, console }),
    }
}

fn base_record(
    executor: Executor,
    info: WorkloadInfo,
    program: &Program,
    opts: &VmRunOptions,
    mem: u64,
) -> RunRecord {
    let mut info = info;
    info.threads = program.total_threads();
    let mut rec = RunRecord::new(executor, info);
    rec.set_config("vcpus", opts.vcpus);
    rec.set_config("idle", opts.idle.to_string());
    rec.set_config("timer_hz", effective_timer_hz(program, opts));
    rec.set_config("mem_bytes", mem);
    rec.set_config(
        "pin",
        match &opts.pin {
            Some(p) => serde_json::Value::from(p.clone()),
            None => serde_json::Value::Null,
        },
    );
    rec
}

/// Whether a host scheduler that knows who runs keeps the routing page on
/// the running vCPUs (`running` interrupt affinity on smplab-vmm).
fn running_kept(opts: &VmRunOptions) -> bool {
    opts.host
        .as_ref()
        .is_some_and(|h| h.scheduler.policy().is_user_level())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::find_binary;

    #[test]
    fn io_programs_are_refused_by_qemu_and_with_sim_only_affinity() {
        let p = smplab_workload::Source::resolve("oltp")
            .unwrap()
            .instantiate(Some(2), 0.1)
            .unwrap();
        assert!(check(&p, &VmRunOptions::default()).is_ok());
        let opts = VmRunOptions {
            qemu_binary: Some("/nonexistent/qemu".into()),
            ..VmRunOptions::default()
        };
        let e = run_qemu(&p, Default::default(), &opts).unwrap_err();
        assert!(matches!(e, GuestError::IoUnsupported), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INPUT);
        let running = VmRunOptions {
            irq_affinity: IrqAffinity::Running,
            ..VmRunOptions::default()
        };
        let e = check(&p, &running).unwrap_err();
        assert!(e.to_string().contains("balanced"), "{e}");
        assert_eq!(e.exit_status(), exit::BAD_INPUT);
    }

    #[test]
    fn io_programs_pass_their_interrupt_targets_on_the_command_line() {
        let p = smplab_workload::Source::resolve("oltp")
            .unwrap()
            .instantiate(Some(2), 0.1)
            .unwrap();
        let mut opts = VmRunOptions {
            vcpus: 3,
            ..VmRunOptions::default()
        };
        assert!(cmdline(&p, &opts, false).contains(" io_irq=0"));
        opts.irq_affinity = IrqAffinity::Balanced;
        assert!(cmdline(&p, &opts, false).contains(" io_irq=0,1,2"));
        opts.irq_affinity = "2,1".parse().unwrap();
        assert!(cmdline(&p, &opts, false).contains(" io_irq=2,1"));
        let plain = smplab_workload::Source::resolve("spinlock")
            .unwrap()
            .instantiate(Some(2), 0.1)
            .unwrap();
        assert!(!cmdline(&plain, &opts, false).contains("io_irq"));
    }

    #[test]
    fn guest_elf_has_a_pvh_note() {
        assert_eq!(&GUEST_ELF[..4], b"\x7fELF");
        // The Xen note: namesz 4, descsz 8, type 18, "Xen\0".
        let needle = [4u8, 0, 0, 0, 8, 0, 0, 0, 18, 0, 0, 0, b'X', b'e', b'n', 0];
        assert!(GUEST_ELF.windows(needle.len()).any(|w| w == needle));
    }

    #[test]
    fn idle_policies_round_trip() {
        for s in ["hlt", "poll", "haltpoll:200000"] {
            let p: IdlePolicy = s.parse().expect("valid policy");
            assert_eq!(p.to_string(), s);
        }
        for bad in [
            "",
            "halt",
            "haltpoll",
            "haltpoll:",
            "haltpoll:x",
            "haltpoll:0",
        ] {
            let e = bad.parse::<IdlePolicy>().unwrap_err();
            assert!(e.to_string().contains("haltpoll:NS"), "{e}");
        }
    }

    #[test]
    fn missing_qemu_says_how_to_install_it() {
        let e = GuestError::QemuMissing {
            binary: "qemu-system-x86_64".into(),
        };
        assert!(e.to_string().contains("apt-get install qemu-system-x86"));
        assert_eq!(e.exit_status(), exit::EXTERNAL_TOOL);
        assert!(find_binary(std::path::Path::new("/nonexistent/qemu")).is_none());
    }

    #[test]
    fn pin_lists_are_checked_before_anything_starts() {
        for cpu in [1024, 5000, usize::MAX] {
            let e = check_pin(&[0, cpu]).unwrap_err();
            assert!(matches!(e, GuestError::NoSuchCpu { .. }), "{e}");
            assert_eq!(e.exit_status(), exit::RESOURCE_LIMIT);
        }
        let e = check_pin(&[1023]).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert_eq!(check_pin(&[]).unwrap_err().exit_status(), exit::BAD_INPUT);
        assert!(check_pin(&[0]).is_ok());
        // run_qemu refuses before it looks for QEMU or forks it.
        let p = smplab_workload::Source::resolve("spinlock")
            .and_then(|s| s.instantiate(Some(1), 0.01))
            .expect("builtin");
        let opts = VmRunOptions {
            pin: Some(vec![4096]),
            qemu_binary: Some("/nonexistent/qemu".into()),
            ..VmRunOptions::default()
        };
        let e = run_qemu(&p, Default::default(), &opts).unwrap_err();
        assert!(matches!(e, GuestError::NoSuchCpu { cpu: 4096, .. }), "{e}");
    }

    #[test]
    fn exit_statuses_map_to_record_statuses() {
        assert!(check_exit(0, b"", 1).is_ok());
        assert_eq!(
            check_exit(2, b"x", 1).unwrap_err().exit_status(),
            exit::GUEST_CRASH
        );
        assert_eq!(
            check_exit(3, b"x", 1).unwrap_err().exit_status(),
            exit::TIMEOUT
        );
        assert_eq!(
            check_exit(9, b"x", 1).unwrap_err().exit_status(),
            exit::GUEST_CRASH
        );
    }
}
