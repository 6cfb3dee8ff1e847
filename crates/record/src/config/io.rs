//! Interrupt affinity (Kulkarni & Kulkarni): which vCPUs a device's interrupts are routed
//! to inside the guest (`irq_affinity`, the IOAPIC redirection entry's
//! destination) and which host CPUs the thread that completes device requests
//! runs on (`io_thread_cpus`). Each serializes as its printed form, which its
//! `FromStr` reads back.

use super::ConfigError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Where the guest routes device interrupts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IrqAffinity {
    /// One vCPU, or a set taken in turn (one interrupt each, in list order):
    /// the redirection entry's destination is rewritten after each one.
    Vcpus(Vec<u32>),
    /// Every vCPU in turn, one interrupt each (irqbalance's aim, per interrupt).
    Balanced,
    /// vBalance (Kulkarni & Kulkarni ref. [10]): a vCPU the host is running at that
    /// moment (the guest learns which from the hypervisor), taken in turn;
    /// vCPU 0 when none runs. Only the simulator models it.
    Running,
}

impl Default for IrqAffinity {
    /// vCPU 0: where a guest without irqbalance leaves every IOAPIC entry.
    fn default() -> Self {
        IrqAffinity::Vcpus(vec![0])
    }
}

impl IrqAffinity {
    /// The vCPU that takes the `k`-th interrupt (0-based) of a VM with `vcpus`
    /// vCPUs. Entries past the last vCPU never occur in a validated config;
    /// they wrap rather than panic.
    pub fn target(&self, k: u64, vcpus: u32) -> u32 {
        let vcpus = vcpus.max(1);
        match self {
            // The remainder is below `vcpus`, a u32.
            IrqAffinity::Balanced | IrqAffinity::Running => {
                u32::try_from(k % u64::from(vcpus)).unwrap_or(0)
            }
            IrqAffinity::Vcpus(set) if set.is_empty() => 0,
            IrqAffinity::Vcpus(set) => {
                let i = usize::try_from(k % set.len() as u64).unwrap_or(0);
                set.get(i).copied().unwrap_or(0) % vcpus
            }
        }
    }

    pub(super) fn validate(&self, vcpus: u32, p: &mut Vec<ConfigError>) {
        if let IrqAffinity::Vcpus(set) = self {
            if let Some(v) = set.iter().find(|&&v| v >= vcpus) {
                p.push(ConfigError::new(
                    "irq_affinity",
                    format!(
                        "vCPU {v} does not exist: the VM has vCPUs 0-{}; use a vCPU, a list like 0,2 or balanced",
                        vcpus.saturating_sub(1)
                    ),
                ));
            }
        }
    }
}

/// A malformed `irq_affinity`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad irq affinity `{text}` ({source}); use a vCPU like 0, a list like 0,2-3, balanced or running")]
pub struct BadIrqAffinity {
    pub text: String,
    pub source: crate::cpus::CpuListError,
}

impl FromStr for IrqAffinity {
    type Err = BadIrqAffinity;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |source| BadIrqAffinity {
            text: s.to_string(),
            source,
        };
        match s.trim() {
            "balanced" => Ok(IrqAffinity::Balanced),
            "running" | "vbalance" => Ok(IrqAffinity::Running),
            list => {
                let cpus = crate::cpus::parse_cpu_list(list).map_err(bad)?;
                let vcpus = cpus
                    .into_iter()
                    .map(|c| {
                        u32::try_from(c)
                            .map_err(|_| bad(crate::cpus::CpuListError::Bad(list.to_string())))
                    })
                    .collect::<Result<Vec<u32>, _>>()?;
                Ok(IrqAffinity::Vcpus(vcpus))
            }
        }
    }
}

impl fmt::Display for IrqAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IrqAffinity::Balanced => f.write_str("balanced"),
            IrqAffinity::Running => f.write_str("running"),
            IrqAffinity::Vcpus(set) => {
                let parts: Vec<String> = set.iter().map(|c| c.to_string()).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// Host CPUs the thread completing device requests may run on (native: the
/// device stand-in's completion thread; vm: smplab-vmm's block device thread;
/// sim: the modelled host's pCPUs). Empty: not pinned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IoThreadCpus(pub Vec<usize>);

impl IoThreadCpus {
    pub fn is_float(&self) -> bool {
        self.0.is_empty()
    }
}

/// A malformed `io_thread_cpus`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad io thread CPUs `{text}` ({source}); use none or a CPU list like 1 or 0-1")]
pub struct BadIoThreadCpus {
    pub text: String,
    pub source: crate::cpus::CpuListError,
}

impl FromStr for IoThreadCpus {
    type Err = BadIoThreadCpus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "none" | "float" => Ok(IoThreadCpus::default()),
            list => crate::cpus::parse_cpu_list(list)
                .map(IoThreadCpus)
                .map_err(|source| BadIoThreadCpus {
                    text: s.to_string(),
                    source,
                }),
        }
    }
}

impl fmt::Display for IoThreadCpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let parts: Vec<String> = self.0.iter().map(|c| c.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

serde_as_string!(IrqAffinity);
serde_as_string!(IoThreadCpus);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_affinity_round_trips_and_targets() {
        for text in ["0", "1,3", "balanced", "running"] {
            let a: IrqAffinity = text.parse().unwrap();
            assert_eq!(a.to_string(), text);
        }
        assert_eq!(IrqAffinity::default().to_string(), "0");
        let set: IrqAffinity = "1-2".parse().unwrap();
        assert_eq!(
            (0..4).map(|k| set.target(k, 4)).collect::<Vec<_>>(),
            [1, 2, 1, 2]
        );
        assert_eq!(
            (0..5)
                .map(|k| IrqAffinity::Balanced.target(k, 3))
                .collect::<Vec<_>>(),
            [0, 1, 2, 0, 1]
        );
        let e = "x".parse::<IrqAffinity>().unwrap_err().to_string();
        assert!(e.contains("balanced"), "{e}");
        let mut p = Vec::new();
        "0,4".parse::<IrqAffinity>().unwrap().validate(4, &mut p);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].to_string().contains("vCPU 4 does not exist"),
            "{}",
            p[0]
        );
    }

    #[test]
    fn io_thread_cpus_round_trip() {
        assert_eq!(
            "none".parse::<IoThreadCpus>().unwrap(),
            IoThreadCpus::default()
        );
        assert_eq!("0-1".parse::<IoThreadCpus>().unwrap().to_string(), "0,1");
        assert!("1-0".parse::<IoThreadCpus>().is_err());
        let json = serde_json::to_string(&IoThreadCpus(vec![1])).unwrap();
        assert_eq!(json, "\"1\"");
    }
}
