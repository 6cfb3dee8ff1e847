//! `smplab tune`: Kulkarni & Kulkarni's adaptive tuner (`smplab_policy::tune`) on a
//! workload whose behaviour changes, against the static settings of the
//! Kulkarni & Kulkarni matrix (`specs/seed001-matrix.toml`, docs/lab.md "The Kulkarni & Kulkarni
//! matrix and the tuner").
//!
//! For every seed it simulates each static configuration of the matrix for
//! the workload, and the tuner started from the default configuration (the
//! platform's slice, floating vCPUs, interrupts to vCPU 0). Throughput of a
//! run is Σ over its VMs of 1 / wall time; the tuner's is divided by the best
//! static configuration's (best by median over the seeds) and by the
//! default's of the same seed. Reaction: from a VM's last device completion
//! (the end of the I/O phase of `phases`) to its tuner's next decision.

pub mod winners;

use serde::Serialize;
use smplab_experiment::point::Point;
use smplab_experiment::spec::{ExperimentSpec, SpecError};
use smplab_policy::tune::TunerConfig;
use smplab_record::config::{HostPolicy, IrqAffinity, Placement, RunConfig, SimSettings};
use smplab_record::RunRecord;
use smplab_sim::{Scenario, SimError, TuneLog};
use std::path::Path;

/// The Kulkarni & Kulkarni matrix (simulator, the seed's scale).
pub const MATRIX_SPEC: &str = smplab_experiment::builtin::SEED001_MATRIX;

/// The same matrix at this machine's scale, beside `smplab tune host-matrix`.
pub const MATRIX_HERE_SPEC: &str = smplab_experiment::builtin::SEED001_MATRIX_HERE;

/// Built-in experiment specs, by name: what `smplab lab run NAME` finds
/// when no file of that name exists.
pub const BUILTIN_SPECS: &[(&str, &str)] = smplab_experiment::builtin::SPECS;

/// A spec file, or a built-in spec when `path` names one and no such file exists.
pub fn load_spec(path: &Path) -> Result<ExperimentSpec, SpecError> {
    smplab_experiment::builtin::load(path)
}

/// Why a tuner study could not run.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("the matrix spec has no simulator configuration: `smplab tune` compares the tuner with the spec's static `sim` points")]
    NoSimPoints,
    #[error("the matrix has no default configuration (policy fair, pin none, irq_affinity 0) to start the tuner from")]
    NoDefault,
    #[error("workload {workload}: {reason}")]
    Workload { workload: String, reason: String },
    #[error("simulating {setting}: {source}")]
    Sim { setting: String, source: SimError },
    #[error("a simulation of {setting} produced no records")]
    NoRecords { setting: String },
}

impl TuneError {
    pub fn exit_status(&self) -> i32 {
        use smplab_record::exit;
        match self {
            TuneError::NoRecords { .. } => exit::INTERNAL,
            _ => exit::BAD_INPUT,
        }
    }
}

/// One static configuration's throughput per seed.
#[derive(Debug, Clone, Serialize)]
pub struct StaticResult {
    /// `slice ..., affinity, irq ...`.
    pub setting: String,
    /// Σ over VMs of 1 / wall (1/s), one per seed.
    pub throughput: Vec<f64>,
}

/// One logged decision, as printed.
#[derive(Debug, Clone, Serialize)]
pub struct LoggedDecision {
    pub seed: u64,
    pub vm: u32,
    pub at_ns: u64,
    pub text: String,
}

/// The tuner against the matrix on one workload.
#[derive(Debug, Clone, Serialize)]
pub struct TuneStudy {
    pub workload: String,
    pub seeds: Vec<u64>,
    pub window_ns: u64,
    pub statics: Vec<StaticResult>,
    /// Index in `statics` of the default configuration and of the best one
    /// (highest median throughput over the seeds).
    pub default_index: usize,
    pub best_index: usize,
    /// The tuner's throughput, one per seed.
    pub tuned: Vec<f64>,
    /// Per seed: tuned ÷ best static and tuned ÷ default (same seed).
    pub vs_best: Vec<f64>,
    pub vs_default: Vec<f64>,
    /// Per seed and VM: last device completion to the next decision, ns
    /// (`None`: no I/O, or no decision after it).
    pub reaction_ns: Vec<Option<u64>>,
    pub decisions: Vec<LoggedDecision>,
}

/// Label of a simulator configuration's three parameters.
pub fn setting_label(s: &SimSettings) -> String {
    winners::Setting::of(&RunConfig::Sim(s.clone())).to_string()
}

fn is_default(s: &SimSettings) -> bool {
    s.policy == HostPolicy::default()
        && s.placement == Placement::Float
        && s.irq_affinity == IrqAffinity::default()
}

/// Σ over VMs of 1 / wall time, 1/s.
pub fn throughput(records: &[RunRecord]) -> f64 {
    records
        .iter()
        .filter(|r| r.timing.wall_ns > 0)
        .map(|r| 1e9 / r.timing.wall_ns as f64)
        .sum()
}

/// The static configurations of `spec` (its first workload's repetition-0
/// simulator points; every workload of the matrix has the same ones).
fn static_configs(spec: &ExperimentSpec) -> Result<(Vec<SimSettings>, Point), TuneError> {
    let first = spec
        .points
        .iter()
        .find(|p| matches!(p.config, RunConfig::Sim(_)))
        .ok_or(TuneError::NoSimPoints)?;
    let configs = spec
        .points
        .iter()
        .filter(|p| p.rep == 0 && p.workload == first.workload && p.variant == first.variant)
        .filter_map(|p| match &p.config {
            RunConfig::Sim(s) => Some(s.clone()),
            _ => None,
        })
        .collect();
    Ok((configs, first.clone()))
}

fn scenario_for(
    point: &Point,
    s: &SimSettings,
    seed: u64,
) -> Result<(Scenario, String), TuneError> {
    let label = setting_label(s);
    let (program, info) =
        smplab_experiment::runner::prepare(point).map_err(|e| TuneError::Workload {
            workload: point.workload.clone(),
            reason: e.to_string(),
        })?;
    let mut settings = s.clone();
    settings.seed = seed;
    let sc = smplab_experiment::execute::sim::scenario(&program, &info, &settings).map_err(
        |source| TuneError::Sim {
            setting: label.clone(),
            source,
        },
    )?;
    Ok((sc, label))
}

/// Run the study: `workload` under every static configuration of `spec` and
/// under the tuner, for each seed.
pub fn study(
    spec: &ExperimentSpec,
    workload: &str,
    seeds: &[u64],
    tuner: &TunerConfig,
) -> Result<TuneStudy, TuneError> {
    let (configs, mut point) = static_configs(spec)?;
    point.workload = workload.to_string();
    let default_index = configs
        .iter()
        .position(is_default)
        .ok_or(TuneError::NoDefault)?;
    let mut statics: Vec<StaticResult> = configs
        .iter()
        .map(|c| StaticResult {
            setting: setting_label(c),
            throughput: Vec::new(),
        })
        .collect();
    let mut tuned = Vec::new();
    let mut reaction_ns = Vec::new();
    let mut decisions = Vec::new();
    for &seed in seeds {
        let mut scenarios = Vec::with_capacity(configs.len());
        for c in &configs {
            scenarios.push(scenario_for(&point, c, seed)?);
        }
        let plain: Vec<Scenario> = scenarios.iter().map(|(s, _)| s.clone()).collect();
        let results = smplab_sim::sweep(&plain, false);
        for ((r, (_, label)), st) in results.into_iter().zip(&scenarios).zip(&mut statics) {
            let records = r.map_err(|source| TuneError::Sim {
                setting: label.clone(),
                source,
            })?;
            st.throughput.push(throughput(&records));
        }
        let (sc, label) = scenario_for(&point, &configs[default_index], seed)?;
        let (records, log) =
            smplab_sim::simulate_tuned(&sc, tuner).map_err(|source| TuneError::Sim {
                setting: format!("the tuner from {label}"),
                source,
            })?;
        if records.is_empty() {
            return Err(TuneError::NoRecords { setting: label });
        }
        tuned.push(throughput(&records));
        reaction_ns.extend(reactions(&log));
        decisions.extend(log.decisions.iter().map(|d| LoggedDecision {
            seed,
            vm: d.vm,
            at_ns: d.decision.at_ns,
            text: d.decision.to_string(),
        }));
    }
    let best_index = (0..statics.len())
        .max_by(|&a, &b| {
            median_or_nan(&statics[a].throughput).total_cmp(&median_or_nan(&statics[b].throughput))
        })
        .unwrap_or(default_index);
    let ratio = |i: usize| -> Vec<f64> {
        tuned
            .iter()
            .zip(&statics[i].throughput)
            .map(|(t, s)| t / s)
            .collect()
    };
    Ok(TuneStudy {
        workload: workload.to_string(),
        seeds: seeds.to_vec(),
        window_ns: tuner.window_ns,
        vs_best: ratio(best_index),
        vs_default: ratio(default_index),
        statics,
        default_index,
        best_index,
        tuned,
        reaction_ns,
        decisions,
    })
}

/// Per VM: its last device completion to its next decision.
fn reactions(log: &TuneLog) -> Vec<Option<u64>> {
    log.last_io_ns
        .iter()
        .enumerate()
        .map(|(vm, last)| {
            let last = (*last)?;
            log.decisions
                .iter()
                .find(|d| d.vm as usize == vm && d.decision.at_ns >= last)
                .map(|d| d.decision.at_ns - last)
        })
        .collect()
}

/// The median of `xs` (`smplab_stats::median`; NaN when empty, so an empty
/// cell sorts last and prints as NaN).
pub fn median_or_nan(xs: &[f64]) -> f64 {
    smplab_stats::median(xs).unwrap_or(f64::NAN)
}

/// `median [min..max]` of `xs`; `value (all N equal)` where the runs do
/// not vary (the seeds move only the simulator's slice jitter, which a run
/// that is never preempted does not feel), so an interval is printed only
/// where there is one.
pub fn spread(xs: &[f64], digits: usize) -> String {
    if xs.is_empty() {
        return "-".into();
    }
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if lo == hi {
        return match xs.len() {
            1 => format!("{lo:.digits$}"),
            n => format!("{lo:.digits$} (all {n} equal)"),
        };
    }
    format!(
        "{:.digits$} [{lo:.digits$}..{hi:.digits$}]",
        median_or_nan(xs)
    )
}

impl TuneStudy {
    /// The human summary `smplab tune` prints.
    pub fn summary(&self, all_decisions: bool) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}: the tuner (window {} us) vs {} static settings of the Kulkarni & Kulkarni matrix, seeds {:?}",
            self.workload,
            self.window_ns / 1000,
            self.statics.len(),
            self.seeds
        );
        let _ = writeln!(out, "throughput (VM runs/s, median [min..max] over seeds):");
        let mut order: Vec<usize> = (0..self.statics.len()).collect();
        order.sort_by(|&a, &b| {
            median_or_nan(&self.statics[b].throughput)
                .total_cmp(&median_or_nan(&self.statics[a].throughput))
        });
        let _ = writeln!(out, "  {:<44} {}", "tuner", spread(&self.tuned, 1));
        for i in order {
            let tag = match (i == self.best_index, i == self.default_index) {
                (true, true) => " (best, default)",
                (true, false) => " (best)",
                (false, true) => " (default)",
                _ => "",
            };
            let _ = writeln!(
                out,
                "  {:<44} {}{tag}",
                self.statics[i].setting,
                spread(&self.statics[i].throughput, 1)
            );
        }
        let _ = writeln!(
            out,
            "tuner / best static ({}): {} (goal >= 0.95)",
            self.statics[self.best_index].setting,
            spread(&self.vs_best, 3)
        );
        let _ = writeln!(
            out,
            "tuner / default ({}): {} (goal >= 1.2)",
            self.statics[self.default_index].setting,
            spread(&self.vs_default, 3)
        );
        let reacted: Vec<f64> = self
            .reaction_ns
            .iter()
            .flatten()
            .map(|&ns| ns as f64 / 1e6)
            .collect();
        let _ = writeln!(
            out,
            "reaction to the phase change (last device completion to the next decision, ms): {} over {} of {} VM runs",
            spread(&reacted, 2),
            reacted.len(),
            self.reaction_ns.len()
        );
        let first = self.seeds.first().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "decisions{}:",
            if all_decisions {
                String::new()
            } else {
                format!(" (seed {first}; --log-all for every seed)")
            }
        );
        for d in self
            .decisions
            .iter()
            .filter(|d| all_decisions || d.seed == first)
        {
            let _ = writeln!(out, "  seed {} vm {}: {}", d.seed, d.vm, d.text);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_only_where_runs_vary() {
        assert_eq!(spread(&[1.0, 2.0, 3.0], 1), "2.0 [1.0..3.0]");
        assert_eq!(spread(&[2.0, 2.0], 1), "2.0 (all 2 equal)");
        assert_eq!(spread(&[2.0], 2), "2.00");
        assert_eq!(spread(&[], 2), "-");
    }

    #[test]
    fn the_matrix_spec_parses_and_sweeps_the_three_parameters() {
        let spec = load_spec(Path::new("seed001-matrix")).unwrap();
        let (configs, _) = static_configs(&spec).unwrap();
        // 3 slices x 2 affinities x 4 interrupt routings.
        assert_eq!(configs.len(), 24);
        assert_eq!(configs.iter().filter(|c| is_default(c)).count(), 1);
        for c in &configs {
            assert_eq!((c.vcpus, c.vms), (8, 2), "overcommit 2 at the seed's scale");
        }
        let workloads: std::collections::BTreeSet<&str> =
            spec.points.iter().map(|p| p.workload.as_str()).collect();
        for w in ["streamcluster", "dedup", "oltp", "phases"] {
            assert!(workloads.contains(w), "{w} missing");
        }
    }

    #[test]
    fn every_built_in_spec_parses() {
        for (name, _) in BUILTIN_SPECS {
            let spec = load_spec(Path::new(name)).unwrap();
            assert_eq!(&spec.name, name);
            assert!(!spec.points.is_empty());
        }
        let e = load_spec(Path::new("seed001-nosuch")).unwrap_err();
        assert!(e.to_string().contains("seed001-nosuch"), "{e}");
    }

    #[test]
    fn the_matrix_runs_at_a_tiny_size() {
        use smplab_experiment::runner::Runner as _;
        let text = MATRIX_SPEC
            .replace("scale = 1.0", "scale = 0.02")
            .replace("repetitions = 3", "repetitions = 1");
        let spec = ExperimentSpec::from_text("tiny", &text).unwrap();
        assert_eq!(spec.points.len(), 4 * 24);
        let runner = smplab_experiment::runner::real::RealRunner { qemu_binary: None };
        for p in &spec.points {
            let records = runner
                .run(p)
                .unwrap_or_else(|e| panic!("{}: {e}", p.label()));
            assert_eq!(records.len(), 2, "{}", p.label());
            assert!(throughput(&records) > 0.0, "{}", p.label());
        }
    }

    #[test]
    fn the_tuner_study_runs_at_a_tiny_size() {
        let text = MATRIX_SPEC.replace("scale = 1.0", "scale = 0.05");
        let spec = ExperimentSpec::from_text("tiny", &text).unwrap();
        let study = study(&spec, "phases", &[1], &TunerConfig::default()).unwrap();
        assert_eq!(study.statics.len(), 24);
        assert!(study.statics.iter().all(|s| s.throughput[0] > 0.0));
        assert!(study.tuned[0] > 0.0);
        // The best is at least as good as the default, by construction.
        let med = |i: usize| study.statics[i].throughput[0];
        assert!(med(study.best_index) >= med(study.default_index));
        assert!(study.summary(true).contains("tuner / best static"));
    }
}
