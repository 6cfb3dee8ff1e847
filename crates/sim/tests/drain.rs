//! `drain` ops in the simulator: a pool is per-VM shared state, every unit is
//! claimed exactly once (in the VM and in its bare-metal reference), and the
//! threads that start late still get work while the early ones take more, so
//! they all end together.

use smplab_record::RunRecord;
use smplab_sim::{simulate, Platform, Scenario, VmSpec};
use smplab_workload::Source;

/// Threads pass a mutex one by one, each sleeping `stagger_us` while holding
/// it, so the k-th thread to get it starts draining k × `stagger_us` after
/// the start; then they all take `compute`-iteration units from one pool.
fn staggered(threads: u32, units: u64, stagger_us: u64, compute: u64) -> VmSpec {
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
    let source = Source::from_text("drain.toml", &text).expect("parses");
    let program = source.instantiate(Some(threads), 1.0).expect("valid");
    let info = source.workload_info(&program);
    VmSpec::new(program, info, threads)
}

fn run(v: VmSpec, pcpus: u32) -> RunRecord {
    let s = Scenario::new(Platform::builtin("kvm2015").unwrap(), pcpus, vec![v]);
    let r = simulate(&s).expect("simulates").remove(0);
    assert!(r.is_ok(), "{:?}", r.outcome);
    r
}

#[test]
fn units_are_shared_at_run_time_and_threads_end_together() {
    // 1,600 units of 10 µs (6,000 iterations at 1.667 ns) on 4 vCPUs, the
    // k-th thread starting k ms in: about 4.5 ms of work each if shared.
    let v = staggered(4, 1600, 1000, 6000);
    let expected = v.program.expected_counts();
    assert_eq!(expected["compute"], 1600);
    let r = run(v, 4);
    assert_eq!(r.counters.ops, expected, "totals equal the pool");
    let cpu: Vec<u64> = r.timing.threads.iter().map(|t| t.cpu_ns).collect();
    let end: Vec<u64> = r.timing.threads.iter().map(|t| t.wall_ns).collect();
    eprintln!("cpu {cpu:?}\nend {end:?}");
    let (cpu_lo, cpu_hi) = (*cpu.iter().min().unwrap(), *cpu.iter().max().unwrap());
    let (end_lo, end_hi) = (*end.iter().min().unwrap(), *end.iter().max().unwrap());
    // The last thread starts 3 ms after the first, and still works ~3 ms.
    assert!(cpu_lo > 2_000_000, "late threads still work: {cpu:?}");
    // The first takes ~3 ms more than the last (fixed quotas: equal CPU).
    assert!(
        cpu_hi - cpu_lo > 2_000_000,
        "early threads take more: {cpu:?}"
    );
    // Tolerance: everyone ends within a tenth of the stagger (a unit is
    // 10 µs), where fixed quotas would spread the ends over 3 ms.
    assert!(end_hi - end_lo < 100_000, "threads end together: {end:?}");
}

#[test]
fn the_bare_metal_reference_and_oversubscribed_vcpus_drain_exactly() {
    // 6 threads on 2 vCPUs on 2 pCPUs: threads are preempted mid-drain.
    let mut v = staggered(6, 301, 100, 6000);
    v.vcpus = 2;
    let expected = v.program.expected_counts();
    let r = run(v.clone(), 2);
    assert_eq!(r.counters.ops, expected);
    let mut bare = Scenario::new(Platform::builtin("kvm2015").unwrap(), 2, vec![v]);
    bare.virtualized = false;
    let r = simulate(&bare).expect("simulates").remove(0);
    assert_eq!(r.counters.ops, expected);
}
