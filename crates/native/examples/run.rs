//! Run one workload natively and print its record as JSON:
//! `cargo run -p smplab-native --release --example run -- NAME_OR_FILE [N] [SCALE] [PIN,...]`
//! (The `smplab` CLI is the real front end; this is for poking at the executor.)

use smplab_native::{run, NativeOptions};
use smplab_record::WorkloadInfo;
use smplab_workload::Source;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprintln!("usage: run NAME_OR_FILE [N] [SCALE] [CPU,CPU,...]");
        std::process::exit(2);
    };
    let n = args.get(1).and_then(|s| s.parse().ok());
    let scale = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let pin = args
        .get(3)
        .map(|s| s.split(',').filter_map(|c| c.trim().parse().ok()).collect());
    let program = match Source::resolve(name).and_then(|s| s.instantiate(n, scale)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    let info = WorkloadInfo {
        name: program.name.clone(),
        source: name.clone(),
        n: program.n,
        threads: program.total_threads(),
        ..Default::default()
    };
    let opts = NativeOptions {
        pin,
        ..Default::default()
    };
    match run(&program, info, &opts) {
        Ok(rec) => println!("{}", rec.to_json_pretty()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(e.exit_status());
        }
    }
}
