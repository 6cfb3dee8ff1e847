//! The winners table of a stored parameter matrix: per executor and
//! workload, the best static setting, the runner-up, the default and the
//! worst, by median throughput.

use super::{median_or_nan as median, spread, throughput};
use serde::{Deserialize, Serialize};
use smplab_experiment::store::{Entry, Store};
use smplab_record::config::{
    GuestSettings, HostPolicy, IrqAffinity, Placement, RunConfig, SyncMode, VmSettings,
};
use smplab_record::Executor;
use std::collections::BTreeMap;
use std::fmt;

/// One configuration of a stored matrix: its runs' throughputs (VM runs per
/// second, summed over the VMs of a run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    pub executor: Executor,
    pub workload: String,
    pub setting: Setting,
    pub throughput: Vec<f64>,
}

impl Cell {
    /// The executor column: `host` for a host run (smplab-vmm's VMs under a
    /// host policy), else the executor's name.
    pub fn executor_column(&self) -> String {
        match self.setting {
            Setting::Host(_) => "host".to_string(),
            _ => self.executor.to_string(),
        }
    }
}

/// What a cell varies: Kulkarni & Kulkarni's three parameters (time slice, vCPU
/// affinity, interrupt affinity) of a simulated point or of a host run, or
/// any other stored configuration as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Setting {
    /// A simulated point of the matrix.
    Sim {
        /// The policy's slice; `None`: the platform's default.
        slice_ns: Option<u64>,
        placement: Placement,
        irq: IrqAffinity,
    },
    /// A host run of `smplab tune host-matrix`.
    Host(HostSetting),
    /// Any other configuration.
    Config(RunConfig),
}

/// One configuration of the Kulkarni & Kulkarni matrix on the real multi-VM host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostSetting {
    pub policy: HostPolicy,
    /// vCPU i of every VM on host CPU i: the vCPU threads' affinity under
    /// `linux`, the scheduler's per-vCPU affinity under a user-level policy.
    pub pinned: bool,
    pub irq: IrqAffinity,
    /// Kulkarni & Kulkarni's tuner sets the slice at run time, starting from the
    /// policy's (its long one).
    pub tuner: bool,
}

impl fmt::Display for HostSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slice_us = self
            .policy
            .time_slice_ns
            .unwrap_or(smplab_policy::DEFAULT_SLICE_NS)
            / 1000;
        if self.tuner {
            return write!(f, "tuner from {slice_us} us, floating, irq {}", self.irq);
        }
        let aff = if self.pinned { "pinned" } else { "floating" };
        if self.policy.is_user_level() {
            write!(f, "slice {slice_us} us, {aff}, irq {}", self.irq)
        } else {
            write!(f, "slice linux, {aff}, irq {}", self.irq)
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Sim {
                slice_ns,
                placement,
                irq,
            } => {
                match slice_ns {
                    Some(ns) => write!(f, "slice {} us, ", ns / 1000)?,
                    None => write!(f, "slice default, ")?,
                }
                match placement {
                    Placement::Float => write!(f, "floating")?,
                    Placement::Spread => write!(f, "pinned")?,
                    p => write!(f, "cpus {p}")?,
                }
                write!(f, ", irq {irq}")
            }
            Setting::Host(h) => h.fmt(f),
            Setting::Config(c) => c.fmt(f),
        }
    }
}

impl Setting {
    /// The setting of a stored run configuration.
    pub fn of(c: &RunConfig) -> Setting {
        match c {
            RunConfig::Sim(s) => Setting::Sim {
                slice_ns: s.policy.time_slice_ns,
                placement: s.placement.clone(),
                irq: s.irq_affinity.clone(),
            },
            RunConfig::Vm(v) => match v.host_policy {
                Some(policy) => Setting::Host(HostSetting {
                    policy,
                    pinned: v.host_pinned.unwrap_or(!policy.is_user_level()),
                    irq: v.guest.irq_affinity.clone(),
                    tuner: v.host_tuner,
                }),
                None => Setting::Config(c.clone()),
            },
            other => Setting::Config(other.clone()),
        }
    }

    /// The default of its executor's matrix: the simulator's platform slice
    /// with floating vCPUs, and `smplab host`'s stock `linux` pinning;
    /// interrupts to vCPU 0.
    pub fn is_default(&self) -> bool {
        match self {
            Setting::Sim {
                slice_ns,
                placement,
                irq,
            } => {
                slice_ns.is_none()
                    && *placement == Placement::Float
                    && *irq == IrqAffinity::default()
            }
            Setting::Host(h) => {
                !h.policy.is_user_level() && h.pinned && !h.tuner && h.irq == IrqAffinity::default()
            }
            Setting::Config(_) => false,
        }
    }
}

impl HostSetting {
    /// The host run of `setting` on `host_cpus`: 2 VMs x 2 vCPUs, the
    /// pinning explicit only where it is not the policy's default (so one
    /// configuration has one store key).
    pub fn run_config(&self, host_cpus: &[usize]) -> RunConfig {
        let guest = GuestSettings {
            placement: Placement::Cpus(host_cpus.to_vec()),
            vms: 2,
            irq_affinity: self.irq.clone(),
            ..GuestSettings::new(2)
        };
        let default_pinned = !self.policy.is_user_level();
        RunConfig::Vm(VmSettings {
            host_policy: Some(self.policy),
            host_pinned: (self.pinned != default_pinned).then_some(self.pinned),
            host_tuner: self.tuner,
            ..VmSettings::new(guest, SyncMode::default())
        })
    }
}

/// Group a store's finished runs by executor, workload and setting.
pub fn cells(stores: &[Store]) -> Vec<Cell> {
    let entries: Vec<&Entry> = stores.iter().flat_map(Store::latest).collect();
    cells_of(&entries)
}

/// Σ over a run's VMs of 1 / wall time: a host run's walls from the shared
/// start gate's "go" to each guest's "done" on the host clock (time a VM
/// waited for a pCPU counts), any other run's the record's wall.
fn run_throughput(e: &Entry) -> f64 {
    match &e.point.config {
        RunConfig::Vm(v) if v.host_policy.is_some() => e
            .records
            .iter()
            .map(smplab_experiment::host::workload_wall_s)
            .filter(|s| *s > 0.0)
            .map(|s| 1.0 / s)
            .sum(),
        _ => throughput(&e.records),
    }
}

/// Group finished entries by executor, workload and setting.
pub fn cells_of(entries: &[&Entry]) -> Vec<Cell> {
    let mut map: BTreeMap<(Executor, String, String), Cell> = BTreeMap::new();
    for e in entries.iter().filter(|e| e.is_ok()) {
        let setting = Setting::of(&e.point.config);
        let executor = e.point.config.executor();
        map.entry((executor, e.point.workload.clone(), setting.to_string()))
            .or_insert_with(|| Cell {
                executor,
                workload: e.point.workload.clone(),
                setting,
                throughput: Vec::new(),
            })
            .throughput
            .push(run_throughput(e));
    }
    map.into_values().collect()
}

/// Settings within this fraction of the winner's median count as tied.
const TIE: f64 = 0.01;

/// The winners table: per executor and workload, the best setting, the
/// runner-up, the default and the worst, by median throughput.
pub fn winners_table(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    let mut groups: BTreeMap<(&str, String), Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        groups
            .entry((c.workload.as_str(), c.executor_column()))
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
            .find(|c| c.setting.is_default())
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

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_record::config::{PolicyKind, SimSettings};

    /// The user-level round robin (a real host's; `fair` is the
    /// simulator's kernel model).
    fn rr(slice: Option<u64>) -> HostPolicy {
        HostPolicy {
            kind: smplab_record::config::PolicyKind::RoundRobin,
            time_slice_ns: slice,
            safe_point_grace_ns: None,
        }
    }

    fn linux() -> HostPolicy {
        HostPolicy {
            kind: PolicyKind::Linux,
            ..HostPolicy::default()
        }
    }

    #[test]
    fn settings_print_as_the_table_always_did_and_read_back_from_the_store() {
        let mut s = SimSettings::new(2, "pvm-here");
        assert_eq!(
            Setting::of(&RunConfig::Sim(s.clone())).to_string(),
            "slice default, floating, irq 0"
        );
        assert!(Setting::of(&RunConfig::Sim(s.clone())).is_default());
        s.policy = HostPolicy::fair().with_slice(1_000_000);
        s.placement = Placement::Spread;
        s.irq_affinity = IrqAffinity::Balanced;
        assert_eq!(
            Setting::of(&RunConfig::Sim(s)).to_string(),
            "slice 1000 us, pinned, irq balanced"
        );
        let host = [
            (linux(), true, false, "slice linux, pinned, irq 0", true),
            (linux(), false, false, "slice linux, floating, irq 0", false),
            (
                rr(Some(4_000_000)),
                true,
                false,
                "slice 4000 us, pinned, irq 0",
                false,
            ),
            (
                rr(None),
                false,
                true,
                "tuner from 4000 us, floating, irq 0",
                false,
            ),
        ];
        for (policy, pinned, tuner, label, default) in host {
            let h = HostSetting {
                policy,
                pinned,
                irq: IrqAffinity::default(),
                tuner,
            };
            let setting = Setting::Host(h.clone());
            assert_eq!(setting.to_string(), label);
            assert_eq!(setting.is_default(), default, "{label}");
            // The host run it stands for reads back as the same setting.
            let config = h.run_config(&[0, 1]);
            assert_eq!(Setting::of(&config), setting, "{config}");
            let cell = Cell {
                executor: Executor::Vm,
                workload: "dedup".into(),
                setting,
                throughput: vec![1.0],
            };
            assert_eq!(cell.executor_column(), "host");
            let json = serde_json::to_string(&cell).expect("encodes");
            let back: Cell = serde_json::from_str(&json).expect("decodes");
            assert_eq!(back, cell);
        }
        // The policy's default pinning is left out of the configuration.
        assert!(!HostSetting {
            policy: linux(),
            pinned: true,
            irq: IrqAffinity::default(),
            tuner: false
        }
        .run_config(&[0, 1])
        .to_string()
        .contains("host-pinned"));
        let floating = HostSetting {
            policy: linux(),
            pinned: false,
            irq: IrqAffinity::default(),
            tuner: false,
        }
        .run_config(&[0, 1])
        .to_string();
        assert!(floating.contains("host-floating"), "{floating}");
    }
}
