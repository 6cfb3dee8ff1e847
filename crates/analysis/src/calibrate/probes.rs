//! The one probe calibration runs outside the execute path: the cost of a
//! port-I/O exit, measured with smplab-vmm's hand-assembled test guest (a
//! loop of port reads, no workload), which no run configuration describes.
//! Every other calibration run is a point through the one execute path.

use std::time::Duration;

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
