//! What to simulate: a host (platform, pCPUs, topology, scheduling policy) and
//! the VMs on it, each running one workload instance with its own settings.
//! Built in code, from the `smplab sim` flags, or from a spec file (see
//! [`crate::spec`]).

use crate::platform::Platform;
use smplab_record::WorkloadInfo;
use smplab_workload::Program;

/// How a guest waits when it has nothing to run.
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

    /// `hlt`, `poll`, `haltpoll` (platform default window) or `haltpoll:NS`.
    pub fn parse(s: &str, default_window: u64) -> Result<Idle, String> {
        match s {
            "hlt" => Ok(Idle::Hlt),
            "poll" => Ok(Idle::Poll),
            "haltpoll" => Ok(Idle::HaltPoll(default_window)),
            _ => match s.strip_prefix("haltpoll:") {
                Some(ns) => ns.parse().map(Idle::HaltPoll).map_err(|_| {
                    format!("bad halt-poll window `{ns}`: give nanoseconds, e.g. haltpoll:200000")
                }),
                None => Err(format!(
                    "unknown idle mode `{s}`: use hlt, poll, haltpoll or haltpoll:NS"
                )),
            },
        }
    }
}

/// Where a VM's vCPUs may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affinity {
    /// Anywhere (within the VM's partition under logical partitioning).
    Float,
    /// vCPU i pinned to one pCPU, spread evenly over the allowed pCPUs (seed 001).
    Pin,
    /// Only pCPUs `first .. first + count`.
    Range { first: u32, count: u32 },
}

impl Affinity {
    pub fn label(self) -> String {
        match self {
            Affinity::Float => "float".into(),
            Affinity::Pin => "pin".into(),
            Affinity::Range { first, count } => format!("range:{first}-{}", first + count - 1),
        }
    }

    /// `float`, `pin`, or `range:A-B` (inclusive).
    pub fn parse(s: &str) -> Result<Affinity, String> {
        match s {
            "float" => Ok(Affinity::Float),
            "pin" => Ok(Affinity::Pin),
            _ => {
                let bad = || format!("unknown affinity `{s}`: use float, pin or range:A-B");
                let r = s.strip_prefix("range:").ok_or_else(bad)?;
                let (a, b) = r.split_once('-').ok_or_else(bad)?;
                let a: u32 = a.trim().parse().map_err(|_| bad())?;
                let b: u32 = b.trim().parse().map_err(|_| bad())?;
                if b < a {
                    return Err(format!("affinity range {a}-{b} is empty"));
                }
                Ok(Affinity::Range {
                    first: a,
                    count: b - a + 1,
                })
            }
        }
    }
}

/// Pause-loop exiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ple {
    Off,
    /// Intel PLE: sees only PAUSE loops in guest kernel mode.
    Intel,
    /// AMD pause filter: PAUSE loops in kernel and user mode.
    Amd,
}

impl Ple {
    pub fn label(self) -> &'static str {
        match self {
            Ple::Off => "off",
            Ple::Intel => "intel",
            Ple::Amd => "amd",
        }
    }
    pub fn parse(s: &str) -> Result<Ple, String> {
        match s {
            "off" => Ok(Ple::Off),
            "intel" => Ok(Ple::Intel),
            "amd" => Ok(Ple::Amd),
            _ => Err(format!("unknown PLE mode `{s}`: use off, intel or amd")),
        }
    }
}

/// Spin Detection Buffer settings (seed 002). `None` fields take the platform's.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Sdb {
    pub detect_ns: Option<u64>,
    pub false_positive_rate: Option<f64>,
}

/// How device-model exits are synchronized (seed 004).
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

impl DeviceSync {
    pub fn label(self) -> String {
        match self {
            DeviceSync::Global => "global".into(),
            DeviceSync::IoThread => "iothread".into(),
            DeviceSync::Hybrid { bypass } => format!("hybrid:{bypass}"),
            DeviceSync::Fine => "fine".into(),
        }
    }
    pub fn parse(s: &str) -> Result<DeviceSync, String> {
        match s {
            "global" => Ok(DeviceSync::Global),
            "iothread" => Ok(DeviceSync::IoThread),
            "fine" => Ok(DeviceSync::Fine),
            "hybrid" => Ok(DeviceSync::Hybrid { bypass: 0.5 }),
            _ => match s.strip_prefix("hybrid:").map(str::parse::<f64>) {
                Some(Ok(b)) if (0.0..=1.0).contains(&b) => Ok(DeviceSync::Hybrid { bypass: b }),
                _ => Err(format!(
                    "unknown device sync `{s}`: use global, iothread, hybrid, hybrid:FRACTION (0..1) or fine"
                )),
            },
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
    /// seed 004 Table 3.1: 759141 / (759141 + 446213) = 62.98%.
    pub synchronous: f64,
}

/// One VM and the workload instance it runs.
#[derive(Debug, Clone)]
pub struct VmSpec {
    pub program: Program,
    pub workload: WorkloadInfo,
    pub vcpus: u32,
    pub idle: Idle,
    pub affinity: Affinity,
    pub ple: Ple,
    /// APIC virtualization (cheaper IPI send and receive).
    pub apicv: bool,
    /// Spin Detection Buffer with spin-triggered preemption.
    pub sdb: Option<Sdb>,
    pub devices: Option<Devices>,
}

impl VmSpec {
    /// A VM with the seeds' default settings: HLT idle, floating vCPUs, Intel
    /// PLE, no APICv (seed 000's R720), no SDB, no device exits.
    pub fn new(program: Program, workload: WorkloadInfo, vcpus: u32) -> VmSpec {
        VmSpec {
            program,
            workload,
            vcpus,
            idle: Idle::Hlt,
            affinity: Affinity::Float,
            ple: Ple::Intel,
            apicv: false,
            sdb: None,
            devices: None,
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

/// Host scheduling policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// Proportional fair share: per-pCPU round robin with a time slice, wake-up
    /// placement on idle pCPUs, idle pCPUs steal (CFS/credit-like, equal weights).
    FairShare,
    /// Gang (co-)scheduling: all vCPUs of a VM run together, VMs rotate per slice.
    Gang,
    /// Logical partitioning: pCPUs split among VMs in proportion to their vCPUs
    /// (seed 002 §6.2); fair share inside each partition.
    Partition,
}

/// Host scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    pub kind: PolicyKind,
    /// Host time slice; `None` takes the platform default.
    pub time_slice_ns: Option<u64>,
    /// Safe-point-aware preemption (Uhlig et al., seed 002 §5.1): at the end of a
    /// slice a vCPU holding a lock or in the kernel keeps running until it is
    /// safe, at most this grace period.
    pub safe_point_grace_ns: Option<u64>,
}

impl Policy {
    pub fn fair() -> Policy {
        Policy {
            kind: PolicyKind::FairShare,
            time_slice_ns: None,
            safe_point_grace_ns: None,
        }
    }
    pub fn with_slice(mut self, ns: u64) -> Policy {
        self.time_slice_ns = Some(ns);
        self
    }
    pub fn label(&self) -> String {
        let mut s = match self.kind {
            PolicyKind::FairShare => "fair".to_string(),
            PolicyKind::Gang => "gang".to_string(),
            PolicyKind::Partition => "partition".to_string(),
        };
        if let Some(t) = self.time_slice_ns {
            s.push_str(&format!(":{}us", t / 1000));
        }
        if let Some(g) = self.safe_point_grace_ns {
            s.push_str(&format!("+safepoint:{}us", g / 1000));
        }
        s
    }

    /// `fair`, `gang`, `partition`, optionally `:SLICE` (e.g. `fair:100us`,
    /// `gang:10ms`) and `+safepoint[:GRACE]` (default grace 1 ms, seed 002).
    pub fn parse(s: &str) -> Result<Policy, String> {
        let (main, safe) = match s.split_once('+') {
            Some((m, sp)) => (m, Some(sp)),
            None => (s, None),
        };
        let (kind, slice) = match main.split_once(':') {
            Some((k, sl)) => (k, Some(sl)),
            None => (main, None),
        };
        let kind = match kind {
            "fair" => PolicyKind::FairShare,
            "gang" => PolicyKind::Gang,
            "partition" => PolicyKind::Partition,
            _ => {
                return Err(format!(
                    "unknown policy `{kind}`: use fair, gang or partition, optionally with :SLICE (e.g. fair:100us) and +safepoint[:GRACE]"
                ))
            }
        };
        let time_slice_ns = slice.map(parse_duration).transpose()?;
        let safe_point_grace_ns = match safe {
            None => None,
            Some("safepoint") => Some(1_000_000),
            Some(sp) => match sp.strip_prefix("safepoint:") {
                Some(g) => Some(parse_duration(g)?),
                None => {
                    return Err(format!(
                        "unknown policy modifier `+{sp}`: use +safepoint or +safepoint:GRACE"
                    ))
                }
            },
        };
        Ok(Policy {
            kind,
            time_slice_ns,
            safe_point_grace_ns,
        })
    }
}

/// `100us`, `10ms`, `1s`, `500ns` or plain nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mul) = if let Some(n) = s.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e9)
    } else {
        (s, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok((v * mul).round() as u64),
        _ => Err(format!(
            "bad duration `{s}`: write e.g. 100us, 10ms, 1s or nanoseconds"
        )),
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
            if let Affinity::Range { first, count } = vm.affinity {
                if count == 0 || first as u64 + count as u64 > self.pcpus as u64 {
                    return err(format!(
                        "VM {i}: affinity range {} is outside pCPUs 0-{}",
                        vm.affinity.label(),
                        self.pcpus - 1
                    ));
                }
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
        if self.policy.kind == PolicyKind::Gang {
            if let Some((i, vm)) = self
                .vms
                .iter()
                .enumerate()
                .find(|(_, v)| v.vcpus > self.pcpus)
            {
                return err(format!(
                    "VM {i} has {} vCPUs but gang scheduling needs all of them on distinct pCPUs (have {}): use fair or partition, or more pCPUs",
                    vm.vcpus, self.pcpus
                ));
            }
        }
        if self.policy.kind == PolicyKind::Partition && (self.vms.len() as u64) > self.pcpus as u64
        {
            return err(format!(
                "logical partitioning needs at least one pCPU per VM ({} VMs, {} pCPUs)",
                self.vms.len(),
                self.pcpus
            ));
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
        assert_eq!(Idle::parse("haltpoll:5", 9), Ok(Idle::HaltPoll(5)));
        assert_eq!(Idle::parse("haltpoll", 9), Ok(Idle::HaltPoll(9)));
        assert!(Idle::parse("mwait", 9).unwrap_err().contains("hlt, poll"));
        assert_eq!(
            Affinity::parse("range:2-5"),
            Ok(Affinity::Range { first: 2, count: 4 })
        );
        let p = Policy::parse("fair:100us+safepoint").unwrap();
        assert_eq!(p.time_slice_ns, Some(100_000));
        assert_eq!(p.safe_point_grace_ns, Some(1_000_000));
        assert_eq!(Policy::parse("gang:10ms").unwrap().kind, PolicyKind::Gang);
        assert!(Policy::parse("rr").is_err());
        assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
        assert!(DeviceSync::parse("hybrid:2").is_err());
    }
}
