//! Behaviour of the models as the smplab guest and a VMM use them, through a
//! real bus (`fine` mode) for both forms: each test body runs twice.

use super::*;
use crate::bus::{BusClient, SyncMode};

#[derive(Default)]
pub(super) struct Events(Mutex<Vec<IrqchipEvent>>);

impl Events {
    pub(super) fn take(&self) -> Vec<IrqchipEvent> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl IrqchipSink for Events {
    fn event(&self, event: IrqchipEvent) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(event);
    }
}

pub(super) struct Vm {
    pub(super) client: BusClient,
    pub(super) events: Arc<Events>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) chip: Irqchip,
}

impl Vm {
    pub(super) fn new(flavor: Flavor, vcpus: u32) -> Vm {
        let events = Arc::new(Events::default());
        let clock = Arc::new(ManualClock::default());
        let config = IrqchipConfig {
            vcpus,
            sink: events.clone(),
            clock: clock.clone(),
        };
        let mut builder = BusBuilder::new();
        let chip = register(&mut builder, flavor, &config).expect("fresh bus");
        let bus = builder.build(SyncMode::Fine, None).expect("no I/O thread");
        Vm {
            client: bus.client(),
            events,
            clock,
            chip,
        }
    }

    pub(super) fn lapic_w(&mut self, vcpu: u32, reg: u64, value: u32) {
        let addr = lapic_bus_address(vcpu, LAPIC_GPA + reg).expect("in page");
        assert!(self
            .client
            .write(AddressSpace::Mmio, addr, &value.to_le_bytes()));
    }

    pub(super) fn lapic_r(&mut self, vcpu: u32, reg: u64) -> u32 {
        let addr = lapic_bus_address(vcpu, LAPIC_GPA + reg).expect("in page");
        let mut b = [0u8; 4];
        assert!(self.client.read(AddressSpace::Mmio, addr, &mut b));
        u32::from_le_bytes(b)
    }

    pub(super) fn ctl_r(&mut self, addr: u64) -> Option<u8> {
        let mut b = [0u8; 8];
        assert!(self.client.read(AddressSpace::Mmio, addr, &mut b));
        match u64::from_le_bytes(b) {
            NO_VECTOR => None,
            v => Some(v.to_le_bytes()[0]),
        }
    }

    pub(super) fn ctl_w(&mut self, addr: u64, value: u64) {
        assert!(self
            .client
            .write(AddressSpace::Mmio, addr, &value.to_le_bytes()));
    }

    pub(super) fn inta(&mut self, vcpu: u32) -> Option<u8> {
        self.ctl_r(lapic_control_address(vcpu, lapic_ctl::INTA))
    }

    pub(super) fn accept(&mut self, vcpu: u32, vector: u8) {
        self.ctl_w(
            lapic_control_address(vcpu, lapic_ctl::ACCEPT),
            u64::from(vector),
        );
    }

    pub(super) fn pic_w(&mut self, port: u16, value: u8) {
        let addr = pic_bus_address(port).expect("PIC port");
        assert!(self.client.write(AddressSpace::Mmio, addr, &[value]));
    }

    pub(super) fn pic_r(&mut self, port: u16) -> u8 {
        let addr = pic_bus_address(port).expect("PIC port");
        let mut b = [0u8];
        assert!(self.client.read(AddressSpace::Mmio, addr, &mut b));
        b[0]
    }

    pub(super) fn ioapic_w(&mut self, index: u32, value: u32) {
        let select = ioapic_bus_address(IOAPIC_GPA).expect("IOAPIC");
        assert!(self
            .client
            .write(AddressSpace::Mmio, select, &index.to_le_bytes()));
        assert!(self
            .client
            .write(AddressSpace::Mmio, select + 0x10, &value.to_le_bytes()));
    }

    pub(super) fn ioapic_r(&mut self, index: u32) -> u32 {
        let select = ioapic_bus_address(IOAPIC_GPA).expect("IOAPIC");
        assert!(self
            .client
            .write(AddressSpace::Mmio, select, &index.to_le_bytes()));
        let mut b = [0u8; 4];
        assert!(self.client.read(AddressSpace::Mmio, select + 0x10, &mut b));
        u32::from_le_bytes(b)
    }

    /// What the guest's cpu_setup does (crates/guest/kernel/boot.c).
    fn guest_cpu_setup(&mut self, vcpu: u32) {
        self.lapic_w(vcpu, 0xf0, 0x100 | 0xff);
        self.lapic_w(vcpu, 0x80, 0);
        self.lapic_w(vcpu, 0x320, 0x10000 | 0x20);
        self.lapic_w(vcpu, 0x350, 0x10000);
        self.lapic_w(vcpu, 0x360, 0x10000);
    }
}

pub(super) fn each_flavor(test: impl Fn(Flavor)) {
    for flavor in [Flavor::Exclusive, Flavor::Concurrent] {
        test(flavor);
    }
}

#[test]
fn identity_registers_and_reset_state() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        assert_eq!(vm.lapic_r(1, 0x20), 1 << 24, "{flavor:?}: APIC id");
        assert_eq!(vm.lapic_r(0, 0x30), 0x0005_0014);
        assert_eq!(vm.lapic_r(0, 0xf0), 0xff, "disabled after reset");
        assert_eq!(vm.lapic_r(0, 0x320), 0x10000, "LVT masked after reset");
        assert_eq!(vm.lapic_r(0, 0xe0), 0xffff_ffff);
        // Disabled: fixed interrupts are dropped.
        vm.accept(0, 0x40);
        assert_eq!(vm.inta(0), None);
        assert_eq!(vm.chip.counters.dropped_disabled.load(Ordering::Relaxed), 1);
        // A byte read of the version register sees its low byte.
        let mut b = [0u8; 1];
        vm.client.read(
            AddressSpace::Mmio,
            lapic_bus_address(0, LAPIC_GPA + 0x30).unwrap_or(0),
            &mut b,
        );
        assert_eq!(b[0], 0x14);
    });
}

#[test]
fn guest_boot_sends_init_and_sipi_and_ipis() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 4);
        vm.guest_cpu_setup(0);
        vm.events.take();
        // sys_smp_start: INIT then SIPI to vCPU 1 (vector 0x08: 0x8000).
        vm.lapic_w(0, 0x310, 1 << 24);
        vm.lapic_w(0, 0x300, 0x4500);
        vm.lapic_w(0, 0x310, 1 << 24);
        vm.lapic_w(0, 0x300, 0x4600 | 0x08);
        assert_eq!(
            vm.events.take(),
            vec![
                IrqchipEvent::Init { vcpu: 1 },
                IrqchipEvent::Startup { vcpu: 1, vector: 8 }
            ],
            "{flavor:?}"
        );
        assert_eq!(vm.lapic_r(0, 0x300) & (1 << 12), 0, "delivery status idle");
        for v in 1..4 {
            vm.guest_cpu_setup(v);
        }
        vm.events.take();
        // send_ipi: fixed, physical, to vCPU 2.
        vm.lapic_w(0, 0x310, 2 << 24);
        vm.lapic_w(0, 0x300, 0xf0 | 0x4000);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::Kick { vcpu: 2 }]);
        assert_eq!(vm.inta(2), Some(0xf0));
        vm.lapic_w(2, 0xb0, 0);
        // The shootdown: all-but-self shorthand from vCPU 3.
        vm.lapic_w(3, 0x300, 0xf1 | 0x4000 | (3 << 18));
        let kicks = vm.events.take();
        assert_eq!(kicks.len(), 3, "{kicks:?}");
        assert!(!kicks.contains(&IrqchipEvent::Kick { vcpu: 3 }));
        for v in 0..3 {
            assert_eq!(vm.inta(v), Some(0xf1));
            vm.lapic_w(v, 0xb0, 0);
        }
        assert_eq!(vm.inta(3), None);
        // Self shorthand and all-including-self.
        vm.lapic_w(1, 0x300, 0x55 | (1 << 18));
        assert_eq!(vm.inta(1), Some(0x55));
        vm.lapic_w(1, 0x300, 0x66 | (2 << 18));
        for v in 0..4 {
            assert_eq!(vm.inta(v), Some(0x66), "{flavor:?} vCPU {v}");
        }
    });
}

#[test]
fn priority_tpr_and_eoi() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 1);
        vm.guest_cpu_setup(0);
        vm.accept(0, 0x31);
        vm.accept(0, 0x52);
        assert_eq!(vm.inta(0), Some(0x52));
        // 0x31's class is below the one in service.
        assert_eq!(vm.inta(0), None);
        assert_eq!(vm.lapic_r(0, 0xa0), 0x50, "PPR follows ISR");
        assert_eq!(vm.lapic_r(0, 0x100 + 0x10 * (0x52 / 32)), 1 << (0x52 % 32));
        vm.lapic_w(0, 0xb0, 0);
        // TPR 0x40 blocks class 3.
        vm.lapic_w(0, 0x80, 0x40);
        assert_eq!(vm.inta(0), None);
        assert_eq!(vm.lapic_r(0, 0xa0), 0x40);
        vm.lapic_w(0, 0x80, 0);
        assert_eq!(vm.inta(0), Some(0x31));
        vm.lapic_w(0, 0xb0, 0);
        assert_eq!(vm.lapic_r(0, 0x100 + 0x10), 0, "ISR empty after EOI");
        // An EOI with nothing in service is harmless.
        vm.lapic_w(0, 0xb0, 0);
    });
}

#[test]
fn illegal_vectors_absent_destinations_and_init_to_self() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        vm.guest_cpu_setup(0);
        vm.guest_cpu_setup(1);
        vm.events.take();
        // Fixed IPI with vector 5: not delivered, ESR "send illegal vector".
        vm.lapic_w(0, 0x310, 1 << 24);
        vm.lapic_w(0, 0x300, 0x05);
        assert_eq!(vm.inta(1), None);
        vm.lapic_w(0, 0x280, 0);
        assert_eq!(vm.lapic_r(0, 0x280) & (1 << 5), 1 << 5, "{flavor:?}");
        // Received illegal vector (from a device).
        vm.accept(1, 0x0f);
        vm.lapic_w(1, 0x280, 0);
        assert_eq!(vm.lapic_r(1, 0x280) & (1 << 6), 1 << 6);
        // Destination 7 does not exist.
        vm.lapic_w(0, 0x310, 7 << 24);
        vm.lapic_w(0, 0x300, 0x40);
        assert_eq!(vm.chip.counters.no_destination.load(Ordering::Relaxed), 1);
        // INIT to itself by id: the VMM's to carry out, as hardware would.
        vm.lapic_w(0, 0x310, 0);
        vm.lapic_w(0, 0x300, 0x4500);
        // INIT with the self shorthand is invalid: ignored and counted.
        vm.lapic_w(0, 0x300, 0x4500 | (1 << 18));
        // INIT level de-assert: a no-op.
        vm.lapic_w(0, 0x300, 0x8500);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::Init { vcpu: 0 }]);
        assert_eq!(
            vm.chip
                .counters
                .unsupported_delivery
                .load(Ordering::Relaxed),
            1
        );
        // Reserved register: ignored, ESR "illegal register address".
        vm.lapic_w(1, 0x3f0, 0xdead_beef);
        assert_eq!(vm.lapic_r(1, 0x3f0), 0);
        vm.lapic_w(1, 0x280, 0);
        assert_eq!(vm.lapic_r(1, 0x280) & (1 << 7), 1 << 7);
        // Unaligned and narrow writes are ignored.
        let tpr = lapic_bus_address(1, LAPIC_GPA + 0x80).unwrap_or(0);
        vm.client.write(AddressSpace::Mmio, tpr + 1, &[0xff; 4]);
        vm.client.write(AddressSpace::Mmio, tpr, &[0xff; 2]);
        assert_eq!(vm.lapic_r(1, 0x80), 0);
    });
}

#[test]
fn logical_flat_destination() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 3);
        for v in 0..3 {
            vm.guest_cpu_setup(v);
            vm.lapic_w(v, 0xd0, (1 << v) << 24);
        }
        vm.lapic_w(0, 0x310, 0b110 << 24);
        vm.lapic_w(0, 0x300, 0x70 | (1 << 11));
        assert_eq!(
            (vm.inta(0), vm.inta(1), vm.inta(2)),
            (None, Some(0x70), Some(0x70)),
            "{flavor:?}"
        );
    });
}

#[test]
fn timer_one_shot_periodic_and_extremes() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 1);
        vm.guest_cpu_setup(0);
        vm.events.take();
        vm.clock.set(1_000);
        // arm_oneshot: divide 16, vector 0x20, count 1000 -> 16 µs.
        vm.lapic_w(0, 0x3e0, 0x3);
        vm.lapic_w(0, 0x320, 0x20);
        vm.lapic_w(0, 0x380, 1000);
        let deadline = 1_000 + 16_000;
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: Some(deadline)
            }],
            "{flavor:?}"
        );
        vm.clock.set(1_000 + 8_000);
        assert_eq!(vm.lapic_r(0, 0x390), 500, "current count halfway");
        // A stale report (wrong deadline) does nothing.
        vm.ctl_w(
            lapic_control_address(0, lapic_ctl::TIMER_EXPIRED),
            deadline - 1,
        );
        assert_eq!(vm.inta(0), None);
        assert_eq!(vm.chip.counters.stale_timer.load(Ordering::Relaxed), 1);
        vm.clock.set(deadline + 5);
        vm.ctl_w(lapic_control_address(0, lapic_ctl::TIMER_EXPIRED), deadline);
        assert_eq!(vm.lapic_r(0, 0x390), 0);
        assert_eq!(vm.inta(0), Some(0x20));
        vm.lapic_w(0, 0xb0, 0);
        // Reported twice: the second is stale (one-shot).
        vm.ctl_w(lapic_control_address(0, lapic_ctl::TIMER_EXPIRED), deadline);
        assert_eq!(vm.inta(0), None);
        vm.events.take();
        // Periodic with a tiny count: clamped to 200 µs.
        vm.lapic_w(0, 0x320, 0x20 | (1 << 17));
        vm.lapic_w(0, 0x380, 1);
        let now = deadline + 5;
        let first = now + lapic_min_period();
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: Some(first)
            }]
        );
        // The timer thread is 2.5 periods late: the next deadline skips ahead.
        vm.clock.set(first + 5 * lapic_min_period() / 2);
        vm.ctl_w(lapic_control_address(0, lapic_ctl::TIMER_EXPIRED), first);
        assert_eq!(
            vm.events.take(),
            vec![
                IrqchipEvent::TimerDeadline {
                    vcpu: 0,
                    deadline_ns: Some(first + 3 * lapic_min_period())
                },
                IrqchipEvent::Kick { vcpu: 0 }
            ]
        );
        assert_eq!(vm.inta(0), Some(0x20));
        vm.lapic_w(0, 0xb0, 0);
        // Count 0 stops the timer; 2^32-1 at divide 128 does not overflow.
        vm.lapic_w(0, 0x380, 0);
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: None
            }]
        );
        vm.lapic_w(0, 0x320, 0x20);
        vm.lapic_w(0, 0x3e0, 0xa);
        vm.lapic_w(0, 0x380, u32::MAX);
        let now = first + 5 * lapic_min_period() / 2;
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: Some(now + u64::from(u32::MAX) * 128)
            }]
        );
        assert_eq!(vm.lapic_r(0, 0x390), u32::MAX);
        // A masked timer expires without an interrupt.
        vm.lapic_w(0, 0x320, 0x10020);
        vm.clock.set(u64::MAX / 2);
        vm.ctl_w(
            lapic_control_address(0, lapic_ctl::TIMER_EXPIRED),
            now + u64::from(u32::MAX) * 128,
        );
        assert_eq!(vm.inta(0), None);
    });
}

fn lapic_min_period() -> u64 {
    regs::MIN_PERIOD_NS
}

#[test]
fn init_reset_clears_the_lapic() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 1);
        vm.guest_cpu_setup(0);
        vm.accept(0, 0x40);
        vm.accept(0, 0x80);
        assert_eq!(vm.inta(0), Some(0x80));
        vm.ctl_w(lapic_control_address(0, lapic_ctl::INIT_RESET), 0);
        assert_eq!(vm.lapic_r(0, 0xf0), 0xff, "{flavor:?}");
        assert_eq!(vm.lapic_r(0, 0x100 + 0x40), 0, "ISR cleared");
        assert_eq!(vm.lapic_r(0, 0x200 + 0x20), 0, "IRR cleared");
        assert_eq!(vm.lapic_r(0, 0x20), 0, "APIC id kept");
    });
}

#[test]
fn ioapic_edge_level_remote_irr_and_eoi() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        vm.guest_cpu_setup(0);
        vm.guest_cpu_setup(1);
        assert_eq!(vm.ioapic_r(1), 0x0017_0020);
        assert_eq!(vm.ioapic_r(0x10), 0x10000, "masked at reset");
        let set_irq = ioapic_control_address(ioapic_ctl::SET_IRQ);
        // Pin 4: edge, vector 0x44, to APIC 1.
        vm.ioapic_w(0x19, 1 << 24);
        vm.ioapic_w(0x18, 0x44);
        // Each half reads back as written, the low one too while a
        // destination is set in the high one.
        assert_eq!((vm.ioapic_r(0x18), vm.ioapic_r(0x19)), (0x44, 1 << 24));
        vm.ctl_w(set_irq, 4 | 0x100);
        vm.ctl_w(set_irq, 4 | 0x100); // still high: no second edge
        assert_eq!(vm.inta(1), Some(0x44), "{flavor:?}");
        vm.lapic_w(1, 0xb0, 0);
        assert_eq!(vm.inta(1), None);
        // Pin 9: level, vector 0x59, to APIC 0.
        vm.ioapic_w(0x23, 0);
        vm.ioapic_w(0x22, 0x59 | (1 << 15));
        vm.events.take();
        vm.ctl_w(set_irq, 9 | 0x100);
        assert_eq!(vm.ioapic_r(0x22) & (1 << 14), 1 << 14, "remote IRR set");
        assert_eq!(vm.inta(0), Some(0x59));
        assert_eq!(
            vm.lapic_r(0, 0x180 + 0x10 * (0x59 / 32)),
            1 << (0x59 % 32),
            "TMR"
        );
        vm.ctl_w(set_irq, 9 | 0x100);
        vm.lapic_w(0, 0xb0, 0);
        let events = vm.events.take();
        assert!(
            events.contains(&IrqchipEvent::EoiBroadcast { vector: 0x59 }),
            "{events:?}"
        );
        // The VMM forwards the EOI; the line is still high: delivered again.
        let eoi = ioapic_bus_address(IOAPIC_GPA + 0x40).unwrap_or(0);
        vm.client
            .write(AddressSpace::Mmio, eoi, &0x59u32.to_le_bytes());
        assert_eq!(vm.inta(0), Some(0x59));
        vm.ctl_w(set_irq, 9);
        vm.lapic_w(0, 0xb0, 0);
        vm.client
            .write(AddressSpace::Mmio, eoi, &0x59u32.to_le_bytes());
        assert_eq!(vm.ioapic_r(0x22) & (1 << 14), 0, "remote IRR clear");
        assert_eq!(vm.inta(0), None);
        // Masked level pin high, then unmasked: delivered on unmask.
        vm.ioapic_w(0x22, 0x59 | (1 << 15) | (1 << 16));
        vm.ctl_w(set_irq, 9 | 0x100);
        assert_eq!(vm.inta(0), None);
        vm.ioapic_w(0x22, 0x59 | (1 << 15));
        assert_eq!(vm.inta(0), Some(0x59));
        // Pins that do not exist.
        vm.ctl_w(set_irq, 24 | 0x100);
        assert_eq!(vm.chip.counters.bad_pin.load(Ordering::Relaxed), 1);
    });
}

fn init_pics(vm: &mut Vm) {
    for (cmd, data, base, icw3) in [(0x20, 0x21, 0x20, 4), (0xa0, 0xa1, 0x28, 2)] {
        vm.pic_w(cmd, 0x11);
        vm.pic_w(data, base);
        vm.pic_w(data, icw3);
        vm.pic_w(data, 0x01);
        vm.pic_w(data, 0x00);
    }
}

#[test]
fn pic_priority_cascade_masking_and_eoi() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 1);
        let set_irq = pic_control_address(pic_ctl::SET_IRQ);
        let inta = pic_control_address(pic_ctl::INTA);
        // The guest's boot: everything masked, nothing delivered.
        vm.pic_w(0x21, 0xff);
        vm.pic_w(0xa1, 0xff);
        vm.ctl_w(set_irq, 3 | 0x100);
        assert_eq!(vm.ctl_r(inta), None, "{flavor:?}");
        init_pics(&mut vm);
        vm.events.take();
        vm.ctl_w(set_irq, 3);
        vm.ctl_w(set_irq, 3 | 0x100);
        vm.ctl_w(set_irq, 0x100);
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::ExtInt, IrqchipEvent::ExtInt]
        );
        assert_eq!(vm.ctl_r(inta), Some(0x20), "IRQ 0 first");
        assert_eq!(vm.ctl_r(inta), None, "IRQ 3 waits for IRQ 0's EOI");
        vm.pic_w(0x20, 0x20);
        assert_eq!(vm.ctl_r(inta), Some(0x23));
        vm.pic_w(0x20, 0x20);
        // Slave IRQ 11: vector 0x2b, in service on both chips.
        vm.ctl_w(set_irq, 11 | 0x100);
        assert_eq!(vm.ctl_r(inta), Some(0x2b));
        vm.pic_w(0x20, 0x0b); // OCW3: read ISR
        vm.pic_w(0xa0, 0x0b);
        assert_eq!((vm.pic_r(0x20), vm.pic_r(0xa0)), (1 << 2, 1 << 3));
        vm.pic_w(0xa0, 0x20);
        vm.pic_w(0x20, 0x20);
        assert_eq!((vm.pic_r(0x20), vm.pic_r(0xa0)), (0, 0));
        // Masking: a masked request waits; unmasked, it is delivered.
        vm.pic_w(0x21, 1 << 5);
        vm.ctl_w(set_irq, 5 | 0x100);
        assert_eq!(vm.ctl_r(inta), None);
        vm.pic_w(0x21, 0);
        assert_eq!(vm.ctl_r(inta), Some(0x25));
        vm.pic_w(0x20, 0x65); // specific EOI for IRQ 5
        assert_eq!(vm.ctl_r(inta), None);
        // IRQ 2 is the cascade, not an input; IRQ 16 does not exist.
        vm.ctl_w(set_irq, 2 | 0x100);
        vm.ctl_w(set_irq, 16 | 0x100);
        assert_eq!(vm.chip.counters.bad_pin.load(Ordering::Relaxed), 2);
        // Level mode (ELCR): the request follows the line.
        vm.pic_w(0x4d1, 1 << 2); // IRQ 10
        vm.ctl_w(set_irq, 10 | 0x100);
        vm.ctl_w(set_irq, 10);
        assert_eq!(
            vm.ctl_r(inta),
            None,
            "dropped line withdraws a level request"
        );
    });
}

#[test]
fn window_addresses_do_not_overlap_and_reject_outsiders() {
    assert_eq!(lapic_bus_address(0, LAPIC_GPA - 1), None);
    assert_eq!(lapic_bus_address(0, LAPIC_GPA + PAGE), None);
    assert_eq!(lapic_bus_address(MAX_VCPUS, LAPIC_GPA), None);
    let last = lapic_bus_address(MAX_VCPUS - 1, LAPIC_GPA + PAGE - 1).unwrap_or(u64::MAX);
    assert!(last < IOAPIC_WINDOW);
    const { assert!(IOAPIC_WINDOW + 2 * PAGE <= PIC_WINDOW) };
    assert_eq!(pic_bus_address(0x22), None);
    assert_eq!(ioapic_bus_address(IOAPIC_GPA + PAGE), None);
    let mut builder = BusBuilder::new();
    let config = IrqchipConfig {
        vcpus: MAX_VCPUS + 1,
        sink: Arc::new(NullSink),
        clock: Arc::new(MonotonicClock::new()),
    };
    assert!(matches!(
        register(&mut builder, Flavor::Exclusive, &config),
        Err(IrqchipError::VcpuCount(_))
    ));
}
