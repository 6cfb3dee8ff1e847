//! `smplab host` on real KVM: several VMs under the user-level scheduler.
//! Fails instead of skipping when SMPLAB_REQUIRE_KVM=1 and KVM is unusable.

use smplab_experiment::host::{parse, run_host, VmOutcome};
use smplab_experiment::testutil::have_kvm;

fn spec(policy: &str, extra: &str) -> String {
    format!(
        "cpus = \"0-1\"\npolicy = \"{policy}\"\nsample = \"500us\"\ntimeout = \"20s\"\n\
         [[vm]]\nworkload = \"spinlock\"\nvcpus = 2\nthreads = 2\nscale = 0.02\ncount = 2\n{extra}"
    )
}

#[test]
fn two_vms_share_one_cpu_under_every_policy() {
    if !have_kvm() {
        return;
    }
    for policy in ["linux", "rr:2ms", "gang:2ms", "spin:2ms", "safepoint:1ms"] {
        let s = parse("h.toml", &spec(policy, "")).expect("spec");
        let run = run_host(&s, None, false).expect("host run");
        assert!(run.all_ok(), "{policy}: {:?}", run.records);
        assert_eq!(run.host.vms.len(), 2);
        for o in &run.records {
            let r = o.record().expect("record");
            assert_eq!(r.counters.ops.get("spin_lock").copied(), Some(2 * 400));
        }
        if policy != "linux" {
            // Four vCPUs on two CPUs: each CPU's utilisation is a share of
            // the wall, and at most two vCPUs ran at once.
            for p in &run.host.pcpus {
                assert!(p.utilisation <= 1.0 + 1e-9, "{p:?}");
            }
            let run_ns: u64 = run.host.vms.iter().map(|v| v.run_ns).sum();
            assert!(
                run_ns <= 2 * run.host.wall_ns,
                "{run_ns} > 2 x {}",
                run.host.wall_ns
            );
            assert!(
                run.host.vms.iter().all(|v| v.steal_ns > 0),
                "nobody waited?"
            );
        }
        if policy.starts_with("spin") {
            assert!(run.host.spin_detection.samples > 0, "no samples taken");
            // The dirty ring counted pages at the samples (PLATFORM.md: it works here).
            let dirty: u64 = run
                .host
                .vms
                .iter()
                .flat_map(|v| &v.vcpus)
                .map(|c| c.dirty_samples)
                .sum();
            assert!(dirty > 0, "no sample had a dirty-ring count");
            // Every sample is judged against the guest's spin word, and the
            // verdicts add up.
            let d = &run.host.spin_detection;
            assert_eq!(d.truth.samples, d.samples);
            assert_eq!(
                d.truth.true_positives + d.truth.false_positives,
                d.spins_detected
            );
            assert!(d.truth.episodes_detected <= d.truth.episodes_sampled);
            assert!(d.truth.episodes_detected <= d.truth.true_positives);
        }
    }
}

#[test]
fn a_hung_vm_does_not_stall_its_neighbour() {
    if !have_kvm() {
        return;
    }
    let text = format!(
        "{}[[vm]]\nworkload = \"spinlock\"\nvcpus = 1\nthreads = 1\nscale = 0.02\ncmdline = \"selftest=hang\"\n",
        spec("spin:2ms", "").replace("timeout = \"20s\"", "timeout = \"4s\"").replace("count = 2", "count = 1")
    );
    let s = parse("h.toml", &text).expect("spec");
    let started = std::time::Instant::now();
    let run = run_host(&s, None, false).expect("host run");
    assert!(
        matches!(run.records[0], VmOutcome::Ok(_)),
        "{:?}",
        run.records[0]
    );
    assert!(
        matches!(run.records[1], VmOutcome::Failed { .. }),
        "the hung VM has no record"
    );
    // The healthy VM finished long before the hung one's limit.
    assert!(run.host.vms[0].wall_ns < run.host.vms[1].wall_ns);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

/// The lab's executor for host runs: a `vm` configuration with a host policy
/// gives one record per VM, each with the host's section, and the records
/// round-trip through JSON like any other (the results store keeps them).
#[test]
fn the_lab_executes_a_host_configuration() {
    use smplab_experiment::execute::{execute, RunLimits};
    use smplab_record::config::{GuestSettings, Placement, RunConfig, SyncMode, VmSettings};
    if !have_kvm() {
        return;
    }
    let source = smplab_workload::Source::resolve("spinlock").expect("profile");
    let program = source.instantiate(Some(2), 0.02).expect("program");
    let info = source.workload_info(&program);
    let mut guest = GuestSettings::new(2);
    guest.vms = 2;
    guest.placement = Placement::Cpus(vec![0, 1]);
    let config = RunConfig::Vm(VmSettings {
        host_policy: Some("spin:2ms".parse().expect("policy")),
        ..VmSettings::new(guest, SyncMode::Fine)
    });
    config.validate(None).expect("a valid configuration");
    let records = execute(&program, &info, &config, &RunLimits::default()).expect("host run");
    assert_eq!(records.len(), 2, "one record per VM");
    for r in &records {
        assert!(r.is_ok(), "{:?}", r.outcome);
        assert_eq!(r.run.as_ref(), Some(&config));
        let h = r.host_run.as_ref().expect("the host section");
        assert_eq!(h.vms.len(), 2);
        assert_eq!(h.host_cpus, vec![0, 1]);
        assert!(h.spin_detection.samples > 0, "the spin policy samples");
        let back: smplab_record::RunRecord =
            serde_json::from_str(&serde_json::to_string(r).expect("json")).expect("parse");
        assert_eq!(back.host_run.as_ref(), Some(h));
    }
}

#[test]
fn pinned_vcpus_never_change_host_cpu_and_floating_ones_do() {
    if !have_kvm() {
        return;
    }
    let text = |affinity: &str| {
        format!(
            "cpus = \"0-1\"\npolicy = \"rr:1ms\"\nvcpu_affinity = \"{affinity}\"\ntimeout = \"60s\"\n\
             [[vm]]\nworkload = \"oltp\"\nvcpus = 2\nthreads = 2\nscale = 0.3\ncount = 2\n\
             irq_affinity = \"running\"\n"
        )
    };
    let moves = |affinity: &str| -> Vec<u64> {
        let s = parse("h.toml", &text(affinity)).expect("spec");
        let run = run_host(&s, None, false).expect("host run");
        assert!(run.all_ok(), "{affinity}: {:?}", run.records);
        for o in &run.records {
            let r = o.record().expect("record");
            assert_eq!(r.counters.ops["io"], r.io.as_ref().expect("io").requests);
            assert_eq!(
                r.config.get("vcpu_affinity").and_then(|v| v.as_str()),
                Some(affinity)
            );
        }
        let vcpus = run.host.vms.iter().flat_map(|v| &v.vcpus);
        vcpus.map(|v| v.migrations).collect()
    };
    // Pinned: each vCPU thread is pinned once, at its first grant, and
    // never moves (vCPU i of both VMs on host CPU i).
    let pinned = moves("pinned");
    assert!(pinned.iter().all(|&m| m == 1), "pinned: {pinned:?}");
    // Floating: 4 vCPUs through one FIFO onto 2 CPUs at 1 ms slices move.
    let floating = moves("floating");
    assert!(floating.iter().any(|&m| m > 1), "floating: {floating:?}");
}
