//! Probes of this host that calibration measures directly, outside any spec:
//! the cost of a port-I/O exit and of a guest timer tick.

use std::time::Duration;

/// Why a direct probe run (outside the lab runner) failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Workload(#[from] smplab_workload::WorkloadError),
    #[error(transparent)]
    Guest(#[from] smplab_guest::GuestError),
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
pub fn timer_probe_wall_ns(timer_hz: u32, scale: f64) -> Result<u64, ProbeError> {
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
