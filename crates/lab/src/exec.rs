//! The real executors behind [`Runner`]: thin glue from a [`Point`] to
//! `smplab_native::run`, `smplab_guest::run_vm` / `run_qemu` and
//! `smplab_sim::simulate`. Everything else in the lab is tested without them.

use crate::point::Point;
use crate::runner::{prepare, RunError, Runner};
use smplab_record::host::KvmFacts;
use smplab_record::{Executor, RunRecord};
use std::path::PathBuf;
use std::time::Duration;

/// Runs points on this machine.
#[derive(Debug, Clone, Default)]
pub struct RealRunner {
    /// QEMU binary; `None`: `qemu-system-x86_64` on PATH.
    pub qemu_binary: Option<PathBuf>,
}

/// Host CPUs to pin to for a point's `pin` value (`none` → no pinning).
pub fn pin_cpus(pin: &str) -> Result<Option<Vec<usize>>, RunError> {
    match pin {
        "none" => Ok(None),
        // One thread / vCPU per host CPU, in order: the placement a
        // cache-aware scheduler would choose on a host this small.
        "pinned" => {
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            Ok(Some((0..n).collect()))
        }
        list => smplab_record::cpus::parse_cpu_list(list)
            .map(Some)
            .map_err(|e| RunError::Failed(format!("pin: {e}"))),
    }
}

fn on_path(binary: &str) -> bool {
    if binary.contains('/') {
        return std::path::Path::new(binary).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(binary).is_file()))
}

/// Why KVM cannot be used here, if it cannot. Honours smplab-vmm's
/// `SMPLAB_KVM_DEVICE` override, so tests can point it at a missing device.
pub fn kvm_unavailable() -> Option<String> {
    if let Some(dev) = std::env::var_os(smplab_vmm::vm::KVM_DEVICE_ENV) {
        let path = std::path::PathBuf::from(dev);
        return match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(_) => None,
            Err(e) => Some(format!(
                "{} (from {}) cannot be opened read-write: {e}",
                path.display(),
                smplab_vmm::vm::KVM_DEVICE_ENV
            )),
        };
    }
    let k = KvmFacts::detect();
    if !k.device_present {
        Some("/dev/kvm does not exist (load kvm_intel/kvm_amd, or run on a host with KVM)".into())
    } else if !k.device_usable {
        Some(
            "/dev/kvm exists but cannot be opened read-write (add yourself to the kvm group)"
                .into(),
        )
    } else {
        None
    }
}

impl RealRunner {
    fn qemu(&self) -> String {
        self.qemu_binary
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "qemu-system-x86_64".into())
    }

    fn run_guest(&self, point: &Point) -> Result<Vec<RunRecord>, RunError> {
        let (program, info) = prepare(point)?;
        let idle: smplab_guest::IdlePolicy = point
            .idle
            .as_deref()
            .unwrap_or("hlt")
            .parse()
            .map_err(|e: smplab_guest::BadIdlePolicy| RunError::Failed(e.to_string()))?;
        let sync: smplab_vmm::SyncMode = point
            .sync
            .as_deref()
            .unwrap_or("fine")
            .parse()
            .map_err(|e: smplab_vmm::UnknownSyncMode| RunError::Failed(e.to_string()))?;
        let opts = smplab_guest::VmRunOptions {
            vcpus: point.vcpus.unwrap_or(1),
            sync,
            idle,
            pin: pin_cpus(&point.pin)?,
            timeout: Duration::from_secs(point.timeout_s),
            qemu_binary: self.qemu_binary.clone(),
            ..Default::default()
        };
        let one = |vm: u32| -> Result<RunRecord, RunError> {
            let r = match point.executor {
                Executor::Qemu => smplab_guest::run_qemu(&program, info.clone(), &opts),
                _ => smplab_guest::run_vm(&program, info.clone(), &opts),
            };
            let mut r = r.map_err(|e| RunError::Failed(format!("VM {vm}: {e}")))?;
            r.set_config("lab_point", point.key());
            r.set_config("vm_index", vm);
            Ok(r)
        };
        if point.vms <= 1 {
            return Ok(vec![one(0)?]);
        }
        // K VMs at once, each on its own thread, like seed 000's consolidation runs.
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..point.vms).map(|vm| s.spawn(move || one(vm))).collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(RunError::Failed("VM thread panicked".into())))
                })
                .collect()
        })
    }
}

impl Runner for RealRunner {
    fn availability(&self, executor: Executor) -> Result<(), String> {
        match executor {
            Executor::Native => Ok(()),
            Executor::Vm => kvm_unavailable().map_or(Ok(()), Err),
            Executor::Qemu => {
                if let Some(k) = kvm_unavailable() {
                    return Err(k);
                }
                if on_path(&self.qemu()) {
                    Ok(())
                } else {
                    Err(format!(
                        "QEMU ({}) is not installed: apt-get install qemu-system-x86",
                        self.qemu()
                    ))
                }
            }
            Executor::Sim => crate::simglue::availability(),
        }
    }

    fn run(&self, point: &Point) -> Result<Vec<RunRecord>, RunError> {
        self.availability(point.executor)
            .map_err(RunError::Unavailable)?;
        match point.executor {
            Executor::Native => {
                let (program, info) = prepare(point)?;
                let opts = smplab_native::NativeOptions {
                    pin: pin_cpus(&point.pin)?,
                    timeout: Some(Duration::from_secs(point.timeout_s)),
                };
                let mut r = smplab_native::run(&program, info, &opts)
                    .map_err(|e| RunError::Failed(e.to_string()))?;
                r.set_config("lab_point", point.key());
                Ok(vec![r])
            }
            Executor::Vm | Executor::Qemu => self.run_guest(point),
            Executor::Sim => crate::simglue::run(point),
        }
    }
}

/// Wall time of smplab-vmm's port-read loop guest doing `reads` port reads on
/// one vCPU (set-up included; callers difference two read counts).
pub fn port_loop_wall_ns(reads: u32) -> Result<u64, String> {
    let prog = smplab_vmm::test_guest::GuestProgram {
        bsp_loops: reads,
        ..Default::default()
    };
    let mut cfg = smplab_vmm::VmConfig::new(smplab_vmm::KernelImage::Bytes(prog.elf()));
    cfg.console = smplab_vmm::ConsoleSink::Discard;
    cfg.timeout = Some(Duration::from_secs(120));
    let run = smplab_vmm::run_vm(&cfg).map_err(|e| e.to_string())?;
    Ok(run.wall.as_nanos() as u64)
}

/// Workload wall time of blackscholes on one vCPU with the guest timer at
/// `timer_hz` (0: tickless).
pub fn timer_probe_wall_ns(timer_hz: u32, scale: f64) -> Result<u64, String> {
    let src = smplab_workload::Source::resolve("blackscholes").map_err(|e| e.to_string())?;
    let program = src.instantiate(Some(1), scale).map_err(|e| e.to_string())?;
    let info = smplab_record::WorkloadInfo {
        name: "blackscholes".into(),
        source: "builtin".into(),
        n: 1,
        threads: program.total_threads(),
        params: Default::default(),
    };
    let opts = smplab_guest::VmRunOptions {
        vcpus: 1,
        timer_hz: Some(timer_hz),
        timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let r = smplab_guest::run_vm(&program, info, &opts).map_err(|e| e.to_string())?;
    Ok(r.timing.wall_ns)
}
