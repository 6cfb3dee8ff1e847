//! `smplab vmm` without the smplab binary: the same arguments, output and exit
//! statuses. `cargo run -p smplab-vmm --example vmm_cli -- run --kernel FILE ...`
//!
//! `... -- test-guest FILE [--aps N --loops N]` writes one of the tiny
//! hand-assembled PVH test guests to FILE, to try the VMM without a kernel build.

use clap::Parser;
use smplab_vmm::cli::{run, VmmArgs};
use smplab_vmm::test_guest::GuestProgram;

#[derive(Parser)]
#[command(name = "smplab-vmm", about = "Run a PVH kernel under smplab-vmm")]
enum Cli {
    /// Run a kernel: the options of `smplab vmm`.
    Run(VmmArgs),
    /// Write a hand-assembled PVH test guest to FILE.
    TestGuest {
        file: std::path::PathBuf,
        /// APs the guest starts with INIT/SIPI (run it with --cpus APS+1).
        #[arg(long, default_value_t = 0)]
        aps: u16,
        /// Work-device reads per vCPU.
        #[arg(long, default_value_t = 1000)]
        loops: u32,
    },
}

fn main() {
    match Cli::parse() {
        Cli::Run(args) => std::process::exit(run(&args)),
        Cli::TestGuest { file, aps, loops } => {
            let program = GuestProgram {
                aps,
                bsp_loops: loops,
                ap_loops: loops,
                ..GuestProgram::default()
            };
            if let Err(e) = std::fs::write(&file, program.elf()) {
                eprintln!("cannot write {}: {e}", file.display());
                std::process::exit(smplab_record::exit::RUN_FAILED);
            }
        }
    }
}
