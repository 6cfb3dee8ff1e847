//! Builds the guest kernel (`kernel/`) with the host C toolchain: only the host
//! Rust target exists on smplab machines, so the freestanding x86-64 kernel is C
//! and GNU as, linked with `kernel/link.ld` into a PVH ELF that `src/lib.rs`
//! embeds with `include_bytes!`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Translation units. The CPL0 kernel is one (`kernel.c` includes its parts,
/// below: calls between them are the emulated hot paths, and in one unit gcc
/// inlines them and allocates registers across them); each CPL3 file is its own.
const SOURCES: &[&str] = &[
    "entry.S",
    "kernel.c",
    "init.c",
    "program.c",
    "exec.c",
    "gate.c",
    "idle.c",
    "result.c",
    "ulib.c",
];
/// Files the sources include or the link reads: a change rebuilds the kernel.
const INCLUDED: &[&str] = &[
    "guest.h",
    "kernel.h",
    "user.h",
    "klib.c",
    "panic.c",
    "timer.c",
    "sched.c",
    "futex.c",
    "io.c",
    "boot.c",
    "syscall.c",
    "link.ld",
];

/// Flags for freestanding code that KVM's emulator can run at CPL0: no SSE
/// (-mgeneral-regs-only), no red zone (interrupts share kernel stacks), no PIC.
const CFLAGS: &[&str] = &[
    "-O2",
    "-std=gnu11",
    "-ffreestanding",
    "-fno-builtin",
    "-mgeneral-regs-only",
    "-mno-red-zone",
    "-fno-pic",
    "-fno-pie",
    "-mcmodel=small",
    "-fno-stack-protector",
    "-fno-asynchronous-unwind-tables",
    "-fcf-protection=none",
    "-nostdlib",
    "-static",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Werror",
];

fn run(cmd: &mut Command) {
    let shown = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the guest kernel failed ({s}): {shown}"),
        Err(e) => panic!(
            "cannot run `{shown}`: {e}. The guest kernel needs gcc and GNU binutils \
             (apt-get install gcc binutils); set SMPLAB_GUEST_CC to use another gcc"
        ),
    }
}

fn main() {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
            .join("kernel");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = std::env::var("SMPLAB_GUEST_CC").unwrap_or_else(|_| "gcc".to_string());
    let ld = std::env::var("SMPLAB_GUEST_LD").unwrap_or_else(|_| "ld".to_string());
    println!("cargo:rerun-if-env-changed=SMPLAB_GUEST_CC");
    println!("cargo:rerun-if-env-changed=SMPLAB_GUEST_LD");
    for f in SOURCES.iter().chain(INCLUDED) {
        println!("cargo:rerun-if-changed=kernel/{f}");
    }
    let mut objects = Vec::new();
    for src in SOURCES {
        let obj = out.join(format!(
            "{}.o",
            Path::new(src)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("obj")
        ));
        run(Command::new(&cc)
            .args(CFLAGS)
            .arg("-c")
            .arg(dir.join(src))
            .arg("-o")
            .arg(&obj));
        objects.push(obj);
    }
    let elf = out.join("smplab-guest.elf");
    run(Command::new(&ld)
        .args([
            "-nostdlib",
            "-static",
            "-no-pie",
            "-z",
            "max-page-size=4096",
            "-z",
            "noexecstack",
            "--no-warn-rwx-segments",
            "-T",
        ])
        .arg(dir.join("link.ld"))
        .arg("-o")
        .arg(&elf)
        .args(&objects));
}
