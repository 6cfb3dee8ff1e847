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
    // How many completions a running handler picks up depends on the exit
    // cost: about half of them under an emulated CPU (slow exits), few on
    // PVM. So the check is that fresh interrupts were measured at all, not
    // that they are the majority.
    assert!(io.irq_latency.max_ns > 0, "{what}: {:?}", io.irq_latency);
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

/// Run oltp on 2 vCPUs with the boot-time routing `0` under `o`'s settings,
/// move the block interrupt to vCPU 1 through the routing page once the
/// guest has taken `before` interrupts, and check the counts followed: vCPU
/// 0 took no more than the interrupts before the switch (plus the few the
/// IOAPIC may still have sent there: edges raised while the handler that
/// first saw the new mask ran, before it rewrote the destination),
/// vCPU 1 took (most of) the rest, and the guest's entry names vCPU 1 at the end.
#[allow(dead_code)] // used by the KVM test files, not by every file that shares `common`
pub fn routing_moves_mid_run(o: smplab_guest::VmRunOptions, what: &str) {
    use smplab_vmm::irq_route::{IrqRoute, IrqRouteError};
    use std::time::{Duration, Instant};
    let before = 60;
    let p = program("oltp", 2, 1.0);
    let route = IrqRoute::new();
    let o = smplab_guest::VmRunOptions {
        vcpus: 2,
        irq_affinity: smplab_record::config::IrqAffinity::Vcpus(vec![0]),
        irq_route: Some(route.clone()),
        ..o
    };
    let (r, switched_at) = std::thread::scope(|s| {
        let run = s.spawn(|| smplab_guest::run_vm(&p, info(&p), &o));
        let deadline = Instant::now() + Duration::from_secs(110);
        let switched_at = loop {
            assert!(
                Instant::now() < deadline && !run.is_finished(),
                "{what}: the guest never took {before} block interrupts while running"
            );
            match route.interrupts() {
                Ok(n) if n >= before => {
                    route.set_mask(0b10).expect("set the routing");
                    // Read after the write: every entry counted later saw
                    // the new mask or was already in its handler.
                    break route.interrupts().expect("count");
                }
                Ok(_) | Err(IrqRouteError::NotRunning) => {}
                Err(e) => panic!("{what}: {e}"),
            }
            std::thread::sleep(Duration::from_micros(500));
        };
        let r = run.join().expect("run thread");
        (r, switched_at)
    });
    let r = r.unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(r.counters.ops, p.expected_counts(), "{what}");
    let irqs = check_io(&r, &p, 2);
    let total = route.interrupts().expect("final count");
    assert!(
        total > switched_at + 50,
        "{what}: too few interrupts after the switch ({switched_at} of {total}) to tell"
    );
    assert!(
        irqs[0] <= switched_at + 3,
        "{what}: vCPU 0 took {} interrupts, {switched_at} before the switch: {irqs:?}",
        irqs[0]
    );
    assert!(
        // Handler entries that found no completion are not in `irqs`.
        irqs[1] > 0 && 2 * irqs[1] >= total - switched_at,
        "{what}: vCPU 1 took {irqs:?} of the {} after the switch",
        total - switched_at
    );
    eprintln!("{what}: switched after {switched_at} of {total} handler entries; per vCPU {irqs:?}");
    assert_eq!(route.mask().expect("mask"), 0b10);
    assert_eq!(route.destination().expect("dest"), Some(1), "{what}");
}
