//! `drain` ops natively: the threads of a group share a pool's units at run
//! time, every unit is claimed exactly once, and a thread that starts late
//! still gets work while the early ones take more.

use smplab_native::{execute, NativeOptions};
use smplab_workload::{Program, Source};
use std::time::Duration;

/// Threads pass a mutex one by one, each sleeping `stagger_us` while holding
/// it, so the k-th thread to get it starts draining k × `stagger_us` after
/// the start; then they all take `compute` units from one pool.
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

fn opts() -> NativeOptions {
    NativeOptions {
        timeout: Some(Duration::from_secs(120)),
        ..Default::default()
    }
}

#[test]
fn every_unit_is_claimed_once_and_early_threads_take_more() {
    // ~0.1 ms of compute per unit on a 2-3 GHz core (0.14 ms measured with
    // the machine's two cores shared by five runnable threads); the first
    // thread to start has 50 ms alone before the second starts, so it should
    // claim 150-300 more units than the second (fixed quotas: 300 each).
    let p = staggered(2, 600, 50_000, 100_000);
    let ex = execute(&p, &opts()).expect("runs");
    assert_eq!(ex.counts.to_map(), p.expected_counts());
    assert_eq!(p.expected_counts()["compute"], 600, "one compute per unit");
    assert_eq!(ex.pool_claims, vec![600]);
    assert_eq!(ex.pool_left, vec![0]);
    let mut claims: Vec<u64> = ex.threads.iter().map(|t| t.pool_claims[0]).collect();
    for t in &ex.threads {
        assert_eq!(
            t.counts.0[0], t.pool_claims[0],
            "each thread ran one compute per claimed unit"
        );
    }
    claims.sort_unstable();
    eprintln!("claims per thread: {claims:?}");
    assert!(claims[0] > 0, "the late thread still got work: {claims:?}");
    // Tolerance: a tenth of the pool, under half the gap expected even when
    // the early thread gets half a core during its head start; equal quotas
    // (gap 0) never pass.
    assert!(
        claims[1] - claims[0] >= 60,
        "the early thread took more: {claims:?}"
    );
}

#[test]
fn more_threads_than_units_and_an_empty_pool() {
    for units in [0, 3] {
        let p = staggered(6, units, 0, 10);
        let ex = execute(&p, &opts()).expect("runs");
        assert_eq!(ex.counts.to_map(), p.expected_counts(), "{units} units");
        assert_eq!(ex.pool_claims, vec![units]);
        assert_eq!(ex.pool_left, vec![0], "{units} units");
    }
}
