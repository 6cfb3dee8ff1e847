//! Scenario spec files (`smplab sim --spec FILE.toml`): a host and any number
//! of VMs with their own workloads and settings. Format in docs/sim.md. Every
//! error names file:line:col.

use crate::error::{locate, SimError};
use crate::platform::Platform;
use crate::scenario::{
    parse_duration, pcpu_range_of, DeviceSync, Devices, Idle, IdlePolicy, Placement, Policy,
    Scenario, Sdb, SyncMode, Topology, VmSpec, DEFAULT_HYBRID_BYPASS,
};
use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_record::config::{
    BadIdlePolicy, BadPlacement, BadPle, UnknownSyncMode, DEFAULT_PLATFORM,
};
use std::path::{Path, PathBuf};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    /// Default: `smplab_record::config::DEFAULT_PLATFORM`, as everywhere.
    #[serde(default)]
    platform: Option<Spanned<String>>,
    pcpus: Spanned<u32>,
    #[serde(default)]
    pcpus_per_llc: Option<Spanned<u32>>,
    #[serde(default)]
    policy: Option<Spanned<String>>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    virtualized: Option<bool>,
    #[serde(default)]
    horizon: Option<Spanned<String>>,
    #[serde(default)]
    native_reference: Option<bool>,
    #[serde(default)]
    vm: Vec<Spanned<VmFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VmFile {
    workload: Spanned<String>,
    #[serde(default)]
    threads: Option<Spanned<u32>>,
    #[serde(default)]
    scale: Option<Spanned<f64>>,
    vcpus: Spanned<u32>,
    #[serde(default)]
    count: Option<Spanned<u32>>,
    #[serde(default)]
    idle: Option<Spanned<String>>,
    /// The host's halt-poll window for HLT idle (KVM halt_poll_ns); default none.
    #[serde(default)]
    host_halt_poll_ns: Option<Spanned<u64>>,
    /// `none`, `pinned` or a contiguous CPU range such as `0-3` (the run
    /// configuration's placement); the older key `affinity` with `float`,
    /// `pin` or `range:A-B` is read as the same.
    #[serde(default, alias = "affinity")]
    placement: Option<Spanned<String>>,
    #[serde(default)]
    ple: Option<Spanned<String>>,
    #[serde(default)]
    apicv: Option<bool>,
    #[serde(default)]
    sdb: Option<bool>,
    #[serde(default)]
    sdb_detect_ns: Option<u64>,
    #[serde(default)]
    sdb_false_positive_rate: Option<Spanned<f64>>,
    #[serde(default)]
    spin_to_block: Option<bool>,
    #[serde(default)]
    devices: Option<Spanned<DevicesFile>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DevicesFile {
    exits_per_ms: Spanned<f64>,
    /// global, iothread, hybrid or fine (the run configuration's sync
    /// mode); the older `hybrid:FRACTION` is read as hybrid with that bypass.
    #[serde(default)]
    sync: Option<Spanned<String>>,
    /// Under hybrid sync: the fraction of requests that bypass the I/O
    /// thread (default `DEFAULT_HYBRID_BYPASS`).
    #[serde(default)]
    hybrid_bypass: Option<Spanned<f64>>,
    #[serde(default)]
    synchronous: Option<Spanned<f64>>,
}

/// Read and check a spec file.
pub fn load(path: &Path) -> Result<Scenario, SimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&path.display().to_string(), &text, &dir)
}

/// Where a spec's text came from: errors name file:line:col, and relative
/// workload and platform paths resolve against the file's directory.
struct Source<'a> {
    file: &'a str,
    text: &'a str,
    dir: &'a Path,
}

impl Source<'_> {
    /// An error at the start of `span`.
    fn at(&self, span: std::ops::Range<usize>, msg: String) -> SimError {
        locate(self.file, self.text, span.start, msg)
    }

    /// `s` relative to the spec's directory if it names a file.
    fn rel(&self, s: &str) -> String {
        if (s.contains('/') || s.ends_with(".toml")) && !Path::new(s).is_absolute() {
            let p: PathBuf = self.dir.join(s);
            p.display().to_string()
        } else {
            s.to_string()
        }
    }
}

/// Parse spec text; workload and platform paths are relative to `dir`.
pub fn parse(file: &str, text: &str, dir: &Path) -> Result<Scenario, SimError> {
    let f: SpecFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map_or(0, |s| s.start);
        locate(file, text, offset, e.message().trim().replace('\n', "; "))
    })?;
    let src = Source { file, text, dir };
    let platform = match &f.platform {
        Some(p) => {
            Platform::resolve(&src.rel(p.get_ref())).map_err(|e| src.at(p.span(), e.to_string()))?
        }
        None => Platform::resolve(DEFAULT_PLATFORM)?,
    };
    let pcpus = *f.pcpus.get_ref();
    if pcpus == 0 {
        return Err(src.at(f.pcpus.span(), "pcpus must be at least 1".into()));
    }
    let topology = Topology {
        pcpus_per_llc: match &f.pcpus_per_llc {
            Some(s) if *s.get_ref() == 0 => {
                return Err(src.at(s.span(), "pcpus_per_llc must be at least 1".into()))
            }
            Some(s) => Some(*s.get_ref()),
            None => None,
        },
    };
    let policy = match &f.policy {
        Some(p) => Policy::parse(p.get_ref()).map_err(|m| src.at(p.span(), m.to_string()))?,
        None => Policy::fair(),
    };
    let horizon_ns = match &f.horizon {
        Some(h) => Some(parse_duration(h.get_ref()).map_err(|m| src.at(h.span(), m.to_string()))?),
        None => None,
    };
    if f.vm.is_empty() {
        return Err(locate(
            file,
            text,
            text.len(),
            "no VMs: add at least one [[vm]] table with workload and vcpus",
        ));
    }
    let mut vms = Vec::new();
    for vmf in &f.vm {
        let (spec, count) = vm_spec(&src, vmf, &platform, pcpus)?;
        for _ in 0..count {
            vms.push(spec.clone());
        }
    }
    let s = Scenario {
        platform,
        pcpus,
        topology,
        policy,
        seed: f.seed.unwrap_or(1),
        vms,
        virtualized: f.virtualized.unwrap_or(true),
        horizon_ns,
        native_reference: f.native_reference.unwrap_or(true),
    };
    // Whole-scenario checks point at the first [[vm]] or the pcpus line.
    s.check()
        .map_err(|e| src.at(f.pcpus.span(), e.to_string()))?;
    Ok(s)
}

/// One `[[vm]]` table: its VM and how many copies of it (`count`).
fn vm_spec(
    src: &Source,
    vmf: &Spanned<VmFile>,
    platform: &Platform,
    pcpus: u32,
) -> Result<(VmSpec, u32), SimError> {
    let v = vmf.get_ref();
    let source = smplab_workload::Source::resolve(&src.rel(v.workload.get_ref()))
        .map_err(|e| src.at(v.workload.span(), e.to_string()))?;
    let scale = v.scale.as_ref().map(|s| *s.get_ref()).unwrap_or(1.0);
    if !(scale > 0.0 && scale.is_finite()) {
        let span = v.scale.as_ref().map(|s| s.span()).unwrap_or(vmf.span());
        return Err(src.at(span, "scale must be a positive number".into()));
    }
    let n = v.threads.as_ref().map(|t| *t.get_ref());
    let mut program = source
        .instantiate(n, scale)
        .map_err(|e| src.at(v.workload.span(), e.to_string()))?;
    if v.spin_to_block.unwrap_or(false) {
        program = program.spin_to_block();
    }
    let vcpus = *v.vcpus.get_ref();
    if vcpus == 0 {
        return Err(src.at(v.vcpus.span(), "vcpus must be at least 1".into()));
    }
    let info = source.workload_info(&program);
    let mut spec = VmSpec::new(program, info, vcpus);
    spec.ple = platform.defaults.ple;
    if let Some(s) = &v.idle {
        let policy: IdlePolicy = s
            .get_ref()
            .parse()
            .map_err(|m: BadIdlePolicy| src.at(s.span(), m.to_string()))?;
        let window = v.host_halt_poll_ns.as_ref().map_or(0, |w| *w.get_ref());
        spec.idle =
            Idle::from_setting(policy, window).map_err(|m| src.at(s.span(), m.to_string()))?;
    }
    if let Some(s) = &v.placement {
        spec.placement = placement_setting(s.get_ref()).map_err(|m| src.at(s.span(), m))?;
        pcpu_range_of(&spec.placement, pcpus).map_err(|e| src.at(s.span(), e.to_string()))?;
    }
    if let Some(s) = &v.ple {
        spec.ple = s
            .get_ref()
            .parse()
            .map_err(|m: BadPle| src.at(s.span(), m.to_string()))?;
    }
    spec.apicv = v.apicv.unwrap_or(false);
    spec.sdb = sdb_setting(src, v)?;
    if let Some(d) = &v.devices {
        spec.devices = Some(devices_setting(src, d.get_ref())?);
    }
    let count = v.count.as_ref().map(|c| *c.get_ref()).unwrap_or(1);
    if count == 0 {
        let span = v.count.as_ref().map(|c| c.span()).unwrap_or(vmf.span());
        return Err(src.at(span, "count must be at least 1".into()));
    }
    Ok((spec, count))
}

/// The Spin Detection Buffer, on if any of its keys is given.
fn sdb_setting(src: &Source, v: &VmFile) -> Result<Option<Sdb>, SimError> {
    if !(v.sdb.unwrap_or(false) || v.sdb_detect_ns.is_some() || v.sdb_false_positive_rate.is_some())
    {
        return Ok(None);
    }
    let fp = match &v.sdb_false_positive_rate {
        Some(r) if !(0.0..=1.0).contains(r.get_ref()) => {
            return Err(src.at(r.span(), "sdb_false_positive_rate must be in 0..1".into()))
        }
        Some(r) => Some(*r.get_ref()),
        None => None,
    };
    Ok(Some(Sdb {
        detect_ns: v.sdb_detect_ns,
        false_positive_rate: fp,
    }))
}

/// A `[vm.devices]` table: device exits and how the VMM serializes them.
fn devices_setting(src: &Source, dr: &DevicesFile) -> Result<Devices, SimError> {
    let rate = *dr.exits_per_ms.get_ref();
    if !(rate >= 0.0 && rate.is_finite()) {
        return Err(src.at(dr.exits_per_ms.span(), "exits_per_ms must be >= 0".into()));
    }
    let sync = match &dr.sync {
        Some(s) => sync_setting(s.get_ref()).map_err(|m| src.at(s.span(), m))?,
        None => DeviceSync::Global,
    };
    let sync = match (&dr.hybrid_bypass, sync) {
        (None, sync) => sync,
        (Some(b), DeviceSync::Hybrid { .. }) if (0.0..=1.0).contains(b.get_ref()) => {
            DeviceSync::Hybrid {
                bypass: *b.get_ref(),
            }
        }
        (Some(b), DeviceSync::Hybrid { .. }) => {
            return Err(src.at(b.span(), "hybrid_bypass must be a fraction in 0..1".into()))
        }
        (Some(b), other) => {
            return Err(src.at(
                b.span(),
                format!(
                    "hybrid_bypass applies to sync = \"hybrid\" only (this VM's sync is {})",
                    other.label()
                ),
            ))
        }
    };
    let synchronous = match &dr.synchronous {
        Some(s) if !(0.0..=1.0).contains(s.get_ref()) => {
            return Err(src.at(s.span(), "synchronous must be a fraction in 0..1".into()))
        }
        Some(s) => *s.get_ref(),
        // Partheymüller Table 3.1: 62.98% of I/O-thread messages are synchronous.
        None => 0.6298,
    };
    Ok(Devices {
        exits_per_ms: rate,
        sync,
        synchronous,
    })
}

/// A placement value: the run configuration's `Placement` (`none`,
/// `pinned`, a CPU list), or the older `range:A-B`.
fn placement_setting(text: &str) -> Result<Placement, String> {
    let list = text.trim().strip_prefix("range:").unwrap_or(text);
    list.parse().map_err(|e: BadPlacement| {
        format!("{e}; the simulator takes a contiguous range such as 0-3")
    })
}

/// A device sync value: the run configuration's `SyncMode`, or the older
/// `hybrid:FRACTION` (hybrid with that bypass fraction).
fn sync_setting(text: &str) -> Result<DeviceSync, String> {
    if let Some(fraction) = text.trim().strip_prefix("hybrid:") {
        return match fraction.trim().parse::<f64>() {
            Ok(bypass) if (0.0..=1.0).contains(&bypass) => Ok(DeviceSync::Hybrid { bypass }),
            _ => Err(format!(
                "bad sync `{text}`: the bypass fraction of hybrid:FRACTION must be in 0..1 (or write sync = \"hybrid\" and hybrid_bypass = FRACTION)"
            )),
        };
    }
    let mode: SyncMode = text.parse().map_err(|e: UnknownSyncMode| e.to_string())?;
    Ok(match mode {
        SyncMode::Hybrid => DeviceSync::Hybrid {
            bypass: DEFAULT_HYBRID_BYPASS,
        },
        other => DeviceSync::from(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Scenario, SimError> {
        parse("spec.toml", text, Path::new("."))
    }

    #[test]
    fn full_spec_parses() {
        let s = parse_str(
            r#"
platform = "kvm2015"
pcpus = 8
pcpus_per_llc = 4
policy = "fair:100us+safepoint"
seed = 3

[[vm]]
workload = "spinlock"
threads = 4
scale = 0.01
vcpus = 4
count = 2
idle = "hlt"
host_halt_poll_ns = 50000
affinity = "pin"
ple = "amd"
sdb = true

[[vm]]
workload = "dedup"
threads = 2
scale = 0.01
vcpus = 2
[vm.devices]
exits_per_ms = 2.0
sync = "hybrid:0.4"

[[vm]]
workload = "dedup"
threads = 2
scale = 0.01
vcpus = 2
placement = "4-7"
[vm.devices]
exits_per_ms = 2.0
sync = "hybrid"
hybrid_bypass = 0.25
"#,
        )
        .unwrap();
        assert_eq!(s.vms.len(), 4);
        assert_eq!(s.vms[0].placement, Placement::Spread);
        assert_eq!(s.vms[3].placement, Placement::Cpus(vec![4, 5, 6, 7]));
        assert_eq!(
            s.vms[3].devices.unwrap().sync,
            DeviceSync::Hybrid { bypass: 0.25 }
        );
        assert_eq!(s.vms[0].idle, Idle::HaltPoll(50000));
        assert_eq!(s.vms[1].ple, crate::scenario::Ple::Amd);
        assert!(s.vms[1].sdb.is_some());
        assert_eq!(s.topology.pcpus_per_llc, Some(4));
        assert_eq!(
            s.vms[2].devices.unwrap().sync,
            DeviceSync::Hybrid { bypass: 0.4 }
        );
    }

    #[test]
    fn errors_point_at_the_value() {
        let e = parse_str("platform = \"kvm2015\"\npcpus = 4\n[[vm]]\nworkload = \"dedup\"\nvcpus = 2\nidle = \"mwait\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("spec.toml:6:8:"), "{e}");
        assert!(e.contains("hlt, poll"), "{e}");
        let e = parse_str(
            "platform = \"kvm2015\"\npcpus = 4\n[[vm]]\nworkload = \"nosuch\"\nvcpus = 2\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("spec.toml:4:12:"), "{e}");
        let e = parse_str("platform = \"kvm2015\"\npcpus = 4\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("spec.toml:3:1:"), "{e}");
        let e =
            parse_str("platform = \"xen\"\npcpus = 4\n[[vm]]\nworkload = \"dedup\"\nvcpus = 2\n")
                .unwrap_err()
                .to_string();
        assert!(
            e.starts_with("spec.toml:1:12:") && e.contains("kvm2015"),
            "{e}"
        );
        let vm = "platform = \"kvm2015\"\npcpus = 4\n[[vm]]\nworkload = \"dedup\"\nvcpus = 2\n";
        for (extra, at, says) in [
            (
                "placement = \"compact\"\n",
                "spec.toml:6:13:",
                "none, pinned",
            ),
            (
                "placement = \"2-5\"\n",
                "spec.toml:6:13:",
                "outside pCPUs 0-3",
            ),
            (
                "affinity = \"range:0,2\"\n",
                "spec.toml:6:12:",
                "contiguous",
            ),
            (
                "[vm.devices]\nexits_per_ms = 1.0\nsync = \"locked\"\n",
                "spec.toml:8:8:",
                "global, iothread",
            ),
            (
                "[vm.devices]\nexits_per_ms = 1.0\nsync = \"hybrid:2\"\n",
                "spec.toml:8:8:",
                "0..1",
            ),
            (
                "[vm.devices]\nexits_per_ms = 1.0\nsync = \"fine\"\nhybrid_bypass = 0.5\n",
                "spec.toml:9:17:",
                "applies to sync = \"hybrid\" only",
            ),
        ] {
            let e = parse_str(&format!("{vm}{extra}")).unwrap_err().to_string();
            assert!(e.starts_with(at) && e.contains(says), "{extra}: {e}");
        }
    }

    #[test]
    fn the_example_in_the_docs_parses() {
        let doc = include_str!("../../../docs/sim.md");
        let section = doc
            .split_once("## Spec files")
            .expect("docs/sim.md has a \"Spec files\" section")
            .1;
        let example = section
            .split_once("```toml\n")
            .and_then(|(_, rest)| rest.split_once("```"))
            .expect("the section has a toml example")
            .0;
        let s = parse_str(example).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.vms.len(), 2);
        assert_eq!(s.vms[0].placement, Placement::Float);
        let without_platform = example.replace("platform = \"kvm2015\"", "");
        let s = parse_str(&without_platform).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.platform.name, DEFAULT_PLATFORM);
        assert_eq!(s.vms[0].devices.unwrap().sync, DeviceSync::IoThread);
        // The commented-out key is the one `hybrid` takes.
        let hybrid = example
            .replace("sync = \"iothread\"", "sync = \"hybrid\"")
            .replace("# hybrid_bypass", "hybrid_bypass");
        let s = parse_str(&hybrid).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.vms[0].devices.unwrap().sync,
            DeviceSync::Hybrid { bypass: 0.5 }
        );
    }
}
