//! The single-valued settings: device sync mode, idle policy, placement, PLE.
//! Each serializes as its printed form, which its `FromStr` reads back.

use super::ConfigError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// How smplab-vmm serializes device emulation (the Seoul thesis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum SyncMode {
    /// One lock around every device access.
    Global,
    /// Every access goes through one I/O thread; writes are posted.
    IoThread,
    /// As `IoThread`, but thread-safe devices are handled on the vCPU thread.
    Hybrid,
    /// Every device handled on the vCPU thread, under its own lock or
    /// lock-free: what a current VMM does, so the default.
    #[default]
    Fine,
}

impl SyncMode {
    pub const ALL: [SyncMode; 4] = [
        SyncMode::Global,
        SyncMode::IoThread,
        SyncMode::Hybrid,
        SyncMode::Fine,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Global => "global",
            SyncMode::IoThread => "iothread",
            SyncMode::Hybrid => "hybrid",
            SyncMode::Fine => "fine",
        }
    }

    /// Whether this mode runs an I/O thread.
    pub fn has_io_thread(self) -> bool {
        matches!(self, SyncMode::IoThread | SyncMode::Hybrid)
    }
}

impl fmt::Display for SyncMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A sync mode name that is not one of the four.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("unknown sync mode `{0}`: use global, iothread, hybrid or fine")]
pub struct UnknownSyncMode(pub String);

impl FromStr for SyncMode {
    type Err = UnknownSyncMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "global" => Ok(SyncMode::Global),
            "iothread" | "io-thread" | "io_thread" => Ok(SyncMode::IoThread),
            "hybrid" => Ok(SyncMode::Hybrid),
            "fine" => Ok(SyncMode::Fine),
            _ => Err(UnknownSyncMode(s.to_string())),
        }
    }
}
serde_as_string!(SyncMode);

/// Where smplab-vmm emulates the interrupt controllers (the Seoul thesis §4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Irqchip {
    /// KVM's in-kernel LAPIC, IOAPIC and PIC (`KVM_CREATE_IRQCHIP`).
    #[default]
    Kernel,
    /// smplab-vmm's own models on the device bus, under the sync mode; HLT is
    /// handled by the VMM.
    User,
}

impl Irqchip {
    pub const ALL: [Irqchip; 2] = [Irqchip::Kernel, Irqchip::User];

    pub fn as_str(&self) -> &'static str {
        match self {
            Irqchip::Kernel => "kernel",
            Irqchip::User => "user",
        }
    }
}

impl fmt::Display for Irqchip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A malformed irqchip name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown irqchip `{0}`: use kernel (KVM's in-kernel LAPIC/IOAPIC/PIC) or user (smplab-vmm's own models)")]
pub struct BadIrqchip(pub String);

impl FromStr for Irqchip {
    type Err = BadIrqchip;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "kernel" => Ok(Irqchip::Kernel),
            "user" => Ok(Irqchip::User),
            _ => Err(BadIrqchip(s.to_string())),
        }
    }
}
serde_as_string!(Irqchip);

/// Longest VMM halt-poll window accepted (1 s: longer is a busy VMM).
pub const MAX_VMM_HALT_POLL_NS: u64 = 1_000_000_000;

/// What an idle vCPU of the guest does. The same meaning in every executor:
/// this is the guest's choice; the host's halt polling is a separate setting
/// of the host (KVM's `halt_poll_ns`, the simulator's `host_halt_poll_ns`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IdlePolicy {
    /// `hlt`: exit to the hypervisor until an interrupt (wakeups need an IPI).
    #[default]
    Hlt,
    /// `poll`: spin watching the run queue (Ding & Shan's polling idle loop);
    /// wakers need no IPI and the vCPU never exits.
    Poll,
    /// `haltpoll:NS`: poll in the guest for `ns` nanoseconds, then halt (like
    /// Linux's cpuidle-haltpoll).
    HaltPoll { ns: u64 },
}

/// Longest guest halt-poll window accepted (10 s: longer is `poll`).
pub const MAX_GUEST_HALT_POLL_NS: u64 = 10_000_000_000;

/// A malformed idle policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown idle policy `{0}`: use hlt, poll or haltpoll:NS (NS = the guest's poll window in nanoseconds, e.g. haltpoll:200000)")]
pub struct BadIdlePolicy(pub String);

impl FromStr for IdlePolicy {
    type Err = BadIdlePolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "hlt" => Ok(IdlePolicy::Hlt),
            "poll" => Ok(IdlePolicy::Poll),
            t => t
                .strip_prefix("haltpoll:")
                .and_then(|ns| ns.parse::<u64>().ok())
                .filter(|&ns| ns > 0 && ns <= MAX_GUEST_HALT_POLL_NS)
                .map(|ns| IdlePolicy::HaltPoll { ns })
                .ok_or_else(|| BadIdlePolicy(s.to_string())),
        }
    }
}

impl fmt::Display for IdlePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdlePolicy::Hlt => f.write_str("hlt"),
            IdlePolicy::Poll => f.write_str("poll"),
            IdlePolicy::HaltPoll { ns } => write!(f, "haltpoll:{ns}"),
        }
    }
}
serde_as_string!(IdlePolicy);

impl IdlePolicy {
    pub(super) fn validate(&self, p: &mut Vec<ConfigError>) {
        if let IdlePolicy::HaltPoll { ns } = *self {
            if ns == 0 || ns > MAX_GUEST_HALT_POLL_NS {
                p.push(ConfigError::new(
                    "idle",
                    format!("haltpoll:{ns}: the window must be 1..={MAX_GUEST_HALT_POLL_NS} ns"),
                ));
            }
        }
    }
}

/// Where threads (native) or vCPUs (VMs) run on the host's CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// `none`: the host scheduler places and moves them freely.
    #[default]
    Float,
    /// `pinned`: thread or vCPU i on CPU i mod (CPUs of the host), the
    /// placement a cache-aware scheduler would choose on a small host.
    Spread,
    /// A CPU list such as `0,1` or `0-3`: thread or vCPU i on the i-th CPU of
    /// the list (smplab-vmm, native); QEMU is confined to the set; the
    /// simulator confines vCPUs to the range.
    Cpus(Vec<usize>),
}

/// A malformed placement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad placement `{text}` ({source}); use none, pinned or a CPU list like 0,1 or 0-3")]
pub struct BadPlacement {
    pub text: String,
    pub source: crate::cpus::CpuListError,
}

impl FromStr for Placement {
    type Err = BadPlacement;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" | "float" => Ok(Placement::Float),
            "pinned" | "pin" | "spread" => Ok(Placement::Spread),
            list => crate::cpus::parse_cpu_list(list)
                .map(Placement::Cpus)
                .map_err(|source| BadPlacement {
                    text: s.to_string(),
                    source,
                }),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Float => f.write_str("none"),
            Placement::Spread => f.write_str("pinned"),
            Placement::Cpus(cpus) => {
                let parts: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}
serde_as_string!(Placement);

impl Placement {
    pub fn is_float(&self) -> bool {
        matches!(self, Placement::Float)
    }

    /// The host CPUs for `count` threads or vCPUs on a host with `cores` CPUs:
    /// `None` for floating.
    pub fn cpus(&self, cores: usize) -> Option<Vec<usize>> {
        match self {
            Placement::Float => None,
            Placement::Spread => Some((0..cores.max(1)).collect()),
            Placement::Cpus(c) => Some(c.clone()),
        }
    }

    /// `(first, count)` when `cpus` is one ascending run without gaps.
    pub fn contiguous_range(cpus: &[usize]) -> Option<(usize, usize)> {
        let first = *cpus.first()?;
        cpus.iter()
            .enumerate()
            .all(|(i, &c)| c == first + i)
            .then_some((first, cpus.len()))
    }
}

/// Pause-loop exiting (Ding & Shan §IV-B, Wells et al. (spin management)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ple {
    Off,
    /// Intel PLE: sees only PAUSE loops in guest kernel mode.
    Intel,
    /// AMD pause filter: PAUSE loops in kernel and user mode.
    Amd,
}

/// A malformed PLE mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown PLE mode `{0}`: use off, intel or amd")]
pub struct BadPle(pub String);

impl FromStr for Ple {
    type Err = BadPle;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "off" | "false" => Ok(Ple::Off),
            "intel" => Ok(Ple::Intel),
            "amd" => Ok(Ple::Amd),
            _ => Err(BadPle(s.to_string())),
        }
    }
}

impl fmt::Display for Ple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}
serde_as_string!(Ple);

impl Ple {
    pub fn label(self) -> &'static str {
        match self {
            Ple::Off => "off",
            Ple::Intel => "intel",
            Ple::Amd => "amd",
        }
    }
}
