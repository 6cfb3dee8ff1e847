//! The unchanged smplab guest on smplab-vmm's own interrupt controllers
//! (`--irqchip user`): counts equal to native at 1, 2 and 4 vCPUs,
//! every built-in profile without `io` ops, every sync mode. Without a usable
//! /dev/kvm they skip, but with SMPLAB_REQUIRE_KVM=1 (CI) they fail instead.
//! No timing assertions.
//! Kept small: on a PVM host the guest's kernel mode is emulated and slow.

mod common;

use common::{check_io, info, kvm_usable, program};
use smplab_guest::{run_vm, IdlePolicy, VmRunOptions};
use smplab_record::config::Irqchip;
use smplab_record::RunRecord;
use smplab_vmm::SyncMode;
use smplab_workload::{builtin, Program};
use std::time::Duration;

fn user_opts(vcpus: u32, sync: SyncMode) -> VmRunOptions {
    VmRunOptions {
        vcpus,
        sync,
        irqchip: Irqchip::User,
        idle: IdlePolicy::Hlt,
        timeout: Duration::from_secs(120),
        ..VmRunOptions::default()
    }
}

fn vm(p: &Program, o: &VmRunOptions) -> RunRecord {
    run_vm(p, info(p), o).unwrap_or_else(|e| {
        panic!(
            "{} on {} vCPUs, {} irqchip user: {e}",
            p.name, o.vcpus, o.sync
        )
    })
}

fn exits(r: &RunRecord, reason: &str) -> u64 {
    r.vmm
        .as_ref()
        .expect("vmm section")
        .exits_per_vcpu
        .iter()
        .map(|m| m.get(reason).copied().unwrap_or(0))
        .sum()
}

#[test]
fn boots_with_1_2_and_4_vcpus_on_the_user_irqchip() {
    if !kvm_usable() {
        return;
    }
    let p = program("spinlock", 4, 0.01);
    for (vcpus, sync) in [
        (1, SyncMode::Global),
        (2, SyncMode::Hybrid),
        (4, SyncMode::IoThread),
    ] {
        let r = vm(&p, &user_opts(vcpus, sync));
        let g = r.guest.as_ref().expect("guest section");
        assert_eq!(
            g.vcpus, vcpus,
            "every AP started from the model's INIT/SIPI"
        );
        assert_eq!(r.counters.ops, p.expected_counts());
        let vmm = r.vmm.as_ref().expect("vmm section");
        let user = vmm.user_irqchip.as_ref().expect("user_irqchip section");
        assert!(
            vmm.exit_latency.keys().any(|k| k.starts_with("lapic/")),
            "LAPIC accesses go through the bus: {:?}",
            vmm.exit_latency.keys()
        );
        if vcpus > 1 {
            // The guest wakes halted vCPUs with IPIs: injected by the VMM.
            assert!(user.injected > 0, "{user:?}");
        }
    }
}

#[test]
fn every_builtin_counts_equal_native_on_the_user_irqchip() {
    if !kvm_usable() {
        return;
    }
    let mut i = 0;
    for name in builtin::names() {
        for vcpus in [1, 2, 4] {
            // Rotate the sync modes so each meets every profile and vCPU count
            // somewhere without multiplying the runs.
            let sync = SyncMode::ALL[i % SyncMode::ALL.len()];
            i += 1;
            let p = program(name, vcpus.max(2), 0.02);
            let r = vm(&p, &user_opts(vcpus, sync));
            let what = format!("{name} on {vcpus} vCPUs ({sync})");
            assert_eq!(r.counters.ops, p.expected_counts(), "{what}");
            let native = smplab_native::run(&p, info(&p), &Default::default())
                .unwrap_or_else(|e| panic!("native {name}: {e}"));
            assert_eq!(
                r.counters.ops, native.counters.ops,
                "{what}: vm irqchip=user vs native"
            );
        }
    }
}

#[test]
fn halts_reach_the_vmm_and_their_wake_ups_are_measured() {
    if !kvm_usable() {
        return;
    }
    // IPI- and HLT-heavy: every shootdown interrupts the other vCPU, and an
    // idle vCPU halts until its next IPI.
    let p = program("shootdown", 2, 0.02);
    for sync in SyncMode::ALL {
        let r = vm(&p, &user_opts(2, sync));
        assert_eq!(r.counters.ops, p.expected_counts(), "{sync}");
        let g = r.guest.as_ref().expect("guest section");
        assert!(g.ipis_sent >= p.expected_counts()["shootdown"], "{sync}");
        let user = r
            .vmm
            .as_ref()
            .and_then(|v| v.user_irqchip.clone())
            .expect("user_irqchip section");
        assert!(exits(&r, "hlt") > 0, "{sync}: HLT exits to the VMM");
        assert_eq!(
            exits(&r, "hlt"),
            user.halts_polled + user.halts_slept,
            "{sync}: every HLT exit ends polled or woken"
        );
        assert!(user.injected >= g.ipis_sent / 2, "{sync}: {user:?}");
        if user.halts_slept > 0 {
            assert!(user.wake_latency.is_some(), "{sync}");
        }
    }
}

#[test]
fn the_vmm_halt_poll_window_is_used_and_recorded() {
    if !kvm_usable() {
        return;
    }
    let p = program("ocean_ncp", 2, 0.02);
    let mut o = user_opts(2, SyncMode::Fine);
    o.vmm_halt_poll = Duration::from_micros(50);
    let r = vm(&p, &o);
    assert_eq!(r.counters.ops, p.expected_counts());
    let user = r
        .vmm
        .as_ref()
        .and_then(|v| v.user_irqchip.clone())
        .expect("user_irqchip section");
    assert_eq!(user.halt_poll_ns, 50_000);
}

#[test]
fn io_profiles_run_on_the_user_ioapic_and_follow_the_affinity() {
    if !kvm_usable() {
        return;
    }
    for name in ["oltp", "phases"] {
        let p = program(name, 2, 0.1);
        let native = smplab_native::run(&p, info(&p), &Default::default())
            .unwrap_or_else(|e| panic!("native {name}: {e}"));
        for (vcpus, sync, affinity) in [
            (1, SyncMode::Fine, "0"),
            (2, SyncMode::Global, "1"),
            (2, SyncMode::IoThread, "balanced"),
        ] {
            let o = VmRunOptions {
                irq_affinity: affinity.parse().expect("affinity"),
                ..user_opts(vcpus, sync)
            };
            let r = vm(&p, &o);
            let what = format!("{name} on {vcpus} vCPUs ({sync}, irq {affinity})");
            assert_eq!(r.counters.ops, p.expected_counts(), "{what}");
            assert_eq!(r.counters.ops, native.counters.ops, "{what}: vs native");
            let irqs = check_io(&r, &p, vcpus);
            match affinity {
                "1" => assert!(irqs[0] == 0 && irqs[1] > 0, "{what}: {irqs:?}"),
                "balanced" => assert!(irqs.iter().all(|&n| n > 0), "{what}: {irqs:?}"),
                _ => assert!(irqs[0] > 0, "{what}: {irqs:?}"),
            }
            let user = r
                .vmm
                .as_ref()
                .and_then(|v| v.user_irqchip.clone())
                .expect("user_irqchip section");
            assert!(
                user.injected >= irqs.iter().sum::<u64>(),
                "{what}: {user:?}"
            );
        }
    }
}

#[test]
fn the_host_moves_block_interrupts_mid_run_on_the_user_irqchip() {
    if !kvm_usable() {
        return;
    }
    common::routing_moves_mid_run(user_opts(2, SyncMode::Fine), "user irqchip");
}
