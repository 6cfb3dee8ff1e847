//! Settings of the executors that boot a Linux kernel and run a real program
//! in it (docs/lab.md, "Real programs"): `linux` (smplab-vmm) and
//! `linux-qemu` (QEMU as the peer). The program itself is the run's
//! workload, not a setting: its argv names the record's workload
//! (`WorkloadInfo::for_program`) and a lab point's `program`.

use super::{check_range, is_default, ConfigError, IoThreadCpus, Irqchip, Placement, SyncMode};
use crate::Executor;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Environment variable naming the kernel a Linux run boots when no
/// `--kernel` (spec `kernel`) is given.
pub const LINUX_KERNEL_ENV: &str = "SMPLAB_LINUX_KERNEL";
/// Most vCPUs of one Linux guest (smplab-vmm's MADT and KVM's soft limit on
/// these hosts; far above what a 2-core host can run).
pub const MAX_LINUX_VCPUS: u32 = 64;
/// Least guest memory a Linux guest with an initramfs boots with.
pub const MIN_LINUX_MEM_BYTES: u64 = 128 << 20;
/// Guest memory of a Linux run unless told otherwise.
pub const DEFAULT_LINUX_MEM_BYTES: u64 = 512 << 20;
/// Most guest memory of a Linux run.
pub const MAX_LINUX_MEM_BYTES: u64 = 4 << 30;

/// What a Linux guest boots and how much memory it has: the part `linux`
/// and `linux-qemu` share, so both run the same kernel and initramfs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxGuestSettings {
    pub vcpus: u32,
    /// smplab-vmm: vCPU i on the i-th CPU; QEMU: confined to the set.
    #[serde(default, skip_serializing_if = "Placement::is_float")]
    pub placement: Placement,
    /// Guest memory; `None`: [`DEFAULT_LINUX_MEM_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// The kernel (bzImage or PVH ELF); `None`: the one
    /// [`LINUX_KERNEL_ENV`] names when the run starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<PathBuf>,
    /// A ready initramfs to boot instead of one built from the program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initrd: Option<PathBuf>,
    /// Host files put into the built initramfs at the same path (the
    /// program's input files, for instance).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include: Vec<PathBuf>,
}

impl LinuxGuestSettings {
    /// `vcpus` vCPUs, every other setting at its default.
    pub fn new(vcpus: u32) -> LinuxGuestSettings {
        LinuxGuestSettings {
            vcpus,
            placement: Placement::default(),
            mem_bytes: None,
            kernel: None,
            initrd: None,
            include: Vec::new(),
        }
    }

    /// The guest memory the run gets.
    pub fn mem(&self) -> u64 {
        self.mem_bytes.unwrap_or(DEFAULT_LINUX_MEM_BYTES)
    }

    fn validate(&self, p: &mut Vec<ConfigError>) {
        check_range(
            p,
            "vcpus",
            self.vcpus.into(),
            1,
            MAX_LINUX_VCPUS.into(),
            "vCPUs of one Linux guest",
        );
        if let Some(m) = self.mem_bytes {
            check_range(
                p,
                "mem",
                m,
                MIN_LINUX_MEM_BYTES,
                MAX_LINUX_MEM_BYTES,
                "a Linux guest with an initramfs needs 128 MiB",
            );
        }
        if self.initrd.is_some() && !self.include.is_empty() {
            p.push(ConfigError::new(
                "include",
                "--include adds files to the initramfs smplab builds; with --initrd the given one boots as it is: drop one of them",
            ));
        }
    }

    fn label(&self, parts: &mut Vec<String>) {
        if let Some(m) = self.mem_bytes {
            parts.push(format!("mem={}M", m >> 20));
        }
        if let Some(k) = &self.kernel {
            parts.push(format!("kernel={}", k.display()));
        }
        if let Some(i) = &self.initrd {
            parts.push(format!("initrd={}", i.display()));
        }
    }
}

/// Settings of a `linux` run: a Linux kernel on smplab-vmm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxSettings {
    #[serde(flatten)]
    pub guest: LinuxGuestSettings,
    #[serde(default)]
    pub sync: SyncMode,
    /// Interrupt controllers: KVM's (`kernel`) or smplab-vmm's models (`user`).
    #[serde(default, skip_serializing_if = "is_default")]
    pub irqchip: Irqchip,
}

/// The machine QEMU emulates for a `linux-qemu` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum QemuMachine {
    /// `-M microvm`: no PCI, no firmware, the closest peer of smplab-vmm.
    #[default]
    Microvm,
    /// `-M q35`: a PC with PCIe and ACPI, as most clouds boot.
    Q35,
}

impl QemuMachine {
    pub fn as_str(self) -> &'static str {
        match self {
            QemuMachine::Microvm => "microvm",
            QemuMachine::Q35 => "q35",
        }
    }
}

impl fmt::Display for QemuMachine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A machine name QEMU runs that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown machine `{0}`: use microvm (QEMU -M microvm) or q35 (QEMU -M q35)")]
pub struct BadQemuMachine(pub String);

impl FromStr for QemuMachine {
    type Err = BadQemuMachine;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "microvm" => Ok(QemuMachine::Microvm),
            "q35" => Ok(QemuMachine::Q35),
            _ => Err(BadQemuMachine(s.to_string())),
        }
    }
}

serde_as_string!(QemuMachine);

/// Settings of a `linux-qemu` run: the same kernel and initramfs under QEMU
/// with KVM (QEMU has its own device locking and irqchip: no sync, no irqchip).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinuxQemuSettings {
    #[serde(flatten)]
    pub guest: LinuxGuestSettings,
    #[serde(default, skip_serializing_if = "is_default")]
    pub machine: QemuMachine,
}

/// No thread of a Linux run completes smplab's device requests.
static NO_IO_THREAD: IoThreadCpus = IoThreadCpus(Vec::new());

/// What `linux` and `linux-qemu` answer alike through `ExecutorSettings`.
macro_rules! linux_guest_settings {
    () => {
        fn linux_guest(&self) -> Option<&LinuxGuestSettings> {
            Some(&self.guest)
        }
        fn linux_guest_mut(&mut self) -> Option<&mut LinuxGuestSettings> {
            Some(&mut self.guest)
        }
        fn placement(&self) -> &Placement {
            &self.guest.placement
        }
        fn placement_mut(&mut self) -> &mut Placement {
            &mut self.guest.placement
        }
        fn io_thread_cpus(&self) -> &IoThreadCpus {
            &NO_IO_THREAD
        }
        fn io_thread_cpus_mut(&mut self) -> Option<&mut IoThreadCpus> {
            None
        }
        fn vcpus(&self) -> Option<u32> {
            Some(self.guest.vcpus)
        }
        fn vcpus_mut(&mut self) -> Option<&mut u32> {
            Some(&mut self.guest.vcpus)
        }
        fn runs_real_programs(&self) -> bool {
            true
        }
        fn runs_models(&self) -> bool {
            false
        }
    };
}

impl super::ExecutorSettings for LinuxSettings {
    fn executor(&self) -> Executor {
        Executor::Linux
    }
    linux_guest_settings!();
    fn sync(&self) -> Option<SyncMode> {
        Some(self.sync)
    }
    fn sync_mut(&mut self) -> Option<&mut SyncMode> {
        Some(&mut self.sync)
    }
    fn irqchip(&self) -> Option<Irqchip> {
        Some(self.irqchip)
    }
    fn validate(&self, _threads: Option<u32>, p: &mut Vec<ConfigError>) {
        self.guest.validate(p);
    }
    fn label_own(&self, parts: &mut Vec<String>) {
        if self.irqchip != Irqchip::default() {
            parts.push(format!("irqchip={}", self.irqchip));
        }
        self.guest.label(parts);
    }
}

impl super::ExecutorSettings for LinuxQemuSettings {
    fn executor(&self) -> Executor {
        Executor::LinuxQemu
    }
    linux_guest_settings!();
    fn validate(&self, _threads: Option<u32>, p: &mut Vec<ConfigError>) {
        self.guest.validate(p);
    }
    fn label_own(&self, parts: &mut Vec<String>) {
        if self.machine != QemuMachine::default() {
            parts.push(format!("machine={}", self.machine));
        }
        self.guest.label(parts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;

    #[test]
    fn linux_configs_round_trip_and_keep_their_executor_names() {
        let mut s = LinuxSettings {
            guest: LinuxGuestSettings::new(2),
            sync: SyncMode::Global,
            irqchip: Irqchip::User,
        };
        s.guest.kernel = Some("/boot/vmlinuz".into());
        s.guest.include = vec!["/tmp/in.dat".into()];
        let c = RunConfig::Linux(s);
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(
            text,
            r#"{"executor":"linux","vcpus":2,"kernel":"/boot/vmlinuz","include":["/tmp/in.dat"],"sync":"global","irqchip":"user"}"#
        );
        assert_eq!(serde_json::from_str::<RunConfig>(&text).unwrap(), c);
        let q = RunConfig::LinuxQemu(LinuxQemuSettings {
            guest: LinuxGuestSettings::new(4),
            machine: QemuMachine::Q35,
        });
        let text = serde_json::to_string(&q).unwrap();
        assert_eq!(
            text,
            r#"{"executor":"linux-qemu","vcpus":4,"machine":"q35"}"#
        );
        assert_eq!(serde_json::from_str::<RunConfig>(&text).unwrap(), q);
        assert_eq!(q.label(), "4vcpu machine=q35");
    }

    #[test]
    fn linux_settings_are_validated() {
        let mut g = LinuxGuestSettings::new(0);
        g.mem_bytes = Some(16 << 20);
        g.initrd = Some("/tmp/i.cpio".into());
        g.include = vec!["/etc/hosts".into()];
        let c = RunConfig::LinuxQemu(LinuxQemuSettings {
            guest: g,
            machine: QemuMachine::Microvm,
        });
        let e = c.validate(None).unwrap_err();
        let settings: Vec<&str> = e.iter().map(|e| e.setting).collect();
        assert_eq!(settings, ["vcpus", "mem", "include"], "{e:?}");
        assert!("pc".parse::<QemuMachine>().is_err());
    }
}
