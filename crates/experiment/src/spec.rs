//! Experiment specs: a TOML file naming a matrix over executors × workloads ×
//! parameters, expanded into [`Point`]s. The format is documented in
//! docs/lab.md. Every error names file:line:col, like workload files do.
//!
//! This module owns the file format, the spec-wide settings (name,
//! repetitions, timeout, platforms) and the order of the expanded points;
//! `axes` parses the matrix's axes and `configs` turns them into validated
//! configurations.

use crate::point::Point;
use crate::repetitions::{Repetitions, DEFAULT_MAX_REPETITIONS};
use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_record::diag::{Diagnostics, SourceText};
use smplab_record::Executor;
use std::path::Path;

mod axes;
mod configs;
mod programs;

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{path}: cannot read experiment spec: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// One or more located problems, sorted, one per line.
    #[error(transparent)]
    Invalid(#[from] Diagnostics),
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    repetitions: Option<Spanned<toml::Value>>,
    max_repetitions: Option<Spanned<i64>>,
    timeout_s: Option<Spanned<i64>>,
    matrix: Spanned<MatrixFile>,
}

/// Every axis takes one value or an array of values.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatrixFile {
    executor: Spanned<toml::Value>,
    /// Workload models (required unless `program` is given).
    workload: Option<Spanned<toml::Value>>,
    /// Real programs' argvs (`linux`, `linux-qemu`, `native`).
    program: Option<Spanned<toml::Value>>,
    /// The Linux guest's kernel (an axis of paths); absent: `SMPLAB_LINUX_KERNEL`.
    kernel: Option<Spanned<toml::Value>>,
    /// A ready initramfs instead of one built from the program.
    initrd: Option<Spanned<toml::Value>>,
    /// Files put into the built initramfs (one list, not an axis).
    include: Option<Spanned<toml::Value>>,
    /// `linux-qemu`'s machine: microvm | q35.
    machine: Option<Spanned<toml::Value>>,
    threads: Option<Spanned<toml::Value>>,
    vcpus: Option<Spanned<toml::Value>>,
    vms: Option<Spanned<toml::Value>>,
    sync: Option<Spanned<toml::Value>>,
    irqchip: Option<Spanned<toml::Value>>,
    idle: Option<Spanned<toml::Value>>,
    pin: Option<Spanned<toml::Value>>,
    platform: Option<Spanned<toml::Value>>,
    variant: Option<Spanned<toml::Value>>,
    ple: Option<Spanned<toml::Value>>,
    apicv: Option<Spanned<toml::Value>>,
    sdb: Option<Spanned<toml::Value>>,
    policy: Option<Spanned<toml::Value>>,
    /// `vm` only: run the `vms` VMs in one smplab-vmm process under this
    /// host vCPU policy (`VmSettings::host_policy`); absent, independent VMs.
    host_policy: Option<Spanned<toml::Value>>,
    /// Busy host threads spinning beside each run (`Point::busy_host_threads`).
    busy_host_threads: Option<Spanned<toml::Value>>,
    scale: Option<Spanned<toml::Value>>,
    irq_affinity: Option<Spanned<toml::Value>>,
    io_thread_cpus: Option<Spanned<toml::Value>>,
}

/// An expanded, validated experiment.
#[derive(Debug, Clone)]
pub struct ExperimentSpec {
    pub name: String,
    pub description: String,
    /// `repetitions = N` (fixed) or `"auto"` (adaptive, up to
    /// `max_repetitions`): what `sweep::run_repeated` is given.
    pub repetitions: Repetitions,
    pub timeout_s: u64,
    /// Every point in run order, `repetitions.min` repetitions each (all of
    /// them for a fixed count; an adaptive sweep repeats further as it goes).
    /// Repetitions of one configuration are spread out so a slow drift of the
    /// host does not land on one configuration only. Slurm submission runs
    /// exactly these: it cannot adapt.
    pub points: Vec<Point>,
}

pub const DEFAULT_SCALE: f64 = 0.1;
pub const DEFAULT_REPETITIONS: u32 = 3;
/// A point's time limit when the spec gives none: the one default.
pub const DEFAULT_TIMEOUT_S: u64 = smplab_record::config::DEFAULT_TIMEOUT.duration().as_secs();
/// vCPUs of a point whose spec gives none.
pub const DEFAULT_VCPUS: u32 = 2;

impl ExperimentSpec {
    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::from_text(&shown, &text)
    }

    /// Parse and expand spec text; `file` is used only in messages.
    pub fn from_text(file: &str, text: &str) -> Result<Self, SpecError> {
        let loc = SourceText::new(file, text);
        let raw: SpecFile = toml::from_str(text)
            .map_err(|e| Diagnostics::from(loc.parse_error(e.span(), e.message())))?;
        let mut diags = Diagnostics::default();
        let spec = expand(&loc, &raw, &mut diags);
        Ok(diags.into_result(spec)?)
    }
}

fn expand(loc: &SourceText, raw: &SpecFile, diags: &mut Diagnostics) -> ExperimentSpec {
    let m = raw.matrix.get_ref();
    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty() || name.contains(['/', '\\']) {
        diags.push(loc.span(
            raw.name.span(),
            "`name` must be non-empty and contain no path separator (it names the results store)",
        ));
    }
    let repetitions = repetitions(loc, raw, diags);
    let timeout_s = match &raw.timeout_s {
        None => DEFAULT_TIMEOUT_S,
        Some(t) => match u64::try_from(*t.get_ref()) {
            Ok(n) if (1..=86_400).contains(&n) => n,
            _ => {
                diags.push(loc.span(t.span(), "`timeout_s` must be between 1 and 86400 seconds"));
                DEFAULT_TIMEOUT_S
            }
        },
    };
    let ax = axes::parse_axes(loc, m, diags);
    if ax.executors.contains(&Executor::Sim) {
        check_platforms(loc, raw, &ax.platform, diags);
    }
    let pa = programs::parse(loc, m, diags);
    check_something_to_run(loc, raw, &ax, diags);
    // Configurations first, then repetitions round-robin over them.
    let (mut configs, mut problems) = configs::matrix_configs(&ax, &raw.matrix, timeout_s);
    let (program_configs, program_problems) =
        programs::program_configs(&ax, &pa, &raw.matrix, timeout_s);
    configs.extend(program_configs);
    problems.extend(program_problems);
    for (start, msg) in problems {
        diags.push(loc.at(start, msg));
    }
    let mut points = Vec::with_capacity(configs.len() * repetitions.min as usize);
    for rep in 0..repetitions.min {
        for c in &configs {
            let mut p = c.clone();
            p.rep = rep;
            points.push(p);
        }
    }
    ExperimentSpec {
        name,
        description: raw.description.clone(),
        repetitions,
        timeout_s,
        points,
    }
}

/// Every executor of the matrix must have something it runs: workload
/// models (`vm`, `qemu`, `sim`, `native`) or real programs (`linux`,
/// `linux-qemu`, `native`).
fn check_something_to_run(
    loc: &SourceText,
    raw: &SpecFile,
    ax: &axes::Axes,
    diags: &mut Diagnostics,
) {
    let m = raw.matrix.get_ref();
    if m.workload.is_none() && m.program.is_none() {
        diags.push(loc.span(
            raw.matrix.span(),
            "give `workload` (workload models) or `program` (real programs), or both",
        ));
        return;
    }
    for &e in &ax.executors {
        let c = smplab_record::config::RunConfig::defaults(
            e,
            1,
            smplab_record::config::DEFAULT_PLATFORM,
        );
        if !c.runs_models() && m.program.is_none() {
            diags.push(loc.span(
                m.executor.span(),
                format!(
                    "`{e}` runs real programs: give `program = [\"pigz\", \"-p\", \"2\", ...]`"
                ),
            ));
        }
        if !c.runs_real_programs() && m.workload.is_none() {
            diags.push(loc.span(
                m.executor.span(),
                format!("`{e}` runs workload models, not real programs: give `workload` (or trace the program: smplab trace, then smplab trace model)"),
            ));
        }
    }
}

/// Every simulator platform of the matrix must resolve to a profile.
fn check_platforms(
    loc: &SourceText,
    raw: &SpecFile,
    platforms: &[String],
    diags: &mut Diagnostics,
) {
    let m = raw.matrix.get_ref();
    for p in platforms {
        if let Err(e) = smplab_sim::Platform::resolve(p) {
            let span = m.platform.as_ref().map_or(raw.matrix.span(), |v| v.span());
            let mut msg = e.to_string().replace('\n', "; ");
            if !std::path::Path::new(p).exists() {
                msg.push_str(" (a calibrated profile is written by `smplab calibrate`)");
            }
            diags.push(loc.span(span, format!("`platform`: {msg}")));
        }
    }
}

/// Most repetitions a spec may ask for, fixed or as a maximum.
pub const MAX_REPETITIONS: i64 = 1000;

/// `repetitions = N` (exactly N) or `repetitions = "auto"` with an optional
/// `max_repetitions = M` (at least 6, until the 95% interval of the median
/// wall time is within ±5%, at most M).
fn repetitions(loc: &SourceText, raw: &SpecFile, diags: &mut Diagnostics) -> Repetitions {
    let max = match &raw.max_repetitions {
        None => DEFAULT_MAX_REPETITIONS,
        Some(m) => match u32::try_from(*m.get_ref()) {
            Ok(n) if (1..=MAX_REPETITIONS).contains(&i64::from(n)) => n,
            _ => {
                diags.push(loc.span(
                    m.span(),
                    format!("`max_repetitions` must be between 1 and {MAX_REPETITIONS}"),
                ));
                DEFAULT_MAX_REPETITIONS
            }
        },
    };
    let Some(r) = &raw.repetitions else {
        if let Some(m) = &raw.max_repetitions {
            diags.push(loc.span(
                m.span(),
                "`max_repetitions` applies only with `repetitions = \"auto\"`",
            ));
        }
        return Repetitions::fixed(DEFAULT_REPETITIONS);
    };
    match r.get_ref() {
        toml::Value::String(s) if s == "auto" => Repetitions::adaptive(max),
        toml::Value::Integer(n) if (1..=MAX_REPETITIONS).contains(n) => {
            if let Some(m) = &raw.max_repetitions {
                diags.push(loc.span(
                    m.span(),
                    format!(
                        "`max_repetitions` applies only with `repetitions = \"auto\"`; \
                         `repetitions = {n}` runs exactly {n}"
                    ),
                ));
            }
            Repetitions::fixed(u32::try_from(*n).unwrap_or(1))
        }
        other => {
            let got = match other {
                toml::Value::String(s) => format!("\"{s}\""),
                toml::Value::Integer(n) => n.to_string(),
                v => v.type_str().to_string(),
            };
            diags.push(loc.span(
                r.span(),
                format!(
                    "`repetitions` must be a whole number between 1 and {MAX_REPETITIONS}, \
                     or \"auto\" (repeat until the 95% interval of the median is within ±5%), got {got}"
                ),
            ));
            Repetitions::fixed(1)
        }
    }
}

#[cfg(test)]
mod tests;
