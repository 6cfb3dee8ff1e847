//! The end-of-run invariant check (`invariants`, `Irqchip::check_invariants`)
//! on the registered models, both forms: quiet after a well-behaved
//! interrupt's whole life, and loud for each corrupted state, including the
//! lost EOI broadcast a VMM could drop between a LAPIC and the IOAPIC.

use super::tests::{each_flavor, Vm};
use super::*;

/// IOAPIC pin 3, level-triggered, vector 0x31, physical destination APIC 1.
fn route_level_pin(vm: &mut Vm) {
    vm.ioapic_w(0x10 + 2 * 3, 0x31 | 1 << 15);
    vm.ioapic_w(0x10 + 2 * 3 + 1, 1 << 24);
}

fn kinds(violations: &[IrqchipViolation]) -> Vec<String> {
    violations
        .iter()
        .map(|v| {
            format!("{v:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_level_interrupts_whole_life_keeps_every_invariant() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        for vcpu in 0..2 {
            vm.lapic_w(vcpu, 0xf0, 0x1ff);
        }
        assert_eq!(vm.chip.check_invariants(), vec![], "{flavor:?}: fresh");
        route_level_pin(&mut vm);
        vm.ctl_w(ioapic_control_address(ioapic_ctl::SET_IRQ), 3 | 1 << 8);
        assert_eq!(vm.chip.check_invariants(), vec![], "{flavor:?}: requested");
        assert_eq!(vm.inta(1), Some(0x31));
        assert_eq!(vm.chip.check_invariants(), vec![], "{flavor:?}: in service");
        vm.events.take();
        vm.lapic_w(1, 0xb0, 0);
        // The EOI broadcast is the VMM's to forward; until it does, the
        // IOAPIC waits for an EOI that already happened: found.
        assert!(vm
            .events
            .take()
            .contains(&IrqchipEvent::EoiBroadcast { vector: 0x31 }));
        let lost = vm.chip.check_invariants();
        assert_eq!(
            lost,
            vec![IrqchipViolation::RemoteIrrOrphan {
                pin: 3,
                vector: 0x31
            }],
            "{flavor:?}"
        );
        // Forwarded (the line still high: delivered again), then all hold.
        vm.chip
            .ioapic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .eoi(0x31);
        assert_eq!(
            vm.chip.check_invariants(),
            vec![],
            "{flavor:?}: re-delivered"
        );
    });
}

#[test]
fn a_corrupted_lapic_is_reported() {
    each_flavor(|flavor| {
        let mut vm = Vm::new(flavor, 2);
        vm.lapic_w(1, 0xf0, 0x1ff);
        vm.accept(1, 0x31);
        assert_eq!(vm.inta(1), Some(0x31));
        assert_eq!(vm.chip.check_invariants(), vec![], "{flavor:?}");
        match &vm.chip.lapics {
            LapicsHandle::Exclusive(set) => set
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .corrupt(1, 0x32),
            LapicsHandle::Concurrent(set) => set.corrupt(1, 0x32),
        }
        let found = kinds(&vm.chip.check_invariants());
        assert_eq!(found, ["IsrClassTwice", "RoutingMirror"], "{flavor:?}");
    });
}

#[test]
fn a_corrupted_ioapic_or_pic_is_reported() {
    each_flavor(|flavor| {
        let vm = Vm::new(flavor, 2);
        vm.chip
            .ioapic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .corrupt(7, 0x44);
        match &vm.chip.pic {
            PicHandle::Exclusive(pic) => pic.lock().unwrap_or_else(|e| e.into_inner()).corrupt(),
            PicHandle::Concurrent(pic) => pic.corrupt(),
        }
        let found = vm.chip.check_invariants();
        assert_eq!(
            kinds(&found),
            ["RemoteIrrOnEdge", "RemoteIrrOrphan", "Pic"],
            "{flavor:?}: {found:?}"
        );
    });
}
