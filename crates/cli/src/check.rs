//! `smplab check FILE.toml`: validate without running.

use clap::Args;
use smplab_record::exit;
use smplab_workload::Source;

#[derive(Args)]
pub struct CheckArgs {
    /// Workload file (or a built-in profile name).
    pub file: String,
    /// Thread parameter `n` to instantiate with (default: the file's default_threads).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Scale factor `s` for amounts of work.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
}

pub fn run(args: &CheckArgs) -> i32 {
    let source = match Source::resolve(&args.file) {
        Ok(s) => s,
        Err(e) => {
            smplab_record::exit::report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    if let Err(why) = crate::run::threads_taken(&source, &args.file, args.threads) {
        smplab_record::exit::report_error(why);
        return exit::BAD_INPUT;
    }
    let program = match source.instantiate(args.threads, args.scale) {
        Ok(p) => p,
        Err(e) => {
            smplab_record::exit::report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    println!(
        "{}: ok — workload `{}`, n={}, {} threads in {} group(s)",
        args.file,
        program.name,
        program.n,
        program.total_threads(),
        program.groups.len()
    );
    let counts: Vec<String> = program
        .expected_counts()
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!("  expected ops: {}", counts.join(" "));
    if !program.pools.is_empty() {
        // Drained work is shared at run time: totals above, not per thread.
        let pools: Vec<String> = program
            .pools
            .iter()
            .map(|q| format!("{}={}", q.name, q.units))
            .collect();
        println!(
            "  pools (units shared by the threads that drain them): {}",
            pools.join(" ")
        );
    }
    exit::OK
}
