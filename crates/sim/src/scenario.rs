//! What to simulate: a host (platform, pCPUs, topology, scheduling policy) and
//! the VMs on it, each running one workload instance with its own settings.
//! Built in code, from the `smplab sim` flags, or from a spec file (see
//! [`crate::spec`]).

use crate::platform::Platform;
use smplab_record::WorkloadInfo;
use smplab_workload::Program;

pub use smplab_record::config::{
    parse_duration, HostPolicy as Policy, IdlePolicy, Placement, Ple, PolicyKind, SyncMode,
};

/// How a modelled vCPU waits when its guest has nothing to run: the
/// mechanism, derived from the guest's [`IdlePolicy`] and the host's
/// halt-poll window by [`Idle::from_setting`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// HLT: exit to the VMM, which blocks the vCPU thread (woken by IPI).
    Hlt,
    /// Guest polling idle loop: the vCPU keeps its pCPU, no exits, no IPIs needed.
    Poll,
    /// HLT with the host's halt-polling window of this many ns (KVM halt_poll_ns).
    HaltPoll(u64),
}

impl Idle {
    pub fn label(self) -> String {
        match self {
            Idle::Hlt => "hlt".into(),
            Idle::Poll => "poll".into(),
            Idle::HaltPoll(ns) => format!("haltpoll:{ns}"),
        }
    }

    /// The modelled mechanism for the run configuration's guest idle policy
    /// and the host's halt-poll window (0 = none). The simulator does not
    /// model guest-side halt polling (poll, then HLT) yet: that is an error,
    /// never silently something else.
    pub fn from_setting(
        policy: IdlePolicy,
        host_halt_poll_ns: u64,
    ) -> Result<Idle, crate::SimError> {
        match policy {
            IdlePolicy::Poll => Ok(Idle::Poll),
            IdlePolicy::Hlt if host_halt_poll_ns > 0 => Ok(Idle::HaltPoll(host_halt_poll_ns)),
            IdlePolicy::Hlt => Ok(Idle::Hlt),
            IdlePolicy::HaltPoll { .. } => Err(crate::SimError::Scenario(format!(
                "idle {policy}: the simulator does not model guest-side halt polling; use hlt (with a host halt-poll window) or poll"
            ))),
        }
    }
}

/// The pCPUs `first .. first + count` a placement's CPU list confines a
/// VM's vCPUs to (`None` for floating and pinned vCPUs): the simulator
/// confines vCPUs to one contiguous range of the host's `pcpus`.
pub fn pcpu_range_of(
    placement: &Placement,
    pcpus: u32,
) -> Result<Option<(u32, u32)>, BadPlacementRange> {
    let Placement::Cpus(cpus) = placement else {
        return Ok(None);
    };
    let range = Placement::contiguous_range(cpus)
        .and_then(|(first, count)| Some((u32::try_from(first).ok()?, u32::try_from(count).ok()?)));
    match range {
        Some((first, count))
            if count > 0 && u64::from(first) + u64::from(count) <= u64::from(pcpus) =>
        {
            Ok(Some((first, count)))
        }
        Some(_) => Err(BadPlacementRange::Outside {
            placement: placement.clone(),
            last: pcpus.saturating_sub(1),
        }),
        None => Err(BadPlacementRange::NotContiguous(placement.clone())),
    }
}

/// A CPU-list placement the simulator cannot model on its host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPlacementRange {
    #[error("placement {placement} is outside pCPUs 0-{last}")]
    Outside { placement: Placement, last: u32 },
    #[error("placement {0}: the simulator confines vCPUs to a contiguous pCPU range such as 0-3")]
    NotContiguous(Placement),
}

/// Spin Detection Buffer settings (Wells et al.). `None` fields take the platform's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sdb {
    pub detect_ns: Option<u64>,
    pub false_positive_rate: Option<f64>,
}

/// How device-model exits are synchronized (Partheymüller).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DeviceSync {
    /// One global lock around all device models.
    Global,
    /// A dedicated I/O thread; synchronous requests wait, posted writes do not.
    IoThread,
    /// I/O thread, but this fraction of requests bypasses it (thread-safe devices).
    Hybrid { bypass: f64 },
    /// Fine-grained locking: requests run in parallel.
    Fine,
}

/// Share of device requests that reach thread-safe device models in hybrid
/// mode and so bypass the I/O thread, when nothing else says (Partheymüller §3.3:
/// the interrupt controllers and timers bypass it, block and serial devices
/// do not; this even split is a modelling assumption).
pub const DEFAULT_HYBRID_BYPASS: f64 = 0.5;

impl From<SyncMode> for DeviceSync {
    fn from(mode: SyncMode) -> DeviceSync {
        match mode {
            SyncMode::Global => DeviceSync::Global,
            SyncMode::IoThread => DeviceSync::IoThread,
            SyncMode::Hybrid => DeviceSync::Hybrid {
                bypass: DEFAULT_HYBRID_BYPASS,
            },
            SyncMode::Fine => DeviceSync::Fine,
        }
    }
}

impl DeviceSync {
    pub fn label(self) -> String {
        match self {
            DeviceSync::Global => "global".into(),
            DeviceSync::IoThread => "iothread".into(),
            DeviceSync::Hybrid { bypass } => format!("hybrid:{bypass}"),
            DeviceSync::Fine => "fine".into(),
        }
    }
}

/// Device-model exits a VM makes while running (none by default: the built-in
/// profiles do no I/O).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Devices {
    /// Device exits per millisecond of running guest time, per vCPU.
    pub exits_per_ms: f64,
    pub sync: DeviceSync,
    /// Fraction of requests that are synchronous (the vCPU waits for the reply);
    /// Partheymüller Table 3.1: 759141 / (759141 + 446213) = 62.98%.
    pub synchronous: f64,
}

/// One VM and the workload instance it runs.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub program: Program,
    pub workload: WorkloadInfo,
    pub vcpus: u32,
    pub idle: Idle,
    /// Where the vCPUs may run: floating, pinned (one pCPU each, spread
    /// evenly), or confined to a contiguous pCPU range.
    pub placement: Placement,
    pub ple: Ple,
    /// APIC virtualization (cheaper IPI send and receive).
    pub apicv: bool,
    /// Spin Detection Buffer with spin-triggered preemption.
    pub sdb: Option<Sdb>,
    pub devices: Option<Devices>,
    /// Which vCPUs the guest routes device (`io`) interrupts to.
    pub irq_affinity: smplab_record::config::IrqAffinity,
    /// Host pCPUs of the thread completing device requests (empty: any).
    pub io_thread_cpus: Vec<u32>,
}

impl VmSpec {
    /// A VM with the papers' default settings: HLT idle, floating vCPUs, Intel
    /// PLE, no APICv (Ding & Shan's R720), no SDB, no device exits.
    pub fn new(program: Program, workload: WorkloadInfo, vcpus: u32) -> VmSpec {
        VmSpec {
            program,
            workload,
            vcpus,
            idle: Idle::Hlt,
            placement: Placement::Float,
            ple: Ple::Intel,
            apicv: false,
            sdb: None,
            devices: None,
            irq_affinity: smplab_record::config::IrqAffinity::default(),
            io_thread_cpus: Vec::new(),
        }
    }

    /// A VM for a built-in or file workload with `n` threads at `scale`.
    pub fn from_workload(
        name: &str,
        n: Option<u32>,
        scale: f64,
        vcpus: u32,
    ) -> Result<VmSpec, crate::SimError> {
        let source = smplab_workload::Source::resolve(name)?;
        let program = source.instantiate(n, scale)?;
        let info = source.workload_info(&program);
        Ok(VmSpec::new(program, info, vcpus))
    }
}

/// Host topology beyond the platform's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Topology {
    /// pCPUs per last-level-cache domain; `None` takes the platform's.
    pub pcpus_per_llc: Option<u32>,
}

/// A whole simulation.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub platform: Platform,
    pub pcpus: u32,
    pub topology: Topology,
    pub policy: Policy,
    pub seed: u64,
    pub vms: Vec<VmSpec>,
    /// false: the same model on bare metal (no VMM costs, one core per vCPU).
    pub virtualized: bool,
    /// Stop at this simulated time even if workloads are unfinished (their
    /// records then say so); `None`: run to completion.
    pub horizon_ns: Option<u64>,
    /// Also run each VM's workload natively to fill `native_wall_ns`.
    pub native_reference: bool,
}

impl Scenario {
    /// A scenario with default policy (fair share, platform slice), seed 1,
    /// virtualized, no horizon, native reference on.
    pub fn new(platform: Platform, pcpus: u32, vms: Vec<VmSpec>) -> Scenario {
        Scenario {
            platform,
            pcpus,
            topology: Topology::default(),
            policy: Policy::fair(),
            seed: 1,
            vms,
            virtualized: true,
            horizon_ns: None,
            native_reference: true,
        }
    }

    /// Checks that do not need the model: every message says what to change.
    pub fn check(&self) -> Result<(), crate::SimError> {
        let err = |m: String| Err(crate::SimError::Scenario(m));
        if self.pcpus == 0 {
            return err("pcpus must be at least 1".into());
        }
        if self.vms.is_empty() {
            return err("a scenario needs at least one VM".into());
        }
        let total: u64 = self.vms.iter().map(|v| v.vcpus as u64).sum();
        for (i, vm) in self.vms.iter().enumerate() {
            if vm.vcpus == 0 {
                return err(format!("VM {i}: vcpus must be at least 1"));
            }
            if vm.program.total_threads() == 0 {
                return err(format!("VM {i}: the workload has no threads"));
            }
            if let Err(m) = pcpu_range_of(&vm.placement, self.pcpus) {
                return err(format!("VM {i}: {m}"));
            }
            if !self.virtualized && vm.vcpus > self.pcpus {
                return err(format!(
                    "VM {i}: a native run gives each CPU its own core; use at most {} CPUs",
                    self.pcpus
                ));
            }
            if let Some(d) = vm.devices {
                if !(d.exits_per_ms >= 0.0 && d.exits_per_ms.is_finite()) {
                    return err(format!("VM {i}: device exits_per_ms must be >= 0"));
                }
                if !(0.0..=1.0).contains(&d.synchronous) {
                    return err(format!(
                        "VM {i}: device synchronous fraction must be in 0..1"
                    ));
                }
            }
            if let Some(s) = vm.sdb {
                if let Some(r) = s.false_positive_rate {
                    if !(0.0..=1.0).contains(&r) {
                        return err(format!("VM {i}: SDB false_positive_rate must be in 0..1"));
                    }
                }
            }
        }
        // What the policy cannot serve (gang: a VM larger than the host;
        // partition: more VMs than pCPUs; safe points under a kernel-decided
        // policy), as smplab-policy finds it for every policy.
        let vcpus: Vec<u32> = self.vms.iter().map(|v| v.vcpus).collect();
        if let Err(e) = smplab_policy::check(&self.policy, &vcpus, self.pcpus as usize) {
            return err(format!("policy {}: {e}", self.policy));
        }
        if total > u32::MAX as u64 / 2 {
            return err("too many vCPUs".into());
        }
        if self.policy.time_slice_ns == Some(0) {
            return err("the time slice must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_settings() {
        assert_eq!(
            Idle::from_setting(IdlePolicy::Hlt, 5).unwrap(),
            Idle::HaltPoll(5)
        );
        assert_eq!(Idle::from_setting(IdlePolicy::Hlt, 0).unwrap(), Idle::Hlt);
        assert!(Idle::from_setting(IdlePolicy::HaltPoll { ns: 5 }, 0).is_err());
        let range: Placement = "2-5".parse().unwrap();
        assert_eq!(pcpu_range_of(&range, 8), Ok(Some((2, 4))));
        assert_eq!(
            pcpu_range_of(&range, 4).unwrap_err().to_string(),
            "placement 2,3,4,5 is outside pCPUs 0-3"
        );
        let gap: Placement = "0,2".parse().unwrap();
        assert_eq!(
            pcpu_range_of(&gap, 4),
            Err(BadPlacementRange::NotContiguous(gap.clone()))
        );
        assert_eq!(pcpu_range_of(&Placement::Spread, 4), Ok(None));
        let p = Policy::parse("fair:100us+safepoint").unwrap();
        assert_eq!(p.time_slice_ns, Some(100_000));
        assert_eq!(p.safe_point_grace_ns, Some(1_000_000));
        assert_eq!(Policy::parse("gang:10ms").unwrap().kind, PolicyKind::Gang);
        assert!(Policy::parse("lottery").is_err());
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert_eq!(DeviceSync::from(SyncMode::Global), DeviceSync::Global);
    }
}
