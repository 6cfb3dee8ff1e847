//! The matrix's axes: each axis of a spec's `[matrix]` read as one value or
//! an array of values and parsed with its setting's own parser (or, absent,
//! its one default), every problem located at file:line:col.

use super::{MatrixFile, DEFAULT_SCALE, DEFAULT_VCPUS};
use crate::point::Variant;
use serde_spanned::Spanned;
use smplab_record::config::{
    self, HostPolicy, IdlePolicy, IoThreadCpus, IrqAffinity, Irqchip, Placement, Ple, SyncMode,
};
use smplab_record::diag::{Diagnostics, SourceText};
use smplab_record::Executor;

/// Items of an axis (a scalar is a one-item axis).
fn items(v: &toml::Value) -> Vec<toml::Value> {
    match v {
        toml::Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

/// Parse every item of a string axis with the setting's own parser.
pub(super) fn parsed<T: std::str::FromStr>(
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

/// Most busy host threads a point may ask for.
const MAX_BUSY_HOST_THREADS: i64 = 64;

/// The matrix's axes, each parsed with its setting's own parser.
pub(super) struct Axes {
    pub(super) executors: Vec<Executor>,
    pub(super) workloads: Vec<String>,
    pub(super) threads: Option<Vec<u32>>,
    pub(super) vcpus: Vec<u32>,
    pub(super) vms: Vec<u32>,
    pub(super) sync: Vec<SyncMode>,
    pub(super) irqchip: Vec<Irqchip>,
    pub(super) idle: Vec<IdlePolicy>,
    pub(super) placement: Vec<Placement>,
    pub(super) platform: Vec<String>,
    pub(super) variants: Vec<Variant>,
    pub(super) ple: Vec<Option<Ple>>,
    pub(super) apicv: Vec<bool>,
    pub(super) sdb: Vec<bool>,
    pub(super) policy: Vec<HostPolicy>,
    /// `vm` host runs; `[None]` when the spec gives none.
    pub(super) host_policy: Vec<Option<HostPolicy>>,
    pub(super) busy_host_threads: Vec<u32>,
    pub(super) scales: Vec<f64>,
    /// `scale = { WORKLOAD = S, ... }`: one scale per workload (each
    /// profile at its own length, as `smplab host bench` runs them); when
    /// given, it names every workload of the matrix and `scales` is unused.
    pub(super) scale_by_workload: std::collections::BTreeMap<String, f64>,
    pub(super) irq_affinity: Vec<IrqAffinity>,
    pub(super) io_thread_cpus: Vec<IoThreadCpus>,
}

impl Axes {
    /// The scales `workload` runs at: its own, when the spec gives one per
    /// workload, else every scale of the axis.
    pub(super) fn scales_of(&self, workload: &str) -> Vec<f64> {
        match self.scale_by_workload.get(workload) {
            Some(&s) => vec![s],
            None if self.scale_by_workload.is_empty() => self.scales.clone(),
            None => Vec::new(),
        }
    }
}

/// `ple` takes true (Intel PLE, Ding & Shan's hosts), false, or a mode name;
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

pub(super) fn parse_axes(loc: &SourceText, m: &MatrixFile, diags: &mut Diagnostics) -> Axes {
    let opt_nums = |v: &Option<Spanned<toml::Value>>, axis: &str, min, max, d: &mut Diagnostics| {
        v.as_ref().map(|v| numbers(loc, axis, v, min, max, d))
    };
    let workloads: Vec<String> = match &m.workload {
        None => Vec::new(),
        Some(wv) => parsed::<String>(loc, "workload", wv, diags)
            .into_iter()
            .filter(|w| match smplab_workload::Source::resolve(w) {
                Ok(_) => true,
                Err(e) => {
                    let msg = e.to_string().replace('\n', "; ");
                    diags.push(loc.span(wv.span(), format!("`workload`: {msg}")));
                    false
                }
            })
            .collect(),
    };
    let positive = |item: &toml::Value| {
        item.as_float()
            .or_else(|| {
                item.as_integer()
                    .and_then(|i| i32::try_from(i).ok())
                    .map(f64::from)
            })
            .filter(|x| x.is_finite() && *x > 0.0)
    };
    let mut scale_by_workload = std::collections::BTreeMap::new();
    let scales: Vec<f64> = match &m.scale {
        None => vec![DEFAULT_SCALE],
        Some(v) => {
            match v.get_ref() {
                toml::Value::Table(t) => {
                    for (w, item) in t {
                        match positive(item) {
                            Some(x) => {
                                scale_by_workload.insert(w.clone(), x);
                            }
                            None => diags.push(loc.span(
                                v.span(),
                                format!("`scale`: workload `{w}` takes a positive number"),
                            )),
                        }
                    }
                    for w in workloads.iter().filter(|w| !t.contains_key(w.as_str())) {
                        diags.push(loc.span(
                        v.span(),
                        format!("`scale` gives each workload its own scale but names none for `{w}`"),
                    ));
                    }
                    Vec::new()
                }
                other => items(other)
                    .iter()
                    .filter_map(|item| {
                        let x = positive(item);
                        if x.is_none() {
                            diags.push(loc.span(
                                v.span(),
                                "`scale` takes positive numbers, or a table of one per workload",
                            ));
                        }
                        x
                    })
                    .collect(),
            }
        }
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
        busy_host_threads: opt_nums(
            &m.busy_host_threads,
            "busy_host_threads",
            0,
            MAX_BUSY_HOST_THREADS,
            diags,
        )
        .unwrap_or_else(|| vec![0]),
        host_policy: match &m.host_policy {
            None => vec![None],
            Some(_) => axis(
                loc,
                "host_policy",
                &m.host_policy,
                HostPolicy::default(),
                diags,
            )
            .into_iter()
            .map(Some)
            .collect(),
        },
        scales,
        scale_by_workload,
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
