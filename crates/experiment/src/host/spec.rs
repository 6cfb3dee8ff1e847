//! The host spec of `smplab host --spec host.toml` (docs/host.md): K VMs of
//! the smplab guest on a set of host CPUs under one policy. Every problem is
//! reported at file:line:col.

use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_policy::tune::VcpuAffinity;
use smplab_record::config::{
    Decider, GuestSettings, HostPolicy, IdlePolicy, IrqAffinity, RunConfig, SyncMode, VmSettings,
};
use smplab_record::diag::{Diagnostics, SourceText};
use smplab_vmm::host::{Sampling, MAX_HOST_VCPUS};
use smplab_workload::{Program, Source};
use std::time::Duration;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    cpus: Spanned<String>,
    #[serde(default)]
    policy: Option<Spanned<String>>,
    /// Sampling interval of the scheduler (e.g. `1ms`).
    #[serde(default)]
    sample: Option<Spanned<String>>,
    #[serde(default)]
    detect_spin: Option<bool>,
    #[serde(default)]
    timeout: Option<Spanned<String>>,
    /// `linux` only: pin vCPU i to `cpus[i % n]` (default) or let the host
    /// kernel float the vCPU threads over `cpus`.
    #[serde(default)]
    pin: Option<Spanned<bool>>,
    /// Seed 001's tuner sets the slice at run time (user-level policies).
    #[serde(default)]
    tune: Option<Spanned<bool>>,
    /// User-level policies: `pinned` (vCPU i of every VM on `cpus[i % n]`)
    /// or `floating` (default), the scheduler's per-vCPU affinity.
    #[serde(default)]
    vcpu_affinity: Option<Spanned<String>>,
    #[serde(default)]
    vm: Vec<Spanned<RawVm>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVm {
    workload: Spanned<String>,
    #[serde(default)]
    vcpus: Option<Spanned<u32>>,
    #[serde(default)]
    threads: Option<Spanned<u32>>,
    #[serde(default)]
    scale: Option<Spanned<f64>>,
    #[serde(default)]
    sync: Option<Spanned<String>>,
    #[serde(default)]
    idle: Option<Spanned<String>>,
    /// This many identical VMs.
    #[serde(default)]
    count: Option<Spanned<u32>>,
    /// Extra guest command-line words (docs/guest-abi.md), e.g. `selftest=hang`.
    #[serde(default)]
    cmdline: Option<String>,
    /// The guest IOAPIC's routing of device interrupts (Kulkarni & Kulkarni).
    #[serde(default)]
    irq_affinity: Option<Spanned<String>>,
}

/// One VM of the host.
#[derive(Debug, Clone)]
pub struct HostVm {
    pub workload: String,
    pub program: Program,
    pub info: smplab_record::WorkloadInfo,
    pub vcpus: u32,
    pub sync: SyncMode,
    pub idle: IdlePolicy,
    /// Extra guest command-line words.
    pub cmdline: String,
    /// Routing of the VM's device interrupts by its IOAPIC (a vCPU, a set
    /// or `balanced`; `running` is the simulator's only).
    pub irq_affinity: IrqAffinity,
}

impl HostVm {
    /// A VM of 2 vCPUs running a built-in profile (or workload file) with
    /// `threads` threads at `scale`, the other settings at their defaults:
    /// the VMs the host bench and the Kulkarni & Kulkarni host matrix compare.
    pub fn two_vcpus(
        workload: &str,
        threads: u32,
        scale: f64,
        irq_affinity: IrqAffinity,
    ) -> Result<HostVm, String> {
        let source = Source::resolve(workload).map_err(|e| e.to_string())?;
        let program = source
            .instantiate(Some(threads), scale)
            .map_err(|e| e.to_string())?;
        Ok(HostVm {
            workload: workload.to_string(),
            info: source.workload_info(&program),
            program,
            vcpus: 2,
            sync: SyncMode::default(),
            idle: IdlePolicy::default(),
            cmdline: String::new(),
            irq_affinity,
        })
    }
}

/// A checked host spec.
#[derive(Debug, Clone)]
pub struct HostSpec {
    pub cpus: Vec<usize>,
    pub policy: HostPolicy,
    pub sampling: Sampling,
    pub timeout: Duration,
    /// `linux`: vCPU threads pinned to `cpus[i % n]` (true) or floating.
    pub pin: bool,
    /// Seed 001's tuner adapts the slice (`host::tuned`).
    pub tune: bool,
    /// User-level policies: the vCPUs' affinity from the start (the tuner
    /// may change it).
    pub vcpu_affinity: VcpuAffinity,
    pub vms: Vec<HostVm>,
}

/// Default limit for the whole host run: the one default time limit.
pub const DEFAULT_TIMEOUT: Duration = smplab_record::config::DEFAULT_TIMEOUT.duration();

/// Parse and check a host spec; `file` names it in messages.
pub fn parse(file: &str, text: &str) -> Result<HostSpec, Diagnostics> {
    let src = SourceText::new(file, text);
    let mut d = Diagnostics::default();
    let raw: RawSpec = match toml::from_str(text) {
        Ok(r) => r,
        Err(e) => {
            d.push(src.parse_error(e.span(), e.message()));
            return Err(d);
        }
    };
    let cpus = host_cpus(&src, &raw, &mut d);
    let policy = match &raw.policy {
        None => HostPolicy::parse("linux").unwrap_or_default(),
        Some(p) => match p.get_ref().parse::<HostPolicy>() {
            Ok(policy) if policy.kind.decider() == Decider::SimulatedKernel => {
                d.push(src.span(
                    p.span(),
                    format!(
                        "`{policy}` is the simulator's model of a kernel scheduler: a real host runs `linux` (its kernel decides) or a user-level policy such as `rr`"
                    ),
                ));
                policy
            }
            Ok(policy) => policy,
            Err(e) => {
                d.push(src.span(p.span(), format!("{e}")));
                HostPolicy::default()
            }
        },
    };
    let (sampling, timeout) = timing(&src, &raw, &mut d);
    let vms = vms(&src, &raw, &policy, cpus.len(), &mut d);
    let pin = raw.pin.as_ref().is_none_or(|p| *p.get_ref());
    if let Some(p) = &raw.pin {
        if policy.is_user_level() {
            d.push(src.span(
                p.span(),
                "pin is the linux policy's: under a user-level policy use vcpu_affinity = \"pinned\" or \"floating\"",
            ));
        }
    }
    let tune = raw.tune.as_ref().is_some_and(|t| *t.get_ref());
    if let Some(t) = &raw.tune {
        if *t.get_ref() && !policy.is_user_level() {
            d.push(src.span(
                t.span(),
                "tune = true sets the user-level scheduler's slice: use a policy such as rr or spin, not linux",
            ));
        }
    }
    let vcpu_affinity = vcpu_affinity(&src, &raw, policy.is_user_level(), &mut d);
    d.into_result(HostSpec {
        cpus,
        policy,
        sampling,
        timeout,
        pin,
        tune,
        vcpu_affinity,
        vms,
    })
}

/// The host CPUs the VMs run on: a non-empty list of CPUs this process may use.
fn host_cpus(src: &SourceText<'_>, raw: &RawSpec, d: &mut Diagnostics) -> Vec<usize> {
    match smplab_record::cpus::parse_cpu_list(raw.cpus.get_ref()) {
        Ok(c) if c.is_empty() => {
            d.push(src.span(raw.cpus.span(), "name at least one host CPU"));
            Vec::new()
        }
        // A CPU this host lacks is found when the run starts
        // (`HostRunError::NoSuchCpu`, status 5), as for `smplab run`.
        Ok(c) => c,
        Err(e) => {
            d.push(src.span(raw.cpus.span(), e.to_string()));
            Vec::new()
        }
    }
}

/// The sampling of the user-level scheduler and the limit of the whole run.
fn timing(src: &SourceText<'_>, raw: &RawSpec, d: &mut Diagnostics) -> (Sampling, Duration) {
    let mut sampling = Sampling::default();
    if let Some(s) = &raw.sample {
        match smplab_record::config::parse_duration(s.get_ref()) {
            Ok(ns) if ns >= 100_000 => sampling.interval = Duration::from_nanos(ns),
            Ok(_) => d.push(src.span(
                s.span(),
                "a sampling interval below 100us costs more in exits than it can save: use 100us or more",
            )),
            Err(e) => d.push(src.span(s.span(), e.to_string())),
        }
    }
    if let Some(on) = raw.detect_spin {
        sampling.detect_spin = on;
    }
    let timeout = match &raw.timeout {
        None => DEFAULT_TIMEOUT,
        Some(t) => match smplab_record::config::parse_duration(t.get_ref()) {
            Ok(ns) if ns >= 1_000_000_000 => Duration::from_nanos(ns),
            Ok(_) => {
                d.push(src.span(t.span(), "the timeout must be at least 1s"));
                DEFAULT_TIMEOUT
            }
            Err(e) => {
                d.push(src.span(t.span(), e.to_string()));
                DEFAULT_TIMEOUT
            }
        },
    };
    (sampling, timeout)
}

/// The VMs, `count` of each `[[vm]]`, within the VMM's vCPU limit and, for
/// a user-level policy, what the scheduler accepts on `cpus` host CPUs.
fn vms(
    src: &SourceText<'_>,
    raw: &RawSpec,
    policy: &HostPolicy,
    cpus: usize,
    d: &mut Diagnostics,
) -> Vec<HostVm> {
    let mut vms = Vec::new();
    if raw.vm.is_empty() {
        d.push(src.at(0, "no VMs: add at least one [[vm]] table"));
    }
    for raw_vm in &raw.vm {
        if let Some(vm) = parse_vm(src, raw_vm.get_ref(), policy, d) {
            let count = raw_vm.get_ref().count.as_ref().map_or(1, |c| *c.get_ref());
            vms.extend(std::iter::repeat_n(vm, count as usize));
        }
    }
    let total: u32 = vms.iter().map(|v| v.vcpus).sum();
    if total > MAX_HOST_VCPUS {
        d.push(src.span(
            raw.vm[0].span(),
            format!("{total} vCPUs in all: this VMM serves at most {MAX_HOST_VCPUS} per host"),
        ));
    }
    if d.is_empty() && policy.is_user_level() {
        let per_vm: Vec<u32> = vms.iter().map(|v| v.vcpus).collect();
        if let Err(e) = smplab_policy::Scheduler::new(policy, &per_vm, cpus) {
            let at = raw.policy.as_ref().map_or(0, |p| p.span().start);
            d.push(src.at(at, e.to_string()));
        }
    }
    vms
}

/// The vCPUs' affinity under a user-level scheduler: floating or pinned.
fn vcpu_affinity(
    src: &SourceText<'_>,
    raw: &RawSpec,
    user_level: bool,
    d: &mut Diagnostics,
) -> VcpuAffinity {
    match &raw.vcpu_affinity {
        None => VcpuAffinity::Floating,
        Some(a) => match (a.get_ref().as_str(), user_level) {
            ("floating", _) => VcpuAffinity::Floating,
            ("pinned", true) => VcpuAffinity::Pinned,
            ("pinned", false) => {
                d.push(src.span(
                    a.span(),
                    "vcpu_affinity is the user-level scheduler's: under linux use pin = true",
                ));
                VcpuAffinity::Floating
            }
            _ => {
                d.push(src.span(a.span(), "use pinned or floating"));
                VcpuAffinity::Floating
            }
        },
    }
}

fn parse_vm(
    src: &SourceText<'_>,
    raw: &RawVm,
    policy: &HostPolicy,
    d: &mut Diagnostics,
) -> Option<HostVm> {
    let before = d.len();
    fn setting<T>(src: &SourceText<'_>, value: &Option<Spanned<String>>, d: &mut Diagnostics) -> T
    where
        T: std::str::FromStr + Default,
        T::Err: std::fmt::Display,
    {
        match value {
            None => T::default(),
            Some(s) => s.get_ref().parse().unwrap_or_else(|e| {
                d.push(src.span(s.span(), format!("{e}")));
                T::default()
            }),
        }
    }
    let vcpus = raw.vcpus.as_ref().map_or(2, |v| *v.get_ref());
    let sync: SyncMode = setting(src, &raw.sync, d);
    let idle: IdlePolicy = setting(src, &raw.idle, d);
    let irq_affinity: IrqAffinity = setting(src, &raw.irq_affinity, d);
    let scale = raw.scale.as_ref().map_or(1.0, |s| *s.get_ref());
    if let Some(s) = &raw.scale {
        if !(scale.is_finite() && scale > 0.0) {
            d.push(src.span(s.span(), "give a positive scale"));
        }
    }
    let name = raw.workload.get_ref();
    let program = match Source::resolve(name) {
        Ok(source) => match source.instantiate(raw.threads.as_ref().map(|t| *t.get_ref()), scale) {
            Ok(p) => Some((source.workload_info(&p), p)),
            Err(e) => {
                d.push(src.span(raw.workload.span(), e.to_string()));
                None
            }
        },
        Err(e) => {
            d.push(src.span(raw.workload.span(), e.to_string()));
            None
        }
    };
    // The one validation of a VM's settings: the run configuration's, as
    // the lab's host runs (`vm` with a host policy) are checked.
    let config = RunConfig::Vm(VmSettings {
        host_policy: Some(*policy),
        ..VmSettings::new(
            GuestSettings {
                idle,
                vms: raw.count.as_ref().map_or(1, |c| *c.get_ref()),
                irq_affinity: irq_affinity.clone(),
                ..GuestSettings::new(vcpus)
            },
            sync,
        )
    });
    let threads = program.as_ref().map(|(_, p)| p.total_threads());
    if let Err(problems) = config.validate(threads) {
        // The policy is the spec's, checked (and located) once above, not
        // once per VM.
        for e in problems.into_iter().filter(|e| e.setting != "host_policy") {
            let span = match e.setting {
                "vcpus" => raw.vcpus.as_ref().map(Spanned::span),
                "vms" => raw.count.as_ref().map(Spanned::span),
                "idle" => raw.idle.as_ref().map(Spanned::span),
                "irq_affinity" => raw.irq_affinity.as_ref().map(Spanned::span),
                "threads" => raw.threads.as_ref().map(Spanned::span),
                _ => None,
            };
            let what = if e.setting == "vms" {
                "count"
            } else {
                e.setting
            };
            d.push(src.span(
                span.unwrap_or_else(|| raw.workload.span()),
                format!("{what}: {}", e.message),
            ));
        }
    }
    let (info, program) = program?;
    (d.len() == before).then(|| HostVm {
        workload: name.clone(),
        program,
        info,
        vcpus,
        sync,
        idle,
        cmdline: raw.cmdline.clone().unwrap_or_default(),
        irq_affinity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse("h.toml", text).unwrap_err().to_string()
    }

    #[test]
    fn a_good_spec_parses() {
        let s = parse(
            "h.toml",
            "cpus = \"0\"\npolicy = \"spin:2ms\"\nsample = \"500us\"\n[[vm]]\nworkload = \"spinlock\"\nvcpus = 2\nscale = 0.01\ncount = 2\n",
        )
        .unwrap();
        assert_eq!(s.vms.len(), 2);
        assert_eq!(s.policy.to_string(), "spin:2ms");
        assert_eq!(s.sampling.interval, Duration::from_micros(500));
    }

    #[test]
    fn errors_point_at_the_value() {
        let e = err("cpus = \"0\"\npolicy = \"fast\"\n[[vm]]\nworkload = \"spinlock\"\n");
        assert!(e.contains("h.toml:2:10"), "{e}");
        // A CPU this host lacks is the run's problem (status 5), not the
        // spec's: the spec may be run on another host.
        let far = parse(
            "h.toml",
            "cpus = \"0-4095\"\n[[vm]]\nworkload = \"spinlock\"\n",
        )
        .unwrap();
        let e = crate::host::launch::check_cpus(&far).unwrap_err();
        assert!(e.to_string().contains("not among"), "{e}");
        assert_eq!(e.exit_status(), smplab_record::exit::RESOURCE_LIMIT);
        // `pin` is the linux policy's: under a user-level one it is refused.
        let e = err("cpus = \"0\"\npolicy = \"fair\"\n[[vm]]\nworkload = \"dedup\"\n");
        assert!(
            e.contains("h.toml:2:10") && e.contains("simulator's model"),
            "{e}"
        );
        let e = err("cpus = \"0\"\npolicy = \"rr\"\npin = false\n[[vm]]\nworkload = \"dedup\"\n");
        assert!(
            e.contains("h.toml:3:7") && e.contains("vcpu_affinity"),
            "{e}"
        );
        let e = err("cpus = \"0\"\n[[vm]]\nworkload = \"nosuch\"\n");
        assert!(e.contains("h.toml:3:12"), "{e}");
        let e = err("cpus = \"0\"\n[[vm]]\nworkload = \"spinlock\"\nvcpus = 65\n");
        assert!(e.contains("h.toml:4:9"), "{e}");
        let e = err(
            "cpus = \"0\"\npolicy = \"partition\"\n[[vm]]\nworkload = \"spinlock\"\ncount = 2\n",
        );
        assert!(e.contains("h.toml:2:10") && e.contains("partition"), "{e}");
        let e = err("cpus = \"0\"\n[[vm]]\nworkload = \"spinlock\"\nvcpus = 64\ncount = 5\n");
        assert!(e.contains("at most"), "{e}");
        let e = err("cpus = \"0\"\n[[vm]]\nworkload = \"oltp\"\nirq_affinity = \"running\"\n");
        assert!(
            e.contains("h.toml:4:16") && e.contains("user-level policy"),
            "{e}"
        );
        // Under a user-level policy `running` is the scheduler's to keep,
        // and its vCPUs may be pinned.
        let ok = parse(
            "h.toml",
            "cpus = \"0\"\npolicy = \"rr\"\nvcpu_affinity = \"pinned\"\n[[vm]]\nworkload = \"oltp\"\nirq_affinity = \"running\"\n",
        )
        .unwrap();
        assert_eq!(ok.vms[0].irq_affinity, IrqAffinity::Running);
        assert_eq!(ok.vcpu_affinity, VcpuAffinity::Pinned);
        let e = err("cpus = \"0\"\nvcpu_affinity = \"pinned\"\n[[vm]]\nworkload = \"dedup\"\n");
        assert!(e.contains("h.toml:2:17") && e.contains("pin = true"), "{e}");
        let e = err("cpus = \"0\"\npolicy = \"rr\"\nvcpu_affinity = \"tight\"\n[[vm]]\nworkload = \"dedup\"\n");
        assert!(
            e.contains("h.toml:3:17") && e.contains("pinned or floating"),
            "{e}"
        );
        let e = err("cpus = \"0\"\n[[vm]]\nworkload = \"oltp\"\nvcpus = 2\nirq_affinity = \"2\"\n");
        assert!(e.contains("h.toml:5:16") && e.contains("0-1"), "{e}");
        let ok = parse(
            "h.toml",
            "cpus = \"0\"\npin = false\n[[vm]]\nworkload = \"oltp\"\nirq_affinity = \"balanced\"\n",
        )
        .unwrap();
        assert!(!ok.pin && !ok.tune);
        let e = err("cpus = \"0\"\ntune = true\n[[vm]]\nworkload = \"dedup\"\n");
        assert!(e.contains("h.toml:2:8") && e.contains("user-level"), "{e}");
        let tuned = parse(
            "h.toml",
            "cpus = \"0\"\npolicy = \"rr\"\ntune = true\n[[vm]]\nworkload = \"dedup\"\n",
        )
        .unwrap();
        assert!(tuned.tune);
        assert_eq!(ok.vms[0].irq_affinity, IrqAffinity::Balanced);
        let e = err("cpus = \"0\"\nbogus = 1\n");
        assert!(e.contains("h.toml:2:1"), "{e}");
    }
}
