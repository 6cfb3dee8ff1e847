/* smplab guest, CPL3: what every CPL3 file uses and none of them owns: the
 * console output, fatal errors, the heap, and the two facts the init thread
 * establishes for the others (the TSC rate and the idle policy's name). It
 * calls no other CPL3 file, so the calls between them run one way: init.c
 * calls program.c, exec.c, gate.c and result.c, and all of them call this. */
#include "user.h"

u64 tsc_hz;
char idle_name[48] = "hlt";

/* ---------- console output ---------- */

usize ustrlen(const char *s)
{
    usize n = 0;
    while (s[n])
        n++;
    return n;
}

void print(const char *s) { sys3(SYS_WRITE, (u64)s, ustrlen(s), 0); }

void __attribute__((noreturn)) die(const char *msg, u32 status)
{
    /* Errors are reported even with console=off: the run is over. */
    u32 saved = g_params.console;
    g_params.console = 1;
    print("smplab-guest: error: ");
    print(msg);
    print("\n");
    g_params.console = saved;
    sys1(SYS_POWEROFF, status);
    for (;;)
        ;
}

/* ---------- heap ---------- */

static u64 heap_cur, heap_end;

void heap_init(u64 lo, u64 hi)
{
    heap_cur = lo;
    heap_end = hi;
}

void *alloc(u64 bytes, u64 align)
{
    u64 p = (heap_cur + align - 1) & ~(align - 1);
    if (p + bytes > heap_end || p + bytes < p)
        die("out of guest memory for the program's threads and buffers: give the VM more memory", 1);
    heap_cur = p + bytes;
    /* Fresh RAM from the VMM is zero, but the region may hold boot leftovers. */
    u8 *q = (u8 *)p;
    __asm__ volatile("rep stosb" : "+D"(q), "+c"(bytes) : "a"(0) : "memory");
    return (void *)p;
}
