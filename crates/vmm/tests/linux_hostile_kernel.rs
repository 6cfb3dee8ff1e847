//! The hostile Linux init (`hostile_storm`) on KVM's in-kernel irqchip, once
//! per sync mode, 2 vCPUs, seccomp filters on. CI runs it in the nested
//! AMD-V host with multi-threaded TCG (tools/nested-host/kvm-test-binaries
//! `MULTI_TCG`): with one TCG thread for both L1 CPUs, SMP Linux boots on the
//! in-kernel irqchip stall there before the init runs (docs/vmm.md, "Linux
//! guests"), with a thread per CPU they boot.

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
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_global() {
    on_kernel_irqchip(SyncMode::Global);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_iothread() {
    on_kernel_irqchip(SyncMode::IoThread);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_hybrid() {
    on_kernel_irqchip(SyncMode::Hybrid);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip_fine() {
    on_kernel_irqchip(SyncMode::Fine);
}
