//! Which kind of platform a run's figures come from. The same binaries take
//! different KVM code paths, at very different costs, on a host with VT-x or
//! AMD-V, on one whose CPU (and its AMD-V) QEMU's TCG emulates, and on a
//! nested PVM host (docs/nested-host.md); a record says which it was, so
//! figures from different platforms are never mistaken for one another.

use serde::{Deserialize, Serialize};

/// Which KVM module backs `/dev/kvm`, as far as the platform goes (the host
/// facts' `KvmBacking` maps onto it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvmModule {
    /// kvm_intel / kvm_amd.
    Hardware,
    /// kvm_pvm.
    Pvm,
    /// None, or one not known.
    Other,
}

/// The platform a run happened on, as far as KVM and the CPU are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Platform {
    /// kvm_intel / kvm_amd on a real CPU: the platform smplab's users have.
    HardwareKvm,
    /// kvm_intel / kvm_amd on a CPU that QEMU's TCG emulates (the nested
    /// AMD-V host, tools/nested-host): the KVM code paths of a hardware host,
    /// but every instruction is translated, so timings are nobody's hardware.
    HardwareKvmOnEmulatedCpu,
    /// kvm_pvm: guest user mode runs natively, guest kernel mode in KVM's
    /// instruction emulator (about 1000x slower).
    Pvm,
    /// No usable hardware or PVM KVM; the CPU is real.
    NoKvm,
    /// No usable hardware or PVM KVM, on a CPU that QEMU's TCG emulates.
    NoKvmOnEmulatedCpu,
    /// Not recorded (records written before this field) or not recognised.
    #[default]
    Unknown,
}

impl Platform {
    /// The platform for the KVM module in use on a real (`cpu_emulated ==
    /// false`) or emulated CPU.
    pub fn classify(kvm: KvmModule, cpu_emulated: bool) -> Self {
        match (kvm, cpu_emulated) {
            (KvmModule::Hardware, false) => Platform::HardwareKvm,
            (KvmModule::Hardware, true) => Platform::HardwareKvmOnEmulatedCpu,
            (KvmModule::Pvm, _) => Platform::Pvm,
            (KvmModule::Other, false) => Platform::NoKvm,
            (KvmModule::Other, true) => Platform::NoKvmOnEmulatedCpu,
        }
    }

    /// Whether the CPU itself is emulated: every timing (native runs too)
    /// then measures the emulator, not a machine.
    pub fn cpu_emulated(self) -> bool {
        matches!(
            self,
            Platform::HardwareKvmOnEmulatedCpu | Platform::NoKvmOnEmulatedCpu
        )
    }

    /// One line for `smplab doctor` and reports.
    pub fn describe(self) -> &'static str {
        match self {
            Platform::HardwareKvm => "hardware KVM (VT-x/AMD-V) on a real CPU",
            Platform::HardwareKvmOnEmulatedCpu => {
                "hardware KVM (VT-x/AMD-V) on a CPU emulated by QEMU's TCG: real KVM code paths, emulated timings"
            }
            Platform::Pvm => "PVM (kvm_pvm): guest kernel code runs in KVM's instruction emulator",
            Platform::NoKvm => "no usable KVM on a real CPU",
            Platform::NoKvmOnEmulatedCpu => "no usable KVM, on a CPU emulated by QEMU's TCG",
            Platform::Unknown => "unknown (not recorded)",
        }
    }

    /// The warning a summary or report shows beside timings from an
    /// emulated CPU; `None` on a real one.
    pub fn timing_warning(self) -> Option<&'static str> {
        self.cpu_emulated().then_some(
            "timings come from a CPU emulated by QEMU's TCG: they measure the emulator, not a machine; compare them only with each other",
        )
    }
}

/// The hypervisor vendor signature of CPUID leaf 0x4000_0000 (12 bytes from
/// EBX, ECX, EDX), if the CPU has a hypervisor leaf.
#[cfg(target_arch = "x86_64")]
pub fn hypervisor_signature() -> Option<[u8; 12]> {
    use core::arch::x86_64::__cpuid;
    // CPUID exists on every x86-64 CPU and only reads registers.
    let leaf1 = __cpuid(1);
    if leaf1.ecx & (1 << 31) == 0 {
        return None; // no hypervisor bit: the hypervisor leaves are not defined
    }
    // With the hypervisor bit set, leaf 0x4000_0000 is the hypervisor's
    // vendor leaf.
    let leaf = __cpuid(0x4000_0000);
    let mut sig = [0u8; 12];
    sig[0..4].copy_from_slice(&leaf.ebx.to_le_bytes());
    sig[4..8].copy_from_slice(&leaf.ecx.to_le_bytes());
    sig[8..12].copy_from_slice(&leaf.edx.to_le_bytes());
    Some(sig)
}

/// Without x86-64 there is no CPUID hypervisor leaf to read.
#[cfg(not(target_arch = "x86_64"))]
pub fn hypervisor_signature() -> Option<[u8; 12]> {
    None
}

/// The vendor signature QEMU's TCG puts in CPUID leaf 0x4000_0000.
pub const TCG_SIGNATURE: &[u8; 12] = b"TCGTCGTCGTCG";

/// Whether this CPU is emulated by QEMU's TCG, from the hypervisor leaf's
/// signature or, when the leaf is hidden, /proc/cpuinfo's model name (QEMU's
/// own CPU models under TCG name themselves "QEMU TCG CPU").
pub fn cpu_emulated(signature: Option<&[u8; 12]>, cpuinfo: &str) -> bool {
    if signature.is_some_and(|s| s == TCG_SIGNATURE) {
        return true;
    }
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("model name"))
        .any(|l| l.contains("QEMU TCG"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_tells_the_platforms_apart() {
        assert_eq!(
            Platform::classify(KvmModule::Hardware, false),
            Platform::HardwareKvm
        );
        assert_eq!(
            Platform::classify(KvmModule::Hardware, true),
            Platform::HardwareKvmOnEmulatedCpu
        );
        assert_eq!(Platform::classify(KvmModule::Pvm, false), Platform::Pvm);
        assert_eq!(
            Platform::classify(KvmModule::Other, true),
            Platform::NoKvmOnEmulatedCpu
        );
        assert!(Platform::HardwareKvmOnEmulatedCpu
            .timing_warning()
            .is_some());
        assert!(Platform::HardwareKvm.timing_warning().is_none());
        assert!(Platform::Pvm.timing_warning().is_none());
    }

    #[test]
    fn tcg_is_recognised_by_signature_or_model_name() {
        assert!(cpu_emulated(Some(TCG_SIGNATURE), ""));
        assert!(!cpu_emulated(
            Some(b"KVMKVMKVM\0\0\0"),
            "model name : AMD EPYC"
        ));
        assert!(!cpu_emulated(None, "model name\t: AMD EPYC 7B13"));
        assert!(cpu_emulated(
            None,
            "model name\t: QEMU TCG CPU version 2.5+\nflags : fpu"
        ));
    }

    #[test]
    fn old_records_read_as_unknown() {
        #[derive(Deserialize)]
        struct Host {
            #[serde(default)]
            platform: Platform,
        }
        let h: Host = serde_json::from_str("{}").expect("an empty object reads");
        assert_eq!(h.platform, Platform::Unknown);
        let h: Host = serde_json::from_str(r#"{"platform":"hardware_kvm_on_emulated_cpu"}"#)
            .expect("the snake_case name reads");
        assert_eq!(h.platform, Platform::HardwareKvmOnEmulatedCpu);
    }
}
