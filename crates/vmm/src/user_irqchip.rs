//! `--irqchip user`: the interrupt-controller models of [`crate::irqchip`] wired
//! into a VM (Seoul thesis §4.4). No `KVM_CREATE_IRQCHIP`: HLT, LAPIC/IOAPIC MMIO,
//! the PIC's ports and interrupt windows exit to user space, and this module
//! handles them.
//!
//! Per VM: the models on the bus ([`UserIrqchip::attach`], under the sync
//! mode's routes), a [`VmSink`] that turns the models' events into per-vCPU
//! [`VcpuSignals`], and a [`TimerThread`] for the LAPIC timers
//! ([`UserIrqchip::start_timers`]). Per vCPU: a [`UserInterrupts`], the
//! [`VcpuInterrupts`] hook of its [`crate::Vcpu`]. Every access the hook makes
//! (INTA, PENDING, INIT_RESET, IOAPIC EOI) goes through the vCPU's own
//! [`BusClient`], so it takes the mode's route and is measured like the guest's.
//!
//! **No lost wake-up.** Raising is "set IRR, then [`IrqchipEvent::Kick`]"; the
//! sink sets the vCPU's `hint`, then reads whether the vCPU is halted in the
//! VMM: if so it wakes its [`HaltWaiter`], otherwise it kicks it out of KVM_RUN
//! (`immediate_exit`, then the signal: [`Kicker::kick_guest`]). The vCPU
//! stores `halted` before its last look at `hint`, and clears it before it reads
//! `PENDING`/`INTA` again, so (sequentially consistent atomics) either the
//! raiser sees it halted and wakes it, or the vCPU sees the hint. A kick that
//! finds nothing is harmless (pull model, Seoul thesis §4.4.1.1).
//!
//! **Locks.** The sink runs inside a device handler (under the global lock, a
//! device lock or on the I/O thread) and takes only leaves: a vCPU's `Kicker`
//! target, its `HaltWaiter` mutex, the timer thread's state, the EOI queue.
//! None of them is held while taking a bus or device lock.

use crate::bus::{AddressSpace, BusBuilder, BusClient, SyncMode};
use crate::error::VmmError;
use crate::irqchip::{
    self, ioapic_bus_address, lapic_bus_address, lapic_control_address, lapic_ctl, pic_bus_address,
    pic_control_address, pic_ctl, Flavor, HaltEnd, HaltWaiter, IrqchipConfig, IrqchipEvent,
    IrqchipSink, MonotonicClock, TimerHandle, TimerThread, IOAPIC_GPA, NO_VECTOR,
};
use crate::vcpu::{Entry, ExitAction, Kicker, VcpuInterrupts};
use hdrhistogram::Histogram;
use kvm_bindings::{kvm_regs, kvm_sregs};
use kvm_ioctls::VcpuFd;
use smplab_record::vmm::UserIrqchipStats;
use smplab_record::LatencyHistogram;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

const SC: Ordering = Ordering::SeqCst;

vmm_sys_util::ioctl_iow_nr!(
    KVM_INTERRUPT,
    kvm_bindings::KVMIO,
    0x86,
    kvm_bindings::kvm_interrupt
);

/// Inject `vector` as an external interrupt (`KVM_INTERRUPT`; only valid
/// without an in-kernel irqchip, when `ready_for_interrupt_injection` is set).
fn inject(fd: &VcpuFd, vector: u8) -> Result<(), VmmError> {
    let irq = kvm_bindings::kvm_interrupt {
        irq: u32::from(vector),
    };
    // SAFETY: KVM_INTERRUPT reads one `kvm_interrupt` from the pointer, which
    // refers to a live local; the fd is a vCPU fd owned by `fd`.
    let ret = unsafe { vmm_sys_util::ioctl::ioctl_with_ref(fd, KVM_INTERRUPT(), &irq) };
    if ret < 0 {
        return Err(VmmError::Kvm {
            call: "KVM_INTERRUPT",
            source: kvm_ioctls::Error::last(),
        });
    }
    Ok(())
}

/// KVM's paravirtual feature leaf (CPUID 0x4000_0001, EAX: feature bits).
const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// The KVM paravirtual features KVM carries out through its in-kernel LAPIC,
/// which `--irqchip user` does not have: async page faults (bit 4 and the
/// vector-delivered forms, bits 10 and 14: KVM injects "page ready" into its
/// own LAPIC and refuses their MSR without one), PV EOI (bit 6: KVM sets the
/// skip-EOI flag only for interrupts it injected itself), PV unhalt (bit 7:
/// a paravirtual spinlock waiter halts with interrupts off and waits for
/// KVM_HC_KICK_CPU, which KVM delivers only through its LAPIC map, so the
/// waiter, halted in the VMM, would never wake), PV send-IPI (bit 11:
/// KVM_HC_SEND_IPI goes through the same map, so the IPIs would be lost) and
/// PV sched-yield (bit 13: its target is looked up in that map). Without
/// these bits Linux uses the xAPIC's ICR, EOI register and plain spinlocks,
/// which the models serve.
const KVM_FEATURES_NEEDING_KERNEL_LAPIC: u32 =
    1 << 4 | 1 << 6 | 1 << 7 | 1 << 10 | 1 << 11 | 1 << 13 | 1 << 14;

/// Hide from one CPUID entry what only an in-kernel LAPIC provides (for
/// `--irqchip user`; `crate::vm` calls it for every entry). CPUID.1's x2APIC
/// and TSC-deadline bits are cleared where leaf 1 is built.
pub fn hide_kernel_lapic_features(entry: &mut kvm_bindings::kvm_cpuid_entry2) {
    if entry.function == KVM_CPUID_FEATURES {
        entry.eax &= !KVM_FEATURES_NEEDING_KERNEL_LAPIC;
    }
}

/// What the models asked of one vCPU, set by the [`VmSink`] on any thread and
/// consumed by that vCPU's thread.
#[derive(Default)]
pub struct VcpuSignals {
    halt: HaltWaiter,
    /// The vCPU thread is blocked (or about to block) in its `HaltWaiter`.
    halted: AtomicBool,
    /// An interrupt may have become pending: read `PENDING`/`INTA` before entry.
    hint: AtomicBool,
    nmi: AtomicBool,
    init: AtomicBool,
    /// `0x100 | vector` of the last SIPI not yet taken, 0 for none.
    sipi: AtomicU32,
    /// The PIC requests service (vCPU 0 only, through LINT0 as ExtINT).
    extint: AtomicBool,
    kicker: OnceLock<Kicker>,
}

impl VcpuSignals {
    /// Make the vCPU look at its flags: wake it from HLT, or make KVM_RUN exit.
    fn notify(&self) {
        if self.halted.load(SC) {
            self.halt.wake();
        } else if let Some(kicker) = self.kicker.get() {
            // Out of KVM_RUN (immediate_exit, then the signal). No wake: a vCPU
            // that halts after the load above stored `halted` after it, so its
            // last look at the flags (`wants_attention`) sees ours. A wake here
            // would only leave a stale one that ends its next HLT at once.
            kicker.kick_guest();
        }
    }

    /// Anything that should end a halt.
    fn wants_attention(&self) -> bool {
        self.hint.load(SC)
            || self.nmi.load(SC)
            || self.init.load(SC)
            || self.sipi.load(SC) != 0
            || self.extint.load(SC)
    }
}

/// The VMM's [`IrqchipSink`]: events into per-vCPU signals, timer deadlines
/// into the timer thread, level EOIs into a queue the vCPUs forward to the IOAPIC.
pub struct VmSink {
    vcpus: Vec<Arc<VcpuSignals>>,
    timers: OnceLock<TimerHandle>,
    eoi_queue: Mutex<Vec<u8>>,
    eoi_pending: AtomicBool,
}

impl VmSink {
    pub fn new(vcpus: u32) -> VmSink {
        VmSink {
            vcpus: (0..vcpus)
                .map(|_| Arc::new(VcpuSignals::default()))
                .collect(),
            timers: OnceLock::new(),
            eoi_queue: Mutex::new(Vec::new()),
            eoi_pending: AtomicBool::new(false),
        }
    }

    fn signals(&self, vcpu: u32) -> Option<&Arc<VcpuSignals>> {
        self.vcpus.get(vcpu as usize)
    }

    fn take_eois(&self) -> Vec<u8> {
        if !self.eoi_pending.swap(false, SC) {
            return Vec::new();
        }
        std::mem::take(&mut *self.eoi_queue.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl IrqchipSink for VmSink {
    fn event(&self, event: IrqchipEvent) {
        match event {
            IrqchipEvent::Kick { vcpu } => {
                if let Some(s) = self.signals(vcpu) {
                    s.hint.store(true, SC);
                    s.notify();
                }
            }
            IrqchipEvent::Nmi { vcpu } => {
                if let Some(s) = self.signals(vcpu) {
                    s.nmi.store(true, SC);
                    s.notify();
                }
            }
            IrqchipEvent::Init { vcpu } => {
                if let Some(s) = self.signals(vcpu) {
                    s.init.store(true, SC);
                    s.notify();
                }
            }
            IrqchipEvent::Startup { vcpu, vector } => {
                if let Some(s) = self.signals(vcpu) {
                    s.sipi.store(0x100 | u32::from(vector), SC);
                    s.notify();
                }
            }
            IrqchipEvent::TimerDeadline { vcpu, deadline_ns } => {
                if let Some(timers) = self.timers.get() {
                    timers.arm(vcpu, deadline_ns);
                }
            }
            IrqchipEvent::EoiBroadcast { vector } => {
                self.eoi_queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(vector);
                self.eoi_pending.store(true, SC);
            }
            IrqchipEvent::ExtInt => {
                if let Some(s) = self.signals(0) {
                    s.extint.store(true, SC);
                    s.notify();
                }
            }
        }
    }
}

/// Counters and the wake-up histogram shared by a VM's vCPU hooks.
struct Shared {
    sink: Arc<VmSink>,
    halt_poll: Duration,
    injected: AtomicU64,
    nmis: AtomicU64,
    halts_polled: AtomicU64,
    halts_slept: AtomicU64,
    wake_latency: Mutex<Histogram<u64>>,
}

/// The registers a vCPU had at creation (KVM's reset state), for INIT/SIPI.
#[derive(Clone)]
pub struct ResetState {
    regs: kvm_regs,
    sregs: kvm_sregs,
}

impl ResetState {
    /// Read `fd`'s registers; call before anything changed them.
    pub fn capture(fd: &VcpuFd) -> Result<ResetState, VmmError> {
        Ok(ResetState {
            regs: fd.get_regs().map_err(VmmError::kvm("KVM_GET_REGS"))?,
            sregs: fd.get_sregs().map_err(VmmError::kvm("KVM_GET_SREGS"))?,
        })
    }

    /// Start `fd` in real mode at `vector << 12` (what a SIPI does: CS =
    /// vector << 8, IP = 0, everything else as after INIT).
    fn start_at(&self, fd: &VcpuFd, vector: u8) -> Result<(), VmmError> {
        let mut sregs = self.sregs;
        sregs.cs.selector = u16::from(vector) << 8;
        sregs.cs.base = u64::from(vector) << 12;
        let mut regs = self.regs;
        regs.rip = 0;
        fd.set_sregs(&sregs)
            .map_err(VmmError::kvm("KVM_SET_SREGS"))?;
        fd.set_regs(&regs).map_err(VmmError::kvm("KVM_SET_REGS"))
    }
}

/// A VM's user-space interrupt controllers: the models, the sink, the timers.
pub struct UserIrqchip {
    chip: irqchip::Irqchip,
    shared: Arc<Shared>,
    clock: Arc<MonotonicClock>,
    vcpus: u32,
    timers: Option<TimerThread>,
}

impl UserIrqchip {
    /// Put the LAPIC set, IOAPIC and PIC on `builder` as `mode` prescribes
    /// (thread-safe LAPIC set and PIC in `hybrid`, exclusive elsewhere).
    pub fn attach(
        builder: &mut BusBuilder,
        mode: SyncMode,
        vcpus: u32,
        halt_poll: Duration,
    ) -> Result<UserIrqchip, VmmError> {
        let sink = Arc::new(VmSink::new(vcpus));
        let clock = Arc::new(MonotonicClock::new());
        let chip = irqchip::register(
            builder,
            Flavor::for_mode(mode),
            &IrqchipConfig {
                vcpus,
                sink: sink.clone(),
                clock: clock.clone(),
            },
        )
        .map_err(|e| VmmError::BadConfig(e.to_string()))?;
        Ok(UserIrqchip {
            chip,
            shared: Arc::new(Shared {
                sink,
                halt_poll,
                injected: AtomicU64::new(0),
                nmis: AtomicU64::new(0),
                halts_polled: AtomicU64::new(0),
                halts_slept: AtomicU64::new(0),
                wake_latency: Mutex::new(smplab_record::histogram::new_histogram()),
            }),
            clock,
            vcpus,
            timers: None,
        })
    }

    /// Start the LAPIC timer thread; each expiry is a `TIMER_EXPIRED` write
    /// through its own bus client (a posted write under `iothread`).
    pub fn start_timers(&mut self, mut client: BusClient) -> Result<(), VmmError> {
        let timers = TimerThread::start(self.vcpus, self.clock.clone(), move |vcpu, deadline| {
            let addr = lapic_control_address(vcpu, lapic_ctl::TIMER_EXPIRED);
            client.write(AddressSpace::Mmio, addr, &deadline.to_le_bytes());
        })
        .map_err(|source| VmmError::Thread {
            name: "smplab-timer".into(),
            source,
        })?;
        let _ = self.shared.sink.timers.set(timers.handle());
        self.timers = Some(timers);
        Ok(())
    }

    /// The models' invariants (`irqchip::invariants`), for after the run.
    pub fn check_invariants(&self) -> Vec<crate::irqchip::IrqchipViolation> {
        self.chip.check_invariants()
    }

    /// Stop the timer thread (before the bus shuts down).
    pub fn stop_timers(&mut self) {
        self.timers = None;
    }

    /// The hook of vCPU `index`, whose thread `kicker` kicks. APs (index > 0)
    /// wait for SIPI; `reset` is the vCPU's state at creation.
    pub fn vcpu_hook(&self, index: u32, kicker: Kicker, reset: ResetState) -> UserInterrupts {
        let signals = self.shared.sink.vcpus[index as usize].clone();
        let for_waker = signals.clone();
        kicker.set_waker(Arc::new(move || for_waker.halt.wake()));
        let _ = signals.kicker.set(kicker);
        UserInterrupts {
            index,
            signals,
            shared: self.shared.clone(),
            waiting_for_sipi: index != 0,
            recheck: true,
            reset,
        }
    }

    /// Input `pin` of the IOAPIC model as a device's interrupt line.
    pub fn irq_line(&self, pin: u32) -> Arc<dyn crate::devices::IrqLine> {
        Arc::new(UserIrqLine {
            ioapic: self.chip.ioapic.clone(),
            pin: u64::from(pin),
        })
    }

    /// The record's `user_irqchip` section.
    pub fn stats(&self) -> UserIrqchipStats {
        let s = &self.shared;
        let hist = s.wake_latency.lock().unwrap_or_else(|e| e.into_inner());
        UserIrqchipStats {
            injected: s.injected.load(SC),
            nmis: s.nmis.load(SC),
            halts_polled: s.halts_polled.load(SC),
            halts_slept: s.halts_slept.load(SC),
            halt_poll_ns: u64::try_from(s.halt_poll.as_nanos()).unwrap_or(u64::MAX),
            wake_latency: (!hist.is_empty()).then(|| LatencyHistogram::from_hdr(&hist)),
            ignored: self
                .chip
                .counters
                .snapshot()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(name, n)| (name.to_string(), n))
                .collect(),
        }
    }
}

/// An input pin of the IOAPIC model, driven straight into the model rather
/// than through the bus: the block device lowers its line inside a guest's
/// access to it, where a second bus access could deadlock (`global` holds the
/// bus lock; `iothread` would wait on its own queue). Lock order: the
/// device's state, then the IOAPIC, then the LAPIC set and the sink's leaves
/// (the IOAPIC's own order); nothing takes a device's state under them.
struct UserIrqLine {
    ioapic: Arc<Mutex<irqchip::Ioapic>>,
    pin: u64,
}

impl crate::devices::IrqLine for UserIrqLine {
    fn set_level(&self, level: bool) {
        self.ioapic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .set_irq(self.pin, level);
    }
}

/// One vCPU's side of the user-space irqchip (see the module comment).
pub struct UserInterrupts {
    index: u32,
    signals: Arc<VcpuSignals>,
    shared: Arc<Shared>,
    waiting_for_sipi: bool,
    /// Read `PENDING`/`INTA` before the next entry even without a hint (after
    /// an EOI/TPR write, an interrupt window, a halt).
    recheck: bool,
    reset: ResetState,
}

fn read_u64(bus: &mut BusClient, addr: u64) -> u64 {
    let mut data = [0u8; 8];
    bus.read(AddressSpace::Mmio, addr, &mut data);
    u64::from_le_bytes(data)
}

/// A vector out of an `INTA`/`PENDING` read (`NO_VECTOR` or all-ones: none).
fn vector_of(value: u64) -> Option<u8> {
    u8::try_from(value).ok().filter(|_| value < NO_VECTOR)
}

impl UserInterrupts {
    fn lapic_read(&self, bus: &mut BusClient, register: u64) -> Option<u8> {
        vector_of(read_u64(bus, lapic_control_address(self.index, register)))
    }

    /// The PIC's vector, for vCPU 0 when the PIC asked for service and its
    /// LINT0 takes ExtINT. A closed LINT0 drops the request flag: the LAPIC
    /// raises `ExtInt` again when the guest opens LINT0, and the PIC keeps
    /// its request in IRR meanwhile (a closed LINT0 must not keep a halted
    /// vCPU awake).
    fn pic_read(&self, bus: &mut BusClient, register: u64) -> Option<u8> {
        if self.index != 0 || !self.signals.extint.load(SC) {
            return None;
        }
        let lint0 = read_u64(bus, lapic_control_address(0, lapic_ctl::LINT0_EXTINT));
        if lint0 != 1 {
            self.signals.extint.store(false, SC);
            return None;
        }
        let vector = vector_of(read_u64(bus, pic_control_address(register)));
        if vector.is_none() {
            self.signals.extint.store(false, SC);
        }
        vector
    }

    fn pending(&self, bus: &mut BusClient) -> Option<u8> {
        self.lapic_read(bus, lapic_ctl::PENDING)
            .or_else(|| self.pic_read(bus, pic_ctl::PENDING))
    }

    /// INIT and SIPI: `Ok(true)` when the vCPU may run.
    fn startup(&mut self, fd: &VcpuFd, bus: &mut BusClient) -> Result<bool, VmmError> {
        if self.signals.init.swap(false, SC) {
            let addr = lapic_control_address(self.index, lapic_ctl::INIT_RESET);
            bus.write(AddressSpace::Mmio, addr, &1u64.to_le_bytes());
            self.waiting_for_sipi = true;
        }
        let sipi = self.signals.sipi.swap(0, SC);
        if !self.waiting_for_sipi {
            return Ok(true); // a SIPI to a running vCPU is ignored
        }
        if sipi != 0 {
            let vector = u8::try_from(sipi & 0xff).unwrap_or(0);
            self.reset.start_at(fd, vector)?;
            self.waiting_for_sipi = false;
            self.recheck = true;
            return Ok(true);
        }
        // Wait for SIPI (or a stop, which kicks and so wakes the waiter).
        self.signals.halted.store(true, SC);
        let signals = &self.signals;
        signals.halt.halt(Duration::ZERO, || {
            signals.init.load(SC) || signals.sipi.load(SC) != 0
        });
        self.signals.halted.store(false, SC);
        Ok(false)
    }

    fn forward_eois(&self, bus: &mut BusClient) {
        for vector in self.shared.sink.take_eois() {
            if let Some(addr) = ioapic_bus_address(IOAPIC_GPA + 0x40) {
                bus.write(AddressSpace::Mmio, addr, &u32::from(vector).to_le_bytes());
            }
        }
    }
}

impl VcpuInterrupts for UserInterrupts {
    fn translate(
        &mut self,
        space: AddressSpace,
        addr: u64,
        write: bool,
    ) -> Option<(AddressSpace, u64)> {
        let local = match space {
            AddressSpace::Mmio => match lapic_bus_address(self.index, addr) {
                Some(local) => Some(local),
                None => return ioapic_bus_address(addr).map(|a| (AddressSpace::Mmio, a)),
            },
            AddressSpace::Pio => u16::try_from(addr).ok().and_then(pic_bus_address),
        }?;
        // An EOI, TPR, ICR or PIC command may make another vector deliverable.
        self.recheck |= write;
        Some((AddressSpace::Mmio, local))
    }

    fn before_entry(&mut self, fd: &mut VcpuFd, bus: &mut BusClient) -> Result<Entry, VmmError> {
        self.forward_eois(bus);
        let startup_due =
            self.waiting_for_sipi || self.signals.init.load(SC) || self.signals.sipi.load(SC) != 0;
        if startup_due && !self.startup(fd, bus)? {
            return Ok(Entry::Wait);
        }
        if self.signals.nmi.swap(false, SC) {
            fd.nmi().map_err(VmmError::kvm("KVM_NMI"))?;
            self.shared.nmis.fetch_add(1, Ordering::Relaxed);
        }
        let hinted = self.signals.hint.swap(false, SC);
        let (window_requested, can_inject) = {
            let run = fd.get_kvm_run();
            (
                run.request_interrupt_window != 0,
                run.ready_for_interrupt_injection != 0 && run.if_flag != 0,
            )
        };
        // A requested window that is still shut needs no new look at the LAPIC.
        if !(hinted || self.recheck || (window_requested && can_inject)) {
            return Ok(Entry::Enter);
        }
        self.recheck = false;
        if can_inject {
            let vector = self
                .lapic_read(bus, lapic_ctl::INTA)
                .or_else(|| self.pic_read(bus, pic_ctl::INTA));
            fd.get_kvm_run().request_interrupt_window = 0;
            if let Some(vector) = vector {
                inject(fd, vector)?;
                self.shared.injected.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            let pending = self.pending(bus).is_some();
            fd.get_kvm_run().request_interrupt_window = u8::from(pending);
        }
        Ok(Entry::Enter)
    }

    fn halted(&mut self, fd: &mut VcpuFd, bus: &mut BusClient) -> Result<ExitAction, VmmError> {
        self.recheck = true;
        let if_flag = fd.get_kvm_run().if_flag != 0;
        // Pull first: an interrupt raised before the HLT (e.g. in `sti; hlt`'s
        // shadow) is already in IRR and needs no wake-up.
        if if_flag && self.pending(bus).is_some() {
            self.shared.halts_polled.fetch_add(1, Ordering::Relaxed);
            return Ok(ExitAction::Resume);
        }
        let end = halt_until_woken(&self.signals, self.shared.halt_poll);
        match end {
            HaltEnd::Polled => {
                self.shared.halts_polled.fetch_add(1, Ordering::Relaxed);
            }
            HaltEnd::Woken { latency } => {
                self.shared.halts_slept.fetch_add(1, Ordering::Relaxed);
                let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
                let _ = self
                    .shared
                    .wake_latency
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(ns.max(1));
            }
        }
        Ok(ExitAction::Resume)
    }

    fn interrupt_window_open(&mut self, _: &mut VcpuFd) {
        self.recheck = true;
    }
}

/// Block a halted vCPU until something wants its attention: poll for
/// `poll`, then sleep on its `HaltWaiter`. `halted` is published first, so a
/// raiser either sees it and wakes the waiter or is seen through the hint.
fn halt_until_woken(signals: &VcpuSignals, poll: Duration) -> HaltEnd {
    signals.halted.store(true, SC);
    let end = signals.halt.halt(poll, || signals.wants_attention());
    signals.halted.store(false, SC);
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lost-kick scenario: an interrupt is raised (IRR bit, then `Kick`)
    /// while its target is between its last check and its sleep. Each round
    /// must end; a lost wake-up leaves the halter asleep and the test fails at
    /// its deadline instead of hanging.
    #[test]
    fn an_interrupt_raised_while_the_target_enters_hlt_wakes_it() {
        let sink = Arc::new(VmSink::new(1));
        let signals = sink.vcpus[0].clone();
        // A kicker without a vCPU: the sink's kick reaches nothing, so only the
        // halted/hint protocol can end a halt.
        let kicker = Kicker::default();
        let for_waker = signals.clone();
        kicker.set_waker(Arc::new(move || for_waker.halt.wake()));
        let _ = signals.kicker.set(kicker);
        let irr = Arc::new(AtomicBool::new(false));
        let rounds = 1_000u64;
        let taken = Arc::new(AtomicU64::new(0));
        let raiser = {
            let (sink, irr, taken) = (sink.clone(), irr.clone(), taken.clone());
            std::thread::spawn(move || {
                for round in 0..rounds {
                    while taken.load(SC) < round {
                        std::thread::yield_now();
                    }
                    irr.store(true, SC);
                    sink.event(IrqchipEvent::Kick { vcpu: 0 });
                }
            })
        };
        let (done, finished) = std::sync::mpsc::channel();
        let halter = {
            let (signals, irr, taken) = (signals.clone(), irr.clone(), taken.clone());
            std::thread::spawn(move || {
                for round in 0..rounds {
                    loop {
                        // The vCPU: consume the hint, check IRR (pull), else halt.
                        signals.hint.swap(false, SC);
                        if irr.swap(false, SC) {
                            break;
                        }
                        let poll = if round % 2 == 0 {
                            Duration::ZERO
                        } else {
                            Duration::from_micros(5)
                        };
                        halt_until_woken(&signals, poll);
                    }
                    taken.store(round + 1, SC);
                }
                let _ = done.send(());
            })
        };
        if finished.recv_timeout(Duration::from_secs(120)).is_err() {
            panic!(
                "wake-up lost: the halter is stuck after {} of {rounds} rounds",
                taken.load(SC)
            );
        }
        halter.join().expect("halter");
        raiser.join().expect("raiser");
        assert!(!signals.halted.load(SC));
    }

    #[test]
    fn the_kvm_features_that_need_an_in_kernel_lapic_are_hidden() {
        // kvm-clock (0, 3, 24), steal time (5), PV TLB flush (9) stay.
        let kept = 1 << 0 | 1 << 3 | 1 << 5 | 1 << 9 | 1 << 24;
        let mut entry = kvm_bindings::kvm_cpuid_entry2 {
            function: KVM_CPUID_FEATURES,
            eax: kept | KVM_FEATURES_NEEDING_KERNEL_LAPIC,
            ..Default::default()
        };
        hide_kernel_lapic_features(&mut entry);
        assert_eq!(entry.eax, kept);
        // PV unhalt and PV send-IPI are among the hidden ones.
        assert_ne!(KVM_FEATURES_NEEDING_KERNEL_LAPIC & (1 << 7), 0);
        assert_ne!(KVM_FEATURES_NEEDING_KERNEL_LAPIC & (1 << 11), 0);
        let mut other = kvm_bindings::kvm_cpuid_entry2 {
            function: 1,
            eax: u32::MAX,
            ..Default::default()
        };
        hide_kernel_lapic_features(&mut other);
        assert_eq!(other.eax, u32::MAX);
    }

    #[test]
    fn events_reach_only_their_vcpu_and_bad_indices_are_ignored() {
        let sink = VmSink::new(2);
        sink.event(IrqchipEvent::Startup { vcpu: 1, vector: 8 });
        sink.event(IrqchipEvent::Nmi { vcpu: 0 });
        sink.event(IrqchipEvent::Kick { vcpu: 9 });
        sink.event(IrqchipEvent::Init { vcpu: 64 });
        sink.event(IrqchipEvent::TimerDeadline {
            vcpu: 0,
            deadline_ns: Some(1),
        }); // no timer thread yet: dropped
        sink.event(IrqchipEvent::EoiBroadcast { vector: 0x30 });
        assert_eq!(sink.vcpus[1].sipi.load(SC), 0x108);
        assert_eq!(sink.vcpus[0].sipi.load(SC), 0);
        assert!(sink.vcpus[0].nmi.load(SC) && !sink.vcpus[1].nmi.load(SC));
        assert_eq!(sink.take_eois(), vec![0x30]);
        assert!(sink.take_eois().is_empty());
        assert_eq!(vector_of(NO_VECTOR), None);
        assert_eq!(vector_of(u64::MAX), None);
        assert_eq!(vector_of(0x31), Some(0x31));
    }
}
