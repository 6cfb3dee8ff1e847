//! Experiment specs: a TOML file naming a matrix over executors × workloads ×
//! parameters, expanded into [`Point`]s. The format is documented in
//! docs/lab.md. Every error names file:line:col, like workload files do.

use crate::point::{Point, Variant};
use crate::sweep::{Repetitions, DEFAULT_MAX_REPETITIONS};
use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_record::config::{
    self, GuestSettings, HostPolicy, IdlePolicy, IoThreadCpus, IrqAffinity, Irqchip,
    NativeSettings, Placement, Ple, QemuSettings, RunConfig, SimSettings, SyncMode, VmSettings,
};
use smplab_record::diag::{Diagnostics, SourceText};
use smplab_record::Executor;
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

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
    workload: Spanned<toml::Value>,
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
pub const DEFAULT_TIMEOUT_S: u64 = 300;
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

/// Items of an axis (a scalar is a one-item axis).
fn items(v: &toml::Value) -> Vec<toml::Value> {
    match v {
        toml::Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

/// Parse every item of a string axis with the setting's own parser.
fn parsed<T: std::str::FromStr>(
    loc: &SourceText,
    axis: &str,
    v: &Spanned<toml::Value>,
    diags: &mut Diagnostics,
) -> Vec<T>
where
    T::Err: std::fmt::Display,
{
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        diags.push(loc.span(
            v.span(),
            format!("`{axis}` is an empty list; give at least one value"),
        ));
    }
    for item in list {
        match item.as_str() {
            Some(s) => match s.parse::<T>() {
                Ok(x) => out.push(x),
                Err(m) => diags.push(loc.span(v.span(), format!("`{axis}`: {m}"))),
            },
            None => diags.push(loc.span(
                v.span(),
                format!("`{axis}` takes strings, got {}", item.type_str()),
            )),
        }
    }
    out
}

/// An axis absent from the spec takes its one default value.
fn axis<T: std::str::FromStr>(
    loc: &SourceText,
    name: &str,
    v: &Option<Spanned<toml::Value>>,
    default: T,
    diags: &mut Diagnostics,
) -> Vec<T>
where
    T::Err: std::fmt::Display,
{
    match v {
        Some(v) => parsed(loc, name, v, diags),
        None => vec![default],
    }
}

fn numbers(
    loc: &SourceText,
    axis: &str,
    v: &Spanned<toml::Value>,
    min: i64,
    max: i64,
    diags: &mut Diagnostics,
) -> Vec<u32> {
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        diags.push(loc.span(
            v.span(),
            format!("`{axis}` is an empty list; give at least one value"),
        ));
    }
    for item in list {
        match item.as_integer() {
            Some(n) if (min..=max).contains(&n) => out.push(u32::try_from(n).unwrap_or(u32::MAX)),
            Some(n) => diags.push(loc.span(
                v.span(),
                format!("`{axis}` = {n} is out of range; use {min}..={max}"),
            )),
            None => diags.push(loc.span(
                v.span(),
                format!("`{axis}` takes whole numbers, got {}", item.type_str()),
            )),
        }
    }
    out
}

fn bools(
    loc: &SourceText,
    axis: &str,
    v: &Spanned<toml::Value>,
    diags: &mut Diagnostics,
) -> Vec<bool> {
    let mut out = Vec::new();
    for item in items(v.get_ref()) {
        match item.as_bool() {
            Some(b) => out.push(b),
            None => diags.push(loc.span(
                v.span(),
                format!("`{axis}` takes true/false, got {}", item.type_str()),
            )),
        }
    }
    out
}

/// The matrix's axes, each parsed with its setting's own parser.
struct Axes {
    executors: Vec<Executor>,
    workloads: Vec<String>,
    threads: Option<Vec<u32>>,
    vcpus: Vec<u32>,
    vms: Vec<u32>,
    sync: Vec<SyncMode>,
    irqchip: Vec<Irqchip>,
    idle: Vec<IdlePolicy>,
    placement: Vec<Placement>,
    platform: Vec<String>,
    variants: Vec<Variant>,
    ple: Vec<Option<Ple>>,
    apicv: Vec<bool>,
    sdb: Vec<bool>,
    policy: Vec<HostPolicy>,
    scales: Vec<f64>,
    irq_affinity: Vec<IrqAffinity>,
    io_thread_cpus: Vec<IoThreadCpus>,
}

/// `ple` takes true (Intel PLE, seed 000's hosts), false, or a mode name;
/// absent, a simulated host has what its platform has.
fn ple_axis(
    loc: &SourceText,
    v: &Option<Spanned<toml::Value>>,
    diags: &mut Diagnostics,
) -> Vec<Option<Ple>> {
    let Some(v) = v else { return vec![None] };
    let mut out = Vec::new();
    for item in items(v.get_ref()) {
        let parsed = match &item {
            toml::Value::Boolean(true) => Ok(Ple::Intel),
            toml::Value::Boolean(false) => Ok(Ple::Off),
            toml::Value::String(s) => s.parse::<Ple>().map_err(|e| e.to_string()),
            other => Err(format!(
                "`ple` takes true, false, \"intel\", \"amd\" or \"off\", got {}",
                other.type_str()
            )),
        };
        match parsed {
            Ok(p) => out.push(Some(p)),
            Err(m) => diags.push(loc.span(v.span(), format!("`ple`: {m}"))),
        }
    }
    out
}

fn parse_axes(loc: &SourceText, m: &MatrixFile, diags: &mut Diagnostics) -> Axes {
    let opt_nums = |v: &Option<Spanned<toml::Value>>, axis: &str, min, max, d: &mut Diagnostics| {
        v.as_ref().map(|v| numbers(loc, axis, v, min, max, d))
    };
    let workloads: Vec<String> = parsed::<String>(loc, "workload", &m.workload, diags)
        .into_iter()
        .filter(|w| match smplab_workload::Source::resolve(w) {
            Ok(_) => true,
            Err(e) => {
                let msg = e.to_string().replace('\n', "; ");
                diags.push(loc.span(m.workload.span(), format!("`workload`: {msg}")));
                false
            }
        })
        .collect();
    let scales: Vec<f64> = match &m.scale {
        None => vec![DEFAULT_SCALE],
        Some(v) => items(v.get_ref())
            .iter()
            .filter_map(|item| {
                let x = item.as_float().or_else(|| {
                    item.as_integer()
                        .and_then(|i| i32::try_from(i).ok())
                        .map(f64::from)
                });
                match x {
                    Some(x) if x.is_finite() && x > 0.0 => Some(x),
                    _ => {
                        diags.push(loc.span(v.span(), "`scale` takes positive numbers"));
                        None
                    }
                }
            })
            .collect(),
    };
    let bool_axis = |v: &Option<Spanned<toml::Value>>, name: &str, d: &mut Diagnostics| {
        v.as_ref()
            .map(|v| bools(loc, name, v, d))
            .unwrap_or_else(|| vec![false])
    };
    Axes {
        executors: parsed(loc, "executor", &m.executor, diags),
        workloads,
        // The widest any executor accepts; each configuration is then checked
        // against its own executor's limits.
        threads: opt_nums(&m.threads, "threads", 1, 65_536, diags),
        vcpus: opt_nums(
            &m.vcpus,
            "vcpus",
            1,
            i64::from(config::MAX_SIM_VCPUS),
            diags,
        )
        .unwrap_or_else(|| vec![DEFAULT_VCPUS]),
        vms: opt_nums(&m.vms, "vms", 1, i64::from(config::MAX_SIM_VMS), diags)
            .unwrap_or_else(|| vec![1]),
        sync: axis(loc, "sync", &m.sync, SyncMode::default(), diags),
        irqchip: axis(loc, "irqchip", &m.irqchip, Irqchip::default(), diags),
        idle: axis(loc, "idle", &m.idle, IdlePolicy::default(), diags),
        placement: axis(loc, "pin", &m.pin, Placement::default(), diags),
        platform: axis(
            loc,
            "platform",
            &m.platform,
            config::DEFAULT_PLATFORM.to_string(),
            diags,
        ),
        variants: axis(loc, "variant", &m.variant, Variant::AsIs, diags),
        ple: ple_axis(loc, &m.ple, diags),
        apicv: bool_axis(&m.apicv, "apicv", diags),
        sdb: bool_axis(&m.sdb, "sdb", diags),
        policy: axis(loc, "policy", &m.policy, HostPolicy::default(), diags),
        scales,
        irq_affinity: axis(
            loc,
            "irq_affinity",
            &m.irq_affinity,
            IrqAffinity::default(),
            diags,
        ),
        io_thread_cpus: axis(
            loc,
            "io_thread_cpus",
            &m.io_thread_cpus,
            IoThreadCpus::default(),
            diags,
        ),
    }
}

/// Every configuration of one executor at one vCPU count and placement: the
/// axes it does not take collapse instead of multiplying.
fn executor_configs(
    ax: &Axes,
    executor: Executor,
    vcpus: u32,
    placement: &Placement,
) -> Vec<RunConfig> {
    let base = base_configs(ax, executor, vcpus, placement);
    // The interrupt affinity axes, where the executor takes them.
    let default_irq = [IrqAffinity::default()];
    let default_io = [IoThreadCpus::default()];
    let irqs: &[IrqAffinity] = if executor == Executor::Native {
        &default_irq
    } else {
        &ax.irq_affinity
    };
    let ios: &[IoThreadCpus] = if executor == Executor::Qemu {
        &default_io
    } else {
        &ax.io_thread_cpus
    };
    let mut out = Vec::with_capacity(base.len() * irqs.len() * ios.len());
    for c in base {
        for irq in irqs {
            for io in ios {
                let mut c = c.clone();
                c.set_irq_affinity(irq.clone());
                c.set_io_thread_cpus(io.clone());
                out.push(c);
            }
        }
    }
    out
}

fn base_configs(
    ax: &Axes,
    executor: Executor,
    vcpus: u32,
    placement: &Placement,
) -> Vec<RunConfig> {
    let mut out = Vec::new();
    if executor == Executor::Native {
        out.push(RunConfig::Native(NativeSettings {
            placement: placement.clone(),
            ..NativeSettings::default()
        }));
        return out;
    }
    for &vms in &ax.vms {
        for &idle in &ax.idle {
            let guest = GuestSettings {
                vcpus,
                idle,
                placement: placement.clone(),
                vms,
                timer_hz: None,
                mem_bytes: None,
                ..GuestSettings::new(vcpus)
            };
            match executor {
                Executor::Native => {}
                // QEMU has its own device model locking: no sync axis.
                Executor::Qemu => out.push(RunConfig::Qemu(QemuSettings { guest })),
                Executor::Vm => {
                    for &sync in &ax.sync {
                        for &irqchip in &ax.irqchip {
                            out.push(RunConfig::Vm(VmSettings {
                                irqchip,
                                ..VmSettings::new(guest.clone(), sync)
                            }));
                        }
                    }
                }
                Executor::Sim => {
                    for &sync in &ax.sync {
                        for platform in &ax.platform {
                            for &ple in &ax.ple {
                                for &apicv in &ax.apicv {
                                    for &sdb in &ax.sdb {
                                        for &policy in &ax.policy {
                                            let mut s = SimSettings::new(vcpus, platform.clone());
                                            s.idle = idle;
                                            s.placement = placement.clone();
                                            s.vms = vms;
                                            s.sync = sync;
                                            s.ple = ple;
                                            s.apicv = apicv;
                                            s.sdb = sdb;
                                            s.policy = policy;
                                            out.push(RunConfig::Sim(s));
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Where a configuration problem points: the axis the setting came from.
fn setting_span(m: &Spanned<MatrixFile>, setting: &str) -> Range<usize> {
    let f = m.get_ref();
    let axis = match setting {
        "vcpus" => &f.vcpus,
        "vms" => &f.vms,
        "threads" => &f.threads,
        "idle" => &f.idle,
        "pin" => &f.pin,
        "platform" => &f.platform,
        "policy" => &f.policy,
        "irq_affinity" => &f.irq_affinity,
        "io_thread_cpus" => &f.io_thread_cpus,
        _ => &None,
    };
    match (axis, setting) {
        (Some(v), _) => v.span(),
        (None, "threads") => f.workload.span(),
        _ => m.span(),
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
    let ax = parse_axes(loc, m, diags);
    if ax.executors.contains(&Executor::Sim) {
        for p in &ax.platform {
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

    // Configurations first, then repetitions round-robin over them.
    let mut configs: Vec<Point> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut problems = BTreeSet::new();
    let mut threads_of = std::collections::HashMap::new();
    for &executor in &ax.executors {
        for workload in &ax.workloads {
            for &variant in &ax.variants {
                for &scale in &ax.scales {
                    for &vc in &ax.vcpus {
                        // Seed 000 runs as many threads as vCPUs unless told otherwise.
                        let ns = ax.threads.clone().unwrap_or_else(|| vec![vc]);
                        for &n in &ns {
                            let total = threads_of
                                .entry((workload.clone(), n, scale.to_bits()))
                                .or_insert_with(|| total_threads(workload, n, scale))
                                .clone();
                            let total = match total {
                                Ok(t) => t,
                                Err(msg) => {
                                    problems.insert((m.workload.span().start, msg));
                                    continue;
                                }
                            };
                            for placement in &ax.placement {
                                for config in executor_configs(&ax, executor, vc, placement) {
                                    if let Err(errs) = config.validate(Some(total)) {
                                        for e in errs {
                                            let span = setting_span(&raw.matrix, e.setting);
                                            problems
                                                .insert((span.start, format!("{executor}: {e}")));
                                        }
                                        continue;
                                    }
                                    let mut p = Point::new(workload.clone(), n, scale, config);
                                    p.variant = variant;
                                    p.timeout_s = timeout_s;
                                    if seen.insert(p.config_key()) {
                                        configs.push(p);
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
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

/// Threads the workload runs with `n` at `scale`, or why it cannot be built.
fn total_threads(workload: &str, n: u32, scale: f64) -> Result<u32, String> {
    smplab_workload::Source::resolve(workload)
        .and_then(|s| s.instantiate(Some(n), scale))
        .map(|p| p.total_threads())
        .map_err(|e| {
            format!(
                "`workload` {workload} with n={n}: {}",
                e.to_string().replace('\n', "; ")
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_irqchip_axis_multiplies_vm_points_only() {
        let text = r#"
name = "t"
repetitions = 1
[matrix]
executor = ["vm", "qemu"]
workload = "dedup"
sync = ["global", "hybrid"]
irqchip = ["kernel", "user"]
"#;
        let s = ExperimentSpec::from_text("t.toml", text).unwrap();
        let vm: Vec<_> = s
            .points
            .iter()
            .filter(|p| p.executor() == Executor::Vm)
            .collect();
        assert_eq!(vm.len(), 4);
        assert_eq!(
            vm.iter()
                .filter(|p| p.config.irqchip() == Some(Irqchip::User))
                .count(),
            2
        );
        let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
        assert_eq!(keys.len(), s.points.len(), "keys are unique");
        let bad =
            "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nirqchip = \"usr\"\n";
        let err = ExperimentSpec::from_text("t.toml", bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml:5:") && err.contains("unknown irqchip"),
            "{err}"
        );
    }

    #[test]
    fn expands_matrix_and_collapses_unused_axes() {
        let text = r#"
name = "t"
repetitions = 2
[matrix]
executor = ["native", "vm", "sim"]
workload = "dedup"
vcpus = [1, 2]
sync = ["global", "hybrid"]
"#;
        let s = ExperimentSpec::from_text("t.toml", text).unwrap();
        // native: 2 configs (threads follow vcpus); vm: 2 vcpus × 2 sync; sim: same.
        assert_eq!(s.points.len(), (2 + 4 + 4) * 2);
        let native: Vec<_> = s
            .points
            .iter()
            .filter(|p| p.executor() == Executor::Native)
            .collect();
        assert!(native
            .iter()
            .all(|p| p.config.sync().is_none() && p.vcpus().is_none()));
        let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
        assert_eq!(keys.len(), s.points.len(), "keys are unique");
        let sim = s
            .points
            .iter()
            .find(|p| p.executor() == Executor::Sim)
            .unwrap();
        assert_eq!(sim.config.platform(), Some("pvm-here"));
        // PLE follows the platform unless the spec says.
        assert!(matches!(&sim.config, RunConfig::Sim(s) if s.ple.is_none()));
    }

    #[test]
    fn interrupt_affinity_axes_expand_where_they_apply() {
        let text = r#"
name = "t"
[matrix]
executor = ["native", "qemu", "sim"]
workload = "oltp"
vcpus = 2
irq_affinity = ["0", "balanced"]
io_thread_cpus = ["none", "1"]
"#;
        let s = ExperimentSpec::from_text("t.toml", text).unwrap();
        let without = text
            .lines()
            .filter(|l| !l.starts_with("irq_affinity") && !l.starts_with("io_thread_cpus"))
            .collect::<Vec<_>>()
            .join("\n");
        let base = ExperimentSpec::from_text("t.toml", &without).unwrap();
        let count =
            |s: &ExperimentSpec, e: Executor| s.points.iter().filter(|p| p.executor() == e).count();
        // native: io threads only; qemu: irq affinity only; sim: both.
        assert_eq!(
            count(&s, Executor::Native),
            2 * count(&base, Executor::Native)
        );
        assert_eq!(count(&s, Executor::Qemu), 2 * count(&base, Executor::Qemu));
        assert_eq!(count(&s, Executor::Sim), 4 * count(&base, Executor::Sim));
        assert!(count(&base, Executor::Sim) > 0);
        assert!(s.points.iter().any(|p| matches!(&p.config,
            RunConfig::Sim(x) if x.irq_affinity == IrqAffinity::Balanced && x.io_thread_cpus.0 == [1])));
        let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
        assert_eq!(keys.len(), s.points.len(), "keys are unique");

        let bad = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"oltp\"\nirq_affinity = \"everywhere\"\n";
        let err = ExperimentSpec::from_text("t.toml", bad)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:5:16:"), "{err}");
        assert!(err.contains("balanced"), "{err}");
        let out_of_range = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"oltp\"\nvcpus = 2\nirq_affinity = \"3\"\n";
        let err = ExperimentSpec::from_text("t.toml", out_of_range)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:6:16:"), "{err}");
        assert!(err.contains("vCPU 3 does not exist"), "{err}");
    }

    #[test]
    fn unknown_executor_is_located() {
        let text =
            "name = \"t\"\n[matrix]\nexecutor = [\"native\", \"vmm\"]\nworkload = \"dedup\"\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3:12:"), "{err}");
        assert!(err.contains("unknown executor `vmm`"), "{err}");
    }

    #[test]
    fn unknown_key_and_bad_value_are_located() {
        let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nvcpu = 2\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:5:1:"), "{err}");
        assert!(err.contains("vcpu"), "{err}");

        let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"nope\"\nvcpus = [0]\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(
            lines[0].starts_with("t.toml:4:12:") && lines[0].contains("nope"),
            "{err}"
        );
        assert!(
            lines[1].starts_with("t.toml:5:9:") && lines[1].contains("out of range"),
            "{err}"
        );
    }

    #[test]
    fn missing_matrix_is_reported() {
        let err = ExperimentSpec::from_text("t.toml", "name = \"t\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("matrix"), "{err}");
        assert!(err.starts_with("t.toml:"), "{err}");
    }

    #[test]
    fn the_example_in_docs_parses() {
        let doc = include_str!("../../../docs/lab.md");
        let start = doc
            .find("```toml\n")
            .expect("docs/lab.md has a toml example")
            + 8;
        let len = doc[start..].find("```").expect("closed block");
        let s = ExperimentSpec::from_text("docs/lab.md", &doc[start..start + len])
            .unwrap_or_else(|e| panic!("docs example: {e}"));
        assert_eq!(s.name, "overhead");
        assert!(s
            .points
            .iter()
            .any(|p| p.executor() == Executor::Qemu && p.config.sync().is_none()));
    }

    #[test]
    fn the_shipped_specs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let s = match ExperimentSpec::from_file(&path) {
                    Ok(s) => s,
                    // predict.toml needs this host's calibrated profile: its
                    // absence is reported at validation, with the remedy.
                    Err(e) if e.to_string().contains("smplab calibrate") => {
                        n += 1;
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                };
                assert!(!s.points.is_empty());
                n += 1;
            }
        }
        assert!(n >= 3);
    }

    #[test]
    fn each_executor_gets_its_own_limits_at_validation() {
        // 128 vCPUs: fine for the simulator, beyond the guest kernel: the
        // error is located at the vcpus axis, not left to fail point by point.
        let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"blackscholes\"\nvcpus = [2, 128]\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:5:9:"), "{err}");
        assert!(err.contains("vm: vcpus: 128 is out of range"), "{err}");
        assert!(!err.contains("sim:"), "{err}");
        // Guest-side halt polling is not modelled by the simulator.
        let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"dedup\"\nidle = \"haltpoll:1000\"\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:5:8:") && err.contains("sim: idle"),
            "{err}"
        );
        // A bad setting is located at its axis with the setting's own message.
        let text =
            "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nsync = \"gobal\"\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:5:8:") && err.contains("unknown sync mode `gobal`"),
            "{err}"
        );
        let text = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"dedup\"\nplatform = \"nosuch.toml\"\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:5:12:") && err.contains("nosuch.toml"),
            "{err}"
        );
    }

    #[test]
    fn repetitions_fixed_or_adaptive() {
        let base = "[matrix]\nexecutor = \"native\"\nworkload = \"dedup\"\n";
        let s = ExperimentSpec::from_text("t.toml", &format!("name = \"t\"\n{base}")).unwrap();
        assert_eq!(s.repetitions, Repetitions::fixed(DEFAULT_REPETITIONS));
        assert_eq!(s.points.len(), DEFAULT_REPETITIONS as usize);

        let text = format!("name = \"t\"\nrepetitions = 4\n{base}");
        let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
        assert_eq!(s.repetitions, Repetitions::fixed(4));
        assert_eq!(s.points.len(), 4);
        assert_eq!(s.points.last().map(|p| p.rep), Some(3));

        let text = format!("name = \"t\"\nrepetitions = \"auto\"\n{base}");
        let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
        assert_eq!(
            s.repetitions,
            Repetitions::adaptive(DEFAULT_MAX_REPETITIONS)
        );
        assert_eq!(s.repetitions.min, 6);
        // The points hold the minimum; the sweep repeats further as needed.
        assert_eq!(s.points.len(), 6);

        let text = format!("name = \"t\"\nrepetitions = \"auto\"\nmax_repetitions = 9\n{base}");
        let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
        assert_eq!(s.repetitions, Repetitions::adaptive(9));
        assert_eq!((s.repetitions.min, s.repetitions.max), (6, 9));
    }

    #[test]
    fn bad_repetitions_are_located() {
        let base = "[matrix]\nexecutor = \"native\"\nworkload = \"dedup\"\n";
        for (reps, col) in [("\"often\"", 15), ("0", 15), ("2.5", 15), ("1001", 15)] {
            let text = format!("name = \"t\"\nrepetitions = {reps}\n{base}");
            let err = ExperimentSpec::from_text("t.toml", &text)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(&format!("t.toml:2:{col}:")), "{err}");
            assert!(err.contains("\"auto\""), "{err}");
        }
        let text = format!("name = \"t\"\nrepetitions = \"auto\"\nmax_repetitions = 0\n{base}");
        let err = ExperimentSpec::from_text("t.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:19:") && err.contains("between 1 and 1000"),
            "{err}"
        );
        // A maximum without "auto" would be silently ignored: it is an error.
        let text = format!("name = \"t\"\nrepetitions = 3\nmax_repetitions = 10\n{base}");
        let err = ExperimentSpec::from_text("t.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("t.toml:3:19:") && err.contains("only with"),
            "{err}"
        );
    }

    #[test]
    fn settings_are_typed_with_one_default() {
        let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"dedup\"\n";
        let s = ExperimentSpec::from_text("t.toml", text).unwrap();
        for p in &s.points {
            assert_eq!(p.config.sync(), Some(SyncMode::default()));
            assert_eq!(p.config.idle(), Some(IdlePolicy::default()));
            assert_eq!(p.vcpus(), Some(DEFAULT_VCPUS));
        }
    }
}
