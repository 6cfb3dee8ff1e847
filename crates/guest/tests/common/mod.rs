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
