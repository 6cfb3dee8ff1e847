//! A [`Vcpu`]: one vCPU fd, its door to the device bus, and its exit counters.
//!
//! [`Vcpu::run`] enters the guest once (KVM_RUN) and classifies why it came back
//! as an [`Exit`] that no longer borrows `kvm_run`; [`Vcpu::handle_exit`] routes
//! that exit: port I/O and MMIO to the bus, except the MMIO window, HLT and
//! interrupt-window exits a per-vCPU [`VcpuInterrupts`] claims (a user-space
//! interrupt controller; with KVM's in-kernel irqchip there is none).
//!
//! Stopping: a [`Kicker`] sets `kvm_run.immediate_exit` *before* it sends the kick
//! signal. A vCPU inside KVM_RUN leaves it on the signal; one about to enter sees
//! `immediate_exit` and KVM_RUN returns at once with EINTR. So one kick is never
//! lost and is never repeated.

use crate::bus::{AddressSpace, BusClient, ClientStats};
use crate::control::RunControl;
use crate::devices::window::{VcpuWindow, WindowCounts};
use crate::error::{RegisterDump, VmmError};
use crate::exits::{ExitCounts, ExitReason};
use kvm_ioctls::{VcpuExit, VcpuFd};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use vmm_sys_util::signal::{register_signal_handler, SIGRTMIN};

/// Guest-physical base of the xAPIC MMIO page.
pub const LAPIC_MMIO_BASE: u64 = 0xfee0_0000;

/// How long an AP that PVM has not started yet (KVM_RUN returns EAGAIN) waits
/// before trying again, instead of spinning.
const EAGAIN_BACKOFF: Duration = Duration::from_micros(50);

/// Why KVM_RUN returned, detached from the `kvm_run` borrow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Port I/O; the width, count and data are in `kvm_run.io`.
    Pio {
        port: u16,
        input: bool,
    },
    MmioRead {
        addr: u64,
        len: usize,
    },
    MmioWrite {
        addr: u64,
        len: usize,
        data: [u8; 8],
    },
    Hlt,
    IrqWindowOpen,
    /// EINTR: a kick.
    Interrupted,
    /// EAGAIN: on PVM, an AP not yet started by INIT/SIPI.
    NotStarted,
    Shutdown,
    InternalError {
        suberror: u32,
    },
    FailEntry {
        hardware_reason: u64,
        cpu: u32,
    },
    SystemEvent {
        kind: u32,
    },
    /// KVM_EXIT_MEMORY_FAULT, or EFAULT from KVM_RUN (address unknown: 0).
    MemoryFault {
        gpa: u64,
    },
    /// Any exit smplab-vmm has no handler for.
    Unhandled,
}

impl Exit {
    /// The one counter this exit goes to.
    pub fn reason(&self) -> ExitReason {
        match self {
            Exit::Pio { input: true, .. } => ExitReason::IoIn,
            Exit::Pio { input: false, .. } => ExitReason::IoOut,
            Exit::MmioRead { .. } => ExitReason::MmioRead,
            Exit::MmioWrite { .. } => ExitReason::MmioWrite,
            Exit::Hlt => ExitReason::Hlt,
            Exit::IrqWindowOpen => ExitReason::IrqWindowOpen,
            Exit::Interrupted => ExitReason::Intr,
            Exit::NotStarted => ExitReason::Eagain,
            Exit::Shutdown => ExitReason::Shutdown,
            Exit::InternalError { .. } => ExitReason::InternalError,
            Exit::FailEntry { .. } => ExitReason::FailEntry,
            Exit::SystemEvent { .. } => ExitReason::SystemEvent,
            Exit::MemoryFault { .. } => ExitReason::MemoryFault,
            Exit::Unhandled => ExitReason::Other,
        }
    }
}

/// What the run loop does after an exit was handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitAction {
    /// Enter the guest again.
    Resume,
    /// Leave the run loop (this vCPU is done).
    Stop,
}

/// Whether the run loop enters the guest after [`VcpuInterrupts::before_entry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Enter,
    /// Not now (e.g. an AP waiting for SIPI was woken without one): check the
    /// stop flag and ask again.
    Wait,
}

/// The exits a user-space interrupt controller owns, per vCPU. With KVM's
/// in-kernel irqchip a [`Vcpu`] has none and these exits are only counted (HLT
/// and interrupt windows do not reach user space then; LAPIC MMIO neither).
///
/// Called on the vCPU's own thread, with its bus client, so the controller's
/// own accesses take the sync mode's route and are measured. An implementation
/// that blocks (in [`VcpuInterrupts::halted`] or [`VcpuInterrupts::before_entry`])
/// must also wake when the vCPU's [`Kicker`] fires: register a waker with
/// [`Kicker::set_waker`].
pub trait VcpuInterrupts: Send {
    /// Where a guest access to `addr` goes on the bus instead (a controller's
    /// private window, e.g. this vCPU's own LAPIC page), or `None` to route it
    /// as is.
    fn translate(
        &mut self,
        space: AddressSpace,
        addr: u64,
        write: bool,
    ) -> Option<(AddressSpace, u64)>;
    /// Before every KVM_RUN: INIT/SIPI, NMIs, and inject a pending interrupt
    /// (KVM_INTERRUPT) or ask for an interrupt window.
    fn before_entry(&mut self, vcpu: &mut VcpuFd, bus: &mut BusClient) -> Result<Entry, VmmError>;
    /// The guest ran HLT: wait for an interrupt (or a kick) and say how to go on.
    fn halted(&mut self, vcpu: &mut VcpuFd, bus: &mut BusClient) -> Result<ExitAction, VmmError>;
    /// The guest can take an interrupt now (KVM_EXIT_IRQ_WINDOW_OPEN).
    fn interrupt_window_open(&mut self, vcpu: &mut VcpuFd);
}

/// A hold on the host CPU a vCPU thread takes before every KVM_RUN: a
/// user-level vCPU scheduler (`smplab host`) grants, samples and preempts
/// vCPUs through it. The vCPU knows only this hook, not the scheduler.
pub trait EntryGate: Send {
    /// Before every KVM_RUN, on the vCPU's thread: wait until this vCPU may
    /// run; `Stop` once its VM stops.
    fn before_entry(&mut self, fd: &mut VcpuFd, control: &RunControl) -> ExitAction;
    /// The vCPU thread leaves its run loop.
    fn finished(&mut self);
}

/// The real-time signal used to kick vCPU threads out of KVM_RUN.
fn kick_signal() -> i32 {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Nothing to do: the signal's only job is to make KVM_RUN return EINTR;
    // `immediate_exit` (set before the signal) covers a vCPU not yet inside it.
}

fn install_kick_handler() -> Result<(), VmmError> {
    // Process-wide and idempotent: installed once, the outcome remembered.
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let outcome = INSTALLED
        .get_or_init(|| register_signal_handler(kick_signal(), on_kick).map_err(|e| e.errno()));
    outcome.map_err(|errno| VmmError::Thread {
        name: "vCPU kick signal handler".into(),
        source: std::io::Error::from_raw_os_error(errno),
    })
}

/// `kvm_run.immediate_exit` of one vCPU (a byte in its kvm_run mapping).
struct ImmediateExit(*mut u8);

// SAFETY: the pointer is only dereferenced (as an AtomicU8) under the
// `KickTarget` lock while the mapping is alive (see `Kicker::kick`); it is
// plain data otherwise.
unsafe impl Send for ImmediateExit {}

type Waker = Arc<dyn Fn() + Send + Sync>;

#[derive(Default)]
struct KickTarget {
    /// Set while the vCPU fd (and its kvm_run mapping) exists.
    immediate_exit: Option<ImmediateExit>,
    /// Set while the vCPU's thread is inside [`Vcpu::run_until_stopped`].
    thread: Option<libc::pthread_t>,
    waker: Option<Waker>,
}

/// Makes one vCPU leave KVM_RUN (see the module comment); cheap to clone and
/// usable from any thread, before, during and after the vCPU runs.
#[derive(Clone, Default)]
pub struct Kicker {
    target: Arc<Mutex<KickTarget>>,
}

impl Kicker {
    fn lock(&self) -> std::sync::MutexGuard<'_, KickTarget> {
        self.target.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Set `immediate_exit`, then signal the vCPU thread (if it is running) and
    /// call the waker (if one is set). Whoever asks a vCPU to do something
    /// (e.g. [`RunControl::request_stop`]) does so before kicking.
    pub fn kick(&self) {
        self.signal(true);
    }

    /// Only make KVM_RUN return (`immediate_exit`, then the signal), without
    /// the waker: for a requester that wakes a vCPU blocked in the VMM itself
    /// (the user-space irqchip's sink, which knows whether it is halted).
    pub fn kick_guest(&self) {
        self.signal(false);
    }

    fn signal(&self, call_waker: bool) {
        let target = self.lock();
        if let Some(ImmediateExit(byte)) = target.immediate_exit {
            // SAFETY: `byte` points into the vCPU's kvm_run mapping, which is
            // alive while it is registered: `Vcpu::drop` unregisters it under
            // this lock before the fd is closed. KVM reads the byte at entry; the
            // vCPU thread clears it with an atomic swap (`Vcpu::acknowledge_kick`).
            unsafe { AtomicU8::from_ptr(byte) }.store(1, Ordering::Release);
        }
        if let Some(thread) = target.thread {
            // SAFETY: the thread is registered only while it is inside
            // `run_until_stopped`, and unregisters under this lock before it
            // leaves, so the pthread_t names a live thread.
            unsafe {
                libc::pthread_kill(thread, kick_signal());
            }
        }
        if let (true, Some(waker)) = (call_waker, &target.waker) {
            waker();
        }
    }

    /// Also call `waker` on every kick (e.g. to wake a vCPU blocked in HLT).
    pub fn set_waker(&self, waker: Waker) {
        self.lock().waker = Some(waker);
    }
}

/// Registers the current thread with a [`Kicker`] until dropped.
struct RunningThread(Kicker);

impl RunningThread {
    fn register(kicker: &Kicker) -> Self {
        // SAFETY: pthread_self has no preconditions.
        kicker.lock().thread = Some(unsafe { libc::pthread_self() });
        RunningThread(kicker.clone())
    }
}

impl Drop for RunningThread {
    fn drop(&mut self) {
        self.0.lock().thread = None;
    }
}

/// One vCPU: its fd, its bus client, its exit counters.
pub struct Vcpu {
    index: u32,
    fd: VcpuFd,
    bus: BusClient,
    interrupts: Option<Box<dyn VcpuInterrupts>>,
    exits: ExitCounts,
    /// Returns of KVM_RUN (each is counted under exactly one exit reason).
    kvm_runs: u64,
    kicker: Kicker,
    /// RAM size, for the message of a guest access outside it.
    mem_bytes: u64,
    /// Splits the counts at the workload window's edges (devices::window).
    window: Option<VcpuWindow>,
    /// A user-level scheduler's grant (`smplab host`).
    grant: Option<Box<dyn EntryGate>>,
}

impl Vcpu {
    pub fn new(
        index: u32,
        mut fd: VcpuFd,
        bus: BusClient,
        mem_bytes: u64,
    ) -> Result<Self, VmmError> {
        install_kick_handler()?;
        let run: *mut kvm_bindings::kvm_run = fd.get_kvm_run();
        // SAFETY: `run` is the live kvm_run mapping of `fd`; addr_of_mut! makes
        // a pointer to one field without creating a reference.
        let byte = unsafe { std::ptr::addr_of_mut!((*run).immediate_exit) };
        let kicker = Kicker::default();
        kicker.lock().immediate_exit = Some(ImmediateExit(byte));
        Ok(Vcpu {
            index,
            fd,
            bus,
            interrupts: None,
            exits: ExitCounts::default(),
            kvm_runs: 0,
            kicker,
            mem_bytes,
            window: None,
            grant: None,
        })
    }

    /// Count exits inside the workload window apart (see [`VcpuWindow`]).
    pub fn set_window(&mut self, window: VcpuWindow) {
        self.window = Some(window);
    }

    /// This vCPU's exits inside the workload window, once it has stopped;
    /// `None` without a window or if it never opened.
    pub fn take_window_counts(&mut self) -> Option<WindowCounts> {
        self.window.take()?.finish(&self.exits, &self.bus.stats)
    }

    pub fn index(&self) -> u32 {
        self.index
    }

    pub fn fd(&self) -> &VcpuFd {
        &self.fd
    }

    /// A handle that stops this vCPU's current or next KVM_RUN.
    pub fn kicker(&self) -> Kicker {
        self.kicker.clone()
    }

    /// Run only while `grant` says so (a user-level scheduler).
    pub fn set_grant(&mut self, grant: Box<dyn EntryGate>) {
        self.grant = Some(grant);
    }

    /// Route HLT, interrupt-window and the controller's MMIO exits to `interrupts`.
    pub fn set_interrupts(&mut self, interrupts: Box<dyn VcpuInterrupts>) {
        self.interrupts = Some(interrupts);
    }

    pub fn exit_counts(&self) -> &ExitCounts {
        &self.exits
    }

    /// How often KVM_RUN returned.
    pub fn kvm_runs(&self) -> u64 {
        self.kvm_runs
    }

    /// This vCPU's bus measurements.
    pub fn bus_stats(&self) -> &ClientStats {
        &self.bus.stats
    }

    /// Run until `control` asks to stop, the guest crashes, or a handler stops.
    pub fn run_until_stopped(&mut self, control: &RunControl) -> Result<(), VmmError> {
        let _running = RunningThread::register(&self.kicker);
        let outcome = self.run_loop(control);
        if let Some(grant) = &mut self.grant {
            grant.finished();
        }
        outcome
    }

    fn run_loop(&mut self, control: &RunControl) -> Result<(), VmmError> {
        while !control.should_stop() {
            if let Some(grant) = &mut self.grant {
                if grant.before_entry(&mut self.fd, control) == ExitAction::Stop {
                    break;
                }
            }
            if let Some(interrupts) = &mut self.interrupts {
                if interrupts.before_entry(&mut self.fd, &mut self.bus)? == Entry::Wait {
                    continue;
                }
            }
            let exit = self.run()?;
            if self.handle_exit(exit)? == ExitAction::Stop {
                break;
            }
        }
        Ok(())
    }

    /// Enter the guest once and say why it came back.
    pub fn run(&mut self) -> Result<Exit, VmmError> {
        self.kvm_runs += 1;
        let exit = match self.fd.run() {
            // The access width is only in kvm_run (the slice kvm-ioctls hands out
            // is size * count bytes), so port I/O data is read in handle_pio.
            Ok(VcpuExit::IoIn(port, _)) => Exit::Pio { port, input: true },
            Ok(VcpuExit::IoOut(port, _)) => Exit::Pio { port, input: false },
            Ok(VcpuExit::MmioRead(addr, data)) => Exit::MmioRead {
                addr,
                len: data.len().min(8),
            },
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                let len = data.len().min(8);
                let mut bytes = [0u8; 8];
                bytes[..len].copy_from_slice(&data[..len]);
                Exit::MmioWrite {
                    addr,
                    len,
                    data: bytes,
                }
            }
            Ok(VcpuExit::Hlt) => Exit::Hlt,
            Ok(VcpuExit::IrqWindowOpen) => Exit::IrqWindowOpen,
            Ok(VcpuExit::Shutdown) => Exit::Shutdown,
            Ok(VcpuExit::InternalError) => Exit::InternalError { suberror: 0 },
            Ok(VcpuExit::FailEntry(hardware_reason, cpu)) => Exit::FailEntry {
                hardware_reason,
                cpu,
            },
            Ok(VcpuExit::SystemEvent(kind, _)) => Exit::SystemEvent { kind },
            Ok(VcpuExit::MemoryFault { gpa, .. }) => Exit::MemoryFault { gpa },
            Ok(_) => Exit::Unhandled,
            Err(e) if e.errno() == libc::EINTR => Exit::Interrupted,
            Err(e) if e.errno() == libc::EAGAIN => Exit::NotStarted,
            Err(e) if e.errno() == libc::EFAULT => Exit::MemoryFault { gpa: 0 },
            Err(source) => {
                return Err(VmmError::Kvm {
                    call: "KVM_RUN",
                    source,
                })
            }
        };
        Ok(match exit {
            Exit::InternalError { .. } => {
                // SAFETY: exit_reason is KVM_EXIT_INTERNAL_ERROR, so the `internal`
                // member of the union is the one KVM filled.
                let suberror = unsafe { self.fd.get_kvm_run().__bindgen_anon_1.internal.suberror };
                Exit::InternalError { suberror }
            }
            other => other,
        })
    }

    /// Count `exit` and act on it: devices, the interrupt controller, or an error
    /// (with this vCPU's registers) for an exit the guest cannot continue from.
    pub fn handle_exit(&mut self, exit: Exit) -> Result<ExitAction, VmmError> {
        if let Some(window) = &mut self.window {
            window.observe(&self.exits, &self.bus.stats);
        }
        self.exits.count(exit.reason());
        match exit {
            Exit::Pio { port, input } => self.handle_pio(port, input),
            Exit::MmioRead { addr, len } => {
                let mut data = [0u8; 8];
                // Unclaimed: an open bus (all-ones, counted by the bus), as for ports.
                self.mmio_read(addr, &mut data[..len]);
                let run = self.fd.get_kvm_run();
                // SAFETY: exit_reason is KVM_EXIT_MMIO (this exit was just
                // classified so), so `mmio` is the union member KVM filled and
                // reads the data back from on the next KVM_RUN.
                unsafe { run.__bindgen_anon_1.mmio.data[..len].copy_from_slice(&data[..len]) };
            }
            Exit::MmioWrite { addr, len, data } => {
                // Unclaimed: dropped and counted by the bus, as for ports.
                self.mmio_write(addr, &data[..len]);
            }
            Exit::Hlt => {
                if let Some(interrupts) = &mut self.interrupts {
                    return interrupts.halted(&mut self.fd, &mut self.bus);
                }
            }
            Exit::IrqWindowOpen => {
                if let Some(interrupts) = &mut self.interrupts {
                    interrupts.interrupt_window_open(&mut self.fd);
                }
            }
            Exit::Interrupted => self.acknowledge_kick(),
            Exit::NotStarted => std::thread::sleep(EAGAIN_BACKOFF),
            Exit::Shutdown => {
                return Err(self.crash("triple fault or shutdown (KVM_EXIT_SHUTDOWN)".into()))
            }
            Exit::InternalError { suberror } => {
                let what = if suberror == 1 {
                    "emulation failure: the guest ran an instruction KVM's emulator cannot handle (on PVM hosts also a fault with no usable IDT)"
                } else {
                    "KVM internal error"
                };
                return Err(self.crash(format!(
                    "{what} (KVM_EXIT_INTERNAL_ERROR, suberror {suberror})"
                )));
            }
            Exit::FailEntry {
                hardware_reason,
                cpu,
            } => {
                return Err(self.crash(format!(
                    "VM entry failed (KVM_EXIT_FAIL_ENTRY, hardware reason {hardware_reason:#x} on host CPU {cpu}): invalid guest state"
                )))
            }
            Exit::SystemEvent { kind } => {
                return Err(self.crash(format!(
                    "guest requested system event {kind} (shutdown/reset/crash)"
                )))
            }
            Exit::MemoryFault { gpa } => return Err(self.memory_fault(gpa)),
            Exit::Unhandled => return Err(self.crash("unhandled exception exit".into())),
        }
        Ok(ExitAction::Resume)
    }

    /// Clear `immediate_exit` after a kick. A swap, so that a kick whose store
    /// it consumes also makes the kicker's request (e.g. the stop flag) visible;
    /// a kick after it finds the byte clear and sets it for the next KVM_RUN.
    fn acknowledge_kick(&mut self) {
        let run: *mut kvm_bindings::kvm_run = self.fd.get_kvm_run();
        // SAFETY: the kvm_run mapping lives as long as `self.fd`; the byte is
        // only ever accessed atomically by user space (see `Kicker::kick`).
        let byte = unsafe { AtomicU8::from_ptr(std::ptr::addr_of_mut!((*run).immediate_exit)) };
        byte.swap(0, Ordering::Acquire);
    }

    /// `addr` as the interrupt controller translates it, else unchanged.
    fn route(&mut self, space: AddressSpace, addr: u64, write: bool) -> (AddressSpace, u64) {
        self.interrupts
            .as_mut()
            .and_then(|i| i.translate(space, addr, write))
            .unwrap_or((space, addr))
    }

    /// An MMIO read through the bus. False if nothing claims `addr`.
    fn mmio_read(&mut self, addr: u64, data: &mut [u8]) -> bool {
        let (space, addr) = self.route(AddressSpace::Mmio, addr, false);
        self.bus.read(space, addr, data)
    }

    fn mmio_write(&mut self, addr: u64, data: &[u8]) -> bool {
        let (space, addr) = self.route(AddressSpace::Mmio, addr, true);
        self.bus.write(space, addr, data)
    }

    /// The port I/O of the exit just taken, split into the guest's accesses:
    /// `size` bytes each, `count` times (string I/O such as `rep outsb` repeats
    /// the access).
    fn handle_pio(&mut self, port: u16, input: bool) {
        let (space, addr) = self.route(AddressSpace::Pio, u64::from(port), !input);
        let run = self.fd.get_kvm_run();
        // SAFETY: called right after KVM_RUN returned KVM_EXIT_IO, so `io` is the
        // union member KVM filled in.
        let io = unsafe { run.__bindgen_anon_1.io };
        let size = usize::from(io.size).clamp(1, 8);
        let len = size.saturating_mul(usize::try_from(io.count).unwrap_or(usize::MAX));
        let base = (run as *mut kvm_bindings::kvm_run).cast::<u8>();
        // SAFETY: for a port-I/O exit KVM puts the `size * count` data bytes at
        // `data_offset` inside the kvm_run mapping of this vCPU (kvm-ioctls builds
        // its IoIn/IoOut slices the same way); the slice is the only live
        // reference into kvm_run and ends with this function, before the next
        // KVM_RUN.
        // Cast: KVM puts the I/O data inside the mmap-ed kvm_run page, so the
        // offset is small.
        #[allow(clippy::cast_possible_truncation)]
        let data =
            unsafe { std::slice::from_raw_parts_mut(base.add(io.data_offset as usize), len) };
        for chunk in data.chunks_mut(size) {
            if input {
                self.bus.read(space, addr, chunk);
            } else {
                self.bus.write(space, addr, chunk);
            }
        }
    }

    fn crash(&self, reason: String) -> VmmError {
        VmmError::GuestCrash {
            vcpu: self.index,
            reason,
            registers: RegisterDump::capture(self.index, &self.fd),
        }
    }

    fn memory_fault(&self, addr: u64) -> VmmError {
        VmmError::GuestMemoryFault {
            vcpu: self.index,
            addr,
            mem_bytes: self.mem_bytes,
            registers: RegisterDump::capture(self.index, &self.fd),
        }
    }

    /// The registers of this vCPU, for an error report.
    pub fn registers(&self) -> RegisterDump {
        RegisterDump::capture(self.index, &self.fd)
    }
}

impl Drop for Vcpu {
    fn drop(&mut self) {
        // The kvm_run mapping goes with the fd (dropped after this): no kick may
        // write into it from now on.
        self.kicker.lock().immediate_exit = None;
    }
}
