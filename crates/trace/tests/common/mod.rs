//! Shared by the tests and the bench: input files, tracing a program into a
//! model, and comparing the model's native run with the trace.
#![allow(dead_code)]

use smplab_record::RunRecord;
use smplab_trace::analyze::{self, Analysis, ObjKind};
use smplab_trace::format::{self, Trace};
use smplab_trace::model::{self, Model, ModelOptions};
use smplab_trace::run;
use smplab_workload::{Program, Source};
use std::path::{Path, PathBuf};

/// A fresh directory in /dev/shm (tmpfs: no disk I/O in the measurements).
pub fn scratch(tag: &str) -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("smplab-trace-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    d
}

/// `bytes` of text-like data (words from a small vocabulary, LCG-chosen):
/// compresses about like prose, deterministic.
pub fn text_file(path: &Path, bytes: usize) {
    const WORDS: &[&str] = &[
        "the",
        "virtual",
        "machine",
        "runs",
        "threads",
        "on",
        "shared",
        "cores",
        "and",
        "a",
        "lock",
        "holder",
        "is",
        "preempted",
        "while",
        "others",
        "spin",
        "waiting",
        "for",
        "it",
        "barrier",
        "queue",
        "compress",
        "block",
        "data",
        "of",
        "in",
        "to",
        "with",
    ];
    let mut out = Vec::with_capacity(bytes + 16);
    let mut x: u64 = 0x9E3779B97F4A7C15;
    while out.len() < bytes {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let w = WORDS[(x >> 33) as usize % WORDS.len()];
        out.extend_from_slice(w.as_bytes());
        out.push(if (x >> 20).is_multiple_of(13) {
            b'\n'
        } else {
            b' '
        });
        if (x >> 40).is_multiple_of(97) {
            // Numbers make it less regular.
            out.extend_from_slice(format!("{} ", x % 100000).as_bytes());
        }
    }
    out.truncate(bytes);
    std::fs::write(path, out).expect("write input");
}

/// Fail (not skip) when a program the test needs is missing: CI installs it.
pub fn need(program: &str) {
    if run::resolve_program(program).is_err() {
        panic!("`{program}` is not installed (apt-get install pigz xz-utils; .ci/run does)");
    }
}

pub struct Traced {
    pub trace: Trace,
    pub analysis: Analysis,
    pub model: Model,
    pub program: Program,
    pub wall_ns: u64,
}

pub fn trace_and_model(argv: &[&str], out: &Path, hint: Option<u32>) -> Traced {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    let t = run::trace_program(&argv, out, hint).expect("trace the program");
    assert!(
        matches!(t.ending, format::Ending::Exited(0)),
        "{argv:?} ended {:?}",
        t.ending
    );
    assert!(t.complete, "trace of {argv:?} incomplete");
    let trace = format::read(out).expect("read the trace back");
    let analysis = analyze::analyze(&trace);
    let model = model::build(
        &trace,
        &analysis,
        &ModelOptions {
            name: "traced".into(),
            iters_per_ns: None,
        },
    )
    .expect("model builds and validates");
    let source = Source::from_text("traced.toml", &model.toml).expect("model parses");
    let program = source.instantiate(None, 1.0).expect("model instantiates");
    Traced {
        trace,
        analysis,
        model,
        program,
        wall_ns: t.wall_ns,
    }
}

pub fn run_native(program: &Program) -> RunRecord {
    let source_info = smplab_record::WorkloadInfo {
        name: program.name.clone(),
        source: "traced".into(),
        n: program.n,
        threads: program.total_threads(),
        params: Default::default(),
    };
    smplab_native::run(
        program,
        source_info,
        &smplab_native::NativeOptions {
            pin: None,
            timeout: Some(std::time::Duration::from_secs(600)),
            ..Default::default()
        },
    )
    .expect("the model runs natively")
}

/// Per-kind counts of the model, read off the program's queue names.
pub fn model_queue_ops(program: &Program, prefix_of: impl Fn(&str) -> bool) -> (u64, u64) {
    use smplab_workload::Op;
    let qs: Vec<bool> = program.queues.iter().map(|q| prefix_of(&q.name)).collect();
    let (mut push, mut pop) = (0, 0);
    // Totals over the run (a drain's body runs once per unit of its pool).
    program.visit_totals(|_, op, times| match op {
        Op::Push(q) if qs[*q as usize] => push += times,
        Op::Pop(q) if qs[*q as usize] => pop += times,
        _ => {}
    });
    (push, pop)
}

fn within_1pct(a: u64, b: u64) -> bool {
    a.abs_diff(b) * 100 <= a.max(b)
}

/// The check: same threads; per kind, the same acquisitions, waits
/// and wake-ups as the trace (exact or within 1%).
pub fn check_counts(t: &Traced, rec: &RunRecord) {
    let a = &t.analysis;
    let kind = |k: ObjKind| a.kinds.get(&k).cloned().unwrap_or_default();
    let op = |name: &str| rec.counters.ops.get(name).copied().unwrap_or(0);
    assert_eq!(rec.timing.threads.len(), t.trace.threads.len(), "threads");
    assert_eq!(
        rec.counters.ops,
        t.program.expected_counts(),
        "run counts = model counts"
    );
    let mutex_acq = kind(ObjKind::Mutex).acquisitions + kind(ObjKind::RwLock).acquisitions;
    assert!(
        within_1pct(mutex_acq, op("mutex_lock")),
        "mutex acquisitions: trace {mutex_acq}, model run {}",
        op("mutex_lock")
    );
    assert_eq!(
        kind(ObjKind::Spin).acquisitions,
        op("spin_lock"),
        "spin acquisitions"
    );
    assert_eq!(kind(ObjKind::Barrier).waits, op("barrier"), "barrier waits");
    let cond = kind(ObjKind::Cond);
    let (cv_push, cv_pop) = model_queue_ops(&t.program, |n| n.starts_with("cv"));
    assert_eq!(cv_push, cv_pop);
    assert_eq!(cond.wakeups, cv_pop, "condition wake-ups");
    assert!(
        a.unmatched_waits * 100 <= cond.waits.max(1),
        "{} of {} condition waits unmatched (> 1%)",
        a.unmatched_waits,
        cond.waits
    );
    assert!(
        within_1pct(cond.waits, cv_pop + a.unmatched_waits + cond.failed),
        "condition waits: trace {}, model {cv_pop} pops",
        cond.waits
    );
    let sem = kind(ObjKind::Sem);
    let (_, sem_pop) = model_queue_ops(&t.program, |n| n.starts_with("sem"));
    assert_eq!(sem.waits, sem_pop, "semaphore waits");
}
