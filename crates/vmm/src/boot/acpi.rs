//! The ACPI tables every guest gets (the smplab guest ignores them): RSDP,
//! XSDT, FADT, MADT and DSDT, built with rust-vmm's `acpi_tables` crate and
//! written into the BIOS area (0xe0000..0x100000), where a bzImage kernel also
//! finds the RSDP by scanning; PVH and the zero page point at it directly.
//!
//! The platform is ACPI "hardware-reduced" (as Cloud Hypervisor's and
//! Firecracker's): no PM1 event blocks, SCI or legacy PIC/PIT for Linux to
//! set up, so a VM with KVM's in-kernel irqchip (which has no PIT) or with
//! smplab-vmm's own LAPIC/IOAPIC models boots the same way. What Linux needs
//! from the tables:
//! * the MADT: every vCPU's LAPIC (else it runs on one CPU) and the IOAPIC;
//! * the FADT's sleep control/status registers and the DSDT's `_S5_`
//!   package: `reboot(RB_POWER_OFF)` writes SLP_TYP 5 | SLP_EN to
//!   [`SLEEP_CONTROL_PORT`] ([`crate::devices::power`] ends the VM);
//! * the FADT's reset register: a reboot writes [`RESET_VALUE`] to port 0xcf9;
//! * the DSDT's COM1 (PNP0501, IRQ 4), so the UART's interrupt gets an
//!   IOAPIC route on a platform without legacy IRQs.

use super::BIOS_AREA_START;
use crate::error::VmmError;
use acpi_tables::fadt::{FADTBuilder, Flags};
use acpi_tables::madt::{
    EnabledStatus, IoApic, LocalInterruptController, ProcessorLocalApic, MADT,
};
use acpi_tables::{aml, gas, rsdp::Rsdp, sdt::Sdt, xsdt::XSDT, Aml};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

const OEM_ID: [u8; 6] = *b"SMPLAB";
const OEM_REVISION: u32 = 1;
/// The xAPIC and IOAPIC addresses (as KVM's in-kernel models and
/// `crate::irqchip` place them).
const LAPIC_ADDR: u32 = 0xfee0_0000;
const IOAPIC_ADDR: u32 = 0xfec0_0000;
/// The port of the sleep control and status registers (one byte each, the
/// same port, as Cloud Hypervisor's): reads 0, a write of
/// `SLP_TYP << 2 | SLP_EN` with SLP_TYP 5 powers off.
pub const SLEEP_CONTROL_PORT: u16 = 0x600;
/// The S5 (soft-off) sleep type in `_S5_`.
pub const S5_SLEEP_TYPE: u8 = 5;
/// The reset register (the PCI reset control port) and the value that resets.
pub const RESET_PORT: u16 = 0xcf9;
pub const RESET_VALUE: u8 = 0x6;
/// FADT IA-PC boot flags: no VGA, no CMOS RTC (and no 8042 bit: Linux then
/// does not probe a keyboard controller).
const IAPC_VGA_NOT_PRESENT: u16 = 1 << 2;
const IAPC_CMOS_RTC_NOT_PRESENT: u16 = 1 << 5;
/// LAPIC ids are one byte in the MADT's entries, and 0xff is the broadcast id.
const MAX_XAPIC_ID: u32 = 0xfe;
/// The COM1 UART's port and ISA interrupt.
const COM1_PORT: u16 = 0x3f8;
const COM1_IRQ: u32 = 4;

/// Write the tables for `vcpus` vCPUs into the BIOS area; returns the RSDP's
/// address.
pub fn write_tables(mem: &GuestMemoryMmap, vcpus: u32) -> Result<u64, VmmError> {
    let mut writer = TableWriter {
        mem,
        next: BIOS_AREA_START,
    };
    // The RSDP first, 16-byte aligned at the start of the area (where a
    // bzImage kernel's scan finds it); its XSDT address is filled in last.
    let rsdp_addr = writer.reserve(Rsdp::len() as u64)?;
    let dsdt = writer.write(&dsdt())?;
    let fadt = writer.write(&fadt(dsdt))?;
    let madt = writer.write(&madt(vcpus))?;
    let mut xsdt = XSDT::new(OEM_ID, *b"SMPLXSDT", OEM_REVISION);
    xsdt.add_entry(fadt);
    xsdt.add_entry(madt);
    let xsdt = writer.write(&xsdt)?;
    writer.write_at(rsdp_addr, &Rsdp::new(OEM_ID, xsdt))?;
    Ok(rsdp_addr)
}

/// Places tables one after the other, 16-byte aligned, below 1 MiB.
struct TableWriter<'a> {
    mem: &'a GuestMemoryMmap,
    next: u64,
}

impl TableWriter<'_> {
    fn reserve(&mut self, len: u64) -> Result<u64, VmmError> {
        let addr = self.next;
        let end = addr + len;
        if end > super::HIGH_RAM_START {
            return Err(VmmError::BootDataTooLarge(
                "the ACPI tables do not fit in the BIOS area".into(),
            ));
        }
        self.next = (end + 15) & !15;
        Ok(addr)
    }

    fn write(&mut self, table: &dyn Aml) -> Result<u64, VmmError> {
        let mut bytes = Vec::new();
        table.to_aml_bytes(&mut bytes);
        let addr = self.reserve(bytes.len() as u64)?;
        self.put(addr, &bytes)?;
        Ok(addr)
    }

    fn write_at(&mut self, addr: u64, table: &dyn Aml) -> Result<(), VmmError> {
        let mut bytes = Vec::new();
        table.to_aml_bytes(&mut bytes);
        self.put(addr, &bytes)
    }

    fn put(&self, addr: u64, bytes: &[u8]) -> Result<(), VmmError> {
        self.mem
            .write_slice(bytes, GuestAddress(addr))
            .map_err(|e| VmmError::BootDataTooLarge(format!("ACPI tables: {e}")))
    }
}

/// The DSDT: `_S5_` (soft-off sleep type) and COM1.
fn dsdt() -> Sdt {
    let mut dsdt = Sdt::new(*b"DSDT", 36, 6, OEM_ID, *b"SMPLDSDT", OEM_REVISION);
    let mut body = Vec::new();
    aml::Name::new("_S5_".into(), &aml::Package::new(vec![&S5_SLEEP_TYPE])).to_aml_bytes(&mut body);
    let io = aml::IO::new(COM1_PORT, COM1_PORT, 1, 8);
    let irq = aml::Interrupt::new(true, true, false, false, COM1_IRQ);
    let resources = aml::ResourceTemplate::new(vec![&io, &irq]);
    let hid = aml::EISAName::new("PNP0501");
    aml::Scope::new(
        "\\_SB_".into(),
        vec![&aml::Device::new(
            "COM1".into(),
            vec![
                &aml::Name::new("_HID".into(), &hid),
                &aml::Name::new("_UID".into(), &aml::ZERO),
                &aml::Name::new("_CRS".into(), &resources),
            ],
        )],
    )
    .to_aml_bytes(&mut body);
    dsdt.append_slice(&body);
    dsdt
}

/// The FADT: hardware-reduced, with the sleep and reset registers.
fn fadt(dsdt: u64) -> acpi_tables::fadt::FADT {
    let io_byte = |port: u16| {
        gas::GAS::new(
            gas::AddressSpace::SystemIo,
            8,
            0,
            gas::AccessSize::ByteAccess,
            u64::from(port),
        )
    };
    let mut fadt = FADTBuilder::new(OEM_ID, *b"SMPLFACP", OEM_REVISION)
        .dsdt_64(dsdt)
        .flag(Flags::HwReducedAcpi)
        .flag(Flags::ResetRegSup)
        .flag(Flags::PwrButton)
        .flag(Flags::SlpButton);
    fadt.sleep_control_reg = io_byte(SLEEP_CONTROL_PORT);
    fadt.sleep_status_reg = io_byte(SLEEP_CONTROL_PORT);
    fadt.reset_reg = io_byte(RESET_PORT);
    fadt.reset_value = RESET_VALUE;
    fadt.iapc_boot_arch = (IAPC_VGA_NOT_PRESENT | IAPC_CMOS_RTC_NOT_PRESENT).into();
    fadt.hypervisor_vendor_identity = u64::from_le_bytes(*b"SMPLAB\0\0").into();
    fadt.finalize()
}

/// The MADT: one enabled LAPIC per vCPU (APIC id = vCPU index, as
/// `crate::vm` sets it in CPUID) and the IOAPIC with GSIs from 0.
fn madt(vcpus: u32) -> MADT {
    let mut madt = MADT::new(
        OEM_ID,
        *b"SMPLMADT",
        OEM_REVISION,
        LocalInterruptController::Address(LAPIC_ADDR),
    );
    for index in 0..vcpus.min(MAX_XAPIC_ID + 1) {
        // Cast: index <= MAX_XAPIC_ID, which fits a byte.
        #[allow(clippy::cast_possible_truncation)]
        let id = index as u8;
        madt.add_structure(ProcessorLocalApic::new(id, id, EnabledStatus::Enabled));
    }
    madt.add_structure(IoApic::new(0, IOAPIC_ADDR, 0));
    madt
}

#[cfg(test)]
mod tests {
    use super::super::ram_regions;
    use super::*;

    fn checksum_ok(bytes: &[u8]) -> bool {
        bytes.iter().fold(0u8, |a, b| a.wrapping_add(*b)) == 0
    }

    fn table(mem: &GuestMemoryMmap, addr: u64) -> Vec<u8> {
        let mut head = [0u8; 8];
        mem.read_slice(&mut head, GuestAddress(addr)).unwrap();
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        let mut bytes = vec![0u8; len];
        mem.read_slice(&mut bytes, GuestAddress(addr)).unwrap();
        bytes
    }

    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn the_tables_chain_from_the_rsdp_with_every_vcpu_in_the_madt() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(4 << 20)).unwrap();
        let rsdp_addr = write_tables(&mem, 5).unwrap();
        assert_eq!(rsdp_addr, BIOS_AREA_START);
        let mut rsdp = [0u8; 36];
        mem.read_slice(&mut rsdp, GuestAddress(rsdp_addr)).unwrap();
        assert_eq!(&rsdp[..8], b"RSD PTR ");
        assert!(checksum_ok(&rsdp[..20]) && checksum_ok(&rsdp));
        let xsdt = table(&mem, u64_at(&rsdp, 24));
        assert_eq!(&xsdt[..4], b"XSDT");
        assert!(checksum_ok(&xsdt));
        let entries: Vec<Vec<u8>> = (36..xsdt.len())
            .step_by(8)
            .map(|at| table(&mem, u64_at(&xsdt, at)))
            .collect();
        let fadt = entries.iter().find(|t| &t[..4] == b"FACP").unwrap();
        let madt = entries.iter().find(|t| &t[..4] == b"APIC").unwrap();
        assert!(checksum_ok(fadt) && checksum_ok(madt));
        // FADT flags (offset 112): hardware-reduced and the reset register.
        let flags = u32::from_le_bytes(fadt[112..116].try_into().unwrap());
        assert_ne!(flags & Flags::HwReducedAcpi as u32, 0);
        assert_ne!(flags & Flags::ResetRegSup as u32, 0);
        // X_DSDT (offset 140) points at a valid DSDT naming _S5_ and COM1.
        let dsdt = table(&mem, u64_at(fadt, 140));
        assert_eq!(&dsdt[..4], b"DSDT");
        assert!(checksum_ok(&dsdt));
        assert!(dsdt.windows(4).any(|w| w == b"_S5_"));
        assert!(dsdt.windows(4).any(|w| w == b"COM1"));
        // MADT entries after the 44-byte header: 5 LAPICs, then the IOAPIC.
        let mut lapic_ids = Vec::new();
        let mut ioapics = 0;
        let mut at = 44;
        while at < madt.len() {
            match madt[at] {
                0 => {
                    assert_eq!(madt[at + 4] & 1, 1, "enabled");
                    lapic_ids.push(madt[at + 3]);
                }
                1 => ioapics += 1,
                other => panic!("unexpected MADT entry type {other}"),
            }
            at += usize::from(madt[at + 1]);
        }
        assert_eq!(lapic_ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(ioapics, 1);
    }

    #[test]
    fn many_vcpus_fit_the_bios_area() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(4 << 20)).unwrap();
        assert!(write_tables(&mem, 1024).is_ok());
    }
}
