/*
 * smplab-linux's init: runs one program and reports how it went
 * (docs/linux.md). Static, so it needs nothing from the initramfs.
 *
 * Guest mode (PID 1 in a Linux guest): tell smplab-vmm "ready" on the
 * workload-window port, print @@SMPLAB-LINUX-INIT, mount proc, sysfs,
 * devtmpfs and a tmpfs on /tmp (unless files were included there), read
 * the program's argv and environment from /smplab/argv and /smplab/env,
 * read "go" from the window port, run the program, write "done", print
 * @@SMPLAB-LINUX-RESULT {json}, write the status to the debug-exit port
 * 0x501 and power off.
 *
 * Native mode (`init --native DIR`, on the host): the same files from DIR,
 * the same fork/exec/drain/timing and the same result line on stdout; no
 * mounts, no ports, no power-off. So both modes time exactly the same
 * interval: CLOCK_MONOTONIC before fork() to after waitpid().
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT_WINDOW 0x540
#define PORT_EXIT 0x501
#define WINDOW_READY 1u
#define WINDOW_DONE 2u
/* "WAIT" little-endian: smplab-vmm's start gate is still closed. */
#define WINDOW_WAIT 0x54494157u
/* The output tail kept for the result line (the rest is only counted). */
#define TAIL_MAX 2048
/* Most argv/env bytes read from a file. */
#define ARGS_MAX (1 << 20)
#define STRINGS_MAX 4096
/* Status written to 0x501 when the program could not be started. */
#define STATUS_EXEC_FAILED 127

static int out_fd = 1;
static int have_ports;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        buf += n;
        len -= (size_t)n;
    }
}

static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    write_all(out_fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void port_out32(uint16_t port, uint32_t v)
{
    __asm__ volatile("outl %0, %1" : : "a"(v), "Nd"(port));
}

static uint32_t port_in32(uint16_t port)
{
    uint32_t v;
    __asm__ volatile("inl %1, %0" : "=a"(v) : "Nd"(port));
    return v;
}

static void port_out8(uint16_t port, uint8_t v)
{
    __asm__ volatile("outb %0, %1" : : "a"(v), "Nd"(port));
}

/* Read a whole small file; returns its length or -1. */
static long read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t len = 0;
    while (len < cap) {
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    return (long)len;
}

/* Split NUL-terminated strings into a NULL-terminated vector. */
static int split_strings(char *buf, long len, char **vec, int max)
{
    int n = 0;
    long i = 0;
    while (i < len && n < max - 1) {
        vec[n++] = buf + i;
        while (i < len && buf[i] != '\0')
            i++;
        i++;
    }
    vec[n] = NULL;
    return n;
}

/* The value of `key=` on the kernel command line, or 0. */
static long cmdline_number(const char *key)
{
    char line[4096];
    long len = read_file("/proc/cmdline", line, sizeof line - 1);
    if (len <= 0)
        return 0;
    line[len] = '\0';
    size_t klen = strlen(key);
    for (char *p = line; (p = strstr(p, key)) != NULL; p += klen) {
        if ((p == line || p[-1] == ' ') && p[klen] == '=')
            return strtol(p + klen + 1, NULL, 10);
    }
    return 0;
}

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    if (d == NULL)
        return 1;
    struct dirent *e;
    int empty = 1;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            empty = 0;
    closedir(d);
    return empty;
}

static void guest_setup(void)
{
    /* Mount points may be missing from a given initramfs. */
    mkdir("/proc", 0755);
    mkdir("/sys", 0755);
    mkdir("/dev", 0755);
    mkdir("/tmp", 01777);
    if (mount("proc", "/proc", "proc", 0, NULL) != 0)
        say("smplab-linux-init: mount /proc: %s\n", strerror(errno));
    if (mount("sysfs", "/sys", "sysfs", 0, NULL) != 0)
        say("smplab-linux-init: mount /sys: %s\n", strerror(errno));
    if (mount("devtmpfs", "/dev", "devtmpfs", 0, NULL) != 0)
        say("smplab-linux-init: mount /dev: %s\n", strerror(errno));
    /* Files included under /tmp stay visible: the initramfs's root is
     * already a writable tmpfs, so /tmp needs its own only when empty. */
    if (dir_is_empty("/tmp") && mount("tmpfs", "/tmp", "tmpfs", 0, "mode=1777") != 0)
        say("smplab-linux-init: mount /tmp: %s\n", strerror(errno));
}

/* Without /dev/console in the initramfs the kernel gives init no stdout. */
static void guest_console(void)
{
    if (fcntl(1, F_GETFD) >= 0)
        return;
    int fd = open("/dev/console", O_RDWR);
    if (fd < 0)
        return;
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    if (fd > 2)
        close(fd);
}

struct result {
    uint64_t wall_ns;
    int exited; /* 1: status is an exit status; 0: signal */
    int status;
    int exec_errno;
    uint64_t output_bytes;
    char tail[TAIL_MAX];
    size_t tail_len;  /* bytes in tail (<= TAIL_MAX) */
    size_t tail_head; /* next write position, ring */
};

static void keep_tail(struct result *r, const char *buf, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        r->tail[r->tail_head] = buf[i];
        r->tail_head = (r->tail_head + 1) % TAIL_MAX;
        if (r->tail_len < TAIL_MAX)
            r->tail_len++;
    }
}

/* Fork, exec `path` with argv/env, drain its stdout+stderr, time it. */
static void run_program(const char *path, char **argv, char **envp, struct result *r)
{
    int out[2], err[2];
    memset(r, 0, sizeof *r);
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
        r->exec_errno = errno;
        return;
    }
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        r->exec_errno = errno;
        return;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        dup2(out[1], 1);
        dup2(out[1], 2);
        /* A bare name (a given initramfs's program) is looked up on the
         * program's own PATH, as a shell would. */
        if (strchr(path, '/') == NULL) {
            for (char **e = envp; *e != NULL; e++)
                if (strncmp(*e, "PATH=", 5) == 0)
                    setenv("PATH", *e + 5, 1);
            execvpe(path, argv, envp);
        } else {
            execve(path, argv, envp);
        }
        int e = errno;
        write_all(err[1], (const char *)&e, sizeof e);
        _exit(STATUS_EXEC_FAILED);
    }
    close(out[1]);
    close(err[1]);
    char buf[65536];
    for (;;) {
        ssize_t n = read(out[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        r->output_bytes += (uint64_t)n;
        keep_tail(r, buf, (size_t)n);
    }
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    r->wall_ns = now_ns() - t0;
    close(out[0]);
    int e = 0;
    if (read(err[0], &e, sizeof e) == (ssize_t)sizeof e)
        r->exec_errno = e;
    close(err[0]);
    if (WIFSIGNALED(wstatus)) {
        r->exited = 0;
        r->status = WTERMSIG(wstatus);
    } else {
        r->exited = 1;
        r->status = WEXITSTATUS(wstatus);
    }
}

/* JSON string escaping of the tail: printable ASCII as is, every other byte
 * as \u00XX (so bytes >= 0x80 come back as U+0080..U+00FF, one per byte). */
static void print_result(const struct result *r, long cpus, uint64_t init_clock_ns)
{
    static char line[TAIL_MAX * 6 + 512];
    size_t n = 0;
    n += (size_t)snprintf(line + n, sizeof line - n,
                          "@@SMPLAB-LINUX-RESULT {\"wall_ns\":%llu,\"%s\":%d,"
                          "\"exec_errno\":%d,\"output_bytes\":%llu,\"cpus_online\":%ld,"
                          "\"init_clock_ns\":%llu,\"tail\":\"",
                          (unsigned long long)r->wall_ns, r->exited ? "status" : "signal",
                          r->status, r->exec_errno, (unsigned long long)r->output_bytes, cpus,
                          (unsigned long long)init_clock_ns);
    size_t start = (r->tail_head + TAIL_MAX - r->tail_len) % TAIL_MAX;
    for (size_t i = 0; i < r->tail_len; i++) {
        unsigned char c = (unsigned char)r->tail[(start + i) % TAIL_MAX];
        if (c == '"' || c == '\\') {
            line[n++] = '\\';
            line[n++] = (char)c;
        } else if (c >= 0x20 && c < 0x7f) {
            line[n++] = (char)c;
        } else {
            n += (size_t)snprintf(line + n, sizeof line - n, "\\u%04x", c);
        }
    }
    n += (size_t)snprintf(line + n, sizeof line - n, "\"}\n");
    write_all(out_fd, line, n);
}

int main(int argc, char **argv)
{
    static char argbuf[ARGS_MAX], envbuf[ARGS_MAX];
    static char *prog_argv[STRINGS_MAX], *prog_env[STRINGS_MAX];
    char argv_path[4096], env_path[4096];
    int native = argc == 3 && strcmp(argv[1], "--native") == 0;
    uint64_t init_clock_ns = now_ns();

    if (native) {
        snprintf(argv_path, sizeof argv_path, "%s/argv", argv[2]);
        snprintf(env_path, sizeof env_path, "%s/env", argv[2]);
    } else {
        /* ioperm needs CAP_SYS_RAWIO, which PID 1 has. Ready first, so
         * smplab-vmm's window times the boot up to here exactly. */
        have_ports = ioperm(PORT_WINDOW, 4, 1) == 0 && ioperm(PORT_EXIT, 1, 1) == 0;
        if (have_ports)
            port_out32(PORT_WINDOW, WINDOW_READY);
        guest_console();
        say("@@SMPLAB-LINUX-INIT\n");
        guest_setup();
        guest_console();
        snprintf(argv_path, sizeof argv_path, "/smplab/argv");
        snprintf(env_path, sizeof env_path, "/smplab/env");
    }

    long alen = read_file(argv_path, argbuf, sizeof argbuf - 1);
    long elen = read_file(env_path, envbuf, sizeof envbuf - 1);
    if (elen < 0)
        elen = 0;
    struct result r;
    memset(&r, 0, sizeof r);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    /* argv file: the path to execute, then argv[0], argv[1], ... */
    if (alen <= 0 || split_strings(argbuf, alen, prog_argv, STRINGS_MAX) < 2) {
        say("smplab-linux-init: cannot read the program from %s\n", argv_path);
        r.exited = 1;
        r.status = STATUS_EXEC_FAILED;
        r.exec_errno = ENOENT;
    } else {
        split_strings(envbuf, elen, prog_env, STRINGS_MAX);
        /* "go" last, so the window's go..done is the program's run. Any
         * answer but WAIT (all ones under QEMU) means go. */
        if (have_ports)
            while (port_in32(PORT_WINDOW) == WINDOW_WAIT) {
            }
        run_program(prog_argv[0], prog_argv + 1, prog_env, &r);
        if (have_ports)
            port_out32(PORT_WINDOW, WINDOW_DONE);
        if (r.exec_errno != 0)
            r.status = STATUS_EXEC_FAILED;
    }
    print_result(&r, cpus, init_clock_ns);
    if (native)
        return 0;

    /* Under QEMU the host reads QEMU's statistics after the result line and
     * then quits QEMU: smplab.hold=N keeps the guest still for at most N s. */
    long hold = cmdline_number("smplab.hold");
    if (hold > 0) {
        struct timespec ts = {.tv_sec = hold, .tv_nsec = 0};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
    if (have_ports)
        port_out8(PORT_EXIT, (uint8_t)(r.exited ? r.status : 128 + r.status));
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}
