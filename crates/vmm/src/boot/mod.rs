//! Boot: putting a kernel and its boot data into guest memory and the BSP's
//! entry state. Two kernel forms, told apart by their magic:
//!
//! * a PVH ELF64 (`pvh`): the smplab guest, or Linux's `vmlinux`, entered in
//!   32-bit protected mode at the PVH note's entry with `hvm_start_info`;
//! * a bzImage (`bzimage`): Linux's `vmlinuz`, loaded per the Linux boot
//!   protocol (Documentation/x86/boot.rst) with a zero page and entered at its
//!   32-bit entry point.
//!
//! Every guest also gets ACPI tables (`acpi`) in the BIOS area; the smplab
//! guest ignores them.

pub mod acpi;
pub mod bzimage;
pub mod pvh;

pub use pvh::{load_kernel, set_pvh_entry, write_boot_data, Loaded};

use crate::error::VmmError;
use crate::{KernelImage, VmConfig};
use kvm_ioctls::VcpuFd;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

// Boot data layout in low memory (below the conventional 0x9fc00 RAM end).
pub const GDT_ADDR: u64 = 0x500;
pub const START_INFO_ADDR: u64 = 0x6000;
const CMDLINE_ADDR: u64 = 0x7000;
const CMDLINE_MAX_BYTES: usize = 0x1000;
const LOW_RAM_END: u64 = 0x9_fc00;
const HIGH_RAM_START: u64 = 0x10_0000;
/// The BIOS area that holds the ACPI tables (reserved in the e820 map).
pub const BIOS_AREA_START: u64 = 0xe_0000;
/// RAM above this goes above 4 GiB, leaving room for the LAPIC/IOAPIC window.
pub const MMIO_HOLE_START: u64 = 0xc000_0000;
pub const FOUR_GIB: u64 = 0x1_0000_0000;
pub const MIN_MEM_BYTES: u64 = 2 << 20;

/// The two kernel forms smplab-vmm boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelFormat {
    /// An ELF64 file (the PVH note is checked when it is loaded).
    PvhElf,
    /// A Linux bzImage (`HdrS` at offset 0x202).
    BzImage,
}

/// The form of `kernel`, by its magic: the ELF magic at offset 0, or the
/// Linux boot protocol's `HdrS` at offset 0x202.
pub fn detect(kernel: &[u8]) -> Result<KernelFormat, VmmError> {
    if kernel.starts_with(b"\x7fELF") {
        return Ok(KernelFormat::PvhElf);
    }
    if kernel.get(0x202..0x206) == Some(b"HdrS") {
        return Ok(KernelFormat::BzImage);
    }
    let head: Vec<String> = kernel.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Err(VmmError::BadKernel(format!(
        "found neither the ELF magic (7f 45 4c 46) at offset 0 nor the bzImage magic \"HdrS\" at offset 0x202 in {} bytes starting with [{}]",
        kernel.len(),
        head.join(" ")
    )))
}

/// How the BSP enters the loaded kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootEntry {
    /// PVH: 32-bit protected mode at `entry`, %ebx = the start info.
    Pvh { entry: u64 },
    /// The Linux boot protocol's 32-bit entry at `entry`, %esi = the zero page.
    BzImage { entry: u64 },
}

impl BootEntry {
    /// Set the BSP's registers for this entry.
    pub fn apply(&self, vcpu: &VcpuFd) -> Result<(), VmmError> {
        match *self {
            BootEntry::Pvh { entry } => set_pvh_entry(vcpu, entry),
            BootEntry::BzImage { entry } => bzimage::set_entry(vcpu, entry),
        }
    }
}

/// Load `kernel` (either form), its boot data (command line, initrd or
/// modules, memory map) and the ACPI tables for `config.vcpus` vCPUs.
pub fn load_guest(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    kernel: &[u8],
) -> Result<BootEntry, VmmError> {
    let rsdp = acpi::write_tables(mem, config.vcpus)?;
    match detect(kernel)? {
        KernelFormat::PvhElf => {
            let loaded = load_kernel(mem, kernel)?;
            let modules = pvh_modules(config)?;
            pvh::write_start_info(mem, config, modules, loaded.kernel_end, rsdp)?;
            Ok(BootEntry::Pvh {
                entry: loaded.entry,
            })
        }
        KernelFormat::BzImage => bzimage::load(mem, config, kernel, rsdp),
    }
}

/// The PVH modules: the initrd as module 0, or the configured modules.
fn pvh_modules(config: &VmConfig) -> Result<&[Vec<u8>], VmmError> {
    match &config.initrd {
        None => Ok(&config.modules),
        Some(initrd) if config.modules.is_empty() => Ok(std::slice::from_ref(initrd)),
        Some(_) => Err(VmmError::BadConfig(
            "an initrd and PVH modules were both given; a PVH kernel gets the initrd as module 0, so give one or the other".into(),
        )),
    }
}

pub fn read_kernel(image: &KernelImage) -> Result<Vec<u8>, VmmError> {
    match image {
        KernelImage::Bytes(bytes) => Ok(bytes.clone()),
        KernelImage::Path(path) => std::fs::read(path).map_err(|source| VmmError::KernelRead {
            path: path.clone(),
            source,
        }),
    }
}

/// RAM layout: `(guest address, bytes)` for each region.
pub fn ram_regions(mem_bytes: u64) -> Vec<(GuestAddress, usize)> {
    let low = mem_bytes.min(MMIO_HOLE_START);
    let mut regions = vec![(GuestAddress(0), host_len(low))];
    if mem_bytes > low {
        regions.push((GuestAddress(FOUR_GIB), host_len(mem_bytes - low)));
    }
    regions
}

/// A guest memory length as the host maps it.
fn host_len(bytes: u64) -> usize {
    // Exact: smplab runs on 64-bit x86 hosts only (KVM), where usize is 64 bits.
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The end of RAM below the MMIO hole.
fn low_ram_end(mem_bytes: u64) -> u64 {
    mem_bytes.min(MMIO_HOLE_START)
}

/// One range of the guest's memory map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryRange {
    pub addr: u64,
    pub size: u64,
    /// RAM (e820 type 1), else reserved (type 2).
    pub ram: bool,
}

/// The memory map: low RAM, the reserved BIOS area with the ACPI tables,
/// RAM from 1 MiB, and RAM above 4 GiB if any.
pub fn memory_map(mem_bytes: u64) -> Vec<MemoryRange> {
    let mut map = vec![
        MemoryRange {
            addr: 0,
            size: LOW_RAM_END,
            ram: true,
        },
        MemoryRange {
            addr: BIOS_AREA_START,
            size: HIGH_RAM_START - BIOS_AREA_START,
            ram: false,
        },
    ];
    for (start, len) in ram_regions(mem_bytes) {
        let start = start.raw_value().max(HIGH_RAM_START);
        let end = if start >= FOUR_GIB {
            start + len as u64
        } else {
            len as u64
        };
        if end > start {
            map.push(MemoryRange {
                addr: start,
                size: end - start,
                ram: true,
            });
        }
    }
    map
}

fn boot_err(what: &str) -> impl FnOnce(vm_memory::GuestMemoryError) -> VmmError + '_ {
    move |e| VmmError::BootDataTooLarge(format!("{what}: {e}"))
}

/// The command line at CMDLINE_ADDR, NUL-terminated, at most `max_bytes` long.
fn write_cmdline(mem: &GuestMemoryMmap, cmdline: &str, max_bytes: usize) -> Result<(), VmmError> {
    let cmdline = cmdline.as_bytes();
    let max_bytes = max_bytes.min(CMDLINE_MAX_BYTES);
    if cmdline.len() >= max_bytes || cmdline.contains(&0) {
        return Err(VmmError::BadConfig(format!(
            "the command line must be under {max_bytes} bytes and contain no NUL byte"
        )));
    }
    let mut cmd = cmdline.to_vec();
    cmd.push(0);
    mem.write_slice(&cmd, GuestAddress(CMDLINE_ADDR))
        .map_err(boot_err("command line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_told_apart_by_magic() {
        let elf = crate::test_guest::GuestProgram::default().elf();
        assert_eq!(detect(&elf).unwrap(), KernelFormat::PvhElf);
        let mut bz = vec![0u8; 0x400];
        bz[0x202..0x206].copy_from_slice(b"HdrS");
        assert_eq!(detect(&bz).unwrap(), KernelFormat::BzImage);
        for junk in [&b""[..], b"MZ\x90\x00 neither", &[0u8; 0x300]] {
            let err = detect(junk).unwrap_err();
            assert!(matches!(err, VmmError::BadKernel(_)), "{err}");
            assert_eq!(err.exit_status(), smplab_record::exit::BAD_KERNEL);
            assert!(err.to_string().contains("HdrS"), "{err}");
        }
        assert!(detect(b"MZ\x90\x00")
            .unwrap_err()
            .to_string()
            .contains("[4d 5a 90 00]"));
    }

    #[test]
    fn the_bios_area_is_reserved_and_ram_is_mapped_around_it() {
        let map = memory_map(64 << 20);
        assert_eq!(
            map,
            vec![
                MemoryRange {
                    addr: 0,
                    size: LOW_RAM_END,
                    ram: true
                },
                MemoryRange {
                    addr: BIOS_AREA_START,
                    size: HIGH_RAM_START - BIOS_AREA_START,
                    ram: false
                },
                MemoryRange {
                    addr: HIGH_RAM_START,
                    size: (64 << 20) - HIGH_RAM_START,
                    ram: true
                },
            ]
        );
        let big = memory_map(4 << 30);
        assert_eq!(big.len(), 4);
        assert_eq!(big[3].addr, FOUR_GIB);
        assert_eq!(big[3].size, 1 << 30);
    }

    #[test]
    fn memory_above_the_hole_is_mapped_above_4_gib() {
        let regions = ram_regions(4 << 30);
        assert_eq!(regions[0], (GuestAddress(0), host_len(MMIO_HOLE_START)));
        assert_eq!(regions[1], (GuestAddress(FOUR_GIB), 1 << 30));
        assert_eq!(ram_regions(64 << 20).len(), 1);
    }

    #[test]
    fn an_initrd_is_pvh_module_0_and_excludes_other_modules() {
        let mut config = VmConfig::new(KernelImage::Bytes(Vec::new()));
        config.initrd = Some(b"cpio".to_vec());
        assert_eq!(pvh_modules(&config).unwrap(), &[b"cpio".to_vec()]);
        config.modules = vec![b"workload".to_vec()];
        assert!(matches!(pvh_modules(&config), Err(VmmError::BadConfig(_))));
        config.initrd = None;
        assert_eq!(pvh_modules(&config).unwrap(), &[b"workload".to_vec()]);
    }
}
