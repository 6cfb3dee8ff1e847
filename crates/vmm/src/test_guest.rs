//! Tiny hand-assembled PVH guests for tests, benches and `smplab doctor`-style
//! checks, so the VMM can be exercised on real KVM without the guest-kernel crate.
//!
//! The BSP code runs in 32-bit protected mode at [`BSP_LOAD_ADDR`] (the PVH entry
//! state); APs start in real mode at [`AP_TRAMPOLINE_ADDR`] after INIT/SIPI. All of
//! it runs at CPL0, which PVM hosts emulate instruction by instruction: keep the
//! code short and its loops bounded.

/// Where the BSP code is loaded (and the PVH entry point).
pub const BSP_LOAD_ADDR: u32 = 0x10_0000;
/// Where the AP code is loaded; SIPI vector `AP_TRAMPOLINE_ADDR >> 12`.
pub const AP_TRAMPOLINE_ADDR: u32 = 0x9000;
/// A 16-bit counter APs increment when they are done.
pub const AP_DONE_COUNTER: u32 = 0x8000;

/// What a test guest does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestProgram {
    /// APs to start with INIT/SIPI (the VM needs `aps + 1` vCPUs).
    pub aps: u16,
    /// Port every vCPU reads in its loop.
    pub loop_port: u16,
    /// Port reads the BSP does.
    pub bsp_loops: u32,
    /// Port reads each AP does.
    pub ap_loops: u32,
    /// Bytes the BSP prints on the UART at the end.
    pub console: Vec<u8>,
    /// Bytes the BSP writes to the result port at the end.
    pub result: Vec<u8>,
    /// Also write the low byte of a read from this port to the result port
    /// (e.g. an unclaimed port, to see all-ones).
    pub probe_port: Option<u16>,
    /// Exit code written to the debug-exit port.
    pub exit_code: u32,
    /// Instead of exiting: `None` exits normally, `Some(kind)` misbehaves.
    pub misbehave: Option<Misbehave>,
    /// Write console and result with `rep outsb` (and probe with a 4-byte
    /// `rep insb`), as the smplab guest kernel does, instead of one `out` per byte.
    pub string_io: bool,
}

/// Ways a test guest can go wrong on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehave {
    /// `ud2` with no IDT: a triple fault (or an emulation failure on PVM).
    Crash,
    /// Read from guest-physical 0xd000_0000, outside RAM and every device,
    /// and write the value read to the debug-exit port.
    ReadOutsideRam,
    /// `cli; hlt` forever.
    Hang,
    /// Switch to long mode and spin forever at CPL3 (`jmp $`), where PVM runs
    /// the guest natively: only a signal or `immediate_exit` gets it out of KVM_RUN.
    SpinAtCpl3,
}

/// Page tables of the [`Misbehave::SpinAtCpl3`] guest (PML4, PDPT, PD).
const SPIN_PAGE_TABLES: u32 = 0x2_0000;
/// Its GDT (null, code64 DPL0, data DPL0, code64 DPL3, data DPL3) and GDTR.
const SPIN_GDT: u32 = 0x2_3000;
const SPIN_GDTR: u32 = 0x2_3100;
/// Its user stack top (inside the identity-mapped first 2 MiB).
const SPIN_USER_STACK: u32 = 0x1f_e000;
/// The user code selector (GDT entry 3, RPL 3).
pub const SPIN_USER_CS: u16 = 0x1b;

/// `mov dword [addr], value` (32-bit mode).
fn store32(code: &mut Vec<u8>, addr: u32, value: u32) {
    code.extend([0xc7, 0x05]);
    code.extend(addr.to_le_bytes());
    code.extend(value.to_le_bytes());
}

/// 32-bit code that enters long mode with the first 2 MiB identity-mapped
/// (user-accessible), then `iretq`s to a CPL3 `jmp $`.
fn spin_at_cpl3_code() -> Vec<u8> {
    let mut c = Vec::new();
    // PML4[0] -> PDPT, PDPT[0] -> PD, PD[0] = 2 MiB page at 0 (P|RW|US|PS).
    store32(&mut c, SPIN_PAGE_TABLES, SPIN_PAGE_TABLES + 0x1007);
    store32(&mut c, SPIN_PAGE_TABLES + 0x1000, SPIN_PAGE_TABLES + 0x2007);
    store32(&mut c, SPIN_PAGE_TABLES + 0x2000, 0x87);
    // GDT high dwords (the low dwords stay 0: base 0, limit ignored in long mode).
    for (selector, high) in [
        (0x08, 0x0020_9a00u32), // code, 64-bit, DPL0
        (0x10, 0x0000_9200),    // data, DPL0
        (0x18, 0x0020_fa00),    // code, 64-bit, DPL3
        (0x20, 0x0000_f200),    // data, DPL3
    ] {
        store32(&mut c, SPIN_GDT + selector + 4, high);
    }
    // GDTR: limit 0x27, base SPIN_GDT.
    store32(&mut c, SPIN_GDTR, 0x27 | ((SPIN_GDT & 0xffff) << 16));
    store32(&mut c, SPIN_GDTR + 4, SPIN_GDT >> 16);
    c.extend([0x0f, 0x01, 0x15]); // lgdt [SPIN_GDTR]
    c.extend(SPIN_GDTR.to_le_bytes());
    c.extend([0x0f, 0x20, 0xe0, 0x83, 0xc8, 0x20, 0x0f, 0x22, 0xe0]); // cr4 |= PAE
    c.push(0xb8); // mov eax, imm32; mov cr3, eax
    c.extend(SPIN_PAGE_TABLES.to_le_bytes());
    c.extend([0x0f, 0x22, 0xd8]);
    c.extend([0xb9, 0x80, 0x00, 0x00, 0xc0]); // mov ecx, EFER
    c.extend([0x0f, 0x32, 0x0d, 0x00, 0x01, 0x00, 0x00, 0x0f, 0x30]); // rdmsr; or LME; wrmsr
    c.extend([
        0x0f, 0x20, 0xc0, 0x0d, 0x00, 0x00, 0x00, 0x80, 0x0f, 0x22, 0xc0,
    ]); // cr0 |= PG
        // jmp far 0x08:long_mode
    c.push(0xea);
    let far_target = c.len();
    c.extend([0; 4]);
    c.extend([0x08, 0x00]);
    let long_mode = BSP_LOAD_ADDR + u32::try_from(c.len()).unwrap_or(u32::MAX);
    c[far_target..far_target + 4].copy_from_slice(&long_mode.to_le_bytes());
    // 64-bit: a kernel stack, then an iretq frame for CPL3.
    c.extend([0x48, 0xc7, 0xc4]); // mov rsp, imm32
    c.extend((SPIN_USER_STACK + 0x1000).to_le_bytes());
    c.extend([0x6a, 0x23]); // push ss = user data
    c.push(0x68); // push user rsp
    c.extend(SPIN_USER_STACK.to_le_bytes());
    c.push(0x68); // push rflags = IF | reserved bit 1
    c.extend(0x202u32.to_le_bytes());
    c.extend([0x6a, SPIN_USER_CS.to_le_bytes()[0]]); // push cs = user code
    c.push(0x68); // push rip
    let rip_at = c.len();
    c.extend([0; 4]);
    c.extend([0x48, 0xcf]); // iretq
    let user = BSP_LOAD_ADDR + u32::try_from(c.len()).unwrap_or(u32::MAX);
    c[rip_at..rip_at + 4].copy_from_slice(&user.to_le_bytes());
    c.extend([0xeb, 0xfe]); // user: jmp $
    c
}

impl Default for GuestProgram {
    fn default() -> Self {
        GuestProgram {
            aps: 0,
            loop_port: 0x530,
            bsp_loops: 0,
            ap_loops: 0,
            console: b"smplab test guest\n".to_vec(),
            result: b"ok".to_vec(),
            probe_port: None,
            exit_code: 0,
            misbehave: None,
            string_io: false,
        }
    }
}

fn mov_dx(code: &mut Vec<u8>, port: u16) {
    // 32-bit mode: operand-size prefix for the 16-bit `mov dx, imm16`.
    code.extend([0x66, 0xba]);
    code.extend(port.to_le_bytes());
}

fn out_bytes(code: &mut Vec<u8>, port: u16, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    mov_dx(code, port);
    for &b in bytes {
        code.extend([0xb0, b, 0xee]); // mov al, b; out dx, al
    }
}

impl GuestProgram {
    /// 32-bit BSP code.
    pub fn bsp_code(&self) -> Vec<u8> {
        let mut c = Vec::new();
        if self.misbehave == Some(Misbehave::SpinAtCpl3) {
            return spin_at_cpl3_code();
        }
        if let Some(kind) = self.misbehave {
            match kind {
                Misbehave::Crash => c.extend([0x0f, 0x0b]),
                // mov eax, [0xd0000000]; mov dx, 0x501; out dx, eax: the
                // value read (open bus: all-ones) is the exit status.
                Misbehave::ReadOutsideRam => c.extend([
                    0x8b, 0x05, 0x00, 0x00, 0x00, 0xd0, 0x66, 0xba, 0x01, 0x05, 0xef,
                ]),
                Misbehave::Hang | Misbehave::SpinAtCpl3 => {}
            }
            c.extend([0xfa, 0xf4, 0xeb, 0xfd]); // cli; hlt; jmp hlt
            return c;
        }
        if self.aps > 0 {
            // ICR high = 0, then INIT and one SIPI to all-excluding-self.
            c.extend([0xc7, 0x05, 0x10, 0x03, 0xe0, 0xfe, 0, 0, 0, 0]);
            c.extend([0xc7, 0x05, 0x00, 0x03, 0xe0, 0xfe]);
            c.extend(0x000c_4500u32.to_le_bytes());
            c.extend([0xc7, 0x05, 0x00, 0x03, 0xe0, 0xfe]);
            c.extend((0x000c_4600u32 | (AP_TRAMPOLINE_ADDR >> 12)).to_le_bytes());
        }
        if self.bsp_loops > 0 {
            mov_dx(&mut c, self.loop_port);
            c.push(0xb9); // mov ecx, imm32
            c.extend(self.bsp_loops.to_le_bytes());
            c.extend([0xec, 0x49, 0x75, 0xfc]); // l: in al,dx; dec ecx; jnz l
        }
        if self.aps > 0 {
            // w: pause; cmp word [AP_DONE_COUNTER], aps; jne w
            c.extend([0xf3, 0x90, 0x66, 0x81, 0x3d]);
            c.extend(AP_DONE_COUNTER.to_le_bytes());
            c.extend(self.aps.to_le_bytes());
            c.extend([0x75, 0xf3]);
        }
        // Buffers the code refers to by address, appended after the code; each
        // patch is (position of an imm32 in the code, buffer index).
        let mut buffers: Vec<Vec<u8>> = Vec::new();
        let mut patches: Vec<(usize, usize)> = Vec::new();
        if self.string_io {
            for (port, bytes) in [(0x3f8u16, &self.console), (0x520, &self.result)] {
                if bytes.is_empty() {
                    continue;
                }
                buffers.push(bytes.clone());
                c.push(0xbe); // mov esi, imm32
                patches.push((c.len(), buffers.len() - 1));
                c.extend([0; 4]);
                c.push(0xb9); // mov ecx, imm32
                c.extend(u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
                mov_dx(&mut c, port);
                c.extend([0xfc, 0xf3, 0x6e]); // cld; rep outsb
            }
            if let Some(port) = self.probe_port {
                // rep insb 4 bytes into a scratch buffer, then rep outsb them.
                buffers.push(vec![0; 4]);
                let scratch = buffers.len() - 1;
                c.push(0xbf); // mov edi, imm32
                patches.push((c.len(), scratch));
                c.extend([0; 4]);
                c.extend([0xb9, 4, 0, 0, 0]); // mov ecx, 4
                mov_dx(&mut c, port);
                c.extend([0xfc, 0xf3, 0x6c]); // cld; rep insb
                c.push(0xbe); // mov esi, imm32
                patches.push((c.len(), scratch));
                c.extend([0; 4]);
                c.extend([0xb9, 4, 0, 0, 0]); // mov ecx, 4
                mov_dx(&mut c, 0x520);
                c.extend([0xf3, 0x6e]); // rep outsb
            }
        } else {
            out_bytes(&mut c, 0x3f8, &self.console);
            out_bytes(&mut c, 0x520, &self.result);
            if let Some(port) = self.probe_port {
                mov_dx(&mut c, port);
                c.push(0xec); // in al, dx
                mov_dx(&mut c, 0x520);
                c.push(0xee); // out dx, al
            }
        }
        mov_dx(&mut c, 0x501);
        c.push(0xb8); // mov eax, imm32
        c.extend(self.exit_code.to_le_bytes());
        c.push(0xef); // out dx, eax
        c.extend([0xfa, 0xf4, 0xeb, 0xfd]); // cli; hlt; jmp hlt
        let mut addresses = Vec::new();
        for buffer in &buffers {
            addresses.push(BSP_LOAD_ADDR + u32::try_from(c.len()).unwrap_or(u32::MAX));
            c.extend(buffer);
        }
        for (pos, buffer) in patches {
            c[pos..pos + 4].copy_from_slice(&addresses[buffer].to_le_bytes());
        }
        c
    }

    /// 16-bit real-mode AP code (entered at CS = AP_TRAMPOLINE_ADDR >> 4, IP = 0).
    pub fn ap_code(&self) -> Vec<u8> {
        let mut c = Vec::new();
        if self.ap_loops > 0 {
            c.push(0xba); // mov dx, imm16
            c.extend(self.loop_port.to_le_bytes());
            c.extend([0x66, 0xb9]); // mov ecx, imm32
            c.extend(self.ap_loops.to_le_bytes());
            c.extend([0xec, 0x66, 0x49, 0x75, 0xfb]); // l: in al,dx; dec ecx; jnz l
        }
        // lock inc word [AP_DONE_COUNTER] (DS base is 0 after INIT)
        c.extend([0xf0, 0xff, 0x06]);
        // A 16-bit address: the counter lies in the first 64 KiB.
        c.extend(&AP_DONE_COUNTER.to_le_bytes()[..2]);
        c.extend([0xfa, 0xf4, 0xeb, 0xfd]); // cli; hlt; jmp hlt
        c
    }

    /// The whole guest as a PVH ELF64 image.
    pub fn elf(&self) -> Vec<u8> {
        let mut segments = vec![(BSP_LOAD_ADDR, self.bsp_code())];
        if self.aps > 0 {
            segments.push((AP_TRAMPOLINE_ADDR, self.ap_code()));
        }
        pvh_elf(BSP_LOAD_ADDR, &segments)
    }
}

/// Build an ELF64 x86-64 executable with one PT_LOAD per `(paddr, bytes)` segment
/// and a PT_NOTE holding the Xen PVH entry note (type 18) for `entry`.
pub fn pvh_elf(entry: u32, segments: &[(u32, Vec<u8>)]) -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    let phnum = segments.len() + 1;
    let note_off = EHDR + PHDR * phnum;
    let mut note = Vec::new();
    note.extend(4u32.to_le_bytes()); // namesz "Xen\0"
    note.extend(4u32.to_le_bytes()); // descsz
    note.extend(18u32.to_le_bytes()); // XEN_ELFNOTE_PHYS32_ENTRY
    note.extend(b"Xen\0");
    note.extend(entry.to_le_bytes());
    let mut data_off = (note_off + note.len() + 15) & !15;

    let mut out = Vec::new();
    out.extend(b"\x7fELF");
    out.extend([2, 1, 1, 0]); // 64-bit, little endian, version 1, SysV
    out.extend([0u8; 8]);
    out.extend(2u16.to_le_bytes()); // ET_EXEC
    out.extend(62u16.to_le_bytes()); // EM_X86_64
    out.extend(1u32.to_le_bytes());
    out.extend(u64::from(entry).to_le_bytes()); // e_entry
    out.extend((EHDR as u64).to_le_bytes()); // e_phoff
    out.extend(0u64.to_le_bytes()); // e_shoff
    out.extend(0u32.to_le_bytes()); // e_flags
    out.extend(u16::try_from(EHDR).unwrap_or(u16::MAX).to_le_bytes());
    out.extend(u16::try_from(PHDR).unwrap_or(u16::MAX).to_le_bytes());
    out.extend(u16::try_from(phnum).unwrap_or(u16::MAX).to_le_bytes());
    out.extend([0u8; 6]); // shentsize, shnum, shstrndx

    let mut placed = Vec::new();
    for (paddr, bytes) in segments {
        out.extend(1u32.to_le_bytes()); // PT_LOAD
        out.extend(7u32.to_le_bytes()); // RWX
        out.extend((data_off as u64).to_le_bytes());
        out.extend(u64::from(*paddr).to_le_bytes()); // vaddr
        out.extend(u64::from(*paddr).to_le_bytes()); // paddr
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend((bytes.len() as u64).to_le_bytes());
        out.extend(16u64.to_le_bytes());
        placed.push(data_off);
        data_off = (data_off + bytes.len() + 15) & !15;
    }
    out.extend(4u32.to_le_bytes()); // PT_NOTE
    out.extend(4u32.to_le_bytes());
    out.extend((note_off as u64).to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((note.len() as u64).to_le_bytes());
    out.extend((note.len() as u64).to_le_bytes());
    out.extend(4u64.to_le_bytes());
    out.extend(&note);
    for ((_, bytes), off) in segments.iter().zip(placed) {
        out.resize(off, 0);
        out.extend(bytes);
    }
    out
}
