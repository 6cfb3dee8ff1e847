//! The exclusive LAPIC set: every vCPU's local APIC in one `&mut self` device, so
//! an IPI from vCPU k sets vCPU j's IRR inside the same critical section (no
//! second lock, no lock order between LAPICs). The bus serializes it: the global
//! lock, the I/O thread, or (in `fine`) the set's own lock.

use super::regs::{
    destinations, split_access, ApicMessage, DeliveryMode, LapicRegs, RegEffect, Shorthand,
    VectorSet, ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR,
};
use super::{
    lapic_ctl, IrqClock, IrqchipConfig, IrqchipCounters, IrqchipEvent, IrqchipSink, LAPIC_STRIDE,
    NO_VECTOR, PAGE,
};
use crate::devices::{fill_le, le_value, ExclusiveDevice};
use std::sync::Arc;

struct Lapic {
    regs: LapicRegs,
    irr: VectorSet,
    tmr: VectorSet,
}

/// All local APICs of a VM, not thread-safe.
pub struct ExclusiveLapics {
    lapics: Vec<Lapic>,
    sink: Arc<dyn IrqchipSink>,
    clock: Arc<dyn IrqClock>,
    counters: Arc<IrqchipCounters>,
}

impl ExclusiveLapics {
    /// vCPU i gets APIC id i (as the VMM's CPUID says).
    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    pub fn new(config: &IrqchipConfig, counters: Arc<IrqchipCounters>) -> Self {
        ExclusiveLapics {
            lapics: (0..config.vcpus.min(super::MAX_VCPUS))
                .map(|i| Lapic {
                    regs: LapicRegs::new(i as u8),
                    irr: VectorSet::default(),
                    tmr: VectorSet::default(),
                })
                .collect(),
            sink: config.sink.clone(),
            clock: config.clock.clone(),
            counters,
        }
    }

    pub fn vcpus(&self) -> u32 {
        u32::try_from(self.lapics.len()).unwrap_or(u32::MAX)
    }

    /// The vector `acknowledge` would return for `vcpu`.
    pub fn pending_vector(&self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapics.get(vcpu as usize)?;
        lapic.regs.deliverable(&lapic.irr.0)
    }

    /// Interrupt acknowledge on injection: the pending vector moves IRR → ISR.
    pub fn acknowledge(&mut self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapics.get_mut(vcpu as usize)?;
        let Some(vector) = lapic.regs.deliverable(&lapic.irr.0) else {
            IrqchipCounters::bump(&self.counters.spurious_inta);
            return None;
        };
        lapic.irr.clear(vector);
        lapic.regs.isr.set(vector);
        Some(vector)
    }

    /// EOI from `vcpu` (what a guest write to the EOI register does).
    pub fn eoi(&mut self, vcpu: u32) {
        self.write_register(vcpu, super::regs::REG_EOI, 0);
    }

    /// Accept a fixed interrupt into `vcpu`'s IRR; kicks the vCPU when the vector
    /// is newly pending. Returns whether it was accepted.
    pub fn accept(&mut self, vcpu: u32, vector: u8, level_triggered: bool) -> bool {
        let Some(lapic) = self.lapics.get_mut(vcpu as usize) else {
            IrqchipCounters::bump(&self.counters.no_destination);
            return false;
        };
        if vector < 16 {
            lapic.regs.error(ESR_RECEIVE_ILLEGAL_VECTOR);
            IrqchipCounters::bump(&self.counters.illegal_vector);
            return false;
        }
        if !lapic.regs.enabled() {
            IrqchipCounters::bump(&self.counters.dropped_disabled);
            return false;
        }
        if level_triggered {
            lapic.tmr.set(vector);
        } else {
            lapic.tmr.clear(vector);
        }
        let newly = !lapic.irr.test(vector);
        lapic.irr.set(vector);
        if newly {
            self.sink.event(IrqchipEvent::Kick { vcpu });
        }
        true
    }

    /// Deliver an APIC-bus message from `sender` (None: the IOAPIC).
    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn send(&mut self, message: ApicMessage, sender: Option<u32>) -> u32 {
        let vcpus = self.vcpus();
        let targets = destinations(&message, sender, vcpus, |i| {
            self.lapics[i as usize].regs.addressing()
        });
        if targets == 0 {
            IrqchipCounters::bump(&self.counters.no_destination);
            return 0;
        }
        match message.mode {
            DeliveryMode::Fixed | DeliveryMode::LowestPriority => {
                if message.vector < 16 {
                    if let Some(s) = sender.and_then(|s| self.lapics.get_mut(s as usize)) {
                        s.regs.error(ESR_SEND_ILLEGAL_VECTOR);
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
                    .filter(|t| self.accept(*t, message.vector, message.level_triggered))
                    .count() as u32
            }
            mode => deliver_special(&*self.sink, &self.counters, mode, &message, targets),
        }
    }

    /// Deliver a message from the IOAPIC.
    pub fn deliver(&mut self, message: ApicMessage) -> u32 {
        self.send(message, None)
    }

    /// `vcpu` took INIT: registers back to their INIT state, APIC id kept.
    pub fn init_reset(&mut self, vcpu: u32) {
        if let Some(lapic) = self.lapics.get_mut(vcpu as usize) {
            let had_timer = lapic.regs.timer.deadline_ns.is_some();
            *lapic = Lapic {
                regs: LapicRegs::new(lapic.regs.apic_id),
                irr: VectorSet::default(),
                tmr: VectorSet::default(),
            };
            if had_timer {
                self.sink.event(IrqchipEvent::TimerDeadline {
                    vcpu,
                    deadline_ns: None,
                });
            }
        }
    }

    /// The timer thread reports `deadline` passed.
    pub fn timer_expired(&mut self, vcpu: u32, deadline: u64) {
        let now = self.clock.now_ns();
        let Some(lapic) = self.lapics.get_mut(vcpu as usize) else {
            return;
        };
        let (vector, next) = lapic.regs.timer_expired(deadline, now, &self.counters);
        if let Some(deadline_ns) = next {
            self.sink
                .event(IrqchipEvent::TimerDeadline { vcpu, deadline_ns });
        }
        if let Some(vector) = vector {
            self.accept(vcpu, vector, false);
        }
    }

    fn write_register(&mut self, vcpu: u32, reg: u64, value: u32) {
        let now = self.clock.now_ns();
        let Some(lapic) = self.lapics.get_mut(vcpu as usize) else {
            return;
        };
        match lapic.regs.write(reg, value, now, &self.counters) {
            RegEffect::None => {}
            RegEffect::Eoi(vector) => {
                if lapic.tmr.test(vector) {
                    lapic.tmr.clear(vector);
                    self.sink.event(IrqchipEvent::EoiBroadcast { vector });
                }
            }
            RegEffect::Send(message) => {
                self.send(message, Some(vcpu));
            }
            RegEffect::Timer(deadline_ns) => {
                self.sink
                    .event(IrqchipEvent::TimerDeadline { vcpu, deadline_ns });
            }
        }
    }

    /// A snapshot of `vcpu`'s (IRR, ISR, TMR) for tests and diagnostics.
    pub fn vectors(&self, vcpu: u32) -> Option<([u32; 8], [u32; 8], [u32; 8])> {
        let l = self.lapics.get(vcpu as usize)?;
        Some((l.irr.0, l.regs.isr.0, l.tmr.0))
    }

    fn read_control(&mut self, vcpu: u32, reg: u64) -> u64 {
        match reg {
            lapic_ctl::INTA => self.acknowledge(vcpu).map_or(NO_VECTOR, u64::from),
            lapic_ctl::PENDING => self.pending_vector(vcpu).map_or(NO_VECTOR, u64::from),
            _ => {
                IrqchipCounters::bump(&self.counters.bad_access);
                0
            }
        }
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn write_control(&mut self, vcpu: u32, reg: u64, value: u64) {
        match reg {
            lapic_ctl::ACCEPT => {
                self.accept(vcpu, value as u8, value & 0x100 != 0);
            }
            lapic_ctl::TIMER_EXPIRED => self.timer_expired(vcpu, value),
            lapic_ctl::INIT_RESET => self.init_reset(vcpu),
            _ => IrqchipCounters::bump(&self.counters.bad_access),
        }
    }
}

/// The vCPUs whose bits are set in `mask`.
pub(crate) fn each(mask: u64) -> impl Iterator<Item = u32> {
    (0..64u32).filter(move |i| mask & (1 << i) != 0)
}

/// NMI, INIT, SIPI (and the modes not modelled) for every target: these are the
/// VMM's to carry out, so they become events.
pub(crate) fn deliver_special(
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
pub(crate) fn window_offset(offset: u64) -> (u32, bool, u64) {
    let vcpu = u32::try_from(offset / LAPIC_STRIDE).unwrap_or(u32::MAX);
    let in_stride = offset % LAPIC_STRIDE;
    (vcpu, in_stride >= PAGE, in_stride % PAGE)
}

impl ExclusiveDevice for ExclusiveLapics {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
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
        let now = self.clock.now_ns();
        let value = match self.lapics.get_mut(vcpu as usize) {
            Some(l) if byte < 4 => l.regs.read(reg, now, &l.irr.0, &l.tmr.0),
            _ => 0,
        };
        fill_le(data, u64::from(value), byte);
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn write(&mut self, offset: u64, data: &[u8]) {
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
        self.write_register(vcpu, reg, le_value(data) as u32);
    }
}
