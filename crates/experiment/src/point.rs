//! One point of an experiment: an executor, a workload and every parameter that
//! changes what runs, plus the repetition index. Its [`Point::key`] identifies it
//! in the results store, which is how a resumed sweep knows what is done.

use serde::{Deserialize, Serialize};
use smplab_record::config::{NativeSettings, RunConfig};
use smplab_record::Executor;

/// Which form of the workload runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum Variant {
    /// The profile as written.
    #[default]
    AsIs,
    /// `Program::spin_to_block()`: every spin wait replaced by a blocking one
    /// (Ding & Shan §IV-D, the "remove user-space spinning" factor).
    SpinToBlock,
}

impl Variant {
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::AsIs => "as-is",
            Variant::SpinToBlock => "spin-to-block",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "as-is" => Some(Variant::AsIs),
            "spin-to-block" => Some(Variant::SpinToBlock),
            _ => None,
        }
    }
}

/// A variant name that is not `as-is` or `spin-to-block`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown variant `{0}`; use as-is or spin-to-block")]
pub struct UnknownVariant(pub String);

impl std::str::FromStr for Variant {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Variant::parse(s.trim()).ok_or_else(|| UnknownVariant(s.to_string()))
    }
}

/// One run of a workload: what runs (workload, variant, size), how it runs
/// (the typed [`RunConfig`], which names the executor) and which repetition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Built-in profile name or path of a workload file; for a real program,
    /// its command line as a shell would show it (a label: `program` is the
    /// identity).
    pub workload: String,
    /// A real program's argv (`linux`, `linux-qemu`, `native`): what runs
    /// instead of a workload model; empty for a model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program: Vec<String>,
    #[serde(default)]
    pub variant: Variant,
    /// The workload's thread parameter `n`.
    pub threads: u32,
    pub scale: f64,
    /// The executor and its settings.
    pub config: RunConfig,
    /// Wall-clock limit of one run, seconds. Not part of the key: changing it
    /// does not make a finished result stale.
    pub timeout_s: u64,
    /// Repetition index, 0-based.
    pub rep: u32,
    /// A study tag that keeps points of one study (e.g. a diagnosis, whose
    /// configurations must be measured interleaved, at the same time) apart
    /// from identical configurations of other sweeps in the same store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub study: Option<String>,
    /// Busy host threads (floating) spinning while the point runs: pCPU
    /// contention from outside the measured VMs (`smplab bench io`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub busy_host_threads: u32,
}

/// The identity of a point's configuration: everything that changes what
/// runs, in its serde form.
#[derive(Serialize)]
struct ConfigIdentity<'a> {
    workload: &'a str,
    #[serde(skip_serializing_if = "no_program")]
    program: &'a [String],
    #[serde(skip_serializing_if = "is_as_is")]
    variant: Variant,
    n: u32,
    scale: f64,
    #[serde(flatten)]
    config: &'a RunConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    study: &'a Option<String>,
    #[serde(skip_serializing_if = "is_zero")]
    busy_host_threads: u32,
}

fn no_program(p: &&[String]) -> bool {
    p.is_empty()
}

/// `argv` as a shell would show it: arguments with spaces or shell
/// characters in single quotes.
pub fn command_line(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
            if plain {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn is_as_is(v: &Variant) -> bool {
    *v == Variant::AsIs
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Point {
    /// A point with default timeout, repetition 0 and no study tag.
    pub fn new(workload: impl Into<String>, threads: u32, scale: f64, config: RunConfig) -> Point {
        Point {
            workload: workload.into(),
            program: Vec::new(),
            variant: Variant::AsIs,
            threads,
            scale,
            config,
            timeout_s: smplab_record::config::DEFAULT_TIMEOUT.duration().as_secs(),
            rep: 0,
            study: None,
            busy_host_threads: 0,
        }
    }

    /// A point running the real program `argv` as `config` says. A program
    /// has no model parameters: `n` is 0 and `scale` 1 in its key.
    pub fn for_program(argv: Vec<String>, config: RunConfig) -> Point {
        let mut p = Point::new(command_line(&argv), 0, 1.0, config);
        p.program = argv;
        p
    }

    /// Whether the point runs a real program rather than a workload model.
    pub fn is_program(&self) -> bool {
        !self.program.is_empty()
    }

    pub fn executor(&self) -> Executor {
        self.config.executor()
    }

    /// vCPUs per VM (`None` for native).
    pub fn vcpus(&self) -> Option<u32> {
        self.config.vcpus()
    }

    /// VMs running at once (1 for native).
    pub fn vms(&self) -> u32 {
        self.config.vms()
    }

    /// The configuration without the repetition: points that differ only in
    /// `rep` are repetitions of one configuration. It is the serde form of the
    /// configuration (one JSON object, keys in a fixed order).
    pub fn config_key(&self) -> String {
        let id = ConfigIdentity {
            workload: &self.workload,
            program: &self.program,
            variant: self.variant,
            n: self.threads,
            scale: self.scale,
            config: &self.config,
            study: &self.study,
            busy_host_threads: self.busy_host_threads,
        };
        // Plain data with string keys: serialization cannot fail.
        serde_json::to_string(&id).unwrap_or_default()
    }

    /// Identity in the results store.
    pub fn key(&self) -> String {
        format!("{}#rep={}", self.config_key(), self.rep)
    }

    /// A short human label for tables and plots.
    pub fn label(&self) -> String {
        let mut s = format!("{} {}", self.executor(), self.workload);
        if self.variant != Variant::AsIs {
            s.push_str(" [spin→block]");
        }
        s.push_str(&format!(" n={}", self.threads));
        let settings = self.config.label();
        if !settings.is_empty() {
            s.push(' ');
            s.push_str(&settings);
        }
        if let Some(t) = &self.study {
            s.push_str(&format!(" ({t})"));
        }
        s
    }

    /// A native point with the same workload form and size: the baseline
    /// slowdown is measured against.
    pub fn native_twin(&self) -> Point {
        Point {
            workload: self.workload.clone(),
            program: self.program.clone(),
            variant: self.variant,
            threads: self.threads,
            scale: self.scale,
            config: RunConfig::Native(NativeSettings::default()),
            timeout_s: self.timeout_s,
            rep: 0,
            study: self.study.clone(),
            busy_host_threads: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::vm_point;

    #[test]
    fn keys_differ_by_rep_but_config_keys_do_not() {
        let a = vm_point("dedup", 2, 0);
        let b = vm_point("dedup", 2, 1);
        assert_ne!(a.key(), b.key());
        assert_eq!(a.config_key(), b.config_key());
        let mut c = a.clone();
        c.timeout_s = 999;
        assert_eq!(a.key(), c.key(), "timeout is not part of identity");
    }

    #[test]
    fn native_twin_drops_vm_parameters() {
        let t = vm_point("dedup", 2, 3).native_twin();
        assert_eq!(t.executor(), Executor::Native);
        assert_eq!(t.vcpus(), None);
        assert_eq!(t.threads, 2);
        assert_eq!(
            t.config_key(),
            r#"{"workload":"dedup","n":2,"scale":0.1,"executor":"native"}"#
        );
    }

    #[test]
    fn a_program_is_in_the_key_and_its_native_twin_runs_it_too() {
        use smplab_record::config::{LinuxGuestSettings, LinuxSettings, SyncMode};
        let argv: Vec<String> = ["pigz", "-p", "2", "-c", "my file"]
            .map(String::from)
            .into();
        let config = RunConfig::Linux(LinuxSettings {
            guest: LinuxGuestSettings::new(2),
            sync: SyncMode::Fine,
            irqchip: Default::default(),
        });
        let p = Point::for_program(argv.clone(), config);
        assert_eq!(p.workload, "pigz -p 2 -c 'my file'");
        assert_eq!(
            p.config_key(),
            r#"{"workload":"pigz -p 2 -c 'my file'","program":["pigz","-p","2","-c","my file"],"n":0,"scale":1.0,"executor":"linux","vcpus":2,"sync":"fine"}"#
        );
        let twin = p.native_twin();
        assert_eq!(twin.program, argv);
        assert_eq!(
            twin.config_key(),
            r#"{"workload":"pigz -p 2 -c 'my file'","program":["pigz","-p","2","-c","my file"],"n":0,"scale":1.0,"executor":"native"}"#
        );
        let back: Point = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
        // A model point's key has no program (existing keys unchanged).
        assert!(!vm_point("dedup", 2, 0).config_key().contains("program"));
        assert_eq!(command_line(&["it's".to_string()]), r"'it'\''s'");
    }

    #[test]
    fn busy_host_threads_are_in_the_key_only_when_there_are_some() {
        let a = vm_point("dedup", 2, 0);
        let mut b = a.clone();
        b.busy_host_threads = 1;
        assert!(!a.config_key().contains("busy_host_threads"));
        assert!(
            b.config_key().ends_with(r#","busy_host_threads":1}"#),
            "{}",
            b.config_key()
        );
        let back: Point = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
    }
}
