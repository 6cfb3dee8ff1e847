//! A small C program using every primitive: traced, summarised, modelled,
//! and the model run natively with the same counts. Also: exit status
//! pass-through and a trace made by hand.

mod common;

use common::*;
use smplab_trace::analyze::ObjKind;
use smplab_trace::format;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Compile a test program from tests/c with gcc (present wherever smplab
/// builds: build.rs needs it too).
pub fn compile(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/all_kinds.c");
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-O1", "-pthread"])
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run gcc");
    assert!(st.success(), "gcc failed");
    out
}

#[test]
fn every_kind_is_traced_modelled_and_counted() {
    let dir = scratch("kinds");
    let exe = compile(&dir, "all_kinds", &[]);
    let out = dir.join("k.trace");
    let t = trace_and_model(&[exe.to_str().unwrap(), "100"], &out, Some(3));
    assert_eq!(t.trace.threads.len(), 4);
    let k = |kind| t.analysis.kinds.get(&kind).cloned().unwrap_or_default();
    // Exact facts of the program: 3 workers x 100 rounds.
    assert_eq!(k(ObjKind::Spin).acquisitions, 300);
    assert_eq!(k(ObjKind::Barrier).waits, 30);
    assert_eq!(k(ObjKind::Barrier).wakeups, 10);
    assert_eq!(k(ObjKind::Sem).waits, 300);
    assert_eq!(k(ObjKind::Sem).wakeups, 300);
    // rdlock per worker round + wrlock every 50 main rounds.
    assert_eq!(k(ObjKind::RwLock).acquisitions, 300 + 6);
    assert!(k(ObjKind::Cond).calls > 300);
    assert_eq!(t.model.tokens.dropped_lock_ops, 0);
    let rec = run_native(&t.program);
    check_counts(&t, &rec);
    // Loops were found (the wake-up targets vary with timing, so much of
    // the sequence does not repeat exactly; model.rs tests exact repeats).
    assert!(
        t.model.compressed_ops < t.model.flat_ops,
        "{} ops from {}",
        t.model.compressed_ops,
        t.model.flat_ops
    );
    // The summary and the page name what they show.
    let s = smplab_trace::show::summary(&t.trace, &t.analysis);
    assert!(
        s.contains("semaphore") && s.contains("pool1") && s.contains("complete"),
        "{s}"
    );
    let html = smplab_trace::show::html(&t.trace, &t.analysis);
    assert!(html.contains("<svg") && html.contains("t3 pool1") && html.ends_with("</html>\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exit_status_passes_through() {
    let dir = scratch("status");
    let exe = compile(&dir, "all_kinds", &[]);
    let out = dir.join("s.trace");
    let argv = vec![exe.display().to_string(), "5".into(), "3".into()];
    let t = smplab_trace::run::trace_program(&argv, &out, None).unwrap();
    assert_eq!(t.ending, format::Ending::Exited(3));
    assert_eq!(t.exit_status(), 3);
    assert!(t.complete);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_hand_made_trace_round_trips() {
    use format::{Event, Kind};
    let ev = |t, kind, obj, flags| Event {
        t_ns: t,
        wait_ns: 0,
        cpu_ns: t,
        obj,
        arg: 0,
        kind,
        flags,
        ret: 0,
    };
    let mut bytes = format::header_block(&["x".into()], Some(2), 0, 0);
    bytes.extend(format::events_block(
        0,
        &[
            ev(1, Kind::ThreadStart, 0, 0),
            ev(10, Kind::MutexLock, 0x10, 0),
            ev(20, Kind::MutexUnlock, 0x10, 0),
            ev(
                30,
                Kind::MutexTrylock,
                0x10,
                format::F_FAILED | format::F_CONTENDED,
            ),
            ev(40, Kind::ThreadExit, 0, 0),
        ],
    ));
    bytes.extend(format::lib_end_block(1, 50));
    bytes.extend(format::exit_block(format::Ending::Exited(0), 60, 60));
    let tr = format::parse(Path::new("mem"), &bytes).unwrap();
    assert!(tr.complete());
    assert_eq!(tr.threads_hint, Some(2));
    let a = smplab_trace::analyze::analyze(&tr);
    let m = &a.kinds[&ObjKind::Mutex];
    assert_eq!((m.acquisitions, m.failed, m.calls, m.objects), (1, 1, 3, 1));
}
