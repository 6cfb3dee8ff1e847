//! Helpers for tests: hand-made records and scratch directories.

use crate::point::Point;
use smplab_record::config::{GuestSettings, RunConfig, SyncMode, VmSettings};
use smplab_record::{Executor, RunRecord, WorkloadInfo};
use std::path::PathBuf;

/// A fresh scratch directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "smplab-lab-test-{}-{}-{}",
        tag,
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// A record with host facts of this machine and empty measurements.
pub fn record(executor: Executor, workload: WorkloadInfo) -> RunRecord {
    RunRecord::new(executor, workload)
}

/// A record of `workload` with `n` threads and the given wall time.
pub fn rec(executor: Executor, workload: &str, n: u32, wall_ns: u64) -> RunRecord {
    let mut r = record(
        executor,
        WorkloadInfo {
            name: workload.into(),
            source: "builtin".into(),
            n,
            threads: n,
            params: Default::default(),
        },
    );
    r.timing.wall_ns = wall_ns;
    r
}

/// The simulator twin of a vm point: same guest settings, on `platform`,
/// with the platform's PLE and no APICv.
pub fn as_sim(p: &crate::Point, platform: &str) -> crate::Point {
    use smplab_record::config::{RunConfig, SimSettings};
    let mut q = p.clone();
    let mut s = SimSettings::new(p.vcpus().unwrap_or(1), platform);
    if let Some(idle) = p.config.idle() {
        s.idle = idle;
    }
    s.placement = p.config.placement().clone();
    s.vms = p.vms();
    s.sync = p.config.sync().unwrap_or_default();
    q.config = RunConfig::Sim(s);
    q
}

/// A smplab-vmm point of `workload` on `vcpus` vCPUs, repetition `rep`.
pub fn vm_point(workload: &str, vcpus: u32, rep: u32) -> Point {
    let mut p = Point::new(
        workload,
        vcpus,
        0.1,
        RunConfig::Vm(VmSettings::new(
            GuestSettings::new(vcpus),
            SyncMode::default(),
        )),
    );
    p.timeout_s = 60;
    p.rep = rep;
    p
}

/// Whether a test that needs KVM can run here. With
/// `SMPLAB_REQUIRE_KVM=1` (as CI sets it) an unusable KVM fails the test
/// instead of skipping it.
pub fn have_kvm() -> bool {
    match crate::availability::kvm_unavailable() {
        None => true,
        Some(why) if std::env::var("SMPLAB_REQUIRE_KVM").as_deref() == Ok("1") => {
            panic!("SMPLAB_REQUIRE_KVM=1 but KVM is unusable: {why}")
        }
        Some(why) => {
            eprintln!("note: KVM unusable ({why}); test not run (set SMPLAB_REQUIRE_KVM=1 to make this fail)");
            false
        }
    }
}
