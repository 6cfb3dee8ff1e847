//! Helpers shared by the guest's real-KVM test files.

use smplab_record::WorkloadInfo;
use smplab_workload::{Program, Source};

/// Whether /dev/kvm can be used; with SMPLAB_REQUIRE_KVM=1 (CI) an unusable
/// one fails the test instead of skipping it.
pub fn kvm_usable() -> bool {
    let ok = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    if !ok {
        assert!(
            std::env::var("SMPLAB_REQUIRE_KVM").as_deref() != Ok("1"),
            "SMPLAB_REQUIRE_KVM=1 but /dev/kvm cannot be opened read-write"
        );
        eprintln!("skipping: /dev/kvm is not usable (set SMPLAB_REQUIRE_KVM=1 to fail instead)");
    }
    ok
}

/// A built-in profile instantiated for `n` at `scale`.
pub fn program(name: &str, n: u32, scale: f64) -> Program {
    Source::resolve(name)
        .and_then(|s| s.instantiate(Some(n), scale))
        .unwrap_or_else(|e| panic!("built-in {name} does not instantiate: {e}"))
}

/// How the record names a built-in profile.
pub fn info(p: &Program) -> WorkloadInfo {
    WorkloadInfo {
        name: p.name.clone(),
        source: "builtin".into(),
        n: p.n,
        threads: p.total_threads(),
        params: Default::default(),
    }
}

/// The `io` section of a run of `p` on `vcpus` vCPUs holds what the guest
/// and the block device measured: one request per `io` op, one latency
/// sample each (completion before handler entry, handler entry before the
/// thread runs again), interrupt counts for every vCPU. Returns them.
pub fn check_io(r: &smplab_record::RunRecord, p: &Program, vcpus: u32) -> Vec<u64> {
    let what = format!("{} on {vcpus} vCPUs", p.name);
    let ios = p.expected_counts()["io"];
    assert!(ios > 0, "{what}: the profile has io ops");
    let io =
        r.io.as_ref()
            .unwrap_or_else(|| panic!("{what}: no io section"));
    assert_eq!(io.requests, ios, "{what}: device requests");
    assert_eq!(io.device_latency.count, ios, "{what}");
    assert_eq!(io.irq_latency.count, ios, "{what}: one sample per io op");
    assert_eq!(io.wake_latency.count, ios, "{what}");
    // Plausible: the handler runs after the device completed (a latency
    // above zero, below the run's 120 s limit; 0 only for a completion a
    // handler already running picked up), the thread after its handler.
    assert!(io.irq_latency.p50_ns > 0, "{what}: {:?}", io.irq_latency);
    assert!(io.irq_latency.max_ns < 120_000_000_000, "{what}");
    assert!(
        io.wake_latency.p50_ns >= io.irq_latency.p50_ns,
        "{what}: wake {:?} before irq {:?}",
        io.wake_latency,
        io.irq_latency
    );
    // Each request takes at least its service time (30 or 100 us).
    assert!(io.device_latency.min_ns >= 29_000, "{what}");
    assert_eq!(io.irqs_per_cpu.len(), vcpus as usize, "{what}");
    let irqs: u64 = io.irqs_per_cpu.iter().sum();
    assert!(
        irqs >= 1 && irqs <= ios,
        "{what}: {irqs} interrupts for {ios} requests"
    );
    io.irqs_per_cpu.clone()
}
