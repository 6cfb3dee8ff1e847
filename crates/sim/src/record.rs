//! Building the shared result records from an engine run.

use crate::breakdown;
use crate::engine::{exit, RunOutcome, VmOutcome};
use crate::scenario::{Scenario, VmSpec};
use smplab_record::sim::SimSection;
use smplab_record::{Counters, Executor, Outcome, RunRecord, ThreadTiming, Timing};
use smplab_workload::program::counter_names;

/// One record per VM of the scenario.
pub(crate) fn records(
    s: &Scenario,
    out: &RunOutcome,
    native: &[Option<crate::NativeRef>],
    host_seconds: f64,
) -> Vec<RunRecord> {
    let host = smplab_record::HostFacts::detect();
    s.vms
        .iter()
        .zip(&out.vms)
        .enumerate()
        .map(|(k, (spec, o))| {
            let mut r = RunRecord::new(Executor::Sim, spec.workload.clone());
            r.host = host.clone();
            set_config(&mut r, s, spec);
            if !o.finished {
                r.outcome = Outcome::Failed {
                    reason: format!(
                        "simulated horizon of {} ns reached with {} of {} threads finished; raise the horizon or lower the scale",
                        out.end_ns,
                        o.finished_threads,
                        o.threads.len()
                    ),
                };
            }
            r.timing = timing(spec, o);
            r.counters = Counters {
                ops: counter_names::ALL
                    .iter()
                    .zip(o.ops)
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                spin_iterations: o.spin_iterations,
                blocks: o.blocks,
                wakeups: o.wakeups,
                context_switches_voluntary: o.cs_voluntary,
                context_switches_involuntary: o.cs_involuntary,
            };
            r.io = out.io.get(k).cloned().flatten();
            if r.io.is_some() {
                r.set_config("irq_affinity", spec.irq_affinity.to_string());
            }
            let native = native.get(k).and_then(|n| n.as_ref());
            r.sim = Some(sim_section(s, out, k, spec, o, native, host_seconds));
            r
        })
        .collect()
}

/// The settings the VM ran with, as the record's config.
fn set_config(r: &mut RunRecord, s: &Scenario, spec: &VmSpec) {
    r.set_config("platform", s.platform.name.clone());
    r.set_config("pcpus", s.pcpus);
    r.set_config("vms", s.vms.len());
    r.set_config("vcpus", spec.vcpus);
    r.set_config("policy", s.policy.label());
    r.set_config("idle", spec.idle.label());
    r.set_config("placement", spec.placement.to_string());
    r.set_config("ple", spec.ple.label());
    r.set_config("apicv", spec.apicv);
    r.set_config("sdb", spec.sdb.is_some());
    r.set_config(
        "sync",
        spec.devices
            .map(|d| d.sync.label())
            .unwrap_or_else(|| "none".into()),
    );
    r.set_config("seed", s.seed);
    r.set_config("virtualized", s.virtualized);
}

/// The VM's wall time and each thread's end and CPU time.
fn timing(spec: &VmSpec, o: &VmOutcome) -> Timing {
    Timing {
        wall_ns: o.wall_ns,
        total_ns: None,
        threads: o
            .threads
            .iter()
            .map(|&(g, index, end, cpu)| ThreadTiming {
                group: spec
                    .program
                    .groups
                    .get(g as usize)
                    .map(|g| g.name.clone())
                    .unwrap_or_default(),
                index,
                wall_ns: end,
                cpu_ns: cpu,
            })
            .collect(),
        window: None,
    }
}

/// What only the simulator knows: exits by reason, the accounting of every
/// vCPU's and pCPU's time by cause, and its bare-metal reference.
fn sim_section(
    s: &Scenario,
    out: &RunOutcome,
    k: usize,
    spec: &VmSpec,
    o: &VmOutcome,
    native: Option<&crate::NativeRef>,
    host_seconds: f64,
) -> SimSection {
    SimSection {
        platform: s.platform.name.clone(),
        policy: s.policy.label(),
        seed: s.seed,
        pcpus: s.pcpus,
        vms: u32::try_from(s.vms.len()).unwrap_or(u32::MAX),
        vm_index: u32::try_from(k).unwrap_or(u32::MAX),
        vcpus: spec.vcpus,
        exits: if s.virtualized {
            exit::NAMES
                .iter()
                .zip(o.exits)
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        } else {
            Default::default()
        },
        spin_ns: o.spin_ns,
        idle_ns: o.idle_ns,
        steal_ns: o.steal_ns,
        native_wall_ns: native.map(|n| n.wall_ns),
        events: out.events,
        sim_host_seconds: host_seconds,
        virtualized: s.virtualized,
        simulated_ns: out.end_ns,
        ipis: o.ipis,
        migrations: o.migrations,
        warmup_ns: o.warmup_ns,
        device_wait_ns: o.device_wait_ns,
        vcpu_time_ns: breakdown::to_map(&o.by_cause),
        native_time_ns: native
            .map(|n| breakdown::to_map(&n.by_cause))
            .unwrap_or_default(),
        native_cores: native.map_or(0, |n| n.cores),
        pcpu_time_ns: {
            let mut m = breakdown::to_map(&out.pcpu_by_cause);
            m.insert(
                "pcpu_idle".into(),
                out.pcpu_totals.iter().map(|&(_, idle)| idle).sum(),
            );
            m
        },
    }
}
