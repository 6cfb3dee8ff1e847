//! The host's vCPU scheduling policy (seed 002): fair share, gang or logical
//! partitioning, an optional time slice and safe-point-aware preemption.
//! Printed and parsed as `fair`, `gang:10ms`, `fair:100us+safepoint:1ms`;
//! `linux` (no user-level scheduling: the host kernel decides), `spin`
//! (spin-triggered preemption with directed yield, seed 002's SDB policy) and
//! `safepoint:GRACE` (short for `fair+safepoint:GRACE`) name the real host's
//! policies too (smplab-policy, docs/host.md).

use super::ConfigError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Host scheduling policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PolicyKind {
    /// Proportional fair share (CFS/credit-like, equal weights).
    #[default]
    FairShare,
    /// Gang (co-)scheduling: all vCPUs of a VM run together.
    Gang,
    /// Logical partitioning: pCPUs split among VMs (seed 002 §6.2).
    Partition,
    /// No user-level scheduling: every vCPU thread is runnable and the host
    /// kernel's scheduler decides (the stock baseline of a real host). The
    /// simulator models its host as fair share, so there it equals `fair`.
    Linux,
    /// Fair share plus spin-triggered preemption: a vCPU detected spinning
    /// gives its pCPU to a preempted sibling of its VM (directed yield), else
    /// to the next runnable vCPU (seed 002 §5.2, the SDB's policy).
    Spin,
}

impl PolicyKind {
    /// The name `FromStr` reads.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::FairShare => "fair",
            PolicyKind::Gang => "gang",
            PolicyKind::Partition => "partition",
            PolicyKind::Linux => "linux",
            PolicyKind::Spin => "spin",
        }
    }
}

/// Host scheduling policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HostPolicy {
    pub kind: PolicyKind,
    /// Host time slice; `None` takes the platform default.
    pub time_slice_ns: Option<u64>,
    /// Safe-point-aware preemption (Uhlig et al., seed 002 §5.1): at the end
    /// of a slice a vCPU holding a lock or in the kernel keeps running until it
    /// is safe, at most this grace period.
    pub safe_point_grace_ns: Option<u64>,
}

/// Grace period of `+safepoint` without a value (seed 002 §5.1).
pub const DEFAULT_SAFE_POINT_GRACE_NS: u64 = 1_000_000;

/// A malformed duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad duration `{0}`: write e.g. 100us, 10ms, 1s or nanoseconds")]
pub struct BadDuration(pub String);

/// A malformed policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPolicy {
    #[error("unknown policy `{0}`: use linux, fair, gang, partition or spin, optionally with :SLICE (e.g. fair:100us) and +safepoint[:GRACE], or safepoint[:GRACE]")]
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

    /// Whether a user-level scheduler decides (every kind but `linux`).
    pub fn is_user_level(&self) -> bool {
        self.kind != PolicyKind::Linux
    }

    /// Checks for a simulated host (the only caller: `SimSettings`).
    pub(super) fn validate(&self, p: &mut Vec<ConfigError>) {
        if self.kind == PolicyKind::Spin {
            p.push(ConfigError::new(
                "policy",
                "the simulator models spin-triggered preemption as its Spin Detection Buffer: use policy fair with sdb",
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
        // `safepoint[:GRACE]` alone: fair share with safe-point preemption.
        if s == "safepoint" || s.starts_with("safepoint:") {
            return format!("fair+{s}").parse();
        }
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
            "linux" => PolicyKind::Linux,
            "spin" => PolicyKind::Spin,
            _ => return Err(BadPolicy::Kind(kind.to_string())),
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
            "gang:10ms",
            "partition",
            "spin",
            "spin:2ms",
            "fair:100us+safepoint:1ms",
        ] {
            let p: HostPolicy = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
        }
    }

    #[test]
    fn the_simulator_refuses_spin_but_takes_linux_as_fair() {
        let mut problems = Vec::new();
        HostPolicy::parse("spin").unwrap().validate(&mut problems);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("sdb"));
        problems.clear();
        HostPolicy::parse("linux").unwrap().validate(&mut problems);
        assert!(problems.is_empty());
    }

    #[test]
    fn safepoint_alone_is_fair_with_grace() {
        let p: HostPolicy = "safepoint:500us".parse().unwrap();
        assert_eq!(p.kind, PolicyKind::FairShare);
        assert_eq!(p.safe_point_grace_ns, Some(500_000));
        let p: HostPolicy = "safepoint".parse().unwrap();
        assert_eq!(p.safe_point_grace_ns, Some(DEFAULT_SAFE_POINT_GRACE_NS));
        assert!("safepoint:soon".parse::<HostPolicy>().is_err());
        assert!("gangs".parse::<HostPolicy>().is_err());
    }
}
