/* The init of crates/vmm/tests/linux_boot.rs: a static program that is PID 1
 * of a Linux guest on smplab-vmm. It says "ready" on the workload-window port
 * first (docs/guest-abi.md; the VMM's timestamp of it is boot-to-init),
 * prints its marker, the online CPUs and clock sources, then ends the VM the way the kernel
 * command line asks: smplab.stop=poweroff (ACPI soft-off), smplab.stop=reboot
 * (the reset register), otherwise status 0x5a on the debug-exit port 0x501,
 * falling back to a power-off. */
#include <stdio.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <unistd.h>

#define WINDOW_PORT 0x540
#define DEBUG_EXIT_PORT 0x501
#define STATUS_OK 0x5a

static void read_line(const char *path, char *buf, size_t len)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(buf, (int)len, f))
        buf[0] = 0;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
}

int main(void)
{
    /* ready, then go (any answer is go: all-ones without the device). */
    if (ioperm(WINDOW_PORT, 4, 1) == 0) {
        outl(1, WINDOW_PORT);
        (void)inl(WINDOW_PORT);
    }
    printf("@@SMPLAB-LINUX-INIT\n");
    fflush(stdout);
    mount("proc", "/proc", "proc", 0, NULL);
    mount("sysfs", "/sys", "sysfs", 0, NULL);
    char online[256], cmdline[4096], clock[64], clocks[256], mhz[64];
    read_line("/sys/devices/system/cpu/online", online, sizeof online);
    read_line("/proc/cmdline", cmdline, sizeof cmdline);
    read_line("/sys/devices/system/clocksource/clocksource0/current_clocksource", clock, sizeof clock);
    read_line("/sys/devices/system/clocksource/clocksource0/available_clocksource", clocks, sizeof clocks);
    mhz[0] = 0;
    FILE *cpuinfo = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (cpuinfo && fgets(line, sizeof line, cpuinfo))
        if (strncmp(line, "cpu MHz", 7) == 0) {
            strncpy(mhz, strchr(line, ':') ? strchr(line, ':') + 2 : line, sizeof mhz - 1);
            mhz[strcspn(mhz, "\n")] = 0;
            break;
        }
    if (cpuinfo)
        fclose(cpuinfo);
    printf("@@SMPLAB-LINUX-ONLINE %s\n", online);
    printf("@@SMPLAB-LINUX-MHZ %s\n", mhz);
    printf("@@SMPLAB-LINUX-CLOCK %s (available: %s)\n", clock, clocks);
    fflush(stdout);
    sync();
    if (strstr(cmdline, "smplab.stop=poweroff")) {
        reboot(RB_POWER_OFF);
    } else if (strstr(cmdline, "smplab.stop=reboot")) {
        reboot(RB_AUTOBOOT);
    } else {
        /* A 32-bit out touches 4 ports: all need the permission. */
        if (ioperm(DEBUG_EXIT_PORT, 4, 1) == 0)
            outl(STATUS_OK, DEBUG_EXIT_PORT);
        reboot(RB_POWER_OFF);
    }
    for (;;)
        pause();
}
