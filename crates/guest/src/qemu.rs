//! Running the guest under QEMU with KVM: finding QEMU, its command line,
//! the run (pinned, drained, under a timeout) and the record built from the
//! result framed on its serial console.

use crate::{
    base_record, check, check_exit, cmdline, result, GuestError, VmRunOptions, CPU_SET_BITS,
    GUEST_ELF,
};
use smplab_record::{Executor, RunRecord, WorkloadInfo};
use smplab_vmm::Irqchip;
use smplab_workload::Program;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn kernel_bytes(opts: &VmRunOptions) -> Result<Vec<u8>, GuestError> {
    match &opts.kernel {
        None => Ok(GUEST_ELF.to_vec()),
        Some(p) => std::fs::read(p).map_err(|source| GuestError::Io {
            what: format!("reading kernel {}", p.display()),
            source,
        }),
    }
}

/// Whether `binary` can be run (a path, or a name found on PATH).
pub(crate) fn find_binary(binary: &std::path::Path) -> Option<PathBuf> {
    if binary.components().count() > 1 {
        return binary.is_file().then(|| binary.to_path_buf());
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(binary))
            .find(|p| p.is_file())
    })
}

/// The QEMU command line (without the binary) for a run.
pub fn qemu_args(
    kernel: &std::path::Path,
    program_file: &std::path::Path,
    cmdline: &str,
    opts: &VmRunOptions,
    mem: u64,
) -> Vec<String> {
    let mib = mem.div_ceil(1 << 20);
    vec![
        "-accel".into(),
        "kvm".into(),
        "-cpu".into(),
        "max,-arch-capabilities".into(),
        "-M".into(),
        "q35".into(),
        "-m".into(),
        format!("{mib}M"),
        "-smp".into(),
        opts.vcpus.to_string(),
        "-nodefaults".into(),
        "-display".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-serial".into(),
        "stdio".into(),
        "-no-reboot".into(),
        "-kernel".into(),
        kernel.display().to_string(),
        "-append".into(),
        cmdline.into(),
        "-initrd".into(),
        program_file.display().to_string(),
        "-device".into(),
        "isa-debug-exit,iobase=0x501,iosize=2".into(),
    ]
}

/// Run `program` in the smplab guest under QEMU with KVM, the VMM a user would
/// otherwise pick. The result comes back framed on the serial console.
pub fn run_qemu(
    program: &Program,
    info: WorkloadInfo,
    opts: &VmRunOptions,
) -> Result<RunRecord, GuestError> {
    if opts.irqchip != Irqchip::Kernel {
        return Err(GuestError::QemuUserIrqchip);
    }
    if program.uses_io() {
        return Err(GuestError::IoUnsupported);
    }
    let mem = check(program, opts)?;
    let wanted = opts
        .qemu_binary
        .clone()
        .unwrap_or_else(|| PathBuf::from("qemu-system-x86_64"));
    let binary = find_binary(&wanted).ok_or_else(|| GuestError::QemuMissing {
        binary: wanted.display().to_string(),
    })?;
    let dir = TempDir::new()?;
    let kernel_path = dir.0.join("smplab-guest.elf");
    let program_path = dir.0.join("program.bin");
    std::fs::write(&kernel_path, kernel_bytes(opts)?).map_err(io("writing the kernel image"))?;
    std::fs::write(&program_path, smplab_workload::encode::encode(program))
        .map_err(io("writing the program"))?;
    let cmdline = cmdline(program, opts, true);
    let mut cmd = Command::new(&binary);
    cmd.args(qemu_args(&kernel_path, &program_path, &cmdline, opts, mem))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(cpus) = opts.pin.clone().filter(|c| !c.is_empty()) {
        pin_child(&mut cmd, cpus);
    }
    let run = run_to_exit(&mut cmd, opts.timeout)?;
    let code = guest_exit_code(&run)?;
    let (record_bytes, console) = match result::split_serial(&run.stdout) {
        Ok(split) => split,
        Err(e) => {
            check_exit(
                code,
                &run.stdout,
                u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10,
            )?;
            return Err(GuestError::BadResult(
                e,
                String::from_utf8_lossy(&run.stdout).into_owned(),
            ));
        }
    };
    if opts.show_console {
        print!("{}", String::from_utf8_lossy(&console));
    }
    check_exit(
        code,
        &console,
        u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10,
    )?;
    let parsed = result::parse(&record_bytes)
        .map_err(|e| GuestError::BadResult(e, String::from_utf8_lossy(&console).into_owned()))?;
    let mut rec = base_record(Executor::Qemu, info, program, opts, mem);
    rec.set_config("qemu", binary.display().to_string());
    parsed
        .fill(&mut rec, program)
        .map_err(|e| GuestError::BadResult(e, String::from_utf8_lossy(&console).into_owned()))?;
    rec.timing.total_ns = Some(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX));
    Ok(rec)
}

/// An I/O error of a step of a QEMU run, saying which step.
fn io(what: &str) -> impl FnOnce(std::io::Error) -> GuestError {
    let what = what.to_string();
    move |source| GuestError::Io { what, source }
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
            // check_pin (in check) kept every CPU below CPU_SET_BITS.
            for &c in cpus.iter().filter(|&&c| c < CPU_SET_BITS) {
                libc::CPU_SET(c, &mut set);
            }
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// How a QEMU process ended: its status, how long it ran and what it wrote.
struct QemuExit {
    status: std::process::ExitStatus,
    wall: Duration,
    stdout: Vec<u8>,
    stderr: String,
}

/// Start QEMU and wait for it to exit, killing it after `timeout`
/// ([`GuestError::QemuTimeout`], with the console so far).
fn run_to_exit(cmd: &mut Command, timeout: Duration) -> Result<QemuExit, GuestError> {
    let started = Instant::now();
    let mut child = cmd.spawn().map_err(io("starting QEMU"))?;
    // Drain stdout/stderr on threads so a chatty guest cannot block QEMU.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let status = loop {
        match child.try_wait().map_err(io("waiting for QEMU"))? {
            Some(s) => break s,
            None if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                let console = out_t.join().unwrap_or_default();
                return Err(GuestError::QemuTimeout {
                    seconds: timeout.as_secs_f64(),
                    console: String::from_utf8_lossy(&console).into_owned(),
                });
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    };
    let wall = started.elapsed();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&err_t.join().unwrap_or_default()).into_owned();
    Ok(QemuExit {
        status,
        wall,
        stdout,
        stderr,
    })
}

/// The guest's exit status from QEMU's: isa-debug-exit makes QEMU exit with
/// `(value << 1) | 1`; any other status is QEMU failing.
// Casts: a Unix exit status is 0..=255, so it is non-negative.
fn guest_exit_code(run: &QemuExit) -> Result<u32, GuestError> {
    // An odd status is isa-debug-exit's `(code << 1) | 1`: non-negative.
    match run.status.code().and_then(|c| u32::try_from(c).ok()) {
        Some(c) if c & 1 == 1 => Ok(c >> 1),
        _ => Err(GuestError::QemuFailed {
            status: run.status.to_string(),
            stderr: run.stderr.clone(),
        }),
    }
}

/// A private temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<Self, GuestError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!("smplab-qemu-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| GuestError::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(TempDir(dir))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
