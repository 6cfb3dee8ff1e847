//! The 8259A PIC pair (master on ports 0x20/0x21, slave on 0xa0/0xa1 cascaded on
//! master IRQ 2, ELCR at 0x4d0/0x4d1), after the Intel 8259A data sheet (the
//! Seoul thesis's reference [7]): one model ([`PicPair`]) in two forms,
//! [`ExclusivePic`] (plain cells, serialized by the bus) and [`HybridPic`]
//! (thread-safe, for `hybrid`). [`PicConfig`] is everything but the request
//! register: IRR and the input line levels are words any thread may set
//! without entering the configuration, bit i = IRQ i (0–7 master, 8–15 slave).
//! Special features not modelled: buffered mode, the 8080 call format, MCS-80 vectors.

use super::invariants::IrqchipViolation;
use super::sync::{Cells, Ordering, Shelter, Synced, Unsynced, Word};
use super::{pic_ctl, IrqchipCounters, IrqchipEvent, IrqchipSink, NO_VECTOR};
use crate::devices::{fill_le, le_value, ConcurrentDevice, ExclusiveDevice};
use std::ops::Deref;
use std::sync::Arc;

/// One 8259A.
#[derive(Debug, Clone, Default)]
struct Chip {
    imr: u8,
    isr: u8,
    vector_base: u8,
    /// The IRQ with the highest priority (rotations move it).
    lowest_rotation: u8,
    read_isr: bool,
    poll: bool,
    special_mask: bool,
    auto_eoi: bool,
    rotate_on_auto_eoi: bool,
    special_fully_nested: bool,
    /// 0 when initialized; 2, 3, 4 while waiting for ICW2, ICW3, ICW4.
    init_step: u8,
    expect_icw4: bool,
    single: bool,
    elcr: u8,
}

impl Chip {
    /// Priority rank of the highest-priority bit set in `mask` (0 = top, 8 = none).
    fn rank(&self, mask: u8) -> u8 {
        (0..8)
            .find(|k| mask & (1 << ((k + self.lowest_rotation) & 7)) != 0)
            .unwrap_or(8)
    }

    fn irq_of_rank(&self, rank: u8) -> u8 {
        (rank + self.lowest_rotation) & 7
    }

    /// The IRQ this chip would request given its request bits, if any beats the
    /// in-service ones.
    fn request(&self, requests: u8, master: bool) -> Option<u8> {
        let rank = self.rank(requests & !self.imr);
        if rank == 8 {
            return None;
        }
        let mut in_service = self.isr;
        if self.special_mask {
            in_service &= !self.imr;
        }
        if master && self.special_fully_nested {
            // A slave request may interrupt the slave's own service routine.
            in_service &= !(1 << 2);
        }
        (rank < self.rank(in_service)).then(|| self.irq_of_rank(rank))
    }

    fn ack(&mut self, irq: u8) {
        if self.auto_eoi {
            if self.rotate_on_auto_eoi {
                self.lowest_rotation = (irq + 1) & 7;
            }
        } else {
            self.isr |= 1 << irq;
        }
    }

    /// OCW2 (command port write with bits 4:3 = 00).
    fn ocw2(&mut self, value: u8) {
        let irq = value & 7;
        match value >> 5 {
            0 => self.rotate_on_auto_eoi = false,
            4 => self.rotate_on_auto_eoi = true,
            cmd @ (1 | 5) => {
                // Non-specific EOI: the highest-priority in-service IRQ.
                let rank = self.rank(self.isr);
                if rank < 8 {
                    let done = self.irq_of_rank(rank);
                    self.isr &= !(1 << done);
                    if cmd == 5 {
                        self.lowest_rotation = (done + 1) & 7;
                    }
                }
            }
            cmd @ (3 | 7) => {
                self.isr &= !(1 << irq);
                if cmd == 7 {
                    self.lowest_rotation = (irq + 1) & 7;
                }
            }
            6 => self.lowest_rotation = (irq + 1) & 7,
            _ => {} // 2: no operation
        }
    }
}

/// What INTA will deliver: the vector and the IRR bit it consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub vector: u8,
    master_irq: u8,
    slave_irq: Option<u8>,
    /// Bit (of the 16-bit IRR) this acknowledge consumes.
    pub irr_bit: u16,
}

/// The pair's state apart from IRR and the line levels.
#[derive(Debug, Clone)]
pub struct PicConfig {
    chips: [Chip; 2],
}

/// A port write's consequence for the request register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortEffect {
    None,
    /// ICW1 resets the chip's edge-sense latches: clear these IRR bits.
    ClearIrr(u16),
}

impl Default for PicConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl PicConfig {
    /// Power-on state: both chips fully masked until programmed, IRQ 0–2 and 8
    /// and 13 edge-only (their ELCR bits are fixed).
    pub fn new() -> Self {
        let chip = |base| Chip {
            imr: 0xff,
            vector_base: base,
            ..Chip::default()
        };
        PicConfig {
            chips: [chip(0x08), chip(0x70)],
        }
    }

    pub fn elcr(&self) -> u16 {
        u16::from(self.chips[0].elcr) | u16::from(self.chips[1].elcr) << 8
    }

    /// The interrupt INTA would deliver for request bits `irr`.
    pub fn select(&self, irr: u16) -> Option<Selection> {
        let [master_irr, slave_irr] = irr.to_le_bytes();
        let slave = self.chips[1].request(slave_irr, false);
        let master_requests = (master_irr & !(1 << 2)) | if slave.is_some() { 1 << 2 } else { 0 };
        let master_irq = self.chips[0].request(master_requests, true)?;
        if master_irq == 2 {
            let slave_irq = slave?;
            Some(Selection {
                vector: self.chips[1].vector_base.wrapping_add(slave_irq),
                master_irq,
                slave_irq: Some(slave_irq),
                irr_bit: 1 << (8 + slave_irq),
            })
        } else {
            Some(Selection {
                vector: self.chips[0].vector_base.wrapping_add(master_irq),
                master_irq,
                slave_irq: None,
                irr_bit: 1 << master_irq,
            })
        }
    }

    /// Complete an INTA cycle for `selection` (in-service bits, auto-EOI).
    pub fn commit(&mut self, selection: &Selection) {
        self.chips[0].ack(selection.master_irq);
        if let Some(irq) = selection.slave_irq {
            self.chips[1].ack(irq);
        }
    }

    /// Whether an IRR bit is cleared by INTA: edge-triggered ones are; a level one
    /// stays while its line is high (the line clears it).
    pub fn clears_on_ack(&self, irr_bit: u16) -> bool {
        self.elcr() & irr_bit == 0
    }

    /// A poll command is pending on `chip` (the next command-port read is an INTA).
    pub fn take_poll(&mut self, chip: usize) -> bool {
        std::mem::take(&mut self.chips[chip].poll)
    }

    /// Guest write to port index `port` (see `pic_ctl::PORTS`).
    pub fn write_port(&mut self, port: usize, value: u8) -> PortEffect {
        if port >= 4 {
            let chip = &mut self.chips[port - 4];
            // IRQ 0, 1, 2 (master) and 8, 13 (slave) are edge-only on the PC.
            chip.elcr = value & if port == 4 { 0xf8 } else { 0xde };
            return PortEffect::None;
        }
        let index = port / 2;
        let chip = &mut self.chips[index];
        if port.is_multiple_of(2) {
            if value & 0x10 != 0 {
                // ICW1: start initialization; clears IMR, ISR, rotation, modes.
                let elcr = chip.elcr;
                let base = chip.vector_base;
                *chip = Chip {
                    init_step: 2,
                    expect_icw4: value & 1 != 0,
                    single: value & 2 != 0,
                    elcr,
                    vector_base: base,
                    ..Chip::default()
                };
                let edge = !u16::from(elcr) & 0xff;
                return PortEffect::ClearIrr(edge << (8 * index));
            } else if value & 0x08 != 0 {
                // OCW3.
                if value & 0x04 != 0 {
                    chip.poll = true;
                }
                if value & 0x02 != 0 {
                    chip.read_isr = value & 1 != 0;
                }
                if value & 0x40 != 0 {
                    chip.special_mask = value & 0x20 != 0;
                }
            } else {
                chip.ocw2(value);
            }
            return PortEffect::None;
        }
        match chip.init_step {
            2 => {
                chip.vector_base = value & 0xf8;
                chip.init_step = match (chip.single, chip.expect_icw4) {
                    (false, _) => 3,
                    (true, true) => 4,
                    (true, false) => 0,
                };
            }
            3 => chip.init_step = if chip.expect_icw4 { 4 } else { 0 },
            4 => {
                chip.auto_eoi = value & 0x02 != 0;
                chip.special_fully_nested = value & 0x10 != 0;
                chip.init_step = 0;
            }
            _ => chip.imr = value, // OCW1
        }
        PortEffect::None
    }

    /// Guest read of port index `port` (a pending poll is the caller's to handle).
    pub fn read_port(&self, port: usize, irr: u16) -> u8 {
        match port {
            0 | 2 => {
                let chip = &self.chips[port / 2];
                if chip.read_isr {
                    chip.isr
                } else {
                    irr.to_le_bytes()[port / 2]
                }
            }
            1 | 3 => self.chips[port / 2].imr,
            4 | 5 => self.chips[port - 4].elcr,
            _ => 0xff,
        }
    }

    /// What is wrong with either chip's configuration, as (chip, problem):
    /// vector bases 8-aligned (ICW2 keeps bits 7:3), the initialization in
    /// a known step, the ELCR's fixed edge bits clear.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        for (chip, name, fixed_edge) in [
            (&self.chips[0], "master", 0x07),
            (&self.chips[1], "slave", 0x21),
        ] {
            if chip.vector_base & 7 != 0 {
                out.push((
                    name,
                    format!("vector base {:#x} not 8-aligned", chip.vector_base),
                ));
            }
            if !matches!(chip.init_step, 0 | 2..=4) {
                out.push((name, format!("initialization step {}", chip.init_step)));
            }
            if chip.lowest_rotation > 7 {
                out.push((name, format!("rotation {}", chip.lowest_rotation)));
            }
            if chip.elcr & fixed_edge != 0 {
                out.push((name, format!("ELCR {:#x} sets an edge-only IRQ", chip.elcr)));
            }
        }
        out
    }

    /// In-service bits of both chips (master low byte).
    pub fn isr(&self) -> u16 {
        u16::from(self.chips[0].isr) | u16::from(self.chips[1].isr) << 8
    }
}

/// The outcome of a poll-mode read: 0x80 | IRQ when an interrupt was taken.
pub fn poll_byte(selection: Option<&Selection>, chip: usize) -> u8 {
    match (selection, chip) {
        (Some(s), 0) => 0x80 | s.master_irq,
        (Some(s), _) => s.slave_irq.map_or(0, |irq| 0x80 | irq),
        (None, _) => 0,
    }
}

/// Map an input pin to its IRR bit: IRQ 2 is the cascade input, not a pin.
pub fn pin_bit(irq: u64) -> Option<u16> {
    (irq < 16 && irq != 2).then(|| 1 << irq)
}

/// The PIC pair: the one model, in the cells `S`. IRR and the line levels are
/// set by any thread without entering the configuration; port accesses and
/// INTA enter it.
pub struct PicPair<S: Cells> {
    irr: S::Word,
    lines: S::Word,
    /// Mirror of the ELCR, so raising a line does not enter the configuration.
    elcr: S::Word,
    config: S::Shelter<PicConfig>,
    sink: Arc<dyn IrqchipSink>,
    counters: Arc<IrqchipCounters>,
}

impl<S: Cells> PicPair<S> {
    fn new(sink: Arc<dyn IrqchipSink>, counters: Arc<IrqchipCounters>) -> Self {
        PicPair {
            irr: S::Word::new(0),
            lines: S::Word::new(0),
            elcr: S::Word::new(0),
            config: S::Shelter::new(PicConfig::new()),
            sink,
            counters,
        }
    }

    fn irr(&self) -> u16 {
        // Only the low 16 bits are ever set.
        u16::try_from(self.irr.load(Ordering::SeqCst) & 0xffff).unwrap_or(u16::MAX)
    }

    /// Set input `irq` (0–15, not 2) to `level` (from any thread). A rising
    /// edge (or a high level in level mode) requests an interrupt and signals
    /// ExtINT.
    pub fn set_irq(&self, irq: u64, level: bool) {
        let Some(bit) = pin_bit(irq).map(u32::from) else {
            IrqchipCounters::bump(&self.counters.bad_pin);
            return;
        };
        let level_mode = self.elcr.load(Ordering::Acquire) & bit != 0;
        if level {
            let rising = self.lines.fetch_or(bit, Ordering::SeqCst) & bit == 0;
            // IRR first, then the ExtINT kick (the pull model).
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
        let irr = self.irr();
        self.config
            .with(|config| config.select(irr).map(|s| s.vector))
    }

    /// INTA (on the vCPU taking ExtINT): the selected IRQ moves to in-service.
    pub fn acknowledge(&self) -> Option<u8> {
        let selection = self.config.with(|config| self.take(config));
        if selection.is_none() {
            IrqchipCounters::bump(&self.counters.spurious_inta);
        }
        selection.map(|s| s.vector)
    }

    /// Select and commit inside the configuration. An edge IRR bit is consumed
    /// with one `fetch_and`; if a level line dropped it in between, the cycle
    /// is spurious and nothing is committed.
    fn take(&self, config: &mut PicConfig) -> Option<Selection> {
        let selection = config.select(self.irr())?;
        let bit = u32::from(selection.irr_bit);
        if config.clears_on_ack(selection.irr_bit)
            && self.irr.fetch_and(!bit, Ordering::SeqCst) & bit == 0
        {
            return None;
        }
        config.commit(&selection);
        Some(selection)
    }

    /// The PIC invariants (`invariants`): the configuration's own
    /// (`PicConfig::problems`), the ELCR mirror raisers read equal to the
    /// configuration's, and IRR and the line levels only on the 15 input
    /// pins (not the cascade input IRQ 2, nothing above IRQ 15).
    pub fn check_invariants(&self, out: &mut Vec<IrqchipViolation>) {
        let pins = 0xfffb;
        self.config.with(|config| {
            for (chip, problem) in config.problems() {
                out.push(IrqchipViolation::Pic { chip, problem });
            }
            let mirror = self.elcr.load(Ordering::Acquire);
            if mirror != u32::from(config.elcr()) {
                out.push(IrqchipViolation::Pic {
                    chip: "pair",
                    problem: format!(
                        "ELCR mirror {mirror:#x}, configuration {:#x}",
                        config.elcr()
                    ),
                });
            }
        });
        for (name, word) in [("IRR", &self.irr), ("input lines", &self.lines)] {
            let value = word.load(Ordering::SeqCst);
            if value & !pins != 0 {
                out.push(IrqchipViolation::Pic {
                    chip: "pair",
                    problem: format!("{name} {value:#x} outside the input pins"),
                });
            }
        }
    }

    /// Test-only: a request on the cascade input (IRQ 2), which no pin can set.
    #[cfg(test)]
    pub(crate) fn corrupt(&self) {
        self.irr.fetch_or(1 << 2, Ordering::SeqCst);
    }

    /// (IRR, ISR, IMR) of both chips, master in the low byte.
    pub fn registers(&self) -> (u16, u16, u16) {
        self.config.with(|config| {
            let imr = u16::from(config.read_port(1, 0)) | u16::from(config.read_port(3, 0)) << 8;
            (self.irr(), config.isr(), imr)
        })
    }

    /// A bus read at `offset` in the PIC window.
    fn read(&self, offset: u64, data: &mut [u8]) {
        let value = match offset {
            0..=5 => self.config.with(|config| {
                let port = port_index(offset);
                if port < 4 && port.is_multiple_of(2) && config.take_poll(port / 2) {
                    let selection = self.take(config);
                    u64::from(poll_byte(selection.as_ref(), port / 2))
                } else {
                    u64::from(config.read_port(port, self.irr()))
                }
            }),
            pic_ctl::INTA => self.acknowledge().map_or(NO_VECTOR, u64::from),
            pic_ctl::PENDING => self.pending_vector().map_or(NO_VECTOR, u64::from),
            _ => {
                IrqchipCounters::bump(&self.counters.bad_access);
                u64::MAX
            }
        };
        fill_le(data, value, 0);
    }

    /// A bus write at `offset` in the PIC window.
    fn write(&self, offset: u64, data: &[u8]) {
        let value = le_value(data);
        match offset {
            0..=5 => {
                if data.len() != 1 {
                    // Byte ports: the VMM splits wider accesses already; only
                    // the first byte of a wider one reaches this port.
                    IrqchipCounters::bump(&self.counters.bad_access);
                    if data.is_empty() {
                        return;
                    }
                }
                self.config.with(|config| {
                    // A port takes the low byte.
                    if let PortEffect::ClearIrr(bits) =
                        config.write_port(port_index(offset), value.to_le_bytes()[0])
                    {
                        self.irr.fetch_and(!u32::from(bits), Ordering::SeqCst);
                    }
                    self.elcr.store(u32::from(config.elcr()), Ordering::Release);
                });
            }
            pic_ctl::SET_IRQ => self.set_irq(value & 0xff, value & 0x100 != 0),
            _ => IrqchipCounters::bump(&self.counters.bad_access),
        }
    }
}

/// The port index (0..=5, see `pic_ctl::PORTS`) of a window offset in 0..=5.
fn port_index(offset: u64) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

/// The PIC pair's exclusive form: not thread-safe, called only under the bus's
/// serialization. Derefs to the model for the VMM's direct calls.
pub struct ExclusivePic(PicPair<Unsynced>);

impl ExclusivePic {
    pub fn new(sink: Arc<dyn IrqchipSink>, counters: Arc<IrqchipCounters>) -> Self {
        ExclusivePic(PicPair::new(sink, counters))
    }
}

impl Deref for ExclusivePic {
    type Target = PicPair<Unsynced>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl ExclusiveDevice for ExclusivePic {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        self.0.read(offset, data);
    }
    fn write(&mut self, offset: u64, data: &[u8]) {
        self.0.write(offset, data);
    }
}

/// The PIC pair's thread-safe form (`hybrid`): any thread may call it.
pub struct HybridPic(PicPair<Synced>);

impl HybridPic {
    pub fn new(sink: Arc<dyn IrqchipSink>, counters: Arc<IrqchipCounters>) -> Self {
        HybridPic(PicPair::new(sink, counters))
    }
}

impl Deref for HybridPic {
    type Target = PicPair<Synced>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl ConcurrentDevice for HybridPic {
    fn read(&self, offset: u64, data: &mut [u8]) {
        self.0.read(offset, data);
    }
    fn write(&self, offset: u64, data: &[u8]) {
        self.0.write(offset, data);
    }
}
