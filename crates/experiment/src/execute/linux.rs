//! Real programs: a program's argv run as it is, in a Linux guest on
//! smplab-vmm (`linux`), on QEMU (`linux-qemu`), or natively on this host
//! (`native`, the baseline of both). The three runs go through
//! [`backend`], the one place that calls smplab-linux, so the same init
//! times the same interval everywhere.

use super::{ExecuteError, RunLimits};
use crate::availability::{kvm_unavailable, on_path};
use smplab_record::config::{
    ConfigError, LinuxGuestSettings, LinuxQemuSettings, LinuxSettings, NativeSettings, RunConfig,
    LINUX_KERNEL_ENV,
};
use smplab_record::host::{KvmBacking, KvmFacts};
use smplab_record::{exit, RunRecord, WorkloadInfo};
use std::path::{Path, PathBuf};

mod backend;

pub use backend::LinuxRunError;

/// A real program, as the user wrote it: `argv[0]` a path or a name on PATH.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RealProgram {
    pub argv: Vec<String>,
}

impl RealProgram {
    /// The program `argv` names; `Err` when it is empty.
    pub fn new(argv: Vec<String>) -> Result<RealProgram, ProgramError> {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(ProgramError::Empty);
        }
        Ok(RealProgram { argv })
    }

    /// How a record names it (`WorkloadInfo::for_program`).
    pub fn info(&self) -> WorkloadInfo {
        WorkloadInfo::for_program(&self.argv)
    }

    /// The executable `argv[0]` names: a path, or the first match on PATH,
    /// checked to be an executable file.
    pub fn resolve(&self) -> Result<PathBuf, ProgramError> {
        use std::os::unix::fs::PermissionsExt;
        let name = &self.argv[0];
        let candidates: Vec<PathBuf> = if name.contains('/') {
            vec![PathBuf::from(name)]
        } else {
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect())
                .unwrap_or_default()
        };
        let mut found_not_executable = None;
        for c in candidates {
            match std::fs::metadata(&c) {
                Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => return Ok(c),
                Ok(_) => found_not_executable = Some(c),
                Err(_) => {}
            }
        }
        Err(match found_not_executable {
            Some(path) => ProgramError::NotExecutable { path },
            None => ProgramError::NotFound {
                program: name.clone(),
            },
        })
    }
}

/// A program that cannot run at all, found before anything boots.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("no program given: put it after `--`, e.g. `-- pigz -p 2 -k FILE` (a spec: program = [\"pigz\", \"-p\", \"2\"])")]
    Empty,
    #[error("`{program}`: no such program (not a path to an executable file, nor found in PATH)")]
    NotFound { program: String },
    #[error("`{}` is not an executable file", .path.display())]
    NotExecutable { path: PathBuf },
}

impl ProgramError {
    pub fn exit_status(&self) -> i32 {
        match self {
            ProgramError::Empty => exit::BAD_INPUT,
            ProgramError::NotFound { .. } | ProgramError::NotExecutable { .. } => {
                exit::PROGRAM_NOT_FOUND
            }
        }
    }
}

/// Why a Linux run has no kernel to boot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    #[error("no Linux kernel to boot: give --kernel PATH (in a spec: kernel = \"PATH\") or set {LINUX_KERNEL_ENV}=PATH (a bzImage or PVH ELF, e.g. Debian's /boot/vmlinuz-*; the nested host's is target/nested-host/vmlinuz)")]
    Missing,
    #[error("{}: cannot read the Linux kernel{}: {why}", .path.display(), .from_env.then_some(format!(" (from {LINUX_KERNEL_ENV})")).unwrap_or_default())]
    Unreadable {
        path: PathBuf,
        from_env: bool,
        why: String,
    },
}

/// The kernel a Linux run boots: the configuration's, else
/// [`LINUX_KERNEL_ENV`]'s, checked to be readable.
pub fn resolve_kernel(given: Option<&Path>) -> Result<PathBuf, KernelError> {
    let (path, from_env) = match given {
        Some(p) => (p.to_path_buf(), false),
        None => match std::env::var_os(LINUX_KERNEL_ENV) {
            Some(p) if !p.is_empty() => (PathBuf::from(p), true),
            _ => return Err(KernelError::Missing),
        },
    };
    match std::fs::File::open(&path).and_then(|f| f.metadata()) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => Err(KernelError::Unreadable {
            path,
            from_env,
            why: "not a regular file".into(),
        }),
        Err(e) => Err(KernelError::Unreadable {
            path,
            from_env,
            why: e.to_string(),
        }),
    }
}

/// What this host's KVM is backed by lacks for a Linux guest, if anything.
fn linux_guest_unavailable() -> Option<(String, i32)> {
    if let Some(r) = kvm_unavailable() {
        return Some((r, exit::KVM_UNAVAILABLE));
    }
    // Pinned by the override (tests pointing at another device): trust it.
    if std::env::var_os(smplab_vmm::vm::KVM_DEVICE_ENV).is_some() {
        return None;
    }
    (KvmFacts::detect().backing == KvmBacking::Pvm).then(|| {
        (
            "this host's KVM (PVM) cannot boot Linux guests; see docs/nested-host.md \
             (run inside the nested AMD-V host: tools/nested-host/nested-host run)"
                .to_string(),
            exit::NO_HARDWARE_KVM,
        )
    })
}

/// `linux` needs hardware-style KVM.
pub(super) fn linux_availability(_limits: &RunLimits) -> Result<(), (String, i32)> {
    linux_guest_unavailable().map_or(Ok(()), Err)
}

/// `linux-qemu` needs hardware-style KVM and QEMU.
pub(super) fn linux_qemu_availability(limits: &RunLimits) -> Result<(), (String, i32)> {
    linux_availability(limits)?;
    if on_path(&limits.qemu()) {
        Ok(())
    } else {
        Err((
            format!(
                "QEMU ({}) is not installed: apt-get install qemu-system-x86",
                limits.qemu()
            ),
            exit::EXTERNAL_TOOL,
        ))
    }
}

/// One executor's way of running a real program, implemented on its
/// settings type and registered in [`program_executor_of`].
trait ExecuteProgram {
    fn run_program(
        &self,
        program: &RealProgram,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<RunRecord, ExecuteError>;
}

/// The registry of executors that run real programs (`None`: models only).
fn program_executor_of(config: &RunConfig) -> Option<&dyn ExecuteProgram> {
    match config {
        RunConfig::Native(s) => Some(s),
        RunConfig::Linux(s) => Some(s),
        RunConfig::LinuxQemu(s) => Some(s),
        RunConfig::Vm(_) | RunConfig::Qemu(_) | RunConfig::Sim(_) => None,
    }
}

/// What a native run of a real program cannot honour: the program places
/// its own threads, and has no smplab device thread.
fn refuse_native_settings(s: &NativeSettings) -> Result<(), ExecuteError> {
    let mut p = Vec::new();
    if !s.placement.is_float() {
        p.push(ConfigError {
            setting: "pin",
            message: "a real program runs natively under the init as it is, unpinned (the Linux executors pin vCPUs)".into(),
        });
    }
    if !s.io_thread_cpus.is_float() {
        p.push(ConfigError {
            setting: "io_thread_cpus",
            message: "a real program has no smplab device thread to place (it applies to a model's io ops)".into(),
        });
    }
    if p.is_empty() {
        Ok(())
    } else {
        Err(ExecuteError::Invalid(p))
    }
}

impl ExecuteProgram for NativeSettings {
    fn run_program(
        &self,
        program: &RealProgram,
        limits: &RunLimits,
        _host_cores: usize,
    ) -> Result<RunRecord, ExecuteError> {
        refuse_native_settings(self)?;
        Ok(backend::run_native(&program.argv, limits.timeout)?)
    }
}

fn guest_request<'a>(
    g: &'a LinuxGuestSettings,
    program: &'a RealProgram,
    limits: &'a RunLimits,
    host_cores: usize,
) -> Result<backend::Guest<'a>, ExecuteError> {
    Ok(backend::Guest {
        argv: &program.argv,
        kernel: resolve_kernel(g.kernel.as_deref())?,
        initrd: g.initrd.as_deref(),
        include: &g.include,
        vcpus: g.vcpus,
        mem_bytes: g.mem(),
        placement: &g.placement,
        host_cores,
        timeout: limits.timeout,
        show_console: limits.show_console,
    })
}

impl ExecuteProgram for LinuxSettings {
    fn run_program(
        &self,
        program: &RealProgram,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<RunRecord, ExecuteError> {
        let req = guest_request(&self.guest, program, limits, host_cores)?;
        Ok(backend::run_on_smplab_vmm(&req, self.sync, self.irqchip)?)
    }
}

impl ExecuteProgram for LinuxQemuSettings {
    fn run_program(
        &self,
        program: &RealProgram,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<RunRecord, ExecuteError> {
        let req = guest_request(&self.guest, program, limits, host_cores)?;
        Ok(backend::run_on_qemu(
            &req,
            self.machine,
            limits.qemu_binary.clone(),
        )?)
    }
}

/// Run the real program `program` as `config` says: one record, with
/// `config` as given (`RunRecord::run`) and the program as its workload.
pub fn execute_program(
    program: &RealProgram,
    config: &RunConfig,
    limits: &RunLimits,
) -> Result<Vec<RunRecord>, ExecuteError> {
    let Some(executor) = program_executor_of(config) else {
        return Err(ExecuteError::ModelsOnly(config.executor()));
    };
    config.validate(None).map_err(ExecuteError::Invalid)?;
    program.resolve()?;
    // What the host lacks first: a sweep stores such a point as skipped (to
    // be tried on a host that has it), whatever else is missing.
    super::availability(config.executor(), limits)?;
    let cores = super::host_cores();
    config.check_host_cpus(cores)?;
    let start = smplab_record::interference::HostCounters::read();
    let mut record = executor.run_program(program, limits, cores)?;
    let end = smplab_record::interference::HostCounters::read();
    record.workload = program.info();
    record.run = Some(config.clone());
    if record.interference.is_none() {
        record.interference = start.zip(end).map(|(a, b)| a.until(&b));
    }
    Ok(vec![record])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_resolve_on_path_or_say_why_not() {
        let p = RealProgram::new(vec!["sh".into(), "-c".into(), "true".into()]).unwrap();
        assert!(p.resolve().unwrap().is_absolute());
        let missing = RealProgram::new(vec!["smplab-no-such-program".into()]).unwrap();
        let e = missing.resolve().unwrap_err();
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert!(e.to_string().contains("no such program"), "{e}");
        let dir = std::env::temp_dir().join(format!("smplab-prog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("data");
        std::fs::write(&file, "not a program").unwrap();
        let not_exec = RealProgram::new(vec![file.display().to_string()]).unwrap();
        let e = not_exec.resolve().unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(e, ProgramError::NotExecutable { .. }), "{e:?}");
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert_eq!(RealProgram::new(vec![]), Err(ProgramError::Empty));
    }

    #[test]
    fn a_missing_kernel_names_the_flag_and_the_variable() {
        let e = resolve_kernel(Some(Path::new("/nonexistent/vmlinuz"))).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/vmlinuz"), "{e}");
        assert!(KernelError::Missing.to_string().contains("--kernel"));
        assert!(KernelError::Missing.to_string().contains(LINUX_KERNEL_ENV));
    }
}
