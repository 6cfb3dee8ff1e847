//! Debian's stock kernel on smplab-vmm with KVM's in-kernel irqchip: as a
//! bzImage (the Linux boot protocol) and as the PVH ELF `vmlinux` inside it,
//! with an initramfs holding only a static C init (`linux_init/init.c`, built
//! by build.rs), which reports the online CPUs and ends the VM by the debug
//! exit, ACPI power-off or a reboot.
//!
//! Linux needs hardware-style KVM: on PVM its kernel code runs in KVM's
//! instruction emulator and it cannot boot (docs/nested-host.md). So these
//! tests boot only where `/dev/kvm` is kvm_amd/kvm_intel (CI's nested AMD-V
//! host, with the kernel copied in by `--file`) and elsewhere print why they
//! ran nowhere. With SMPLAB_REQUIRE_KVM=1 on hardware-style KVM a missing
//! kernel or init is a failure.
//!
//! The kernel: `$SMPLAB_LINUX_KERNEL`, else target/nested-host/vmlinuz (the
//! nested host's own), and its `vmlinux` beside it
//! (tools/nested-host/extract-vmlinux writes it). By default a few boots cover both forms, N = 1, 2, 4
//! and 8 vCPUs and the four sync modes between them (under TCG each boot
//! takes 10-20 s); `SMPLAB_LINUX_MATRIX=full` boots every form x N x mode,
//! of Debian's `cloud` flavour kernel too when it is there
//! (linux_common::cloud_bzimage; its PVH form `vmlinux-cloud` beside it).
//! `SMPLAB_LINUX_CMDLINE_EXTRA` adds words to the guest's command line.

mod linux_common;

use linux_common::{
    all_online, bzimage, cloud_bzimage, cloud_kernel_path, hardware_kvm, initramfs, kernel_path,
    MEM_BYTES,
};
use smplab_vmm::{run_vm, ConsoleSink, GuestStop, KernelImage, SyncMode, VmConfig, VmRun};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The init, built by build.rs (empty if gcc could not build it).
const INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux_init"));
const INIT_MARKER: &str = "@@SMPLAB-LINUX-INIT";
const ONLINE_MARKER: &str = "@@SMPLAB-LINUX-ONLINE ";
const CLOCK_MARKER: &str = "@@SMPLAB-LINUX-CLOCK ";
const MHZ_MARKER: &str = "@@SMPLAB-LINUX-MHZ ";
/// The init's debug-exit status.
const STATUS_OK: u32 = 0x5a;
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// One VM at a time: each has 512 MiB, and the nested host has 2 GiB.
static ONE_VM: Mutex<()> = Mutex::new(());

#[derive(Debug, Clone, Copy, PartialEq)]
enum Form {
    BzImage,
    Pvh,
    /// Debian's `cloud` flavour (linux_common::cloud_bzimage), both forms.
    CloudBzImage,
    CloudPvh,
}

/// The kernel of `form`. The cloud forms only where `cloud_bzimage()` found
/// the cloud kernel.
fn kernel(form: Form) -> &'static [u8] {
    match form {
        Form::BzImage => bzimage(),
        Form::Pvh => vmlinux(),
        Form::CloudBzImage => cloud_bzimage().expect("the cloud kernel was found"),
        Form::CloudPvh => cloud_vmlinux(),
    }
}

/// The cloud kernel's `vmlinux` (LZ4 inside; tools/nested-host/cloud-kernel
/// writes it): `vmlinux-cloud` beside the cloud bzImage.
fn cloud_vmlinux() -> &'static [u8] {
    static VMLINUX: OnceLock<Vec<u8>> = OnceLock::new();
    VMLINUX.get_or_init(|| {
        let path = cloud_kernel_path().with_file_name("vmlinux-cloud");
        let vmlinux = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the cloud kernel's PVH form {}: {e}; tools/nested-host/cloud-kernel writes it",
                path.display()
            )
        });
        assert!(vmlinux.starts_with(b"\x7fELF"), "{} is not an ELF file", path.display());
        vmlinux
    })
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stop {
    DebugExit,
    PowerOff,
    Reboot,
    /// No init where the kernel looks: it panics, and `panic=-1` restarts.
    Panic,
}

/// The `vmlinux` ELF inside the bzImage, as tools/nested-host/extract-vmlinux
/// wrote it (the nested host has no xz that reads the kernel's stream):
/// `$SMPLAB_LINUX_VMLINUX`, else `vmlinux` beside the bzImage.
fn vmlinux() -> &'static [u8] {
    static VMLINUX: OnceLock<Vec<u8>> = OnceLock::new();
    VMLINUX.get_or_init(|| {
        let path = std::env::var_os("SMPLAB_LINUX_VMLINUX")
            .map(PathBuf::from)
            .unwrap_or_else(|| kernel_path().with_file_name("vmlinux"));
        let vmlinux = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the PVH kernel {}: {e}; write it with tools/nested-host/extract-vmlinux and copy it into the nested host with --file",
                path.display()
            )
        });
        assert!(vmlinux.starts_with(b"\x7fELF"), "{} is not an ELF file", path.display());
        vmlinux
    })
}

fn initrd() -> &'static [u8] {
    static INITRD: OnceLock<Vec<u8>> = OnceLock::new();
    INITRD.get_or_init(|| initramfs(INIT))
}

/// Boot `form` with `vcpus` vCPUs in `sync` mode, ended the `stop` way.
fn boot(form: Form, vcpus: u32, sync: SyncMode, stop: Stop) -> (VmRun, String) {
    let mut config = VmConfig::new(KernelImage::Bytes(kernel(form).to_vec()));
    config.initrd = Some(initrd().to_vec());
    config.vcpus = vcpus;
    config.mem_bytes = MEM_BYTES;
    config.sync = sync;
    // A file, not a capture: a run that fails still leaves its console.
    let console_path = std::env::temp_dir().join(format!(
        "smplab-linux-boot-{}-{form:?}-{vcpus}.console",
        std::process::id()
    ));
    config.console = ConsoleSink::File(console_path.clone());
    config.timeout = Some(BOOT_TIMEOUT);
    let stop_word = match stop {
        Stop::DebugExit => "",
        Stop::PowerOff => " smplab.stop=poweroff",
        Stop::Reboot => " smplab.stop=reboot",
        Stop::Panic => " rdinit=/no-such-init root=/dev/nothing",
    };
    // quiet: the kernel's own lines would interleave with the init's on the
    // one UART (printk writes it directly, the tty by interrupts).
    let extra = std::env::var("SMPLAB_LINUX_CMDLINE_EXTRA").unwrap_or_default();
    config.cmdline = format!("console=ttyS0 quiet panic=-1{stop_word} {extra}");
    let _one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let what = format!("{form:?} x{vcpus} {sync} {stop:?}");
    let started = std::time::Instant::now();
    let outcome = run_vm(&config);
    let console = std::fs::read(&console_path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let _ = std::fs::remove_file(&console_path);
    let run = outcome.unwrap_or_else(|e| {
        panic!(
            "{what}: {e}\nclock lines:\n{}\nconsole tail:\n{}",
            timing_lines(&console),
            tail(&console)
        )
    });
    eprintln!(
        "{what}: {:.1} s, stopped by {:?}",
        started.elapsed().as_secs_f64(),
        run.stop
    );
    (run, console)
}

/// The console lines about clocks and timers, for a failure message.
fn timing_lines(console: &str) -> String {
    let words = [
        "tsc",
        "TSC",
        "clocksource",
        "Calibrat",
        "APIC",
        "timer",
        "kvm-clock",
    ];
    console
        .lines()
        .filter(|l| words.iter().any(|w| l.contains(w)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The last few kB of a console.
fn tail(console: &str) -> String {
    let start = console.len().saturating_sub(6000);
    let start = (start..console.len())
        .find(|&i| console.is_char_boundary(i))
        .unwrap_or(console.len());
    console[start..].to_string()
}

fn check(form: Form, vcpus: u32, sync: SyncMode, stop: Stop) {
    let (run, console) = boot(form, vcpus, sync, stop);
    let tail = tail(&console);
    let what = format!("{form:?} x{vcpus} {sync} {stop:?}");
    let uart_accesses: u64 = run
        .section
        .exit_latency
        .iter()
        .filter(|(key, _)| key.starts_with("uart"))
        .map(|(_, h)| h.count)
        .sum();
    let tail = format!(
        "({} console bytes, {uart_accesses} UART accesses)\n{tail}",
        console.len()
    );
    assert!(
        console.contains(INIT_MARKER),
        "{what}: the init never ran; console tail:\n{tail}"
    );
    let online = console
        .lines()
        .find_map(|l| l.trim_end().split_once(ONLINE_MARKER).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("{what}: no online line; console tail:\n{tail}"));
    assert_eq!(online, all_online(vcpus), "{what}: console tail:\n{tail}");
    let expected = match stop {
        Stop::DebugExit => GuestStop::DebugExit(STATUS_OK),
        Stop::PowerOff => GuestStop::PowerOff,
        Stop::Reboot | Stop::Panic => GuestStop::Reset,
    };
    assert_eq!(run.stop, expected, "{what}: console tail:\n{tail}");
    // kvm-clock is offered (the KVM CPUID leaves), and the TSC is
    // registered, so Linux knew its frequency (else it marks it unstable).
    let clock = console
        .lines()
        .find_map(|l| l.trim_end().split_once(CLOCK_MARKER).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("{what}: no clock line; console tail:\n{tail}"));
    let available = clock.split_once("(available: ").map_or("", |(_, a)| a);
    assert!(
        available.contains("kvm-clock"),
        "{what}: clock sources {clock}\n{}",
        timing_lines(&console)
    );
    // Linux knows the TSC frequency (from kvm-clock): /proc/cpuinfo's MHz.
    let mhz: f64 = console
        .lines()
        .find_map(|l| l.trim_end().split_once(MHZ_MARKER).map(|(_, v)| v))
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(
        mhz > 0.0 && !console.contains("could not calculate TSC khz"),
        "{what}: the guest does not know its TSC frequency ({mhz} MHz)\n{}",
        timing_lines(&console)
    );
    let window = run.section.window.as_ref();
    assert!(
        window.is_some(),
        "{what}: the init's ready never reached the window port"
    );
}

const SYNC_MODES: [SyncMode; 4] = [
    SyncMode::Global,
    SyncMode::IoThread,
    SyncMode::Hybrid,
    SyncMode::Fine,
];

fn full_matrix() -> bool {
    std::env::var("SMPLAB_LINUX_MATRIX").as_deref() == Ok("full")
}

// A few boots that cover both forms, every N, every sync mode and every way
// to stop between them (one VM at a time: `ONE_VM`).

#[test]
fn pvh_on_2_vcpus_fine_ends_by_the_debug_exit() {
    if hardware_kvm("linux_boot") {
        check(Form::Pvh, 2, SyncMode::Fine, Stop::DebugExit);
    }
}

#[test]
fn bzimage_on_1_vcpu_global_powers_off() {
    if hardware_kvm("linux_boot") {
        check(Form::BzImage, 1, SyncMode::Global, Stop::PowerOff);
    }
}

#[test]
fn pvh_on_4_vcpus_iothread_reboots() {
    if hardware_kvm("linux_boot") {
        check(Form::Pvh, 4, SyncMode::IoThread, Stop::Reboot);
    }
}

#[test]
fn bzimage_on_8_vcpus_hybrid_ends_by_the_debug_exit() {
    if hardware_kvm("linux_boot") {
        check(Form::BzImage, 8, SyncMode::Hybrid, Stop::DebugExit);
    }
}

/// A kernel panic with `panic=-1` ends the VM at once as a reset: Linux 6.1's
/// emergency restart on this hardware-reduced ACPI machine goes "EFI" (none)
/// then "BIOS", real mode at f000:fff0, where the reset stub writes the
/// reset register (docs/linux.md, "Errors and exit statuses"). On 2 vCPUs,
/// so the panicking CPU first stops the other.
#[test]
fn a_panic_on_2_vcpus_resets_at_once() {
    if !hardware_kvm("linux_boot") {
        return;
    }
    let (run, console) = boot(Form::Pvh, 2, SyncMode::Global, Stop::Panic);
    assert!(
        console.contains("Kernel panic"),
        "no panic on the console:\n{}",
        tail(&console)
    );
    assert_eq!(run.stop, GuestStop::Reset, "{}", tail(&console));
    assert!(
        !console.contains(INIT_MARKER),
        "the init ran: {}",
        tail(&console)
    );
}

/// Every form x N x sync mode, with `SMPLAB_LINUX_MATRIX=full`.
#[test]
fn the_full_matrix_boots_with_every_cpu_online() {
    if !full_matrix() {
        eprintln!("note: the full matrix runs with SMPLAB_LINUX_MATRIX=full");
        return;
    }
    if !hardware_kvm("linux_boot") {
        return;
    }
    let mut forms = vec![Form::BzImage, Form::Pvh];
    if cloud_bzimage().is_some() {
        forms.extend([Form::CloudBzImage, Form::CloudPvh]);
    }
    for form in forms {
        for vcpus in [1, 2, 4, 8] {
            for sync in SYNC_MODES {
                check(form, vcpus, sync, Stop::DebugExit);
            }
        }
    }
}

#[test]
fn the_initramfs_is_well_formed_newc() {
    // Runs everywhere: the archive the boots use.
    if INIT.is_empty() {
        eprintln!("note: no init was built (gcc -static failed), nothing to pack");
        return;
    }
    let cpio = initrd();
    assert!(cpio.starts_with(b"070701"));
    assert_eq!(cpio.len() % 4, 0);
    let trailer = cpio
        .windows(10)
        .position(|w| w == b"TRAILER!!!")
        .expect("a trailer");
    let init = cpio.windows(5).position(|w| w == b"init\0").expect("/init");
    assert!(init < trailer);
    assert!(cpio
        .windows(INIT.len().min(64))
        .any(|w| w == &INIT[..INIT.len().min(64)]));
}

/// Host `CLOCK_MONOTONIC` in ns (the clock of the window's timestamps).
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Boot-to-init on smplab-vmm: from before `run_vm` (VM construction
/// included) to the init's "ready" on the window port, in seconds.
fn smplab_boot_to_init(form: Form, vcpus: u32) -> f64 {
    let mut config = VmConfig::new(KernelImage::Bytes(kernel(form).to_vec()));
    config.initrd = Some(initrd().to_vec());
    config.vcpus = vcpus;
    config.mem_bytes = MEM_BYTES;
    config.console = ConsoleSink::Capture;
    config.timeout = Some(BOOT_TIMEOUT);
    config.cmdline = MEASURE_CMDLINE.into();
    let start = monotonic_ns();
    let run = run_vm(&config).unwrap_or_else(|e| panic!("{form:?}: {e}"));
    let ready = run
        .section
        .window
        .as_ref()
        .expect("the init said ready")
        .ready_ns;
    (ready - start) as f64 / 1e9
}

/// The command line of both VMMs in the measurement.
const MEASURE_CMDLINE: &str = "console=ttyS0 quiet panic=-1";

/// Boot-to-init under QEMU `-M microvm` with the same kernel, initramfs and
/// command line: from spawning QEMU to the init's marker on its serial
/// console, in seconds.
fn qemu_boot_to_init(qemu: &str, vcpus: u32) -> f64 {
    use std::io::BufRead;
    let dir = std::env::temp_dir();
    let initrd_path = dir.join(format!("smplab-linux-boot-{}.cpio", std::process::id()));
    std::fs::write(&initrd_path, initrd()).expect("write the initramfs");
    let start = std::time::Instant::now();
    let mut child = std::process::Command::new(qemu)
        .args([
            "-accel", "kvm", "-M", "microvm", "-cpu", "host", "-m", "512",
        ])
        .args(["-smp", &vcpus.to_string()])
        .arg("-kernel")
        .arg(kernel_path())
        .arg("-initrd")
        .arg(&initrd_path)
        .args(["-append", MEASURE_CMDLINE])
        .args(["-nographic", "-no-reboot"])
        .args(["-device", "isa-debug-exit,iobase=0x501,iosize=2"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {qemu}: {e}"));
    let stdout = child.stdout.take().expect("piped");
    let mut seen = None;
    for line in std::io::BufReader::new(stdout).split(b'\n') {
        let Ok(line) = line else { break };
        if String::from_utf8_lossy(&line).contains(INIT_MARKER) {
            seen = Some(start.elapsed().as_secs_f64());
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&initrd_path);
    seen.expect("QEMU's guest never printed the init marker")
}

fn median_and_spread(mut xs: Vec<f64>) -> (f64, f64, f64) {
    xs.sort_by(f64::total_cmp);
    (xs[xs.len() / 2], xs[0], xs[xs.len() - 1])
}

/// The median of `xs` and a distribution-free interval around it of at
/// least 95 % coverage: the order statistics `x(k)` and `x(n+1-k)` with the
/// largest `k` for which a Binomial(n, 1/2) falls below `k` with probability
/// at most 2.5 %. `None` with fewer than 6 values (even min..max covers less
/// than 95 % then: 93.75 % at n = 5).
fn median_with_interval(mut xs: Vec<f64>) -> (f64, Option<(f64, f64)>) {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let median = if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    };
    // P(B < k) = sum_{i<k} C(n, i) / 2^n.
    let all = (0..n).fold(1.0, |p: f64, _| p * 2.0);
    let mut below = 0.0;
    let mut choose = 1.0;
    let mut k = 0;
    for i in 0..n {
        if below + choose / all > 0.025 {
            break;
        }
        below += choose / all;
        choose = choose * (n - i) as f64 / (i + 1) as f64;
        k = i + 1;
    }
    let interval = (k >= 1).then(|| (xs[k - 1], xs[n - k]));
    (median, interval)
}

/// The nested host's load average (its 1-minute figure), for the record.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[test]
fn the_median_interval_takes_the_right_order_statistics() {
    // n = 5: no 95 % interval exists; n = 6..=8: min..max; n = 9: 2nd..8th.
    assert_eq!(
        median_with_interval(vec![3.0, 1.0, 2.0, 5.0, 4.0]),
        (3.0, None)
    );
    let six = vec![6.0, 1.0, 2.0, 3.0, 4.0, 5.0];
    assert_eq!(median_with_interval(six), (3.5, Some((1.0, 6.0))));
    let nine: Vec<f64> = (1..=9).map(f64::from).collect();
    assert_eq!(median_with_interval(nine), (5.0, Some((2.0, 8.0))));
}

/// Boot-to-init on 2 vCPUs, smplab-vmm (bzImage and PVH) against QEMU
/// `-M microvm` (bzImage), interleaved, `SMPLAB_LINUX_REPEAT` rounds (6):
/// each round's ratio smplab-vmm ÷ QEMU, their median and its 95 %
/// interval (order statistics; 6 rounds or more), with the load average.
/// Not a pass/fail test (timings): run it by name in the nested host, with
/// QEMU, its libraries and /usr/share/qemu copied in; `$SMPLAB_QEMU` names
/// the binary (default qemu-system-x86_64). Emulator timings under TCG.
#[test]
#[ignore = "a measurement, run by hand in the nested host"]
fn measure_boot_to_init_against_qemu() {
    if !hardware_kvm("linux_boot") {
        return;
    }
    let qemu = std::env::var("SMPLAB_QEMU").unwrap_or_else(|_| "qemu-system-x86_64".into());
    let repeat: usize = std::env::var("SMPLAB_LINUX_REPEAT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let (mut bz, mut pvh, mut q) = (Vec::new(), Vec::new(), Vec::new());
    eprintln!("load average before: {}", load_average());
    for round in 0..repeat {
        let _one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
        // Alternate which VMM goes first, so a drift in the host's load
        // does not always favour the same one.
        if round % 2 == 0 {
            q.push(qemu_boot_to_init(&qemu, 2));
            bz.push(smplab_boot_to_init(Form::BzImage, 2));
            pvh.push(smplab_boot_to_init(Form::Pvh, 2));
        } else {
            pvh.push(smplab_boot_to_init(Form::Pvh, 2));
            bz.push(smplab_boot_to_init(Form::BzImage, 2));
            q.push(qemu_boot_to_init(&qemu, 2));
        }
        eprintln!(
            "round {round}: qemu {:.2} s, smplab-vmm bzImage {:.2} s, PVH {:.2} s (load {})",
            q[round],
            bz[round],
            pvh[round],
            load_average()
        );
    }
    for (name, xs) in [
        ("qemu -M microvm (bzImage)", q.clone()),
        ("smplab-vmm bzImage", bz.clone()),
        ("smplab-vmm PVH vmlinux", pvh.clone()),
    ] {
        let (median, lo, hi) = median_and_spread(xs);
        eprintln!("{name}: median {median:.2} s (min {lo:.2}, max {hi:.2}), {repeat} boots, emulator timings");
    }
    for (name, xs) in [("bzImage", &bz), ("PVH", &pvh)] {
        let ratios: Vec<f64> = xs.iter().zip(&q).map(|(s, q)| s / q).collect();
        let (median, interval) = median_with_interval(ratios);
        let interval = interval.map_or("no 95 % interval below 6 rounds".into(), |(lo, hi)| {
            format!("95 % interval {lo:.2}x..{hi:.2}x")
        });
        eprintln!(
            "smplab-vmm {name} / qemu, paired by round: median {median:.2}x, {interval} (target <= 0.5x)"
        );
    }
    eprintln!("load average after: {}", load_average());
}
