//! Builds the init (`init/init.c`) with the host C toolchain as a static
//! executable that `src/lib.rs` embeds with `include_bytes!`: static, so it
//! runs in any initramfs, with or without the host's libraries.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = std::env::var("SMPLAB_GUEST_CC").unwrap_or_else(|_| "gcc".to_string());
    println!("cargo:rerun-if-env-changed=SMPLAB_GUEST_CC");
    println!("cargo:rerun-if-changed=init/init.c");
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-static",
        "-O2",
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-s",
        "-o",
    ])
    .arg(out.join("smplab-linux-init"))
    .arg(dir.join("init/init.c"));
    let shown = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the Linux init failed ({s}): {shown}"),
        Err(e) => panic!(
            "cannot run `{shown}`: {e}. The Linux init needs gcc and a static libc \
             (apt-get install gcc libc6-dev); set SMPLAB_GUEST_CC to use another gcc"
        ),
    }
}
