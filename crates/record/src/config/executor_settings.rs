//! What every executor's settings answer, behind one trait: `RunConfig`'s
//! accessors dispatch through it once ([`super::RunConfig::settings`])
//! instead of matching every executor in every accessor. A setting an
//! executor does not have reads as `None` (and a `*_mut` as `None`), so a
//! caller can tell "not taken" from "default" without naming executors.

use super::{
    ConfigError, GuestSettings, IdlePolicy, IoThreadCpus, IrqAffinity, Irqchip, LinuxGuestSettings,
    NativeSettings, Placement, QemuSettings, SimSettings, SyncMode, VmSettings,
};
use crate::Executor;

/// The settings of one executor. Only the settings it has are `Some`.
pub trait ExecutorSettings {
    /// The executor these settings are for.
    fn executor(&self) -> Executor;

    /// The smplab guest's settings, for executors that boot it.
    fn guest(&self) -> Option<&GuestSettings> {
        None
    }
    fn guest_mut(&mut self) -> Option<&mut GuestSettings> {
        None
    }

    /// The Linux guest's settings, for executors that boot a Linux kernel.
    fn linux_guest(&self) -> Option<&LinuxGuestSettings> {
        None
    }
    fn linux_guest_mut(&mut self) -> Option<&mut LinuxGuestSettings> {
        None
    }

    /// Whether the executor runs workload models (`Program`s).
    fn runs_models(&self) -> bool {
        true
    }

    /// Whether the executor runs real programs (an argv) as they are.
    fn runs_real_programs(&self) -> bool {
        false
    }

    /// Where the vCPUs (or native threads) run.
    fn placement(&self) -> &Placement;
    fn placement_mut(&mut self) -> &mut Placement;

    /// CPUs of the thread that completes device requests.
    fn io_thread_cpus(&self) -> &IoThreadCpus;
    /// `None` where smplab cannot place that thread (QEMU runs its own).
    fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus>;

    /// vCPUs per VM; `None`: no VMs.
    fn vcpus(&self) -> Option<u32> {
        self.guest().map(|g| g.vcpus)
    }
    fn vcpus_mut(&mut self) -> Option<&mut u32> {
        self.guest_mut().map(|g| &mut g.vcpus)
    }

    /// VMs at once; `None`: no VMs.
    fn vms(&self) -> Option<u32> {
        self.guest().map(|g| g.vms)
    }
    fn vms_mut(&mut self) -> Option<&mut u32> {
        self.guest_mut().map(|g| &mut g.vms)
    }

    /// The guest idle policy.
    fn idle(&self) -> Option<IdlePolicy> {
        self.guest().map(|g| g.idle)
    }
    fn idle_mut(&mut self) -> Option<&mut IdlePolicy> {
        self.guest_mut().map(|g| &mut g.idle)
    }

    /// Guest routing of device interrupts.
    fn irq_affinity(&self) -> Option<&IrqAffinity> {
        self.guest().map(|g| &g.irq_affinity)
    }
    fn irq_affinity_mut(&mut self) -> Option<&mut IrqAffinity> {
        self.guest_mut().map(|g| &mut g.irq_affinity)
    }

    /// The device sync mode, where the executor has one.
    fn sync(&self) -> Option<SyncMode> {
        None
    }
    fn sync_mut(&mut self) -> Option<&mut SyncMode> {
        None
    }

    /// Where the interrupt controllers are emulated (smplab-vmm only).
    fn irqchip(&self) -> Option<Irqchip> {
        None
    }

    /// The simulator's platform profile.
    fn platform(&self) -> Option<&str> {
        None
    }

    /// Whether the placement and I/O thread name this host's CPUs (not
    /// modelled ones).
    fn uses_host_cpus(&self) -> bool {
        true
    }

    /// Host CPUs one run occupies, for a workload of `threads` threads.
    fn host_cpus_used(&self, threads: u32) -> u32 {
        match (self.vcpus(), self.vms()) {
            (Some(vcpus), Some(vms)) => vcpus.max(1) * vms.max(1),
            _ => threads.max(1),
        }
    }

    /// Every problem with these settings (see `RunConfig::validate`).
    fn validate(&self, threads: Option<u32>, problems: &mut Vec<ConfigError>);

    /// Label parts of the executor's own settings, after the sync mode.
    fn label_own(&self, _parts: &mut Vec<String>) {}

    /// Label parts of the executor's own settings, at the end.
    fn label_tail(&self, _parts: &mut Vec<String>) {}
}

impl ExecutorSettings for NativeSettings {
    fn executor(&self) -> Executor {
        Executor::Native
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.placement
    }
    fn io_thread_cpus(&self) -> &IoThreadCpus {
        &self.io_thread_cpus
    }
    fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus> {
        Some(&mut self.io_thread_cpus)
    }
    /// The same program natively is the baseline of a Linux run.
    fn runs_real_programs(&self) -> bool {
        true
    }
    // A CPU the host lacks is found when the run starts (`check_host_cpus`,
    // status 5): a spec may run on another host.
    fn validate(&self, _threads: Option<u32>, _problems: &mut Vec<ConfigError>) {}
}

impl ExecutorSettings for VmSettings {
    fn executor(&self) -> Executor {
        Executor::Vm
    }
    fn guest(&self) -> Option<&GuestSettings> {
        Some(&self.guest)
    }
    fn guest_mut(&mut self) -> Option<&mut GuestSettings> {
        Some(&mut self.guest)
    }
    fn placement(&self) -> &Placement {
        &self.guest.placement
    }
    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.guest.placement
    }
    fn io_thread_cpus(&self) -> &IoThreadCpus {
        &self.guest.io_thread_cpus
    }
    fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus> {
        Some(&mut self.guest.io_thread_cpus)
    }
    fn sync(&self) -> Option<SyncMode> {
        Some(self.sync)
    }
    fn sync_mut(&mut self) -> Option<&mut SyncMode> {
        Some(&mut self.sync)
    }
    fn irqchip(&self) -> Option<Irqchip> {
        Some(self.irqchip)
    }
    fn validate(&self, threads: Option<u32>, p: &mut Vec<ConfigError>) {
        self.guest.validate(threads, p);
        // A user-level host scheduler knows which vCPU runs and keeps the
        // guest's routing pointed at one (smplab_vmm::host::actuate).
        if !self.knows_running_vcpus() {
            self.guest.refuse_running_affinity(p);
        }
        self.validate_vmm(p);
    }
    fn label_own(&self, parts: &mut Vec<String>) {
        if self.irqchip != Irqchip::default() {
            parts.push(format!("irqchip={}", self.irqchip));
        }
        if self.vmm_halt_poll_ns > 0 {
            parts.push(format!("vmm-halt-poll={}", self.vmm_halt_poll_ns));
        }
        if let Some(h) = self.host_policy {
            parts.push(format!("host={h}"));
        }
        if let Some(pinned) = self.host_pinned {
            parts.push(
                if pinned {
                    "host-pinned"
                } else {
                    "host-floating"
                }
                .to_string(),
            );
        }
        if self.host_tuner {
            parts.push("tuner".to_string());
        }
        if let Some(ns) = self.host_sample_ns {
            parts.push(format!("sample={ns}ns"));
        }
    }
}

impl ExecutorSettings for QemuSettings {
    fn executor(&self) -> Executor {
        Executor::Qemu
    }
    fn guest(&self) -> Option<&GuestSettings> {
        Some(&self.guest)
    }
    fn guest_mut(&mut self) -> Option<&mut GuestSettings> {
        Some(&mut self.guest)
    }
    fn placement(&self) -> &Placement {
        &self.guest.placement
    }
    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.guest.placement
    }
    fn io_thread_cpus(&self) -> &IoThreadCpus {
        &self.guest.io_thread_cpus
    }
    fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus> {
        None
    }
    fn validate(&self, threads: Option<u32>, p: &mut Vec<ConfigError>) {
        self.guest.validate(threads, p);
        self.guest.refuse_running_affinity(p);
        if !self.guest.io_thread_cpus.is_float() {
            p.push(ConfigError::new(
                "io_thread_cpus",
                "QEMU runs its own I/O threads; smplab cannot pin them (use --executor vm)",
            ));
        }
    }
}

impl ExecutorSettings for SimSettings {
    fn executor(&self) -> Executor {
        Executor::Sim
    }
    fn placement(&self) -> &Placement {
        &self.placement
    }
    fn placement_mut(&mut self) -> &mut Placement {
        &mut self.placement
    }
    fn io_thread_cpus(&self) -> &IoThreadCpus {
        &self.io_thread_cpus
    }
    fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus> {
        Some(&mut self.io_thread_cpus)
    }
    fn vcpus(&self) -> Option<u32> {
        Some(self.vcpus)
    }
    fn vcpus_mut(&mut self) -> Option<&mut u32> {
        Some(&mut self.vcpus)
    }
    fn vms(&self) -> Option<u32> {
        Some(self.vms)
    }
    fn vms_mut(&mut self) -> Option<&mut u32> {
        Some(&mut self.vms)
    }
    fn idle(&self) -> Option<IdlePolicy> {
        Some(self.idle)
    }
    fn idle_mut(&mut self) -> Option<&mut IdlePolicy> {
        Some(&mut self.idle)
    }
    fn irq_affinity(&self) -> Option<&IrqAffinity> {
        Some(&self.irq_affinity)
    }
    fn irq_affinity_mut(&mut self) -> Option<&mut IrqAffinity> {
        Some(&mut self.irq_affinity)
    }
    fn sync(&self) -> Option<SyncMode> {
        Some(self.sync)
    }
    fn sync_mut(&mut self) -> Option<&mut SyncMode> {
        Some(&mut self.sync)
    }
    fn platform(&self) -> Option<&str> {
        Some(&self.platform)
    }
    /// Modelled pCPUs, not this host's.
    fn uses_host_cpus(&self) -> bool {
        false
    }
    /// The simulator is single-threaded.
    fn host_cpus_used(&self, _threads: u32) -> u32 {
        1
    }
    fn validate(&self, _threads: Option<u32>, p: &mut Vec<ConfigError>) {
        self.validate_model(p);
    }
    fn label_tail(&self, parts: &mut Vec<String>) {
        parts.push(self.platform.clone());
        if let Some(ple) = self.ple {
            parts.push(format!("ple={ple}"));
        }
        if self.apicv {
            parts.push("apicv".into());
        }
        if self.sdb {
            parts.push("sdb".into());
        }
        if self.policy != super::HostPolicy::default() {
            parts.push(self.policy.to_string());
        }
    }
}
