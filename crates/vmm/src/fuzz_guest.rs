//! A hand-assembled multi-vCPU fuzz guest: every vCPU hammers the same
//! devices and interrupt controllers at once with random accesses (port
//! I/O of every width, 32-bit MMIO), so the sync modes' concurrent paths —
//! `hybrid` and `fine`, where two vCPUs reach a device together — are
//! exercised by real vCPUs, not only by host threads (`stress`,
//! `irqchip::harness`).
//!
//! Each vCPU runs the same 32-bit loop: a xorshift32 step, then one access
//! to a target picked from a table ([`FuzzTarget`]: address, access kind,
//! and value masks that keep the guest alive). The BSP starts the APs with
//! INIT/SIPI; an AP switches itself to 32-bit protected mode with the boot
//! GDT (`boot::GDT_ADDR`: code 0x08, data 0x10) and runs the same loop.
//! By default interrupts stay disabled (IF = 0) throughout, so whatever
//! the interrupt controllers decide to deliver stays pending and never runs
//! guest code. With [`FuzzGuest::interrupts`] each vCPU takes a stack of
//! its own, loads an IDT whose 256 gates all lead to one handler (`iret`:
//! an external interrupt pushes no error code, whatever its vector; the
//! loop's random EOI writes retire what is in service) and fuzzes with
//! IF = 1, so the interrupt acknowledge, injection and EOI paths (and the
//! EOI broadcast to the IOAPIC) run concurrently with the devices' accesses. When every AP is
//! done, the BSP writes "ok" to the result port and exits with 0 through
//! the debug-exit port.
//!
//! What the table leaves out, because it legitimately stops the VM: the
//! debug-exit port (0x501), MMIO no device claims (a guest memory fault),
//! and LAPIC/IOAPIC delivery modes other than fixed (INIT/SIPI would reset
//! a fuzzing vCPU, NMI/SMI have no handler in this guest): the value masks
//! clear bits 8–10 of every LAPIC and IOAPIC write.

use crate::test_guest::{pvh_elf, AP_DONE_COUNTER, AP_TRAMPOLINE_ADDR, BSP_LOAD_ADDR};

/// What one access of the loop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    In8,
    Out8,
    In16,
    Out16,
    In32,
    Out32,
    /// `mov eax, [addr]`
    Read32,
    /// `mov [addr], eax`
    Write32,
}

impl Access {
    fn code(self) -> u32 {
        match self {
            Access::In8 => 0,
            Access::Out8 => 1,
            Access::In16 => 2,
            Access::Out16 => 3,
            Access::In32 => 4,
            Access::Out32 => 5,
            Access::Read32 => 6,
            Access::Write32 => 7,
        }
    }
}

/// One entry of the target table: the value written is the random word
/// `& and | or`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuzzTarget {
    pub access: Access,
    /// Port or guest-physical address.
    pub addr: u32,
    pub and: u32,
    pub or: u32,
}

const fn t(access: Access, addr: u32) -> FuzzTarget {
    FuzzTarget {
        access,
        addr,
        and: u32::MAX,
        or: 0,
    }
}

/// Clears a write's delivery-mode bits (8–10): fixed delivery only.
const FIXED_ONLY: u32 = !0x700;
const LAPIC: u32 = 0xfee0_0000;
const IOAPIC: u32 = 0xfec0_0000;
/// The block device's MMIO window (`devices::block`).
pub const BLOCK: u32 = 0xfed0_0000;

/// The targets every configuration has: the devices of `run_vm`, the PIC
/// ports (the in-kernel or the VMM's 8259 pair), unclaimed ports, and the
/// LAPIC and IOAPIC registers (in-kernel or the VMM's models).
pub fn standard_targets(block: bool) -> Vec<FuzzTarget> {
    use Access::*;
    let lapic = |reg: u32, access: Access| FuzzTarget {
        access,
        addr: LAPIC + reg,
        and: FIXED_ONLY,
        or: 0,
    };
    let mut targets = vec![
        // UART: every register, both directions.
        t(Out8, 0x3f8),
        t(In8, 0x3f9),
        t(Out8, 0x3fb),
        t(In8, 0x3fd),
        t(Out8, 0x3fc),
        t(In8, 0x3fa),
        // Result port (bytes), work device (every width), PM timer.
        t(Out8, 0x520),
        t(In32, 0x530),
        t(Out16, 0x531),
        t(In8, 0x533),
        t(In32, 0x608),
        t(In16, 0x609),
        // Workload window: "ready", "done" and other values; its answer.
        FuzzTarget {
            access: Out32,
            addr: 0x540,
            and: 3,
            or: 0,
        },
        t(In32, 0x540),
        // The 8259 pair: commands, masks, ELCR.
        t(Out8, 0x20),
        t(Out8, 0x21),
        t(In8, 0x20),
        t(Out8, 0xa0),
        t(Out8, 0xa1),
        t(In8, 0xa1),
        t(Out8, 0x4d0),
        // Unclaimed ports.
        t(In8, 0x80),
        t(Out32, 0xcf8),
        t(In16, 0x1f0),
        // LAPIC: ICR (fixed IPIs to anyone), TPR, EOI, SVR, timer, LVTs, reads.
        lapic(0x310, Write32),
        lapic(0x300, Write32),
        lapic(0x080, Write32),
        lapic(0x0b0, Write32),
        // SVR has no delivery mode: FIXED_ONLY would clear its enable bit
        // (8) and keep every LAPIC software-disabled, refusing every
        // interrupt. Any value, and one that enables.
        t(Write32, LAPIC + 0x0f0),
        FuzzTarget {
            access: Write32,
            addr: LAPIC + 0x0f0,
            and: u32::MAX,
            or: 0x100,
        },
        FuzzTarget {
            access: Write32,
            addr: LAPIC + 0x380,
            // Initial counts up to 2^16: the timer fires, often.
            and: 0xffff,
            or: 0,
        },
        lapic(0x320, Write32),
        lapic(0x3e0, Write32),
        lapic(0x350, Write32),
        lapic(0x100, Read32),
        lapic(0x200, Read32),
        lapic(0x390, Read32),
        // IOAPIC: select any register, write/read the window.
        FuzzTarget {
            access: Write32,
            addr: IOAPIC,
            and: 0x3f,
            or: 0,
        },
        FuzzTarget {
            access: Write32,
            addr: IOAPIC + 0x10,
            and: FIXED_ONLY,
            or: 0,
        },
        t(Read32, IOAPIC + 0x10),
        t(Read32, IOAPIC),
    ];
    if block {
        // Submissions to device 0 or 1 (4-byte: service time below 256 ns),
        // to any device, and completions.
        targets.push(FuzzTarget {
            access: Write32,
            addr: BLOCK,
            and: 0xff01_ffff,
            or: 0,
        });
        targets.push(t(Write32, BLOCK));
        targets.push(t(Read32, BLOCK + 8));
        targets.push(t(Read32, BLOCK + 12));
        targets.push(t(Write32, BLOCK + 4));
    }
    targets
}

/// The fuzz guest: `vcpus` vCPUs, each doing `accesses_per_vcpu` random
/// accesses to `targets`.
#[derive(Debug, Clone)]
pub struct FuzzGuest {
    pub vcpus: u16,
    pub accesses_per_vcpu: u32,
    pub targets: Vec<FuzzTarget>,
    pub seed: u32,
    /// Fuzz with interrupts enabled (IF = 1) and a handler that EOIs them.
    pub interrupts: bool,
}

/// Top of the vCPUs' stacks with [`FuzzGuest::interrupts`]: vCPU k's stack
/// ends `k * STACK_BYTES` below (the BSP's at the top, the APs' in the order
/// they arrive).
const STACKS_TOP: u32 = 0x40_0000;
const STACK_BYTES: u32 = 0x1000;
/// The APs' arrival counter (a dword next to `AP_DONE_COUNTER`'s page).
const AP_ARRIVALS: u32 = 0x8040;

/// A small x86 assembler: bytes, labels, rel8/rel32 fix-ups.
struct Asm {
    code: Vec<u8>,
    base: u32,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, usize, bool)>, // (at, label, rel8)
}

impl Asm {
    fn new(base: u32) -> Asm {
        Asm {
            code: Vec::new(),
            base,
            labels: Vec::new(),
            fixups: Vec::new(),
        }
    }
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }
    fn bind(&mut self, label: usize) {
        self.labels[label] = Some(self.code.len());
    }
    fn b(&mut self, bytes: &[u8]) {
        self.code.extend_from_slice(bytes);
    }
    fn d(&mut self, value: u32) {
        self.code.extend(value.to_le_bytes());
    }
    /// A short jump with opcode `op` (0xeb, or a 0x7x condition) to `label`.
    fn j8(&mut self, op: u8, label: usize) {
        self.b(&[op, 0]);
        self.fixups.push((self.code.len() - 1, label, true));
    }
    /// `jmp rel32` to `label`.
    fn jmp32(&mut self, label: usize) {
        self.b(&[0xe9, 0, 0, 0, 0]);
        self.fixups.push((self.code.len() - 4, label, false));
    }
    fn addr_of(&self, label: usize) -> u32 {
        let off = self.labels[label].unwrap_or(0);
        self.base + u32::try_from(off).unwrap_or(0)
    }
    fn finish(mut self) -> Vec<u8> {
        for (at, label, rel8) in std::mem::take(&mut self.fixups) {
            let target = i64::try_from(self.labels[label].unwrap_or(0)).unwrap_or(0);
            if rel8 {
                let rel = target - i64::try_from(at + 1).unwrap_or(0);
                self.code[at] = i8::try_from(rel).unwrap_or(0).to_le_bytes()[0];
            } else {
                let rel = target - i64::try_from(at + 4).unwrap_or(0);
                let rel = i32::try_from(rel).unwrap_or(0);
                self.code[at..at + 4].copy_from_slice(&rel.to_le_bytes());
            }
        }
        self.code
    }
}

impl FuzzGuest {
    /// The targets, padded to a power of two by repeating them.
    fn table(&self) -> Vec<FuzzTarget> {
        let n = self.targets.len().max(1).next_power_of_two().min(256);
        (0..n)
            .map(|i| {
                self.targets
                    .get(i % self.targets.len().max(1))
                    .copied()
                    .unwrap_or(t(Access::In8, 0x80))
            })
            .collect()
    }

    /// 32-bit code at `BSP_LOAD_ADDR`: start the APs, fuzz, wait, exit.
    fn bsp_code(&self) -> (Vec<u8>, u32) {
        let table = self.table();
        let mask = u32::try_from(table.len() - 1).unwrap_or(0);
        let aps = self.vcpus.saturating_sub(1);
        let mut a = Asm::new(BSP_LOAD_ADDR);
        let (fuzz, ap_entry, done, table_label) = (a.label(), a.label(), a.label(), a.label());
        if aps > 0 {
            // ICR high = 0, then INIT and one SIPI to all-excluding-self.
            a.b(&[0xc7, 0x05, 0x10, 0x03, 0xe0, 0xfe, 0, 0, 0, 0]);
            a.b(&[0xc7, 0x05, 0x00, 0x03, 0xe0, 0xfe]);
            a.d(0x000c_4500);
            a.b(&[0xc7, 0x05, 0x00, 0x03, 0xe0, 0xfe]);
            a.d(0x000c_4600 | (AP_TRAMPOLINE_ADDR >> 12));
        }
        a.b(&[0x31, 0xed]); // xor ebp, ebp (BSP)
        if self.interrupts {
            a.b(&[0xbc]); // mov esp, STACKS_TOP
            a.d(STACKS_TOP);
        }
        a.jmp32(fuzz);
        // AP entry (32-bit, from the trampoline): flat data segments.
        a.bind(ap_entry);
        a.b(&[0x66, 0xb8, 0x10, 0x00]); // mov ax, 0x10
        a.b(&[0x8e, 0xd8, 0x8e, 0xc0, 0x8e, 0xd0]); // mov ds/es/ss, ax
        a.b(&[0xbd, 1, 0, 0, 0]); // mov ebp, 1 (an AP)
        if self.interrupts {
            // esp = STACKS_TOP - (arrivals++ + 1) * STACK_BYTES
            a.b(&[0xb8, 1, 0, 0, 0]); // mov eax, 1
            a.b(&[0xf0, 0x0f, 0xc1, 0x05]); // lock xadd [AP_ARRIVALS], eax
            a.d(AP_ARRIVALS);
            a.b(&[0x40, 0x69, 0xc0]); // inc eax; imul eax, eax, STACK_BYTES
            a.d(STACK_BYTES);
            a.b(&[0xbc]); // mov esp, STACKS_TOP
            a.d(STACKS_TOP);
            a.b(&[0x29, 0xc4]); // sub esp, eax
        }
        // The loop: esi = xorshift32 state, ecx = accesses left.
        a.bind(fuzz);
        let idtr_at = if self.interrupts {
            a.b(&[0x0f, 0x01, 0x1d]); // lidt [idtr]
            let at = a.code.len();
            a.d(0);
            a.b(&[0xfb]); // sti
            Some(at)
        } else {
            None
        };
        a.b(&[0x0f, 0x31]); // rdtsc
        a.b(&[0x89, 0xc6]); // mov esi, eax
        a.b(&[0x81, 0xf6]); // xor esi, seed
        a.d(self.seed);
        a.b(&[0x83, 0xce, 0x01]); // or esi, 1 (never 0)
        a.b(&[0xb9]); // mov ecx, count
        a.d(self.accesses_per_vcpu);
        a.b(&[0x85, 0xc9]); // test ecx, ecx
        a.jmp_if_zero(done);
        let next = a.label();
        a.bind(next);
        // xorshift32: esi ^= esi << 13; esi ^= esi >> 17; esi ^= esi << 5
        a.b(&[0x89, 0xf0, 0xc1, 0xe0, 13, 0x31, 0xc6]);
        a.b(&[0x89, 0xf0, 0xc1, 0xe8, 17, 0x31, 0xc6]);
        a.b(&[0x89, 0xf0, 0xc1, 0xe0, 5, 0x31, 0xc6]);
        // ebx = &table[(esi >> 8) & mask] (16-byte entries)
        a.b(&[0x89, 0xf3, 0xc1, 0xeb, 8]); // mov ebx, esi; shr ebx, 8
        a.b(&[0x81, 0xe3]); // and ebx, mask
        a.d(mask);
        a.b(&[0xc1, 0xe3, 4]); // shl ebx, 4
        a.b(&[0x81, 0xc3]); // add ebx, table
        let table_at = a.code.len();
        a.d(0);
        // eax = (esi rol 11) & and | or; edx = addr; edi = kind
        a.b(&[0x89, 0xf0, 0xc1, 0xc0, 11]); // mov eax, esi; rol eax, 11
        a.b(&[0x23, 0x43, 0x04]); // and eax, [ebx+4]
        a.b(&[0x0b, 0x43, 0x08]); // or eax, [ebx+8]
        a.b(&[0x8b, 0x13]); // mov edx, [ebx]
        a.b(&[0x8b, 0x7b, 0x0c]); // mov edi, [ebx+12]
        let after = a.label();
        let kinds: [&[u8]; 8] = [
            &[0xec],       // in al, dx
            &[0xee],       // out dx, al
            &[0x66, 0xed], // in ax, dx
            &[0x66, 0xef], // out dx, ax
            &[0xed],       // in eax, dx
            &[0xef],       // out dx, eax
            &[0x8b, 0x02], // mov eax, [edx]
            &[0x89, 0x02], // mov [edx], eax
        ];
        for (code, bytes) in (0u8..).zip(kinds) {
            let skip = a.label();
            a.b(&[0x83, 0xff, code]); // cmp edi, code
            a.j8(0x75, skip); // jne
            a.b(bytes);
            a.j8(0xeb, after);
            a.bind(skip);
        }
        a.bind(after);
        a.b(&[0x49]); // dec ecx
        a.jmp_if_not_zero(next);
        a.bind(done);
        if self.interrupts {
            a.b(&[0xfa]); // cli
        }
        let bsp_end = a.label();
        a.b(&[0x85, 0xed]); // test ebp, ebp
        a.j8(0x74, bsp_end); // jz: the BSP
        a.b(&[0xf0, 0xff, 0x05]); // lock inc dword [AP_DONE_COUNTER]
        a.d(AP_DONE_COUNTER);
        a.b(&[0xfa, 0xf4, 0xeb, 0xfd]); // cli; hlt; jmp hlt
        a.bind(bsp_end);
        // wait: pause; cmp dword [AP_DONE_COUNTER], aps; jne wait
        let wait = a.label();
        a.bind(wait);
        a.b(&[0xf3, 0x90, 0x81, 0x3d]);
        a.d(AP_DONE_COUNTER);
        a.d(u32::from(aps));
        a.j8(0x75, wait);
        // "ok" to the result port, then exit 0.
        a.b(&[0x66, 0xba, 0x20, 0x05]); // mov dx, 0x520
        a.b(&[0xb0, b'o', 0xee, 0xb0, b'k', 0xee]);
        a.b(&[0x66, 0xba, 0x01, 0x05]); // mov dx, 0x501
        a.b(&[0x31, 0xc0, 0xef]); // xor eax, eax; out dx, eax
        a.b(&[0xfa, 0xf4, 0xeb, 0xfd]);
        // The table, 16-byte aligned.
        while !a.code.len().is_multiple_of(16) {
            a.b(&[0x90]);
        }
        a.bind(table_label);
        for target in &table {
            a.d(target.addr);
            a.d(target.and);
            a.d(target.or);
            a.d(target.access.code());
        }
        let idtr = self.interrupts.then(|| Self::idt(&mut a));
        let table_addr = a.addr_of(table_label);
        let ap32 = a.addr_of(ap_entry);
        let mut code = a.finish();
        code[table_at..table_at + 4].copy_from_slice(&table_addr.to_le_bytes());
        if let (Some(at), Some(idtr)) = (idtr_at, idtr) {
            code[at..at + 4].copy_from_slice(&idtr.to_le_bytes());
        }
        (code, ap32)
    }

    /// The interrupt handler (`iret` only), an IDT of 256 32-bit interrupt
    /// gates to it (selector 0x08) and its IDTR. Returns the IDTR's address.
    /// The handler leaves the EOI to the loop's own EOI writes: with an EOI
    /// in the handler, a level-triggered line that stays high (the UART's
    /// transmitter-empty interrupt) is re-delivered after every `iret` and
    /// the loop never runs again (a livelock hardware would show too); this
    /// way each EOI of the loop lets at most one more interrupt in per
    /// priority class.
    fn idt(a: &mut Asm) -> u32 {
        let handler = a.label();
        a.bind(handler);
        a.b(&[0xcf]); // iret
        while !a.code.len().is_multiple_of(8) {
            a.b(&[0x90]);
        }
        let idt = a.label();
        a.bind(idt);
        let [lo0, lo1, hi0, hi1] = a.addr_of(handler).to_le_bytes();
        for _ in 0..256 {
            // offset 15:0, selector, 0, present | DPL 0 | 32-bit interrupt gate, offset 31:16
            a.b(&[lo0, lo1, 0x08, 0x00, 0x00, 0x8e, hi0, hi1]);
        }
        let idtr = a.label();
        a.bind(idtr);
        let base = a.addr_of(idt);
        a.b(&(256u16 * 8 - 1).to_le_bytes());
        a.d(base);
        a.addr_of(idtr)
    }

    /// 16-bit trampoline at `AP_TRAMPOLINE_ADDR`: load the boot GDT, enter
    /// protected mode, far-jump to `ap32`.
    fn ap_code(ap32: u32) -> Vec<u8> {
        let mut c = vec![0xfa]; // cli
                                // lgdt [AP_TRAMPOLINE_ADDR + gdtr] (DS base is 0 after INIT)
                                // cli (1), lgdt (5), cr0 (8), far jmp (8): the GDTR follows.
        let gdtr_at: u32 = 1 + 5 + 8 + 8;
        c.extend([0x0f, 0x01, 0x16]);
        let gdtr = AP_TRAMPOLINE_ADDR + gdtr_at;
        c.extend(&gdtr.to_le_bytes()[..2]);
        c.extend([0x0f, 0x20, 0xc0, 0x0c, 0x01, 0x0f, 0x22, 0xc0]); // cr0 |= PE
        c.extend([0x66, 0xea]); // jmp dword 0x08:ap32
        c.extend(ap32.to_le_bytes());
        c.extend([0x08, 0x00]);
        debug_assert_eq!(c.len(), usize::try_from(gdtr_at).unwrap_or(0));
        c.extend(31u16.to_le_bytes()); // GDTR: limit, base (the boot GDT)
        c.extend(
            u32::try_from(crate::boot::GDT_ADDR)
                .unwrap_or(0x500)
                .to_le_bytes(),
        );
        c
    }

    /// The whole guest as a PVH ELF64 image.
    pub fn elf(&self) -> Vec<u8> {
        let (bsp, ap32) = self.bsp_code();
        let mut segments = vec![(BSP_LOAD_ADDR, bsp)];
        if self.vcpus > 1 {
            segments.push((AP_TRAMPOLINE_ADDR, Self::ap_code(ap32)));
        }
        pvh_elf(BSP_LOAD_ADDR, &segments)
    }
}

impl Asm {
    /// `jz label` (rel32).
    fn jmp_if_zero(&mut self, label: usize) {
        self.b(&[0x0f, 0x84, 0, 0, 0, 0]);
        self.fixups.push((self.code.len() - 4, label, false));
    }
    /// `jnz label` (rel32).
    fn jmp_if_not_zero(&mut self, label: usize) {
        self.b(&[0x0f, 0x85, 0, 0, 0, 0]);
        self.fixups.push((self.code.len() - 4, label, false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trampoline_points_at_its_gdtr_and_the_table_is_a_power_of_two() {
        let guest = FuzzGuest {
            vcpus: 2,
            accesses_per_vcpu: 10,
            targets: standard_targets(true),
            seed: 1,
            interrupts: true,
        };
        assert!(guest.table().len().is_power_of_two());
        let ap = FuzzGuest::ap_code(0x10_0040);
        // limit 31, base 0x500 at the end
        assert_eq!(&ap[ap.len() - 6..], &[31, 0, 0, 5, 0, 0]);
        assert!(!guest.elf().is_empty());
    }
}
