//! Builds the static C init that `tests/linux_boot.rs` boots Linux with
//! (`tests/linux_init/init.c`, `gcc -static`), into `OUT_DIR/linux_init`.
//! The test embeds it, so the test binary carries it into the nested AMD-V
//! host, which has no compiler. Without gcc or a static libc the file is left
//! empty and the build goes on: only that test needs it, and it says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let source = "tests/linux_init/init.c";
    println!("cargo:rerun-if-changed={source}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let binary = out.join("linux_init");
    let status = Command::new("gcc")
        .args(["-static", "-O2", "-Wall", "-o"])
        .arg(&binary)
        .arg(source)
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        println!("cargo:warning=gcc -static could not build {source}; tests/linux_boot.rs cannot boot Linux here");
        std::fs::write(&binary, b"").expect("OUT_DIR is writable");
    }
}
