//! Every built-in profile completes under every policy and idle mode, with
//! exactly the program's op counts, deterministically.

use smplab_sim::{simulate, Idle, Platform, Policy, Scenario, VmSpec};

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> VmSpec {
    VmSpec::from_workload(name, Some(n), scale, vcpus).expect("builtin workload")
}

#[test]
fn all_profiles_complete_with_exact_counts() {
    let platform = Platform::builtin("kvm2015").unwrap();
    for name in smplab_workload::builtin::names() {
        for (policy, pcpus, vms, idle) in [
            ("fair", 4, 1, Idle::Hlt),
            ("fair:100us", 2, 2, Idle::Poll),
            ("partition", 4, 2, Idle::HaltPoll(200_000)),
            ("gang:1ms", 4, 2, Idle::Hlt),
            ("fair+safepoint", 2, 1, Idle::Hlt),
        ] {
            let mut vmspecs = Vec::new();
            for _ in 0..vms {
                let mut v = vm(name, 4, 0.05, 4);
                v.idle = idle;
                vmspecs.push(v);
            }
            let mut s = Scenario::new(platform.clone(), pcpus, vmspecs);
            s.policy = Policy::parse(policy).unwrap();
            let recs = simulate(&s).unwrap_or_else(|e| panic!("{name} {policy}: {e}"));
            for r in &recs {
                assert!(r.is_ok(), "{name} {policy}: {:?}", r.outcome);
                let expected = s.vms[0].program.expected_counts();
                assert_eq!(r.counters.ops, expected, "{name} {policy}");
                let sim = r.sim.as_ref().unwrap();
                assert!(r.timing.wall_ns > 0);
                assert!(sim.native_wall_ns.unwrap() > 0);
            }
        }
    }
}

#[test]
fn deterministic_for_a_seed() {
    let platform = Platform::builtin("kvm2015").unwrap();
    let mk = || {
        let mut v = vm("dedup", 4, 0.05, 4);
        v.sdb = Some(Default::default());
        let mut s = Scenario::new(platform.clone(), 2, vec![v.clone(), v]);
        s.seed = 7;
        s
    };
    let a = simulate(&mk()).unwrap();
    let b = simulate(&mk()).unwrap();
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.timing, y.timing);
        assert_eq!(x.counters, y.counters);
        assert_eq!(x.sim.as_ref().unwrap().exits, y.sim.as_ref().unwrap().exits);
    }
}

#[test]
fn sweep_runs_in_parallel_in_input_order() {
    let platform = Platform::builtin("kvm2015").unwrap();
    let scenarios: Vec<Scenario> = [2u32, 4, 8]
        .iter()
        .map(|&p| {
            let mut s = Scenario::new(platform.clone(), p, vec![vm("vips", 4, 0.05, 4)]);
            s.native_reference = false;
            s
        })
        .collect();
    let out = smplab_sim::sweep(&scenarios, false);
    assert_eq!(out.len(), 3);
    for (s, r) in scenarios.iter().zip(&out) {
        let r = r.as_ref().unwrap();
        assert_eq!(r[0].sim.as_ref().unwrap().pcpus, s.pcpus);
    }
}

#[test]
fn this_machine_profile_runs() {
    let platform = Platform::builtin("pvm-here").unwrap();
    let mut v = vm("shootdown", 2, 0.05, 2);
    v.ple = smplab_sim::Ple::Amd;
    let s = Scenario::new(platform, 2, vec![v]);
    let r = simulate(&s).unwrap();
    let sim = r[0].sim.as_ref().unwrap();
    assert_eq!(sim.platform, "pvm-here");
    // Every shootdown IPIs the other vCPU.
    assert_eq!(sim.ipis, s.vms[0].program.expected_counts()["shootdown"]);
    assert!(r[0].timing.wall_ns > sim.native_wall_ns.unwrap());
}

#[test]
fn example_specs_load_and_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/specs");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("toml") {
            continue;
        }
        let mut s = smplab_sim::spec::load(&path).unwrap_or_else(|e| panic!("{e}"));
        // Keep the debug test short: a few simulated milliseconds suffice to
        // show the spec runs.
        s.horizon_ns = Some(3_000_000);
        s.native_reference = false;
        let r = simulate(&s).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(r.len(), s.vms.len());
        n += 1;
    }
    assert!(n >= 4);
}

/// Regression: with the SDB on an overcommitted host, vCPUs spinning in the
/// kernel for shootdown acks used to be chosen as directed-yield targets, so two
/// of them took turns forever ahead of the queued vCPU owing them the acks.
#[test]
fn sdb_with_shootdowns_under_overcommit_completes() {
    let platform = Platform::builtin("kvm2015").unwrap();
    for seed in [1, 7, 13] {
        let mut v = vm("dedup", 4, 0.05, 4);
        v.sdb = Some(Default::default());
        let mut s = Scenario::new(platform.clone(), 2, vec![v.clone(), v]);
        s.seed = seed;
        s.horizon_ns = Some(1_000_000_000);
        let recs = simulate(&s).unwrap();
        for r in &recs {
            assert!(r.is_ok(), "seed {seed}: {:?}", r.outcome);
            assert_eq!(
                r.counters.ops,
                s.vms[0].program.expected_counts(),
                "seed {seed}"
            );
        }
    }
}
