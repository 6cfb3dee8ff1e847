//! The configurations a matrix expands into: per executor, the axes it takes
//! multiply and the others collapse; every configuration is validated against
//! its executor's limits and the workload's thread count, a problem pointing
//! at the axis the setting came from.

use super::axes::Axes;
use super::MatrixFile;
use crate::point::Point;
use serde_spanned::Spanned;
use smplab_record::config::{
    GuestSettings, IoThreadCpus, IrqAffinity, NativeSettings, Placement, QemuSettings, RunConfig,
    SimSettings, VmSettings,
};
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
                            for &host_policy in &ax.host_policy {
                                out.push(RunConfig::Vm(VmSettings {
                                    irqchip,
                                    host_policy,
                                    ..VmSettings::new(guest.clone(), sync)
                                }));
                            }
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
        "host_policy" => &f.host_policy,
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
