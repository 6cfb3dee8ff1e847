//! The [`Vm`]: the KVM handles of one virtual machine (the `/dev/kvm` fd, the VM
//! fd with its interrupt controller) and the guest memory registered with it.
//! vCPUs are made here ([`Vm::create_vcpu_fd`]) and run as [`crate::vcpu::Vcpu`].

use crate::boot::ram_regions;
use crate::error::VmmError;
use crate::kvm_stats;
use kvm_bindings::{kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm, VcpuFd, VmFd};
use std::fs::File;
use vm_memory::{
    Address, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress,
};

/// Environment variable naming another KVM device node than /dev/kvm (used by
/// tests to simulate a host without KVM).
pub const KVM_DEVICE_ENV: &str = "SMPLAB_KVM_DEVICE";

/// KVM on Intel needs three pages for the real-mode TSS below 4 GiB.
const TSS_ADDR: usize = 0xfffb_d000;

/// Where the interrupt controllers are emulated: the run configuration's one
/// type. `Kernel`: KVM's in-kernel LAPIC, IOAPIC and PIC (`KVM_CREATE_IRQCHIP`);
/// HLT, LAPIC MMIO and interrupt windows never reach user space. `User`: no
/// in-kernel irqchip; smplab-vmm's models (`crate::irqchip`) on the bus.
pub use smplab_record::config::Irqchip;

/// Open /dev/kvm (or `$SMPLAB_KVM_DEVICE`), mapping failure to the "unavailable" error.
pub fn open_kvm() -> Result<Kvm, VmmError> {
    let path = std::env::var(KVM_DEVICE_ENV).unwrap_or_else(|_| "/dev/kvm".to_string());
    let c_path = std::ffi::CString::new(path).map_err(|_| VmmError::KvmUnavailable {
        source: kvm_ioctls::Error::new(libc::EINVAL),
    })?;
    Kvm::new_with_path(&c_path).map_err(|source| VmmError::KvmUnavailable { source })
}

/// One virtual machine: KVM, the VM fd and its guest memory.
///
/// Field order is drop order: the VM fd is closed before the memory it maps is
/// unmapped. vCPU fds keep the VM alive in the kernel, so every
/// [`crate::vcpu::Vcpu`] must be dropped before its `Vm` (or the `Vm` leaked when
/// a vCPU thread cannot be stopped).
pub struct Vm {
    kvm: Kvm,
    fd: VmFd,
    irqchip: Irqchip,
    memory: GuestMemoryMmap,
}

impl Vm {
    /// Create the VM with `mem_bytes` of RAM (laid out by [`ram_regions`]) and
    /// the interrupt controller `irqchip`.
    pub fn new(kvm: Kvm, mem_bytes: u64, irqchip: Irqchip) -> Result<Vm, VmmError> {
        if !kvm.check_extension(Cap::UserMemory) {
            return Err(VmmError::KvmCapabilityMissing("KVM_CAP_USER_MEMORY"));
        }
        // The stop protocol (crate::vcpu::Kicker) relies on kvm_run.immediate_exit.
        if !kvm.check_extension(Cap::ImmediateExit) {
            return Err(VmmError::KvmCapabilityMissing("KVM_CAP_IMMEDIATE_EXIT"));
        }
        if irqchip == Irqchip::Kernel && !kvm.check_extension(Cap::Irqchip) {
            return Err(VmmError::KvmCapabilityMissing("KVM_CAP_IRQCHIP"));
        }
        let memory = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).map_err(|e| {
            VmmError::Memory {
                bytes: mem_bytes,
                reason: e.to_string(),
            }
        })?;
        advise_huge_pages(&memory);
        let fd = kvm.create_vm().map_err(VmmError::kvm("KVM_CREATE_VM"))?;
        // Intel needs the TSS address before the irqchip; elsewhere it is harmless.
        let _ = fd.set_tss_address(TSS_ADDR);
        match irqchip {
            Irqchip::Kernel => fd
                .create_irq_chip()
                .map_err(VmmError::kvm("KVM_CREATE_IRQCHIP"))?,
            // The VMM's own models (crate::irqchip) stand in; no in-kernel PIT either.
            Irqchip::User => {}
        }
        register_memory(&fd, &memory)?;
        Ok(Vm {
            kvm,
            fd,
            irqchip,
            memory,
        })
    }

    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.memory
    }

    pub fn fd(&self) -> &VmFd {
        &self.fd
    }

    pub fn kvm(&self) -> &Kvm {
        &self.kvm
    }

    pub fn irqchip(&self) -> Irqchip {
        self.irqchip
    }

    /// The maximum number of vCPUs KVM allows this VM.
    pub fn max_vcpus(&self) -> u32 {
        clamp_vcpus(self.kvm.get_max_vcpus())
    }

    /// Create vCPU `index` with KVM's supported CPUID and its APIC id (and,
    /// with the user-space irqchip, without TSC-deadline and x2APIC, which its
    /// xAPIC model does not offer).
    pub fn create_vcpu_fd(&self, index: u32) -> Result<VcpuFd, VmmError> {
        let vcpu = self
            .fd
            .create_vcpu(u64::from(index))
            .map_err(VmmError::kvm("KVM_CREATE_VCPU"))?;
        set_cpuid_for(&self.kvm, &vcpu, index, self.irqchip)?;
        Ok(vcpu)
    }

    /// KVM's binary statistics file of the VM, when the host has one.
    pub fn stats_file(&self) -> Option<File> {
        kvm_stats::open_stats(&self.fd).ok()
    }
}

fn clamp_vcpus(max: usize) -> u32 {
    u32::try_from(max).unwrap_or(u32::MAX)
}

/// CPUID.1:ECX bits the user-space LAPIC model does not implement.
const CPUID1_ECX_X2APIC: u32 = 1 << 21;
const CPUID1_ECX_TSC_DEADLINE: u32 = 1 << 24;
/// CPUID.1:ECX "running under a hypervisor": Linux looks for the KVM
/// signature leaf (and so kvm-clock) only when it is set. KVM's supported
/// CPUID leaves it to the VMM (QEMU sets it too).
const CPUID1_ECX_HYPERVISOR: u32 = 1 << 31;
/// KVM's signature leaf ("KVMKVMKVM"; EAX: the highest hypervisor leaf).
const KVM_CPUID_SIGNATURE: u32 = 0x4000_0000;
/// The hypervisor timing leaf (the VMware/KVM convention QEMU follows):
/// EAX the TSC frequency, EBX the LAPIC timer frequency, both in kHz.
const CPUID_TIMING_LEAF: u32 = 0x4000_0010;
/// KVM's LAPIC timer runs at 1 GHz on every host.
const KVM_LAPIC_TIMER_KHZ: u32 = 1_000_000;

/// KVM's supported CPUID with the APIC id of vCPU `index` in leaves 1, 0xb and 0x1f.
pub fn set_cpuid(kvm: &Kvm, vcpu: &VcpuFd, index: u32) -> Result<(), VmmError> {
    set_cpuid_for(kvm, vcpu, index, Irqchip::Kernel)
}

/// As [`set_cpuid`], hiding x2APIC and the TSC-deadline timer for
/// `Irqchip::User`; with the hypervisor bit, and the timing leaf when KVM
/// reports the vCPU's TSC frequency.
pub fn set_cpuid_for(
    kvm: &Kvm,
    vcpu: &VcpuFd,
    index: u32,
    irqchip: Irqchip,
) -> Result<(), VmmError> {
    let mut cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(VmmError::kvm("KVM_GET_SUPPORTED_CPUID"))?;
    let tsc_khz = vcpu.get_tsc_khz().ok().filter(|&khz| khz > 0);
    let has_signature = cpuid
        .as_slice()
        .iter()
        .any(|e| e.function == KVM_CPUID_SIGNATURE);
    for entry in cpuid.as_mut_slice() {
        match entry.function {
            // Initial APIC id in EBX[31:24].
            1 => {
                entry.ebx = (entry.ebx & 0x00ff_ffff) | (index << 24);
                entry.ecx |= CPUID1_ECX_HYPERVISOR;
                if irqchip == Irqchip::User {
                    entry.ecx &= !(CPUID1_ECX_X2APIC | CPUID1_ECX_TSC_DEADLINE);
                }
            }
            // x2APIC id in EDX of the topology leaves.
            0xb | 0x1f => entry.edx = index,
            KVM_CPUID_SIGNATURE if tsc_khz.is_some() => {
                entry.eax = entry.eax.max(CPUID_TIMING_LEAF);
            }
            _ => {}
        }
    }
    if let (Some(khz), true) = (tsc_khz, has_signature) {
        cpuid
            .push(kvm_bindings::kvm_cpuid_entry2 {
                function: CPUID_TIMING_LEAF,
                eax: khz,
                ebx: KVM_LAPIC_TIMER_KHZ,
                ..Default::default()
            })
            .map_err(|_| VmmError::KvmCapabilityMissing("room for the CPUID timing leaf"))?;
    }
    vcpu.set_cpuid2(&cpuid)
        .map_err(VmmError::kvm("KVM_SET_CPUID2"))
}

/// Ask for transparent huge pages on guest RAM (as QEMU does): with THP in
/// `madvise` mode, the host's default, RAM is otherwise backed by 4 KiB pages
/// and KVM can only map the guest with 4 KiB entries, which costs TLB reach on
/// memory-heavy workloads. Advice only: failure leaves 4 KiB pages.
fn advise_huge_pages(mem: &GuestMemoryMmap) {
    for region in mem.iter() {
        let Ok(host) = mem.get_host_address(region.start_addr()) else {
            continue;
        };
        let Ok(len) = usize::try_from(region.len()) else {
            continue;
        };
        // SAFETY: `host` and `len` describe one mapping owned by `mem`, which
        // outlives this call; madvise(MADV_HUGEPAGE) changes no contents and no
        // protection, it only lets the kernel back the range with huge pages.
        unsafe {
            libc::madvise(host.cast::<libc::c_void>(), len, libc::MADV_HUGEPAGE);
        }
    }
}

fn register_memory(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<(), VmmError> {
    for (slot, region) in mem.iter().enumerate() {
        let host = region
            .get_host_address(MemoryRegionAddress(0))
            .map_err(|e| VmmError::Memory {
                bytes: region.len(),
                reason: e.to_string(),
            })?;
        let region_desc = kvm_userspace_memory_region {
            slot: u32::try_from(slot).map_err(|_| VmmError::Memory {
                bytes: region.len(),
                reason: "too many memory regions".into(),
            })?,
            flags: 0,
            guest_phys_addr: region.start_addr().raw_value(),
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: the host range is a live mmap owned by `mem`, which the `Vm`
        // owns and drops after the VM fd (field order), and which is leaked if a
        // vCPU thread could not be stopped; slots do not overlap.
        unsafe { vm.set_user_memory_region(region_desc) }
            .map_err(VmmError::kvm("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(())
}

/// The KVM capabilities smplab-vmm uses and whether this host has them (the
/// maximum vCPU count is [`max_vcpus`]).
pub fn kvm_capabilities() -> Result<Vec<(String, bool)>, VmmError> {
    let kvm = open_kvm()?;
    let mut caps: Vec<(String, bool)> = [
        ("KVM_CAP_IRQCHIP", Cap::Irqchip),
        ("KVM_CAP_USER_MEMORY", Cap::UserMemory),
        ("KVM_CAP_SET_TSS_ADDR", Cap::SetTssAddr),
        ("KVM_CAP_EXT_CPUID", Cap::ExtCpuid),
        ("KVM_CAP_MP_STATE", Cap::MpState),
        ("KVM_CAP_IMMEDIATE_EXIT", Cap::ImmediateExit),
        ("KVM_CAP_GET_TSC_KHZ", Cap::GetTscKhz),
        ("KVM_CAP_TSC_DEADLINE_TIMER", Cap::TscDeadlineTimer),
        ("KVM_CAP_X2APIC_API", Cap::X2ApicApi),
    ]
    .into_iter()
    .map(|(name, cap)| (name.to_string(), kvm.check_extension(cap)))
    .collect();
    caps.push((
        "KVM_CAP_BINARY_STATS_FD".to_string(),
        kvm.check_extension_raw(kvm_stats::KVM_CAP_BINARY_STATS_FD) > 0,
    ));
    Ok(caps)
}

/// The maximum number of vCPUs KVM allows per VM on this host.
pub fn max_vcpus() -> Result<u32, VmmError> {
    Ok(clamp_vcpus(open_kvm()?.get_max_vcpus()))
}
