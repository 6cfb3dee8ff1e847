//! `smplab`: the command-line front end. Each subcommand is a module here, or,
//! for the big parts (vmm, sim, lab), a thin call into that crate's `cli` module.
//! Exit statuses: `smplab_record::exit` (documented in README.md).

mod check;
mod demo;
mod doctor;
mod run;
mod workloads;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "smplab",
    version,
    about = "A laboratory for virtual-SMP performance: run one multi-threaded workload natively, in a KVM VM and in a simulator, and explain the difference.",
    after_help = "Start with `smplab doctor` (what works on this host) and `smplab workloads`."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List the built-in workload profiles, or show one as TOML.
    Workloads(workloads::WorkloadsArgs),
    /// Validate a workload file (errors as file:line:col).
    Check(check::CheckArgs),
    /// Run a workload on one executor and print its result record.
    Run(run::RunArgs),
    /// Report what this host offers: KVM, its backing, capabilities, cores.
    Doctor(doctor::DoctorArgs),
    /// Run a small study end to end and print a summary.
    Demo(demo::DemoArgs),
    /// Boot a kernel in smplab-vmm with a chosen device-synchronization mode.
    Vmm(smplab_vmm::cli::VmmArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let status = match &cli.cmd {
        Cmd::Workloads(a) => workloads::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Demo(a) => demo::run(a),
        Cmd::Vmm(a) => smplab_vmm::cli::run(a),
    };
    ExitCode::from(status.clamp(0, 255) as u8)
}

/// Print an error the way every subcommand does: `smplab: <message>` on stderr.
pub fn report_error(message: impl std::fmt::Display) {
    for line in message.to_string().lines() {
        eprintln!("smplab: {line}");
    }
}
