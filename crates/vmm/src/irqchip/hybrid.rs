//! The thread-safe LAPIC set and PIC of `hybrid` (seed 004 §4.4): they are
//! [`ConcurrentDevice`]s, so the bus lets vCPU threads call them directly.
//!
//! * IRR (and TMR) are atomic bitmaps: any thread (another vCPU's ICR write, the
//!   IOAPIC on the I/O thread, the timer thread, a device) sets a bit with one
//!   `fetch_or` and kicks the owner if the bit was newly set. Nothing else.
//! * Prioritizing, INTA (IRR→ISR) and EOI run on the owning vCPU only, under that
//!   LAPIC's own lock, which only the owner and its timer expiry take. The owner
//!   is the only thread that clears an IRR bit, so a bit it saw set is still set
//!   when it clears it: an acknowledge can neither lose nor duplicate a vector.
//! * The pull model: the kick is only a hint. Raising is "set IRR, then kick";
//!   the vCPU re-checks IRR before every entry; so an interrupt raised after the
//!   check is followed by a kick, and a stale kick finds nothing (counted as a
//!   spurious INTA, harmless). No prioritizing happens on the raising side, which
//!   removes the delayed INTR/DEASS race of the thesis's Table 4.1 by construction.
//! * Routing state other threads need (APIC id, LDR, DFR, enabled) is mirrored in
//!   an atomic, so sending an IPI takes no lock but the sender's own.

use super::lapic::{deliver_special, each, window_offset};
use super::pic::{pin_bit, poll_byte, PicConfig, PortEffect, Selection};
use super::regs::{
    destinations, split_access, Addressing, ApicMessage, DeliveryMode, LapicRegs, RegEffect,
    ESR_RECEIVE_ILLEGAL_VECTOR, ESR_SEND_ILLEGAL_VECTOR, REG_ESR,
};
use super::sync::{lock, AtomicU16, AtomicU32, Mutex, Ordering};
use super::{
    lapic_ctl, pic_ctl, ApicTarget, IrqClock, IrqchipConfig, IrqchipCounters, IrqchipEvent,
    IrqchipSink, NO_VECTOR,
};
use crate::devices::{fill_le, le_value, ConcurrentDevice};
use std::sync::Arc;

const ROUTING_ENABLED: u32 = 1 << 24;

struct HybridLapic {
    irr: [AtomicU32; 8],
    tmr: [AtomicU32; 8],
    /// apic_id | ldr << 8 | dfr model << 16 | enabled << 24.
    routing: AtomicU32,
    /// ESR bits raised by other threads, merged by the owner on an ESR write.
    remote_errors: AtomicU32,
    regs: Mutex<LapicRegs>,
}

impl HybridLapic {
    fn new(apic_id: u8) -> Self {
        let regs = LapicRegs::new(apic_id);
        let lapic = HybridLapic {
            irr: std::array::from_fn(|_| AtomicU32::new(0)),
            tmr: std::array::from_fn(|_| AtomicU32::new(0)),
            routing: AtomicU32::new(0),
            remote_errors: AtomicU32::new(0),
            regs: Mutex::new(regs.clone()),
        };
        lapic.mirror(&regs);
        lapic
    }

    fn mirror(&self, regs: &LapicRegs) {
        let a = regs.addressing();
        let enabled = if regs.enabled() { ROUTING_ENABLED } else { 0 };
        let value =
            u32::from(a.apic_id) | u32::from(a.ldr) << 8 | u32::from(a.dfr_model) << 16 | enabled;
        self.routing.store(value, Ordering::Release);
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn addressing(&self) -> Addressing {
        let r = self.routing.load(Ordering::Acquire);
        Addressing {
            apic_id: r as u8,
            ldr: (r >> 8) as u8,
            dfr_model: (r >> 16) as u8,
        }
    }

    fn snapshot(words: &[AtomicU32; 8]) -> [u32; 8] {
        std::array::from_fn(|i| words[i].load(Ordering::SeqCst))
    }
}

fn word_bit(vector: u8) -> (usize, u32) {
    (usize::from(vector >> 5), 1 << (vector & 31))
}

/// All local APICs of a VM, thread-safe.
pub struct HybridLapics {
    lapics: Vec<HybridLapic>,
    sink: Arc<dyn IrqchipSink>,
    clock: Arc<dyn IrqClock>,
    counters: Arc<IrqchipCounters>,
}

impl HybridLapics {
    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    pub fn new(config: &IrqchipConfig, counters: Arc<IrqchipCounters>) -> Self {
        HybridLapics {
            lapics: (0..config.vcpus.min(super::MAX_VCPUS))
                .map(|i| HybridLapic::new(i as u8))
                .collect(),
            sink: config.sink.clone(),
            clock: config.clock.clone(),
            counters,
        }
    }

    pub fn vcpus(&self) -> u32 {
        u32::try_from(self.lapics.len()).unwrap_or(u32::MAX)
    }

    /// Set `vector` in `vcpu`'s IRR from any thread, then kick if newly pending.
    pub fn accept(&self, vcpu: u32, vector: u8, level_triggered: bool) -> bool {
        let Some(lapic) = self.lapics.get(vcpu as usize) else {
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
        let before = lapic.irr[word].fetch_or(bit, Ordering::SeqCst);
        if before & bit == 0 {
            self.sink.event(IrqchipEvent::Kick { vcpu });
        }
        true
    }

    /// The vector `acknowledge` would return (owner only, like INTA).
    pub fn pending_vector(&self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapics.get(vcpu as usize)?;
        let regs = lock(&lapic.regs);
        regs.deliverable(&HybridLapic::snapshot(&lapic.irr))
    }

    /// INTA on the owning vCPU: the pending vector moves IRR → ISR.
    pub fn acknowledge(&self, vcpu: u32) -> Option<u8> {
        let lapic = self.lapics.get(vcpu as usize)?;
        let mut regs = lock(&lapic.regs);
        let Some(vector) = regs.deliverable(&HybridLapic::snapshot(&lapic.irr)) else {
            IrqchipCounters::bump(&self.counters.spurious_inta);
            return None;
        };
        let (word, bit) = word_bit(vector);
        let before = lapic.irr[word].fetch_and(!bit, Ordering::SeqCst);
        if before & bit == 0 {
            // Unreachable while only the owner clears IRR; kept as a guard.
            IrqchipCounters::bump(&self.counters.spurious_inta);
            return None;
        }
        regs.isr.set(vector);
        Some(vector)
    }

    /// EOI from the owning vCPU.
    pub fn eoi(&self, vcpu: u32) {
        self.write_register(vcpu, super::regs::REG_EOI, 0);
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn send(&self, message: ApicMessage, sender: Option<u32>) -> u32 {
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
                    if let Some(s) = sender.and_then(|s| self.lapics.get(s as usize)) {
                        s.remote_errors
                            .fetch_or(ESR_SEND_ILLEGAL_VECTOR, Ordering::Relaxed);
                    }
                    IrqchipCounters::bump(&self.counters.illegal_vector);
                    return 0;
                }
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

    /// A guest write to `vcpu`'s register `reg` (on the owning vCPU). The own
    /// lock is released before the effect is carried out, so an IPI never holds
    /// two LAPIC locks.
    fn write_register(&self, vcpu: u32, reg: u64, value: u32) {
        let Some(lapic) = self.lapics.get(vcpu as usize) else {
            return;
        };
        let now = self.clock.now_ns();
        let effect = {
            let mut regs = lock(&lapic.regs);
            if reg == REG_ESR {
                let remote = lapic.remote_errors.swap(0, Ordering::Relaxed);
                regs.error(remote);
            }
            let effect = regs.write(reg, value, now, &self.counters);
            lapic.mirror(&regs);
            effect
        };
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
        let Some(lapic) = self.lapics.get(vcpu as usize) else {
            return;
        };
        let now = self.clock.now_ns();
        let (vector, next) = lock(&lapic.regs).timer_expired(deadline, now, &self.counters);
        if let Some(deadline_ns) = next {
            self.sink
                .event(IrqchipEvent::TimerDeadline { vcpu, deadline_ns });
        }
        if let Some(vector) = vector {
            self.accept(vcpu, vector, false);
        }
    }

    /// `vcpu` took INIT (on its own thread).
    pub fn init_reset(&self, vcpu: u32) {
        let Some(lapic) = self.lapics.get(vcpu as usize) else {
            return;
        };
        let mut regs = lock(&lapic.regs);
        let had_timer = regs.timer.deadline_ns.is_some();
        *regs = LapicRegs::new(regs.apic_id);
        lapic.mirror(&regs);
        for word in lapic.irr.iter().chain(&lapic.tmr) {
            word.store(0, Ordering::SeqCst);
        }
        lapic.remote_errors.store(0, Ordering::Relaxed);
        drop(regs);
        if had_timer {
            self.sink.event(IrqchipEvent::TimerDeadline {
                vcpu,
                deadline_ns: None,
            });
        }
    }

    /// A snapshot of `vcpu`'s (IRR, ISR, TMR).
    pub fn vectors(&self, vcpu: u32) -> Option<([u32; 8], [u32; 8], [u32; 8])> {
        let lapic = self.lapics.get(vcpu as usize)?;
        let regs = lock(&lapic.regs);
        Some((
            HybridLapic::snapshot(&lapic.irr),
            regs.isr.0,
            HybridLapic::snapshot(&lapic.tmr),
        ))
    }
}

impl ApicTarget for HybridLapics {
    fn deliver(&self, message: ApicMessage) -> u32 {
        self.send(message, None)
    }
}

impl ConcurrentDevice for HybridLapics {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let (vcpu, control, offset) = window_offset(offset);
        if control {
            let value = match offset & !7 {
                lapic_ctl::INTA => self.acknowledge(vcpu).map_or(NO_VECTOR, u64::from),
                lapic_ctl::PENDING => self.pending_vector(vcpu).map_or(NO_VECTOR, u64::from),
                _ => {
                    IrqchipCounters::bump(&self.counters.bad_access);
                    0
                }
            };
            fill_le(data, value, offset & 7);
            return;
        }
        let (reg, byte, full) = split_access(offset, data.len());
        if !full {
            IrqchipCounters::bump(&self.counters.bad_access);
        }
        let value = match self.lapics.get(vcpu as usize) {
            Some(lapic) if byte < 4 => {
                let now = self.clock.now_ns();
                let mut regs = lock(&lapic.regs);
                let irr = HybridLapic::snapshot(&lapic.irr);
                let tmr = HybridLapic::snapshot(&lapic.tmr);
                regs.read(reg, now, &irr, &tmr)
            }
            _ => 0,
        };
        fill_le(data, u64::from(value), byte);
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn write(&self, offset: u64, data: &[u8]) {
        let (vcpu, control, offset) = window_offset(offset);
        if control {
            let value = le_value(data);
            match offset {
                lapic_ctl::ACCEPT => {
                    self.accept(vcpu, value as u8, value & 0x100 != 0);
                }
                lapic_ctl::TIMER_EXPIRED => self.timer_expired(vcpu, value),
                lapic_ctl::INIT_RESET => self.init_reset(vcpu),
                _ => IrqchipCounters::bump(&self.counters.bad_access),
            }
            return;
        }
        let (reg, _, full) = split_access(offset, data.len());
        if !full {
            IrqchipCounters::bump(&self.counters.bad_access);
            return;
        }
        self.write_register(vcpu, reg, le_value(data) as u32);
    }
}

/// The PIC pair, thread-safe: IRR and line levels are atomics set by any thread
/// without a lock; port accesses and INTA take the configuration lock.
pub struct HybridPic {
    irr: AtomicU16,
    lines: AtomicU16,
    /// Mirror of the ELCR, so raising a line needs no lock.
    elcr: AtomicU16,
    config: Mutex<PicConfig>,
    sink: Arc<dyn IrqchipSink>,
    counters: Arc<IrqchipCounters>,
}

impl HybridPic {
    pub fn new(sink: Arc<dyn IrqchipSink>, counters: Arc<IrqchipCounters>) -> Self {
        HybridPic {
            irr: AtomicU16::new(0),
            lines: AtomicU16::new(0),
            elcr: AtomicU16::new(0),
            config: Mutex::new(PicConfig::new()),
            sink,
            counters,
        }
    }

    /// Set input `irq` (0–15, not 2) to `level` from any thread.
    pub fn set_irq(&self, irq: u64, level: bool) {
        let Some(bit) = pin_bit(irq) else {
            IrqchipCounters::bump(&self.counters.bad_pin);
            return;
        };
        let level_mode = self.elcr.load(Ordering::Acquire) & bit != 0;
        if level {
            let rising = self.lines.fetch_or(bit, Ordering::SeqCst) & bit == 0;
            if (rising || level_mode) && self.irr.fetch_or(bit, Ordering::SeqCst) & bit == 0 {
                self.sink.event(IrqchipEvent::ExtInt);
            }
        } else {
            self.lines.fetch_and(!bit, Ordering::SeqCst);
            if level_mode {
                self.irr.fetch_and(!bit, Ordering::SeqCst);
            }
        }
    }

    pub fn pending_vector(&self) -> Option<u8> {
        let config = lock(&self.config);
        config
            .select(self.irr.load(Ordering::SeqCst))
            .map(|s| s.vector)
    }

    /// INTA (on the vCPU taking ExtINT).
    pub fn acknowledge(&self) -> Option<u8> {
        let mut config = lock(&self.config);
        match Self::take(&self.irr, &mut config) {
            Some(selection) => Some(selection.vector),
            None => {
                IrqchipCounters::bump(&self.counters.spurious_inta);
                None
            }
        }
    }

    /// Select and commit under the configuration lock. An edge IRR bit is
    /// consumed with one `fetch_and`; if a level line dropped it in between, the
    /// cycle is spurious and nothing is committed.
    fn take(irr: &AtomicU16, config: &mut PicConfig) -> Option<Selection> {
        let selection = config.select(irr.load(Ordering::SeqCst))?;
        if config.clears_on_ack(selection.irr_bit)
            && irr.fetch_and(!selection.irr_bit, Ordering::SeqCst) & selection.irr_bit == 0
        {
            return None;
        }
        config.commit(&selection);
        Some(selection)
    }

    /// (IRR, ISR, IMR), master in the low byte.
    pub fn registers(&self) -> (u16, u16, u16) {
        let config = lock(&self.config);
        let imr = u16::from(config.read_port(1, 0)) | u16::from(config.read_port(3, 0)) << 8;
        (self.irr.load(Ordering::SeqCst), config.isr(), imr)
    }
}

impl ConcurrentDevice for HybridPic {
    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn read(&self, offset: u64, data: &mut [u8]) {
        let value = match offset {
            0..=5 => {
                let port = offset as usize;
                let mut config = lock(&self.config);
                if port < 4 && port.is_multiple_of(2) && config.take_poll(port / 2) {
                    let selection = Self::take(&self.irr, &mut config);
                    u64::from(poll_byte(selection.as_ref(), port / 2))
                } else {
                    u64::from(config.read_port(port, self.irr.load(Ordering::SeqCst)))
                }
            }
            pic_ctl::INTA => self.acknowledge().map_or(NO_VECTOR, u64::from),
            pic_ctl::PENDING => self.pending_vector().map_or(NO_VECTOR, u64::from),
            _ => {
                IrqchipCounters::bump(&self.counters.bad_access);
                u64::MAX
            }
        };
        fill_le(data, value, 0);
    }

    // Casts: register and access-size fields: taking the low bits is the architectural behaviour; vCPU, pin and offset indices are bounded by the chip size.
    #[allow(clippy::cast_possible_truncation)]
    fn write(&self, offset: u64, data: &[u8]) {
        let value = le_value(data);
        match offset {
            0..=5 => {
                if data.len() != 1 {
                    IrqchipCounters::bump(&self.counters.bad_access);
                    if data.is_empty() {
                        return;
                    }
                }
                let mut config = lock(&self.config);
                if let PortEffect::ClearIrr(bits) = config.write_port(offset as usize, value as u8)
                {
                    self.irr.fetch_and(!bits, Ordering::SeqCst);
                }
                self.elcr.store(config.elcr(), Ordering::Release);
            }
            pic_ctl::SET_IRQ => self.set_irq(value & 0xff, value & 0x100 != 0),
            _ => IrqchipCounters::bump(&self.counters.bad_access),
        }
    }
}
