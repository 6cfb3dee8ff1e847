//! The one place the execute path calls smplab-linux (crates/linux): its
//! initramfs builder and init, run on smplab-vmm, on QEMU and natively.
//! The requests here are what the run configuration resolved to.

use smplab_record::config::{Irqchip, QemuMachine, SyncMode};
use smplab_record::linux::{LinuxHost, LinuxSection, ProgramExit};
use smplab_record::{exit, Executor, RunRecord};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A native run of a real program.
pub(crate) struct Native<'a> {
    pub argv: &'a [String],
    pub exe: &'a Path,
    /// Confine the program to these host CPUs.
    pub cpus: Option<Vec<usize>>,
    pub timeout: Duration,
}

/// A run of a real program in a Linux guest.
// Read by smplab-linux's guest runs once they are wired in here.
#[allow(dead_code)]
pub(crate) struct Guest<'a> {
    pub argv: &'a [String],
    pub exe: &'a Path,
    pub kernel: PathBuf,
    pub initrd: Option<&'a Path>,
    pub include: &'a [PathBuf],
    pub vcpus: u32,
    pub mem_bytes: u64,
    pub cpus: Option<Vec<usize>>,
    pub timeout: Duration,
    pub show_console: bool,
}

/// Why a real program's run failed.
#[derive(Debug, thiserror::Error)]
pub enum LinuxRunError {
    #[error("{executor} runs need smplab-linux, which this build lacks")]
    NotBuilt { executor: Executor },
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("`{program}` was still running after {timeout:?}: stopped")]
    Timeout { program: String, timeout: Duration },
    #[error("`{program}` failed ({how}); its output ended: {tail}")]
    ProgramFailed {
        program: String,
        how: String,
        tail: String,
    },
}

impl LinuxRunError {
    pub fn exit_status(&self) -> i32 {
        match self {
            LinuxRunError::NotBuilt { .. } => exit::EXTERNAL_TOOL,
            LinuxRunError::Spawn { .. } | LinuxRunError::ProgramFailed { .. } => exit::RUN_FAILED,
            LinuxRunError::Timeout { .. } => exit::TIMEOUT,
        }
    }
}

/// Bytes of the program's output kept for an error message.
const OUTPUT_TAIL: usize = 400;

/// The program on this host, timed from just before its start to its end,
/// its output counted and dropped (only a tail kept for errors).
pub(crate) fn run_native(req: &Native) -> Result<RunRecord, LinuxRunError> {
    use std::io::Read;
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let program = req.argv[0].clone();
    let mut cmd = std::process::Command::new(req.exe);
    cmd.arg0(&program)
        .args(&req.argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(cpus) = req.cpus.clone() {
        // SAFETY: between fork and exec only async-signal-safe calls:
        // CPU_ZERO/CPU_SET on a local set and sched_setaffinity.
        unsafe {
            cmd.pre_exec(move || {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_ZERO(&mut set);
                for &c in &cpus {
                    libc::CPU_SET(c, &mut set);
                }
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let spawn = |source| LinuxRunError::Spawn {
        program: program.clone(),
        source,
    };
    let started = std::time::Instant::now();
    let mut child = cmd.spawn().map_err(spawn)?;
    let mut readers = Vec::new();
    for pipe in [
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    {
        readers.push(std::thread::spawn(move || {
            let mut pipe = pipe;
            let mut count = 0u64;
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                count += n as u64;
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > OUTPUT_TAIL {
                    tail.drain(..tail.len() - OUTPUT_TAIL);
                }
            }
            (count, tail)
        }));
    }
    let status = loop {
        if let Some(s) = child.try_wait().map_err(spawn)? {
            break s;
        }
        if started.elapsed() > req.timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LinuxRunError::Timeout {
                program,
                timeout: req.timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let wall = started.elapsed();
    let mut output_bytes = 0u64;
    let mut tail = Vec::new();
    for r in readers {
        if let Ok((count, t)) = r.join() {
            output_bytes += count;
            tail.extend_from_slice(&t);
        }
    }
    if !status.success() {
        let how = match (status.code(), status.signal()) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "no status".into(),
        };
        return Err(LinuxRunError::ProgramFailed {
            program,
            how,
            tail: String::from_utf8_lossy(&tail).trim().to_string(),
        });
    }
    let mut record = RunRecord::new(Executor::Native, smplab_record::WorkloadInfo::default());
    let wall_ns = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
    record.timing.wall_ns = wall_ns;
    record.linux = Some(LinuxSection {
        host: LinuxHost::Native,
        argv: req.argv.to_vec(),
        program_path: req.exe.display().to_string(),
        wall_ns,
        exit: ProgramExit::Status(0),
        output_bytes,
        output_tail: String::from_utf8_lossy(&tail).into_owned(),
        cpus_online: std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok()),
        ..LinuxSection::default()
    });
    Ok(record)
}

pub(crate) fn run_on_smplab_vmm(
    _req: &Guest,
    _sync: SyncMode,
    _irqchip: Irqchip,
) -> Result<RunRecord, LinuxRunError> {
    Err(LinuxRunError::NotBuilt {
        executor: Executor::Linux,
    })
}

pub(crate) fn run_on_qemu(
    _req: &Guest,
    _machine: QemuMachine,
    _qemu: &str,
) -> Result<RunRecord, LinuxRunError> {
    Err(LinuxRunError::NotBuilt {
        executor: Executor::LinuxQemu,
    })
}
