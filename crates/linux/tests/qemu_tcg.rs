//! The whole path on a real Linux kernel without KVM: QEMU's emulator boots
//! the kernel with the built initramfs (slowly, a few seconds), the init
//! runs the program and the runner reads its result; then the guest errors.
//! The kernel: `$SMPLAB_LINUX_KERNEL`, else the nested host's Debian kernel
//! (`target/nested-host/vmlinuz`, docs/nested-host.md).

use smplab_linux::{
    run_on_qemu, LinuxError, LinuxGuestConfig, Program, QemuAccel, QemuMachine, DEFAULT_CMDLINE,
};
use smplab_record::exit;
use smplab_record::linux::{LinuxHost, ProgramExit};
use std::path::PathBuf;
use std::time::Duration;

fn kernel() -> Option<PathBuf> {
    std::env::var_os("SMPLAB_LINUX_KERNEL")
        .map(PathBuf::from)
        .or_else(|| {
            let p = nested_host_kernel();
            p.is_file().then_some(p)
        })
}

#[test]
fn qemu_tcg_boots_the_kernel_runs_the_program_and_reports_guest_errors() {
    let Some(kernel) = kernel() else {
        eprintln!(
            "skipped: no Linux kernel (set SMPLAB_LINUX_KERNEL, or run tools/nested-host/nested-host image)"
        );
        return;
    };
    let mut cfg = LinuxGuestConfig::new(kernel);
    cfg.qemu.accel = QemuAccel::Tcg;
    // q35, not microvm: under TCG on a loaded host microvm's kernel finds no
    // reference clock (no HPET or PM timer, PIT calibration fails) and stalls
    // (docs/linux.md); with KVM, kvm-clock spares it that.
    cfg.qemu.machine = QemuMachine::Q35;
    cfg.vcpus = 2;
    cfg.mem_bytes = 256 << 20;
    cfg.timeout = Duration::from_secs(240);
    // An included file is there at its host path (sh's builtins only: the
    // initramfs holds sh and its libraries, no other program).
    let data = std::env::temp_dir().join(format!("smplab-linux-tcg-{}", std::process::id()));
    std::fs::write(&data, "from the host\n").unwrap();
    let mut program = Program::new([
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "echo hello from the guest; read line < {}; echo \"$line\"; exit 3",
            data.display()
        ),
    ]);
    program.include.push(data.clone());
    let run = run_on_qemu(&cfg, &program);
    std::fs::remove_file(&data).unwrap();
    let run = run.unwrap();
    let s = &run.section;
    assert_eq!(s.host, LinuxHost::Qemu);
    assert_eq!(s.exit, ProgramExit::Status(3), "{}", run.console);
    assert_eq!(s.output_tail, "hello from the guest\nfrom the host\n");
    assert_eq!(s.cpus_online, Some(2));
    let boot = s.boot_to_init_ns.unwrap();
    assert!(boot > 0 && boot < s.total_ns.unwrap());
    assert!(s.wall_ns > 0 && s.initramfs_bytes.unwrap() > 0);
    assert!(s.qemu_stats.is_empty(), "TCG has no KVM statistics");

    // The kernel brings one CPU up of the two asked for.
    let mut one_cpu = cfg.clone();
    one_cpu.cmdline = format!("{DEFAULT_CMDLINE} maxcpus=1");
    let e = run_on_qemu(&one_cpu, &Program::new(["/bin/true"])).unwrap_err();
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

    // No init where the kernel looks: it panics, and the error has the tail.
    let mut panics = cfg.clone();
    panics.vcpus = 1;
    panics.cmdline = "console=ttyS0 quiet panic=-1 rdinit=/no-such-init root=/dev/nothing".into();
    let e = run_on_qemu(&panics, &Program::new(["/bin/true"])).unwrap_err();
    assert!(matches!(e, LinuxError::GuestPanic { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::GUEST_CRASH);
    assert!(e.to_string().contains("Kernel panic"), "{e}");

    // Still booting at the timeout.
    let mut short = cfg.clone();
    short.timeout = Duration::from_millis(300);
    let e = run_on_qemu(&short, &Program::new(["/bin/true"])).unwrap_err();
    assert!(matches!(e, LinuxError::Timeout { .. }), "{e}");
    assert_eq!(e.exit_status(), exit::TIMEOUT);
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
