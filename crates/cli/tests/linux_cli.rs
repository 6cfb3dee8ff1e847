//! `smplab run` with a real program, as a user types it: the flags each
//! executor takes, a bad program, a missing kernel, and a native run of a
//! real program end to end (nothing here boots a guest).

use std::process::{Command, Output};

fn smplab(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smplab"));
    c.args(args).env_remove("SMPLAB_LINUX_KERNEL");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("smplab runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_real_program_runs_natively_into_a_record() {
    let o = smplab(
        &[
            "run",
            "--executor",
            "native",
            "--json",
            "--",
            "sh",
            "-c",
            "echo hello; echo err >&2",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let line = String::from_utf8_lossy(&o.stdout);
    let r = smplab_record::RunRecord::from_json(line.trim()).expect("a record");
    assert_eq!(r.executor, smplab_record::Executor::Native);
    assert_eq!(r.workload.name, "sh");
    assert_eq!(
        r.workload.program_argv(),
        Some(vec![
            "sh".into(),
            "-c".into(),
            "echo hello; echo err >&2".into()
        ])
    );
    let l = r.linux.expect("the linux section");
    assert_eq!(l.output_bytes, "hello\nerr\n".len() as u64);
    assert!(l.exit.success());
    assert!(l.wall_ns > 0 && r.timing.wall_ns == l.wall_ns);
    assert!(matches!(
        r.run,
        Some(smplab_record::config::RunConfig::Native(_))
    ));
    // A failing program is a failed run, its output in the summary.
    let o = smplab(
        &[
            "run",
            "--executor",
            "native",
            "--",
            "sh",
            "-c",
            "echo boom; exit 3",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("FAILED") && out.contains("status 3") && out.contains("boom"),
        "{out}"
    );
}

#[test]
fn a_program_that_is_not_there_has_its_own_status() {
    let o = smplab(
        &[
            "run",
            "--executor",
            "native",
            "--",
            "smplab-no-such-program",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    assert!(stderr(&o).contains("no such program"), "{}", stderr(&o));
    for executor in ["linux", "linux-qemu"] {
        // Found before the kernel boots, on any host.
        let o = smplab(
            &[
                "run",
                "--executor",
                executor,
                "--kernel",
                "/etc/hostname",
                "--",
                "smplab-no-such-program",
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(11), "{executor}: {}", stderr(&o));
        assert!(stderr(&o).contains("no such program"), "{}", stderr(&o));
    }
    let o = smplab(
        &[
            "run",
            "--executor",
            "native",
            "--kernel",
            "/etc/hostname",
            "--",
            "sh",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--kernel does not apply to --executor native"));
}

#[test]
fn pvm_says_it_cannot_boot_linux_with_its_own_status() {
    if !std::path::Path::new("/sys/module/kvm_pvm").exists() {
        eprintln!("note: not a PVM host; nothing to check");
        return;
    }
    for executor in ["linux", "linux-qemu"] {
        let o = smplab(
            &[
                "run",
                "--executor",
                executor,
                "--kernel",
                "/etc/hostname",
                "--",
                "sh",
                "-c",
                "true",
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(19), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("this host's KVM (PVM) cannot boot Linux guests; see docs/nested-host.md"),
            "{e}"
        );
    }
}

#[test]
fn a_missing_kernel_names_the_flag_and_the_variable() {
    for executor in ["linux", "linux-qemu"] {
        let o = smplab(
            &["run", "--executor", executor, "--", "sh", "-c", "true"],
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(
            e.contains("--kernel") && e.contains("SMPLAB_LINUX_KERNEL"),
            "{e}"
        );
        let o = smplab(
            &["run", "--executor", executor, "--", "sh"],
            &[("SMPLAB_LINUX_KERNEL", "/nonexistent/vmlinuz")],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("/nonexistent/vmlinuz (from SMPLAB_LINUX_KERNEL)")
                || stderr(&o).contains("/nonexistent/vmlinuz: cannot read"),
            "{}",
            stderr(&o)
        );
    }
}

#[test]
fn flags_per_executor_are_checked_before_anything_runs() {
    let o = smplab(
        &["run", "--executor", "linux", "--idle", "poll", "--", "sh"],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--idle does not apply to --executor linux"),
        "{}",
        stderr(&o)
    );
    let o = smplab(&["run", "--executor", "vm", "--", "sh"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("runs workload models, not real programs"),
        "{}",
        stderr(&o)
    );
    let o = smplab(
        &[
            "run",
            "--executor",
            "linux",
            "--vcpus",
            "65",
            "--kernel",
            "/etc/hostname",
            "--",
            "sh",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("vcpus"), "{}", stderr(&o));
}

#[test]
fn a_native_program_past_the_timeout_is_status_7() {
    let started = std::time::Instant::now();
    let o = smplab(
        &[
            "run",
            "--executor",
            "native",
            "--timeout",
            "2",
            "--",
            "sleep",
            "60",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(stderr(&o).contains("2.0 s timeout"), "{}", stderr(&o));
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}
