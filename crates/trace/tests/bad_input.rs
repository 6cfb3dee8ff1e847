//! Bad input: a static binary, a program that is not there, one that crashes
//! or is killed mid-trace, corrupt trace files. Clear errors, distinct exit
//! statuses, and the trace so far kept and marked incomplete.

mod common;

use common::scratch;
use smplab_record::exit;
use smplab_trace::{format, run, TraceError};
use std::path::Path;
use std::process::Command;

fn compile(dir: &Path, extra: &[&str]) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/all_kinds.c");
    let out = dir.join(if extra.is_empty() {
        "prog"
    } else {
        "prog-static"
    });
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
fn a_static_binary_is_refused() {
    let dir = scratch("static");
    let exe = compile(&dir, &["-static"]);
    let e = run::trace_program(&[exe.display().to_string()], &dir.join("t"), None).unwrap_err();
    assert!(matches!(e, TraceError::StaticBinary { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::NOT_TRACEABLE);
    assert!(e.to_string().contains("static binary"), "{e}");
    assert!(!dir.join("t").exists(), "no trace for a refused program");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_missing_program_is_refused() {
    let dir = scratch("missing");
    for name in ["no-such-program-smplab", "/no/such/path/prog"] {
        let e = run::trace_program(&[name.into()], &dir.join("t"), None).unwrap_err();
        assert!(matches!(e, TraceError::NotFound { .. }), "{e}");
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert!(e.to_string().contains(name));
    }
    // Not executable, not ELF.
    let text = dir.join("text");
    std::fs::write(&text, "hello").unwrap();
    let e = run::trace_program(&[text.display().to_string()], &dir.join("t"), None).unwrap_err();
    assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_keeps_the_trace_marked_incomplete() {
    let dir = scratch("crash");
    let exe = compile(&dir, &[]);
    let out = dir.join("crash.trace");
    // mode 1: main dereferences NULL after joining the workers.
    let argv = vec![exe.display().to_string(), "50".into(), "1".into()];
    let t = run::trace_program(&argv, &out, None).unwrap();
    assert_eq!(t.ending, format::Ending::Signaled(libc::SIGSEGV));
    assert_eq!(t.exit_status(), exit::SIGNAL_BASE + libc::SIGSEGV);
    assert!(!t.complete);
    let tr = format::read(&out).unwrap();
    assert!(!tr.complete());
    // The fatal-signal flush kept every thread's events up to the crash.
    let a = smplab_trace::analyze::analyze(&tr);
    use smplab_trace::analyze::ObjKind;
    assert_eq!(
        a.kinds[&ObjKind::Spin].acquisitions,
        150,
        "the workers' events (flushed at their exit) are in the trace"
    );
    assert_eq!(
        a.kinds[&ObjKind::Sem].waits,
        150,
        "main's events (flushed by the SIGSEGV handler) are in the trace"
    );
    // An incomplete trace still gives a model that validates.
    smplab_trace::model::build(
        &tr,
        &a,
        &smplab_trace::model::ModelOptions {
            name: "crash".into(),
            iters_per_ns: Some(1.0),
        },
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_program_keeps_what_was_flushed() {
    let dir = scratch("kill");
    let exe = compile(&dir, &[]);
    let out = dir.join("kill.trace");
    // mode 2: SIGKILL itself halfway (no handler can run).
    let argv = vec![exe.display().to_string(), "2000".into(), "2".into()];
    let t = run::trace_program(&argv, &out, None).unwrap();
    assert_eq!(t.ending, format::Ending::Signaled(libc::SIGKILL));
    assert!(!t.complete);
    assert!(
        t.events >= 1024,
        "full buffers were flushed: {} events",
        t.events
    );
    let tr = format::read(&out).unwrap();
    assert!(!tr.complete());
    let a = smplab_trace::analyze::analyze(&tr);
    smplab_trace::model::build(
        &tr,
        &a,
        &smplab_trace::model::ModelOptions {
            name: "killed".into(),
            iters_per_ns: Some(1.0),
        },
    )
    .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_traces_are_refused_with_the_offset() {
    let dir = scratch("corrupt");
    let good = {
        let mut b = format::header_block(&["x".into()], None, 0, 0);
        b.extend(format::lib_end_block(1, 5));
        b
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", vec![], "empty"),
        (
            "garbage",
            b"this is not a trace at all, no".to_vec(),
            "not a smplab trace",
        ),
        (
            "truncated",
            good[..good.len() - 3].to_vec(),
            "file ends first",
        ),
        (
            "unknown block",
            {
                let mut b = good.clone();
                b.extend([9, 0, 0, 0, 0, 0, 0, 0]);
                b
            },
            "unknown block type 9",
        ),
        (
            "bad events",
            {
                let mut b = good.clone();
                b.extend([2, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0]);
                b
            },
            "events block of 5 events",
        ),
    ];
    for (what, bytes, msg) in cases {
        let p = dir.join(what.replace(' ', "_"));
        std::fs::write(&p, bytes).unwrap();
        let e = format::read(&p).unwrap_err();
        assert!(matches!(e, TraceError::Corrupt { .. }), "{what}: {e}");
        assert_eq!(e.exit_status(), exit::BAD_TRACE, "{what}");
        assert!(e.to_string().contains(msg), "{what}: {e}");
        assert!(e.to_string().contains(p.to_str().unwrap()), "{what}: {e}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
