//! Concurrent device fuzzing on real KVM: a 2-vCPU guest whose vCPUs both
//! hammer the same devices and interrupt controllers at once
//! (`smplab_vmm::fuzz_guest`: UART, result port, work device, PM timer,
//! workload window, block device, the 8259 pair, LAPIC and IOAPIC
//! registers, unclaimed ports) under every sync mode with both irqchips.
//! The VMM must not panic, abort, hang or fail, and at the end: the guest
//! finished its loops and exited 0 with its result after every fuzz byte,
//! unclaimed reads were counted, every queued request of the I/O thread was
//! handled, the VMM never injected into or NMI'd a guest that keeps
//! interrupts disabled, and the interrupt controllers' invariants hold
//! (`VmRun::irqchip_violations`: the models' LAPIC ISR/IRR/TMR, PPR, LVT,
//! timer and routing mirror, IOAPIC remote IRR and entries, PIC
//! configuration with `--irqchip user`; what KVM_GET_LAPIC and
//! KVM_GET_IRQCHIP show with the in-kernel irqchip). This guest keeps
//! interrupts off and takes no INIT while fuzzing, so not even the
//! violations a guest could cause on its own may appear.
//!
//! 10^5 accesses per mode here; `--ignored` runs 10^6 per mode.
//! Without /dev/kvm these tests print a note and pass; with
//! SMPLAB_REQUIRE_KVM=1 they fail instead.

mod kvm_check;

use kvm_check::kvm_usable;

use smplab_vmm::devices::block::BlockConfig;
use smplab_vmm::fuzz_guest::{standard_targets, FuzzGuest};
use smplab_vmm::{run_vm, ConsoleSink, Irqchip, KernelImage, SyncMode, VmConfig};
use std::time::{Duration, Instant};

const VCPUS: u16 = 2;

/// Fuzz every mode and irqchip with `per_mode` accesses (all vCPUs).
fn fuzz_every_mode(per_mode: u32) {
    if !kvm_usable() {
        return;
    }
    let per_vcpu = per_mode / u32::from(VCPUS);
    for sync in SyncMode::ALL {
        for irqchip in Irqchip::ALL {
            let guest = FuzzGuest {
                vcpus: VCPUS,
                accesses_per_vcpu: per_vcpu,
                targets: standard_targets(true),
                seed: 0x5eed_0000
                    ^ u32::from(sync as u8) << 4
                    ^ u32::from(irqchip == Irqchip::User),
            };
            let mut config = VmConfig::new(KernelImage::Bytes(guest.elf()));
            config.vcpus = u32::from(VCPUS);
            config.mem_bytes = 16 << 20;
            config.sync = sync;
            config.irqchip = irqchip;
            config.console = ConsoleSink::Capture;
            config.timeout = Some(Duration::from_secs(600));
            config.cmdline = format!("cpus={VCPUS}");
            config.block = Some(BlockConfig {
                queue_depths: vec![2, 1],
                thread_cpus: Vec::new(),
            });
            let started = Instant::now();
            let run = run_vm(&config)
                .unwrap_or_else(|e| panic!("{sync} {irqchip}: the VMM failed under fuzzing: {e}"));
            let took = started.elapsed();
            let what = format!("{sync} {irqchip}");
            assert_eq!(run.exit_code, 0, "{what}");
            assert!(
                run.irqchip_violations.is_empty(),
                "{what}: the interrupt controllers' invariants broke: {:#?}",
                run.irqchip_violations
            );
            assert!(
                run.result.ends_with(b"ok"),
                "{what}: result {:?}",
                run.result.len()
            );
            let s = &run.section;
            assert!(s.unclaimed_accesses > 0, "{what}: {s:?}");
            let handled: u64 = s
                .exits_per_vcpu
                .iter()
                .flat_map(|e| ["io_in", "io_out", "mmio_read", "mmio_write"].map(|k| e.get(k)))
                .flatten()
                .sum();
            if irqchip == Irqchip::User {
                // Every access of the loop exits to the VMM (no in-kernel
                // device claims any of them).
                assert!(
                    handled >= u64::from(per_vcpu) * u64::from(VCPUS),
                    "{what}: {handled} accesses reached the VMM"
                );
                let chip = s.user_irqchip.as_ref().expect("user irqchip stats");
                assert_eq!(chip.injected, 0, "{what}: injected with IF=0: {chip:?}");
                assert_eq!(chip.nmis, 0, "{what}: {chip:?}");
            }
            if let Some(io) = &s.io_thread {
                let handling = io.handling.as_ref().map_or(0, |h| h.count);
                assert_eq!(io.requests, handling, "{what}: {io:?}");
            }
            let block = run.block.as_ref().expect("block stats");
            eprintln!(
                "{what}: {} guest accesses ({} reached the VMM, {} unclaimed, {} block requests, \
                 {} bad submissions), irqchip invariants hold, in {:.2} s",
                per_vcpu * u32::from(VCPUS),
                handled,
                s.unclaimed_accesses,
                block.requests,
                block.bad_submissions,
                took.as_secs_f64()
            );
        }
    }
}

#[test]
fn every_vcpu_fuzzes_the_same_devices_in_every_mode() {
    fuzz_every_mode(100_000);
}

#[test]
#[ignore = "10^6 accesses per mode and irqchip: minutes on a nested host"]
fn a_million_concurrent_accesses_per_mode() {
    fuzz_every_mode(1_000_000);
}
