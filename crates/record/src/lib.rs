//! The smplab result record: one JSON document per run, the same for every
//! executor (native, vm, qemu, sim). Executor-specific detail lives in optional
//! sections (`vmm`, `guest`, `sim`), each in its own module so the crate that
//! fills a section owns its file.
//!
//! Compatibility rule: adding an optional field keeps [`SCHEMA_VERSION`];
//! renaming or removing one, or changing a meaning, bumps it.

pub mod amdahl;
pub mod config;
pub mod cpus;
pub mod diag;
pub mod exit;
pub mod guest;
pub mod histogram;
pub mod host;
pub mod hostsched;
pub mod interference;
pub mod io;
pub mod linux;
pub mod platform;
pub mod sim;
pub mod summary;
pub mod vmm;
pub mod window;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use histogram::LatencyHistogram;
pub use host::HostFacts;
pub use window::{overlap, overlap_of_records, WindowClock, WorkloadWindow};

/// Version of the record layout. Readers reject records with a newer major.
pub const SCHEMA_VERSION: u32 = 1;

/// Which executor produced a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    Native,
    Vm,
    Qemu,
    Sim,
    /// A Linux kernel on smplab-vmm running a real program.
    Linux,
    /// The same Linux kernel and initramfs on QEMU.
    #[serde(rename = "linux-qemu")]
    LinuxQemu,
}

impl Executor {
    /// Every executor, in the order reports list them (the report draws
    /// the i-th in the i-th series colour, cycling: Linux on smplab-vmm
    /// shares smplab-vmm's, Linux on QEMU QEMU's).
    pub const ALL: [Executor; 6] = [
        Executor::Vm,
        Executor::Qemu,
        Executor::Sim,
        Executor::Native,
        Executor::Linux,
        Executor::LinuxQemu,
    ];

    /// What a reader calls the executor (reports, charts).
    pub fn reader_name(self) -> &'static str {
        match self {
            Executor::Native => "native",
            Executor::Vm => "smplab-vmm",
            Executor::Qemu => "QEMU",
            Executor::Sim => "simulator",
            Executor::Linux => "Linux on smplab-vmm",
            Executor::LinuxQemu => "Linux on QEMU",
        }
    }

    /// Whether the executor runs a real VM on this host (as opposed to
    /// native threads or the simulator's model of one).
    pub fn is_real_vm(self) -> bool {
        match self {
            Executor::Vm | Executor::Qemu | Executor::Linux | Executor::LinuxQemu => true,
            Executor::Native | Executor::Sim => false,
        }
    }

    /// Every executor that runs (or models) a VM, in report order.
    pub fn virtualized() -> impl Iterator<Item = Executor> {
        Executor::ALL.into_iter().filter(|&e| e != Executor::Native)
    }

    /// The executor's name on the command line and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            Executor::Native => "native",
            Executor::Vm => "vm",
            Executor::Qemu => "qemu",
            Executor::Sim => "sim",
            Executor::Linux => "linux",
            Executor::LinuxQemu => "linux-qemu",
        }
    }
}

/// An executor name that is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown executor `{0}`; use native, vm, qemu, sim, linux or linux-qemu")]
pub struct UnknownExecutor(pub String);

impl std::str::FromStr for Executor {
    type Err = UnknownExecutor;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let name = s.trim();
        Executor::ALL
            .into_iter()
            .find(|e| e.as_str() == name)
            .ok_or_else(|| UnknownExecutor(s.to_string()))
    }
}

impl std::fmt::Display for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Outcome {
    #[default]
    Ok,
    /// The run did not complete; `reason` says why in words a user can act on.
    Failed { reason: String },
}

/// The workload that ran and the parameters it was instantiated with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct WorkloadInfo {
    /// Built-in profile name or the file's workload name.
    pub name: String,
    /// Source: `builtin` or the path of the TOML file.
    pub source: String,
    /// The `n` the workload was instantiated with (`--threads`).
    pub n: u32,
    /// Total threads the instantiated program runs.
    pub threads: u32,
    /// Any other parameters (scale, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, serde_json::Value>,
}

impl WorkloadInfo {
    /// Source of a real program's record (`source`).
    pub const PROGRAM_SOURCE: &'static str = "program";

    /// How a record names a real program: `name` its file name, `source`
    /// [`Self::PROGRAM_SOURCE`], the whole argv in `params.argv` (the
    /// program's identity: the same program with other arguments is another
    /// workload). A program has no model parameters: `n` and `threads` are 0.
    pub fn for_program(argv: &[String]) -> WorkloadInfo {
        let name = argv
            .first()
            .map(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map_or_else(|| p.clone(), |f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        let mut params = BTreeMap::new();
        params.insert("argv".to_string(), serde_json::json!(argv));
        WorkloadInfo {
            name,
            source: Self::PROGRAM_SOURCE.to_string(),
            n: 0,
            threads: 0,
            params,
        }
    }

    /// The argv of a real program's record.
    pub fn program_argv(&self) -> Option<Vec<String>> {
        if self.source != Self::PROGRAM_SOURCE {
            return None;
        }
        serde_json::from_value(self.params.get("argv")?.clone()).ok()
    }
}

/// Per-thread timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ThreadTiming {
    /// Thread group name.
    pub group: String,
    /// Index of the thread within its group.
    pub index: u32,
    /// Wall time from the thread's start to its end, in nanoseconds.
    pub wall_ns: u64,
    /// CPU time the thread consumed, in nanoseconds (guest: time it was running
    /// on a vCPU, measured with rdtsc; sim: simulated running time).
    pub cpu_ns: u64,
}

/// Timings of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Timing {
    /// Wall time of the workload itself: from the first workload thread's
    /// first clock read after the start gate opened to the last thread's clock
    /// read after its last op. Every executor creates all threads before the
    /// gate opens, so thread creation is outside it.
    pub wall_ns: u64,
    /// Wall time of the whole run including set-up (VM boot, ...), if different.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
    pub threads: Vec<ThreadTiming>,
    /// When the workload ran, on a clock runs on one host share (docs/record.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<window::WorkloadWindow>,
}

/// Counters every executor fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Counters {
    /// Executed operations by kind (`compute`, `compute_iters`, `touch`,
    /// `touch_bytes`, `spin_lock`, `mutex_lock`, `barrier`, `push`, `pop`, `atomic`,
    /// `sleep`, `yield`, `shootdown`). Must equal the program's static counts.
    pub ops: BTreeMap<String, u64>,
    /// Iterations spent in spin loops (spin locks, spinning barrier/mutex phases).
    pub spin_iterations: u64,
    /// Times a thread blocked (futex wait or guest wait).
    pub blocks: u64,
    /// Wake-ups issued to blocked threads.
    pub wakeups: u64,
    /// Voluntary context switches (native: getrusage; guest: its scheduler).
    pub context_switches_voluntary: u64,
    /// Involuntary context switches (preemptions).
    pub context_switches_involuntary: u64,
}

/// One run of one workload on one executor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub schema_version: u32,
    /// Version of smplab that produced the record.
    pub smplab_version: String,
    pub executor: Executor,
    pub workload: WorkloadInfo,
    /// The run configuration as given: the executor's typed settings
    /// (`config::RunConfig`'s serde form). `None` in records of tools that
    /// run no workload configuration (`smplab vmm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<config::RunConfig>,
    /// What the executor resolved or chose itself (effective timer tick,
    /// guest memory, QEMU binary, lab point key, ...).
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
    pub host: HostFacts,
    /// Seconds since the Unix epoch when the run started.
    pub started_at_unix: u64,
    pub outcome: Outcome,
    pub timing: Timing,
    pub counters: Counters,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmm: Option<vmm::VmmSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<guest::GuestSection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<sim::SimSection>,
    /// Device-request latencies, when the workload ran `io` ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<io::IoSection>,
    /// A host run's section (`smplab host`, or a `vm` run with a host
    /// policy): the scheduler's view of every VM of the run, the same in each
    /// of their records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_run: Option<hostsched::HostReport>,
    /// A real program's run (`linux`, `linux-qemu`, or `native` running a
    /// program): the init's timing of it, its exit and output, the boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linux: Option<linux::LinuxSection>,
    /// What other tenants took from the host while the run was measured
    /// (steal, CPU pressure, other processes' CPU time), from its start to
    /// its end, set-up included. Absent for the simulator and old records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interference: Option<interference::Interference>,
}

/// Errors reading a record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a smplab result record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("result record has schema version {found}, this smplab reads up to {SCHEMA_VERSION}; upgrade smplab")]
    TooNew { found: u32 },
}

impl RunRecord {
    /// A fresh record for `executor`, with host facts read now.
    pub fn new(executor: Executor, workload: WorkloadInfo) -> Self {
        RunRecord {
            schema_version: SCHEMA_VERSION,
            smplab_version: env!("CARGO_PKG_VERSION").to_string(),
            executor,
            workload,
            run: None,
            config: BTreeMap::new(),
            host: HostFacts::detect(),
            started_at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            outcome: Outcome::Ok,
            timing: Timing::default(),
            counters: Counters::default(),
            vmm: None,
            guest: None,
            sim: None,
            io: None,
            host_run: None,
            linux: None,
            interference: None,
        }
    }

    /// Record a configuration parameter.
    pub fn set_config(&mut self, key: &str, value: impl Into<serde_json::Value>) {
        self.config.insert(key.to_string(), value.into());
    }

    pub fn to_json_pretty(&self) -> String {
        // Serialization of plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Result<Self, RecordError> {
        let value: serde_json::Value = serde_json::from_str(text)?;
        let found = value
            .get("schema_version")
            .and_then(|v| v.as_u64())
            // Saturate: a huge version must read as "too new", not wrap to an old one.
            .map_or(0, |v| u32::try_from(v).unwrap_or(u32::MAX));
        if found > SCHEMA_VERSION {
            return Err(RecordError::TooNew { found });
        }
        Ok(serde_json::from_value(value)?)
    }

    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_json() {
        let mut r = RunRecord::new(
            Executor::Native,
            WorkloadInfo {
                name: "spinlock".into(),
                source: "builtin".into(),
                n: 2,
                threads: 2,
                params: BTreeMap::new(),
            },
        );
        r.counters.ops.insert("spin_lock".into(), 42);
        r.set_config("pin", "0,1");
        let text = r.to_json_pretty();
        let back = RunRecord::from_json(&text).expect("round trip");
        assert_eq!(back, r);
        assert!(text.contains("\"schema_version\": 1"));
    }

    #[test]
    fn a_program_is_named_by_its_argv() {
        let argv: Vec<String> = ["/usr/bin/pigz", "-p", "2"].map(String::from).into();
        let w = WorkloadInfo::for_program(&argv);
        assert_eq!(w.name, "pigz");
        assert_eq!(w.program_argv(), Some(argv));
        let back: WorkloadInfo = serde_json::from_str(&serde_json::to_string(&w).unwrap()).unwrap();
        assert_eq!(back, w);
        assert_eq!(WorkloadInfo::default().program_argv(), None);
        for e in Executor::ALL {
            assert_eq!(e.as_str().parse::<Executor>(), Ok(e));
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.as_str()));
        }
    }

    #[test]
    fn newer_schema_is_rejected_with_advice() {
        let mut r = RunRecord::new(Executor::Sim, WorkloadInfo::default());
        r.schema_version = SCHEMA_VERSION + 1;
        let err = RunRecord::from_json(&r.to_json_line()).unwrap_err();
        assert!(err.to_string().contains("upgrade smplab"));
    }
}
