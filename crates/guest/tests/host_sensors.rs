//! The host indicators of Kulkarni & Kulkarni's adaptive framework (§5.4) on
//! real KVM: while two VMs run under the
//! user-level scheduler, the host reads the counters the guest publishes
//! (docs/guest-abi.md, "Host indicators") — rescheduling IPIs from a
//! dedup-like VM, device completions and their interrupt latency from an
//! oltp-like one — and they agree with the guests' own result records.
//! Fails instead of skipping when SMPLAB_REQUIRE_KVM=1 and KVM is unusable.

mod common;

use smplab_guest::{run_vm, StartGate, VmRunOptions};
use smplab_record::config::HostPolicy;
use smplab_vmm::host::{GuestCounters, HostScheduler, HostSlot, Sampling};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[test]
fn the_host_reads_resched_ipis_and_irq_latency_from_running_vms() {
    if !common::kvm_usable() {
        return;
    }
    let workloads = [("dedup", 0.05), ("oltp", 0.05)];
    let programs: Vec<_> = workloads
        .iter()
        .map(|&(name, scale)| common::program(name, 2, scale))
        .collect();
    let policy: HostPolicy = "rr:2ms".parse().expect("policy");
    let scheduler = HostScheduler::new(&policy, &[2, 2], &[0, 1], Sampling::default())
        .expect("a host on CPUs 0-1");
    let ticker = scheduler.start().expect("scheduler thread");
    let gate = StartGate::new(2, Duration::from_secs(20));
    let done = AtomicBool::new(false);
    // Per VM: the largest totals read while it ran, and how many reads
    // found it publishing.
    let (records, seen) = std::thread::scope(|s| {
        let handles: Vec<_> = programs
            .iter()
            .enumerate()
            .map(|(vm, p)| {
                let opts = VmRunOptions {
                    vcpus: 2,
                    timeout: Duration::from_secs(120),
                    start_gate: Some(gate.clone()),
                    host: Some(HostSlot {
                        scheduler: scheduler.clone(),
                        vm,
                    }),
                    ..Default::default()
                };
                let scheduler = scheduler.clone();
                s.spawn(move || {
                    let r = run_vm(p, common::info(p), &opts);
                    scheduler.vm_finished(vm);
                    r
                })
            })
            .collect();
        let reader = s.spawn(|| {
            let mut seen = [(GuestCounters::default(), 0u32); 2];
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
                let now = scheduler.guest_counters();
                assert_eq!(now.len(), 4, "one reading per vCPU");
                for (vm, (max, reads)) in seen.iter_mut().enumerate() {
                    let mine = &now[2 * vm..2 * vm + 2];
                    if mine.iter().all(Option::is_some) {
                        *reads += 1;
                        let total = mine
                            .iter()
                            .flatten()
                            .fold(GuestCounters::default(), |a, c| a.plus(c));
                        // Counters only grow.
                        assert!(
                            total.resched_ipis >= max.resched_ipis,
                            "{total:?} < {max:?}"
                        );
                        assert!(total.io_completions >= max.io_completions);
                        *max = total;
                    }
                }
            }
            seen
        });
        let records: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("VM thread"))
            .collect();
        done.store(true, Ordering::Release);
        (records, reader.join().expect("reader thread"))
    });
    scheduler.finish(Some(ticker));
    let records: Vec<_> = records
        .into_iter()
        .map(|r| r.expect("both VMs finish"))
        .collect();
    // Once a VM has finished its memory is gone: nothing more is read.
    assert!(scheduler.guest_counters().iter().all(Option::is_none));

    let (dedup, reads) = seen[0];
    assert!(reads > 0, "the dedup VM never published its counters");
    assert!(
        dedup.resched_ipis > 0,
        "no rescheduling IPI seen from dedup: {dedup:?}"
    );
    let g = records[0].guest.as_ref().expect("guest section");
    // The record's ipis_sent also counts shootdowns (dedup has none) and
    // every IPI up to the end; the host read before the end.
    assert!(
        dedup.resched_ipis <= g.ipis_sent,
        "{dedup:?} vs the record's {}",
        g.ipis_sent
    );

    let (oltp, reads) = seen[1];
    assert!(reads > 0, "the oltp VM never published its counters");
    assert!(
        oltp.io_completions > 0,
        "no device completion seen: {oltp:?}"
    );
    assert!(
        oltp.irq_latency_ns > 0,
        "no interrupt latency seen: {oltp:?}"
    );
    common::check_io(&records[1], &programs[1], 2);
    let io = records[1].io.as_ref().expect("io section");
    assert!(
        oltp.io_completions <= io.irq_latency.count,
        "{oltp:?} vs {io:?}"
    );
    // The running mean lies within the record's latency range.
    let mean = oltp.irq_latency_ns / oltp.io_completions;
    assert!(mean <= io.irq_latency.max_ns, "mean {mean} ns vs {io:?}");
    eprintln!(
        "dedup: {} resched IPIs read (record: {} IPIs sent); oltp: {} completions read, mean irq latency {:.1} us (record p50 {:.1} us)",
        dedup.resched_ipis,
        g.ipis_sent,
        oltp.io_completions,
        mean as f64 / 1e3,
        io.irq_latency.p50_ns as f64 / 1e3
    );
}
