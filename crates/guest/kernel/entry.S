/* smplab guest kernel: PVH entry, long-mode switch, AP trampoline, interrupt
 * stubs. Everything here runs at CPL0, i.e. in KVM's instruction emulator on PVM
 * hosts, so it stays short and uses only plain integer/system instructions. */

#define PTE_P 0x1
#define PTE_W 0x2
#define PTE_U 0x4
#define PTE_PWT 0x8
#define PTE_PCD 0x10
#define PTE_PS 0x80
#define TRAMP_BASE 0x8000
#define TR(x) ((x) - tramp_start + TRAMP_BASE)
/* offsetof(struct cpu, ipis_received) and (io_entry_tsc), checked in kernel.h */
#define CPU_IPIS_RECEIVED 88
#define CPU_IO_ENTRY_TSC 152

/* Xen PVH note: XEN_ELFNOTE_PHYS32_ENTRY (18). The descriptor is 8 bytes (as in
 * Linux); loaders that read 4 bytes get the same little-endian address. */
    .section .note.Xen, "a", @note
    .balign 4
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .balign 4
    .quad pvh_start32

    .section .boot, "ax"
    .code32
    .globl pvh_start32
pvh_start32:
    cli
    cld
    /* .bss is not zeroed here: the ELF loader zero-fills p_memsz beyond
     * p_filesz (docs/guest-abi.md), and the emulator would charge ~3 us per
     * `rep stos` iteration. */
    movl %ebx, boot_start_info
    /* Identity map 0..1 GiB with 2 MiB user-accessible pages, plus the LAPIC
     * page (0xfee00000) and the page holding the IOAPIC (0xfec00000) and the
     * block device (0xfed00000), uncached and kernel-only. */
    xorl %ecx, %ecx
1:  movl %ecx, %eax
    shll $21, %eax
    orl $(PTE_P | PTE_W | PTE_U | PTE_PS), %eax
    movl %eax, pd_low(,%ecx,8)
    incl %ecx
    cmpl $512, %ecx
    jb 1b
    movl $(0xfee00000 | PTE_P | PTE_W | PTE_PWT | PTE_PCD | PTE_PS), pd_high + 503*8
    movl $(0xfec00000 | PTE_P | PTE_W | PTE_PWT | PTE_PCD | PTE_PS), pd_high + 502*8
    movl $(pd_low + PTE_P + PTE_W + PTE_U), pdpt
    movl $(pd_high + PTE_P + PTE_W), pdpt + 3*8
    movl $(pdpt + PTE_P + PTE_W + PTE_U), pml4
    lgdt boot_gdt_desc
    /* No stack yet (PVH leaves %esp undefined): straight-line code. */
    movl %cr4, %eax
    orl $0x6a0, %eax            /* PAE | PGE | OSFXSR | OSXMMEXCPT */
    movl %eax, %cr4
    movl $pml4, %eax
    movl %eax, %cr3
    movl $0xc0000080, %ecx      /* EFER.LME */
    rdmsr
    orl $0x100, %eax
    wrmsr
    movl %cr0, %eax
    andl $~0x0c, %eax           /* clear EM, TS: CPL3 may use SSE */
    orl $0x80010023, %eax       /* PG | WP | NE | MP | PE */
    movl %eax, %cr0
    ljmp $0x08, $bsp_long

    .code64
bsp_long:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq $(kstacks + 8192 - 64), %rsp
    movl boot_start_info, %edi
    call kmain
2:  hlt
    jmp 2b

/* AP entry in 64-bit mode (from the trampoline). ap_stack_top was set by the BSP. */
    .globl ap_long
ap_long:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq ap_stack_top, %rsp
    call ap_main
3:  hlt
    jmp 3b

/* Real-mode AP trampoline, copied to 0x8000 by the BSP (SIPI vector 0x08). */
    .code16
    .globl tramp_start, tramp_end
tramp_start:
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl TR(tramp_gdt_desc)
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl $0x18, $TR(tramp32)
    .code32
tramp32:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr4, %eax
    orl $0x6a0, %eax
    movl %eax, %cr4
    movl $pml4, %eax
    movl %eax, %cr3
    movl $0xc0000080, %ecx
    rdmsr
    orl $0x100, %eax
    wrmsr
    movl %cr0, %eax
    andl $~0x0c, %eax
    orl $0x80010023, %eax
    movl %eax, %cr0
    ljmp $0x08, $ap_long
    .balign 8
tramp_gdt_desc:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt
tramp_end:

    .code64
    .section .data
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff    /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff    /* 0x10: data */
    .quad 0x00cf9a000000ffff    /* 0x18: 32-bit code (trampoline) */
boot_gdt_end:
boot_gdt_desc:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt
    .globl ap_stack_top
ap_stack_top:
    .quad 0

    .section .bss
    .balign 4096
    .globl pml4, pdpt, pd_low, pd_high, kstacks
pml4:   .skip 4096
pdpt:   .skip 4096
pd_low: .skip 4096
pd_high: .skip 4096
    .section .noinit, "aw", @nobits
    .balign 64
kstacks: .skip 8192 * 64

/* ---- interrupt and exception stubs ---- */
    .text
.macro PUSH_REGS
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
.endm
.macro ISR_NOERR n
    .globl isr\n
isr\n:
    pushq $0
    pushq $\n
    jmp isr_common
.endm
/* A hot vector straight to its C handler: no dispatch in the emulator. */
.macro ISR_DIRECT n, handler
    .globl isr\n
isr\n:
    pushq $0
    pushq $\n
    PUSH_REGS
    cld
    movq %rsp, %rdi
    call \handler
    jmp trap_return
.endm
.macro ISR_ERR n
    .globl isr\n
isr\n:
    pushq $\n
    jmp isr_common
.endm

ISR_NOERR 0
ISR_NOERR 1
ISR_NOERR 2
/* Vector 3 (`int3`, the system-call instruction) and 129 (`int $0x81`): a
 * slim stub. System calls preserve rbx, rbp, r12-r15 (the C handler saves
 * what it uses, as the SysV ABI promises) and rax/rcx/rdx/rsi/rdi (saved
 * here); r8-r11 are clobbered (the user stubs declare it). The frame keeps the
 * full `struct frame` layout, with the r8-r15/rbp slots left unwritten: nine
 * fewer pushes and pops per call, ~1 us each when emulated. */
.macro ISR_SYSCALL n
    .globl isr\n
isr\n:
    pushq $0
    pushq $\n
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    subq $72, %rsp
    cld
    movq %rsp, %rdi
    call trap_syscall
    addq $72, %rsp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rbx
    popq %rax
    addq $16, %rsp
    iretq
.endm
ISR_SYSCALL 3
ISR_NOERR 4
ISR_NOERR 5
ISR_NOERR 6
ISR_NOERR 7
ISR_ERR 8
ISR_NOERR 9
ISR_ERR 10
ISR_ERR 11
ISR_ERR 12
ISR_ERR 13
ISR_ERR 14
ISR_NOERR 15
ISR_NOERR 16
ISR_ERR 17
ISR_NOERR 18
ISR_NOERR 19
ISR_NOERR 20
ISR_ERR 21
ISR_NOERR 22
ISR_NOERR 23
ISR_NOERR 24
ISR_NOERR 25
ISR_NOERR 26
ISR_NOERR 27
ISR_NOERR 28
ISR_ERR 29
ISR_ERR 30
ISR_NOERR 31
ISR_DIRECT 32, trap_timer
/* Block-device completion: the TSC is read before anything else (the frame
 * pushes alone cost ~10 us in the emulator), so the latency the handler
 * reports starts at the device's completion and ends at handler entry. */
    .globl isr64
isr64:
    pushq %rax
    pushq %rdx
    rdtsc
    shlq $32, %rdx
    orq %rdx, %rax
    movq %rax, %gs:CPU_IO_ENTRY_TSC
    popq %rdx
    popq %rax
    pushq $0
    pushq $64
    PUSH_REGS
    cld
    movq %rsp, %rdi
    call trap_io
    jmp trap_return
ISR_SYSCALL 129
/* Wakeup IPI. Arriving at CPL0 it can only have interrupted an idle `hlt`
 * (the kernel runs with interrupts off otherwise), whose loop rechecks the run
 * queue itself: acknowledge and return in 7 instructions instead of saving a
 * full frame. From CPL3 it may switch the polling idle thread to work. */
    .globl isr240
isr240:
    testb $3, 8(%rsp)
    jnz 1f
    pushq %rax
    movq $0xfee000b0, %rax
    movl $0, (%rax)                 /* EOI */
    incq %gs:CPU_IPIS_RECEIVED
    popq %rax
    iretq
1:  pushq $0
    pushq $240
    PUSH_REGS
    cld
    movq %rsp, %rdi
    call trap_wake
    jmp trap_return
/* TLB-shootdown IPI: flush g_sd_pages pages (at most 64), acknowledge,
 * EOI. It never switches threads, so it saves only the two registers it uses. */
    .globl isr241
isr241:
    pushq %rax
    pushq %rcx
    movl g_sd_pages(%rip), %ecx
    cmpl $64, %ecx
    jbe 1f
    movl $64, %ecx
1:  testl %ecx, %ecx
    jz 3f
    movq $0x40000000, %rax
2:  subq $4096, %rax
    invlpg (%rax)
    decl %ecx
    jnz 2b
3:  lock incq g_sd_acks(%rip)
    movq $0xfee000b0, %rax
    movl $0, (%rax)                 /* EOI */
    incq %gs:CPU_IPIS_RECEIVED
    popq %rcx
    popq %rax
    iretq
ISR_NOERR 255

isr_common:
    PUSH_REGS
    cld
    movq %rsp, %rdi
    call trap
    .globl trap_return
trap_return:
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rbp
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rbx
    popq %rax
    addq $16, %rsp
    iretq

/* struct thread *switch_stack(u64 *save_sp, u64 new_sp, struct thread *prev):
 * save the callee-saved registers on this stack, switch to new_sp, restore
 * the other context's, and return `prev` to it (as "last"). */
    .globl switch_stack
switch_stack:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    movq %rdx, %rax
    ret

/* First switch into a new thread (make_thread): release the previous thread's
 * stack, then drop to the user frame at the top of this stack. */
    .globl thread_start
thread_start:
    movq %rax, %rdi
    call finish_switch
    jmp trap_return

    .section .rodata
    .balign 8
    .globl isr_table
/* (vector, handler) pairs, terminated by vector 0xffff. */
isr_table:
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,64,129,240,241,255
    .quad \n, isr\n
    .endr
    .quad 0xffff, 0

    .section .note.GNU-stack, "", @progbits
