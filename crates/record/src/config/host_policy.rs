//! The host's vCPU scheduling policy (Wells et al.): the host kernel's own
//! scheduler, a user-level round robin, gang or logical partitioning, an
//! optional time slice and safe-point-aware preemption. Printed and parsed as
//! `rr`, `gang:10ms`, `rr:100us+safepoint:1ms`; `safepoint:GRACE` is short for
//! `rr+safepoint:GRACE`.
//!
//! [`for_each_host_policy!`](crate::for_each_host_policy) is the one list of
//! policies: [`PolicyKind`], its names and who decides each kind
//! ([`Decider`]) follow from it here, and smplab-policy builds each
//! user-level policy from the same list, so a policy named there and not
//! written (or written and not named) does not compile.

use super::ConfigError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// The one list of host policies, handed to `$callback` (a `macro_rules!`
/// macro in scope where this is invoked) as
/// `kernel { Variant name Decider, ... } user { Variant name, ... }`, each
/// entry with its doc comment. `name` is the printed name. The kernel group
/// is decided by a host kernel (a real host's, or the simulator's model of
/// one: its [`Decider`]); a user-level policy `name` is smplab-policy's,
/// type `Variant` in `crates/policy/src/policies/name.rs`.
#[macro_export]
macro_rules! for_each_host_policy {
    ($callback:ident) => {
        $callback! {
            kernel {
                /// No user-level scheduling: every vCPU thread is runnable
                /// and the host kernel's scheduler decides (the stock
                /// baseline of a real host); the simulator runs its model of
                /// that kernel (per-pCPU run queues, vruntime, load
                /// balancing).
                Linux linux HostKernel,
                /// Proportional fair share (CFS/credit-like, equal weights)
                /// at the slice given: the simulator's model of the host
                /// kernel, which a real host cannot run (use `linux`, or
                /// `rr` for a user-level round robin).
                FairShare fair SimulatedKernel,
            }
            user {
                /// Round robin: one FIFO of runnable vCPUs; a vCPU runs a
                /// slice, then goes to the back if someone waits.
                RoundRobin rr,
                /// Gang (co-)scheduling: all vCPUs of a VM run together; VMs
                /// take turns a slice each.
                Gang gang,
                /// Logical partitioning: pCPUs split among VMs, each VM
                /// round-robin on its share (Wells et al. §6.2).
                Partition partition,
                /// Round robin plus spin-triggered preemption: a vCPU
                /// detected spinning gives its pCPU to a preempted sibling
                /// of its VM (directed yield), else to the next runnable
                /// vCPU (Wells et al. §5.2, the SDB's policy).
                Spin spin,
                /// Round robin by VM: VMs take turns a slice each on all
                /// pCPUs, without co-scheduling (the pCPUs a VM leaves free
                /// go to the others).
                RoundRobinByVm rrvm,
            }
        }
    };
}

/// Who decides a [`PolicyKind`]'s scheduling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decider {
    /// The host kernel: on a real host the vCPU threads run unscheduled by
    /// smplab; the simulator runs its model of the kernel.
    HostKernel,
    /// Only the simulator's model of a kernel scheduler: a real host has
    /// none to run.
    SimulatedKernel,
    /// smplab-policy, the same code in the simulator and on a real host.
    UserLevel,
}

macro_rules! define_policy_kind {
    (
        kernel { $($(#[$kdoc:meta])* $kv:ident $kn:ident $kd:ident,)* }
        user { $($(#[$udoc:meta])* $uv:ident $un:ident,)* }
    ) => {
        /// Host scheduling policy kinds ([`for_each_host_policy!`](crate::for_each_host_policy)).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum PolicyKind {
            $($(#[$kdoc])* $kv,)*
            $($(#[$udoc])* $uv,)*
        }

        impl PolicyKind {
            /// Every kind, in the registry's order.
            pub const ALL: &'static [PolicyKind] =
                &[$(PolicyKind::$kv,)* $(PolicyKind::$uv,)*];

            /// The name `FromStr` reads.
            pub fn name(self) -> &'static str {
                match self {
                    $(PolicyKind::$kv => stringify!($kn),)*
                    $(PolicyKind::$uv => stringify!($un),)*
                }
            }

            /// Who decides this kind's scheduling.
            pub fn decider(self) -> Decider {
                match self {
                    $(PolicyKind::$kv => Decider::$kd,)*
                    $(PolicyKind::$uv => Decider::UserLevel,)*
                }
            }

            /// Every name, for messages: `linux, fair, rr, ...`.
            pub fn names() -> String {
                PolicyKind::ALL
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            }

            /// The kind printed as `name`.
            pub fn from_name(name: &str) -> Option<PolicyKind> {
                PolicyKind::ALL.iter().copied().find(|k| k.name() == name)
            }
        }
    };
}

for_each_host_policy!(define_policy_kind);

/// `fair`: the simulator's default host, as it always was.
impl Default for PolicyKind {
    fn default() -> PolicyKind {
        PolicyKind::FairShare
    }
}

/// Host scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HostPolicy {
    pub kind: PolicyKind,
    /// Host time slice; `None` takes the platform default.
    pub time_slice_ns: Option<u64>,
    /// Safe-point-aware preemption (Uhlig et al., Wells et al. §5.1): at the end
    /// of a slice a vCPU holding a lock or in the kernel keeps running until it
    /// is safe, at most this grace period.
    pub safe_point_grace_ns: Option<u64>,
}

/// Grace period of `+safepoint` without a value (Wells et al. §5.1).
pub const DEFAULT_SAFE_POINT_GRACE_NS: u64 = 1_000_000;

/// A malformed duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad duration `{0}`: write e.g. 100us, 10ms, 1s or nanoseconds")]
pub struct BadDuration(pub String);

/// A malformed policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPolicy {
    #[error("unknown policy `{0}`: use {names}, optionally with :SLICE (e.g. rr:100us) and +safepoint[:GRACE], or safepoint[:GRACE]", names = PolicyKind::names())]
    Kind(String),
    #[error("unknown policy modifier `+{0}`: use +safepoint or +safepoint:GRACE")]
    Modifier(String),
    #[error(transparent)]
    Duration(#[from] BadDuration),
}

/// `100us`, `10ms`, `1s`, `500ns` or plain nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64, BadDuration> {
    let t = s.trim();
    let (num, mul) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        // Bounded so the conversion cannot saturate: 10^6 s is far beyond any run.
        Ok(v) if v >= 0.0 && v * mul <= 1e15 => {
            // In 0..=1e15: the cast neither truncates nor loses a sign.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Ok((v * mul).round() as u64)
        }
        _ => Err(BadDuration(s.to_string())),
    }
}

fn print_duration(ns: u64) -> String {
    if ns > 0 && ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns > 0 && ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns > 0 && ns.is_multiple_of(1000) {
        format!("{}us", ns / 1000)
    } else {
        format!("{ns}ns")
    }
}

impl HostPolicy {
    pub fn fair() -> HostPolicy {
        HostPolicy::default()
    }

    pub fn with_slice(mut self, ns: u64) -> HostPolicy {
        self.time_slice_ns = Some(ns);
        self
    }

    /// The printed form (same as `Display`).
    pub fn label(&self) -> String {
        self.to_string()
    }

    /// Parse the printed form.
    pub fn parse(s: &str) -> Result<HostPolicy, BadPolicy> {
        s.parse()
    }

    /// Whether smplab-policy's user-level scheduler decides.
    pub fn is_user_level(&self) -> bool {
        self.kind.decider() == Decider::UserLevel
    }

    /// Checks for a simulated host (the only caller: `SimSettings`).
    pub(super) fn validate(&self, p: &mut Vec<ConfigError>) {
        if self.safe_point_grace_ns.is_some() && !self.is_user_level() {
            p.push(ConfigError::new(
                "policy",
                "safe points are a user-level policy's: use rr+safepoint (or gang, partition with +safepoint)",
            ));
        }
        if self.time_slice_ns == Some(0) {
            p.push(ConfigError::new(
                "policy",
                "the time slice must be positive",
            ));
        }
    }
}

impl FromStr for HostPolicy {
    type Err = BadPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        // `safepoint[:GRACE]` alone: the round robin with safe points.
        if s == "safepoint" || s.starts_with("safepoint:") {
            return format!("rr+{s}").parse();
        }
        let (main, safe) = match s.split_once('+') {
            Some((m, sp)) => (m, Some(sp)),
            None => (s, None),
        };
        let (kind, slice) = match main.split_once(':') {
            Some((k, sl)) => (k, Some(sl)),
            None => (main, None),
        };
        let kind = match PolicyKind::from_name(kind) {
            // Safe points need a user-level scheduler: `fair+safepoint`
            // always ran smplab-policy's round robin, and is read as such.
            Some(PolicyKind::FairShare) if safe.is_some() => PolicyKind::RoundRobin,
            Some(k) => k,
            None => return Err(BadPolicy::Kind(kind.to_string())),
        };
        let time_slice_ns = slice.map(parse_duration).transpose()?;
        let safe_point_grace_ns = match safe {
            None => None,
            Some("safepoint") => Some(DEFAULT_SAFE_POINT_GRACE_NS),
            Some(sp) => match sp.strip_prefix("safepoint:") {
                Some(g) => Some(parse_duration(g)?),
                None => return Err(BadPolicy::Modifier(sp.to_string())),
            },
        };
        Ok(HostPolicy {
            kind,
            time_slice_ns,
            safe_point_grace_ns,
        })
    }
}

impl fmt::Display for HostPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        if let Some(t) = self.time_slice_ns {
            write!(f, ":{}", print_duration(t))?;
        }
        if let Some(g) = self.safe_point_grace_ns {
            write!(f, "+safepoint:{}", print_duration(g))?;
        }
        Ok(())
    }
}

impl Serialize for HostPolicy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HostPolicy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_its_printed_form() {
        for text in [
            "linux",
            "fair",
            "fair:100us",
            "rr",
            "rr:4ms",
            "gang:10ms",
            "partition",
            "spin",
            "spin:2ms",
            "rr:100us+safepoint:1ms",
        ] {
            let p: HostPolicy = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
        for &kind in PolicyKind::ALL {
            assert_eq!(PolicyKind::from_name(kind.name()), Some(kind));
        }
    }

    #[test]
    fn fair_with_safe_points_reads_as_the_round_robin_it_always_ran() {
        let p: HostPolicy = "fair:100us+safepoint:1ms".parse().unwrap();
        assert_eq!(p.kind, PolicyKind::RoundRobin);
        assert_eq!(p.to_string(), "rr:100us+safepoint:1ms");
        assert_eq!(PolicyKind::FairShare.decider(), Decider::SimulatedKernel);
        assert_eq!(PolicyKind::Linux.decider(), Decider::HostKernel);
        assert!(HostPolicy::parse("rr").unwrap().is_user_level());
        assert!(!HostPolicy::parse("fair").unwrap().is_user_level());
    }

    #[test]
    fn the_simulator_takes_spin_with_its_detector_model_and_linux_as_fair() {
        let mut problems = Vec::new();
        HostPolicy::parse("spin").unwrap().validate(&mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        HostPolicy::parse("linux").unwrap().validate(&mut problems);
        assert!(problems.is_empty());
        let mut kernel_with_grace = HostPolicy::fair();
        kernel_with_grace.safe_point_grace_ns = Some(1_000_000);
        kernel_with_grace.validate(&mut problems);
        assert!(problems[0].message.contains("rr+safepoint"), "{problems:?}");
    }

    #[test]
    fn safepoint_alone_is_the_round_robin_with_grace() {
        let p: HostPolicy = "safepoint:500us".parse().unwrap();
        assert_eq!(p.kind, PolicyKind::RoundRobin);
        assert_eq!(p.safe_point_grace_ns, Some(500_000));
        let p: HostPolicy = "safepoint".parse().unwrap();
        assert_eq!(p.safe_point_grace_ns, Some(DEFAULT_SAFE_POINT_GRACE_NS));
        assert!("safepoint:soon".parse::<HostPolicy>().is_err());
        assert!("gangs".parse::<HostPolicy>().is_err());
    }
}
