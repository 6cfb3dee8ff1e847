//! The `linux` section: a real program run under a small init, in a Linux
//! guest on smplab-vmm or QEMU, or natively by the same init (docs/linux.md).
//! Filled by `smplab-linux`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where the program ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinuxHost {
    /// On the host, under the init's native mode (no VM).
    #[default]
    Native,
    /// In a Linux guest on smplab-vmm.
    SmplabVmm,
    /// In a Linux guest on QEMU with KVM.
    Qemu,
}

impl LinuxHost {
    /// What a reader calls it (reports, summaries).
    pub fn reader_name(self) -> &'static str {
        match self {
            LinuxHost::Native => "native",
            LinuxHost::SmplabVmm => "smplab-vmm",
            LinuxHost::Qemu => "QEMU",
        }
    }
}

/// How the program ended: an exit status or the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProgramExit {
    Status(i32),
    Signal(i32),
}

impl Default for ProgramExit {
    fn default() -> Self {
        ProgramExit::Status(0)
    }
}

impl ProgramExit {
    /// The status a shell would report: the exit status, or 128 + signal.
    pub fn shell_status(self) -> i32 {
        match self {
            ProgramExit::Status(s) => s,
            ProgramExit::Signal(n) => 128 + n,
        }
    }

    /// Whether the program exited with status 0.
    pub fn success(self) -> bool {
        self == ProgramExit::Status(0)
    }
}

/// One run of a real program under the smplab Linux init.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LinuxSection {
    /// Where it ran.
    pub host: LinuxHost,
    /// The program's argument vector as given (`argv[0]` first).
    pub argv: Vec<String>,
    /// The file that was executed (absolute; the same path in the guest).
    pub program_path: String,
    /// The program's wall time: the init's `CLOCK_MONOTONIC` read before
    /// `fork` and after `waitpid` (the guest's clock in a guest), in ns.
    pub wall_ns: u64,
    pub exit: ProgramExit,
    /// Bytes the program wrote to stdout and stderr (one pipe, drained by the init).
    pub output_bytes: u64,
    /// The last bytes of that output (at most the init's tail size; bytes that
    /// are not UTF-8 replaced).
    pub output_tail: String,
    /// CPUs online when the init started the program (the guest's, or the host's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_online: Option<u32>,
    /// From the start of the VM (smplab-vmm: VM construction; QEMU: spawning
    /// the process) to the init's first sign of life (smplab-vmm: "ready" on
    /// the window port; QEMU: the `@@SMPLAB-LINUX-INIT` console line), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_to_init_ns: Option<u64>,
    /// The guest's own `CLOCK_MONOTONIC` when the init started (the kernel's
    /// boot as the guest measures it), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_init_clock_ns: Option<u64>,
    /// The whole run as the host saw it (start to VM or process exit), ns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
    /// Size of the initramfs the guest booted, bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initramfs_bytes: Option<u64>,
    /// QEMU's `query-stats` (KVM provider) after the program: `vm.NAME` and
    /// `vcpuN.NAME` → value (scalar statistics only).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub qemu_stats: BTreeMap<String, u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_old_records_load() {
        let mut s = LinuxSection {
            host: LinuxHost::Qemu,
            argv: vec!["pigz".into(), "-p".into(), "2".into()],
            program_path: "/usr/bin/pigz".into(),
            wall_ns: 12,
            exit: ProgramExit::Signal(9),
            output_bytes: 3,
            output_tail: "abc".into(),
            cpus_online: Some(2),
            boot_to_init_ns: Some(5),
            ..LinuxSection::default()
        };
        s.qemu_stats.insert("vcpu0.exits".into(), 7);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<LinuxSection>(&text).unwrap(), s);
        let old: LinuxSection = serde_json::from_str("{}").unwrap();
        assert_eq!(old, LinuxSection::default());
        assert_eq!(ProgramExit::Signal(9).shell_status(), 137);
        assert!(!ProgramExit::Status(3).success());
    }
}
