//! User-space interrupt controllers for `--irqchip user` (after the Seoul thesis
//! §4.4): the local APICs, the IOAPIC and the 8259 PIC pair.
//!
//! **One model per controller, two forms.** The LAPIC set ([`LapicSet`]) and the
//! PIC pair ([`PicPair`]) are each one model, generic over the cells their state
//! lives in ([`Cells`]), so their logic exists once. The exclusive form
//! ([`ExclusiveLapics`], [`ExclusivePic`]: [`Unsynced`] cells, an
//! [`crate::devices::ExclusiveDevice`]) is used under `global`, `iothread` and
//! `fine`, where the bus serializes it; the thread-safe form ([`HybridLapics`],
//! [`HybridPic`]: [`Synced`] cells, a [`crate::devices::ConcurrentDevice`])
//! under `hybrid`, where vCPU threads call it directly. This is crosvm's
//! `BusDevice` / `BusDeviceSync` split. The IOAPIC ([`Ioapic`]) has only the
//! exclusive form: it is not on a hot path, so the bus serializes it in every
//! mode.
//!
//! # How a VMM uses this module
//!
//! **Everything goes through the bus.** The models are ordinary bus devices, so
//! the four sync modes of [`crate::bus`] apply to them unchanged: under `global`
//! every LAPIC/IOAPIC/PIC access (guest MMIO, interrupt acknowledge, timer
//! expiry, IPI) runs under the one lock; under `iothread` it is queued to the I/O
//! thread (writes posted: an IPI, an EOI, a timer expiry; reads such as INTA wait);
//! under `hybrid` the LAPIC set and PIC are [`crate::devices::ConcurrentDevice`]s
//! and bypass; under `fine` every model sits under its own lock.
//! [`register`] adds the three devices to a [`BusBuilder`] for a mode.
//!
//! **Per-vCPU LAPIC pages live in a private window.** The guest sees one LAPIC
//! page at [`LAPIC_GPA`] but each vCPU has its own LAPIC, and the bus does not
//! know which vCPU issues an access (an access may run on the I/O thread). So the
//! vCPU run loop rewrites an MMIO exit at `0xfee00000 + off` to
//! [`lapic_bus_address`]`(vcpu, gpa)`: vCPU k's guest page is at
//! `LAPIC_WINDOW + k * LAPIC_STRIDE`, its VMM-only control page right after it.
//! Likewise IOAPIC MMIO ([`ioapic_bus_address`]) and the PIC's ports
//! ([`pic_bus_address`]). The windows lie above 2^63, where no guest physical
//! address can exit, so a guest cannot reach another vCPU's page or a control
//! register; the run loop must still only translate, never pass a raw address
//! inside a window (treat such an exit as unclaimed).
//!
//! **The VMM talks to the models through control registers** (8-byte accesses on
//! the control page, see [`lapic_ctl`], [`ioapic_ctl`], [`pic_ctl`]):
//!
//! | register | access | meaning |
//! | --- | --- | --- |
//! | `lapic_ctl::INTA` | read | acknowledge the highest deliverable vector (IRR→ISR); [`NO_VECTOR`] if none |
//! | `lapic_ctl::PENDING` | read | the vector `INTA` would return, without acknowledging it |
//! | `lapic_ctl::ACCEPT` | write | deliver `vector \| level << 8` into this LAPIC (MSI, tests) |
//! | `lapic_ctl::TIMER_EXPIRED` | write | the deadline (ns) of a [`IrqchipEvent::TimerDeadline`] has passed |
//! | `lapic_ctl::INIT_RESET` | write | this vCPU took INIT: reset its LAPIC |
//! | `lapic_ctl::LINT0_EXTINT` | read | 1 if LINT0 takes the PIC's INTR (LVT0 unmasked ExtINT), else 0 |
//! | `ioapic_ctl::SET_IRQ`, `pic_ctl::SET_IRQ` | write | set input pin `pin \| level << 8` |
//! | `pic_ctl::INTA`, `pic_ctl::PENDING` | read | the PIC's INTA cycle / its pending vector |
//!
//! **Events out** ([`IrqchipEvent`]) go to the VMM's [`IrqchipSink`]: "kick vCPU k"
//! (an interrupt became pending: wake it from HLT or make KVM_RUN exit), NMI,
//! INIT, SIPI, a LAPIC timer deadline change, an EOI of a level-triggered vector
//! (to forward to the IOAPIC's EOI register) and "the PIC requests ExtINT". A sink
//! is called inside a device handler, possibly under the global lock, a device lock
//! or on the I/O thread: it must not block and must not access the bus (set a flag,
//! push to a leaf queue, signal a thread).
//!
//! **The pull model** (Seoul thesis §4.4.1.1): a kick is only a hint. Before every
//! KVM_RUN the vCPU reads `PENDING`/`INTA` itself; a kick that finds nothing is
//! spurious and harmless, and an interrupt raised after the check is never lost
//! because its kick comes after its IRR bit is set. Only the owning vCPU moves a
//! vector from IRR to ISR or EOIs it; any thread may set IRR.
//!
//! **Host-side building blocks** for the run loop: [`HaltWaiter`] (a halted
//! vCPU's wake-up primitive with the VMM's halt-poll window and the wake-up
//! latency) and [`TimerThread`] (the LAPIC timers' deadlines, fired as posted
//! `TIMER_EXPIRED` writes).
//!
//! The integration into the vCPU run loop (a `vcpu::VcpuInterrupts` per vCPU:
//! interrupt injection with `KVM_INTERRUPT` and interrupt-window exits, HLT in the
//! VMM, INIT/SIPI, CPUID) is [`crate::user_irqchip`], used by `run_vm` with
//! `Irqchip::User`; docs/vmm.md, section "User-space interrupt controllers".

mod halt;
pub mod invariants;
mod ioapic;
mod lapic;
mod pic;
mod regs;
mod sync;
mod timer;

pub mod harness;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod invariant_tests;
#[cfg(test)]
mod linux_tests;
#[cfg(all(test, loom))]
mod loom_tests;
#[cfg(test)]
mod tests;

pub use halt::{HaltEnd, HaltWaiter};
pub use invariants::IrqchipViolation;
pub use ioapic::{Ioapic, IOAPIC_PINS};
pub use lapic::{ExclusiveLapics, HybridLapics, LapicSet};
pub use pic::{ExclusivePic, HybridPic, PicPair};
pub use regs::{ApicMessage, DeliveryMode};
pub use sync::{Cells, Synced, Unsynced};
pub use timer::{TimerHandle, TimerThread};

use crate::bus::{AddressSpace, BusBuilder, BusError, SyncMode};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where the guest sees its local APIC (xAPIC mode).
pub const LAPIC_GPA: u64 = 0xfee0_0000;
/// Where the guest sees the IOAPIC.
pub const IOAPIC_GPA: u64 = 0xfec0_0000;
/// Size of a LAPIC or IOAPIC MMIO page.
pub const PAGE: u64 = 0x1000;
/// Bus address of vCPU 0's LAPIC page (a private window: no guest address).
pub const LAPIC_WINDOW: u64 = 0xffff_f000_0000_0000;
/// Per vCPU: the guest-visible page, then the VMM-only control page.
pub const LAPIC_STRIDE: u64 = 2 * PAGE;
/// Bus address of the IOAPIC page; its control page follows.
pub const IOAPIC_WINDOW: u64 = 0xffff_f100_0000_0000;
/// Bus address of the PIC pair's ports; its control registers follow.
pub const PIC_WINDOW: u64 = 0xffff_f200_0000_0000;
/// Bytes of the PIC window.
pub const PIC_WINDOW_LEN: u64 = 0x200;
/// The most vCPUs the LAPIC set supports (destinations are a 64-bit mask).
pub const MAX_VCPUS: u32 = 64;
/// What `INTA`/`PENDING` read when no vector is deliverable.
pub const NO_VECTOR: u64 = 0x100;

/// VMM-only registers on each vCPU's LAPIC control page (offsets in that page).
pub mod lapic_ctl {
    pub const INTA: u64 = 0x00;
    pub const PENDING: u64 = 0x08;
    pub const ACCEPT: u64 = 0x10;
    pub const TIMER_EXPIRED: u64 = 0x18;
    pub const INIT_RESET: u64 = 0x20;
    /// Read: 1 if LINT0 takes the PIC's INTR (LVT0 unmasked, ExtINT mode,
    /// LAPIC enabled), else 0.
    pub const LINT0_EXTINT: u64 = 0x28;
}

/// VMM-only IOAPIC registers (offsets in the control page after the IOAPIC page).
pub mod ioapic_ctl {
    pub const SET_IRQ: u64 = 0x00;
}

/// Offsets in the PIC window: the six guest ports, then VMM-only registers.
pub mod pic_ctl {
    /// Ports 0x20, 0x21, 0xa0, 0xa1, 0x4d0, 0x4d1 map to offsets 0..6.
    pub const PORTS: [u16; 6] = [0x20, 0x21, 0xa0, 0xa1, 0x4d0, 0x4d1];
    pub const INTA: u64 = 0x100;
    pub const PENDING: u64 = 0x108;
    pub const SET_IRQ: u64 = 0x110;
}

/// The bus address of vCPU `vcpu`'s LAPIC register at guest address `gpa`, or
/// `None` when `gpa` is not in the LAPIC page or `vcpu` is out of range.
pub fn lapic_bus_address(vcpu: u32, gpa: u64) -> Option<u64> {
    let offset = gpa.checked_sub(LAPIC_GPA).filter(|o| *o < PAGE)?;
    (vcpu < MAX_VCPUS).then(|| LAPIC_WINDOW + u64::from(vcpu) * LAPIC_STRIDE + offset)
}

/// The bus address of a control register of vCPU `vcpu`'s LAPIC.
pub fn lapic_control_address(vcpu: u32, register: u64) -> u64 {
    LAPIC_WINDOW + u64::from(vcpu.min(MAX_VCPUS - 1)) * LAPIC_STRIDE + PAGE + (register % PAGE)
}

/// The bus address of the IOAPIC register at guest address `gpa`.
pub fn ioapic_bus_address(gpa: u64) -> Option<u64> {
    let offset = gpa.checked_sub(IOAPIC_GPA).filter(|o| *o < PAGE)?;
    Some(IOAPIC_WINDOW + offset)
}

/// The bus address of an IOAPIC control register.
pub fn ioapic_control_address(register: u64) -> u64 {
    IOAPIC_WINDOW + PAGE + (register % PAGE)
}

/// The bus address of PIC port `port` (0x20, 0x21, 0xa0, 0xa1, 0x4d0, 0x4d1).
pub fn pic_bus_address(port: u16) -> Option<u64> {
    let index = pic_ctl::PORTS.iter().position(|p| *p == port)?;
    Some(PIC_WINDOW + index as u64)
}

/// The bus address of a PIC control register.
pub fn pic_control_address(register: u64) -> u64 {
    PIC_WINDOW + (register % PIC_WINDOW_LEN)
}

/// Something the VMM must act on. Emitted from inside a device handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqchipEvent {
    /// A vector became pending in vCPU `vcpu`'s LAPIC: make it re-check (wake it
    /// from HLT, or make a running KVM_RUN exit so it can inject).
    Kick { vcpu: u32 },
    /// Inject an NMI into `vcpu` (`KVM_NMI`).
    Nmi { vcpu: u32 },
    /// `vcpu` receives INIT: reset it into wait-for-SIPI and write its
    /// `INIT_RESET` control register.
    Init { vcpu: u32 },
    /// `vcpu`, if waiting for SIPI, starts in real mode at `vector << 12`.
    Startup { vcpu: u32, vector: u8 },
    /// `vcpu`'s LAPIC timer fires at `deadline_ns` on the model's clock (`None`:
    /// disarmed). At the deadline, write it to the `TIMER_EXPIRED` register; a
    /// deadline that is no longer current is ignored there, so a late or stale
    /// timer thread cannot cause a wrong interrupt.
    TimerDeadline { vcpu: u32, deadline_ns: Option<u64> },
    /// A level-triggered vector was EOId: write it to the IOAPIC's EOI register.
    EoiBroadcast { vector: u8 },
    /// The PIC pair requests an interrupt, or vCPU 0's LINT0 opened for it:
    /// the vCPU taking ExtINT (vCPU 0, through LINT0) should pull
    /// `pic_ctl::INTA` if `lapic_ctl::LINT0_EXTINT` says LINT0 takes it.
    ExtInt,
}

/// The VMM's side of the event outputs. Called from any thread, possibly under
/// the global lock, a device lock or on the I/O thread: never block, never touch
/// the bus.
pub trait IrqchipSink: Send + Sync {
    fn event(&self, event: IrqchipEvent);
}

/// A sink that drops every event (for models used without a VMM).
pub struct NullSink;

impl IrqchipSink for NullSink {
    fn event(&self, _: IrqchipEvent) {}
}

/// The time base of the LAPIC timers, in nanoseconds.
pub trait IrqClock: Send + Sync {
    fn now_ns(&self) -> u64;
}

/// Nanoseconds since the clock was made (the VMM's timer thread uses the same).
pub struct MonotonicClock {
    start: Instant,
}

impl MonotonicClock {
    pub fn new() -> Self {
        MonotonicClock {
            start: Instant::now(),
        }
    }

    /// The instant `ns` on this clock stands for.
    pub fn instant_of(&self, ns: u64) -> Instant {
        self.start + std::time::Duration::from_nanos(ns)
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl IrqClock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A clock that moves only when told (tests, fuzzing).
#[derive(Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    pub fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::SeqCst);
    }
}

impl IrqClock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Guest writes and deliveries the models ignored, by cause (hardware would
/// ignore them too, or they are undefined there). Shared by all models of a VM.
#[derive(Debug, Default)]
pub struct IrqchipCounters {
    /// Unaligned, wrong-width or out-of-range accesses (writes ignored, reads 0).
    pub bad_access: AtomicU64,
    /// Writes to read-only or reserved registers.
    pub reserved_write: AtomicU64,
    /// Vectors 0–15 sent or received (ESR "illegal vector").
    pub illegal_vector: AtomicU64,
    /// IPIs or redirections whose destination matches no vCPU.
    pub no_destination: AtomicU64,
    /// Delivery modes not modelled (SMI, reserved, ExtINT through the IOAPIC,
    /// INIT/SIPI with the self shorthand).
    pub unsupported_delivery: AtomicU64,
    /// Fixed interrupts dropped because the target LAPIC is software-disabled.
    pub dropped_disabled: AtomicU64,
    /// `TIMER_EXPIRED` writes for a deadline that is no longer armed.
    pub stale_timer: AtomicU64,
    /// Periodic timer periods raised to `regs::MIN_PERIOD_NS` (200 µs).
    pub timer_clamped: AtomicU64,
    /// INTA cycles that found no deliverable vector (pull model: harmless).
    pub spurious_inta: AtomicU64,
    /// Input pins that do not exist (IOAPIC pin ≥ 24, PIC IRQ 2 or ≥ 16).
    pub bad_pin: AtomicU64,
}

impl IrqchipCounters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// (name, count) of every counter, for the run record.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        [
            ("bad_access", &self.bad_access),
            ("reserved_write", &self.reserved_write),
            ("illegal_vector", &self.illegal_vector),
            ("no_destination", &self.no_destination),
            ("unsupported_delivery", &self.unsupported_delivery),
            ("dropped_disabled", &self.dropped_disabled),
            ("stale_timer", &self.stale_timer),
            ("timer_clamped", &self.timer_clamped),
            ("spurious_inta", &self.spurious_inta),
            ("bad_pin", &self.bad_pin),
        ]
        .into_iter()
        .map(|(name, c)| (name, c.load(Ordering::Relaxed)))
        .collect()
    }
}

/// Errors building the interrupt controllers.
#[derive(Debug, thiserror::Error)]
pub enum IrqchipError {
    #[error("--irqchip user supports 1 to {MAX_VCPUS} vCPUs, not {0}")]
    VcpuCount(u32),
    #[error("cannot place the interrupt controllers on the bus: {0}")]
    Bus(#[from] BusError),
}

/// What the models are built from.
#[derive(Clone)]
pub struct IrqchipConfig {
    pub vcpus: u32,
    pub sink: Arc<dyn IrqchipSink>,
    pub clock: Arc<dyn IrqClock>,
}

/// Whether the LAPIC set and PIC are in their exclusive or thread-safe form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Plain cells, behind a lock or the I/O thread.
    Exclusive,
    /// Atomic IRR, a lock per register file for the rest: may bypass.
    Concurrent,
}

impl Flavor {
    /// Thread-safe forms only in `hybrid`, the mode that measures the Seoul
    /// thesis's bypass (§4.4); `fine` keeps each model under its own lock.
    pub fn for_mode(mode: SyncMode) -> Flavor {
        match mode {
            SyncMode::Hybrid => Flavor::Concurrent,
            SyncMode::Global | SyncMode::IoThread | SyncMode::Fine => Flavor::Exclusive,
        }
    }
}

/// The LAPIC set as registered.
#[derive(Clone)]
pub enum LapicsHandle {
    Exclusive(Arc<Mutex<ExclusiveLapics>>),
    Concurrent(Arc<HybridLapics>),
}

/// The PIC pair as registered.
#[derive(Clone)]
pub enum PicHandle {
    Exclusive(Arc<Mutex<ExclusivePic>>),
    Concurrent(Arc<HybridPic>),
}

/// Handles to the registered models (for inspection after a run; the run loop
/// itself goes through the bus).
#[derive(Clone)]
pub struct Irqchip {
    pub lapics: LapicsHandle,
    pub ioapic: Arc<Mutex<Ioapic>>,
    pub pic: PicHandle,
    pub counters: Arc<IrqchipCounters>,
}

impl Irqchip {
    /// Every broken invariant of the three models (`invariants`), for a
    /// quiescent VM: after its vCPUs, I/O thread and timer thread stopped
    /// (a running vCPU may be between two halves of an update). Empty when
    /// all hold.
    pub fn check_invariants(&self) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        let views = match &self.lapics {
            LapicsHandle::Exclusive(set) => set
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .check_invariants(&mut out),
            LapicsHandle::Concurrent(set) => set.check_invariants(&mut out),
        };
        self.ioapic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check_invariants(&views, &mut out);
        match &self.pic {
            PicHandle::Exclusive(pic) => pic
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .check_invariants(&mut out),
            PicHandle::Concurrent(pic) => pic.check_invariants(&mut out),
        }
        out
    }
}

/// Add the LAPIC set, the IOAPIC and the PIC pair to `builder`, as the
/// `flavor` models. The IOAPIC is always exclusive (it is not on a hot path); it
/// delivers into the LAPIC set directly (lock order: IOAPIC, then LAPIC set).
pub fn register(
    builder: &mut BusBuilder,
    flavor: Flavor,
    config: &IrqchipConfig,
) -> Result<Irqchip, IrqchipError> {
    if config.vcpus == 0 || config.vcpus > MAX_VCPUS {
        return Err(IrqchipError::VcpuCount(config.vcpus));
    }
    let counters = Arc::new(IrqchipCounters::default());
    let lapic_len = u64::from(config.vcpus) * LAPIC_STRIDE;
    let (lapics, target): (LapicsHandle, Arc<dyn ApicTarget>) = match flavor {
        Flavor::Exclusive => {
            let set = ExclusiveLapics::new(config, counters.clone());
            let shared =
                builder.add_exclusive(AddressSpace::Mmio, LAPIC_WINDOW, lapic_len, "lapic", set)?;
            (LapicsHandle::Exclusive(shared.clone()), Arc::new(shared))
        }
        Flavor::Concurrent => {
            let set = Arc::new(HybridLapics::new(config, counters.clone()));
            builder.add_concurrent(
                AddressSpace::Mmio,
                LAPIC_WINDOW,
                lapic_len,
                "lapic",
                set.clone(),
            )?;
            (LapicsHandle::Concurrent(set.clone()), set)
        }
    };
    let ioapic = Ioapic::new(target, counters.clone());
    let ioapic = builder.add_exclusive(
        AddressSpace::Mmio,
        IOAPIC_WINDOW,
        2 * PAGE,
        "ioapic",
        ioapic,
    )?;
    let pic = match flavor {
        Flavor::Exclusive => {
            let pic = ExclusivePic::new(config.sink.clone(), counters.clone());
            PicHandle::Exclusive(builder.add_exclusive(
                AddressSpace::Mmio,
                PIC_WINDOW,
                PIC_WINDOW_LEN,
                "pic",
                pic,
            )?)
        }
        Flavor::Concurrent => {
            let pic = Arc::new(HybridPic::new(config.sink.clone(), counters.clone()));
            builder.add_concurrent(
                AddressSpace::Mmio,
                PIC_WINDOW,
                PIC_WINDOW_LEN,
                "pic",
                pic.clone(),
            )?;
            PicHandle::Concurrent(pic)
        }
    };
    Ok(Irqchip {
        lapics,
        ioapic,
        pic,
        counters,
    })
}

/// Where the IOAPIC delivers: the LAPIC set, whichever flavour.
pub trait ApicTarget: Send + Sync {
    /// Deliver a message to every LAPIC it addresses; returns how many took it.
    fn deliver(&self, message: ApicMessage) -> u32;
}

impl ApicTarget for Arc<Mutex<ExclusiveLapics>> {
    fn deliver(&self, message: ApicMessage) -> u32 {
        self.lock()
            .unwrap_or_else(|e| e.into_inner())
            .deliver(message)
    }
}
