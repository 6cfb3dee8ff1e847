//! The real runner behind [`Runner`]: a [`Point`] through the one execute
//! path ([`crate::execute::execute`]). Everything else in the lab is tested
//! without it.

use crate::execute::{availability, execute, ExecuteError, RunLimits};
use crate::point::Point;
use crate::runner::{prepare, RunError, Runner};
use smplab_record::config::RunConfig;
use smplab_record::{Executor, RunRecord};
use std::path::PathBuf;
use std::time::Duration;

/// Runs points on this machine.
#[derive(Debug, Clone, Default)]
pub struct RealRunner {
    /// QEMU binary; `None`: `qemu-system-x86_64` on PATH.
    pub qemu_binary: Option<PathBuf>,
}

impl From<ExecuteError> for RunError {
    fn from(e: ExecuteError) -> RunError {
        if e.is_unavailable() {
            RunError::Unavailable(e.to_string())
        } else {
            RunError::Failed(e.to_string())
        }
    }
}

impl RealRunner {
    fn limits(&self, timeout_s: u64) -> RunLimits {
        RunLimits {
            timeout: Duration::from_secs(timeout_s.max(1)),
            show_console: false,
            qemu_binary: self.qemu_binary.clone(),
        }
    }
}

/// The configuration a point runs with: a simulator repetition gets its own
/// seed (repetition r runs seed 1 + r), so repetitions differ as measured
/// runs do.
pub fn run_config(point: &Point) -> RunConfig {
    let mut config = point.config.clone();
    if let RunConfig::Sim(s) = &mut config {
        s.seed = 1 + u64::from(point.rep);
    }
    config
}

impl Runner for RealRunner {
    fn availability(&self, executor: Executor) -> Result<(), crate::execute::ExecuteError> {
        availability(executor, &self.limits(1))
    }

    fn run(&self, point: &Point) -> Result<Vec<RunRecord>, RunError> {
        let (program, info) = prepare(point)?;
        let mut records = execute(
            &program,
            &info,
            &run_config(point),
            &self.limits(point.timeout_s),
        )?;
        for r in &mut records {
            r.set_config("lab_point", point.key());
        }
        Ok(records)
    }
}

/// Wall time of smplab-vmm's port-read loop guest doing `reads` port reads on
/// one vCPU (set-up included; callers difference two read counts).
pub fn port_loop_wall_ns(reads: u32) -> Result<u64, smplab_vmm::VmmError> {
    let prog = smplab_vmm::test_guest::GuestProgram {
        bsp_loops: reads,
        ..Default::default()
    };
    let mut cfg = smplab_vmm::VmConfig::new(smplab_vmm::KernelImage::Bytes(prog.elf()));
    cfg.console = smplab_vmm::ConsoleSink::Discard;
    cfg.timeout = Some(Duration::from_secs(120));
    let run = smplab_vmm::run_vm(&cfg)?;
    Ok(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX))
}

/// Workload wall time of blackscholes on one vCPU with the guest timer at
/// `timer_hz` (0: tickless).
pub fn timer_probe_wall_ns(timer_hz: u32, scale: f64) -> Result<u64, crate::calibrate::ProbeError> {
    let src = smplab_workload::Source::resolve("blackscholes")?;
    let program = src.instantiate(Some(1), scale)?;
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
    let r = smplab_guest::run_vm(&program, info, &opts)?;
    Ok(r.timing.wall_ns)
}
