//! The bzImage boot path: the Linux boot protocol (the kernel tree's
//! Documentation/x86/boot.rst). linux-loader copies the protected-mode kernel
//! to its `code32_start`; smplab-vmm fills the zero page (`boot_params`: the
//! setup header, command line, initrd, e820 map, RSDP) and enters the 32-bit
//! entry point as a boot loader would, in flat protected mode without paging.
//! The kernel decompresses itself from there.

use super::{
    boot_err, low_ram_end, memory_map,
    pvh::{set_flat_entry, FlatGdt},
    write_cmdline, BootEntry, CMDLINE_ADDR, GDT_ADDR, HIGH_RAM_START, START_INFO_ADDR,
};
use crate::error::VmmError;
use crate::VmConfig;
use kvm_ioctls::VcpuFd;
use linux_loader::configurator::linux::LinuxBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params, E820_MAX_ENTRIES_ZEROPAGE};
use linux_loader::loader::{BzImage, KernelLoader};
use std::io::Cursor;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The zero page (`struct boot_params`, 4 KiB), where a PVH guest's start
/// info would be: a VM has one or the other.
pub const ZERO_PAGE_ADDR: u64 = START_INFO_ADDR;
/// `type_of_loader`: a boot loader without an assigned id.
const LOADER_TYPE_UNDEFINED: u8 = 0xff;
/// The oldest protocol with `cmdline_size` and `relocatable_kernel` (2.06).
const MIN_PROTOCOL: u16 = 0x0206;
/// The protocol's selectors for the 32-bit entry: __BOOT_CS and __BOOT_DS.
const BOOT_CS: u16 = 0x10;
const BOOT_DS: u16 = 0x18;
const E820_RAM: u32 = 1;
const E820_RESERVED: u32 = 2;

/// Load the bzImage `kernel`, its zero page, command line and initrd.
pub fn load(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    kernel: &[u8],
    rsdp: u64,
) -> Result<BootEntry, VmmError> {
    if !config.modules.is_empty() {
        return Err(VmmError::BadConfig(
            "PVH modules were given with a bzImage kernel, which takes only an initrd".into(),
        ));
    }
    let loaded = BzImage::load(
        mem,
        None,
        &mut Cursor::new(kernel),
        Some(GuestAddress(HIGH_RAM_START)),
    )
    .map_err(|e| VmmError::BadKernel(format!("bzImage: {e}")))?;
    let Some(header) = loaded.setup_header else {
        return Err(VmmError::BadKernel("bzImage without a setup header".into()));
    };
    if header.version < MIN_PROTOCOL {
        return Err(VmmError::BadKernel(format!(
            "bzImage boot protocol {}.{:02} is older than 2.06, the oldest smplab-vmm loads",
            header.version >> 8,
            header.version & 0xff
        )));
    }
    let mut params = boot_params {
        hdr: header,
        ..Default::default()
    };
    params.hdr.type_of_loader = LOADER_TYPE_UNDEFINED;
    let cmdline_max = usize::try_from(params.hdr.cmdline_size)
        .unwrap_or(usize::MAX)
        .saturating_add(1);
    write_cmdline(mem, &config.cmdline, cmdline_max)?;
    // Cast: CMDLINE_ADDR is a constant below 1 MiB.
    #[allow(clippy::cast_possible_truncation)]
    {
        params.hdr.cmd_line_ptr = CMDLINE_ADDR as u32;
    }
    if let Some(initrd) = &config.initrd {
        let (addr, size) = write_initrd(mem, config.mem_bytes, &params, loaded.kernel_end, initrd)?;
        params.hdr.ramdisk_image = addr;
        params.hdr.ramdisk_size = size;
    }
    params.acpi_rsdp_addr = rsdp;
    let map = memory_map(config.mem_bytes);
    if map.len() > E820_MAX_ENTRIES_ZEROPAGE {
        return Err(VmmError::BootDataTooLarge("e820 map".into()));
    }
    for (slot, range) in params.e820_table.iter_mut().zip(&map) {
        *slot = boot_e820_entry {
            addr: range.addr,
            size: range.size,
            r#type: if range.ram { E820_RAM } else { E820_RESERVED },
        };
    }
    params.e820_entries = u8::try_from(map.len()).unwrap_or(u8::MAX);
    LinuxBootConfigurator::write_bootparams(
        &BootParams::new(&params, GuestAddress(ZERO_PAGE_ADDR)),
        mem,
    )
    .map_err(|e| VmmError::BootDataTooLarge(format!("zero page: {e}")))?;
    write_gdt(mem)?;
    Ok(BootEntry::BzImage {
        entry: u64::from(params.hdr.code32_start),
    })
}

/// The initrd, page-aligned at the top of low RAM and below the kernel's
/// `initrd_addr_max`, clear of where the kernel decompresses itself (from its
/// preferred address for `init_size` bytes). Returns its address and size.
fn write_initrd(
    mem: &GuestMemoryMmap,
    mem_bytes: u64,
    params: &boot_params,
    kernel_end: u64,
    initrd: &[u8],
) -> Result<(u32, u32), VmmError> {
    let size = initrd.len() as u64;
    let top = low_ram_end(mem_bytes).min(u64::from(params.hdr.initrd_addr_max) + 1);
    let kernel_needs = kernel_end.max(
        params
            .hdr
            .pref_address
            .saturating_add(u64::from(params.hdr.init_size)),
    );
    let addr = top.checked_sub(size).map(|a| a & !0xfff);
    match addr {
        Some(addr) if addr >= kernel_needs => {
            mem.write_slice(initrd, GuestAddress(addr))
                .map_err(boot_err("initrd"))?;
            let too_big = || VmmError::BootDataTooLarge("initrd address".into());
            Ok((
                u32::try_from(addr).map_err(|_| too_big())?,
                u32::try_from(size).map_err(|_| too_big())?,
            ))
        }
        _ => Err(VmmError::BootDataTooLarge(format!(
            "the initrd ({size} bytes) does not fit between the kernel's decompression area (up to {kernel_needs:#x}) and the end of low RAM ({top:#x}); give the VM more memory"
        ))),
    }
}

/// The protocol's GDT: __BOOT_CS (0x10) and __BOOT_DS (0x18), flat 4 GiB,
/// and a TSS at 0x20 for KVM's task register.
fn write_gdt(mem: &GuestMemoryMmap) -> Result<(), VmmError> {
    let gdt: [u64; 5] = [
        0,
        0,
        0x00cf_9b00_0000_ffff, // 0x10: code, 32-bit, 4 GiB
        0x00cf_9300_0000_ffff, // 0x18: data, 4 GiB
        0x0000_8b00_0000_0067, // 0x20: TSS (busy)
    ];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(GDT_ADDR + 8 * i as u64))
            .map_err(boot_err("GDT"))?;
    }
    Ok(())
}

/// The 32-bit entry state: protected mode, paging off, flat __BOOT_CS and
/// __BOOT_DS, interrupts off, %esi = the zero page, %ebp = %edi = %ebx = 0.
pub fn set_entry(vcpu: &VcpuFd, entry: u64) -> Result<(), VmmError> {
    let gdt = FlatGdt {
        code: BOOT_CS,
        data: BOOT_DS,
        tss: 0x20,
        limit: 39,
    };
    set_flat_entry(vcpu, &gdt, entry, |regs| {
        regs.rsi = ZERO_PAGE_ADDR;
        regs.rbx = 0;
        regs.rbp = 0;
        regs.rdi = 0;
    })
}

#[cfg(test)]
mod tests {
    use super::super::ram_regions;
    use super::*;
    use crate::KernelImage;

    /// A minimal bzImage: one setup sector, the header fields the loader
    /// reads, and `payload` as the protected-mode kernel.
    fn tiny_bzimage(payload: &[u8]) -> Vec<u8> {
        let mut image = vec![0u8; 2 * 512];
        image[0x1f1] = 1; // setup_sects
        image[0x1fe..0x200].copy_from_slice(&0xaa55u16.to_le_bytes());
        image[0x202..0x206].copy_from_slice(b"HdrS");
        image[0x206..0x208].copy_from_slice(&0x020fu16.to_le_bytes());
        image[0x211] = 1; // loadflags: LOADED_HIGH
        image[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
        image[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes());
        image[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes());
        image[0x260..0x264].copy_from_slice(&0x20_0000u32.to_le_bytes()); // init_size
        image.extend_from_slice(payload);
        image
    }

    fn config(mem_bytes: u64, initrd: Option<Vec<u8>>) -> VmConfig {
        let mut config = VmConfig::new(KernelImage::Bytes(Vec::new()));
        config.mem_bytes = mem_bytes;
        config.cmdline = "console=ttyS0".into();
        config.initrd = initrd;
        config
    }

    #[test]
    fn the_zero_page_follows_the_boot_protocol() {
        let mem_bytes = 64 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let initrd = vec![0x5a; 10_000];
        let entry = load(
            &mem,
            &config(mem_bytes, Some(initrd.clone())),
            &tiny_bzimage(&[0x90; 64]),
            0xe_0000,
        )
        .unwrap();
        assert_eq!(entry, BootEntry::BzImage { entry: 0x10_0000 });
        let mut kernel = [0u8; 64];
        mem.read_slice(&mut kernel, GuestAddress(0x10_0000))
            .unwrap();
        assert_eq!(kernel, [0x90; 64]);

        let params: boot_params = mem.read_obj(GuestAddress(ZERO_PAGE_ADDR)).unwrap();
        assert_eq!(params.hdr.type_of_loader, LOADER_TYPE_UNDEFINED);
        assert_eq!({ params.acpi_rsdp_addr }, 0xe_0000);
        let mut cmd = [0u8; 14];
        mem.read_slice(&mut cmd, GuestAddress(u64::from(params.hdr.cmd_line_ptr)))
            .unwrap();
        assert_eq!(&cmd, b"console=ttyS0\0");
        let (addr, size) = (params.hdr.ramdisk_image, params.hdr.ramdisk_size);
        assert_eq!(size as usize, initrd.len());
        assert_eq!(addr % 4096, 0);
        assert!(u64::from(addr) + u64::from(size) <= mem_bytes);
        assert!(
            u64::from(addr) >= 0x30_0000,
            "clear of the decompression area"
        );
        let mut back = vec![0u8; initrd.len()];
        mem.read_slice(&mut back, GuestAddress(u64::from(addr)))
            .unwrap();
        assert_eq!(back, initrd);
        let e820: Vec<_> = params.e820_table[..usize::from(params.e820_entries)]
            .iter()
            .map(|e| ({ e.addr }, { e.size }, { e.r#type }))
            .collect();
        assert_eq!(e820.len(), 3);
        assert_eq!(
            e820[2],
            (HIGH_RAM_START, mem_bytes - HIGH_RAM_START, E820_RAM)
        );
        assert_eq!(e820[1].2, E820_RESERVED);
    }

    #[test]
    fn an_initrd_that_does_not_fit_and_modules_are_errors() {
        let mem_bytes = 4 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let err = load(
            &mem,
            &config(mem_bytes, Some(vec![1; 3 << 20])),
            &tiny_bzimage(&[0x90; 64]),
            0,
        )
        .unwrap_err();
        assert!(matches!(err, VmmError::BootDataTooLarge(_)), "{err}");
        let mut with_modules = config(mem_bytes, None);
        with_modules.modules = vec![vec![1]];
        assert!(matches!(
            load(&mem, &with_modules, &tiny_bzimage(&[0x90; 64]), 0),
            Err(VmmError::BadConfig(_))
        ));
        let mut old = tiny_bzimage(&[0x90; 64]);
        old[0x206..0x208].copy_from_slice(&0x0204u16.to_le_bytes());
        assert!(matches!(
            load(&mem, &config(mem_bytes, None), &old, 0),
            Err(VmmError::BadKernel(_))
        ));
    }
}
