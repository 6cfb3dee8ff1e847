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

pub mod result;

use smplab_record::config::IrqAffinity;
use smplab_record::{exit, Executor, RunRecord, WorkloadInfo};
use smplab_vmm::{ConsoleSink, Irqchip, KernelImage, Placement, SyncMode, VmConfig, VmmError};
use smplab_workload::Program;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use result::{GuestResult, ResultError};
/// The start gate K VMs share (`VmRunOptions::start_gate`).
pub use smplab_vmm::StartGate;

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

fn kernel_bytes(opts: &VmRunOptions) -> Result<Vec<u8>, GuestError> {
    match &opts.kernel {
        None => Ok(GUEST_ELF.to_vec()),
        Some(p) => std::fs::read(p).map_err(|source| GuestError::Io {
            what: format!("reading kernel {}", p.display()),
            source,
        }),
    }
}

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

/// Run `program` in the smplab guest on smplab-vmm.
pub fn run_vm(
    program: &Program,
    info: WorkloadInfo,
    opts: &VmRunOptions,
) -> Result<RunRecord, GuestError> {
    let mem = check(program, opts)?;
    let mut cfg = VmConfig::new(match &opts.kernel {
        None => KernelImage::Bytes(GUEST_ELF.to_vec()),
        Some(p) => KernelImage::Path(p.clone()),
    });
    cfg.cmdline = cmdline(program, opts, false);
    cfg.modules = vec![smplab_workload::encode::encode(program)];
    cfg.vcpus = opts.vcpus;
    cfg.mem_bytes = mem;
    cfg.sync = opts.sync;
    cfg.irqchip = opts.irqchip;
    cfg.vmm_halt_poll = opts.vmm_halt_poll;
    cfg.placement = match &opts.pin {
        Some(cpus) if !cpus.is_empty() => Placement::Pinned(cpus.clone()),
        _ => Placement::Floating,
    };
    cfg.io_cpu = opts.io_cpu;
    cfg.timeout = Some(opts.timeout);
    cfg.start_gate = opts.start_gate.clone();
    cfg.host = opts.host.clone();
    cfg.irq_route = opts.irq_route.clone();
    if let (Some(host), IrqAffinity::Running) = (&opts.host, &opts.irq_affinity) {
        // The guest boots with every vCPU in turn (`io_irq`); the scheduler
        // points the routing page at the running ones once memory exists.
        host.scheduler
            .set_irq_affinity(host.vm, &IrqAffinity::Running)
            .map_err(|_| GuestError::IrqAffinityUnsupported(IrqAffinity::Running))?;
    }
    cfg.block = program
        .uses_io()
        .then(|| smplab_vmm::devices::block::BlockConfig {
            queue_depths: program.devices.iter().map(|d| d.queue_depth).collect(),
            thread_cpus: opts.io_thread_cpus.clone(),
        });
    cfg.console = if opts.show_console {
        ConsoleSink::Stdout
    } else {
        ConsoleSink::Capture
    };
    let run = smplab_vmm::run_vm(&cfg)?;
    let watchdog_ms = u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10;
    check_exit(run.exit_code, &run.console, watchdog_ms)?;
    let parsed = result::parse(&run.result).map_err(|e| {
        GuestError::BadResult(e, String::from_utf8_lossy(&run.console).into_owned())
    })?;
    let mut rec = base_record(Executor::Vm, info, program, opts, mem);
    rec.set_config("sync", opts.sync.as_str());
    if opts.irqchip != Irqchip::Kernel {
        rec.set_config("irqchip", opts.irqchip.as_str());
        rec.set_config(
            "vmm_halt_poll_ns",
            u64::try_from(opts.vmm_halt_poll.as_nanos()).unwrap_or(u64::MAX),
        );
    }
    if let Some(io) = opts.io_cpu {
        rec.set_config("io_cpu", io);
    }
    if program.uses_io() {
        rec.set_config("irq_affinity", opts.irq_affinity.to_string());
        rec.set_config(
            "io_thread_cpus",
            smplab_record::config::IoThreadCpus(opts.io_thread_cpus.clone()).to_string(),
        );
    }
    let console = || String::from_utf8_lossy(&run.console).into_owned();
    parsed
        .fill(&mut rec, program)
        .map_err(|e| GuestError::BadResult(e, console()))?;
    rec.io = parsed.io_section(
        run.block
            .as_ref()
            .map(|b| (b.requests, b.device_latency.clone())),
    );
    if let Some(mut window) = host_window(&run.section) {
        // The guest settles its waiters before "ready", so the host's window
        // starts after it; the guest measured it.
        window.settle = parsed.settle();
        rec.timing.window = Some(window);
    }
    rec.timing.total_ns = Some(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX));
    rec.vmm = Some(run.section);
    Ok(rec)
}

/// The workload window as smplab-vmm saw it on the host clock: the guest's
/// "ready", the VMM's "go", the guest's "done" (absent if the run stopped
/// before "done").
fn host_window(section: &smplab_record::vmm::VmmSection) -> Option<smplab_record::WorkloadWindow> {
    let w = section.window.as_ref()?;
    Some(smplab_record::WorkloadWindow {
        clock: smplab_record::WindowClock::HostMonotonic,
        threads_ready_ns: w.ready_ns,
        start_ns: w.go_ns,
        end_ns: w.done_ns?,
        start_gate: w.start_gate,
        settle: None,
    })
}

/// Whether `binary` can be run (a path, or a name found on PATH).
fn find_binary(binary: &std::path::Path) -> Option<PathBuf> {
    if binary.components().count() > 1 {
        return binary.is_file().then(|| binary.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(binary))
            .find(|p| p.is_file())
    })
}

/// The QEMU command line (without the binary) for a run.
pub fn qemu_args(
    kernel: &std::path::Path,
    program_file: &std::path::Path,
    cmdline: &str,
    opts: &VmRunOptions,
    mem: u64,
) -> Vec<String> {
    let mib = mem.div_ceil(1 << 20);
    vec![
        "-accel".into(),
        "kvm".into(),
        "-cpu".into(),
        "max,-arch-capabilities".into(),
        "-M".into(),
        "q35".into(),
        "-m".into(),
        format!("{mib}M"),
        "-smp".into(),
        opts.vcpus.to_string(),
        "-nodefaults".into(),
        "-display".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-serial".into(),
        "stdio".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        kernel.display().to_string(),
        "-append".into(),
        cmdline.into(),
        "-initrd".into(),
        program_file.display().to_string(),
        "-device".into(),
        "isa-debug-exit,iobase=0x501,iosize=2".into(),
    ]
}

/// Run `program` in the smplab guest under QEMU with KVM, the VMM a user would
/// otherwise pick. The result comes back framed on the serial console.
// Casts: a Unix exit status is 0..=255, so it is non-negative.
#[allow(clippy::cast_sign_loss)]
pub fn run_qemu(
    program: &Program,
    info: WorkloadInfo,
    opts: &VmRunOptions,
) -> Result<RunRecord, GuestError> {
    if opts.irqchip != Irqchip::Kernel {
        return Err(GuestError::QemuUserIrqchip);
    }
    if program.uses_io() {
        return Err(GuestError::IoUnsupported);
    }
    let mem = check(program, opts)?;
    let wanted = opts
        .qemu_binary
        .clone()
        .unwrap_or_else(|| PathBuf::from("qemu-system-x86_64"));
    let binary = find_binary(&wanted).ok_or_else(|| GuestError::QemuMissing {
        binary: wanted.display().to_string(),
    })?;
    let dir = TempDir::new()?;
    let kernel_path = dir.0.join("smplab-guest.elf");
    let program_path = dir.0.join("program.bin");
    let io = |what: &str| {
        let what = what.to_string();
        move |source| GuestError::Io { what, source }
    };
    std::fs::write(&kernel_path, kernel_bytes(opts)?).map_err(io("writing the kernel image"))?;
    std::fs::write(&program_path, smplab_workload::encode::encode(program))
        .map_err(io("writing the program"))?;
    let cmdline = cmdline(program, opts, true);
    let mut cmd = Command::new(&binary);
    cmd.args(qemu_args(&kernel_path, &program_path, &cmdline, opts, mem))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cpus) = opts.pin.clone().filter(|c| !c.is_empty()) {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls
        // async-signal-safe libc functions (CPU_ZERO/CPU_SET are plain bit
        // operations, sched_setaffinity is a system call) on a local set.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_ZERO(&mut set);
                // check_pin (in check) kept every CPU below CPU_SET_BITS.
                for &c in cpus.iter().filter(|&&c| c < CPU_SET_BITS) {
                    libc::CPU_SET(c, &mut set);
                }
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(io("starting QEMU"))?;
    // Drain stdout/stderr on threads so a chatty guest cannot block QEMU.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let status = loop {
        match child.try_wait().map_err(io("waiting for QEMU"))? {
            Some(s) => break s,
            None if started.elapsed() > opts.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                let console = out_t.join().unwrap_or_default();
                return Err(GuestError::QemuTimeout {
                    seconds: opts.timeout.as_secs_f64(),
                    console: String::from_utf8_lossy(&console).into_owned(),
                });
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let wall = started.elapsed();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    // isa-debug-exit: QEMU exits with (value << 1) | 1.
    let code = match status.code() {
        Some(c) if c & 1 == 1 => (c as u32) >> 1,
        _ => {
            return Err(GuestError::QemuFailed {
                status: status.to_string(),
                stderr,
            })
        }
    };
    let (record_bytes, console) = match result::split_serial(&stdout) {
        Ok(split) => split,
        Err(e) => {
            check_exit(
                code,
                &stdout,
                u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10,
            )?;
            return Err(GuestError::BadResult(
                e,
                String::from_utf8_lossy(&stdout).into_owned(),
            ));
        }
    };
    if opts.show_console {
        print!("{}", String::from_utf8_lossy(&console));
    }
    check_exit(
        code,
        &console,
        u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10,
    )?;
    let parsed = result::parse(&record_bytes)
        .map_err(|e| GuestError::BadResult(e, String::from_utf8_lossy(&console).into_owned()))?;
    let mut rec = base_record(Executor::Qemu, info, program, opts, mem);
    rec.set_config("qemu", binary.display().to_string());
    parsed
        .fill(&mut rec, program)
        .map_err(|e| GuestError::BadResult(e, String::from_utf8_lossy(&console).into_owned()))?;
    rec.timing.total_ns = Some(u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX));
    Ok(rec)
}

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, GuestError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("smplab-qemu-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| GuestError::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
