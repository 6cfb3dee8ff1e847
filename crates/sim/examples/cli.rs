//! `smplab sim` before the smplab CLI wires it in: the same flags, the same
//! output. `cargo run --release -p smplab-sim --example cli -- --workload dedup --threads 16`
use clap::Parser;

#[derive(Parser)]
#[command(name = "smplab sim", about = "Simulate SMP VMs on a modeled host")]
struct Cmd {
    #[command(flatten)]
    sim: smplab_sim::cli::SimArgs,
}

fn main() {
    let cmd = Cmd::parse();
    std::process::exit(smplab_sim::cli::run(&cmd.sim));
}
