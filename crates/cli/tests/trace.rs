//! `smplab trace` as a user meets it: the program's stdout, stderr and exit
//! status pass through; smplab's own failures have their own statuses.

use smplab_record::exit;
use std::process::Command;

fn smplab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(args)
        .output()
        .expect("run smplab")
}

#[test]
fn trace_passes_the_program_through_and_reports_its_own_failures() {
    let dir = std::env::temp_dir().join(format!("smplab-cli-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("t.trace");
    let out_s = out.to_str().unwrap();
    let o = smplab(&[
        "trace",
        "-o",
        out_s,
        "--",
        "sh",
        "-c",
        "echo to-out; echo to-err >&2; exit 4",
    ]);
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "to-out\n");
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("to-err\n"));

    let o = smplab(&["trace", "-o", out_s, "--", "no-such-program-smplab"]);
    assert_eq!(o.status.code(), Some(exit::PROGRAM_NOT_FOUND));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such program"));

    let bad = dir.join("bad.trace");
    std::fs::write(&bad, "not a trace").unwrap();
    let o = smplab(&["trace", "show", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::BAD_TRACE));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a smplab trace"));
    let o = smplab(&["trace", "model", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(exit::BAD_TRACE));

    // A program killed by a signal leaves an incomplete trace: `show` says
    // so, with the partial-result status, not "corrupt".
    let o = smplab(&["trace", "-o", out_s, "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(o.status.code(), Some(exit::SIGNAL_BASE + 9));
    let o = smplab(&["trace", "show", out_s]);
    assert_eq!(
        o.status.code(),
        Some(exit::PARTIAL),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("incomplete trace"));
    let _ = std::fs::remove_dir_all(&dir);
}
