//! Without KVM (simulated by pointing smplab-vmm's SMPLAB_KVM_DEVICE at a
//! missing device): diagnose and calibrate on the VM say why and exit 3; the
//! demo runs what it can (native, simulator) and says what it skipped.

use smplab_cli::lab::{CalibrateArgs, DemoArgs, DiagnoseArgs};
use smplab_record::exit;

fn no_kvm() -> std::path::PathBuf {
    // Every test in this binary sets the same value, so parallel tests agree.
    std::env::set_var("SMPLAB_KVM_DEVICE", "/nonexistent/kvm");
    let d = std::env::temp_dir().join(format!(
        "smplab-lab-nokvm-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

#[test]
fn diagnose_and_calibrate_on_the_vm_exit_with_kvm_unavailable() {
    let dir = no_kvm();
    let code = smplab_cli::lab::diagnose(&DiagnoseArgs {
        workload: "dedup".into(),
        executor: smplab_record::Executor::Vm,
        vcpus: None,
        vms: 1,
        scale: 0.02,
        reps: 1,
        platform: smplab_record::config::DEFAULT_PLATFORM.into(),
        timeout: smplab_record::config::Timeout::from_secs(30).expect("30 s is positive"),
        store: Some(dir.join("d.jsonl")),
        quiet: true,
        steal_threshold: Default::default(),
    });
    assert_eq!(code, exit::KVM_UNAVAILABLE);
    let code = smplab_cli::lab::calibrate(&CalibrateArgs {
        output: dir.join("c.toml"),
        reps: 1,
        scale: 0.02,
        store: dir.join("c.jsonl"),
        quiet: true,
        compare: None,
    });
    assert_eq!(code, exit::KVM_UNAVAILABLE);
}

#[test]
fn simulator_diagnosis_needs_no_kvm() {
    let dir = no_kvm();
    let code = smplab_cli::lab::diagnose(&DiagnoseArgs {
        workload: "spinlock".into(),
        executor: smplab_record::Executor::Sim,
        vcpus: Some(4),
        vms: 2,
        scale: 0.02,
        reps: 1,
        platform: "kvm2015".into(),
        timeout: smplab_record::config::Timeout::from_secs(30).expect("30 s is positive"),
        store: Some(dir.join("sim.jsonl")),
        quiet: true,
        steal_threshold: Default::default(),
    });
    assert_eq!(code, exit::OK);
    assert!(dir.join("report/index.html").is_file());
}

#[test]
fn demo_without_kvm_runs_native_and_simulator() {
    let dir = no_kvm();
    let out = dir.join("demo");
    let code = smplab_cli::lab::demo(&DemoArgs {
        output: out.clone(),
        reps: 1,
        scale: 0.02,
        fresh: true,
        quiet: true,
        steal_threshold: Default::default(),
    });
    assert_eq!(code, exit::OK);
    let html = std::fs::read_to_string(out.join("report/index.html")).expect("report");
    assert!(
        html.contains("Skipped smplab-vmm runs and the calibration"),
        "says what it skipped"
    );
    assert!(html.contains("/nonexistent/kvm"), "and why");
    assert!(
        html.contains("id=\"diag-dedup-sim\""),
        "the simulated diagnosis"
    );
    assert!(html.contains("<section id=\"findings\">"));
}
