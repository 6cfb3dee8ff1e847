//! The register sequences Linux 6.1 (x86-64, xAPIC, flat logical model for up
//! to 8 CPUs, an IOAPIC from the MADT) issues, through a bus for both forms:
//! what an unmodified distribution kernel needs from `--irqchip user`.

use super::tests::{each_flavor, Vm};
use super::*;

/// `setup_local_APIC` and `lapic_setup_esr` on each CPU: flat DFR, LDR = 1 <<
/// cpu, TPR 0, SVR enabled with vector 0xff, LINT0 ExtINT masked, LINT1 NMI
/// on the BSP only, the error LVT, ESR cleared by back-to-back writes.
fn linux_setup_local_apic(vm: &mut Vm, cpu: u32) {
    let maxlvt = (vm.lapic_r(cpu, 0x30) >> 16) & 0xff;
    assert_eq!(maxlvt, 5, "six LVT entries");
    vm.lapic_w(cpu, 0xe0, 0xffff_ffff);
    let ldr = vm.lapic_r(cpu, 0xd0) & 0x00ff_ffff;
    vm.lapic_w(cpu, 0xd0, ldr | (1 << cpu) << 24);
    vm.lapic_w(cpu, 0x80, 0);
    // apic_pending_intr_clear: ISR and IRR are read, nothing is in them.
    for word in 0..8 {
        assert_eq!(vm.lapic_r(cpu, 0x100 + word * 0x10), 0);
        assert_eq!(vm.lapic_r(cpu, 0x200 + word * 0x10), 0);
    }
    let svr = vm.lapic_r(cpu, 0xf0) & !0xff;
    vm.lapic_w(cpu, 0xf0, svr | 0x100 | 0xff);
    let lint0_masked = vm.lapic_r(cpu, 0x350) & 0x10000;
    assert_ne!(lint0_masked, 0, "LINT0 masked after reset");
    vm.lapic_w(cpu, 0x350, 0x700 | 0x10000);
    vm.lapic_w(cpu, 0x360, if cpu == 0 { 0x400 } else { 0x10400 });
    vm.lapic_w(cpu, 0x280, 0);
    assert_eq!(vm.lapic_r(cpu, 0x280), 0, "no error");
    vm.lapic_w(cpu, 0x370, 0xfe);
    vm.lapic_w(cpu, 0x280, 0);
    vm.lapic_w(cpu, 0x280, 0);
    assert_eq!(vm.lapic_r(cpu, 0x280), 0, "no error");
}

#[test]
fn linux_local_apic_setup_and_ipis() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 4);
        linux_setup_local_apic(&mut vm, 0);
        assert_eq!(vm.lapic_r(0, 0xd0), 1 << 24, "{flavor:?}: LDR");
        assert_eq!(vm.lapic_r(0, 0xf0), 0x1ff);
        assert_eq!(vm.lapic_r(0, 0x350), 0x10700);
        assert_eq!(vm.lapic_r(0, 0x360), 0x400);
        vm.events.take();
        // wakeup_secondary_cpu_via_init for APIC id 1: INIT assert (level),
        // INIT de-assert, then two STARTUPs with an ESR write before each,
        // polling the delivery-status bit after each ICR write.
        for icr in [0xc500, 0x8500, 0x0600 | 0x9a, 0x0600 | 0x9a] {
            if icr & 0xf00 == 0x600 {
                vm.lapic_w(0, 0x280, 0);
            }
            vm.lapic_w(0, 0x310, 1 << 24);
            vm.lapic_w(0, 0x300, icr);
            assert_eq!(vm.lapic_r(0, 0x300) & (1 << 12), 0, "ICR idle");
        }
        assert_eq!(vm.lapic_r(0, 0x280), 0, "no send error");
        assert_eq!(
            vm.events.take(),
            vec![
                IrqchipEvent::Init { vcpu: 1 },
                IrqchipEvent::Startup {
                    vcpu: 1,
                    vector: 0x9a
                },
                IrqchipEvent::Startup {
                    vcpu: 1,
                    vector: 0x9a
                },
            ],
            "{flavor:?}: the second SIPI is the VMM's to ignore"
        );
        for cpu in 1..4 {
            linux_setup_local_apic(&mut vm, cpu);
        }
        vm.events.take();
        // A flat logical multicast (default_send_IPI_mask_logical): CPUs 1
        // and 3, fixed, no level bit.
        vm.lapic_w(0, 0x310, 0b1010 << 24);
        vm.lapic_w(0, 0x300, 0x800 | 0xfb);
        assert_eq!(
            vm.events.take(),
            vec![
                IrqchipEvent::Kick { vcpu: 1 },
                IrqchipEvent::Kick { vcpu: 3 }
            ]
        );
        for cpu in [1, 3] {
            assert_eq!(vm.inta(cpu), Some(0xfb));
            vm.lapic_w(cpu, 0xb0, 0);
        }
        assert_eq!(vm.inta(2), None);
        // The shorthands once all CPUs are up: all-but-self and all.
        vm.lapic_w(2, 0x300, 0xc0000 | 0xfd);
        vm.lapic_w(2, 0x300, 0x80000 | 0xfc);
        for cpu in 0..4 {
            let want = if cpu == 2 { 0xfc } else { 0xfd };
            assert_eq!(vm.inta(cpu), Some(want), "{flavor:?} CPU {cpu}");
        }
        // An NMI IPI (backtraces, stopping CPUs): logical CPU 2.
        vm.events.take();
        vm.lapic_w(0, 0x310, 0b100 << 24);
        vm.lapic_w(0, 0x300, 0x800 | 0x400);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::Nmi { vcpu: 2 }]);
        // A physical IPI to APIC id 3 (the physflat model).
        vm.lapic_w(0, 0x310, 3 << 24);
        vm.lapic_w(0, 0x300, 0xf3);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::Kick { vcpu: 3 }]);
    });
}

#[test]
fn linux_lapic_timer_calibration_and_one_shot() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 1);
        linux_setup_local_apic(&mut vm, 0);
        vm.events.take();
        // calibrate_APIC_clock: __setup_APIC_LVTT(0xffffffff, oneshot, masked):
        // LVTT, then TDCR divide 16 (read-modify-write), then TMICT.
        vm.clock.set(5_000);
        vm.lapic_w(0, 0x320, 0x10000 | 0xec);
        let tdcr = vm.lapic_r(0, 0x3e0);
        vm.lapic_w(0, 0x3e0, (tdcr & !0xb) | 0x3);
        vm.lapic_w(0, 0x380, u32::MAX);
        let start = vm.lapic_r(0, 0x390);
        // The TSC says 100 ms passed: the count fell by 100 ms / 16 ns.
        vm.clock.set(5_000 + 100_000_000);
        let end = vm.lapic_r(0, 0x390);
        assert_eq!(start - end, 6_250_000, "{flavor:?}: 62.5 MHz at divide 16");
        // lapic_timer_set_oneshot, then lapic_next_event: TMICT only.
        vm.lapic_w(0, 0x320, 0xec);
        vm.lapic_w(0, 0x3e0, 0x3);
        vm.events.take();
        let now = 5_000 + 100_000_000;
        vm.lapic_w(0, 0x380, 62_500);
        let deadline = now + 1_000_000;
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: Some(deadline)
            }]
        );
        // Reprogrammed earlier before it fired (a new next event).
        vm.lapic_w(0, 0x380, 6_250);
        let deadline = now + 100_000;
        vm.clock.set(deadline);
        vm.ctl_w(lapic_control_address(0, lapic_ctl::TIMER_EXPIRED), deadline);
        assert_eq!(vm.inta(0), Some(0xec));
        assert_eq!(vm.lapic_r(0, 0x390), 0, "one-shot spent");
        vm.lapic_w(0, 0xb0, 0);
        // lapic_timer_shutdown: mask, count 0.
        vm.events.take();
        vm.lapic_w(0, 0x320, 0x10000 | 0xec);
        vm.lapic_w(0, 0x380, 0);
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: None
            }]
        );
        // The periodic mode (before the switch to one-shot): HZ = 250.
        vm.lapic_w(0, 0x320, 0x20000 | 0xec);
        vm.lapic_w(0, 0x380, 250_000);
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::TimerDeadline {
                vcpu: 0,
                deadline_ns: Some(deadline + 4_000_000)
            }]
        );
    });
}

#[test]
fn linux_ioapic_setup_edge_and_level_pins() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        for cpu in 0..2 {
            linux_setup_local_apic(&mut vm, cpu);
        }
        // mp_register_ioapic: version 0x20 and 24 entries; the MADT's id is
        // written when it differs and must read back.
        assert_eq!(vm.ioapic_r(1), 0x0017_0020, "{flavor:?}");
        vm.ioapic_w(0, 1 << 24);
        assert_eq!(vm.ioapic_r(0) >> 24, 1);
        // clear_IO_APIC: every entry read and masked.
        for pin in 0..24 {
            let low = vm.ioapic_r(0x10 + 2 * pin);
            vm.ioapic_w(0x10 + 2 * pin, low | 0x10000);
        }
        // ioapic_write_entry: high word, then low. The serial IRQ 4: edge,
        // fixed, logical CPU 1, vector 0x24.
        vm.ioapic_w(0x11 + 2 * 4, 0b10 << 24);
        vm.ioapic_w(0x10 + 2 * 4, 0x800 | 0x24);
        let set_irq = ioapic_control_address(ioapic_ctl::SET_IRQ);
        vm.ctl_w(set_irq, 4 | 0x100);
        vm.ctl_w(set_irq, 4);
        assert_eq!(vm.inta(1), Some(0x24));
        vm.lapic_w(1, 0xb0, 0);
        vm.events.take();
        // A level pin, active low, to CPU 0: its LAPIC EOI is broadcast (the
        // VMM forwards it to the IOAPIC), and Linux also writes the EOI
        // register itself (version 0x20).
        vm.ioapic_w(0x11 + 2 * 9, 0b1 << 24);
        vm.ioapic_w(0x10 + 2 * 9, 0x800 | 0x8000 | 0x2000 | 0x39);
        vm.ctl_w(set_irq, 9 | 0x100);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::Kick { vcpu: 0 }]);
        assert_eq!(vm.inta(0), Some(0x39));
        assert_ne!(vm.ioapic_r(0x10 + 2 * 9) & (1 << 14), 0, "remote IRR");
        assert_ne!(vm.lapic_r(0, 0x180 + 0x10) & (1 << (0x39 - 0x20)), 0, "TMR");
        vm.lapic_w(0, 0xb0, 0);
        assert_eq!(
            vm.events.take(),
            vec![IrqchipEvent::EoiBroadcast { vector: 0x39 }]
        );
        // The line is still low (asserted): the EOI re-delivers.
        let eoi = ioapic_bus_address(IOAPIC_GPA + 0x40).unwrap_or(0);
        let ioapic_eoi = |vm: &mut Vm| {
            assert!(vm
                .client
                .write(AddressSpace::Mmio, eoi, &0x39u32.to_le_bytes()));
        };
        ioapic_eoi(&mut vm);
        assert_eq!(vm.inta(0), Some(0x39));
        vm.ctl_w(set_irq, 9);
        vm.lapic_w(0, 0xb0, 0);
        ioapic_eoi(&mut vm);
        assert_eq!(vm.ioapic_r(0x10 + 2 * 9) & (1 << 14), 0, "remote IRR clear");
        assert_eq!(vm.inta(0), None);
    });
}

#[test]
fn lint0_takes_the_pic_only_when_unmasked_in_extint_mode() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        let lint0 = |vm: &mut Vm, cpu| {
            let mut b = [0u8; 8];
            let addr = lapic_control_address(cpu, lapic_ctl::LINT0_EXTINT);
            assert!(vm.client.read(AddressSpace::Mmio, addr, &mut b));
            u64::from_le_bytes(b)
        };
        assert_eq!(lint0(&mut vm, 0), 0, "{flavor:?}: masked after reset");
        vm.lapic_w(0, 0xf0, 0x1ff);
        vm.events.take();
        vm.lapic_w(0, 0x350, 0x700);
        assert_eq!(lint0(&mut vm, 0), 1);
        assert_eq!(vm.events.take(), vec![IrqchipEvent::ExtInt], "opened");
        vm.lapic_w(0, 0x350, 0x700);
        assert!(vm.events.take().is_empty(), "already open");
        vm.lapic_w(0, 0x350, 0x10700);
        assert_eq!(lint0(&mut vm, 0), 0, "masked");
        vm.lapic_w(0, 0x350, 0x400);
        assert_eq!(lint0(&mut vm, 0), 0, "NMI mode");
        vm.lapic_w(0, 0x350, 0x700);
        vm.lapic_w(0, 0xf0, 0xff);
        assert_eq!(lint0(&mut vm, 0), 0, "software-disabled LAPIC");
        // An AP's LINT0 is not wired to the PIC: no event.
        vm.lapic_w(1, 0xf0, 0x1ff);
        vm.events.take();
        vm.lapic_w(1, 0x350, 0x700);
        assert_eq!(lint0(&mut vm, 1), 1);
        assert!(vm.events.take().is_empty());
    });
}
