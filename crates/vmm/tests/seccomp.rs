//! The seccomp-bpf filters of smplab-vmm's threads on real KVM: a forbidden
//! system call from each thread kind ends the process with the violation
//! report (naming the thread and the call) and exit status 20; runs with
//! filters on pass and say so in the record; `seccomp = false` (the
//! `--no-seccomp` setting) lets the same forbidden call through.
//!
//! A violation ends the whole process, so each case runs this test binary
//! again as a child (`SMPLAB_SECCOMP_CHILD=<kind>`), which runs the
//! `child_entry` test only. Without /dev/kvm these tests print a note and
//! pass; with SMPLAB_REQUIRE_KVM=1 they fail instead.

mod kvm_check;

use kvm_check::kvm_usable;

use smplab_record::config::HostPolicy;
use smplab_record::exit;
use smplab_vmm::devices::block::BlockConfig;
use smplab_vmm::host::{HostScheduler, HostSlot, Sampling};
use smplab_vmm::seccomp::{probe_after_install, ThreadKind};
use smplab_vmm::test_guest::GuestProgram;
use smplab_vmm::{run_vm, ConsoleSink, Irqchip, KernelImage, SyncMode, VmConfig};
use std::time::Duration;

const CHILD_ENV: &str = "SMPLAB_SECCOMP_CHILD";
const CHILD_FILTERS_OFF_ENV: &str = "SMPLAB_SECCOMP_CHILD_OFF";

/// A 2-vCPU guest whose configuration starts every thread kind: the I/O
/// thread (`iothread`), the LAPIC timer thread (user irqchip), the block
/// device's thread, and (with `host`) the host scheduler's ticker.
fn every_thread_config(host: Option<HostSlot>) -> VmConfig {
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 200,
        ap_loops: 200,
        exit_code: 3,
        ..GuestProgram::default()
    };
    let mut config = VmConfig::new(KernelImage::Bytes(program.elf()));
    config.vcpus = 2;
    config.mem_bytes = 16 << 20;
    config.sync = SyncMode::IoThread;
    config.irqchip = Irqchip::User;
    config.console = ConsoleSink::Capture;
    config.timeout = Some(Duration::from_secs(60));
    config.cmdline = "cpus=2".into();
    config.block = Some(BlockConfig {
        queue_depths: vec![1],
        thread_cpus: Vec::new(),
    });
    config.host = host;
    config
}

fn scheduler() -> HostScheduler {
    let cpu = smplab_vmm::placement::allowed_cpus()[0];
    let policy: HostPolicy = "rr:2ms".parse().expect("policy");
    HostScheduler::new(&policy, &[2], &[cpu], Sampling::default()).expect("scheduler")
}

/// Run every thread kind in one VM under a host scheduler; the record says
/// whether filters were on. Returns the run's exit code.
fn run_every_thread_kind(seccomp: bool) -> u32 {
    let scheduler = scheduler();
    let ticker = scheduler.start().expect("ticker");
    let mut config = every_thread_config(Some(HostSlot {
        scheduler: scheduler.clone(),
        vm: 0,
    }));
    config.seccomp = seccomp;
    let run = run_vm(&config).unwrap_or_else(|e| panic!("seccomp={seccomp}: {e}"));
    scheduler.vm_finished(0);
    let _ = scheduler.finish(Some(ticker));
    assert_eq!(run.section.seccomp, seccomp);
    assert_eq!(run.result, b"ok");
    run.exit_code
}

/// The child's side: probe `SMPLAB_SECCOMP_CHILD`'s kind, then run the VM
/// (and its ticker); with filters on the process never returns from here.
#[test]
fn child_entry() {
    let Ok(kind) = std::env::var(CHILD_ENV) else {
        return; // not a child: nothing to do
    };
    let kind = ThreadKind::parse(&kind).expect("a thread kind");
    let filters_on = std::env::var(CHILD_FILTERS_OFF_ENV).is_err();
    if !filters_on {
        smplab_vmm::seccomp::set_process_default(false);
    }
    probe_after_install(kind);
    let code = run_every_thread_kind(filters_on);
    println!("CHILD-FINISHED exit_code={code}");
}

/// Run `child_entry` in a child process; its status and stderr.
fn child(kind: ThreadKind, filters_on: bool) -> (Option<i32>, String, String) {
    let exe = std::env::current_exe().expect("test binary");
    let mut command = std::process::Command::new(exe);
    command
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, kind.name());
    if !filters_on {
        command.env(CHILD_FILTERS_OFF_ENV, "1");
    }
    let out = command.output().expect("child runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_forbidden_call_from_every_thread_kind_is_caught() {
    if !kvm_usable() {
        return;
    }
    for kind in ThreadKind::ALL {
        let (status, stdout, stderr) = child(kind, true);
        assert_eq!(
            status,
            Some(exit::SECCOMP_VIOLATION),
            "{kind}: status {status:?}\nstdout: {stdout}\nstderr: {stderr}"
        );
        let thread = match kind {
            ThreadKind::Vcpu => "(smplab-vcpu-",
            ThreadKind::Io => "(smplab-io)",
            ThreadKind::Block => "(smplab-blk)",
            ThreadKind::Timer => "(smplab-timer)",
            ThreadKind::Ticker => "(smplab-sched)",
        };
        let expected = format!("smplab: seccomp violation: the {kind} thread {thread}");
        assert!(stderr.contains(&expected), "{kind}: {stderr}");
        assert!(stderr.contains("(getppid)"), "{kind}: {stderr}");
        assert!(!stdout.contains("CHILD-FINISHED"), "{kind}: {stdout}");
    }
}

#[test]
fn without_filters_the_same_call_goes_through() {
    if !kvm_usable() {
        return;
    }
    for kind in [ThreadKind::Vcpu, ThreadKind::Ticker] {
        let (status, stdout, stderr) = child(kind, false);
        assert_eq!(status, Some(0), "{kind}: {stdout}\n{stderr}");
        assert!(stdout.contains("CHILD-FINISHED exit_code=3"), "{stdout}");
    }
}

#[test]
fn every_thread_kind_runs_a_guest_under_its_filter() {
    if !kvm_usable() {
        return;
    }
    assert!(smplab_vmm::seccomp::process_default());
    assert_eq!(run_every_thread_kind(true), 3);
    for sync in SyncMode::ALL {
        for irqchip in [Irqchip::Kernel, Irqchip::User] {
            let mut config = every_thread_config(None);
            config.sync = sync;
            config.irqchip = irqchip;
            let run = run_vm(&config).unwrap_or_else(|e| panic!("{sync} {irqchip:?}: {e}"));
            assert_eq!(run.exit_code, 3, "{sync} {irqchip:?}");
            assert!(run.section.seccomp);
        }
    }
}
