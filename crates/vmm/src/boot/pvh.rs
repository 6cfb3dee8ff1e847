//! The PVH boot path: loading an ELF64 kernel with a PVH entry note, its
//! boot data in low memory (command line, modules, memory map, GDT,
//! `hvm_start_info`) and the BSP's PVH entry state
//! (https://xenbits.xen.org/docs/unstable/misc/pvh.html).

use super::{
    boot_err, memory_map, write_cmdline, CMDLINE_ADDR, CMDLINE_MAX_BYTES, GDT_ADDR, HIGH_RAM_START,
    START_INFO_ADDR,
};
use crate::error::VmmError;
use crate::VmConfig;
use kvm_bindings::kvm_segment;
use kvm_ioctls::VcpuFd;
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info, XEN_HVM_MEMMAP_TYPE_RAM,
    XEN_HVM_MEMMAP_TYPE_RESERVED, XEN_HVM_START_MAGIC_VALUE,
};
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::KernelLoader;
use std::io::Cursor;
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryMmap};

const MEMMAP_ADDR: u64 = 0x6040;
const MEMMAP_MAX_ENTRIES: usize = 8;
const MODLIST_ADDR: u64 = 0x6100;
const MODLIST_MAX_ENTRIES: usize = 120;

/// Loaded kernel: entry point and the end of its image.
pub struct Loaded {
    pub entry: u64,
    pub kernel_end: u64,
}

pub fn load_kernel(mem: &GuestMemoryMmap, kernel: &[u8]) -> Result<Loaded, VmmError> {
    if kernel.len() < 4 || &kernel[..4] != b"\x7fELF" {
        return Err(VmmError::BadKernel(
            "no ELF magic at the start of the file".into(),
        ));
    }
    if kernel.get(4) != Some(&2) || kernel.get(18) != Some(&62) {
        return Err(VmmError::BadKernel(
            "not a 64-bit x86-64 ELF (class or machine field)".into(),
        ));
    }
    let result = Elf::load(mem, None, &mut Cursor::new(kernel), None)
        .map_err(|e| VmmError::BadKernel(format!("{e}")))?;
    match result.pvh_boot_cap {
        PvhBootCapability::PvhEntryPresent(entry) => Ok(Loaded {
            entry: entry.raw_value(),
            kernel_end: result.kernel_end,
        }),
        _ => Err(VmmError::NoPvhEntry),
    }
}

/// Write the command line, `config.modules`, the memory map, GDT and
/// hvm_start_info (without ACPI tables: [`super::load_guest`] adds them).
pub fn write_boot_data(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    kernel_end: u64,
) -> Result<(), VmmError> {
    write_start_info(mem, config, &config.modules, kernel_end, 0)
}

/// As [`write_boot_data`] with the given modules and the RSDP's address
/// (`rsdp_paddr`; 0: none).
pub(super) fn write_start_info(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    modules: &[Vec<u8>],
    kernel_end: u64,
    rsdp_paddr: u64,
) -> Result<(), VmmError> {
    write_cmdline(mem, &config.cmdline, CMDLINE_MAX_BYTES)?;
    let modlist = write_modules(mem, modules, kernel_end)?;
    let memmap = e820_map(config.mem_bytes);
    write_gdt(mem)?;
    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC_VALUE,
        version: 1,
        flags: 0,
        nr_modules: u32::try_from(modlist.len()).unwrap_or(u32::MAX),
        modlist_paddr: if modlist.is_empty() { 0 } else { MODLIST_ADDR },
        cmdline_paddr: CMDLINE_ADDR,
        rsdp_paddr,
        memmap_paddr: MEMMAP_ADDR,
        memmap_entries: u32::try_from(memmap.len()).unwrap_or(u32::MAX),
        reserved: 0,
    };
    let mut params = BootParams::new(&start_info, GuestAddress(START_INFO_ADDR));
    params.set_sections(&memmap, GuestAddress(MEMMAP_ADDR));
    if !modlist.is_empty() {
        params.set_modules(&modlist, GuestAddress(MODLIST_ADDR));
    }
    PvhBootConfigurator::write_bootparams(&params, mem)
        .map_err(|e| VmmError::BootDataTooLarge(format!("PVH start info: {e}")))
}

/// The modules, page-aligned after the kernel (and never below 1 MiB); returns
/// their list for the start info.
fn write_modules(
    mem: &GuestMemoryMmap,
    modules: &[Vec<u8>],
    kernel_end: u64,
) -> Result<Vec<hvm_modlist_entry>, VmmError> {
    if modules.len() > MODLIST_MAX_ENTRIES {
        return Err(VmmError::BadConfig(format!(
            "{} modules given; at most {MODLIST_MAX_ENTRIES} are supported",
            modules.len()
        )));
    }
    let mut next = kernel_end.max(HIGH_RAM_START);
    let mut modlist = Vec::new();
    for (i, module) in modules.iter().enumerate() {
        next = next
            .checked_add(0xfff)
            .map(|n| n & !0xfff)
            .ok_or_else(|| VmmError::BootDataTooLarge("module address overflow".into()))?;
        mem.write_slice(module, GuestAddress(next)).map_err(|e| {
            VmmError::BootDataTooLarge(format!("module {i} ({} bytes): {e}", module.len()))
        })?;
        modlist.push(hvm_modlist_entry {
            paddr: next,
            size: module.len() as u64,
            cmdline_paddr: 0,
            reserved: 0,
        });
        next += module.len() as u64;
    }
    Ok(modlist)
}

/// The memory map in PVH's form.
fn e820_map(mem_bytes: u64) -> Vec<hvm_memmap_table_entry> {
    let memmap: Vec<_> = memory_map(mem_bytes)
        .into_iter()
        .map(|range| hvm_memmap_table_entry {
            addr: range.addr,
            size: range.size,
            type_: if range.ram {
                XEN_HVM_MEMMAP_TYPE_RAM
            } else {
                XEN_HVM_MEMMAP_TYPE_RESERVED
            },
            reserved: 0,
        })
        .collect();
    debug_assert!(memmap.len() <= MEMMAP_MAX_ENTRIES);
    memmap
}

/// A flat GDT, so segment reloads before the guest's own lgdt stay valid.
fn write_gdt(mem: &GuestMemoryMmap) -> Result<(), VmmError> {
    let gdt: [u64; 4] = [
        0,
        0x00cf_9b00_0000_ffff, // 0x08: code, 32-bit, 4 GiB
        0x00cf_9300_0000_ffff, // 0x10: data, 4 GiB
        0x0000_8b00_0000_0067, // 0x18: TSS (busy)
    ];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(GDT_ADDR + 8 * i as u64))
            .map_err(boot_err("GDT"))?;
    }
    Ok(())
}

pub(super) fn segment(selector: u16, type_: u8, s: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: 1,
        s,
        l: 0,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// The GDT selectors and limit of a flat 32-bit entry: PVH and the Linux
/// boot protocol each lay out their own GDT at [`GDT_ADDR`].
pub(super) struct FlatGdt {
    pub code: u16,
    pub data: u16,
    pub tss: u16,
    pub limit: u16,
}

/// 32-bit protected mode, paging off, flat code and data segments, a busy
/// TSS, interrupts off, %rip = `entry`; `set` puts the protocol's registers
/// on top.
pub(super) fn set_flat_entry(
    vcpu: &VcpuFd,
    gdt: &FlatGdt,
    entry: u64,
    set: impl FnOnce(&mut kvm_bindings::kvm_regs),
) -> Result<(), VmmError> {
    let mut sregs = vcpu.get_sregs().map_err(VmmError::kvm("KVM_GET_SREGS"))?;
    sregs.cs = segment(gdt.code, 0xb, 1);
    let data = segment(gdt.data, 0x3, 1);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment {
        limit: 0x67,
        g: 0,
        db: 0,
        ..segment(gdt.tss, 0xb, 0)
    };
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = gdt.limit;
    sregs.cr0 = 0x11; // PE | ET
    sregs.cr4 = 0;
    sregs.efer = 0;
    vcpu.set_sregs(&sregs)
        .map_err(VmmError::kvm("KVM_SET_SREGS"))?;
    let mut regs = vcpu.get_regs().map_err(VmmError::kvm("KVM_GET_REGS"))?;
    regs.rflags = 0x2;
    regs.rip = entry;
    regs.rsp = 0;
    set(&mut regs);
    vcpu.set_regs(&regs)
        .map_err(VmmError::kvm("KVM_SET_REGS"))?;
    Ok(())
}

/// PVH entry state: 32-bit protected mode, paging off, flat segments, %ebx = start info.
pub fn set_pvh_entry(vcpu: &VcpuFd, entry: u64) -> Result<(), VmmError> {
    let gdt = FlatGdt {
        code: 0x08,
        data: 0x10,
        tss: 0x18,
        limit: 31,
    };
    set_flat_entry(vcpu, &gdt, entry, |regs| regs.rbx = START_INFO_ADDR)
}

#[cfg(test)]
mod tests {
    use super::super::ram_regions;
    use super::*;
    use crate::KernelImage;

    fn config_with(modules: Vec<Vec<u8>>, cmdline: &str, mem_bytes: u64) -> VmConfig {
        let mut config = VmConfig::new(KernelImage::Bytes(Vec::new()));
        config.modules = modules;
        config.cmdline = cmdline.to_string();
        config.mem_bytes = mem_bytes;
        config
    }

    #[test]
    fn boot_data_follows_the_pvh_contract() {
        let mem_bytes = 32 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let modules = vec![b"workload".to_vec(), vec![7u8; 5000]];
        let config = config_with(modules.clone(), "cpus=2 idle=poll", mem_bytes);
        write_boot_data(&mem, &config, 0x12_3456).unwrap();

        let info: hvm_start_info = mem.read_obj(GuestAddress(START_INFO_ADDR)).unwrap();
        assert_eq!(info.magic, XEN_HVM_START_MAGIC_VALUE);
        assert_eq!(info.version, 1);
        let mut cmd = vec![0u8; 17];
        mem.read_slice(&mut cmd, GuestAddress(info.cmdline_paddr))
            .unwrap();
        assert_eq!(&cmd, b"cpus=2 idle=poll\0");

        assert_eq!(info.nr_modules, 2);
        let mut previous_end = 0x12_3456;
        for (i, module) in modules.iter().enumerate() {
            let entry: hvm_modlist_entry = mem
                .read_obj(GuestAddress(info.modlist_paddr + 32 * i as u64))
                .unwrap();
            assert_eq!(entry.size, module.len() as u64);
            assert_eq!(entry.paddr % 0x1000, 0, "modules are page-aligned");
            assert!(entry.paddr >= previous_end, "modules follow the kernel");
            let mut bytes = vec![0u8; module.len()];
            mem.read_slice(&mut bytes, GuestAddress(entry.paddr))
                .unwrap();
            assert_eq!(&bytes, module);
            previous_end = entry.paddr + entry.size;
        }

        let ram: Vec<(u64, u64)> = (0..info.memmap_entries)
            .map(|i| {
                mem.read_obj::<hvm_memmap_table_entry>(GuestAddress(
                    info.memmap_paddr + 24 * u64::from(i),
                ))
                .unwrap()
            })
            .filter(|e| e.type_ == XEN_HVM_MEMMAP_TYPE_RAM)
            .map(|e| (e.addr, e.size))
            .collect();
        assert_eq!(
            ram,
            vec![
                (0, super::super::LOW_RAM_END),
                (HIGH_RAM_START, mem_bytes - HIGH_RAM_START)
            ]
        );
    }

    #[test]
    fn oversized_boot_data_is_an_error() {
        let mem_bytes = 4 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let too_big = config_with(vec![vec![0u8; 8 << 20]], "", mem_bytes);
        let err = write_boot_data(&mem, &too_big, 0x10_0000).unwrap_err();
        assert!(matches!(err, VmmError::BootDataTooLarge(_)), "{err}");
        assert_eq!(err.exit_status(), smplab_record::exit::RESOURCE_LIMIT);
        let long_cmdline = config_with(Vec::new(), &"x".repeat(5000), mem_bytes);
        assert!(matches!(
            write_boot_data(&mem, &long_cmdline, 0x10_0000),
            Err(VmmError::BadConfig(_))
        ));
        let nul = config_with(Vec::new(), "a\0b", mem_bytes);
        assert!(write_boot_data(&mem, &nul, 0x10_0000).is_err());
    }

    #[test]
    fn non_elf_and_wrong_machine_are_bad_kernels() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(4 << 20)).unwrap();
        for bytes in [
            &b""[..],
            b"\x7fEL",
            b"MZ\x90\x00 not elf",
            b"\x7fELF\x01\x01\x01",
        ] {
            assert!(matches!(
                load_kernel(&mem, bytes),
                Err(VmmError::BadKernel(_))
            ));
        }
        let mut elf = crate::test_guest::GuestProgram::default().elf();
        elf[18] = 3; // EM_386
        assert!(matches!(
            load_kernel(&mem, &elf),
            Err(VmmError::BadKernel(_))
        ));
        // Truncated program headers.
        let elf = crate::test_guest::GuestProgram::default().elf();
        assert!(load_kernel(&mem, &elf[..100]).is_err());
        // A segment beyond guest memory.
        let far = crate::test_guest::pvh_elf(0x10_0000, &[(0x4000_0000, vec![0x90; 16])]);
        assert!(matches!(
            load_kernel(&mem, &far),
            Err(VmmError::BadKernel(_))
        ));
    }
}
