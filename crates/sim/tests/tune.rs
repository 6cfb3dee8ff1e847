//! Kulkarni & Kulkarni's tuner driven by the simulator (`simulate_tuned`): it changes
//! the setting when `phases` moves from its I/O phase to its synchronization
//! phase, and it holds its setting on a workload that does not change.

use smplab_policy::tune::{TunerConfig, VcpuAffinity};
use smplab_sim::*;

fn scenario(workload: &str, scale: f64) -> Scenario {
    let vm = VmSpec::from_workload(workload, Some(8), scale, 8).unwrap();
    Scenario::new(
        Platform::builtin("kvm2015").unwrap(),
        8,
        vec![vm.clone(), vm],
    )
}

#[test]
fn the_tuner_changes_setting_at_the_phase_change() {
    let s = scenario("phases", 1.0);
    let (records, log) = simulate_tuned(&s, &TunerConfig::default()).unwrap();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.timing.wall_ns > 0));
    // Some VM's tuner decides within 5 windows after its I/O phase ended.
    let reacted = log.last_io_ns.iter().enumerate().any(|(vm, last)| {
        let last = last.expect("phases makes device requests");
        log.decisions.iter().any(|d| {
            d.vm as usize == vm
                && d.decision.at_ns >= last
                && d.decision.at_ns <= last + 5 * TunerConfig::default().window_ns
        })
    });
    assert!(reacted, "no decision after the phase change: {:#?}", log);
    // Every decision names the conditions that caused it.
    for d in &log.decisions {
        assert!(!d.decision.to_string().contains("[none]"), "{}", d.decision);
    }
}

#[test]
fn the_tuner_holds_on_a_steady_workload() {
    // oltp does the same thing from start to end: after settling, nothing
    // may change (hysteresis), however many windows the run has.
    let s = scenario("oltp", 1.0);
    let (records, log) = simulate_tuned(&s, &TunerConfig::default()).unwrap();
    let wall = records.iter().map(|r| r.timing.wall_ns).max().unwrap();
    let windows = wall / TunerConfig::default().window_ns;
    assert!(
        windows >= 10,
        "too short a run to show anything: {windows} windows"
    );
    for vm in 0..2 {
        let n = log.decisions.iter().filter(|d| d.vm == vm).count();
        assert!(
            n <= 2,
            "vm {vm}: {n} decisions in {windows} windows: {:#?}",
            log.decisions
        );
    }
}

#[test]
fn the_tuner_refuses_policies_that_own_placement() {
    let mut s = scenario("phases", 0.05);
    s.policy = "gang".parse().unwrap();
    let e = simulate_tuned(&s, &TunerConfig::default()).unwrap_err();
    assert!(e.to_string().contains("fair-share"), "{e}");
}

#[test]
fn pinning_moves_queued_vcpus_onto_their_pcpu() {
    // A cache-heavy workload makes the tuner pin; the run must still finish
    // with exact accounting (every vCPU moved onto its own pCPU).
    let s = scenario("streamcluster", 0.5);
    let cfg = TunerConfig {
        window_ns: 200_000,
        ..TunerConfig::default()
    };
    let (records, log) = simulate_tuned(&s, &cfg).unwrap();
    assert!(records.iter().all(|r| r.timing.wall_ns > 0));
    for d in &log.decisions {
        if d.decision.conditions.cache_bound {
            assert_eq!(d.decision.to.affinity, VcpuAffinity::Pinned);
        }
    }
}
