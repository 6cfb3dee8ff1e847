//! Runs of the smplab guest kernel: in smplab-vmm (`vm`, K VMs on their own
//! threads, or under a host vCPU policy in one process: `host.rs`) and in
//! QEMU (`qemu`).

use super::{Execute, ExecuteError, RunLimits};
use crate::availability::{kvm_unavailable, on_path};
use smplab_record::config::{GuestSettings, QemuSettings, VmSettings};
use smplab_record::{exit, RunRecord, WorkloadInfo};
use smplab_workload::Program;
use std::time::Duration;

/// smplab-vmm needs a usable /dev/kvm.
pub(super) fn vm_availability(_limits: &RunLimits) -> Result<(), (String, i32)> {
    kvm_unavailable().map_or(Ok(()), |r| Err((r, exit::KVM_UNAVAILABLE)))
}

/// QEMU needs a usable /dev/kvm and its binary.
pub(super) fn qemu_availability(limits: &RunLimits) -> Result<(), (String, i32)> {
    vm_availability(limits)?;
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

/// Which VMM boots the smplab guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Vmm {
    /// smplab-vmm (`vm`).
    Smplab,
    /// QEMU with KVM (`qemu`).
    Qemu,
}

impl Execute for VmSettings {
    fn run(
        &self,
        program: &Program,
        info: &WorkloadInfo,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<Vec<RunRecord>, ExecuteError> {
        if self.host_policy.is_some() {
            return super::host::run(program, info, self, limits, host_cores);
        }
        let mut opts = guest_options(&self.guest, limits, host_cores);
        opts.sync = self.sync;
        opts.irqchip = self.irqchip;
        opts.vmm_halt_poll = Duration::from_nanos(self.vmm_halt_poll_ns);
        run_guests(program, info, &self.guest, &opts, Vmm::Smplab)
    }
}

impl Execute for QemuSettings {
    fn run(
        &self,
        program: &Program,
        info: &WorkloadInfo,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<Vec<RunRecord>, ExecuteError> {
        let opts = guest_options(&self.guest, limits, host_cores);
        run_guests(program, info, &self.guest, &opts, Vmm::Qemu)
    }
}

fn guest_options(
    g: &GuestSettings,
    limits: &RunLimits,
    host_cores: usize,
) -> smplab_guest::VmRunOptions {
    smplab_guest::VmRunOptions {
        vcpus: g.vcpus,
        idle: g.idle,
        pin: g.placement.cpus(host_cores),
        timeout: limits.timeout,
        show_console: limits.show_console,
        timer_hz: g.timer_hz,
        mem_bytes: g.mem_bytes,
        qemu_binary: limits.qemu_binary.clone(),
        irq_affinity: g.irq_affinity.clone(),
        io_thread_cpus: g.io_thread_cpus.0.clone(),
        ..Default::default()
    }
}

/// One guest, or K at once on their own threads (Ding & Shan's consolidation
/// runs).
///
/// smplab-vmm VMs share one [`smplab_guest::StartGate`]: each guest boots,
/// creates its workers and waits until every sibling is ready, so the K
/// workloads start together instead of one boot time apart. QEMU has no such
/// gate (its guests release their own workers, and their windows are on each
/// guest's own TSC, so their overlap cannot be computed either): the record
/// says `start_gate = "none"`. After the runs, each record gets
/// `window_overlap`, the fraction of the union of the K workload windows
/// during which all K ran ([`smplab_record::overlap_of_records`]), or
/// `window_overlap_error` when it cannot be computed.
fn run_guests(
    program: &Program,
    info: &WorkloadInfo,
    g: &GuestSettings,
    opts: &smplab_guest::VmRunOptions,
    vmm: Vmm,
) -> Result<Vec<RunRecord>, ExecuteError> {
    let gate = (g.vms > 1 && vmm == Vmm::Smplab)
        .then(|| smplab_guest::StartGate::new(g.vms as usize, gate_max_wait(opts.timeout)));
    let one = |vm: u32| -> Result<RunRecord, ExecuteError> {
        let r = match vmm {
            Vmm::Qemu => smplab_guest::run_qemu(program, info.clone(), opts),
            Vmm::Smplab => {
                let mut opts = opts.clone();
                opts.start_gate = gate.clone();
                smplab_guest::run_vm(program, info.clone(), &opts)
            }
        };
        let mut r = r.map_err(|source| ExecuteError::Guest {
            vm: (g.vms > 1).then_some(vm),
            source,
        })?;
        r.set_config("vm_index", vm);
        Ok(r)
    };
    if g.vms <= 1 {
        return Ok(vec![one(0)?]);
    }
    let mut records = std::thread::scope(|s| {
        let handles: Vec<_> = (0..g.vms).map(|vm| s.spawn(move || one(vm))).collect();
        handles
            .into_iter()
            .zip(0..)
            .map(|(h, vm)| h.join().unwrap_or(Err(ExecuteError::Panicked(vm))))
            .collect::<Result<Vec<_>, _>>()
    })?;
    let overlap = smplab_record::overlap_of_records(&records);
    for r in &mut records {
        if gate.is_none() {
            r.set_config("start_gate", "none");
        }
        match &overlap {
            Ok(x) => r.set_config("window_overlap", *x),
            Err(e) => r.set_config("window_overlap_error", e.to_string()),
        }
    }
    Ok(records)
}

/// How long the first VM at the start gate waits for its siblings: their
/// boots run in parallel, so a quarter of the run's time limit is far more
/// than any boot spread and still leaves the run most of its time.
fn gate_max_wait(timeout: Duration) -> Duration {
    timeout / 4
}
