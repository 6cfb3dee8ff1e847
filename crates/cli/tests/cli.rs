//! The `smplab` binary as a user meets it: exit statuses, one-line located
//! errors, JSON that parses back into a record.

use smplab_record::{exit, RunRecord};
use std::process::{Command, Output};

fn smplab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(args)
        .output()
        .expect("run smplab")
}

fn status(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("smplab-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn malformed_file_gives_status_2_and_one_located_line() {
    let path = temp_file("bad.toml", "name = \"x\"\n[[groups]\n");
    let o = smplab(&["check", path.to_str().unwrap()]);
    assert_eq!(status(&o), exit::BAD_INPUT);
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("{}:2:", path.display())), "{err}");
}

#[test]
fn invalid_workload_is_refused_by_run_too() {
    let path = temp_file(
        "undef.toml",
        "name = \"x\"\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { barrier = \"nope\" } ]\n",
    );
    let o = smplab(&["run", "--workload", path.to_str().unwrap()]);
    assert_eq!(status(&o), exit::BAD_INPUT);
    assert!(
        stderr(&o).contains(":5:21: undefined barrier `nope`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unknown_workload_and_bad_pin_are_bad_input() {
    assert_eq!(
        status(&smplab(&["run", "--workload", "nosuch"])),
        exit::BAD_INPUT
    );
    let o = smplab(&["run", "--workload", "spinlock", "--pin", "0,x"]);
    assert_eq!(status(&o), exit::BAD_INPUT);
    // Well-formed but the host lacks the CPU (QEMU's forked child used to
    // panic on CPUs >= 1024): what the host cannot provide.
    for executor in ["native", "qemu"] {
        let o = smplab(&[
            "run",
            "--executor",
            executor,
            "--workload",
            "spinlock",
            "--pin",
            "0,9999",
        ]);
        assert_eq!(status(&o), exit::RESOURCE_LIMIT, "{executor}");
        assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
    }
    let o = smplab(&["run", "--workload", "spinlock", "--sync", "global"]);
    assert_eq!(status(&o), exit::BAD_INPUT);
    assert!(stderr(&o).contains("does not apply"), "{}", stderr(&o));
    assert_eq!(
        status(&smplab(&[
            "run",
            "--workload",
            "spinlock",
            "--threads",
            "0"
        ])),
        exit::BAD_INPUT
    );
    assert_eq!(status(&smplab(&["run", "--bogus-flag"])), exit::BAD_INPUT);
}

#[test]
fn vmm_errors_go_through_the_one_error_printer() {
    let o = smplab(&["vmm", "--kernel", "/nonexistent/k.elf"]);
    // Without KVM the first failure is KVM_UNAVAILABLE; with it, the file
    // that is not there: bad input (BAD_KERNEL is an image that cannot boot).
    assert!(
        [exit::BAD_INPUT, exit::KVM_UNAVAILABLE].contains(&status(&o)),
        "{}",
        status(&o)
    );
    let err = stderr(&o);
    assert!(!err.is_empty());
    assert!(
        err.lines().all(|l| l.starts_with("smplab: ")),
        "every line from the one printer: {err}"
    );
}

#[test]
fn run_native_json_is_a_record_with_the_expected_counts() {
    let o = smplab(&[
        "run",
        "--executor",
        "native",
        "--workload",
        "dedup",
        "--threads",
        "2",
        "--scale",
        "0.05",
        "--json",
    ]);
    assert_eq!(status(&o), exit::OK, "{}", stderr(&o));
    // JSON lines: one record, one line.
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 1);
    let record = RunRecord::from_json(&String::from_utf8_lossy(&o.stdout)).expect("record");
    let program = smplab_workload::Source::resolve("dedup")
        .unwrap()
        .instantiate(Some(2), 0.05)
        .unwrap();
    assert_eq!(record.counters.ops, program.expected_counts());
    assert_eq!(record.workload.threads, 8);
    assert!(record.timing.wall_ns > 0);
}

#[test]
fn workloads_list_and_show() {
    let o = smplab(&["workloads", "--json"]);
    assert_eq!(status(&o), exit::OK);
    // JSON lines: one object per workload.
    let text = String::from_utf8_lossy(&o.stdout);
    let list: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(list.len(), smplab_workload::builtin::names().count());
    assert!(list.iter().all(|w| w["name"].is_string()));
    let o = smplab(&["workloads", "show", "streamcluster"]);
    assert_eq!(status(&o), exit::OK);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("spin_limit = 35000"));
    // What `show` prints is a valid workload file.
    let path = temp_file("sc.toml", &text);
    assert_eq!(
        status(&smplab(&[
            "check",
            path.to_str().unwrap(),
            "--threads",
            "3"
        ])),
        exit::OK
    );
}

#[test]
fn doctor_json_reports_kvm_and_cores() {
    let o = smplab(&["doctor", "--json"]);
    assert_eq!(status(&o), exit::OK);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["host"]["cores"].as_u64().unwrap() >= 1);
    assert!(v["host"]["kvm"]["backing"].is_string());
    assert!(v["executors"].as_array().unwrap().len() >= 4);
}

#[test]
fn more_threads_than_the_host_can_start_is_status_5_not_an_abort() {
    let o = smplab(&["run", "--workload", "dedup", "--threads", "100000"]);
    assert_eq!(status(&o), exit::RESOURCE_LIMIT, "{}", stderr(&o));
    assert!(stderr(&o).contains("lower --threads"), "{}", stderr(&o));
}

#[test]
fn io_workloads_run_natively_and_in_the_sim_with_affinity_flags() {
    let o = smplab(&[
        "run",
        "--executor",
        "sim",
        "--workload",
        "oltp",
        "--threads",
        "2",
        "--scale",
        "0.1",
        "--vcpus",
        "2",
        "--irq-affinity",
        "balanced",
        "--io-thread-cpus",
        "1",
        "--json",
    ]);
    assert_eq!(status(&o), exit::OK, "{}", stderr(&o));
    let rec = RunRecord::from_json(&String::from_utf8_lossy(&o.stdout)).expect("a record");
    let io = rec.io.expect("io section");
    assert_eq!(io.requests, rec.counters.ops["io"]);
    let run = serde_json::to_value(rec.run.expect("run config")).unwrap();
    assert_eq!(run["irq_affinity"], "balanced");
    assert_eq!(run["io_thread_cpus"], "1");

    // A workload without `io` ops keeps the interrupt routing it was given
    // in its record: a setting never vanishes.
    let o = smplab(&[
        "run",
        "--executor",
        "sim",
        "--workload",
        "dedup",
        "--scale",
        "0.01",
        "--irq-affinity",
        "running",
        "--json",
    ]);
    assert_eq!(status(&o), exit::OK, "{}", stderr(&o));
    let rec = RunRecord::from_json(&String::from_utf8_lossy(&o.stdout)).expect("a record");
    let run = serde_json::to_value(rec.run.expect("run config")).unwrap();
    assert_eq!(run["irq_affinity"], "running");

    // A guest setting on the native executor, a vCPU the VM lacks, and an
    // affinity only the simulator models: each is bad input, never ignored.
    for args in [
        &["--executor", "native", "--irq-affinity", "0"][..],
        &["--executor", "sim", "--vcpus", "2", "--irq-affinity", "5"][..],
        &["--executor", "vm", "--irq-affinity", "running"][..],
    ] {
        let mut all = vec!["run", "--workload", "oltp", "--scale", "0.1"];
        all.extend_from_slice(args);
        let o = smplab(&all);
        assert_eq!(status(&o), exit::BAD_INPUT, "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn threads_that_change_nothing_are_refused_not_ignored() {
    // Thread counts fixed as a traced model writes them: `n` is unused.
    let fixed = temp_file(
        "fixed.toml",
        "name = \"fixed\"\ndescription = \"x\"\n[[groups]]\nname = \"main\"\nthreads = 2\nops = [ { compute = 1000 } ]\n",
    );
    let f = fixed.to_str().unwrap();
    assert_eq!(status(&smplab(&["check", f])), exit::OK);
    let o = smplab(&["check", f, "--threads", "8"]);
    assert_eq!(status(&o), exit::BAD_INPUT, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("would change nothing"),
        "{}",
        stderr(&o)
    );
    let o = smplab(&["run", "--workload", f, "--threads", "8"]);
    assert_eq!(status(&o), exit::BAD_INPUT, "{}", stderr(&o));
    // Every built-in profile takes `n`.
    for name in smplab_workload::builtin::names() {
        let o = smplab(&["check", name, "--threads", "3"]);
        assert_eq!(status(&o), exit::OK, "{name}: {}", stderr(&o));
    }
}

#[test]
fn a_zero_timeout_is_refused_never_rounded() {
    for t in ["0", "0s", "0ms"] {
        let o = smplab(&["run", "--workload", "dedup", "--timeout", t]);
        assert_eq!(status(&o), exit::BAD_INPUT, "--timeout {t}: {}", stderr(&o));
    }
    let o = smplab(&["diagnose", "--workload", "dedup", "--timeout", "0"]);
    assert_eq!(status(&o), exit::BAD_INPUT, "{}", stderr(&o));
}
