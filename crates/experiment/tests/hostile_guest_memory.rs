//! A hostile guest cannot hurt `smplab host`'s tuner or scheduler through
//! the words the host reads from its memory (docs/guest-abi.md, "Host
//! indicators" and "The routing page"): while a 2-vCPU VM runs under the
//! user-level scheduler with the host's tuner (`tune_host`, as `smplab host`
//! with `tune = true`), a thread playing the guest writes random and
//! adversarial values (u64::MAX, decreasing counters, NaN bit patterns,
//! masks and destinations beyond the VM's vCPUs) to those words in a tight
//! loop. The run must end normally, every value the host hands on must be
//! plausible (counters never go back, masks and destinations name the VM's
//! vCPUs), and the host record must count the refused words.
//! Fails instead of skipping when SMPLAB_REQUIRE_KVM=1 and KVM is unusable.

use smplab_experiment::host::tuned::tune_host;
use smplab_experiment::testutil::have_kvm;
use smplab_policy::tune::VcpuAffinity;
use smplab_record::config::{HostPolicy, IrqAffinity};
use smplab_vmm::host::sensors::{SENSOR_BASE, SENSOR_MAGIC, SENSOR_MAGIC_ADDR, SENSOR_VCPUS};
use smplab_vmm::host::{GuestCounters, HostScheduler, HostSlot, Sampling};
use smplab_vmm::irq_route::{IrqRoute, IRQ_ROUTE_ADDR, IRQ_ROUTE_END};
use smplab_vmm::test_guest::GuestProgram;
use smplab_vmm::{run_vm, ConsoleSink, KernelImage, VmConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The values a hostile guest tries (besides random ones).
const ADVERSARIAL: [u64; 8] = [
    u64::MAX,
    0,
    0x7ff8_0000_0000_0000, // a quiet NaN's bits
    0xfff0_0000_0000_0000, // -inf's bits
    1 << 63,
    u64::MAX - 1,
    0xffff_ffff_0000_0000, // every vCPU bit from 32 up
    0b1100,                // vCPUs 2 and 3 of a 2-vCPU VM
];

/// xorshift64: the hostile writer's randomness (seeded, no dependency).
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Write random and adversarial words over the routing page and the
/// sensor words until `stop`; how many writes landed.
fn play_hostile_guest(route: &IrqRoute, stop: &AtomicBool) -> u64 {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut falling = u64::MAX;
    let mut writes = 0u64;
    let words = (SENSOR_MAGIC_ADDR - IRQ_ROUTE_ADDR) / 8;
    while !stop.load(Ordering::Relaxed) {
        let r = next(&mut state);
        let gpa = IRQ_ROUTE_ADDR + 8 * (r % words);
        let value = match (r >> 32) % 4 {
            0 => ADVERSARIAL[usize::try_from((r >> 40) % 8).unwrap_or(0)],
            1 => {
                // A counter that only goes back.
                falling = falling.saturating_sub(r >> 48);
                falling
            }
            2 => r >> (r % 64),
            _ => next(&mut state),
        };
        if route.poke_for_tests(gpa, value) {
            writes += 1;
        }
        // Keep the guest "publishing", so the host reads every word.
        route.poke_for_tests(SENSOR_MAGIC_ADDR, SENSOR_MAGIC);
    }
    writes
}

#[test]
fn hostile_words_in_guest_memory_are_refused_and_counted_while_the_tuner_runs() {
    if !have_kvm() {
        return;
    }
    let cpus: Vec<usize> = smplab_vmm::placement::allowed_cpus()
        .into_iter()
        .take(2)
        .collect();
    let policy: HostPolicy = "rr:2ms".parse().expect("policy");
    let sample = Duration::from_millis(1);
    let sampling = Sampling {
        interval: sample,
        ..Sampling::default()
    };
    let scheduler = HostScheduler::new(&policy, &[2], &cpus, sampling).expect("scheduler");
    let route = scheduler.irq_route(0).expect("VM 0's routing page");
    let ticker = scheduler.start().expect("ticker");
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 30_000,
        ap_loops: 30_000,
        exit_code: 0,
        ..GuestProgram::default()
    };
    let mut config = VmConfig::new(KernelImage::Bytes(program.elf()));
    config.vcpus = 2;
    config.mem_bytes = 16 << 20;
    config.console = ConsoleSink::Capture;
    config.timeout = Some(Duration::from_secs(120));
    config.cmdline = "cpus=2".into();
    config.host = Some(HostSlot {
        scheduler: scheduler.clone(),
        vm: 0,
    });
    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let (outcome, writes, decisions) = std::thread::scope(|s| {
        let vm = s.spawn(|| {
            let outcome = run_vm(&config);
            scheduler.vm_finished(0);
            stop.store(true, Ordering::Release);
            outcome
        });
        let tuner = s.spawn(|| {
            tune_host(
                &scheduler,
                &[2],
                &[(VcpuAffinity::Floating, IrqAffinity::Running)],
                sample,
                2_000_000,
                &stop,
            )
        });
        let hostile = s.spawn(|| play_hostile_guest(&route, &stop));
        // What the host hands on: counters that never go back, masks and
        // destinations that name the VM's vCPUs.
        s.spawn(|| {
            let mut last = [GuestCounters::default(); 2];
            let mut interrupts = 0;
            while !stop.load(Ordering::Acquire) {
                for (i, now) in scheduler.guest_counters().iter().enumerate() {
                    let Some(now) = now else { continue };
                    let before = last[i];
                    assert!(
                        now.resched_ipis >= before.resched_ipis,
                        "{now:?} < {before:?}"
                    );
                    assert!(now.io_completions >= before.io_completions);
                    assert!(now.irq_latency_ns >= before.irq_latency_ns);
                    last[i] = *now;
                }
                if let Ok(mask) = route.mask() {
                    assert_eq!(mask & !0b11, 0, "mask {mask:#x} beyond 2 vCPUs");
                }
                if let Ok(Some(d)) = route.destination() {
                    assert!(d < 2, "destination {d}");
                }
                if let Ok(n) = route.interrupts() {
                    assert!(n >= interrupts, "{n} < {interrupts}");
                    interrupts = n;
                }
                reads.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let outcome = vm.join().expect("the VM thread");
        let decisions = tuner.join().expect("the tuner never panics");
        let writes = hostile.join().expect("the hostile writer");
        (outcome, writes, decisions)
    });
    let report = scheduler.finish(Some(ticker));
    let run = outcome.expect("the VM runs to its end");
    assert_eq!(run.exit_code, 0);
    assert_eq!(run.result, b"ok");
    let vm = &report.vms[0];
    eprintln!(
        "hostile writes {writes}, host reads {}, sensor words refused {}, routing words refused {}, \
         tuner log {} lines, wall {:.2} s",
        reads.load(Ordering::Relaxed),
        vm.sensor_values_rejected,
        vm.route_values_rejected,
        decisions.len(),
        run.wall.as_secs_f64()
    );
    assert!(writes > 10_000, "{writes} hostile writes");
    assert!(vm.sensor_values_rejected > 0, "{vm:?}");
    assert!(vm.route_values_rejected > 0, "{vm:?}");
    // The tuner's summary line per VM: finite indicators.
    for line in &decisions {
        assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
    }
    const { assert!(SENSOR_BASE == IRQ_ROUTE_END && SENSOR_VCPUS == 16) };
}
