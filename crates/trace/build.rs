//! Builds the interposer (`preload/trace.c`) into a shared library with the
//! host gcc, the way smplab-guest builds its kernel; `src/run.rs` embeds it
//! with `include_bytes!` and writes it to a temporary file for `LD_PRELOAD`.

use std::path::PathBuf;
use std::process::Command;

const CFLAGS: &[&str] = &[
    "-O2",
    "-std=gnu11",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-Wall",
    "-Wextra",
    "-Werror",
];

fn main() {
    let dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("preload");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let cc = std::env::var("SMPLAB_TRACE_CC").unwrap_or_else(|_| "gcc".to_string());
    println!("cargo:rerun-if-env-changed=SMPLAB_TRACE_CC");
    println!("cargo:rerun-if-changed=preload/trace.c");
    println!("cargo:rerun-if-changed=preload/trace.h");
    let lib = out.join("libsmplab-trace.so");
    let mut cmd = Command::new(&cc);
    cmd.args(CFLAGS)
        .arg(dir.join("trace.c"))
        .arg("-o")
        .arg(&lib)
        .arg("-ldl")
        .arg("-lpthread");
    let shown = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => {}
        Ok(s) => panic!("building the trace interposer failed ({s}): {shown}"),
        Err(e) => panic!(
            "cannot run `{shown}`: {e}. The trace interposer needs gcc \
             (apt-get install gcc); set SMPLAB_TRACE_CC to use another compiler"
        ),
    }
}
