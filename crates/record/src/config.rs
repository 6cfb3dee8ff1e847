//! The run configuration: how one workload instance runs, for every executor.
//!
//! One type per setting, with one default, one parser (`FromStr`), one printed
//! form (`Display`, which `FromStr` reads back) and one validation, used by the
//! command line, lab specs, the simulator's own specs and the record alike. A
//! setting travels typed from where a user wrote it to the record: no crate
//! parses a setting's string again.
//!
//! [`RunConfig`] is an enum over the executors, each variant holding exactly
//! the settings that executor honours, so a setting cannot be silently
//! dropped: an executor that cannot do something has no field for it, and
//! [`RunConfig::validate`] rejects values an executor's variant holds but
//! cannot honour (e.g. more vCPUs than the guest kernel supports). Its serde
//! form is stored in every record and is the results store's key.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Serde as the printed form (`Display` / `FromStr`): the settings' one
/// text form is also their serde form. Defined before the submodules so
/// they all use this one copy.
macro_rules! serde_as_string {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

mod executor_settings;
mod host_policy;
pub mod io;
pub mod linux;
pub mod settings;
mod timeout;

pub use executor_settings::ExecutorSettings;
pub use host_policy::{parse_duration, BadDuration, Decider, HostPolicy, PolicyKind};
pub use io::{BadIoThreadCpus, BadIrqAffinity, IoThreadCpus, IrqAffinity};
pub use linux::{
    BadQemuMachine, LinuxGuestSettings, LinuxQemuSettings, LinuxSettings, QemuMachine,
    LINUX_KERNEL_ENV,
};
pub use settings::{
    BadIdlePolicy, BadIrqchip, BadPlacement, BadPle, IdlePolicy, Irqchip, Placement, Ple, SyncMode,
    UnknownSyncMode, MAX_VMM_HALT_POLL_NS,
};
pub use timeout::{BadTimeout, Timeout, DEFAULT_TIMEOUT};

/// Most vCPUs the smplab guest kernel supports (smplab-vmm and QEMU).
pub const MAX_GUEST_VCPUS: u32 = 64;
/// Most workload threads the smplab guest kernel supports.
pub const MAX_GUEST_THREADS: u32 = 511;
/// Most vCPUs of one simulated VM.
pub const MAX_SIM_VCPUS: u32 = 4096;
/// Most VMs one run may start at once (real VMs).
pub const MAX_REAL_VMS: u32 = 64;
/// Most VMs one simulation may hold.
pub const MAX_SIM_VMS: u32 = 4096;
/// Highest guest scheduler tick the guest kernel accepts.
pub const MAX_TIMER_HZ: u32 = 5000;
/// Guest-physical memory the guest can use (its identity map covers 1 GiB).
pub const MAX_GUEST_MEM_BYTES: u64 = 1 << 30;
/// Least guest memory the guest boots with.
pub const MIN_GUEST_MEM_BYTES: u64 = 64 << 20;
/// The platform profile simulator points use unless told otherwise.
pub const DEFAULT_PLATFORM: &str = "pvm-here";

/// Which executor runs the workload, and its settings.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "executor", rename_all = "lowercase")]
pub enum RunConfig {
    /// Host threads on this machine.
    Native(NativeSettings),
    /// The smplab guest kernel in smplab-vmm.
    Vm(VmSettings),
    /// The smplab guest kernel in QEMU with KVM.
    Qemu(QemuSettings),
    /// The discrete-event simulator.
    Sim(SimSettings),
    /// A Linux kernel in smplab-vmm running a real program.
    Linux(LinuxSettings),
    /// The same Linux kernel and initramfs in QEMU with KVM.
    #[serde(rename = "linux-qemu")]
    LinuxQemu(LinuxQemuSettings),
}

/// Settings of a native run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeSettings {
    #[serde(default, skip_serializing_if = "Placement::is_float")]
    pub placement: Placement,
    /// CPUs of the device stand-in's completion thread (`io` ops).
    #[serde(default, skip_serializing_if = "IoThreadCpus::is_float")]
    pub io_thread_cpus: IoThreadCpus,
}

/// Settings of the smplab guest, whichever VMM boots it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuestSettings {
    pub vcpus: u32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub idle: IdlePolicy,
    /// smplab-vmm: vCPU i on the i-th CPU; QEMU: confined to the set.
    #[serde(default, skip_serializing_if = "Placement::is_float")]
    pub placement: Placement,
    /// VMs running the workload at the same time (each its own instance).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub vms: u32,
    /// Guest scheduler tick in Hz, 0 = tickless. `None`: tickless when
    /// threads <= vCPUs, else 250 Hz (so a spinning thread cannot starve one
    /// queued behind it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer_hz: Option<u32>,
    /// Guest memory; `None` sizes it from the program (at least 64 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// Guest IOAPIC routing of device interrupts (`io` ops).
    #[serde(default, skip_serializing_if = "is_default")]
    pub irq_affinity: IrqAffinity,
    /// CPUs of the VMM thread that completes device requests.
    #[serde(default, skip_serializing_if = "IoThreadCpus::is_float")]
    pub io_thread_cpus: IoThreadCpus,
}

/// Shortest host-run sampling interval (as `smplab host` specs allow).
pub const MIN_HOST_SAMPLE_NS: u64 = 100_000;
/// Longest host-run sampling interval.
pub const MAX_HOST_SAMPLE_NS: u64 = 1_000_000_000;

/// Settings of a smplab-vmm run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmSettings {
    #[serde(flatten)]
    pub guest: GuestSettings,
    #[serde(default)]
    pub sync: SyncMode,
    /// Interrupt controllers: KVM's (`kernel`) or smplab-vmm's models (`user`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub irqchip: Irqchip,
    /// With `irqchip = user`: how long a halted vCPU thread polls for an
    /// interrupt before it sleeps, in ns (0 = no polling).
    #[serde(default, skip_serializing_if = "is_default")]
    pub vmm_halt_poll_ns: u64,
    /// Run the `vms` VMs in one smplab-vmm process under this host vCPU
    /// policy, as `smplab host` does (docs/host.md): one record per VM, each
    /// with the host's section (`RunRecord::host_run`). `None`: independent
    /// VMs, the host kernel schedules their vCPU threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_policy: Option<HostPolicy>,
    /// Host runs: vCPU i of every VM on host CPU i (`Some(true)`) or
    /// floating (`Some(false)`): the vCPU threads' affinity under `linux`,
    /// the scheduler's per-vCPU affinity under a user-level policy. `None`:
    /// the policy's default (`linux` pinned, a user-level policy floating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_pinned: Option<bool>,
    /// Host runs under a user-level policy: Kulkarni & Kulkarni's tuner sets the slice,
    /// vCPU and interrupt affinity at run time (docs/host.md), starting from
    /// the policy's.
    #[serde(default, skip_serializing_if = "is_default")]
    pub host_tuner: bool,
    /// Host runs: the scheduler's sampling interval, ns; `None`: smplab-vmm's
    /// default (1 ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_sample_ns: Option<u64>,
}

impl VmSettings {
    /// A smplab-vmm run of `guest` in `sync` mode, the other settings at
    /// their defaults (in-kernel irqchip).
    pub fn new(guest: GuestSettings, sync: SyncMode) -> VmSettings {
        VmSettings {
            guest,
            sync,
            irqchip: Irqchip::default(),
            vmm_halt_poll_ns: 0,
            host_policy: None,
            host_pinned: None,
            host_tuner: false,
            host_sample_ns: None,
        }
    }

    /// A host run under a user-level policy: its scheduler can keep the
    /// guest's routing page on the VM's running vCPUs (`irq_affinity =
    /// running`, vBalance).
    pub(crate) fn knows_running_vcpus(&self) -> bool {
        self.host_policy.is_some_and(|h| h.is_user_level())
    }

    fn validate_vmm(&self, p: &mut Vec<ConfigError>) {
        if let Some(h) = self.host_policy {
            if h.kind.decider() == Decider::SimulatedKernel {
                p.push(ConfigError::new(
                    "host_policy",
                    "fair is the simulator's model of a kernel scheduler: a real host runs linux (its kernel decides) or a user-level policy such as rr",
                ));
            }
        }
        if self.host_policy.is_none()
            && (self.host_pinned.is_some() || self.host_tuner || self.host_sample_ns.is_some())
        {
            p.push(ConfigError::new(
                "host_policy",
                "host_pinned, host_tuner and host_sample_ns apply to host runs only: give a host_policy",
            ));
        }
        if let Some(ns) = self.host_sample_ns {
            check_range(
                p,
                "host_sample_ns",
                ns,
                MIN_HOST_SAMPLE_NS,
                MAX_HOST_SAMPLE_NS,
                "below 100us sampling costs more in exits than it can save; above 1s it sees nothing",
            );
        }
        if self.host_tuner && !self.knows_running_vcpus() {
            p.push(ConfigError::new(
                "host_policy",
                "the tuner adapts a user-level policy: use rr, gang, partition, spin or rrvm with host_tuner",
            ));
        }
        if self.host_policy.is_some() {
            if self.irqchip != Irqchip::default() {
                p.push(ConfigError::new(
                    "host_policy",
                    "host runs use KVM's in-kernel irqchip: drop irqchip = user",
                ));
            }
            if self.guest.timer_hz.is_some() || self.guest.mem_bytes.is_some() {
                p.push(ConfigError::new(
                    "host_policy",
                    "host runs size the guest and its tick themselves: drop timer_hz and mem_bytes",
                ));
            }
        }
        if self.vmm_halt_poll_ns > 0 && self.irqchip != Irqchip::User {
            p.push(ConfigError::new(
                "vmm_halt_poll_ns",
                "the VMM halts vCPUs only with irqchip = user (KVM's in-kernel irqchip halts them in the kernel, with the host's halt_poll_ns)",
            ));
        }
        check_range(
            p,
            "vmm_halt_poll_ns",
            self.vmm_halt_poll_ns,
            0,
            MAX_VMM_HALT_POLL_NS,
            "a longer poll is a busy vCPU",
        );
    }
}

/// Settings of a QEMU run (QEMU has its own device locking: no sync mode).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QemuSettings {
    #[serde(flatten)]
    pub guest: GuestSettings,
}

/// Settings of a simulated run: the modelled VMs and the modelled host.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimSettings {
    pub vcpus: u32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub idle: IdlePolicy,
    /// `Float`, `Spread` (vCPU i on its own pCPU) or a contiguous CPU range.
    #[serde(default, skip_serializing_if = "Placement::is_float")]
    pub placement: Placement,
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub vms: u32,
    /// Device-model synchronization (the Seoul thesis), modelled for device exits.
    #[serde(default)]
    pub sync: SyncMode,
    /// Platform profile: a built-in name or a profile file's path.
    pub platform: String,
    /// Host pCPUs; `None`: as many as one VM has vCPUs (Ding & Shan's set-up, so
    /// several VMs overcommit the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcpus: Option<u32>,
    /// Pause-loop exiting; `None`: what the platform has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ple: Option<Ple>,
    /// APIC virtualization.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apicv: bool,
    /// The Spin Detection Buffer with spin-triggered preemption (Wells et al. (spin management)).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sdb: bool,
    /// The host's halt-polling window (KVM `halt_poll_ns`); `None`: the
    /// platform's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_halt_poll_ns: Option<u64>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub policy: HostPolicy,
    /// Guest IOAPIC routing of device interrupts (`io` ops).
    #[serde(default, skip_serializing_if = "is_default")]
    pub irq_affinity: IrqAffinity,
    /// Modelled pCPUs of the host thread that completes device requests.
    #[serde(default, skip_serializing_if = "IoThreadCpus::is_float")]
    pub io_thread_cpus: IoThreadCpus,
    /// Random seed (a simulation is deterministic for a seed).
    #[serde(default = "one_u64", skip_serializing_if = "is_one_u64")]
    pub seed: u64,
}

fn one() -> u32 {
    1
}
fn is_one(v: &u32) -> bool {
    *v == 1
}
fn one_u64() -> u64 {
    1
}
fn is_one_u64(v: &u64) -> bool {
    *v == 1
}
fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl GuestSettings {
    /// A guest with `vcpus` vCPUs and every other setting at its default.
    pub fn new(vcpus: u32) -> GuestSettings {
        GuestSettings {
            vcpus,
            idle: IdlePolicy::default(),
            placement: Placement::default(),
            vms: 1,
            timer_hz: None,
            mem_bytes: None,
            irq_affinity: IrqAffinity::default(),
            io_thread_cpus: IoThreadCpus::default(),
        }
    }
}

impl SimSettings {
    /// A simulated VM with `vcpus` vCPUs on `platform`, defaults elsewhere.
    pub fn new(vcpus: u32, platform: impl Into<String>) -> SimSettings {
        SimSettings {
            vcpus,
            idle: IdlePolicy::default(),
            placement: Placement::default(),
            vms: 1,
            sync: SyncMode::default(),
            platform: platform.into(),
            pcpus: None,
            ple: None,
            apicv: false,
            sdb: false,
            host_halt_poll_ns: None,
            policy: HostPolicy::default(),
            irq_affinity: IrqAffinity::default(),
            io_thread_cpus: IoThreadCpus::default(),
            seed: 1,
        }
    }
}

/// A setting an executor cannot honour, or a value out of range. `setting`
/// names the flag or spec key it came from, so a spec can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct ConfigError {
    pub setting: &'static str,
    pub message: String,
}

impl ConfigError {
    fn new(setting: &'static str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            setting,
            message: message.into(),
        }
    }
}

fn check_range(
    problems: &mut Vec<ConfigError>,
    setting: &'static str,
    value: u64,
    lo: u64,
    hi: u64,
    why: &str,
) {
    if !(lo..=hi).contains(&value) {
        problems.push(ConfigError::new(
            setting,
            format!("{value} is out of range: use {lo}..={hi} ({why})"),
        ));
    }
}

impl RunConfig {
    /// The executor's settings, behind the one trait every executor's
    /// settings implement: the only match over the variants besides
    /// [`RunConfig::settings_mut`] and [`RunConfig::defaults`].
    pub fn settings(&self) -> &dyn ExecutorSettings {
        match self {
            RunConfig::Native(s) => s,
            RunConfig::Vm(s) => s,
            RunConfig::Qemu(s) => s,
            RunConfig::Sim(s) => s,
            RunConfig::Linux(s) => s,
            RunConfig::LinuxQemu(s) => s,
        }
    }

    /// The executor's settings, to change.
    pub fn settings_mut(&mut self) -> &mut dyn ExecutorSettings {
        match self {
            RunConfig::Native(s) => s,
            RunConfig::Vm(s) => s,
            RunConfig::Qemu(s) => s,
            RunConfig::Sim(s) => s,
            RunConfig::Linux(s) => s,
            RunConfig::LinuxQemu(s) => s,
        }
    }

    /// `executor` with `vcpus` vCPUs (where it has vCPUs) and every other
    /// setting at its default; `platform` is the simulator's profile.
    pub fn defaults(executor: crate::Executor, vcpus: u32, platform: &str) -> RunConfig {
        use crate::Executor;
        match executor {
            Executor::Native => RunConfig::Native(NativeSettings::default()),
            Executor::Vm => RunConfig::Vm(VmSettings::new(
                GuestSettings::new(vcpus),
                SyncMode::default(),
            )),
            Executor::Qemu => RunConfig::Qemu(QemuSettings {
                guest: GuestSettings::new(vcpus),
            }),
            Executor::Sim => RunConfig::Sim(SimSettings::new(vcpus, platform)),
            Executor::Linux => RunConfig::Linux(LinuxSettings {
                guest: LinuxGuestSettings::new(vcpus),
                sync: SyncMode::default(),
                irqchip: Irqchip::default(),
            }),
            Executor::LinuxQemu => RunConfig::LinuxQemu(LinuxQemuSettings {
                guest: LinuxGuestSettings::new(vcpus),
                machine: QemuMachine::default(),
            }),
        }
    }

    /// The executor this configuration runs on.
    pub fn executor(&self) -> crate::Executor {
        self.settings().executor()
    }

    /// The guest settings of a run that boots the smplab guest.
    pub fn guest(&self) -> Option<&GuestSettings> {
        self.settings().guest()
    }

    /// The Linux guest's settings of a run that boots a Linux kernel.
    pub fn linux_guest(&self) -> Option<&LinuxGuestSettings> {
        self.settings().linux_guest()
    }

    /// Whether this executor runs workload models.
    pub fn runs_models(&self) -> bool {
        self.settings().runs_models()
    }

    /// Whether this executor runs real programs.
    pub fn runs_real_programs(&self) -> bool {
        self.settings().runs_real_programs()
    }

    /// vCPUs per VM (`None` for native).
    pub fn vcpus(&self) -> Option<u32> {
        self.settings().vcpus()
    }

    /// VMs running at once (1 for native).
    pub fn vms(&self) -> u32 {
        self.settings().vms().unwrap_or(1)
    }

    /// Set the number of VMs run at once (a native run has no VMs).
    pub fn set_vms(&mut self, vms: u32) {
        if let Some(v) = self.settings_mut().vms_mut() {
            *v = vms;
        }
    }

    /// Set the vCPUs per VM (a native run has no vCPUs).
    pub fn set_vcpus(&mut self, vcpus: u32) {
        if let Some(v) = self.settings_mut().vcpus_mut() {
            *v = vcpus;
        }
    }

    /// Set the placement.
    pub fn set_placement(&mut self, placement: Placement) {
        *self.settings_mut().placement_mut() = placement;
    }

    /// Set the guest idle policy (a native run has no guest).
    pub fn set_idle(&mut self, idle: IdlePolicy) {
        if let Some(v) = self.settings_mut().idle_mut() {
            *v = idle;
        }
    }

    /// Set the device sync mode, where the executor has one.
    pub fn set_sync(&mut self, sync: SyncMode) {
        if let Some(v) = self.settings_mut().sync_mut() {
            *v = sync;
        }
    }

    /// The simulator's platform profile (`None` for real executors).
    pub fn platform(&self) -> Option<&str> {
        self.settings().platform()
    }

    /// The placement setting.
    pub fn placement(&self) -> &Placement {
        self.settings().placement()
    }

    /// The guest idle policy (`None` for native).
    pub fn idle(&self) -> Option<IdlePolicy> {
        self.settings().idle()
    }

    /// The guest interrupt affinity (`None` for native).
    pub fn irq_affinity(&self) -> Option<&IrqAffinity> {
        self.settings().irq_affinity()
    }

    /// Set the guest interrupt affinity (a native run has no guest).
    pub fn set_irq_affinity(&mut self, a: IrqAffinity) {
        if let Some(v) = self.settings_mut().irq_affinity_mut() {
            *v = a;
        }
    }

    /// The CPUs of the thread completing device requests.
    pub fn io_thread_cpus(&self) -> &IoThreadCpus {
        self.settings().io_thread_cpus()
    }

    /// Set the CPUs of the thread completing device requests.
    pub fn set_io_thread_cpus(&mut self, cpus: IoThreadCpus) {
        if let Some(v) = self.settings_mut().io_thread_cpus_mut() {
            *v = cpus;
        }
    }

    /// Where the interrupt controllers are emulated (smplab-vmm only).
    pub fn irqchip(&self) -> Option<Irqchip> {
        self.settings().irqchip()
    }

    /// The device sync mode, where the executor has one.
    pub fn sync(&self) -> Option<SyncMode> {
        self.settings().sync()
    }

    /// Every problem with this configuration that does not depend on the host
    /// or the workload. `threads` is the workload's total thread count, when
    /// known, checked against what the executor supports.
    pub fn validate(&self, threads: Option<u32>) -> Result<(), Vec<ConfigError>> {
        let mut p = Vec::new();
        self.settings().validate(threads, &mut p);
        if p.is_empty() {
            Ok(())
        } else {
            Err(p)
        }
    }

    /// Check the host CPUs a placement names exist on a host with `cores`
    /// logical CPUs (a run-time check: a spec may be run on another host).
    pub fn check_host_cpus(&self, cores: usize) -> Result<(), crate::cpus::CpuListError> {
        if !self.settings().uses_host_cpus() {
            return Ok(());
        }
        crate::cpus::check_cpus_exist(&self.io_thread_cpus().0, cores)?;
        match self.placement() {
            Placement::Cpus(cpus) => crate::cpus::check_cpus_exist(cpus, cores),
            _ => Ok(()),
        }
    }

    /// A short label of the settings that differ from their defaults.
    pub fn label(&self) -> String {
        let s = self.settings();
        let mut parts: Vec<String> = Vec::new();
        if let Some(v) = s.vcpus() {
            parts.push(format!("{v}vcpu"));
        }
        if self.vms() > 1 {
            parts.push(format!("×{}vm", self.vms()));
        }
        if let Some(sync) = s.sync() {
            parts.push(sync.to_string());
        }
        s.label_own(&mut parts);
        if let Some(i) = s.idle() {
            parts.push(i.to_string());
        }
        if !s.placement().is_float() {
            parts.push(format!("pin={}", s.placement()));
        }
        if let Some(a) = s.irq_affinity() {
            if *a != IrqAffinity::default() {
                parts.push(format!("irq={a}"));
            }
        }
        if !s.io_thread_cpus().is_float() {
            parts.push(format!("iothread={}", s.io_thread_cpus()));
        }
        s.label_tail(&mut parts);
        parts.join(" ")
    }
}

impl GuestSettings {
    fn validate(&self, threads: Option<u32>, p: &mut Vec<ConfigError>) {
        check_range(
            p,
            "vcpus",
            self.vcpus.into(),
            1,
            MAX_GUEST_VCPUS.into(),
            "the smplab guest's limit",
        );
        check_range(
            p,
            "vms",
            self.vms.into(),
            1,
            MAX_REAL_VMS.into(),
            "real VMs at once",
        );
        if let Some(t) = threads {
            if t > MAX_GUEST_THREADS {
                p.push(ConfigError::new(
                    "threads",
                    format!(
                        "the workload runs {t} threads; the smplab guest supports at most {MAX_GUEST_THREADS}"
                    ),
                ));
            }
        }
        if let Some(hz) = self.timer_hz {
            check_range(
                p,
                "timer_hz",
                hz.into(),
                0,
                MAX_TIMER_HZ.into(),
                "KVM's LAPIC timer clamps faster ticks",
            );
        }
        if let Some(m) = self.mem_bytes {
            check_range(
                p,
                "mem",
                m,
                MIN_GUEST_MEM_BYTES,
                MAX_GUEST_MEM_BYTES,
                "bytes the guest can map",
            );
        }
        self.idle.validate(p);
        self.irq_affinity.validate(self.vcpus, p);
    }
}

impl GuestSettings {
    /// Only the simulator knows which vCPUs the host runs at each instant.
    fn refuse_running_affinity(&self, p: &mut Vec<ConfigError>) {
        if self.irq_affinity == IrqAffinity::Running {
            p.push(ConfigError::new(
                "irq_affinity",
                "running (vBalance) needs the hypervisor to tell the guest which vCPUs run: only --executor sim models it, or a host run under a user-level policy",
            ));
        }
    }
}

impl SimSettings {
    fn validate_model(&self, p: &mut Vec<ConfigError>) {
        check_range(
            p,
            "vcpus",
            self.vcpus.into(),
            1,
            MAX_SIM_VCPUS.into(),
            "the simulator's limit",
        );
        check_range(
            p,
            "vms",
            self.vms.into(),
            1,
            MAX_SIM_VMS.into(),
            "the simulator's limit",
        );
        if let Some(pc) = self.pcpus {
            check_range(p, "pcpus", pc.into(), 1, 65_536, "the simulator's limit");
        }
        if self.platform.trim().is_empty() {
            p.push(ConfigError::new(
                "platform",
                "empty platform name: give a built-in profile or a profile file",
            ));
        }
        self.idle.validate(p);
        if let IdlePolicy::HaltPoll { .. } = self.idle {
            p.push(ConfigError::new(
                "idle",
                format!(
                    "{}: the simulator does not model guest-side halt polling; use hlt (with host_halt_poll_ns for the host's window) or poll",
                    self.idle
                ),
            ));
        }
        if let Placement::Cpus(cpus) = &self.placement {
            if Placement::contiguous_range(cpus).is_none() {
                p.push(ConfigError::new(
                    "pin",
                    format!(
                        "the simulator confines vCPUs to a contiguous pCPU range; `{}` is not one (use e.g. 0-3, pinned or none)",
                        self.placement
                    ),
                ));
            }
        }
        self.policy.validate(p);
        self.irq_affinity.validate(self.vcpus, p);
        let pcpus = self.pcpus.unwrap_or(self.vcpus) as usize;
        if let Some(c) = self.io_thread_cpus.0.iter().find(|&&c| c >= pcpus) {
            p.push(ConfigError::new(
                "io_thread_cpus",
                format!(
                    "pCPU {c} does not exist: the modelled host has pCPUs 0-{}",
                    pcpus.saturating_sub(1)
                ),
            ));
        }
    }
}

impl fmt::Display for RunConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.executor(), self.label())
    }
}

#[cfg(test)]
mod tests;
