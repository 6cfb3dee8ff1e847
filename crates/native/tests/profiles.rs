//! Every built-in profile runs natively at 1, 2 and 4 threads and reports
//! exactly the per-op counts its program says it must.

use smplab_native::{execute, run, NativeOptions};
use smplab_record::{Executor, WorkloadInfo};
use smplab_workload::{builtin, Source};
use std::time::Duration;

/// Small enough for a debug build on two shared cores, large enough that
/// every loop runs several times.
const SCALE: f64 = 0.05;

fn opts() -> NativeOptions {
    NativeOptions {
        pin: None,
        // Generous: a failure here means a deadlock, not a slow machine.
        timeout: Some(Duration::from_secs(120)),
        io_thread_cpus: Vec::new(),
    }
}

#[test]
fn every_builtin_profile_runs_at_1_2_and_4_threads_with_exact_counts() {
    for name in builtin::names() {
        let src = Source::resolve(name).expect("built-in parses");
        for n in [1, 2, 4] {
            let program = src.instantiate(Some(n), SCALE).expect("instantiates");
            let info = WorkloadInfo {
                name: name.into(),
                source: "builtin".into(),
                n,
                threads: program.total_threads(),
                ..Default::default()
            };
            let rec = run(&program, info, &opts()).unwrap_or_else(|e| panic!("{name} n={n}: {e}"));
            assert_eq!(rec.executor, Executor::Native);
            assert!(rec.is_ok());
            assert_eq!(
                rec.counters.ops,
                program.expected_counts(),
                "{name} n={n}: counts differ"
            );
            assert_eq!(rec.timing.threads.len(), program.total_threads() as usize);
            assert_eq!(rec.workload.threads, program.total_threads());
            assert!(rec.timing.wall_ns > 0);
            for t in &rec.timing.threads {
                assert!(
                    t.wall_ns <= rec.timing.wall_ns,
                    "{name}: thread wall within run wall"
                );
            }
        }
    }
}

#[test]
fn end_state_of_every_profile_is_conserved() {
    for name in ["dedup", "fluidanimate", "volrend", "vips", "canneal"] {
        let program = Source::resolve(name)
            .and_then(|s| s.instantiate(Some(2), SCALE))
            .expect("instantiates");
        let ex = execute(&program, &opts()).expect("runs");
        assert_eq!(ex.spin_lock_acquires, ex.spin_lock_releases, "{name}");
        assert_eq!(ex.mutex_acquires, ex.mutex_releases, "{name}");
        assert!(ex.spin_lock_held.iter().all(|h| !h), "{name}");
        assert!(ex.mutex_held.iter().all(|h| !h), "{name}");
        assert_eq!(ex.queue_pushes, ex.queue_pops, "{name}");
        assert_eq!(ex.queue_push_sums, ex.queue_pop_sums, "{name}");
        assert!(ex.queue_left.iter().all(|&l| l == 0), "{name}");
        for (i, b) in program.barriers.iter().enumerate() {
            assert_eq!(
                ex.barrier_arrivals[i],
                ex.barrier_generations[i] * u64::from(b.parties),
                "{name}: barrier {} generations all complete",
                b.name
            );
        }
    }
}

#[test]
fn record_carries_the_pin_list_and_serializes() {
    let program = Source::resolve("blackscholes")
        .and_then(|s| s.instantiate(Some(2), SCALE))
        .expect("instantiates");
    // The first CPU this process may use (not necessarily 0 under taskset).
    let cpu = smplab_native::sys::allowed_cpus().expect("affinity")[0];
    let o = NativeOptions {
        pin: Some(vec![cpu]),
        ..opts()
    };
    let rec = run(&program, WorkloadInfo::default(), &o).expect("runs pinned");
    assert_eq!(rec.config.get("pin"), Some(&serde_json::json!([cpu])));
    let back = smplab_record::RunRecord::from_json(&rec.to_json_pretty()).expect("round trip");
    assert_eq!(back.counters, rec.counters);
}

#[test]
fn pinned_threads_run_where_they_were_pinned() {
    let program = Source::resolve("ocean_ncp")
        .and_then(|s| s.instantiate(Some(3), SCALE))
        .expect("instantiates");
    let allowed = smplab_native::sys::allowed_cpus().expect("affinity");
    let pin: Vec<usize> = allowed.iter().copied().take(2).collect();
    let ex = execute(
        &program,
        &NativeOptions {
            pin: Some(pin.clone()),
            ..opts()
        },
    )
    .expect("runs pinned");
    for (i, t) in ex.threads.iter().enumerate() {
        let want = pin[i % pin.len()];
        assert_eq!(t.cpu, Some(want));
        assert_eq!(t.last_cpu, Some(want), "thread {i} ran off its CPU");
    }
}
