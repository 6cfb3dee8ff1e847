//! One point of an experiment: an executor, a workload and every parameter that
//! changes what runs, plus the repetition index. Its [`Point::key`] identifies it
//! in the results store, which is how a resumed sweep knows what is done.

use serde::{Deserialize, Serialize};
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
    /// (seed 000 §IV-D, the "remove user-space spinning" factor).
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

/// Parameters of one run. Fields an executor does not use are `None` so that,
/// e.g., a native point does not multiply over vCPU counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub executor: Executor,
    /// Built-in profile name or path of a workload file.
    pub workload: String,
    #[serde(default)]
    pub variant: Variant,
    /// The workload's thread parameter `n`.
    pub threads: u32,
    pub scale: f64,
    /// `none`, `pinned`, or a CPU list such as `0,1`.
    pub pin: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<u32>,
    /// VMs (or simulated VMs) running the workload at the same time.
    pub vms: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ple: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apicv: Option<bool>,
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
}

impl Point {
    /// The configuration without the repetition: points that differ only in
    /// `rep` are repetitions of one configuration.
    pub fn config_key(&self) -> String {
        let mut k = format!(
            "{}/{}/{}/n={}/scale={}/pin={}/vms={}",
            self.executor,
            self.workload,
            self.variant.as_str(),
            self.threads,
            self.scale,
            self.pin,
            self.vms
        );
        let opt = |k: &mut String, name: &str, v: Option<String>| {
            if let Some(v) = v {
                k.push_str(&format!("/{name}={v}"));
            }
        };
        opt(&mut k, "vcpus", self.vcpus.map(|v| v.to_string()));
        opt(&mut k, "sync", self.sync.clone());
        opt(&mut k, "idle", self.idle.clone());
        opt(&mut k, "platform", self.platform.clone());
        opt(&mut k, "ple", self.ple.map(|v| v.to_string()));
        opt(&mut k, "apicv", self.apicv.map(|v| v.to_string()));
        opt(&mut k, "study", self.study.clone());
        k
    }

    /// Identity in the results store.
    pub fn key(&self) -> String {
        format!("{}/rep={}", self.config_key(), self.rep)
    }

    /// A short human label for tables and plots.
    pub fn label(&self) -> String {
        let mut s = format!("{} {}", self.executor, self.workload);
        if self.variant != Variant::AsIs {
            s.push_str(" [spin→block]");
        }
        if let Some(v) = self.vcpus {
            s.push_str(&format!(" {v}vcpu"));
        }
        s.push_str(&format!(" n={}", self.threads));
        if self.vms > 1 {
            s.push_str(&format!(" ×{}vm", self.vms));
        }
        for v in [&self.sync, &self.idle, &self.platform]
            .into_iter()
            .flatten()
        {
            s.push_str(&format!(" {v}"));
        }
        if self.pin != "none" {
            s.push_str(&format!(" pin={}", self.pin));
        }
        if self.ple == Some(false) {
            s.push_str(" ple-off");
        }
        if self.apicv == Some(true) {
            s.push_str(" apicv");
        }
        if let Some(t) = &self.study {
            s.push_str(&format!(" ({t})"));
        }
        s
    }

    /// A native point with the same workload form, size and pinning: the
    /// baseline slowdown is measured against.
    pub fn native_twin(&self) -> Point {
        Point {
            executor: Executor::Native,
            workload: self.workload.clone(),
            variant: self.variant,
            threads: self.threads,
            scale: self.scale,
            pin: "none".into(),
            vcpus: None,
            vms: 1,
            sync: None,
            idle: None,
            platform: None,
            ple: None,
            apicv: None,
            timeout_s: self.timeout_s,
            rep: 0,
            study: self.study.clone(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn vm_point(workload: &str, vcpus: u32, rep: u32) -> Point {
        Point {
            executor: Executor::Vm,
            workload: workload.into(),
            variant: Variant::AsIs,
            threads: vcpus,
            scale: 0.1,
            pin: "none".into(),
            vcpus: Some(vcpus),
            vms: 1,
            sync: Some("global".into()),
            idle: Some("hlt".into()),
            platform: None,
            ple: None,
            apicv: None,
            timeout_s: 60,
            rep,
            study: None,
        }
    }

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
        assert_eq!(t.executor, Executor::Native);
        assert_eq!(t.vcpus, None);
        assert_eq!(t.threads, 2);
        assert_eq!(
            t.config_key(),
            "native/dedup/as-is/n=2/scale=0.1/pin=none/vms=1"
        );
    }
}
