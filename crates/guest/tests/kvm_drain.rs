//! `drain` ops in the smplab guest (real KVM; they skip without a usable
//! /dev/kvm, and fail with SMPLAB_REQUIRE_KVM=1): claims are a locked
//! fetch-and-decrement on guest memory at CPL3, every unit runs exactly
//! once, and the units go to the threads that are running. The one timing
//! assertion compares the threads of one run with a 3x margin.

mod common;

use common::{info, kvm_usable};
use smplab_guest::{run_qemu, run_vm, IdlePolicy, VmRunOptions};
use smplab_workload::{Program, Source};
use std::time::Duration;

/// Threads pass a mutex one by one, each sleeping `stagger_us` while holding
/// it, so the k-th thread to get it starts draining k × `stagger_us` after
/// the start; then they all take `compute`-iteration units from one pool.
fn staggered(threads: u32, units: u64, stagger_us: u64, compute: u64) -> Program {
    let text = format!(
        r#"
name = "staggered-drain"
[pools.units]
count = {units}
[mutexes.gate]
[[groups]]
name = "w"
threads = "n"
ops = [
  {{ lock = "gate" }},
  {{ sleep_us = {stagger_us} }},
  {{ unlock = "gate" }},
  {{ drain = {{ pool = "units", ops = [ {{ compute = {compute} }} ] }} }},
]
"#
    );
    Source::from_text("drain.toml", &text)
        .and_then(|s| s.instantiate(Some(threads), 1.0))
        .expect("valid workload")
}

fn opts(vcpus: u32) -> VmRunOptions {
    VmRunOptions {
        vcpus,
        idle: IdlePolicy::Hlt,
        timeout: Duration::from_secs(60),
        ..VmRunOptions::default()
    }
}

#[test]
fn units_are_claimed_once_and_the_early_thread_takes_more() {
    if !kvm_usable() {
        return;
    }
    // ~0.1-0.4 ms per unit at CPL3 (depending on the host's load); the
    // first thread to start has 50 ms alone, so it should be on a vCPU about
    // 50 ms longer than the second (a thread's CPU time in the guest is its
    // time on a vCPU; measured: 52 and 63 ms more). Fixed quotas would give
    // both the same time.
    let p = staggered(2, 600, 50_000, 100_000);
    let r = run_vm(&p, info(&p), &opts(2)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.counters.ops, p.expected_counts(), "totals equal the pool");
    assert_eq!(r.counters.ops["compute"], 600);
    let cpu: Vec<u64> = r.timing.threads.iter().map(|t| t.cpu_ns).collect();
    eprintln!("cpu ns per thread: {cpu:?}");
    let (lo, hi) = (*cpu.iter().min().unwrap(), *cpu.iter().max().unwrap());
    assert!(lo > 2_000_000, "the late thread still works: {cpu:?}");
    // Tolerance: 15 ms, a third of the expected gap.
    assert!(hi - lo > 15_000_000, "the early thread takes more: {cpu:?}");
}

#[test]
fn more_threads_than_vcpus_drain_exactly_as_native_does() {
    if !kvm_usable() {
        return;
    }
    for units in [0, 1, 301] {
        let p = staggered(5, units, 100, 20_000);
        let r = run_vm(&p, info(&p), &opts(2)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.counters.ops, p.expected_counts(), "{units} units");
        let native = smplab_native::run(&p, info(&p), &Default::default())
            .unwrap_or_else(|e| panic!("native: {e}"));
        assert_eq!(
            r.counters.ops, native.counters.ops,
            "{units} units: vm vs native"
        );
    }
}

#[test]
fn qemu_drains_exactly() {
    if !kvm_usable() {
        return;
    }
    let p = staggered(3, 101, 100, 20_000);
    match run_qemu(&p, info(&p), &opts(2)) {
        Ok(r) => assert_eq!(r.counters.ops, p.expected_counts()),
        Err(smplab_guest::GuestError::QemuMissing { .. })
            if std::env::var("SMPLAB_REQUIRE_QEMU").as_deref() != Ok("1") =>
        {
            eprintln!("skipping: QEMU not installed (set SMPLAB_REQUIRE_QEMU=1 to fail instead)");
        }
        Err(e) => panic!("{e}"),
    }
}
