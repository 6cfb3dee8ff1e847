//! The configurations a matrix expands into: per executor, the axes it takes
//! multiply and the others collapse; every configuration is validated against
//! its executor's limits and the workload's thread count, a problem pointing
//! at the axis the setting came from.

use super::axes::Axes;
use super::MatrixFile;
use crate::point::Point;
use serde_spanned::Spanned;
use smplab_record::config::{Placement, RunConfig, DEFAULT_PLATFORM};
use smplab_record::Executor;
use std::collections::BTreeSet;
use std::ops::Range;

/// Every valid configuration of the matrix, each once, in matrix order, and
/// the problems of the invalid ones (byte offset in the spec, message).
pub(super) fn matrix_configs(
    ax: &Axes,
    matrix: &Spanned<MatrixFile>,
    timeout_s: u64,
) -> (Vec<Point>, BTreeSet<(usize, String)>) {
    let m = matrix.get_ref();
    let mut configs: Vec<Point> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut problems = BTreeSet::new();
    let mut threads_of = std::collections::HashMap::new();
    let workload_span = m.workload.as_ref().map_or(matrix.span(), |w| w.span());
    for &executor in &ax.executors {
        if !RunConfig::defaults(executor, 1, DEFAULT_PLATFORM).runs_models() {
            continue;
        }
        for workload in &ax.workloads {
            for &variant in &ax.variants {
                for scale in ax.scales_of(workload) {
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
                                    problems.insert((workload_span.start, msg));
                                    continue;
                                }
                            };
                            for placement in &ax.placement {
                                for config in executor_configs(ax, executor, vc, placement) {
                                    if let Err(errs) = config.validate(Some(total)) {
                                        for e in errs {
                                            let span = setting_span(matrix, e.setting);
                                            problems
                                                .insert((span.start, format!("{executor}: {e}")));
                                        }
                                        continue;
                                    }
                                    for &busy in &ax.busy_host_threads {
                                        let mut p =
                                            Point::new(workload.clone(), n, scale, config.clone());
                                        p.variant = variant;
                                        p.timeout_s = timeout_s;
                                        p.busy_host_threads = busy;
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
    }
    (configs, problems)
}

/// Every configuration of one executor at one vCPU count and placement: the
/// axes it does not take collapse instead of multiplying.
fn executor_configs(
    ax: &Axes,
    executor: Executor,
    vcpus: u32,
    placement: &Placement,
) -> Vec<RunConfig> {
    let mut base = RunConfig::defaults(executor, vcpus, DEFAULT_PLATFORM);
    base.set_placement(placement.clone());
    let mut out = vec![base];
    // In the matrix's nesting order: each axis multiplies the configurations
    // so far, where the executor has the setting.
    cross(&mut out, &ax.vms, |c| c.settings_mut().vms_mut());
    cross(&mut out, &ax.idle, |c| c.settings_mut().idle_mut());
    cross(&mut out, &ax.sync, |c| c.settings_mut().sync_mut());
    cross(&mut out, &ax.irqchip, |c| match c {
        RunConfig::Vm(s) => Some(&mut s.irqchip),
        _ => None,
    });
    cross(&mut out, &ax.host_policy, |c| match c {
        RunConfig::Vm(s) => Some(&mut s.host_policy),
        _ => None,
    });
    cross(&mut out, &ax.platform, |c| sim(c).map(|s| &mut s.platform));
    cross(&mut out, &ax.ple, |c| sim(c).map(|s| &mut s.ple));
    cross(&mut out, &ax.apicv, |c| sim(c).map(|s| &mut s.apicv));
    cross(&mut out, &ax.sdb, |c| sim(c).map(|s| &mut s.sdb));
    cross(&mut out, &ax.policy, |c| sim(c).map(|s| &mut s.policy));
    cross(&mut out, &ax.irq_affinity, |c| {
        c.settings_mut().irq_affinity_mut()
    });
    cross(&mut out, &ax.io_thread_cpus, |c| {
        c.settings_mut().io_thread_cpus_mut()
    });
    out
}

/// The simulator's own settings (its axes collapse for other executors).
fn sim(c: &mut RunConfig) -> Option<&mut smplab_record::config::SimSettings> {
    match c {
        RunConfig::Sim(s) => Some(s),
        _ => None,
    }
}

/// Multiply `configs` by the values of one axis; `slot` is the setting the
/// axis sets, `None` when the executor has no such setting (the axis then
/// collapses).
pub(super) fn cross<T: Clone>(
    configs: &mut Vec<RunConfig>,
    values: &[T],
    slot: fn(&mut RunConfig) -> Option<&mut T>,
) {
    let mut out = Vec::with_capacity(configs.len() * values.len().max(1));
    for c in configs.iter() {
        if slot(&mut c.clone()).is_none() {
            out.push(c.clone());
            continue;
        }
        for v in values {
            let mut c = c.clone();
            if let Some(setting) = slot(&mut c) {
                *setting = v.clone();
            }
            out.push(c);
        }
    }
    *configs = out;
}

/// Where a configuration problem points: the axis the setting came from.
pub(super) fn setting_span(m: &Spanned<MatrixFile>, setting: &str) -> Range<usize> {
    let f = m.get_ref();
    let axis = match setting {
        "vcpus" => &f.vcpus,
        "vms" => &f.vms,
        "threads" => &f.threads,
        "idle" => &f.idle,
        "pin" => &f.pin,
        "platform" => &f.platform,
        "policy" => &f.policy,
        "host_policy" => &f.host_policy,
        "irq_affinity" => &f.irq_affinity,
        "io_thread_cpus" => &f.io_thread_cpus,
        "kernel" => &f.kernel,
        "include" => &f.include,
        "initrd" => &f.initrd,
        "machine" => &f.machine,
        _ => &None,
    };
    match (axis, setting, &f.workload) {
        (Some(v), _, _) => v.span(),
        (None, "threads", Some(w)) => w.span(),
        _ => m.span(),
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
