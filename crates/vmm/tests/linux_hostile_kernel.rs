//! The hostile Linux init (`hostile_storm`) on KVM's in-kernel irqchip, once
//! per sync mode, 2 vCPUs, seccomp filters on. `--ignored`: it runs only in a
//! nested AMD-V host with multi-threaded TCG (with one TCG thread for both L1
//! CPUs, SMP Linux on the in-kernel irqchip stalls before the init runs:
//! docs/nested-host.md, PV EOI), and there the storming guest triple-faults
//! now and then on either irqchip at an address no exit of ours leads to
//! (docs/nested-host.md, "The hostile Linux init triple-faults"), so a CI
//! failure would be the emulator's, not smplab-vmm's. Run it by hand:
//! `tools/nested-host/nested-host --file target/nested-host/vmlinuz test
//! BIN:--ignored`; the user-irqchip twin (linux_hostile.rs) runs in CI.

mod hostile_storm;
mod linux_common;

use hostile_storm::storm;
use linux_common::hardware_kvm;
use smplab_vmm::{Irqchip, SyncMode};

fn on_kernel_irqchip(sync: SyncMode) {
    if hardware_kvm("linux_hostile_kernel") {
        storm(Irqchip::Kernel, sync);
    }
}

#[test]
#[ignore = "multi-threaded TCG only, where the storming guest itself triple-faults now and then (docs/nested-host.md)"]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_global() {
    on_kernel_irqchip(SyncMode::Global);
}

#[test]
#[ignore = "multi-threaded TCG only, where the storming guest itself triple-faults now and then (docs/nested-host.md)"]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_iothread() {
    on_kernel_irqchip(SyncMode::IoThread);
}

#[test]
#[ignore = "multi-threaded TCG only, where the storming guest itself triple-faults now and then (docs/nested-host.md)"]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_hybrid() {
    on_kernel_irqchip(SyncMode::Hybrid);
}

#[test]
#[ignore = "multi-threaded TCG only, where the storming guest itself triple-faults now and then (docs/nested-host.md)"]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_fine() {
    on_kernel_irqchip(SyncMode::Fine);
}
