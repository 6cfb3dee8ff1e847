//! Facts about the machine a run happened on. Read from /proc and /sys only,
//! so every executor (and `smplab doctor`) can fill them without KVM ioctls.

use crate::platform::{self, KvmModule, Platform};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// How KVM is provided on this host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvmBacking {
    /// kvm_intel / kvm_amd: VT-x or AMD-V; guest kernel code runs at full speed.
    Hardware,
    /// kvm_pvm (Pagetable-based Virtual Machine, nested without VT-x/AMD-V):
    /// guest CPL3 runs natively, guest CPL0 runs in KVM's instruction emulator.
    Pvm,
    /// /dev/kvm is there but the backing module is not one we know.
    Unknown,
    /// No KVM module loaded.
    Absent,
}

/// KVM availability on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvmFacts {
    /// `/dev/kvm` exists.
    pub device_present: bool,
    /// `/dev/kvm` can be opened read-write by this process.
    pub device_usable: bool,
    pub backing: KvmBacking,
    /// Whether guest kernel-mode code runs on hardware (false on PVM).
    pub hardware_backed: bool,
    /// kvm.halt_poll_ns module parameter, if readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt_poll_ns: Option<u64>,
}

/// The host a run happened on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub cpu_model: String,
    /// Logical CPUs online.
    pub cores: u32,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// The host itself runs under a hypervisor (CPUID hypervisor bit).
    pub nested: bool,
    pub kvm: KvmFacts,
    /// Hardware KVM on a real CPU, hardware KVM on an emulated CPU, PVM, ...
    /// (`Unknown` in records written before it was recorded).
    #[serde(default)]
    pub platform: Platform,
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

impl KvmFacts {
    pub fn detect() -> Self {
        let device_present = Path::new("/dev/kvm").exists();
        let device_usable = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .is_ok();
        let module = |m: &str| Path::new("/sys/module").join(m).exists();
        let backing = if module("kvm_pvm") {
            KvmBacking::Pvm
        } else if module("kvm_intel") || module("kvm_amd") {
            KvmBacking::Hardware
        } else if device_present {
            KvmBacking::Unknown
        } else {
            KvmBacking::Absent
        };
        KvmFacts {
            device_present,
            device_usable,
            backing,
            hardware_backed: backing == KvmBacking::Hardware,
            halt_poll_ns: read_trimmed("/sys/module/kvm/parameters/halt_poll_ns")
                .and_then(|s| s.parse().ok()),
        }
    }
}

impl HostFacts {
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".to_string());
        let nested = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .map(|l| l.split_whitespace().any(|f| f == "hypervisor"))
            .unwrap_or(false);
        let cpu_emulated =
            platform::cpu_emulated(platform::hypervisor_signature().as_ref(), &cpuinfo);
        let kvm = KvmFacts::detect();
        let cores = std::thread::available_parallelism()
            .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
            .unwrap_or(1);
        HostFacts {
            hostname: read_trimmed("/proc/sys/kernel/hostname").unwrap_or_default(),
            cpu_model,
            cores,
            kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
            nested,
            platform: Platform::classify(
                match kvm.backing {
                    KvmBacking::Hardware => KvmModule::Hardware,
                    KvmBacking::Pvm => KvmModule::Pvm,
                    KvmBacking::Unknown | KvmBacking::Absent => KvmModule::Other,
                },
                cpu_emulated,
            ),
            kvm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detect_reads_this_host() {
        let h = HostFacts::detect();
        assert!(h.cores >= 1);
        assert!(!h.kernel.is_empty());
        // hardware_backed is consistent with the backing.
        assert_eq!(h.kvm.hardware_backed, h.kvm.backing == KvmBacking::Hardware);
        // The platform agrees with the backing.
        assert_eq!(
            h.platform == Platform::Pvm,
            h.kvm.backing == KvmBacking::Pvm
        );
    }
}
