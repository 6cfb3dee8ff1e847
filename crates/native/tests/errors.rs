//! Bad input gives a clear error and the right exit status, never a panic or a
//! hang.

use smplab_native::{execute, run, NativeError, NativeOptions};
use smplab_record::{exit, WorkloadInfo};
use smplab_workload::Source;
use std::time::{Duration, Instant};

fn program(text: &str) -> smplab_workload::Program {
    Source::from_text("test.toml", text)
        .and_then(|s| s.instantiate(Some(2), 1.0))
        .expect("valid workload")
}

const TINY: &str = r#"
name = "tiny"
[[groups]]
name = "w"
threads = "n"
ops = [{ compute = 100 }]
"#;

#[test]
fn pinning_to_a_cpu_outside_the_allowed_set_is_bad_input() {
    let p = program(TINY);
    let allowed = smplab_native::sys::allowed_cpus().expect("affinity");
    let ok = allowed[0];
    // Beyond what an affinity mask can name, absurd, and just past the last
    // CPU this process may use.
    let past_last = allowed.iter().max().copied().unwrap_or(0) + 1;
    for cpu in [
        100_000usize,
        usize::MAX,
        smplab_native::sys::MAX_CPUS + 1,
        past_last,
    ] {
        let err = run(
            &p,
            WorkloadInfo::default(),
            &NativeOptions {
                pin: Some(vec![ok, cpu]),
                ..Default::default()
            },
        )
        .expect_err("CPU does not exist");
        assert!(matches!(err, NativeError::BadCpu { .. }), "{err:?}");
        assert_eq!(err.exit_status(), exit::BAD_INPUT);
        let msg = err.to_string();
        assert!(msg.contains(&format!("CPU {cpu}")), "{msg}");
        assert!(msg.contains("may only run on CPUs"), "{msg}");
    }
}

#[test]
fn empty_pin_list_is_bad_input() {
    let err = execute(
        &program(TINY),
        &NativeOptions {
            pin: Some(vec![]),
            ..Default::default()
        },
    )
    .expect_err("empty list");
    assert!(matches!(err, NativeError::EmptyPin));
    assert_eq!(err.exit_status(), exit::BAD_INPUT);
}

#[test]
fn out_of_range_index_in_a_hand_built_program_is_bad_input() {
    let mut p = program(TINY);
    p.groups[0].ops.push(smplab_workload::Op::Barrier(3));
    let err = execute(&p, &NativeOptions::default()).expect_err("no barrier 3");
    assert_eq!(err.exit_status(), exit::BAD_INPUT);
    assert!(err.to_string().contains("barrier #3"), "{err}");
}

/// Valid by the validator's rules but deadlocks at run time (the gap
/// docs/workload-format.md names): two threads meet at two 2-party barriers in
/// opposite orders, so each waits at a barrier the other never reaches.
const DEADLOCK: &str = r#"
name = "deadlock"
[barriers.b]
parties = 2
wait = "block"
[barriers.c]
parties = 2
wait = "block"
[[groups]]
name = "w"
threads = 1
ops = [{ barrier = "b" }, { barrier = "c" }]
[[groups]]
name = "v"
threads = 1
ops = [{ barrier = "c" }, { barrier = "b" }]
"#;

#[test]
fn a_deadlock_ends_in_a_timeout_error_and_every_thread_stops() {
    let p = program(DEADLOCK);
    for wait in ["block", "spin", "spin-then-block"] {
        let mut p = p.clone();
        let mode = match wait {
            "spin" => smplab_workload::BarrierWait::Spin,
            "block" => smplab_workload::BarrierWait::Block,
            _ => smplab_workload::BarrierWait::SpinThenBlock,
        };
        for b in &mut p.barriers {
            b.wait = mode;
            b.spin_limit = 1000;
        }
        let t0 = Instant::now();
        let err = execute(
            &p,
            &NativeOptions {
                timeout: Some(Duration::from_millis(300)),
                ..Default::default()
            },
        )
        .expect_err("deadlocks");
        // Timeout (threads torn down), not Stuck (threads left behind).
        assert!(matches!(err, NativeError::Timeout(_)), "{wait}: {err:?}");
        assert_eq!(err.exit_status(), exit::TIMEOUT);
        assert!(err.to_string().contains("deadlock"), "{err}");
        // Generous bound: only guards against waiting out the 10 s grace.
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "{wait}: teardown hung"
        );
    }
}

#[test]
fn a_thread_failing_before_the_gate_stops_the_whole_run_cleanly() {
    // One group's private buffer cannot be mapped (1 PiB); the other group's
    // threads are already waiting at the start gate and must be sent home.
    let mut p = program(TINY);
    let mut huge = p.groups[0].clone();
    huge.name = "huge".into();
    huge.threads = 1;
    huge.ops = vec![smplab_workload::Op::Touch {
        buffer: smplab_workload::BufferRef::Private,
        bytes: 1 << 50,
        stride: 4096,
        write: true,
    }];
    p.groups.push(huge);
    let err = execute(&p, &NativeOptions::default()).expect_err("cannot map 1 PiB");
    assert!(matches!(err, NativeError::Memory { .. }), "{err:?}");
    assert_eq!(err.exit_status(), exit::RESOURCE_LIMIT);
    assert!(err.to_string().contains("smplab-huge-0"), "{err}");
}

#[test]
fn an_unmappable_shared_buffer_is_a_resource_error() {
    let mut p = program(TINY);
    p.buffers.push(smplab_workload::program::BufferDef {
        name: "big".into(),
        bytes: 1 << 50,
    });
    let err = execute(&p, &NativeOptions::default()).expect_err("cannot map 1 PiB");
    assert_eq!(err.exit_status(), exit::RESOURCE_LIMIT);
    assert!(err.to_string().contains("shared buffer `big`"), "{err}");
}

#[test]
fn long_compute_sleep_and_yield_ops_are_torn_down_by_a_timeout() {
    for op in [
        "{ compute = 1000000000000 }",
        "{ sleep_us = 100000000 }",
        "{ yield = 1000000000000 }",
    ] {
        let text =
            format!("name = \"long\"\n[[groups]]\nname = \"w\"\nthreads = 1\nops = [{op}]\n");
        let err = execute(
            &program(&text),
            &NativeOptions {
                timeout: Some(Duration::from_millis(200)),
                ..Default::default()
            },
        )
        .expect_err("far too long");
        // Timeout, not Stuck: the thread noticed the abort.
        assert!(matches!(err, NativeError::Timeout(_)), "{op}: {err:?}");
    }
}

#[test]
fn more_threads_than_the_host_can_start_is_refused_before_any_starts() {
    // A thread the host cannot give used to abort the process (status 134,
    // "failed to set up alternative stack guard page"); now it is refused
    // before the first thread starts, naming the limit.
    let limit = smplab_native::thread_limit();
    let n = u32::try_from(limit.threads + 1).expect("a limit below 2^32");
    let p = Source::from_text("test.toml", TINY)
        .and_then(|s| s.instantiate(Some(n), 1.0))
        .expect("valid workload");
    let before = Instant::now();
    let err = run(&p, WorkloadInfo::default(), &NativeOptions::default())
        .expect_err("over the host's limit");
    assert!(
        matches!(err, NativeError::TooManyThreads { threads, .. } if threads == u64::from(n)),
        "{err:?}"
    );
    assert_eq!(err.exit_status(), exit::RESOURCE_LIMIT);
    assert!(err.to_string().contains(&limit.source), "{err}");
    assert!(err.to_string().contains("lower --threads"), "{err}");
    // Refused up front, not after starting thousands of threads.
    assert!(before.elapsed() < Duration::from_secs(30));
}

#[test]
fn the_record_window_opens_after_every_thread_is_ready() {
    let p = program(TINY);
    let r = run(&p, WorkloadInfo::default(), &NativeOptions::default()).expect("runs");
    let w = r.timing.window.expect("native records its window");
    assert_eq!(w.clock, smplab_record::WindowClock::HostMonotonic);
    assert!(w.threads_ready_ns > 0);
    assert!(w.threads_ready_ns <= w.start_ns, "{w:?}");
    assert!(w.start_ns <= w.end_ns, "{w:?}");
    // wall_ns starts at the first thread's start, after the gate opened.
    assert!(
        r.timing.wall_ns <= w.len_ns(),
        "{} vs {w:?}",
        r.timing.wall_ns
    );
}
