//! smplab-vmm: a KVM SMP VMM whose device-emulation synchronization is a run-time
//! switch (`global`, `iothread`, `hybrid`, `fine`), after the Seoul thesis
//! (Partheymüller, *Adding SMP Support to a User-Level VMM*). It boots a PVH ELF guest (docs/guest-abi.md) or
//! a Linux kernel (PVH `vmlinux` or bzImage, `boot`) with N vCPUs and
//! measures how device emulation is serialized. See docs/vmm.md.

pub mod boot;
pub mod bus;
pub mod collect;
pub mod command;
pub mod control;
pub mod devices;
pub mod error;
pub mod exits;
pub mod fuzz_guest;
pub mod host;
mod io_thread;
pub mod irq_route;
pub mod irqchip;
pub mod kvm_stats;
pub mod placement;
pub mod rss;
pub mod run;
pub mod seccomp;
mod seccomp_filters;
mod seccomp_names;
pub mod start_gate;
pub mod stress;
pub mod test_guest;
pub mod user_irqchip;
pub mod vcpu;
pub mod vm;

pub use bus::{AddressSpace, Bus, BusBuilder, BusClient, Route, SyncMode, UnknownSyncMode};
pub use error::{RegisterDump, VmmError};
pub use exits::{ExitCounts, ExitReason};
pub use placement::Placement;
pub use run::run_vm;
pub use start_gate::{GateTicket, StartGate};
pub use vcpu::{Entry, Exit, ExitAction, Kicker, Vcpu, VcpuInterrupts};
pub use vm::{kvm_capabilities, max_vcpus, Irqchip, Vm};

use std::path::PathBuf;
use std::time::Duration;

/// The guest kernel: a file or the bytes of one (a PVH ELF64 or a Linux bzImage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelImage {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

/// Where the guest's UART output goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConsoleSink {
    #[default]
    Stdout,
    /// Written to stderr as the guest prints it.
    Stderr,
    File(PathBuf),
    /// Kept in memory and returned in [`VmRun::console`].
    Capture,
    Discard,
}

/// Everything needed to run one VM.
#[derive(Debug, Clone)]
pub struct VmConfig {
    pub kernel: KernelImage,
    pub cmdline: String,
    /// PVH modules; module 0 is the encoded workload.
    pub modules: Vec<Vec<u8>>,
    /// A Linux initrd (initramfs): where the boot protocol puts it for a
    /// bzImage, PVH module 0 for a PVH kernel (`modules` must then be empty).
    pub initrd: Option<Vec<u8>>,
    pub vcpus: u32,
    pub mem_bytes: u64,
    pub sync: SyncMode,
    pub placement: Placement,
    /// Host CPU for the I/O thread (iothread and hybrid modes).
    pub io_cpu: Option<usize>,
    pub timeout: Option<Duration>,
    pub console: ConsoleSink,
    /// Busy time of the work device (port 0x530) per access, in nanoseconds.
    pub work_ns: u64,
    /// Register the work device as its not-thread-safe flavour
    /// ([`devices::ExclusiveWorkDevice`]), so it cannot bypass in `hybrid`/`fine`.
    pub work_exclusive: bool,
    /// A start gate shared with other VMs: the guest's "go" on the window port
    /// (docs/guest-abi.md) waits until every VM sharing it is ready.
    pub start_gate: Option<StartGate>,
    /// Run the vCPUs under a user-level scheduler shared with other VMs
    /// (`smplab host`, [`host::HostScheduler`]).
    pub host: Option<host::HostSlot>,
    /// KVM's in-kernel interrupt controllers, or smplab-vmm's own
    /// ([`user_irqchip`]: HLT then blocks the vCPU thread in the VMM).
    pub irqchip: Irqchip,
    /// With [`Irqchip::User`]: how long a halted vCPU thread polls before it
    /// sleeps (zero: no polling).
    pub vmm_halt_poll: Duration,
    /// The block device for `io` ops (`devices::block`); `None`: not registered.
    pub block: Option<devices::block::BlockConfig>,
    /// A handle to change the guest's block-interrupt routing while it runs
    /// ([`irq_route::IrqRoute`], docs/guest-abi.md "The routing page");
    /// `run_vm` binds it to this VM's memory before the vCPUs start. Under
    /// a host scheduler ([`VmConfig::host`]) its own handle is bound too.
    pub irq_route: Option<irq_route::IrqRoute>,
    /// Install each VMM thread's seccomp-bpf filter ([`seccomp`]; default:
    /// the process's, on unless a command's `--no-seccomp` set it off).
    pub seccomp: bool,
}

impl VmConfig {
    /// A config with defaults: 1 vCPU, 64 MiB, fine sync, floating, console on stdout.
    pub fn new(kernel: KernelImage) -> Self {
        VmConfig {
            kernel,
            cmdline: String::new(),
            modules: Vec::new(),
            initrd: None,
            vcpus: 1,
            mem_bytes: 64 << 20,
            sync: SyncMode::Fine,
            placement: Placement::Floating,
            io_cpu: None,
            timeout: None,
            console: ConsoleSink::Stdout,
            work_ns: 0,
            work_exclusive: false,
            start_gate: None,
            host: None,
            irqchip: Irqchip::Kernel,
            vmm_halt_poll: Duration::ZERO,
            block: None,
            irq_route: None,
            seccomp: seccomp::process_default(),
        }
    }
}

/// How the guest ended the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuestStop {
    /// It wrote this status to the debug-exit port 0x501.
    DebugExit(u32),
    /// ACPI soft-off (the FADT's sleep control register, `devices::power`).
    PowerOff,
    /// A reset: the FADT's reset register (port 0xcf9) or the i8042's pulse.
    Reset,
}

/// What a finished VM run produced.
#[derive(Debug, Clone)]
pub struct VmRun {
    /// The value the guest wrote to the debug-exit port 0x501 (0 when it
    /// powered off or reset instead: see `stop`).
    pub exit_code: u32,
    /// How the guest ended the run.
    pub stop: GuestStop,
    /// The bytes the guest wrote to the result port 0x520.
    pub result: Vec<u8>,
    /// Console output when [`ConsoleSink::Capture`] was chosen.
    pub console: Vec<u8>,
    /// Wall time of the whole run including VM construction.
    pub wall: Duration,
    pub section: smplab_record::vmm::VmmSection,
    /// The block device's counts and latencies, when one was registered.
    pub block: Option<devices::BlockStats>,
    /// The interrupt controllers' broken invariants at the end of the run
    /// (`irqchip::invariants`): the VMM's models with `--irqchip user`, what
    /// `KVM_GET_LAPIC`/`KVM_GET_IRQCHIP` show with the in-kernel one. Empty
    /// when every invariant holds.
    pub irqchip_violations: Vec<irqchip::IrqchipViolation>,
}
