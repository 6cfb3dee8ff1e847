//! `io` ops on the device stand-in: counts, queueing by queue depth, blocking
//! waiters and the record's `io` latency histograms.

use smplab_native::{execute, run, NativeOptions};
use smplab_record::WorkloadInfo;
use smplab_workload::{program::counter_names, Program, Source};
use std::time::Duration;

fn program(text: &str, n: u32) -> Program {
    Source::from_text("io.toml", text)
        .and_then(|s| s.instantiate(Some(n), 1.0))
        .expect("valid workload")
}

fn opts() -> NativeOptions {
    NativeOptions {
        timeout: Some(Duration::from_secs(120)),
        ..Default::default()
    }
}

const DEPTH_ONE: &str = r#"
name = "io-depth-one"
[devices.disk]
queue_depth = 1
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = 10, ops = [
  { compute = 1000 },
  { io = { device = "disk", service_us = 500 } },
] } } ]
"#;

#[test]
fn io_counts_equal_the_static_counts_and_fill_the_io_section() {
    let p = program(DEPTH_ONE, 3);
    let rec = run(&p, WorkloadInfo::default(), &opts()).expect("runs");
    assert_eq!(rec.counters.ops, p.expected_counts());
    assert_eq!(rec.counters.ops[counter_names::IO], 30);
    let io = rec.io.expect("an io section");
    assert_eq!(io.requests, 30);
    assert_eq!(io.wake_latency.count, 30);
    assert_eq!(io.irq_latency.count, 30);
    assert_eq!(io.irqs_per_cpu.iter().sum::<u64>(), 30);
    // Every request spends at least its service time in the device (the
    // histogram keeps 3 significant digits).
    assert!(io.device_latency.min_ns >= 499_000, "{io:?}");
    // Waiters sleep in the kernel rather than spin.
    assert!(rec.counters.blocks >= 1);
}

#[test]
fn queue_depth_one_serializes_requests() {
    // Three threads submit at once to a one-slot device: some request must
    // wait for the other two, so the longest submission → completion time
    // covers at least two service times before its own.
    let p = program(DEPTH_ONE, 3);
    let ex = execute(&p, &opts()).expect("runs");
    let io = ex.io.expect("io section");
    assert!(io.device_latency.max_ns >= 2 * 499_000, "{io:?}");
    // The device never serves two at once: 30 requests of 500 µs take at
    // least 15 ms of device time, all inside the workload's wall time.
    assert!(ex.wall_ns >= 30 * 500_000, "wall {}", ex.wall_ns);
}

#[test]
fn programs_without_io_have_no_io_section() {
    let p = program(
        "name = \"c\"\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { compute = 10 } ]\n",
        1,
    );
    let rec = run(&p, WorkloadInfo::default(), &opts()).expect("runs");
    assert!(rec.io.is_none());
    assert_eq!(rec.counters.ops[counter_names::IO], 0);
}

#[test]
fn oltp_profile_runs_natively_with_pinned_completion_thread() {
    let p = Source::resolve("oltp")
        .unwrap()
        .instantiate(Some(2), 0.1)
        .unwrap();
    let o = NativeOptions {
        io_thread_cpus: vec![0],
        ..opts()
    };
    let rec = run(&p, WorkloadInfo::default(), &o).expect("runs");
    assert_eq!(rec.counters.ops, p.expected_counts());
    let io = rec.io.expect("io section");
    // Pinned to CPU 0: every completion was handled there.
    assert_eq!(io.irqs_per_cpu.iter().sum::<u64>(), io.irqs_per_cpu[0]);
}

#[test]
fn io_thread_on_a_missing_cpu_is_refused() {
    let p = program(DEPTH_ONE, 1);
    let o = NativeOptions {
        io_thread_cpus: vec![100_000],
        ..opts()
    };
    let err = run(&p, WorkloadInfo::default(), &o).unwrap_err();
    assert_eq!(err.exit_status(), smplab_record::exit::BAD_INPUT, "{err}");
}
