//! The hostile Linux init (`hostile_storm`) on the user-space irqchip, once
//! per sync mode, 2 vCPUs, seccomp filters on. CI runs it in the nested
//! AMD-V host with one TCG thread; linux_hostile_kernel.rs is the in-kernel
//! irqchip's twin.

mod hostile_storm;
mod linux_common;

use hostile_storm::{count, report_counts, storm};
use linux_common::hardware_kvm;
use smplab_vmm::{Irqchip, SyncMode};

fn on_user_irqchip(sync: SyncMode) {
    if hardware_kvm("linux_hostile") {
        storm(Irqchip::User, sync);
    }
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_user_irqchip_global() {
    on_user_irqchip(SyncMode::Global);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_user_irqchip_iothread() {
    on_user_irqchip(SyncMode::IoThread);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_user_irqchip_hybrid() {
    on_user_irqchip(SyncMode::Hybrid);
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_user_irqchip_fine() {
    on_user_irqchip(SyncMode::Fine);
}

#[test]
fn the_report_line_parses() {
    let counts = report_counts(r#"{"cpus":2,"seconds":10,"port_reads":5,"mmio_writes":7}"#);
    assert_eq!(count(&counts, "cpus"), 2);
    assert_eq!(count(&counts, "port_reads"), 5);
    assert_eq!(count(&counts, "mmio_writes"), 7);
    assert_eq!(count(&counts, "absent"), 0);
}
