//! `smplab claims measure`: re-measure the ledger's host figures here and
//! append what was found (with the date, the host and its load) to a results
//! file, never to the ledger. Figures with an in-process producer are
//! measured; the others are listed with the command that measures them
//! (minutes of runs each: a bench, a calibration, a demo).

use super::ledger::{Claim, Kind, Ledger};
use serde::Serialize;

/// One measured producer: the figure in the claim's unit.
pub struct Measure {
    pub name: &'static str,
    pub what: &'static str,
    pub produce: fn() -> Result<f64, String>,
}

/// Every in-process measurement.
pub static MEASURES: &[Measure] = &[Measure {
    name: "host.port_exit_us",
    what: "a port-I/O exit to smplab-vmm and back from guest CPL0, µs: (wall of 20,000 reads − wall of 2,000) ÷ 18,000, smplab-vmm's port-loop guest, median of 3 pairs",
    produce: port_exit_us,
}];

pub fn find(name: &str) -> Option<&'static Measure> {
    MEASURES.iter().find(|m| m.name == name)
}

fn port_exit_us() -> Result<f64, String> {
    let wall =
        |reads| crate::calibrate::probes::port_loop_wall_ns(reads).map_err(|e| e.to_string());
    let mut per_read = Vec::new();
    for _ in 0..3 {
        let (short, long) = (wall(2_000)?, wall(20_000)?);
        // Differences of wall times below 2^53 ns: exact in an f64.
        #[allow(clippy::cast_precision_loss)]
        per_read.push((long.saturating_sub(short)) as f64 / 18_000.0 / 1e3);
    }
    smplab_stats::median(&per_read).ok_or_else(|| "no samples".to_string())
}

/// One line of the results file.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub date: String,
    pub host: String,
    /// 1-minute load average when the figure was taken.
    pub load: Option<f64>,
    pub claim: String,
    pub command: String,
    pub stated: f64,
    pub tolerance: f64,
    /// None: not measured in-process (`note` says how to).
    pub got: Option<f64>,
    pub within: Option<bool>,
    pub note: String,
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

fn measure_one(c: &Claim) -> Measured {
    let load = load_average();
    let (got, note) = match c.figure.as_ref().and_then(|f| find(f.get_ref())) {
        Some(m) => match (m.produce)() {
            Ok(v) => (Some(v), m.what.to_string()),
            Err(e) => (None, format!("failed: {e}")),
        },
        None => (
            None,
            format!(
                "not measured in-process: run `{}` and read the figure",
                c.command
            ),
        ),
    };
    Measured {
        date: crate::calibrate::today(),
        host: host_name(),
        load,
        claim: c.id().to_string(),
        command: c.command.clone(),
        stated: c.value,
        tolerance: c.tolerance(),
        within: got.map(|g| (g - c.value).abs() <= c.tolerance()),
        got,
        note,
    }
}

/// Measure every measured claim (those with `filter` in their id).
pub fn measure(ledger: &Ledger, filter: Option<&str>) -> Vec<Measured> {
    ledger
        .claims
        .iter()
        .filter(|c| c.kind == Kind::Measured)
        .filter(|c| filter.is_none_or(|f| c.id().contains(f)))
        .map(measure_one)
        .collect()
}
