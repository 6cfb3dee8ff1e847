//! The IOAPIC (82093AA data sheet; version 0x20 as KVM's): an indirect register
//! window (IOREGSEL at 0x00, IOWIN at 0x10, EOI at 0x40), 24 redirection entries,
//! edge and level inputs with remote IRR, and EOI from the LAPICs. Always an
//! exclusive device; it delivers into the LAPIC set through [`ApicTarget`]
//! (lock order: IOAPIC, then LAPIC set, never the reverse: a LAPIC's EOI of a
//! level vector reaches the IOAPIC as an [`super::IrqchipEvent::EoiBroadcast`] that the
//! VMM writes to the EOI register).

use super::invariants::{
    check_remote_irr_held, check_remote_irr_level, IrqchipViolation, LapicView, LEVEL, REMOTE_IRR,
};
use super::regs::{split_access, ApicMessage, DeliveryMode, Shorthand};
use super::{ioapic_ctl, ApicTarget, IrqchipCounters, PAGE};
use crate::devices::{fill_le, le_value, ExclusiveDevice};
use std::sync::Arc;

pub const IOAPIC_PINS: usize = 24;
const VERSION: u32 = 0x0017_0020; // 24 entries (max index 23), version 0x20
const MASKED: u64 = 1 << 16;
/// Writable bits: vector, delivery mode, dest mode, polarity, trigger, mask, dest.
const WRITABLE: u64 = 0xff00_0000_0001_afff;

pub struct Ioapic {
    id: u32,
    select: u32,
    redirection: [u64; IOAPIC_PINS],
    /// The vector each pin's remote IRR waits for (the entry's vector when
    /// it was delivered: a guest may reprogram the entry since).
    remote_vector: [u8; IOAPIC_PINS],
    lines: u32,
    target: Arc<dyn ApicTarget>,
    counters: Arc<IrqchipCounters>,
}

impl Ioapic {
    pub fn new(target: Arc<dyn ApicTarget>, counters: Arc<IrqchipCounters>) -> Self {
        Ioapic {
            id: 0,
            select: 0,
            redirection: [MASKED; IOAPIC_PINS],
            remote_vector: [0; IOAPIC_PINS],
            lines: 0,
            target,
            counters,
        }
    }

    /// Set input `pin` to `level` (the logical assertion; polarity is the
    /// device's business).
    pub fn set_irq(&mut self, pin: u64, level: bool) {
        let Some(index) = usize::try_from(pin).ok().filter(|p| *p < IOAPIC_PINS) else {
            IrqchipCounters::bump(&self.counters.bad_pin);
            return;
        };
        let bit = 1u32 << index;
        let rising = level && self.lines & bit == 0;
        if level {
            self.lines |= bit;
        } else {
            self.lines &= !bit;
        }
        let entry = self.redirection[index];
        if entry & LEVEL != 0 {
            if level {
                self.service(index);
            }
        } else if rising && entry & MASKED == 0 {
            self.send(index);
        }
    }

    /// Deliver a level-triggered pin if it is asserted, unmasked and not waiting
    /// for its EOI.
    fn service(&mut self, index: usize) {
        let entry = self.redirection[index];
        if entry & LEVEL != 0
            && entry & MASKED == 0
            && entry & REMOTE_IRR == 0
            && self.lines & (1 << index) != 0
            && self.send(index) > 0
        {
            self.redirection[index] |= REMOTE_IRR;
            self.remote_vector[index] = entry.to_le_bytes()[0];
        }
    }

    fn send(&mut self, index: usize) -> u32 {
        let entry = self.redirection[index];
        let bytes = entry.to_le_bytes();
        let mode = DeliveryMode::from_bits(u32::from(bytes[1]));
        let message = ApicMessage {
            vector: bytes[0],
            mode,
            logical: entry & (1 << 11) != 0,
            dest: bytes[7],
            shorthand: Shorthand::None,
            level_triggered: entry & LEVEL != 0,
            assert: true,
        };
        match mode {
            DeliveryMode::Fixed
            | DeliveryMode::LowestPriority
            | DeliveryMode::Nmi
            | DeliveryMode::Init => self.target.deliver(message),
            _ => {
                IrqchipCounters::bump(&self.counters.unsupported_delivery);
                0
            }
        }
    }

    /// EOI of `vector` by a LAPIC: clear remote IRR, re-deliver a still-high line.
    pub fn eoi(&mut self, vector: u8) {
        for index in 0..IOAPIC_PINS {
            let entry = self.redirection[index];
            if entry.to_le_bytes()[0] == vector && entry & REMOTE_IRR != 0 {
                self.redirection[index] &= !REMOTE_IRR;
                self.service(index);
            }
        }
    }

    /// The IOAPIC invariants (`invariants`) against the LAPICs' `views`:
    /// remote IRR only on level-triggered entries, each for an interrupt a
    /// LAPIC still holds; entries with only writable bits; registers in range.
    pub fn check_invariants(&self, lapics: &[LapicView], out: &mut Vec<IrqchipViolation>) {
        check_remote_irr_level(&self.redirection, out);
        let waiting: Vec<(usize, u8)> = (0..IOAPIC_PINS)
            .filter(|pin| self.redirection[*pin] & REMOTE_IRR != 0)
            .map(|pin| (pin, self.remote_vector[pin]))
            .collect();
        check_remote_irr_held(&waiting, lapics, out);
        for (pin, entry) in self.redirection.iter().enumerate() {
            let stray = entry & !(WRITABLE | REMOTE_IRR);
            if stray != 0 {
                out.push(IrqchipViolation::MalformedEntry {
                    pin,
                    entry: *entry,
                    stray,
                });
            }
        }
    }

    /// Test-only: set `pin`'s remote IRR as if `vector` had been delivered,
    /// without a LAPIC taking it (a lost delivery).
    #[cfg(test)]
    pub(crate) fn corrupt(&mut self, pin: usize, vector: u8) {
        self.redirection[pin] |= REMOTE_IRR;
        self.remote_vector[pin] = vector;
    }

    /// The redirection entry of `pin` (tests, diagnostics).
    pub fn entry(&self, pin: usize) -> Option<u64> {
        self.redirection.get(pin).copied()
    }

    fn read_indirect(&self) -> u32 {
        match self.select {
            0 => self.id << 24,
            1 => VERSION,
            2 => self.id << 24, // arbitration id
            r @ 0x10..=0x3f => {
                let entry = self.redirection[((r - 0x10) / 2) as usize];
                if r % 2 == 0 {
                    // The low word (not u32::MAX when a destination is set).
                    u32::try_from(entry & 0xffff_ffff).unwrap_or(u32::MAX)
                } else {
                    (entry >> 32) as u32
                }
            }
            _ => 0,
        }
    }

    fn write_indirect(&mut self, value: u32) {
        match self.select {
            0 => self.id = (value >> 24) & 0xf,
            r @ 0x10..=0x3f => {
                let index = ((r - 0x10) / 2) as usize;
                let old = self.redirection[index];
                let new = if r % 2 == 0 {
                    (old & !0xffff_ffff) | u64::from(value)
                } else {
                    (old & 0xffff_ffff) | u64::from(value) << 32
                };
                // Delivery status and remote IRR are read-only.
                self.redirection[index] = (new & WRITABLE) | (old & REMOTE_IRR);
                if self.redirection[index] & LEVEL == 0 {
                    self.redirection[index] &= !REMOTE_IRR;
                }
                // Unmasking a level pin that is high delivers it now.
                self.service(index);
            }
            _ => IrqchipCounters::bump(&self.counters.reserved_write),
        }
    }
}

impl ExclusiveDevice for Ioapic {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if offset >= PAGE {
            IrqchipCounters::bump(&self.counters.bad_access);
            data.fill(0);
            return;
        }
        let (reg, byte, full) = split_access(offset, data.len());
        if !full {
            IrqchipCounters::bump(&self.counters.bad_access);
        }
        let value = match (reg, byte < 4) {
            (0x00, true) => self.select,
            (0x10, true) => self.read_indirect(),
            _ => 0,
        };
        fill_le(data, u64::from(value), byte);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        let value = le_value(data);
        if offset >= PAGE {
            match offset - PAGE {
                ioapic_ctl::SET_IRQ => self.set_irq(value & 0xff, value & 0x100 != 0),
                _ => IrqchipCounters::bump(&self.counters.bad_access),
            }
            return;
        }
        let (reg, _, full) = split_access(offset, data.len());
        if !full {
            IrqchipCounters::bump(&self.counters.bad_access);
            return;
        }
        match reg {
            0x00 => self.select = u32::try_from(value).unwrap_or(u32::MAX) & 0xff,
            0x10 => self.write_indirect(u32::try_from(value).unwrap_or(u32::MAX)),
            0x40 => self.eoi(value.to_le_bytes()[0]),
            _ => IrqchipCounters::bump(&self.counters.reserved_write),
        }
    }
}
