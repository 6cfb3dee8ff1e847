//! Builds the static C inits the Linux-guest tests boot (`gcc -static`):
//! `tests/linux_init/init.c` into `OUT_DIR/linux_init` (linux_boot.rs,
//! linux_user_irqchip.rs) and `tests/linux_init/hostile.c` into
//! `OUT_DIR/linux_hostile_init` (linux_hostile.rs).
//! The test embeds it, so the test binary carries it into the nested AMD-V
//! host, which has no compiler. Without gcc or a static libc the file is left
//! empty and the build goes on: only that test needs it, and it says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    // (source, binary in OUT_DIR, test that boots it)
    let inits = [
        (
            "tests/linux_init/init.c",
            "linux_init",
            "tests/linux_boot.rs",
        ),
        (
            "tests/linux_init/hostile.c",
            "linux_hostile_init",
            "tests/linux_hostile.rs",
        ),
    ];
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for (source, name, test) in inits {
        println!("cargo:rerun-if-changed={source}");
        let binary = out.join(name);
        let status = Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-pthread", "-o"])
            .arg(&binary)
            .arg(source)
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            println!(
                "cargo:warning=gcc -static could not build {source}; {test} cannot boot Linux here"
            );
            std::fs::write(&binary, b"").expect("OUT_DIR is writable");
        }
    }
}
