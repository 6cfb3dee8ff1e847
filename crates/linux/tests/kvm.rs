//! Linux guests on KVM: the same program on QEMU with KVM and on smplab-vmm.
//! A Linux kernel cannot boot on this development machine's PVM
//! (docs/nested-host.md), so these run in the nested AMD-V host
//! (tools/nested-host/kvm-test-binaries); elsewhere they print a note. With
//! SMPLAB_REQUIRE_KVM=1 an unusable /dev/kvm, a missing kernel or a missing
//! QEMU fail instead. The kernel: `$SMPLAB_LINUX_KERNEL`, else
//! `target/nested-host/vmlinuz` (give it with `--file`).

use smplab_linux::{
    run_on_qemu, run_on_smplab_vmm, LinuxError, LinuxGuestConfig, PanicEnd, Program, QemuAccel,
    DEFAULT_CMDLINE,
};
use smplab_record::exit;
use smplab_record::host::{KvmBacking, KvmFacts};
use smplab_record::linux::{LinuxHost, ProgramExit};
use std::path::PathBuf;
use std::time::Duration;

fn required() -> bool {
    std::env::var("SMPLAB_REQUIRE_KVM").as_deref() == Ok("1")
}

/// The kernel to boot, if Linux guests can run here.
fn linux_guests() -> Option<PathBuf> {
    let kvm = KvmFacts::detect();
    if !kvm.device_usable {
        assert!(!required(), "SMPLAB_REQUIRE_KVM=1 but /dev/kvm is unusable");
        eprintln!("note: skipping: /dev/kvm is unusable");
        return None;
    }
    if kvm.backing == KvmBacking::Pvm {
        eprintln!("note: skipping: a Linux kernel cannot boot on PVM (docs/nested-host.md); these run in the nested AMD-V host");
        return None;
    }
    let kernel = std::env::var_os("SMPLAB_LINUX_KERNEL")
        .map(PathBuf::from)
        .unwrap_or_else(nested_host_kernel);
    if !kernel.is_file() {
        assert!(
            !required(),
            "SMPLAB_REQUIRE_KVM=1 but no Linux kernel at {} (set SMPLAB_LINUX_KERNEL, or pass it to the nested host with --file)",
            kernel.display()
        );
        eprintln!("note: skipping: no Linux kernel at {}", kernel.display());
        return None;
    }
    Some(kernel)
}

/// A dynamically linked program that exists wherever this test does: this
/// test binary, listing its tests.
fn this_binary_listing_its_tests() -> Program {
    let me = std::env::current_exe().expect("the test binary's path");
    Program::new([me.display().to_string(), "--list".to_string()])
}

#[test]
fn qemu_with_kvm_runs_a_dynamic_program_and_reports_kvm_statistics() {
    let Some(kernel) = linux_guests() else {
        return;
    };
    if smplab_linux::libs::resolve_program("qemu-system-x86_64").is_err() {
        assert!(
            !required(),
            "SMPLAB_REQUIRE_KVM=1 but qemu-system-x86_64 is not on PATH"
        );
        eprintln!("note: skipping: no qemu-system-x86_64");
        return;
    }
    let mut cfg = LinuxGuestConfig::new(kernel);
    cfg.qemu.accel = QemuAccel::Kvm;
    cfg.vcpus = 2;
    cfg.timeout = Duration::from_secs(240);
    let run = run_on_qemu(&cfg, &this_binary_listing_its_tests()).unwrap();
    let s = &run.section;
    assert_eq!(s.host, LinuxHost::Qemu);
    assert_eq!(s.exit, ProgramExit::Status(0), "{}", run.console);
    assert!(
        s.output_tail.contains("qemu_with_kvm_runs"),
        "{}",
        s.output_tail
    );
    assert_eq!(s.cpus_online, Some(2));
    assert!(s.boot_to_init_ns.unwrap() > 0);
    for key in ["vcpu0.exits", "vcpu1.exits"] {
        assert!(
            s.qemu_stats.get(key).is_some_and(|&v| v > 0),
            "{key}: {:?}",
            s.qemu_stats
        );
    }
    eprintln!(
        "QEMU microvm, 2 vCPUs: boot to init {:.3} s, program {:.3} s, total {:.3} s",
        s.boot_to_init_ns.unwrap() as f64 / 1e9,
        s.wall_ns as f64 / 1e9,
        s.total_ns.unwrap() as f64 / 1e9
    );
}

#[test]
fn smplab_vmm_runs_a_dynamic_program_and_keeps_its_own_section() {
    let Some(kernel) = linux_guests() else {
        return;
    };
    let mut cfg = LinuxGuestConfig::new(kernel);
    cfg.vcpus = 2;
    cfg.timeout = Duration::from_secs(240);
    // Binary output: the result line's escaped tail is then ~12 KB, which
    // must reach the console whole before the init's exit ends the VM.
    let me = std::env::current_exe().expect("the test binary's path");
    let program = Program::new([
        me.display().to_string(),
        "--exact".into(),
        "helper_prints_binary_output".into(),
        "--include-ignored".into(),
        "--nocapture".into(),
    ]);
    let run = run_on_smplab_vmm(&cfg, &program).unwrap();
    let s = &run.section;
    assert_eq!(s.host, LinuxHost::SmplabVmm);
    assert_eq!(s.exit, ProgramExit::Status(0), "{}", run.console);
    assert!(s.output_bytes > 4096, "{}", s.output_bytes);
    assert!(s.output_tail.contains('\u{fffd}'), "{}", s.output_tail);
    assert!(s.output_tail.contains("1 passed"), "{}", s.output_tail);
    assert_eq!(s.cpus_online, Some(2));
    let vmm = run.vmm.as_ref().expect("smplab-vmm's section");
    let window = vmm
        .window
        .as_ref()
        .expect("the init's ready/go/done window");
    assert!(window.done_ns.unwrap() >= window.go_ns && window.go_ns >= window.ready_ns);
    assert_eq!(vmm.kvm_vcpu_stats.len(), 2);
    let boot = s.boot_to_init_ns.unwrap();
    assert!(boot > 0 && boot < s.total_ns.unwrap());
    eprintln!(
        "smplab-vmm, 2 vCPUs: boot to init {:.3} s, program {:.3} s, total {:.3} s",
        boot as f64 / 1e9,
        s.wall_ns as f64 / 1e9,
        s.total_ns.unwrap() as f64 / 1e9
    );
}

#[test]
fn smplab_vmm_reports_a_panic_too_few_cpus_and_a_timeout() {
    let Some(kernel) = linux_guests() else {
        return;
    };
    let mut cfg = LinuxGuestConfig::new(kernel);
    cfg.vcpus = 2;
    cfg.timeout = Duration::from_secs(240);
    let truth = Program::new(["/bin/true"]);

    let mut one_cpu = cfg.clone();
    one_cpu.cmdline = format!("{DEFAULT_CMDLINE} maxcpus=1");
    let e = run_on_smplab_vmm(&one_cpu, &truth).unwrap_err();
    assert!(
        matches!(
            e,
            LinuxError::VcpusOffline {
                requested: 2,
                online: 1,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.exit_status(), exit::VCPUS_OFFLINE);

    // No root where the kernel looks: it panics. panic=-1 asks for the
    // emergency restart (Linux 6.1 on this hardware-reduced ACPI machine:
    // "EFI", nothing there, then "BIOS": real mode at f000:fff0, where
    // smplab-vmm's reset stub writes the FADT's reset register), which ends
    // the VM well before the timeout, with the console's panic reported.
    // On 2 vCPUs too, where the panicking CPU stops the other first.
    for vcpus in [1, 2] {
        let mut panics = cfg.clone();
        panics.vcpus = vcpus;
        panics.cmdline =
            "console=ttyS0 quiet panic=-1 rdinit=/no-such-init root=/dev/nothing".into();
        let e = run_on_smplab_vmm(&panics, &truth).unwrap_err();
        assert!(
            matches!(
                e,
                LinuxError::GuestPanic {
                    end: PanicEnd::Restarted,
                    ..
                }
            ),
            "{vcpus} vCPUs: {e}"
        );
        assert_eq!(e.exit_status(), exit::GUEST_CRASH);
        assert!(e.to_string().contains("Kernel panic"), "{e}");
    }

    let mut short = cfg.clone();
    short.timeout = Duration::from_millis(300);
    let e = run_on_smplab_vmm(&short, &truth).unwrap_err();
    assert!(matches!(e, LinuxError::Timeout { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::TIMEOUT);
}

/// Not a test: the program `smplab_vmm_runs_a_dynamic_program...` runs in
/// the guest (4 KiB of bytes that are not UTF-8).
#[test]
#[ignore = "a program for the guest, run by smplab_vmm_runs_a_dynamic_program_and_keeps_its_own_section"]
fn helper_prints_binary_output() {
    use std::io::Write;
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| 0x80 | u8::try_from(i % 0x80).unwrap_or(0))
        .collect();
    std::io::stdout().write_all(&bytes).unwrap();
    std::io::stdout().flush().unwrap();
}

/// The nested host's Debian kernel: a plain absolute path (no `..`), so it is
/// found where `nested-host --file target/nested-host/vmlinuz` puts it.
fn nested_host_kernel() -> PathBuf {
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = crate_dir
        .parent()
        .and_then(|p| p.parent())
        .unwrap_or(crate_dir);
    workspace.join("target/nested-host/vmlinuz")
}
