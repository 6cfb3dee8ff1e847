//! `smplab vmm` end to end with the vocabulary's flags: a hand-assembled test
//! guest on 2 vCPUs, its console in a file or on stderr, its record as one
//! JSON line.
//! Without a usable /dev/kvm the run skips, but with SMPLAB_REQUIRE_KVM=1
//! (CI) it fails instead.

use smplab_record::exit;
use smplab_vmm::test_guest::GuestProgram;
use std::process::Command;

#[test]
fn vmm_runs_a_guest_with_the_vocabulary_flags() {
    let dir = std::env::temp_dir().join(format!("smplab-cli-vmm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kernel = dir.join("guest.elf");
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 10,
        ap_loops: 10,
        ..GuestProgram::default()
    };
    std::fs::write(&kernel, program.elf()).expect("write guest");
    let console = dir.join("console.txt");
    let path = |p: &std::path::Path| p.to_str().expect("UTF-8 temp path").to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(["vmm", "--kernel", &path(&kernel), "--vcpus", "2"])
        .args(["--sync", "iothread", "--timeout", "60s", "--json"])
        .args(["--console-file", &path(&console)])
        .output()
        .expect("runs smplab");
    let status = o.status.code().unwrap_or(-1);
    if status == exit::KVM_UNAVAILABLE && std::env::var("SMPLAB_REQUIRE_KVM").as_deref() != Ok("1")
    {
        eprintln!(
            "note: skipping KVM test: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        return;
    }
    assert_eq!(status, exit::OK, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(&console).expect("console file"),
        b"smplab test guest\n"
    );
    let stdout = String::from_utf8(o.stdout).expect("UTF-8");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {stdout}");
    let record: serde_json::Value = serde_json::from_str(lines[0]).expect("JSON");
    assert_eq!(record["config"]["vcpus"], 2, "{record}");
    assert_eq!(record["config"]["sync"], "iothread", "{record}");
    // `--console` copies the console to stderr; without it the console is
    // kept from view and the summary says so.
    let run = |console: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_smplab"));
        command.args(["vmm", "--kernel", &path(&kernel), "--vcpus", "2"]);
        if console {
            command.arg("--console");
        }
        let o = command.output().expect("runs smplab");
        assert_eq!(o.status.code(), Some(exit::OK));
        String::from_utf8(o.stderr).expect("UTF-8")
    };
    let shown = run(true);
    assert!(shown.contains("smplab test guest\n"), "{shown}");
    let hidden = run(false);
    assert!(!hidden.contains("smplab test guest"), "{hidden}");
    assert!(hidden.contains("console: 18 bytes"), "{hidden}");
    let _ = std::fs::remove_dir_all(&dir);
}
