//! `smplab run --executor linux -- pigz -p 2 ...` end to end: a real program
//! in a Linux guest on smplab-vmm (and the same on QEMU when it is
//! installed), beside the same program natively. Linux guests need
//! hardware-style KVM: CI runs this inside the nested AMD-V host
//! (tools/nested-host, docs/nested-host.md), with Debian's kernel
//! (target/nested-host/vmlinuz, or $SMPLAB_LINUX_KERNEL) and pigz copied in.
//! On a PVM host it says why it does not run; elsewhere without KVM it
//! skips, and fails instead when SMPLAB_REQUIRE_KVM=1.

use smplab_record::config::LINUX_KERNEL_ENV;
use smplab_record::{Executor, RunRecord};
use std::path::{Path, PathBuf};
use std::process::Command;

fn required() -> bool {
    std::env::var("SMPLAB_REQUIRE_KVM").as_deref() == Ok("1")
}

/// Why a Linux guest cannot boot here, if it cannot.
fn no_linux_guests() -> Option<String> {
    if Path::new("/sys/module/kvm_pvm").exists() {
        // PVM cannot boot Linux guests: not a missing resource, the platform.
        return Some("PVM".into());
    }
    smplab_experiment::availability::kvm_unavailable()
}

fn kernel() -> Option<PathBuf> {
    std::env::var_os(LINUX_KERNEL_ENV)
        .map(PathBuf::from)
        .or_else(|| {
            // The workspace root by name, not `..`: inside the nested host
            // only the files copied in exist, not crates/cli itself.
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2)?;
            let p = root.join("target/nested-host/vmlinuz");
            p.exists().then_some(p)
        })
}

fn run(executor: &str, kernel: &Path, input: &Path) -> RunRecord {
    let input = input.display().to_string();
    let mut args = vec!["run", "--executor", executor, "--json", "--timeout", "600"];
    if executor != "native" {
        args.extend([
            "--kernel",
            kernel.to_str().expect("a UTF-8 path"),
            "--vcpus",
            "2",
        ]);
        args.extend(["--include", &input]);
    }
    args.extend(["--", "pigz", "-p", "2", "-k", "-f", &input]);
    let o = Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(&args)
        .output()
        .expect("smplab runs");
    assert_eq!(
        o.status.code(),
        Some(0),
        "smplab {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    RunRecord::from_json(String::from_utf8_lossy(&o.stdout).trim()).expect("one record")
}

#[test]
fn pigz_runs_in_a_linux_guest_on_smplab_vmm() {
    if let Some(why) = no_linux_guests() {
        assert!(
            !required() || why == "PVM",
            "SMPLAB_REQUIRE_KVM=1 but KVM is unusable: {why}"
        );
        eprintln!(
            "note: Linux guests cannot boot here ({why}); test not run (docs/nested-host.md)"
        );
        return;
    }
    let Some(kernel) = kernel() else {
        assert!(
            !required(),
            "SMPLAB_REQUIRE_KVM=1 but no kernel: set {LINUX_KERNEL_ENV}"
        );
        eprintln!("note: no Linux kernel ({LINUX_KERNEL_ENV} unset); test not run");
        return;
    };
    if !Path::new("/usr/bin/pigz").exists() {
        assert!(
            !required(),
            "SMPLAB_REQUIRE_KVM=1 but pigz is not installed"
        );
        eprintln!("note: pigz is not installed; test not run");
        return;
    }
    let dir = std::env::temp_dir().join(format!("smplab-linux-guest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let input = dir.join("input.txt");
    let text: String = (0..20_000)
        .map(|i| format!("line {i} of the input\n"))
        .collect();
    std::fs::write(&input, text).expect("input");

    let native = run("native", &kernel, &input);
    let linux = run("linux", &kernel, &input);
    let mut records = vec![(native, Executor::Native), (linux, Executor::Linux)];
    if smplab_experiment::availability::on_path("qemu-system-x86_64") {
        records.push((run("linux-qemu", &kernel, &input), Executor::LinuxQemu));
    } else {
        eprintln!("note: QEMU is not installed; linux-qemu not run");
    }
    for (r, executor) in &records {
        assert_eq!(r.executor, *executor);
        assert_eq!(r.workload.name, "pigz");
        let l = r.linux.as_ref().expect("the linux section");
        assert!(l.exit.success(), "{executor}: {l:?}");
        assert_eq!(l.argv[..3], ["pigz", "-p", "2"]);
        assert!(l.wall_ns > 0 && r.timing.wall_ns == l.wall_ns);
        if *executor != Executor::Native {
            assert_eq!(l.cpus_online, Some(2), "{executor}: both vCPUs online");
            assert!(l.boot_to_init_ns.is_some(), "{executor}: boot time");
            let slowdown = r.timing.wall_ns as f64 / records[0].0.timing.wall_ns as f64 - 1.0;
            eprintln!(
                "{executor}: pigz wall {:.3} s ({slowdown:+.2} against native), boot to init {:.2} s",
                l.wall_ns as f64 / 1e9,
                l.boot_to_init_ns.unwrap_or(0) as f64 / 1e9
            );
        }
    }
    // smplab-vmm's own statistics are in the record.
    assert!(records[1].0.vmm.is_some(), "linux: the vmm section");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
