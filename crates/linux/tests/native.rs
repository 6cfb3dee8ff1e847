//! The init in its native mode: the same fork/exec, drain and timing as in a
//! guest, on the host.

use smplab_linux::{run_native, LinuxError, Program};
use smplab_record::exit;
use smplab_record::linux::{LinuxHost, ProgramExit};
use std::time::{Duration, Instant};

/// A limit no test program here comes near.
const LIMIT: Duration = Duration::from_secs(120);

#[test]
fn runs_true() {
    let run = run_native(&Program::new(["/bin/true"]), LIMIT).unwrap();
    let s = &run.section;
    assert_eq!(s.host, LinuxHost::Native);
    assert_eq!(s.exit, ProgramExit::Status(0));
    assert_eq!(s.output_bytes, 0);
    assert_eq!(s.output_tail, "");
    assert!(s.wall_ns > 0);
    assert!(s.total_ns.unwrap() >= s.wall_ns);
    assert!(s.cpus_online.unwrap() >= 1);
    assert_eq!(s.boot_to_init_ns, None);
    assert!(run.vmm.is_none());
}

#[test]
fn passes_the_exit_status_and_the_signal() {
    let run = run_native(
        &Program::new(["sh", "-c", "echo out; echo err >&2; exit 3"]),
        LIMIT,
    )
    .unwrap();
    assert_eq!(run.section.exit, ProgramExit::Status(3));
    assert_eq!(run.section.output_tail, "out\nerr\n");
    assert_eq!(run.section.output_bytes, 8);
    assert!(run.section.program_path.ends_with("/sh"));
    assert_eq!(
        run.section.argv,
        ["sh", "-c", "echo out; echo err >&2; exit 3"]
    );
    let killed = run_native(&Program::new(["sh", "-c", "kill -9 $$"]), LIMIT).unwrap();
    assert_eq!(killed.section.exit, ProgramExit::Signal(9));
}

#[test]
fn counts_a_megabyte_of_output_and_keeps_only_its_tail() {
    // 1 MiB of 'a' then a last line: the tail is the last bytes only.
    let run = run_native(
        &Program::new([
            "sh",
            "-c",
            "head -c 1048576 /dev/zero | tr '\\0' a; echo; echo the-end",
        ]),
        LIMIT,
    )
    .unwrap();
    assert_eq!(run.section.output_bytes, 1_048_576 + 1 + 8);
    let tail = &run.section.output_tail;
    assert!(tail.ends_with("a\nthe-end\n"), "{tail}");
    assert!(tail.len() <= 4096 && tail.len() >= 1024, "{}", tail.len());
}

#[test]
fn the_program_sees_only_its_own_environment() {
    let mut p = Program::new(["sh", "-c", "echo \"$GREETING:$HOME\""]);
    p.env.push(("GREETING".into(), "hi".into()));
    let run = run_native(&p, LIMIT).unwrap();
    assert_eq!(run.section.output_tail, "hi:\n");
}

#[test]
fn a_missing_or_unexecutable_program_is_status_11() {
    let e = run_native(&Program::new(["smplab-no-such-program-xyz"]), LIMIT).unwrap_err();
    assert!(matches!(e, LinuxError::ProgramNotFound { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
    let plain = std::env::temp_dir().join(format!("smplab-linux-plain-{}", std::process::id()));
    std::fs::write(&plain, b"not a program").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = run_native(&Program::new([plain.display().to_string()]), LIMIT).unwrap_err();
    std::fs::remove_file(&plain).unwrap();
    assert!(matches!(e, LinuxError::ProgramNotExecutable { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
    // Executable but not a program the kernel can start: the init reports
    // execve's error.
    let script = std::env::temp_dir().join(format!("smplab-linux-noexec-{}", std::process::id()));
    std::fs::write(&script, b"\x01\x02 not an ELF").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let e = run_native(&Program::new([script.display().to_string()]), LIMIT).unwrap_err();
    std::fs::remove_file(&script).unwrap();
    assert!(matches!(e, LinuxError::ProgramFailedToStart { .. }), "{e}");
    assert!(e.to_string().contains("Exec format error"), "{e}");
    assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
    let e = run_native(&Program::default(), LIMIT).unwrap_err();
    assert_eq!(e.exit_status(), exit::BAD_INPUT);
}

#[test]
fn a_program_past_the_timeout_is_killed_with_the_init_and_is_status_7() {
    let pid_file =
        std::env::temp_dir().join(format!("smplab-linux-sleeper-{}", std::process::id()));
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let started = Instant::now();
    let e = run_native(&Program::new(["sh", "-c", &script]), Duration::from_secs(2)).unwrap_err();
    let took = started.elapsed();
    assert!(matches!(e, LinuxError::NativeTimeout { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::TIMEOUT);
    assert!(e.to_string().contains("2.0 s timeout"), "{e}");
    // It returned at the limit, not when the program would have ended.
    assert!(took < Duration::from_secs(30), "{took:?}");
    // The program the init forked is gone too (killed with its group, then
    // reaped by whoever inherited it).
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    std::fs::remove_file(&pid_file).unwrap();
    let proc_dir = format!("/proc/{}", pid.trim());
    let gone = || {
        std::fs::read_to_string(format!("{proc_dir}/stat"))
            .map_or(true, |stat| stat.contains(") Z "))
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        gone(),
        "the program {} still runs after the timeout",
        pid.trim()
    );
}
