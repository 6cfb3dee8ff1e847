//! A fair host treats identical VMs alike: Jain's fairness index of per-VM
//! throughput (progress within one simulated second: long enough that the
//! start, where every VM begins co-scheduled, does not dominate) is at least 0.95
//! over host sizes, overcommit ratios, VM sizes and profiles.
//! On `kvm2015`, the profile of Ding & Shan's host. (On `pvm-here`, where exits
//! cost tens of microseconds, CPU time stays fair but a 4x-overcommitted
//! blocking pipeline spends ~98% of it in exits and per-VM throughput
//! scatters: Jain 0.91-0.96 for 4 dedup VMs of 4 vCPUs on 4 pCPUs; see
//! docs/sim.md.) `SMPLAB_SIM_FAIR_CASES=N` runs more cases.

use proptest::prelude::*;
use smplab_sim::*;

/// Progress of one VM: operations executed (compute, touch and sync ops;
/// the per-op iteration and byte totals are left out so one kind does not
/// dominate).
fn progress(r: &RunRecord) -> f64 {
    r.counters
        .ops
        .iter()
        .filter(|(k, _)| !k.ends_with("_iters") && !k.ends_with("_bytes"))
        .map(|(_, &v)| v as f64)
        .sum()
}

/// Jain's index: (Σx)² / (n Σx²); 1 is perfectly fair, 1/n the worst.
fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * q)
}

/// Identical VMs filling `pcpus × overcommit` vCPUs; per-VM progress after
/// `horizon_ms` of simulated time.
pub fn fairness(
    platform: &str,
    profile: &str,
    pcpus: u32,
    overcommit: u32,
    vcpus: u32,
    seed: u64,
    horizon_ms: u64,
) -> f64 {
    let vms = (pcpus * overcommit / vcpus).max(2) as usize;
    let v = VmSpec::from_workload(profile, Some(vcpus), 1000.0, vcpus).unwrap();
    let mut s = Scenario::new(Platform::builtin(platform).unwrap(), pcpus, vec![v; vms]);
    s.seed = seed;
    s.horizon_ns = Some(horizon_ms * 1_000_000);
    s.native_reference = false;
    let recs = simulate(&s).unwrap();
    assert!(
        recs.iter().all(|r| !r.is_ok()),
        "a VM finished: raise the scale"
    );
    let p: Vec<f64> = recs.iter().map(progress).collect();
    jain(&p)
}

fn cases() -> u32 {
    std::env::var("SMPLAB_SIM_FAIR_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

/// The default run draws its cases from a fixed seed, so it checks the same
/// cases every time; `SMPLAB_SIM_FAIR_CASES=N` draws N fresh random ones to
/// search for counter-examples (two are kept, ignored, with their figures).
fn rng_seed() -> proptest::test_runner::RngSeed {
    use proptest::test_runner::RngSeed;
    if std::env::var_os("SMPLAB_SIM_FAIR_CASES").is_some() {
        RngSeed::Random
    } else {
        RngSeed::Fixed(20_261_123)
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        rng_seed: rng_seed(),
        ..ProptestConfig::default()
    })]

    // Found two counter-examples before the fair host balanced by PELT load
    // and kept vruntime lag across migrations (kept below as tests).
    #[test]
    fn identical_vms_get_near_equal_throughput(
        pcpus in prop::sample::select(vec![4u32, 8, 16, 32]),
        overcommit in 1u32..=4,
        vcpus_log in 1u32..=3,
        profile in prop::sample::select(vec!["streamcluster", "blackscholes", "dedup", "fluidanimate", "canneal", "vips"]),
        seed in 0u64..1000,
    ) {
        let vcpus = (1u32 << vcpus_log).min(pcpus);
        let platform = "kvm2015";
        let j = fairness(platform, profile, pcpus, overcommit, vcpus, seed, 1000);
        eprintln!("{platform} {profile} pcpus {pcpus} x{overcommit} vcpus {vcpus} seed {seed}: Jain {j:.3}");
        // Tolerance: the issue's target, 0.95.
        prop_assert!(j >= 0.95, "Jain {j:.3}");
    }
}

/// The issue's case: 16 VMs x 4 vCPUs of streamcluster on 16 pCPUs.
#[test]
fn issue_case_sixteen_streamcluster_vms() {
    let j = fairness("kvm2015", "streamcluster", 16, 4, 4, 1, 1000);
    eprintln!("16 pCPUs, 16 x 4-vCPU streamcluster, 1 s: Jain {j:.3}");
    assert!(j >= 0.95, "Jain {j:.3}");
}

/// A counter-example a random run found (CI, 2026-11-23): 6 VMs of 2 vCPUs
/// of vips on 4 pCPUs, Jain 0.908. Each VM has one busy vCPU: six busy vCPUs
/// on four pCPUs, and the two alone on a pCPU ran twice as fast as the rest
/// because halted vCPUs counted as full load; fixed by PELT load and
/// balancing that relaxes after failed attempts (docs/sim.md).
#[test]
fn counter_example_six_vips_vms_on_four_pcpus() {
    let j = fairness("kvm2015", "vips", 4, 3, 2, 462, 1000);
    eprintln!("4 pCPUs, 6 x 2-vCPU vips, seed 462, 1 s: Jain {j:.3}");
    assert!(j >= 0.95, "Jain {j:.3}");
}

/// The fixed draw's counter-example: 4 VMs of 8 vCPUs of streamcluster on
/// 16 pCPUs (2x overcommitted), Jain 0.865: vruntimes carried absolute
/// across pCPUs kept vCPUs from pCPUs whose clock ran fast off the slow ones
/// (docs/sim.md).
#[test]
fn counter_example_four_streamcluster_vms_on_sixteen_pcpus() {
    let j = fairness("kvm2015", "streamcluster", 16, 2, 8, 109, 1000);
    eprintln!("16 pCPUs, 4 x 8-vCPU streamcluster, seed 109, 1 s: Jain {j:.3}");
    assert!(j >= 0.95, "Jain {j:.3}");
}
