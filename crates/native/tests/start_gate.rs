//! The start gate: with a CPU for every thread, the threads spin at the gate
//! and it opens only once each has been seen running (three 200 µs samples,
//! so at least 0.6 ms after the last thread was ready); with more threads
//! than CPUs they block and it opens at once. Either way every thread runs
//! its work exactly once.

use smplab_native::{execute, NativeOptions};
use smplab_record::window::SettleOutcome;
use smplab_workload::{Program, Source};
use std::time::Duration;

fn compute(threads: u32) -> Program {
    let text = r#"
name = "gate"
[[groups]]
name = "w"
threads = "n"
ops = [ { compute = 100000 } ]
"#;
    Source::from_text("gate.toml", text)
        .and_then(|s| s.instantiate(Some(threads), 1.0))
        .expect("valid workload")
}

fn opts() -> NativeOptions {
    NativeOptions {
        timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    }
}

fn cpus() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
}

#[test]
fn threads_that_fit_the_cpus_settle_before_the_gate_opens() {
    let n = cpus().min(4);
    let p = compute(n);
    let ex = execute(&p, &opts()).expect("runs");
    assert_eq!(ex.counts.to_map(), p.expected_counts());
    let w = ex.window;
    let gap = w.start_ns - w.threads_ready_ns;
    assert!(
        gap >= 600_000,
        "{n} threads on {} CPUs: the gate opened {gap} ns after they were ready, before three samples",
        cpus()
    );
    assert!(w.end_ns > w.start_ns);
    let s = w.settle.expect("settle recorded");
    assert_ne!(s.outcome, SettleOutcome::Skipped, "{s:?}");
    assert_eq!(s.ns, gap);
}

#[test]
fn more_threads_than_cpus_block_at_the_gate_and_all_run() {
    let n = cpus() + 2;
    let p = compute(n);
    let ex = execute(&p, &opts()).expect("runs");
    assert_eq!(ex.counts.to_map(), p.expected_counts());
    assert_eq!(ex.threads.len(), n as usize);
    let s = ex.window.settle.expect("settle recorded");
    assert_eq!(s.outcome, SettleOutcome::Skipped, "{s:?}");
}

#[test]
fn threads_pinned_to_fewer_cpus_than_threads_block_at_the_gate() {
    // Two threads on one CPU can never run at once: settling would only
    // burn the 50 ms limit and steal the CPU from the one still setting up.
    let p = compute(2);
    let o = NativeOptions {
        pin: Some(vec![0]),
        ..opts()
    };
    let ex = execute(&p, &o).expect("runs");
    assert_eq!(ex.counts.to_map(), p.expected_counts());
    let s = ex.window.settle.expect("settle recorded");
    assert_eq!(s.outcome, SettleOutcome::Skipped, "{s:?}");
}
