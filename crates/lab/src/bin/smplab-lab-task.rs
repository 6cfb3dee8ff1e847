//! `smplab-lab-task lab ...`: the `smplab lab` subcommands alone. The lab's
//! own tests submit Slurm array tasks that run this binary (an integration test
//! can only name binaries of its own crate); on a cluster the tasks run the
//! full `smplab` binary.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "smplab-lab-task", version)]
struct Top {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Experiment sweeps and reports (as `smplab lab`).
    Lab(smplab_lab::cli::LabArgs),
}

fn main() {
    let top = Top::parse();
    let code = match &top.cmd {
        Cmd::Lab(a) => smplab_lab::cli::lab(a),
    };
    std::process::exit(code);
}
