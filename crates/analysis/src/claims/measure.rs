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
pub static MEASURES: &[Measure] = &[
    Measure {
        name: "host.port_exit_us",
        what: "a port-I/O exit to smplab-vmm and back from guest CPL0, µs: (wall of 20,000 reads − wall of 2,000) ÷ 18,000, smplab-vmm's port-loop guest, median of 3 pairs",
        produce: port_exit_us,
    },
    Measure {
        name: "calibrate.sealed_wall",
        what: "median over 3 whole calibrate-and-check runs (calibration scale 1.0, 3 repetitions, fresh stores under lab-results/claims-sealed/, each after waiting for a quiet host; a run other processes took > 25% of the CPUs in is discarded and run again, at most 3 times) of the calibrated profile's median |wall error| over the sealed held-out set (crates/analysis/src/calibrate/sealed.toml)",
        produce: || sealed_check().map(|e| 100.0 * e.wall),
    },
    Measure {
        name: "calibrate.sealed_slowdown",
        what: "the same check's median slowdown error (points of overhead where the measured ratio < 1.25, else %)",
        produce: || sealed_check().map(|e| 100.0 * e.slowdown),
    },
    Measure {
        name: "calibrate.sealed_exits",
        what: "the same check's median |relative error| of exits/s (counted exits of the workload window)",
        produce: || sealed_optional(|e| e.exits, "exits/s"),
    },
    Measure {
        name: "calibrate.sealed_idle",
        what: "the same check's median |relative error| of the VM's idle fraction",
        produce: || sealed_optional(|e| e.idle, "idle fraction"),
    },
    Measure {
        name: "calibrate.sealed_idle_pp",
        what: "the same check's median |absolute error| of the VM's idle fraction, percentage points",
        produce: || sealed_optional(|e| e.idle_abs, "idle fraction"),
    },
];

/// An error the sealed check has only where its rows have the metric.
fn sealed_optional(
    f: fn(&crate::calibrate::sealed::Errors) -> Option<f64>,
    metric: &str,
) -> Result<f64, String> {
    sealed_check().and_then(|e| {
        f(&e).map(|x| 100.0 * x).ok_or_else(|| {
            format!("no sealed configuration has a measured and a predicted {metric}")
        })
    })
}

/// Scale of the calibrations `claims measure` runs for the sealed check
/// (the held-out and sealed runs use `heldout::SCALE_FACTOR` of it):
/// `smplab calibrate`'s default. At 0.2 (until 2026-11-28) a micro-run
/// lasted 2-10 ms, and the host's millisecond wake-ups made up half of it:
/// the native compute micro-run's 2.3 ms of CPU took 4.6-8.7 ms of wall, its
/// 95% interval over 3 runs was ±160%, and the older (not sealed) held-out
/// set's median wall error was 49-61% in the same session against 4-33% at
/// 1.0 (docs/sim-calibration.md, "Sealed held-out set").
const SEALED_CAL_SCALE: f64 = 1.0;

/// How many whole calibrate-and-check runs the sealed figures are the median of.
const SEALED_RUNS: usize = 3;

/// How many disturbed whole runs may be discarded and run again
/// (`calibrate::quiet`).
const SEALED_RERUNS: usize = 3;

/// One whole calibrate-and-check run in a fresh store under `dir`:
/// calibrate (micro-runs, fit, profile written to `dir/calibrated.toml`),
/// then that profile's predictions of the sealed set against fresh
/// measurements of it. Returns the run's median errors (None when no
/// configuration was both measured and predicted).
fn sealed_run(
    dir: &std::path::Path,
    configs: &[crate::calibrate::sealed::Config],
) -> Result<Option<crate::calibrate::sealed::Errors>, String> {
    use crate::calibrate::{self, heldout, sealed};
    let runner = smplab_experiment::runner::real::RealRunner { qemu_binary: None };
    let reps = smplab_experiment::repetitions::Repetitions::fixed(3);
    // A whole run: nothing carried over from an earlier one.
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut store = smplab_experiment::store::Store::open(&dir.join("results.jsonl"))
        .map_err(|e| e.to_string())?;
    let report = calibrate::measure(&runner, &mut store, SEALED_CAL_SCALE, &reps, false)
        .map_err(|e| e.to_string())?;
    calibrate::write_profile(&report.cal, &dir.join("calibrated.toml"))
        .map_err(|e| e.to_string())?;
    let platform = calibrate::profile(&report.cal).map_err(|e| e.to_string())?;
    let (rows, problems) = sealed::run_check(
        &runner,
        &mut store,
        configs,
        &platform,
        SEALED_CAL_SCALE * heldout::SCALE_FACTOR,
        &reps,
        false,
    )
    .map_err(|e| e.to_string())?;
    if let Some((w, s)) = heldout::medians(&report.heldout) {
        eprintln!(
            "  older held-out set (not sealed): median wall {:.0}%, slowdown {:.0}% over {} points",
            w * 100.0,
            s * 100.0,
            report.heldout.len()
        );
    }
    eprint!("{}", sealed::table(&rows));
    for p in &problems {
        eprintln!("  {p}");
    }
    Ok(sealed::medians(&rows))
}

/// Three whole calibrate-and-check runs ([`sealed_run`]), each after
/// waiting for the other processes to leave the CPUs; a run during which
/// they took more than `quiet::DISTURBED_DURING` of the CPUs is discarded
/// (its figures printed, not counted) and run again, at most
/// [`SEALED_RERUNS`] times in all. The median over the kept runs of each
/// run's median errors. Shared by the claims that read it.
fn sealed_check() -> Result<crate::calibrate::sealed::Errors, String> {
    static DONE: std::sync::OnceLock<Result<crate::calibrate::sealed::Errors, String>> =
        std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        use crate::calibrate::{quiet, sealed};
        use smplab_record::interference::HostCounters;
        let (_, configs) = sealed::load()?;
        let mut runs = Vec::new();
        let mut reruns_left = SEALED_RERUNS;
        let mut attempt = 0;
        while runs.len() < SEALED_RUNS {
            let (before, waited) = quiet::wait_for_quiet(quiet::MAX_WAIT);
            let pct = |x: Option<f64>| x.map_or_else(|| "?".to_string(), |v| format!("{:.0}%", v * 100.0));
            eprintln!(
                "calibrate-and-check run {} of {SEALED_RUNS}, attempt {} (load {:.1}; waited {:.0} s for a quiet host, other processes then {}):",
                runs.len() + 1,
                attempt + 1,
                load_average().unwrap_or(f64::NAN),
                waited.as_secs_f64(),
                pct(before),
            );
            let dir = std::path::PathBuf::from(format!("lab-results/claims-sealed/run-{attempt}"));
            attempt += 1;
            let start = HostCounters::read();
            let errors = sealed_run(&dir, &configs)?;
            let during = start
                .zip(HostCounters::read())
                .and_then(|(a, b)| quiet::others_share(&a, &b));
            let verdict = quiet::verdict(during, reruns_left);
            eprintln!(
                "  other processes used {} of the CPUs during the run (load {:.1}): {}",
                pct(during),
                load_average().unwrap_or(f64::NAN),
                match verdict {
                    quiet::Verdict::Keep => "kept",
                    quiet::Verdict::Rerun => "disturbed: discarded, run again",
                    quiet::Verdict::KeepDisturbed => "disturbed, kept (no rerun left)",
                }
            );
            match verdict {
                quiet::Verdict::Rerun => reruns_left -= 1,
                quiet::Verdict::Keep | quiet::Verdict::KeepDisturbed => {
                    if let Some(m) = errors {
                        runs.push(m);
                    } else {
                        break;
                    }
                }
            }
        }
        sealed::median_over_runs(&runs, SEALED_RUNS)
            .ok_or_else(|| format!("only {} of {SEALED_RUNS} runs measured the sealed set", runs.len()))
    })
    .clone()
}

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
