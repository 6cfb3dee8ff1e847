//! The `smplab` command: every subcommand's arguments (clap lives here and
//! nowhere else in the workspace: library crates take typed arguments) and
//! its output. Holds no measurement logic: each command calls into the crate
//! that owns the work (experiment, analysis, report, vmm, sim, trace).
//! Exit statuses: `smplab_record::exit` (documented in README.md).

pub mod bench;
pub mod check;
pub mod claims;
pub mod demo;
pub mod doctor;
pub mod host;
pub mod lab;
pub mod run;
pub mod sim;
pub mod trace;
pub mod tune;
pub mod vmm;
pub mod workloads;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "smplab",
    version,
    about = "A laboratory for virtual-SMP performance: run one multi-threaded workload natively, in a KVM VM and in a simulator, and explain the difference.",
    after_help = "Start with `smplab doctor` (what works on this host) and `smplab workloads`."
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// List the built-in workload profiles, or show one as TOML.
    Workloads(workloads::WorkloadsArgs),
    /// Validate a workload file (errors as file:line:col).
    Check(check::CheckArgs),
    /// Run a workload on one executor and print its result record.
    Run(run::RunArgs),
    /// Report what this host offers: KVM, its backing, capabilities, cores.
    Doctor(doctor::DoctorArgs),
    /// Boot a kernel in smplab-vmm with a chosen device-synchronization mode.
    Vmm(vmm::VmmArgs),
    /// Simulate SMP VMs on a shared or overcommitted host.
    Sim(sim::SimArgs),
    /// Experiments: run a sweep spec, report on stored results.
    Lab(lab::LabArgs),
    /// Attribute a workload's virtualization slowdown to factors, one removed at a time.
    Diagnose(lab::DiagnoseArgs),
    /// Measure this host's VM costs and write a simulator platform profile.
    Calibrate(lab::CalibrateArgs),
    /// The main job: a small study across executors, a diagnosis and a report.
    Demo(lab::DemoArgs),
    /// Several VMs in one smplab-vmm under a user-level vCPU scheduler (docs/host.md).
    Host(host::HostArgs),
    /// Seed 001's adaptive tuner against the static settings of its matrix.
    Tune(lab::TuneArgs),
    /// The claims ledger (docs/claims.toml): every figure the docs state,
    /// recomputed (`check`), re-measured (`measure`), rendered into the docs.
    Claims(claims::ClaimsArgs),
    /// Trace a real pthreads program; `trace model` turns the trace into a workload.
    Trace(trace::TraceArgs),
    /// Benchmarks on real workloads (`bench irqchip`: user-space vs in-kernel
    /// interrupt controllers under the four sync modes).
    #[command(subcommand)]
    Bench(bench::irqchip::BenchCmd),
}

/// Run the command `cli` describes; the process exit status
/// (`smplab_record::exit`).
pub fn run_command(cli: &Cli) -> i32 {
    match &cli.cmd {
        Cmd::Workloads(a) => workloads::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Run(a) => run::run(a),
        Cmd::Doctor(a) => doctor::run(a),
        Cmd::Vmm(a) => vmm::run(a),
        Cmd::Sim(a) => sim::run(a),
        Cmd::Lab(a) => lab::lab(a),
        Cmd::Diagnose(a) => lab::diagnose(a),
        Cmd::Calibrate(a) => lab::calibrate(a),
        Cmd::Demo(a) => lab::demo(a),
        Cmd::Trace(a) => trace::run(a),
        Cmd::Claims(a) => claims::run(a),
        Cmd::Host(a) => host::run(a),
        Cmd::Tune(a) => lab::tune(a),
        Cmd::Bench(a) => bench::irqchip::bench(a),
    }
}
