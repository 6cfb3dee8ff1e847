//! The `smplab tune` command: the adaptive tuner against the seed 001
//! matrix (`tune.rs`), the matrix's winners from results stores (`tune
//! winners`) and the matrix on the real multi-VM host (`tune host-matrix`,
//! `tune_host.rs`).

use smplab_record::{outln};
use smplab_experiment::store::Store;
use smplab_analysis::tune::{load_spec, median, spread, throughput, TuneStudy};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use smplab_policy::tune::TunerConfig;
use smplab_record::config::{parse_duration, RunConfig};
use smplab_record::exit::{self, report_error};
use std::collections::BTreeMap;
use std::path::PathBuf;

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
    /// The seed 001 matrix on the real multi-VM host at this machine's scale.
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
    /// The tuner's window (e.g. 1ms, 500us).
    #[arg(long, default_value = "1ms")]
    pub window: String,
    /// Print every seed's decisions (default: the first seed's).
    #[arg(long)]
    pub log_all: bool,
    /// Write the study (with every decision) as JSON to this file.
    #[arg(short = 'o', long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct WinnersArgs {
    /// Results stores (results.jsonl files or directories holding one).
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

fn tune_run(a: &TuneRunArgs) -> i32 {
    let window_ns = match parse_duration(&a.window) {
        Ok(ns) if ns >= 10_000 => ns,
        Ok(_) => {
            report_error(
                "--window must be at least 10us: shorter windows see too few events to judge",
            );
            return exit::BAD_INPUT;
        }
        Err(e) => {
            report_error(format!("--window: {e}"));
            return exit::BAD_INPUT;
        }
    };
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
    if let Some(path) = &a.out {
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

/// One configuration of a stored matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub executor: String,
    pub workload: String,
    pub setting: String,
    pub throughput: Vec<f64>,
}

/// The three parameters of a stored run configuration.
pub fn config_setting(c: &RunConfig) -> String {
    match c {
        RunConfig::Sim(s) => smplab_analysis::tune::setting_label(s),
        other => other.to_string(),
    }
}

/// Group a store's finished runs by executor, workload and setting.
pub fn cells(stores: &[Store]) -> Vec<Cell> {
    let mut map: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for store in stores {
        for e in store.latest().into_iter().filter(|e| e.is_ok()) {
            let key = (
                e.point.config.executor().to_string(),
                e.point.workload.clone(),
                config_setting(&e.point.config),
            );
            map.entry(key).or_default().push(throughput(&e.records));
        }
    }
    map.into_iter()
        .map(|((executor, workload, setting), throughput)| Cell {
            executor,
            workload,
            setting,
            throughput,
        })
        .collect()
}

/// The default setting of each executor's matrix: the simulator's platform
/// slice with floating vCPUs, and `smplab host`'s stock `linux` pinning;
/// interrupts to vCPU 0.
pub const DEFAULT_SETTINGS: &[&str] = &[
    "slice default, floating, irq 0",
    "slice linux, pinned, irq 0",
];

/// Settings within this fraction of the winner's median count as tied.
const TIE: f64 = 0.01;

/// The winners table: per executor and workload, the best setting, the
/// runner-up, the default and the worst, by median throughput.
pub fn winners_table(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    let mut groups: BTreeMap<(&str, &str), Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        groups
            .entry((c.workload.as_str(), c.executor.as_str()))
            .or_default()
            .push(c);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:<5} {:<46} {:>9} {:>9}",
        "workload", "exec", "setting (winner first)", "runs/s", "vs dflt"
    );
    for ((workload, executor), mut list) in groups {
        list.sort_by(|a, b| median(&b.throughput).total_cmp(&median(&a.throughput)));
        let default = list
            .iter()
            .find(|c| DEFAULT_SETTINGS.contains(&c.setting.as_str()))
            .map(|c| median(&c.throughput));
        let best = list.first().map_or(f64::NAN, |c| median(&c.throughput));
        let ties = list
            .iter()
            .filter(|c| median(&c.throughput) >= best * (1.0 - TIE))
            .count();
        let mut shown: Vec<(&str, &Cell)> = Vec::new();
        if let Some(first) = list.first() {
            shown.push(("win", first));
        }
        if let Some(second) = list.get(1) {
            shown.push(("2nd", second));
        }
        if let Some(last) = list.last().filter(|_| list.len() > 2) {
            shown.push(("worst", last));
        }
        for (tag, c) in shown {
            let m = median(&c.throughput);
            let rel = default.map_or("-".to_string(), |d| format!("{:.2}x", m / d));
            let _ = writeln!(
                out,
                "{workload:<14} {executor:<5} {:<46} {:>9.1} {rel:>9}",
                format!("{tag}: {}", c.setting),
                m
            );
        }
        let _ = writeln!(
            out,
            "{:<20} {} settings, {ties} within {:.0}% of the winner; winner's runs/s median [min..max] {}",
            "",
            list.len(),
            TIE * 100.0,
            list.first().map_or("-".into(), |c| spread(&c.throughput, 2))
        );
    }
    out
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
        report_error("no finished runs in these stores: run `smplab lab run seed001-matrix` first");
        return exit::BAD_INPUT;
    }
    outln!("{}", winners_table(&cells));
    exit::OK
}

pub mod host_matrix;
