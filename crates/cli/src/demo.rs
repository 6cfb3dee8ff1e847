//! `smplab demo` (foundation version): every built-in profile natively, one
//! summary table. The lab replaces it with the full cross-executor study.

use clap::Args;
use smplab_record::{exit, summary::fmt_ns};
use smplab_workload::builtin;

#[derive(Args)]
pub struct DemoArgs {
    /// Thread parameter for every profile.
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Scale factor for amounts of work.
    #[arg(long, default_value_t = 0.5)]
    pub scale: f64,
}

pub fn run(args: &DemoArgs) -> i32 {
    println!(
        "smplab demo: every built-in profile on native host threads (n={}, scale {})\n",
        args.threads, args.scale
    );
    println!(
        "{:<14} {:>7} {:>10} {:>10} {:>12} {:>8} {:>8} {:>8}",
        "workload", "threads", "wall", "cpu", "spin iters", "blocks", "wakeups", "ctxsw"
    );
    let mut status = exit::OK;
    for name in builtin::names() {
        let (program, info) = match crate::run::load_program(name, Some(args.threads), args.scale) {
            Ok(x) => x,
            Err(s) => return s,
        };
        match smplab_native::run(&program, info, &Default::default()) {
            Ok(r) => {
                let c = &r.counters;
                let cpu: u64 = r.timing.threads.iter().map(|t| t.cpu_ns).sum();
                println!(
                    "{:<14} {:>7} {:>10} {:>10} {:>12} {:>8} {:>8} {:>8}",
                    name,
                    r.workload.threads,
                    fmt_ns(r.timing.wall_ns),
                    fmt_ns(cpu),
                    c.spin_iterations,
                    c.blocks,
                    c.wakeups,
                    c.context_switches_voluntary + c.context_switches_involuntary
                );
            }
            Err(e) => {
                println!("{name:<14} failed: {e}");
                status = exit::PARTIAL;
            }
        }
    }
    status
}
