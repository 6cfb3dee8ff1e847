//! The partitioned engine (engine/partition.rs) gives the sequential
//! engine's results, number for number, on hosts it splits into LLC
//! domains; and it runs sequentially where a VM may leave its domain.

mod common;

use common::{draw_scenario, Draw};
use smplab_sim::*;

/// Records without the host seconds (which vary from run to run), as JSON.
fn records(s: &Scenario, engine: Engine) -> serde_json::Value {
    let recs = simulate_with(s, engine).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for r in &recs {
        let mut sim = serde_json::to_value(&r.sim).unwrap();
        if let Some(m) = sim.as_object_mut() {
            m.remove("sim_host_seconds");
        }
        out.push(serde_json::json!({
            "outcome": r.outcome,
            "timing": r.timing,
            "counters": r.counters,
            "sim": sim,
            "io": r.io,
        }));
    }
    serde_json::Value::Array(out)
}

/// Both engines: equal records and equal raw figures (events, stale
/// events, end, per-pCPU busy and idle time).
fn assert_same(s: &Scenario, what: &str) {
    let seq = simulate_raw_with(s, Engine::Sequential).unwrap_or_else(|e| panic!("{e}"));
    let par = simulate_raw_with(s, Engine::Partitioned).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        seq.events > 10_000,
        "{what}: too small to test ({} events)",
        seq.events
    );
    assert_eq!(seq, par, "{what}: raw figures differ between the engines");
    assert_eq!(
        records(s, Engine::Sequential),
        records(s, Engine::Partitioned),
        "{what}: records differ between the engines"
    );
}

/// `vms` VMs of `vcpus` vCPUs each on `pcpus` pCPUs of kvm2015 (8 per LLC
/// domain), VM k confined to LLC domain `domain_of(k)`.
fn confined(
    pcpus: u32,
    vms: &[(&str, f64)],
    vcpus: u32,
    domain_of: impl Fn(usize) -> usize,
) -> Scenario {
    let k = Platform::builtin("kvm2015").unwrap();
    let per_llc = k.cache.pcpus_per_llc as usize;
    let specs = vms
        .iter()
        .enumerate()
        .map(|(i, &(w, scale))| {
            let mut v = VmSpec::from_workload(w, Some(vcpus), scale, vcpus).unwrap();
            let d = domain_of(i);
            v.placement = Placement::Cpus((d * per_llc..(d + 1) * per_llc).collect());
            v
        })
        .collect();
    let mut s = Scenario::new(k, pcpus, specs);
    s.native_reference = false;
    s
}

#[test]
fn a_host_of_llc_confined_vms_runs_partitioned_with_the_sequential_results() {
    // 64 pCPUs in 8 domains, 4 vCPUs per pCPU (the scale bench's shape),
    // with a horizon: overcommitted, balanced every 8 ms inside each
    // domain and every 64 ms across them.
    let mix = [
        ("streamcluster", 100.0),
        ("dedup", 5.0),
        ("canneal", 5.0),
        ("ocean_ncp", 5.0),
    ];
    let vms: Vec<_> = (0..16).map(|i| mix[i % mix.len()]).collect();
    let mut s = confined(64, &vms, 16, |i| i / 2);
    s.horizon_ns = Some(70_000_000);
    assert_eq!(partitions(&s).unwrap(), Some(8));
    assert_same(&s, "64 pCPUs, 16 VMs, 70 ms");
}

#[test]
fn runs_to_completion_give_the_sequential_results() {
    // VMs that finish at different times, one domain without VMs, one
    // with a single VM: the run ends when the last one finishes, and the
    // partitions that finished first wait for it.
    let vms = [
        ("dedup", 0.3),
        ("streamcluster", 1.0),
        ("canneal", 0.5),
        ("volrend", 0.5),
        ("ocean_ncp", 0.5),
        ("dedup", 0.2),
        ("streamcluster", 0.5),
    ];
    let s = confined(32, &vms, 8, |i| [0, 0, 1, 1, 3, 3, 2][i]);
    assert_eq!(partitions(&s).unwrap(), Some(4));
    assert_same(&s, "32 pCPUs to completion");
}

#[test]
fn a_vm_that_may_leave_its_domain_keeps_the_sequential_engine() {
    let k = Platform::builtin("kvm2015").unwrap();
    let vms = (0..4)
        .map(|_| VmSpec::from_workload("streamcluster", Some(8), 1.0, 8).unwrap())
        .collect();
    let s = Scenario::new(k, 16, vms);
    assert_eq!(partitions(&s).unwrap(), None);
    let mut one = confined(8, &[("dedup", 0.3)], 8, |_| 0);
    one.horizon_ns = Some(5_000_000);
    assert_eq!(
        partitions(&one).unwrap(),
        None,
        "one domain: nothing to split"
    );
}

#[test]
fn random_scenarios_of_confined_vms_give_the_sequential_results() {
    // The fuzz test's generator (every setting: idle, PLE, SDB with false
    // positives, devices and interrupt routing, blocking programs,
    // policies), each VM then confined to one LLC domain in turn, and the
    // device host threads to a pCPU of it.
    let mut d = Draw(0x5EED_0032);
    let mut partitioned = 0;
    for i in 0..300 {
        let Some(mut s) = draw_scenario(&mut d) else {
            continue;
        };
        let per_llc = s.topology.pcpus_per_llc.unwrap_or(1) as usize;
        let domains = s.pcpus as usize / per_llc;
        if domains < 2 {
            continue;
        }
        for (k, v) in s.vms.iter_mut().enumerate() {
            let lo = k % domains * per_llc;
            v.placement = Placement::Cpus((lo..lo + per_llc).collect());
            if !v.io_thread_cpus.is_empty() {
                v.io_thread_cpus = vec![u32::try_from(lo).unwrap()];
            }
        }
        if s.check().is_err() {
            continue;
        }
        if partitions(&s).unwrap().is_some() {
            partitioned += 1;
        }
        let seq = simulate_raw_with(&s, Engine::Sequential).map_err(|e| e.to_string());
        let par = simulate_raw_with(&s, Engine::Partitioned).map_err(|e| e.to_string());
        assert_eq!(seq, par, "case {i}: raw figures differ between the engines");
        if seq.is_ok() {
            assert_eq!(
                records(&s, Engine::Sequential),
                records(&s, Engine::Partitioned),
                "case {i}: records differ between the engines"
            );
        }
    }
    assert!(
        partitioned >= 30,
        "only {partitioned} cases ran partitioned"
    );
}
