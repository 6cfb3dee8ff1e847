//! The local APIC set: every vCPU's local APIC in one device, one model
//! ([`LapicSet`]) in two forms.
//!
//! * [`ExclusiveLapics`] (`global`, `iothread`, `fine`): plain cells; the bus
//!   serializes it (the global lock, the I/O thread, or the set's own lock), so an
//!   IPI from vCPU k sets vCPU j's IRR inside the same critical section.
//! * [`HybridLapics`] (`hybrid`, Seoul thesis §4.4): a [`ConcurrentDevice`] the
//!   vCPU threads call directly.
//!
//! The model is written for the thread-safe form and costs nothing in the
//! exclusive one (there a [`Word`] is a `Cell`, a [`Shelter`] a `RefCell`):
//!
//! * IRR (and TMR) are bitmaps any thread (another vCPU's ICR write, the IOAPIC,
//!   the timer thread, a device) sets with one `fetch_or`, kicking the owner if
//!   the bit was newly set. Nothing else.
//! * Prioritizing, INTA (IRR→ISR) and EOI run on the owning vCPU only, inside
//!   that LAPIC's register file, which only the owner and its timer expiry enter.
//!   The owner is the only thread that clears an IRR bit, so a bit it saw set is
//!   still set when it clears it: an acknowledge can neither lose nor duplicate
//!   a vector.
//! * The pull model: the kick is only a hint. Raising is "set IRR, then kick";
//!   the vCPU re-checks IRR before every entry; so an interrupt raised after the
//!   check is followed by a kick, and a stale kick finds nothing (counted as a
//!   spurious INTA, harmless). No prioritizing happens on the raising side, which
//!   removes the delayed INTR/DEASS race of the Seoul thesis's Table 4.1 by
//!   construction.
//! * Routing state other threads need (APIC id, LDR, DFR, enabled) is mirrored
//!   in a word, so sending an IPI enters no register file but the sender's own;
//!   the register file is left before a write's effect (an IPI, an EOI
//!   broadcast, a timer deadline) is carried out, so no two are ever held.

use super::invariants::{IrqchipViolation, LapicView};
use super::regs::{
    destinations, split_access, Addressing, ApicMessage, DeliveryMode, LapicRegs, RegEffect,
    Shorthand, ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR, REG_EOI, REG_ESR, REG_PPR,
    REG_TIMER_CUR,
};
use super::sync::{Cells, Ordering, Shelter, Synced, Unsynced, Word};
use super::{
    lapic_ctl, ApicTarget, IrqClock, IrqchipConfig, IrqchipCounters, IrqchipEvent, IrqchipSink,
    LAPIC_STRIDE, MAX_VCPUS, NO_VECTOR, PAGE,
};
use crate::devices::{fill_le, le_value, ConcurrentDevice, ExclusiveDevice};
use std::ops::Deref;
use std::sync::Arc;

const ROUTING_ENABLED: u32 = 1 << 24;
/// LINT0 takes ExtINT (`LapicRegs::lint0_extint`).
const ROUTING_LINT0_EXTINT: u32 = 1 << 25;

/// One local APIC.
struct Lapic<S: Cells> {
    irr: [S::Word; 8],
    tmr: [S::Word; 8],
    /// apic_id | ldr << 8 | dfr model << 16 | enabled << 24 | LINT0 ExtINT << 25.
    routing: S::Word,
    /// ESR bits raised by other threads, merged by the owner on an ESR write.
    remote_errors: S::Word,
    regs: S::Shelter<LapicRegs>,
}

impl<S: Cells> Lapic<S> {
    fn new(apic_id: u8) -> Self {
        let regs = LapicRegs::new(apic_id);
        let lapic = Lapic {
            irr: std::array::from_fn(|_| S::Word::new(0)),
            tmr: std::array::from_fn(|_| S::Word::new(0)),
            routing: S::Word::new(0),
            remote_errors: S::Word::new(0),
            regs: S::Shelter::new(regs.clone()),
        };
        lapic.mirror(&regs);
        lapic
    }

    fn mirror(&self, regs: &LapicRegs) {
        self.routing.store(routing_word(regs), Ordering::Release);
    }

    fn addressing(&self) -> Addressing {
        let [apic_id, ldr, dfr_model, _] = self.routing.load(Ordering::Acquire).to_le_bytes();
        Addressing {
            apic_id,
            ldr,
            dfr_model,
        }
    }

    fn lint0_extint(&self) -> bool {
        self.routing.load(Ordering::Acquire) & ROUTING_LINT0_EXTINT != 0
    }

    fn snapshot(words: &[S::Word; 8]) -> [u32; 8] {
        std::array::from_fn(|i| words[i].load(Ordering::SeqCst))
    }
}

/// The routing mirror's value for `regs`.
fn routing_word(regs: &LapicRegs) -> u32 {
    let a = regs.addressing();
    let enabled = if regs.enabled() { ROUTING_ENABLED } else { 0 };
    let extint = if regs.lint0_extint() {
        ROUTING_LINT0_EXTINT
    } else {
        0
    };
    u32::from(a.apic_id) | u32::from(a.ldr) << 8 | u32::from(a.dfr_model) << 16 | enabled | extint
}

fn word_bit(vector: u8) -> (usize, u32) {
    (usize::from(vector >> 5), 1 << (vector & 31))
}

/// All local APICs of a VM: the one LAPIC model, in the cells `S`.
pub struct LapicSet<S: Cells> {
    lapics: Vec<Lapic<S>>,
    sink: Arc<dyn IrqchipSink>,
    clock: Arc<dyn IrqClock>,
    counters: Arc<IrqchipCounters>,
}

impl<S: Cells> LapicSet<S> {
    /// vCPU i gets APIC id i (as the VMM's CPUID says).
    fn new(config: &IrqchipConfig, counters: Arc<IrqchipCounters>) -> Self {
        LapicSet {
            lapics: (0..config.vcpus.min(MAX_VCPUS))
                .filter_map(|i| u8::try_from(i).ok())
                .map(Lapic::new)
                .collect(),
            sink: config.sink.clone(),
            clock: config.clock.clone(),
            counters,
        }
    }

    fn lapic(&self, vcpu: u32) -> Option<&Lapic<S>> {
        self.lapics.get(usize::try_from(vcpu).ok()?)
    }

    pub fn vcpus(&self) -> u32 {
        u32::try_from(self.lapics.len()).unwrap_or(u32::MAX)
    }

    /// Set `vector` in `vcpu`'s IRR (from any thread), then kick if newly
    /// pending. Returns whether it was accepted.
    pub fn accept(&self, vcpu: u32, vector: u8, level_triggered: bool) -> bool {
        let Some(lapic) = self.lapic(vcpu) else {
            IrqchipCounters::bump(&self.counters.no_destination);
            return false;
        };
        if vector < 16 {
            lapic
                .remote_errors
                .fetch_or(ESR_RECEIVE_ILLEGAL_VECTOR, Ordering::Relaxed);
            IrqchipCounters::bump(&self.counters.illegal_vector);
            return false;
        }
        if lapic.routing.load(Ordering::Acquire) & ROUTING_ENABLED == 0 {
            IrqchipCounters::bump(&self.counters.dropped_disabled);
            return false;
        }
        let (word, bit) = word_bit(vector);
        if level_triggered {
            lapic.tmr[word].fetch_or(bit, Ordering::SeqCst);
        } else {
            lapic.tmr[word].fetch_and(!bit, Ordering::SeqCst);
        }
        // IRR first, then the kick: the pull model's one ordering rule.
        let before = lapic.irr[word].fetch_or(bit, Ordering::SeqCst);
        if before & bit == 0 {
            self.sink.event(IrqchipEvent::Kick { vcpu });
        }
        true
    }

    /// The vector `acknowledge` would return (owner only, like INTA).
    pub fn pending_vector(&self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapic(vcpu)?;
        lapic
            .regs
            .with(|regs| regs.deliverable(&Lapic::<S>::snapshot(&lapic.irr)))
    }

    /// INTA on the owning vCPU: the pending vector moves IRR → ISR.
    pub fn acknowledge(&self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapic(vcpu)?;
        let vector = lapic.regs.with(|regs| {
            let vector = regs.deliverable(&Lapic::<S>::snapshot(&lapic.irr))?;
            let (word, bit) = word_bit(vector);
            // Unset only if another thread cleared IRR, which only the owner
            // does: a guard, never taken.
            (lapic.irr[word].fetch_and(!bit, Ordering::SeqCst) & bit != 0).then(|| {
                regs.isr.set(vector);
                vector
            })
        });
        if vector.is_none() {
            IrqchipCounters::bump(&self.counters.spurious_inta);
        }
        vector
    }

    /// EOI from the owning vCPU (what a guest write to the EOI register does).
    pub fn eoi(&self, vcpu: u32) {
        self.write_register(vcpu, REG_EOI, 0);
    }

    /// Deliver an APIC-bus message from `sender` (None: the IOAPIC).
    fn send(&self, message: ApicMessage, sender: Option<u32>) -> u32 {
        // `destinations` asks only for i < vcpus, so the index is in range.
        let targets = destinations(&message, sender, self.vcpus(), |i| {
            self.lapics[i as usize].addressing()
        });
        if targets == 0 {
            IrqchipCounters::bump(&self.counters.no_destination);
            return 0;
        }
        match message.mode {
            DeliveryMode::Fixed | DeliveryMode::LowestPriority => {
                if message.vector < 16 {
                    if let Some(s) = sender.and_then(|s| self.lapic(s)) {
                        s.remote_errors
                            .fetch_or(ESR_SEND_ILLEGAL_VECTOR, Ordering::Relaxed);
                    }
                    IrqchipCounters::bump(&self.counters.illegal_vector);
                    return 0;
                }
                // Lowest priority: the lowest-numbered target is the focus processor.
                let targets = if message.mode == DeliveryMode::LowestPriority {
                    targets & targets.wrapping_neg()
                } else {
                    targets
                };
                each(targets)
                    .map(|t| u32::from(self.accept(t, message.vector, message.level_triggered)))
                    .sum()
            }
            mode => deliver_special(&*self.sink, &self.counters, mode, &message, targets),
        }
    }

    /// A guest write to `vcpu`'s register `reg` (on the owning vCPU). The
    /// register file is left before the effect is carried out, so an IPI never
    /// holds two of them.
    fn write_register(&self, vcpu: u32, reg: u64, value: u32) {
        let Some(lapic) = self.lapic(vcpu) else {
            return;
        };
        let now = self.clock.now_ns();
        let extint_before = lapic.lint0_extint();
        let effect = lapic.regs.with(|regs| {
            if reg == REG_ESR {
                let remote = lapic.remote_errors.swap(0, Ordering::Relaxed);
                regs.error(remote);
            }
            let effect = regs.write(reg, value, now, &self.counters);
            lapic.mirror(regs);
            effect
        });
        // The BSP's LINT0 just opened for the PIC (the only LINT0 the VMM wires
        // the PIC to): an interrupt the PIC holds may now be taken.
        if vcpu == 0 && !extint_before && lapic.lint0_extint() {
            self.sink.event(IrqchipEvent::ExtInt);
        }
        match effect {
            RegEffect::None => {}
            RegEffect::Eoi(vector) => {
                let (word, bit) = word_bit(vector);
                if lapic.tmr[word].fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
                    self.sink.event(IrqchipEvent::EoiBroadcast { vector });
                }
            }
            RegEffect::Send(message) => {
                self.send(message, Some(vcpu));
            }
            RegEffect::Timer(deadline_ns) => self
                .sink
                .event(IrqchipEvent::TimerDeadline { vcpu, deadline_ns }),
        }
    }

    /// The timer thread reports `deadline` passed (any thread).
    pub fn timer_expired(&self, vcpu: u32, deadline: u64) {
        let Some(lapic) = self.lapic(vcpu) else {
            return;
        };
        let now = self.clock.now_ns();
        let (vector, next) = lapic
            .regs
            .with(|regs| regs.timer_expired(deadline, now, &self.counters));
        if let Some(deadline_ns) = next {
            self.sink
                .event(IrqchipEvent::TimerDeadline { vcpu, deadline_ns });
        }
        if let Some(vector) = vector {
            self.accept(vcpu, vector, false);
        }
    }

    /// `vcpu` took INIT (on its own thread): registers back to their INIT
    /// state, APIC id kept.
    pub fn init_reset(&self, vcpu: u32) {
        let Some(lapic) = self.lapic(vcpu) else {
            return;
        };
        let had_timer = lapic.regs.with(|regs| {
            let had_timer = regs.timer.deadline_ns.is_some();
            *regs = LapicRegs::new(regs.apic_id);
            lapic.mirror(regs);
            for word in lapic.irr.iter().chain(&lapic.tmr) {
                word.store(0, Ordering::SeqCst);
            }
            lapic.remote_errors.store(0, Ordering::Relaxed);
            had_timer
        });
        if had_timer {
            self.sink.event(IrqchipEvent::TimerDeadline {
                vcpu,
                deadline_ns: None,
            });
        }
    }

    /// A snapshot of `vcpu`'s (IRR, ISR, TMR) for tests and diagnostics.
    pub fn vectors(&self, vcpu: u32) -> Option<([u32; 8], [u32; 8], [u32; 8])> {
        let lapic = self.lapic(vcpu)?;
        Some(lapic.regs.with(|regs| {
            (
                Lapic::<S>::snapshot(&lapic.irr),
                regs.isr.0,
                Lapic::<S>::snapshot(&lapic.tmr),
            )
        }))
    }

    /// What each LAPIC shows through its registers (PPR and the timer's
    /// current count as a guest read them now).
    pub fn views(&self) -> Vec<LapicView> {
        let now = self.clock.now_ns();
        (0..self.vcpus())
            .zip(&self.lapics)
            .map(|(vcpu, lapic)| {
                let irr = Lapic::<S>::snapshot(&lapic.irr);
                let tmr = Lapic::<S>::snapshot(&lapic.tmr);
                lapic.regs.with(|regs| LapicView {
                    vcpu,
                    irr,
                    isr: regs.isr.0,
                    tmr,
                    tpr: regs.tpr,
                    ppr: regs.read(REG_PPR, now, &irr, &tmr).to_le_bytes()[0],
                    svr: regs.svr,
                    lvt: regs.lvt,
                    icr_lo: regs.icr_lo,
                    timer_initial: regs.timer.initial,
                    timer_current: regs.read(REG_TIMER_CUR, now, &irr, &tmr),
                })
            })
            .collect()
    }

    /// The LAPIC invariants (`invariants`), on a quiescent set (no vCPU
    /// running: the views are taken one LAPIC at a time). Returns the views
    /// for the IOAPIC's check.
    pub fn check_invariants(&self, out: &mut Vec<IrqchipViolation>) -> Vec<LapicView> {
        let views = self.views();
        for (view, lapic) in views.iter().zip(&self.lapics) {
            view.check(&[], out);
            view.check_model(out);
            let vcpu = view.vcpu;
            let (registers, timer) = lapic
                .regs
                .with(|regs| (routing_word(regs), regs.timer_problem()));
            let mirror = lapic.routing.load(Ordering::Acquire);
            if mirror != registers {
                out.push(IrqchipViolation::RoutingMirror {
                    vcpu,
                    mirror,
                    registers,
                });
            }
            if let Some(problem) = timer {
                out.push(IrqchipViolation::Timer { vcpu, problem });
            }
        }
        views
    }

    /// Test-only: corrupt `vcpu`'s state the way a lost update would
    /// (`vector` in service without an acknowledge, the routing mirror
    /// stale), so the checks can be seen to fail.
    #[cfg(test)]
    pub(crate) fn corrupt(&self, vcpu: u32, vector: u8) {
        if let Some(lapic) = self.lapic(vcpu) {
            lapic.regs.with(|regs| regs.isr.set(vector));
            lapic.routing.fetch_or(ROUTING_ENABLED, Ordering::SeqCst);
            lapic.regs.with(|regs| regs.svr &= !0x100);
        }
    }

    /// Deliver a message from the IOAPIC.
    pub fn deliver(&self, message: ApicMessage) -> u32 {
        self.send(message, None)
    }

    fn read_control(&self, vcpu: u32, reg: u64) -> u64 {
        match reg {
            lapic_ctl::INTA => self.acknowledge(vcpu).map_or(NO_VECTOR, u64::from),
            lapic_ctl::PENDING => self.pending_vector(vcpu).map_or(NO_VECTOR, u64::from),
            lapic_ctl::LINT0_EXTINT => self
                .lapic(vcpu)
                .map_or(0, |lapic| u64::from(lapic.lint0_extint())),
            _ => {
                IrqchipCounters::bump(&self.counters.bad_access);
                0
            }
        }
    }

    fn write_control(&self, vcpu: u32, reg: u64, value: u64) {
        match reg {
            lapic_ctl::ACCEPT => {
                let [vector, level, ..] = value.to_le_bytes();
                self.accept(vcpu, vector, level & 1 != 0);
            }
            lapic_ctl::TIMER_EXPIRED => self.timer_expired(vcpu, value),
            lapic_ctl::INIT_RESET => self.init_reset(vcpu),
            _ => IrqchipCounters::bump(&self.counters.bad_access),
        }
    }

    /// A bus read at `offset` in the LAPIC window.
    fn read(&self, offset: u64, data: &mut [u8]) {
        let (vcpu, control, offset) = window_offset(offset);
        if control {
            let value = self.read_control(vcpu, offset & !7);
            fill_le(data, value, offset & 7);
            return;
        }
        let (reg, byte, full) = split_access(offset, data.len());
        if !full {
            IrqchipCounters::bump(&self.counters.bad_access);
        }
        let value = match self.lapic(vcpu) {
            Some(lapic) if byte < 4 => {
                let now = self.clock.now_ns();
                lapic.regs.with(|regs| {
                    let irr = Lapic::<S>::snapshot(&lapic.irr);
                    let tmr = Lapic::<S>::snapshot(&lapic.tmr);
                    regs.read(reg, now, &irr, &tmr)
                })
            }
            _ => 0,
        };
        fill_le(data, u64::from(value), byte);
    }

    /// A bus write at `offset` in the LAPIC window.
    fn write(&self, offset: u64, data: &[u8]) {
        let (vcpu, control, offset) = window_offset(offset);
        if control {
            if offset & 7 != 0 {
                IrqchipCounters::bump(&self.counters.bad_access);
                return;
            }
            self.write_control(vcpu, offset, le_value(data));
            return;
        }
        let (reg, _, full) = split_access(offset, data.len());
        if !full {
            // SDM 11.4.1: registers are accessed as aligned 32-bit words only.
            IrqchipCounters::bump(&self.counters.bad_access);
            return;
        }
        // A full access is 4 bytes, so the value fits.
        let value = u32::try_from(le_value(data)).unwrap_or(u32::MAX);
        self.write_register(vcpu, reg, value);
    }
}

/// The vCPUs whose bits are set in `mask`.
fn each(mask: u64) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |i| mask & (1 << i) != 0)
}

/// NMI, INIT, SIPI (and the modes not modelled) for every target: these are the
/// VMM's to carry out, so they become events.
fn deliver_special(
    sink: &dyn IrqchipSink,
    counters: &IrqchipCounters,
    mode: DeliveryMode,
    message: &ApicMessage,
    targets: u64,
) -> u32 {
    let self_shorthand = message.shorthand == Shorthand::SelfOnly;
    match mode {
        DeliveryMode::Nmi if !self_shorthand => {
            each(targets).for_each(|vcpu| sink.event(IrqchipEvent::Nmi { vcpu }));
        }
        // INIT level de-assert (level 0, trigger level): a no-op since the P4.
        DeliveryMode::Init if !message.assert && message.level_triggered => return 0,
        DeliveryMode::Init if !self_shorthand => {
            each(targets).for_each(|vcpu| sink.event(IrqchipEvent::Init { vcpu }));
        }
        DeliveryMode::Startup if !self_shorthand => {
            each(targets).for_each(|vcpu| {
                sink.event(IrqchipEvent::Startup {
                    vcpu,
                    vector: message.vector,
                })
            });
        }
        _ => {
            // SMI, ExtINT, reserved, and NMI/INIT/SIPI with the self shorthand
            // (SDM Table 11-4: invalid).
            IrqchipCounters::bump(&counters.unsupported_delivery);
            return 0;
        }
    }
    targets.count_ones()
}

/// Split a window offset into (vCPU, control page?, offset in the page).
fn window_offset(offset: u64) -> (u32, bool, u64) {
    let vcpu = u32::try_from(offset / LAPIC_STRIDE).unwrap_or(u32::MAX);
    let in_stride = offset % LAPIC_STRIDE;
    (vcpu, in_stride >= PAGE, in_stride % PAGE)
}

/// The LAPIC set's exclusive form: not thread-safe, called only under the bus's
/// serialization. Derefs to the model for the VMM's direct calls.
pub struct ExclusiveLapics(LapicSet<Unsynced>);

impl ExclusiveLapics {
    pub fn new(config: &IrqchipConfig, counters: Arc<IrqchipCounters>) -> Self {
        ExclusiveLapics(LapicSet::new(config, counters))
    }
}

impl Deref for ExclusiveLapics {
    type Target = LapicSet<Unsynced>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl ExclusiveDevice for ExclusiveLapics {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        self.0.read(offset, data);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.write(offset, data);
    }
}

/// The LAPIC set's thread-safe form (`hybrid`): any thread may call it.
pub struct HybridLapics(LapicSet<Synced>);

impl HybridLapics {
    pub fn new(config: &IrqchipConfig, counters: Arc<IrqchipCounters>) -> Self {
        HybridLapics(LapicSet::new(config, counters))
    }
}

impl Deref for HybridLapics {
    type Target = LapicSet<Synced>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl ConcurrentDevice for HybridLapics {
    fn read(&self, offset: u64, data: &mut [u8]) {
        self.0.read(offset, data);
    }
    fn write(&self, offset: u64, data: &[u8]) {
        self.0.write(offset, data);
    }
}

impl ApicTarget for HybridLapics {
    fn deliver(&self, message: ApicMessage) -> u32 {
        self.0.deliver(message)
    }
}
