//! Robustness: at least 10^6 random register accesses per model (a seeded RNG
//! loop, so a failure names its seed and step), through the same device entry
//! points the bus uses. Whatever the "guest" writes (vectors 0–15, absent
//! destinations, INIT to itself, timer counts 0 and 2^32−1, reserved registers,
//! unaligned and wrong-width accesses) must not panic, and after every step the
//! model invariants hold: ISR is exactly what was acknowledged and not yet EOId,
//! no vector below 16 is ever pending or in service, PPR agrees with TPR and
//! ISR, INTA returns what PENDING announced, above the PPR, out of IRR; and
//! every 4096 steps and at the end, the whole model's end-of-run invariants
//! (`invariants`, as `Irqchip::check_invariants` checks them after a VM run).

use super::regs::{ppr, VectorSet};
use super::{
    lapic_ctl, pic_ctl, ApicMessage, ApicTarget, ExclusiveLapics, ExclusivePic, HybridLapics,
    HybridPic, Ioapic, IrqchipConfig, IrqchipCounters, IrqchipEvent, IrqchipSink, IrqchipViolation,
    LapicSet, ManualClock, PicPair, IOAPIC_PINS, LAPIC_STRIDE, NO_VECTOR, PAGE,
};
use crate::devices::{ConcurrentDevice, ExclusiveDevice};
use std::sync::{Arc, Mutex};

/// Accesses per model: 10^6 in release builds (a tenth in debug builds).
const STEPS: u64 = if cfg!(debug_assertions) {
    100_000
} else {
    1_000_000
};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A value a guest might write: mostly structured, sometimes garbage.
    fn value(&mut self) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => 0xffff_ffff,
            2 => self.below(16),               // illegal vectors
            3 => 0x4500 | self.below(4) << 18, // INIT, any shorthand
            4 => 0x4600 | self.below(256) | self.below(4) << 18, // SIPI
            5 => 0x4000 | self.below(256) | self.below(8) << 8 | self.below(4) << 18,
            _ => self.next(),
        }
    }
    /// An index below `n`.
    fn pick(&mut self, n: usize) -> usize {
        let below = self.below(u64::try_from(n).unwrap_or(u64::MAX));
        usize::try_from(below).unwrap_or(0)
    }
    fn width(&mut self) -> usize {
        [4, 4, 4, 1, 2, 8, 3, 0][self.pick(8)]
    }
}

/// Records every event; remembers the last armed deadline per vCPU.
#[derive(Default)]
struct Recorder {
    deadlines: Mutex<Vec<Option<u64>>>,
    events: Mutex<u64>,
}

impl IrqchipSink for Recorder {
    fn event(&self, event: IrqchipEvent) {
        *self.events.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        if let IrqchipEvent::TimerDeadline { vcpu, deadline_ns } = event {
            let mut d = self.deadlines.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = d.get_mut(vcpu as usize) {
                *slot = deadline_ns;
            }
        }
    }
}

/// The LAPIC set through its device entry points, either form.
trait LapicDevice {
    fn rd(&mut self, offset: u64, data: &mut [u8]);
    fn wr(&mut self, offset: u64, data: &[u8]);
    fn vectors(&self, vcpu: u32) -> ([u32; 8], [u32; 8]);
    /// The end-of-run invariants (`invariants`) of the whole set.
    fn violations(&self) -> Vec<IrqchipViolation>;
}

impl LapicDevice for ExclusiveLapics {
    fn violations(&self) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        LapicSet::check_invariants(self, &mut out);
        out
    }
    fn rd(&mut self, offset: u64, data: &mut [u8]) {
        ExclusiveDevice::read(self, offset, data)
    }
    fn wr(&mut self, offset: u64, data: &[u8]) {
        ExclusiveDevice::write(self, offset, data)
    }
    fn vectors(&self, vcpu: u32) -> ([u32; 8], [u32; 8]) {
        let (irr, isr, _) = LapicSet::vectors(self, vcpu).unwrap_or_default();
        (irr, isr)
    }
}

impl LapicDevice for HybridLapics {
    fn violations(&self) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        LapicSet::check_invariants(self, &mut out);
        out
    }
    fn rd(&mut self, offset: u64, data: &mut [u8]) {
        ConcurrentDevice::read(self, offset, data)
    }
    fn wr(&mut self, offset: u64, data: &[u8]) {
        ConcurrentDevice::write(self, offset, data)
    }
    fn vectors(&self, vcpu: u32) -> ([u32; 8], [u32; 8]) {
        let (irr, isr, _) = LapicSet::vectors(self, vcpu).unwrap_or_default();
        (irr, isr)
    }
}

fn read32(dev: &mut dyn LapicDevice, vcpu: u32, reg: u64) -> u32 {
    let mut b = [0u8; 4];
    dev.rd(u64::from(vcpu) * LAPIC_STRIDE + reg, &mut b);
    u32::from_le_bytes(b)
}

fn control(dev: &mut dyn LapicDevice, vcpu: u32, reg: u64) -> u64 {
    let mut b = [0u8; 8];
    dev.rd(u64::from(vcpu) * LAPIC_STRIDE + PAGE + reg, &mut b);
    u64::from_le_bytes(b)
}

const VCPUS: u32 = 3;

fn fuzz_lapic(dev: &mut dyn LapicDevice, clock: &ManualClock, sink: &Recorder, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    // The shadow ISR: acknowledged and not yet EOId, per vCPU.
    let mut shadow = vec![VectorSet::default(); VCPUS as usize];
    let mut now = 0u64;
    let mut acknowledged = 0;
    for step in 0..STEPS {
        let vcpu = u32::try_from(rng.below(u64::from(VCPUS) + 1)).unwrap_or(0) % VCPUS;
        let base = u64::from(vcpu) * LAPIC_STRIDE;
        let ctx = || format!("seed {seed:#x} step {step} vCPU {vcpu}");
        now += rng.below(5_000);
        clock.set(now);
        let in_service = &mut shadow[vcpu as usize];
        match rng.below(100) {
            0..=54 => guest_access(dev, &mut rng, base, in_service),
            55..=69 => {
                let value = rng.below(512);
                dev.wr(base + PAGE + lapic_ctl::ACCEPT, &value.to_le_bytes());
            }
            70..=84 => {
                if acknowledge(dev, vcpu, in_service, &ctx) {
                    acknowledged += 1;
                }
            }
            85..=92 => {
                dev.wr(base + 0xb0, &0u32.to_le_bytes());
                if let Some(v) = in_service.highest() {
                    in_service.clear(v);
                }
            }
            93..=97 => now = expire_timer(dev, &mut rng, clock, sink, vcpu, now),
            _ => {
                dev.wr(base + PAGE + lapic_ctl::INIT_RESET, &0u64.to_le_bytes());
                *in_service = VectorSet::default();
            }
        }
        check_invariants(dev, vcpu, in_service, &ctx);
        if step % 4096 == 0 || step + 1 == STEPS {
            let found = dev.violations();
            assert!(found.is_empty(), "{}: {found:?}", ctx());
        }
    }
    acknowledged
}

/// A guest access: usually a real register, sometimes anywhere; an EOI write
/// retires the highest vector in service from the shadow.
fn guest_access(dev: &mut dyn LapicDevice, rng: &mut Rng, base: u64, in_service: &mut VectorSet) {
    let mut offset = if rng.below(8) == 0 {
        rng.below(PAGE)
    } else {
        rng.below(0x40) << 4
    };
    if rng.below(16) == 0 {
        offset = offset.wrapping_add(rng.below(16)) % PAGE;
    }
    let width = rng.width();
    if rng.below(2) == 0 {
        let mut buf = vec![0u8; width];
        dev.rd(base + offset, &mut buf);
    } else {
        let value = rng.value().to_le_bytes();
        dev.wr(base + offset, &value[..width]);
        if offset == 0xb0 && width == 4 {
            if let Some(v) = in_service.highest() {
                in_service.clear(v);
            }
        }
    }
}

/// INTA on `vcpu`: it returns what PENDING announced, a legal vector out of
/// IRR above the PPR, which enters the shadow ISR. True if one was taken.
fn acknowledge(
    dev: &mut dyn LapicDevice,
    vcpu: u32,
    in_service: &mut VectorSet,
    ctx: &dyn Fn() -> String,
) -> bool {
    let (irr, isr) = dev.vectors(vcpu);
    let tpr = read32(dev, vcpu, 0x80).to_le_bytes()[0];
    let pending = control(dev, vcpu, lapic_ctl::PENDING);
    let got = control(dev, vcpu, lapic_ctl::INTA);
    assert_eq!(pending, got, "{}: PENDING and INTA disagree", ctx());
    if got == NO_VECTOR {
        return false;
    }
    let v = got.to_le_bytes()[0];
    assert!(v >= 16, "{}: INTA returned illegal vector {v}", ctx());
    assert!(
        VectorSet(irr).test(v),
        "{}: INTA {v:#x} was not in IRR",
        ctx()
    );
    let before = ppr(tpr, VectorSet(isr).highest());
    assert!(
        v >> 4 > before >> 4,
        "{}: INTA {v:#x} not above PPR {before:#x}",
        ctx()
    );
    in_service.set(v);
    true
}

/// The VMM's timer expiry for `vcpu`: the armed deadline (usually) or a stale
/// or made-up one, with the clock moved up to it (at most 1 s ahead). Returns
/// the new time.
fn expire_timer(
    dev: &mut dyn LapicDevice,
    rng: &mut Rng,
    clock: &ManualClock,
    sink: &Recorder,
    vcpu: u32,
    now: u64,
) -> u64 {
    let armed = sink.deadlines.lock().unwrap_or_else(|e| e.into_inner())[vcpu as usize];
    let deadline = match (armed, rng.below(4)) {
        (Some(d), 0..=2) => d,
        _ => rng.next(),
    };
    let now = now.max(deadline.min(now + 1_000_000_000));
    clock.set(now);
    dev.wr(
        u64::from(vcpu) * LAPIC_STRIDE + PAGE + lapic_ctl::TIMER_EXPIRED,
        &deadline.to_le_bytes(),
    );
    now
}

/// Invariants of this vCPU after a step (an IPI may have touched others: their
/// IRR is checked when they are picked).
fn check_invariants(
    dev: &mut dyn LapicDevice,
    vcpu: u32,
    in_service: &VectorSet,
    ctx: &dyn Fn() -> String,
) {
    let (irr, isr) = dev.vectors(vcpu);
    assert_eq!(
        isr,
        in_service.0,
        "{}: ISR is not what was acknowledged",
        ctx()
    );
    assert_eq!(irr[0] & 0xffff, 0, "{}: vector below 16 pending", ctx());
    let tpr = read32(dev, vcpu, 0x80).to_le_bytes()[0];
    let expected = ppr(tpr, VectorSet(isr).highest());
    assert_eq!(
        read32(dev, vcpu, 0xa0).to_le_bytes()[0],
        expected,
        "{}: PPR",
        ctx()
    );
    assert!(
        read32(dev, vcpu, 0x390) <= read32(dev, vcpu, 0x380),
        "{}: CCR above initial count",
        ctx()
    );
    // LINT0 takes the PIC exactly when LVT0 is unmasked ExtINT on an enabled LAPIC.
    let (lvt0, svr) = (read32(dev, vcpu, 0x350), read32(dev, vcpu, 0xf0));
    let open = svr & 0x100 != 0 && lvt0 & 0x1_0000 == 0 && (lvt0 >> 8) & 7 == 7;
    assert_eq!(
        control(dev, vcpu, lapic_ctl::LINT0_EXTINT),
        u64::from(open),
        "{}: LINT0_EXTINT with LVT0 {lvt0:#x}, SVR {svr:#x}",
        ctx()
    );
}

fn lapic_config(sink: &Arc<Recorder>, clock: &Arc<ManualClock>) -> IrqchipConfig {
    *sink.deadlines.lock().unwrap_or_else(|e| e.into_inner()) = vec![None; VCPUS as usize];
    IrqchipConfig {
        vcpus: VCPUS,
        sink: sink.clone(),
        clock: clock.clone(),
    }
}

#[test]
fn fuzz_exclusive_lapic() {
    let (sink, clock) = (
        Arc::new(Recorder::default()),
        Arc::new(ManualClock::default()),
    );
    let counters = Arc::new(IrqchipCounters::default());
    let mut lapics = ExclusiveLapics::new(&lapic_config(&sink, &clock), counters.clone());
    let acknowledged = fuzz_lapic(&mut lapics, &clock, &sink, 0x5eed_0001);
    assert!(
        acknowledged > STEPS / 1000,
        "only {acknowledged} interrupts acknowledged"
    );
    // The fuzzer must have reached the paths it is meant to stress.
    let counts: std::collections::BTreeMap<_, _> = counters.snapshot().into_iter().collect();
    for name in [
        "bad_access",
        "reserved_write",
        "illegal_vector",
        "stale_timer",
        "unsupported_delivery",
    ] {
        assert!(counts[name] > 0, "fuzzing never hit {name}: {counts:?}");
    }
}

#[test]
fn fuzz_hybrid_lapic() {
    let (sink, clock) = (
        Arc::new(Recorder::default()),
        Arc::new(ManualClock::default()),
    );
    let counters = Arc::new(IrqchipCounters::default());
    let mut lapics = HybridLapics::new(&lapic_config(&sink, &clock), counters);
    let acknowledged = fuzz_lapic(&mut lapics, &clock, &sink, 0x5eed_0002);
    assert!(
        acknowledged > STEPS / 1000,
        "only {acknowledged} interrupts acknowledged"
    );
}

/// Records what the IOAPIC delivers.
#[derive(Default)]
struct Deliveries(Mutex<Vec<ApicMessage>>);

impl ApicTarget for Deliveries {
    fn deliver(&self, message: ApicMessage) -> u32 {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(message);
        1
    }
}

#[test]
fn fuzz_ioapic() {
    let target = Arc::new(Deliveries::default());
    let mut ioapic = Ioapic::new(target.clone(), Arc::new(IrqchipCounters::default()));
    let mut rng = Rng(0x5eed_0003);
    for step in 0..STEPS {
        let delivered_before = target.0.lock().unwrap_or_else(|e| e.into_inner()).len();
        let mut masked_pin = None;
        match rng.below(10) {
            0..=2 => {
                let select = if rng.below(4) == 0 {
                    rng.below(256)
                } else {
                    0x10 + rng.below(48)
                };
                ioapic.write(0, &u32::try_from(select).unwrap_or(u32::MAX).to_le_bytes());
            }
            3..=4 => {
                let value = rng.value().to_le_bytes();
                let width = rng.width();
                let offset = [0x10, 0x10, 0x40, rng.below(PAGE)][rng.pick(4)];
                ioapic.write(offset, &value[..width]);
            }
            5 => {
                let mut buf = vec![0u8; rng.width()];
                ioapic.read([0, 0x10, rng.below(PAGE)][rng.pick(3)], &mut buf);
            }
            _ => {
                let pin = rng.below(IOAPIC_PINS as u64 + 2);
                let level = rng.below(2);
                if let Some(entry) = ioapic.entry(usize::try_from(pin).unwrap_or(usize::MAX)) {
                    if entry & (1 << 16) != 0 {
                        masked_pin = Some(pin);
                    }
                }
                ioapic.write(PAGE, &(pin | level << 8).to_le_bytes());
            }
        }
        let delivered = target.0.lock().unwrap_or_else(|e| e.into_inner()).len();
        if let Some(pin) = masked_pin {
            assert_eq!(
                delivered, delivered_before,
                "step {step}: masked pin {pin} delivered"
            );
        }
        // Remote IRR only on level-triggered entries, entries well-formed
        // (no LAPIC here: every remote IRR's vector is held by none).
        let mut found = Vec::new();
        ioapic.check_invariants(&[], &mut found);
        found.retain(|v| !matches!(v, IrqchipViolation::RemoteIrrOrphan { .. }));
        assert!(found.is_empty(), "step {step}: {found:?}");
    }
    assert!(
        !target
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty(),
        "nothing was ever delivered"
    );
}

/// The PIC pair through its device entry points, either form.
trait PicDevice {
    fn rd(&mut self, offset: u64, data: &mut [u8]);
    fn wr(&mut self, offset: u64, data: &[u8]);
    fn registers(&self) -> (u16, u16, u16);
    fn violations(&self) -> Vec<IrqchipViolation>;
}

impl PicDevice for ExclusivePic {
    fn rd(&mut self, offset: u64, data: &mut [u8]) {
        ExclusiveDevice::read(self, offset, data)
    }
    fn wr(&mut self, offset: u64, data: &[u8]) {
        ExclusiveDevice::write(self, offset, data)
    }
    fn registers(&self) -> (u16, u16, u16) {
        PicPair::registers(self)
    }
    fn violations(&self) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        PicPair::check_invariants(self, &mut out);
        out
    }
}

impl PicDevice for HybridPic {
    fn rd(&mut self, offset: u64, data: &mut [u8]) {
        ConcurrentDevice::read(self, offset, data)
    }
    fn wr(&mut self, offset: u64, data: &[u8]) {
        ConcurrentDevice::write(self, offset, data)
    }
    fn registers(&self) -> (u16, u16, u16) {
        PicPair::registers(self)
    }
    fn violations(&self) -> Vec<IrqchipViolation> {
        let mut out = Vec::new();
        PicPair::check_invariants(self, &mut out);
        out
    }
}

fn fuzz_pic(dev: &mut dyn PicDevice, seed: u64) -> u64 {
    let mut rng = Rng(seed);
    let mut acknowledged = 0;
    for step in 0..STEPS {
        if step % 4096 == 0 {
            let found = dev.violations();
            assert!(found.is_empty(), "seed {seed:#x} step {step}: {found:?}");
        }
        match rng.below(10) {
            0..=2 => {
                // Port writes: ICW sequences, OCWs, masks, garbage, any width.
                let port = rng.below(6);
                let value = match rng.below(4) {
                    0 => 0x11,
                    1 => 0x20 | rng.below(8) << 5 & 0xe0,
                    _ => rng.below(256),
                };
                let width = if rng.below(8) == 0 { rng.width() } else { 1 };
                dev.wr(port, &value.to_le_bytes()[..width]);
            }
            3 => {
                let mut buf = vec![0u8; rng.width()];
                dev.rd(rng.below(8), &mut buf);
            }
            4..=6 => {
                let irq = rng.below(18);
                dev.wr(pic_ctl::SET_IRQ, &(irq | rng.below(2) << 8).to_le_bytes());
            }
            _ => {
                let (irr, _, imr) = dev.registers();
                let mut b = [0u8; 8];
                dev.rd(pic_ctl::PENDING, &mut b);
                let pending = u64::from_le_bytes(b);
                dev.rd(pic_ctl::INTA, &mut b);
                let got = u64::from_le_bytes(b);
                assert_eq!(
                    pending, got,
                    "seed {seed:#x} step {step}: PENDING and INTA disagree"
                );
                if got != NO_VECTOR {
                    acknowledged += 1;
                    // Some unmasked requested IRQ existed.
                    assert!(
                        irr & !imr != 0,
                        "step {step}: INTA {got:#x} with IRR {irr:#x} IMR {imr:#x}"
                    );
                }
            }
        }
    }
    let found = dev.violations();
    assert!(found.is_empty(), "seed {seed:#x} at the end: {found:?}");
    acknowledged
}

#[test]
fn fuzz_exclusive_pic() {
    let mut pic = ExclusivePic::new(
        Arc::new(Recorder::default()),
        Arc::new(IrqchipCounters::default()),
    );
    assert!(
        fuzz_pic(&mut pic, 0x5eed_0004) > 0,
        "no interrupt was ever acknowledged"
    );
}

#[test]
fn fuzz_hybrid_pic() {
    let mut pic = HybridPic::new(
        Arc::new(Recorder::default()),
        Arc::new(IrqchipCounters::default()),
    );
    assert!(
        fuzz_pic(&mut pic, 0x5eed_0005) > 0,
        "no interrupt was ever acknowledged"
    );
}
