//! Register-level semantics of the local APIC shared by the exclusive and the
//! thread-safe LAPIC: the register file without IRR/TMR (which each flavour keeps
//! its own way), ICR decoding, destination matching, PPR and the timer.
//! Intel SDM vol. 3A ch. 11 ("Advanced Programmable Interrupt Controller").

use super::IrqchipCounters;

pub const REG_ID: u64 = 0x20;
pub const REG_VERSION: u64 = 0x30;
pub const REG_TPR: u64 = 0x80;
pub const REG_APR: u64 = 0x90;
pub const REG_PPR: u64 = 0xa0;
pub const REG_EOI: u64 = 0xb0;
pub const REG_RRD: u64 = 0xc0;
pub const REG_LDR: u64 = 0xd0;
pub const REG_DFR: u64 = 0xe0;
pub const REG_SVR: u64 = 0xf0;
pub const REG_ISR: u64 = 0x100;
pub const REG_TMR: u64 = 0x180;
pub const REG_IRR: u64 = 0x200;
pub const REG_ESR: u64 = 0x280;
pub const REG_ICR_LO: u64 = 0x300;
pub const REG_ICR_HI: u64 = 0x310;
pub const REG_LVT_TIMER: u64 = 0x320;
pub const REG_TIMER_INIT: u64 = 0x380;
pub const REG_TIMER_CUR: u64 = 0x390;
pub const REG_TIMER_DIV: u64 = 0x3e0;

/// Version 0x14 (integrated xAPIC), highest LVT entry 5 (timer, thermal, perf,
/// LINT0, LINT1, error): what KVM's in-kernel LAPIC reports.
pub const APIC_VERSION: u32 = 0x0005_0014;
/// Writable bits of the six LVT entries, in register order 0x320..0x370.
const LVT_WRITABLE: [u32; 6] = [0x7_00ff, 0x1_07ff, 0x1_07ff, 0x1_a7ff, 0x1_a7ff, 0x1_00ff];
pub const LVT_MASKED: u32 = 1 << 16;
const SVR_ENABLE: u32 = 1 << 8;
/// ESR bits (SDM Figure 11-9).
pub const ESR_SEND_ILLEGAL_VECTOR: u32 = 1 << 5;
pub const ESR_RECEIVE_ILLEGAL_VECTOR: u32 = 1 << 6;
pub const ESR_ILLEGAL_REGISTER: u32 = 1 << 7;
/// LAPIC timer input clock before the divider: 1 GHz, as KVM's in-kernel LAPIC
/// (`APIC_BUS_CYCLE_NS_DEFAULT` = 1 in arch/x86/kvm/lapic.h). The guest calibrates.
pub const TIMER_TICK_NS: u64 = 1;
/// Shortest periodic timer period: KVM's `min_timer_period_us` default (200 µs,
/// arch/x86/kvm/x86.c), so a guest cannot make the timer thread spin.
pub const MIN_PERIOD_NS: u64 = 200_000;

/// 256 vectors as eight 32-bit words (the layout of ISR/TMR/IRR registers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VectorSet(pub [u32; 8]);

impl VectorSet {
    #[cfg(test)]
    pub fn test(&self, vector: u8) -> bool {
        self.0[usize::from(vector >> 5)] & (1 << (vector & 31)) != 0
    }
    pub fn set(&mut self, vector: u8) {
        self.0[usize::from(vector >> 5)] |= 1 << (vector & 31);
    }
    pub fn clear(&mut self, vector: u8) {
        self.0[usize::from(vector >> 5)] &= !(1 << (vector & 31));
    }
    pub fn highest(&self) -> Option<u8> {
        highest_in(&self.0)
    }
}

/// The highest vector set in eight words.
pub fn highest_in(words: &[u32; 8]) -> Option<u8> {
    (0..8u8)
        .rev()
        .find(|i| words[usize::from(*i)] != 0)
        .map(|i| {
            // The word is not zero, so its highest set bit is below 32.
            let bit = 31 - words[usize::from(i)].leading_zeros();
            i * 32 + u8::try_from(bit).unwrap_or(31)
        })
}

/// Processor priority (SDM 11.8.3.1): the higher of TPR and the in-service class.
pub fn ppr(tpr: u8, isr_highest: Option<u8>) -> u8 {
    let isrv = isr_highest.unwrap_or(0);
    if tpr >> 4 >= isrv >> 4 {
        tpr
    } else {
        isrv & 0xf0
    }
}

/// The vector to deliver: the highest in IRR, if its class beats the PPR.
pub fn deliverable(irr: &[u32; 8], tpr: u8, isr_highest: Option<u8>) -> Option<u8> {
    let v = highest_in(irr)?;
    (v >> 4 > ppr(tpr, isr_highest) >> 4).then_some(v)
}

/// How an IPI or redirection entry delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryMode {
    Fixed,
    LowestPriority,
    Smi,
    Nmi,
    Init,
    Startup,
    ExtInt,
    Reserved,
}

impl DeliveryMode {
    pub fn from_bits(bits: u32) -> DeliveryMode {
        match bits & 7 {
            0 => DeliveryMode::Fixed,
            1 => DeliveryMode::LowestPriority,
            2 => DeliveryMode::Smi,
            4 => DeliveryMode::Nmi,
            5 => DeliveryMode::Init,
            6 => DeliveryMode::Startup,
            7 => DeliveryMode::ExtInt,
            _ => DeliveryMode::Reserved,
        }
    }
}

/// ICR destination shorthand (bits 19:18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shorthand {
    None,
    SelfOnly,
    All,
    AllButSelf,
}

/// An interrupt message on the APIC bus (from an ICR write or the IOAPIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApicMessage {
    pub vector: u8,
    pub mode: DeliveryMode,
    pub logical: bool,
    pub dest: u8,
    pub shorthand: Shorthand,
    pub level_triggered: bool,
    /// Level bit of the ICR (0 only for the obsolete INIT level de-assert).
    pub assert: bool,
}

impl ApicMessage {
    /// Decode an ICR write (low word `lo`, high word `hi`).
    pub fn from_icr(lo: u32, hi: u32) -> ApicMessage {
        ApicMessage {
            vector: lo.to_le_bytes()[0],
            mode: DeliveryMode::from_bits(lo >> 8),
            logical: lo & (1 << 11) != 0,
            assert: lo & (1 << 14) != 0,
            level_triggered: lo & (1 << 15) != 0,
            shorthand: match (lo >> 18) & 3 {
                0 => Shorthand::None,
                1 => Shorthand::SelfOnly,
                2 => Shorthand::All,
                _ => Shorthand::AllButSelf,
            },
            dest: (hi >> 24) as u8,
        }
    }

    /// A fixed edge interrupt to physical APIC id `dest`.
    pub fn fixed(vector: u8, dest: u8) -> ApicMessage {
        ApicMessage {
            vector,
            mode: DeliveryMode::Fixed,
            logical: false,
            dest,
            shorthand: Shorthand::None,
            level_triggered: false,
            assert: true,
        }
    }
}

/// The addressing state of one LAPIC, as destination matching needs it.
#[derive(Debug, Clone, Copy)]
pub struct Addressing {
    pub apic_id: u8,
    pub ldr: u8,
    /// DFR model bits 31:28: 0xf flat, 0x0 cluster.
    pub dfr_model: u8,
}

impl Addressing {
    /// Whether a message without shorthand addresses this LAPIC (SDM 11.6.2).
    pub fn matches(&self, logical: bool, dest: u8) -> bool {
        if !logical {
            return dest == 0xff || dest == self.apic_id;
        }
        if self.dfr_model == 0xf {
            dest & self.ldr != 0
        } else {
            (dest == 0xff) || (dest >> 4 == self.ldr >> 4 && dest & self.ldr & 0xf != 0)
        }
    }
}

/// Which vCPUs (bit i = vCPU i) a message from `sender` (None: the IOAPIC)
/// reaches, given each LAPIC's addressing.
pub fn destinations(
    message: &ApicMessage,
    sender: Option<u32>,
    vcpus: u32,
    addressing: impl Fn(u32) -> Addressing,
) -> u64 {
    let all = if vcpus >= 64 {
        u64::MAX
    } else {
        (1u64 << vcpus) - 1
    };
    let own = sender.map_or(0, |s| 1u64 << s);
    match message.shorthand {
        Shorthand::SelfOnly => own,
        Shorthand::All => all,
        Shorthand::AllButSelf => all & !own,
        Shorthand::None => (0..vcpus)
            .filter(|i| addressing(*i).matches(message.logical, message.dest))
            .fold(0, |mask, i| mask | 1 << i),
    }
}

/// What a register write asks the owner of the register file to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegEffect {
    None,
    /// An EOI retired this vector from the ISR.
    Eoi(u8),
    /// An ICR write sends this message.
    Send(ApicMessage),
    /// The timer deadline changed.
    Timer(Option<u64>),
}

/// The LAPIC timer: count, divider, mode and the current deadline on the clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timer {
    pub initial: u32,
    pub divide: u32,
    /// When the current period began.
    pub start_ns: u64,
    pub period_ns: u64,
    pub deadline_ns: Option<u64>,
}

impl Timer {
    /// Divide configuration (bits 0, 1, 3) → divisor 2, 4, ... 128, 1.
    pub fn divisor(&self) -> u64 {
        let code = (self.divide & 3) | ((self.divide >> 1) & 4);
        if code == 7 {
            1
        } else {
            2 << code
        }
    }

    fn current_count(&self, now: u64) -> u32 {
        let Some(deadline) = self.deadline_ns else {
            return 0;
        };
        let tick = TIMER_TICK_NS * self.divisor();
        let remaining = if now >= deadline {
            // Periodic timers reload; a late expiry report must not show 0 forever.
            match self.period_ns {
                0 => 0,
                p => p - (now - self.start_ns) % p,
            }
        } else {
            deadline - now
        };
        u32::try_from(remaining / tick)
            .unwrap_or(u32::MAX)
            .min(self.initial)
    }
}

/// The LAPIC's registers except IRR and TMR. Only the owning vCPU writes them
/// (and the timer expiry, under the same lock or I/O thread).
#[derive(Debug, Clone)]
pub struct LapicRegs {
    pub apic_id: u8,
    pub tpr: u8,
    pub ldr: u32,
    pub dfr: u32,
    pub svr: u32,
    /// Readable ESR (updated on each ESR write) and errors since the last write.
    pub esr: u32,
    pub esr_pending: u32,
    pub icr_lo: u32,
    pub icr_hi: u32,
    /// LVT timer, thermal, perf, LINT0, LINT1, error.
    pub lvt: [u32; 6],
    pub isr: VectorSet,
    pub timer: Timer,
}

impl LapicRegs {
    /// Power-on / INIT state (SDM 11.4.7.1): disabled, LVTs masked.
    pub fn new(apic_id: u8) -> LapicRegs {
        LapicRegs {
            apic_id,
            tpr: 0,
            ldr: 0,
            dfr: 0xffff_ffff,
            svr: 0xff,
            esr: 0,
            esr_pending: 0,
            icr_lo: 0,
            icr_hi: 0,
            lvt: [LVT_MASKED; 6],
            isr: VectorSet::default(),
            timer: Timer::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.svr & SVR_ENABLE != 0
    }

    pub fn addressing(&self) -> Addressing {
        Addressing {
            apic_id: self.apic_id,
            ldr: (self.ldr >> 24) as u8,
            dfr_model: (self.dfr >> 28) as u8,
        }
    }

    pub fn deliverable(&self, irr: &[u32; 8]) -> Option<u8> {
        deliverable(irr, self.tpr, self.isr.highest())
    }

    /// Whether LINT0 takes the 8259's INTR: LVT0 unmasked in ExtINT mode
    /// (SDM 11.5.1; virtual wire mode A). The VMM asks the PIC only then.
    pub fn lint0_extint(&self) -> bool {
        let lvt0 = self.lvt[3];
        self.enabled()
            && lvt0 & LVT_MASKED == 0
            && DeliveryMode::from_bits(lvt0 >> 8) == DeliveryMode::ExtInt
    }

    /// The LVT timer vector, if an expiry should raise it.
    pub fn timer_vector(&self) -> Option<u8> {
        let lvt = self.lvt[0];
        (lvt & LVT_MASKED == 0 && self.enabled()).then_some(lvt.to_le_bytes()[0])
    }

    /// Value of the 32-bit register at `reg` (16-byte aligned). IRR and TMR
    /// words come from the caller; reserved registers read 0 and flag ESR.
    pub fn read(&mut self, reg: u64, now: u64, irr: &[u32; 8], tmr: &[u32; 8]) -> u32 {
        match reg {
            REG_ID => u32::from(self.apic_id) << 24,
            REG_VERSION => APIC_VERSION,
            REG_TPR => u32::from(self.tpr),
            REG_APR | REG_RRD | REG_EOI => 0,
            REG_PPR => u32::from(ppr(self.tpr, self.isr.highest())),
            REG_LDR => self.ldr,
            REG_DFR => self.dfr,
            REG_SVR => self.svr,
            0x100..=0x170 => self.isr.0[((reg - REG_ISR) >> 4) as usize],
            0x180..=0x1f0 => tmr[((reg - REG_TMR) >> 4) as usize],
            0x200..=0x270 => irr[((reg - REG_IRR) >> 4) as usize],
            REG_ESR => self.esr,
            REG_ICR_LO => self.icr_lo,
            REG_ICR_HI => self.icr_hi,
            0x320..=0x370 => self.lvt[((reg - REG_LVT_TIMER) >> 4) as usize],
            REG_TIMER_INIT => self.timer.initial,
            REG_TIMER_CUR => self.timer.current_count(now),
            REG_TIMER_DIV => self.timer.divide,
            _ => {
                self.esr_pending |= ESR_ILLEGAL_REGISTER;
                0
            }
        }
    }

    /// A full, aligned 32-bit guest write of `value` to `reg`.
    pub fn write(
        &mut self,
        reg: u64,
        value: u32,
        now: u64,
        counters: &IrqchipCounters,
    ) -> RegEffect {
        match reg {
            REG_TPR => self.tpr = value.to_le_bytes()[0],
            REG_EOI => {
                if let Some(v) = self.isr.highest() {
                    self.isr.clear(v);
                    return RegEffect::Eoi(v);
                }
            }
            REG_LDR => self.ldr = value & 0xff00_0000,
            REG_DFR => self.dfr = (value & 0xf000_0000) | 0x0fff_ffff,
            REG_SVR => {
                self.svr = value & 0x13ff;
                if !self.enabled() {
                    // SDM 11.4.7.2: a software-disabled LAPIC masks every LVT.
                    for lvt in &mut self.lvt {
                        *lvt |= LVT_MASKED;
                    }
                }
            }
            REG_ESR => {
                self.esr = self.esr_pending;
                self.esr_pending = 0;
            }
            REG_ICR_HI => self.icr_hi = value & 0xff00_0000,
            REG_ICR_LO => {
                // Delivery is instant here, so the delivery-status bit reads idle.
                self.icr_lo = value & !(1 << 12) & 0x000c_cfff;
                return RegEffect::Send(ApicMessage::from_icr(value, self.icr_hi));
            }
            0x320..=0x370 => {
                let index = ((reg - REG_LVT_TIMER) >> 4) as usize;
                let mut new = value & LVT_WRITABLE[index];
                if !self.enabled() {
                    new |= LVT_MASKED;
                }
                let mode_changed = index == 0 && (new ^ self.lvt[0]) & (3 << 17) != 0;
                self.lvt[index] = new;
                if mode_changed && self.timer.deadline_ns.is_some() {
                    // A mode change stops the timer (as KVM does).
                    self.timer.initial = 0;
                    self.timer.deadline_ns = None;
                    return RegEffect::Timer(None);
                }
            }
            REG_TIMER_INIT => return self.arm_timer(value, now, counters),
            REG_TIMER_DIV => self.timer.divide = value & 0xb,
            _ => {
                IrqchipCounters::bump(&counters.reserved_write);
                if !matches!(reg, REG_ID | REG_VERSION | REG_APR | REG_PPR | REG_RRD)
                    && !(0x100..=0x270).contains(&reg)
                    && reg != REG_TIMER_CUR
                {
                    self.esr_pending |= ESR_ILLEGAL_REGISTER;
                }
            }
        }
        RegEffect::None
    }

    fn timer_mode(&self) -> u32 {
        (self.lvt[0] >> 17) & 3
    }

    fn arm_timer(&mut self, count: u32, now: u64, counters: &IrqchipCounters) -> RegEffect {
        if self.timer_mode() == 2 {
            // TSC-deadline mode ignores the initial count (SDM 11.5.4.1); the
            // smplab guest does not use it and --irqchip user hides it in CPUID.
            IrqchipCounters::bump(&counters.reserved_write);
            return RegEffect::None;
        }
        self.timer.initial = count;
        if count == 0 {
            self.timer.deadline_ns = None;
            return RegEffect::Timer(None);
        }
        let mut period = u64::from(count) * TIMER_TICK_NS * self.timer.divisor();
        if self.timer_mode() == 1 && period < MIN_PERIOD_NS {
            IrqchipCounters::bump(&counters.timer_clamped);
            period = MIN_PERIOD_NS;
        }
        self.timer.start_ns = now;
        self.timer.period_ns = if self.timer_mode() == 1 { period } else { 0 };
        self.timer.deadline_ns = Some(now.saturating_add(period));
        RegEffect::Timer(self.timer.deadline_ns)
    }

    /// The timer thread reports `deadline` passed at `now`. Returns whether to
    /// raise the timer vector, and the next deadline to report (periodic), or
    /// `None` when nothing changes. A deadline that is not the armed one is stale.
    pub fn timer_expired(
        &mut self,
        deadline: u64,
        now: u64,
        counters: &IrqchipCounters,
    ) -> (Option<u8>, Option<Option<u64>>) {
        if self.timer.deadline_ns != Some(deadline) {
            IrqchipCounters::bump(&counters.stale_timer);
            return (None, None);
        }
        let vector = self.timer_vector();
        let period = self.timer.period_ns;
        if period == 0 {
            self.timer.deadline_ns = None;
            return (vector, None);
        }
        // Skip the periods a late timer thread missed: they coalesce in IRR anyway.
        let missed = now.saturating_sub(deadline) / period;
        let next = deadline.saturating_add(period.saturating_mul(missed + 1));
        self.timer.start_ns = next - period;
        self.timer.deadline_ns = Some(next);
        (vector, Some(Some(next)))
    }

    /// What is wrong with the timer's internal state, if anything: an armed
    /// deadline needs a count, a periodic one the current mode and at least
    /// the minimum period, and TSC-deadline mode (not modelled) never arms.
    pub fn timer_problem(&self) -> Option<String> {
        let timer = &self.timer;
        let deadline = timer.deadline_ns?;
        let mode = self.timer_mode();
        if timer.initial == 0 {
            return Some(format!("armed for {deadline} ns with initial count 0"));
        }
        if mode == 2 {
            return Some("armed in TSC-deadline mode".into());
        }
        if timer.period_ns != 0 && (mode != 1 || timer.period_ns < MIN_PERIOD_NS) {
            return Some(format!(
                "periodic with period {} ns in mode {mode}",
                timer.period_ns
            ));
        }
        (deadline < timer.start_ns).then(|| {
            format!(
                "deadline {deadline} ns before its period began ({} ns)",
                timer.start_ns
            )
        })
    }

    /// Record an error in the ESR.
    pub fn error(&mut self, bits: u32) {
        self.esr_pending |= bits;
    }
}

/// Decode a guest access to the 4 KiB LAPIC or IOAPIC page: the 16-byte aligned
/// register and whether the access is a full aligned 32-bit one.
pub fn split_access(offset: u64, len: usize) -> (u64, u64, bool) {
    let reg = offset & !0xf;
    let byte = offset & 0xf;
    (reg, byte, byte == 0 && len == 4)
}
