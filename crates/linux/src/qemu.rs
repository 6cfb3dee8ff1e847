//! The Linux guest on QEMU, the peer a user would otherwise pick: the same
//! kernel and initramfs under `-M microvm` (or `q35`), the serial console
//! read line by line as it comes (boot-to-init is spawn to the init's first
//! line), and QEMU's KVM statistics (`query-stats` over QMP) read after the
//! result line while the init holds the guest still (`smplab.hold`), then
//! `quit`.

use crate::error::{io, LinuxError, PanicEnd, CONSOLE_TAIL_LINES};
use crate::marker::{console_tail, guest_outcome, panicked, INIT_MARKER, RESULT_MARKER};
use crate::qmp::Qmp;
use crate::tempdir::TempDir;
use crate::{initramfs, kernel, libs, nanos, section_from, LinuxGuestConfig, LinuxRun, Program};
use smplab_record::linux::LinuxHost;
use smplab_vmm::Irqchip;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// QEMU's accelerator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QemuAccel {
    #[default]
    Kvm,
    /// The emulator: no `/dev/kvm` needed, slow, no KVM statistics.
    Tcg,
}

/// QEMU's machine type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QemuMachine {
    /// `-M microvm`: no PCI, no firmware tables beyond what Linux needs.
    #[default]
    Microvm,
    Q35,
}

/// How to run QEMU.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QemuOptions {
    /// `qemu-system-x86_64` on PATH unless given.
    pub binary: Option<PathBuf>,
    pub accel: QemuAccel,
    pub machine: QemuMachine,
    /// `-cpu`: `host` with KVM, `max` with TCG unless given.
    pub cpu: Option<String>,
}

/// Seconds the init keeps the guest still after its result line, so QEMU's
/// statistics can be read before the host quits QEMU (`smplab.hold=N`).
pub const HOLD_SECS: u64 = 30;
/// How long the host waits for QEMU to exit after `quit`.
const QUIT_WAIT: Duration = Duration::from_secs(15);

/// The QEMU command line (without the binary).
pub fn qemu_args(cfg: &LinuxGuestConfig, kernel: &Path, initrd: &Path, qmp: &Path) -> Vec<String> {
    let q = &cfg.qemu;
    let (accel, default_cpu) = match q.accel {
        QemuAccel::Kvm => ("kvm", "host"),
        QemuAccel::Tcg => ("tcg", "max"),
    };
    let machine = match q.machine {
        QemuMachine::Microvm => "microvm",
        QemuMachine::Q35 => "q35",
    };
    let mib = cfg.mem_bytes.div_ceil(1 << 20);
    [
        "-accel",
        accel,
        "-M",
        machine,
        "-cpu",
        q.cpu.as_deref().unwrap_or(default_cpu),
        "-smp",
        &cfg.vcpus.to_string(),
        "-m",
        &format!("{mib}M"),
        "-kernel",
        &kernel.display().to_string(),
        "-initrd",
        &initrd.display().to_string(),
        "-append",
        &format!("{} smplab.hold={HOLD_SECS}", cfg.cmdline),
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-monitor",
        "none",
        "-no-reboot",
        "-device",
        "isa-debug-exit,iobase=0x501,iosize=2",
        "-qmp",
        &format!("unix:{},server=on,wait=off", qmp.display()),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// What the console reader reports as lines arrive.
enum ConsoleEvent {
    Init(Instant),
    Result(Instant),
    Eof,
}

/// Run `program` in a Linux guest under QEMU.
pub fn run_on_qemu(cfg: &LinuxGuestConfig, program: &Program) -> Result<LinuxRun, LinuxError> {
    if cfg.irqchip != Irqchip::Kernel {
        return Err(LinuxError::QemuUnsupported {
            what: "the user-space irqchip (QEMU runs here only with KVM's in-kernel one)".into(),
        });
    }
    let name = program.argv.first().ok_or(LinuxError::NoProgram)?.clone();
    kernel::read_kernel(&cfg.kernel)?;
    let initramfs = initramfs::build(program, cfg.initrd.as_deref())?;
    let wanted = cfg
        .qemu
        .binary
        .clone()
        .unwrap_or_else(|| PathBuf::from("qemu-system-x86_64"));
    let binary = libs::resolve_program(&wanted.display().to_string()).map_err(|_| {
        LinuxError::QemuMissing {
            binary: wanted.display().to_string(),
        }
    })?;
    let dir = TempDir::new("qemu")?;
    let initrd_path = dir.write("initramfs.cpio", &initramfs.bytes)?;
    let qmp_path = dir.path().join("qmp.sock");
    let mut cmd = Command::new(&binary);
    cmd.args(qemu_args(cfg, &cfg.kernel, &initrd_path, &qmp_path))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let cpus = cfg.placement.all_cpus().to_vec();
    if !cpus.is_empty() {
        pin_child(&mut cmd, cpus);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(io("starting QEMU"))?;
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take();
    let console_reader = std::thread::spawn(move || read_console(stdout, &tx));
    let mut stderr = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = stderr.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        String::from_utf8_lossy(&v).into_owned()
    });
    let mut init_at = None;
    let mut result_at = None;
    let mut stats = Ok(BTreeMap::new());
    loop {
        let left = cfg.timeout.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(ConsoleEvent::Init(t)) => init_at = init_at.or(Some(t)),
            Ok(ConsoleEvent::Result(t)) => {
                result_at = Some(t);
                stats = read_stats(cfg, &qmp_path);
                break;
            }
            Ok(ConsoleEvent::Eof) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                stop(&mut child, Duration::ZERO);
                let console = console_reader.join().unwrap_or_default();
                let tail = console_tail(&console, CONSOLE_TAIL_LINES);
                return Err(if panicked(&console) {
                    LinuxError::GuestPanic {
                        end: PanicEnd::StillRunning,
                        console: tail,
                    }
                } else {
                    LinuxError::Timeout {
                        seconds: cfg.timeout.as_secs_f64(),
                        console: tail,
                    }
                });
            }
        }
    }
    let status = stop(&mut child, QUIT_WAIT);
    let console = console_reader.join().unwrap_or_default();
    let stderr = stderr_reader.join().unwrap_or_default();
    if result_at.is_none() && !console.contains(INIT_MARKER) && !panicked(&console) {
        // QEMU itself failed (a bad option, no KVM) if the guest never said a word.
        if !status.as_ref().is_some_and(debug_exit) {
            return Err(LinuxError::QemuFailed {
                status: status.map_or_else(|| "killed".into(), |s| s.to_string()),
                stderr,
            });
        }
    }
    let result = guest_outcome(&console, &name, cfg.vcpus)?;
    let mut section = section_from(LinuxHost::Qemu, program, &initramfs.exec_path, &result);
    section.boot_to_init_ns = init_at.map(|t| nanos(t - started));
    section.guest_init_clock_ns = Some(result.init_clock_ns);
    section.total_ns = result_at.map(|t| nanos(t - started));
    section.initramfs_bytes = u64::try_from(initramfs.bytes.len()).ok();
    section.qemu_stats = stats?;
    Ok(LinuxRun {
        section,
        vmm: None,
        console,
    })
}

/// Whether QEMU exited through isa-debug-exit (status `(value << 1) | 1`).
fn debug_exit(status: &std::process::ExitStatus) -> bool {
    status.code().is_some_and(|c| c & 1 == 1)
}

/// QEMU's KVM statistics (none under TCG), then `quit`.
fn read_stats(
    cfg: &LinuxGuestConfig,
    qmp_path: &Path,
) -> Result<BTreeMap<String, u64>, LinuxError> {
    let mut qmp = Qmp::connect(qmp_path, Duration::from_secs(5))?;
    let stats = match cfg.qemu.accel {
        QemuAccel::Kvm => qmp.kvm_stats(),
        QemuAccel::Tcg => Ok(BTreeMap::new()),
    };
    // QEMU closes the socket as it quits: no answer is fine.
    let _ = qmp.execute("quit", None);
    stats
}

/// Wait up to `wait` for QEMU to exit, then kill it; its status if it exited.
fn stop(child: &mut Child, wait: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + wait;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
}

/// Read QEMU's serial output to its end, reporting the init's marker lines
/// the moment they are complete; the whole console.
fn read_console(
    stdout: Option<std::process::ChildStdout>,
    tx: &mpsc::Sender<ConsoleEvent>,
) -> String {
    let mut console = Vec::new();
    let mut line_start = 0;
    if let Some(mut out) = stdout {
        let mut buf = [0u8; 4096];
        loop {
            let n = match out.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            console.extend_from_slice(&buf[..n]);
            while let Some(nl) = console[line_start..].iter().position(|&b| b == b'\n') {
                let line = String::from_utf8_lossy(&console[line_start..line_start + nl]);
                if line.contains(RESULT_MARKER) {
                    let _ = tx.send(ConsoleEvent::Result(now));
                } else if line.contains(INIT_MARKER) {
                    let _ = tx.send(ConsoleEvent::Init(now));
                }
                line_start += nl + 1;
            }
        }
    }
    let _ = tx.send(ConsoleEvent::Eof);
    String::from_utf8_lossy(&console).into_owned()
}

/// Run QEMU's process on `cpus` only (its vCPU threads inherit the affinity).
fn pin_child(cmd: &mut Command, cpus: Vec<usize>) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe libc functions (CPU_ZERO/CPU_SET are plain bit
    // operations, sched_setaffinity is a system call) on a local set.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            let bits = 8 * std::mem::size_of::<libc::cpu_set_t>();
            for &c in cpus.iter().filter(|&&c| c < bits) {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_has_the_exit_device_the_hold_and_qmp() {
        let mut cfg = LinuxGuestConfig::new(PathBuf::from("/k"));
        cfg.vcpus = 4;
        cfg.mem_bytes = 300 << 20;
        let args = qemu_args(&cfg, Path::new("/k"), Path::new("/i"), Path::new("/s"));
        let joined = args.join(" ");
        for want in [
            "-accel kvm -M microvm -cpu host -smp 4 -m 300M -kernel /k -initrd /i",
            "-device isa-debug-exit,iobase=0x501,iosize=2",
            "-qmp unix:/s,server=on,wait=off",
            "-no-reboot",
        ] {
            assert!(joined.contains(want), "{want} not in {joined}");
        }
        let append = &args[args.iter().position(|a| a == "-append").unwrap() + 1];
        assert_eq!(
            append,
            &format!("{} smplab.hold={HOLD_SECS}", crate::DEFAULT_CMDLINE)
        );
        cfg.qemu.accel = QemuAccel::Tcg;
        cfg.qemu.machine = QemuMachine::Q35;
        let joined = qemu_args(&cfg, Path::new("/k"), Path::new("/i"), Path::new("/s")).join(" ");
        assert!(joined.contains("-accel tcg -M q35 -cpu max"), "{joined}");
    }

    #[test]
    fn the_user_irqchip_is_refused_before_anything_runs() {
        let mut cfg = LinuxGuestConfig::new(PathBuf::from("/no/kernel"));
        cfg.irqchip = Irqchip::User;
        let e = run_on_qemu(&cfg, &Program::new(["/bin/true"])).unwrap_err();
        assert!(matches!(e, LinuxError::QemuUnsupported { .. }), "{e}");
        assert_eq!(e.exit_status(), smplab_record::exit::BAD_INPUT);
    }

    #[test]
    fn a_missing_qemu_is_external_tool() {
        let dir = std::env::temp_dir().join(format!("smplab-linux-q-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut bz = vec![0u8; 0x300];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        std::fs::write(dir.join("bz"), &bz).unwrap();
        let mut cfg = LinuxGuestConfig::new(dir.join("bz"));
        cfg.qemu.binary = Some(PathBuf::from("/no/such/qemu"));
        let e = run_on_qemu(&cfg, &Program::new(["/bin/true"])).unwrap_err();
        assert!(matches!(e, LinuxError::QemuMissing { .. }), "{e}");
        assert_eq!(e.exit_status(), smplab_record::exit::EXTERNAL_TOOL);
        // A kernel that is neither format is refused before QEMU is looked for.
        std::fs::write(dir.join("junk"), b"junk").unwrap();
        cfg.kernel = dir.join("junk");
        let e = run_on_qemu(&cfg, &Program::new(["/bin/true"])).unwrap_err();
        assert_eq!(e.exit_status(), smplab_record::exit::BAD_KERNEL);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
