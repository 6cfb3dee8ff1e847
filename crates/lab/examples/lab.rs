//! The lab's commands without the `smplab` binary, for trying them out while
//! the CLI crate wires them: `cargo run -p smplab-lab --example lab -- demo`.

use clap::{Parser, Subcommand};
use smplab_lab::cli::{CalibrateArgs, DemoArgs, DiagnoseArgs, LabArgs};

#[derive(Debug, Parser)]
#[command(name = "smplab-lab")]
struct Top {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    Lab(LabArgs),
    Diagnose(DiagnoseArgs),
    Calibrate(CalibrateArgs),
    Demo(DemoArgs),
}

fn main() {
    let top = Top::parse();
    let code = match &top.cmd {
        Cmd::Lab(a) => smplab_lab::cli::lab(a),
        Cmd::Diagnose(a) => smplab_lab::cli::diagnose(a),
        Cmd::Calibrate(a) => smplab_lab::cli::calibrate(a),
        Cmd::Demo(a) => smplab_lab::cli::demo(a),
    };
    std::process::exit(code);
}
