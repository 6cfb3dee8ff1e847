//! The `smplab tune` command: the adaptive tuner against the Kulkarni & Kulkarni
//! matrix (`tune.rs`), the matrix's winners from results stores (`tune
//! winners`) and the matrix on the real multi-VM host (`tune host-matrix`,
//! `tune/host_matrix.rs`).

use clap::{Args, Subcommand};
use smplab_analysis::tune::winners::{cells, winners_table, Cell};
use smplab_analysis::tune::{load_spec, TuneStudy};
use smplab_experiment::store::Store;
use smplab_policy::tune::TunerConfig;
use smplab_record::config::parse_duration;
use smplab_record::exit::{self, report_error};
use smplab_record::outln;
use std::path::PathBuf;
use std::time::Duration;

/// `smplab tune ...`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub command: Option<TuneCommand>,
    #[command(flatten)]
    pub run: TuneRunArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum TuneCommand {
    /// Which setting of the matrix wins for which workload, from results
    /// stores of `smplab lab run seed001-matrix` (and of `tune host-matrix`).
    Winners(WinnersArgs),
    /// The Kulkarni & Kulkarni matrix on the real multi-VM host at this machine's scale.
    HostMatrix(crate::tune::host_matrix::HostMatrixArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TuneRunArgs {
    /// Where the tuner is compared with the matrix: the simulator (on the
    /// real host it runs inside `smplab host` with `tune = true`, and as a
    /// row of `tune host-matrix`).
    #[arg(long, default_value = "sim", value_parser = ["sim"])]
    pub executor: String,
    /// Built-in profile name or workload file; `phases` changes behaviour
    /// mid-run.
    #[arg(long, default_value = "phases")]
    pub workload: String,
    /// The matrix whose static settings the tuner is compared with: a spec
    /// file or a built-in spec name.
    #[arg(long, default_value = "seed001-matrix")]
    pub spec: PathBuf,
    /// Seeds: 1..=N.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub seeds: u64,
    /// The tuner's window (e.g. 1ms, 500us; at least 10us).
    #[arg(long, default_value = "1ms", value_parser = parse_window)]
    pub window: Duration,
    /// Print every seed's decisions (default: the first seed's).
    #[arg(long)]
    pub log_all: bool,
    /// Write the study (with every decision) as JSON to this file.
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct WinnersArgs {
    /// Results stores (results.jsonl files or directories holding one);
    /// repeat `--store` for several.
    #[arg(long)]
    pub store: Vec<PathBuf>,
    /// Cells of `smplab tune host-matrix -o FILE`, shown beside the stores'.
    #[arg(long)]
    pub host: Vec<PathBuf>,
}

pub fn tune(args: &TuneArgs) -> i32 {
    match &args.command {
        Some(TuneCommand::Winners(a)) => winners(a),
        Some(TuneCommand::HostMatrix(a)) => crate::tune::host_matrix::host_matrix(a),
        None => tune_run(&args.run),
    }
}

/// A tuner window: a duration of at least 10 us.
fn parse_window(s: &str) -> Result<Duration, String> {
    match parse_duration(s) {
        Ok(ns) if ns >= 10_000 => Ok(Duration::from_nanos(ns)),
        Ok(_) => Err("shorter than 10us: such windows see too few events to judge".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn tune_run(a: &TuneRunArgs) -> i32 {
    // At most 10^15 ns (`parse_duration`'s bound): it fits.
    let window_ns = u64::try_from(a.window.as_nanos()).unwrap_or(u64::MAX);
    let spec = match load_spec(&a.spec) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let config = TunerConfig {
        window_ns,
        ..TunerConfig::default()
    };
    let seeds: Vec<u64> = (1..=a.seeds).collect();
    let study: TuneStudy = match smplab_analysis::tune::study(&spec, &a.workload, &seeds, &config) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return e.exit_status();
        }
    };
    outln!("{}", study.summary(a.log_all));
    if let Some(path) = &a.output {
        let text = match serde_json::to_string_pretty(&study) {
            Ok(t) => t,
            Err(e) => {
                report_error(format!("cannot encode the study: {e}"));
                return exit::INTERNAL;
            }
        };
        if let Err(e) = std::fs::write(path, text) {
            report_error(format!("cannot write {}: {e}", path.display()));
            return exit::RUN_FAILED;
        }
    }
    exit::OK
}

fn winners(a: &WinnersArgs) -> i32 {
    let mut stores = Vec::new();
    for p in &a.store {
        let file = if p.is_dir() {
            p.join("results.jsonl")
        } else {
            p.clone()
        };
        match Store::read(&file) {
            Ok(s) => stores.push(s),
            Err(e) => {
                report_error(&e);
                return exit::BAD_INPUT;
            }
        }
    }
    let mut cells = cells(&stores);
    for p in &a.host {
        let parsed = std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<Vec<Cell>>(&t).map_err(|e| e.to_string()));
        match parsed {
            Ok(c) => cells.extend(c),
            Err(e) => {
                report_error(format!("{}: {e}", p.display()));
                return exit::BAD_INPUT;
            }
        }
    }
    if cells.is_empty() {
        report_error(
            "no finished runs in these stores: run `smplab lab run seed001-matrix` (or `smplab tune host-matrix`) first, then give --store",
        );
        return exit::BAD_INPUT;
    }
    outln!("{}", winners_table(&cells));
    exit::OK
}

pub mod host_matrix;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        tune: TuneArgs,
    }

    #[test]
    fn flags_are_typed_and_in_the_vocabulary() {
        let c = Cmd::try_parse_from(["tune", "--window", "500us", "-o", "s.json"]).expect("parses");
        assert_eq!(c.tune.run.window, Duration::from_micros(500));
        assert_eq!(c.tune.run.output, Some(PathBuf::from("s.json")));
        assert!(Cmd::try_parse_from(["tune", "--window", "5us"]).is_err());
        assert!(Cmd::try_parse_from(["tune", "--out", "s.json"]).is_err());
        let w = Cmd::try_parse_from(["tune", "winners", "--store", "a", "--store", "b"])
            .expect("parses");
        let Some(TuneCommand::Winners(w)) = w.tune.command else {
            panic!("not winners")
        };
        assert_eq!(w.store, vec![PathBuf::from("a"), PathBuf::from("b")]);
    }
}
