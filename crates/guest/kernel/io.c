/* smplab guest kernel: the block device of `io` ops (docs/guest-abi.md). A
 * request is one store to the device (SYS_IO), which blocks the thread; the
 * device raises IOAPIC pin 16 when completions are ready, and the handler
 * takes them all, wakes their threads, and moves the interrupt to its next
 * target vCPU: the boot-time io_irq= list in turn, or the mask the host
 * writes on the routing page at run time. */
/* IOAPIC (register window) and the block device's registers. */
#define IOAPIC_BASE 0xfec00000UL
#define BLOCK_BASE 0xfed00000UL
#define BLOCK_PIN 16
#define IOREDTBL_LO (0x10 + 2 * BLOCK_PIN)
#define IOREDTBL_HI (IOREDTBL_LO + 1)
#define BLOCK_NONE (~0UL)
#define BLOCK_MORE (1UL << 16)
#define BLOCK_TSC_MASK ((1UL << 40) - 1)

static void ioapic_w(u32 reg, u32 v)
{
    *(volatile u32 *)IOAPIC_BASE = reg;
    *(volatile u32 *)(IOAPIC_BASE + 0x10) = v;
}

static u32 ioapic_r(u32 reg)
{
    *(volatile u32 *)IOAPIC_BASE = reg;
    return *(volatile u32 *)(IOAPIC_BASE + 0x10);
}

/* Block interrupts taken so far; the handler moves the interrupt to
 * io_targets[io_next % n] (one interrupt each, in io_targets order). */
static volatile u32 io_next;

/* The vCPU the block device's IOAPIC entry names now. */
static volatile u32 io_dest;

/* The vCPU after `cur` in `mask` (ascending, wrapping); mask != 0. One bsf:
 * the handler runs emulated, so no loop over the bits. */
static inline u32 next_in_mask(u64 mask, u32 cur)
{
    u64 above = cur >= 63 ? 0 : mask & (~0ULL << (cur + 1));
    u64 pick = above ? above : mask;
    u64 bit;
    __asm__("bsfq %1, %0" : "=r"(bit) : "rm"(pick) : "cc");
    return (u32)bit;
}

/* Where the block interrupt goes next: the host's routing mask when it set
 * one (restricted to the vCPUs online), else the boot-time list in turn. */
static u32 io_next_target(void)
{
    u64 mask = irq_route_mask;
    if (g_ncpus < 64)
        mask &= (1ULL << g_ncpus) - 1;
    if (mask)
        return next_in_mask(mask, io_dest);
    u32 n = g_params.io_ntargets;
    if (n > 1) {
        /* Two handlers may overlap (edge-triggered): each takes its own
         * turn, though their two IOAPIC writes may land in either order. */
        u32 k = __atomic_add_fetch(&io_next, 1, __ATOMIC_SEQ_CST) % n;
        return g_params.io_targets[k];
    }
    return g_params.io_targets[0];
}

/* At SYS_SMP_START, once the vCPUs are up: point the block device's IOAPIC
 * entry at the first io_irq= target. */
static void io_irq_setup(void)
{
    if (g_params.io_ntargets > IO_TARGETS)
        g_params.io_ntargets = IO_TARGETS;
    /* Edge-triggered, active high, physical destination, fixed delivery.
     * The device raises its line when its completion FIFO becomes
     * non-empty and lowers it when the handler drains it, so every
     * rising edge is one batch and none is lost. Not level-triggered:
     * KVM's in-kernel IOAPIC on PVM hosts re-delivers a level interrupt
     * once more after its EOI although the line is already low (measured:
     * one spurious interrupt per request), which smplab-vmm's model does
     * not; edge behaves the same on both. */
    io_dest = g_params.io_targets[0];
    irq_route_dest = io_dest + 1;
    ioapic_w(IOREDTBL_HI, (u32)g_params.io_targets[0] << 24);
    ioapic_w(IOREDTBL_LO, VEC_IO);
    /* Read it back: a VMM may post IOAPIC writes (smplab-vmm's `hybrid`
     * and `iothread` queue them to its I/O thread), and an edge raised
     * while the entry is still masked would be lost. The read returns
     * only after the writes took effect. */
    if ((ioapic_r(IOREDTBL_LO) & 0x100ff) != VEC_IO)
        kputs_n("smplab-guest: warning: the IOAPIC did not take the block device's entry\n", 72);
}

/* SYS_IO: submit one request (device rdi, service time rsi ns) and block
 * until its completion; rax = completion TSC, rdx = handler-entry TSC. */
static void sys_io(struct cpu *c, struct frame *f)
{
    struct thread *t = c->cur;
    /* Block until the completion interrupt (trap_io) makes it runnable.
     * Everything the handler reads is set before the device sees the
     * request; a handler on another vCPU may wake the thread before it has
     * switched out, which pick() handles as for a futex wake. */
    t->csw_vol++;
    t->io_done_tsc = 0;
    t->io_irq_tsc = 0;
    t->state = T_BLOCKED;
    __atomic_store_n(&t->io_wait, 1, __ATOMIC_SEQ_CST);
    *(volatile u64 *)BLOCK_BASE = (u64)(u32)t->id | (f->rdi & 0xff) << 16 | f->rsi << 24;
    schedule(c);
    f->rax = t->io_done_tsc;
    f->rdx = t->io_irq_tsc;
}

/* Block-device completion (vector VEC_IO, entry.S isr64 took the entry TSC):
 * take every completed tag off the device, wake its thread, move the
 * interrupt to its next target vCPU if the affinity names several, EOI. */
void trap_io(struct frame *f)
{
    struct cpu *c = this_cpu();
    u64 entry = c->io_entry_tsc;
    for (u32 taken = 0;; taken++) {
        u64 w = *(volatile u64 *)(BLOCK_BASE + 8);
        if (w == BLOCK_NONE) {
            if (!taken)
                c->io_spurious++;
            break;
        }
        if (!taken)
            c->io_irqs++;
        u32 tag = (u32)(w & 0xffff);
        if (tag < g_nthreads && tag < MAX_THREADS) {
            struct thread *t = &threads[tag];
            if (__atomic_exchange_n(&t->io_wait, 0, __ATOMIC_SEQ_CST)) {
                u64 ago = (entry - (w >> 24)) & BLOCK_TSC_MASK;
                /* Completed after this handler was entered (it was still
                 * draining): taken without an interrupt of its own. */
                if (ago > BLOCK_TSC_MASK / 2)
                    ago = 0;
                t->io_done_tsc = entry - ago;
                t->io_irq_tsc = entry;
                c->sensor[SENSOR_IO_DONE]++;
                c->sensor[SENSOR_IO_LAT] += ago;
                make_runnable(c, t);
            }
        }
        if (!(w & BLOCK_MORE))
            break;
    }
    __atomic_add_fetch(&irq_route_count, 1, __ATOMIC_RELAXED);
    /* Rewrite the destination only when it changes: each IOAPIC write is an
     * exit. Overlapping handlers may race on io_dest; the loser's target
     * holds until the next interrupt. */
    u32 next = io_next_target();
    if (next != io_dest) {
        io_dest = next;
        irq_route_dest = (u64)next + 1;
        ioapic_w(IOREDTBL_HI, next << 24);
    }
    lapic_eoi();
    /* A CPL3 polling idle thread interrupted: switch it to the woken work. */
    if ((f->cs & 3) == 3 && c->cur->is_idle)
        idle_run_work(c);
}
