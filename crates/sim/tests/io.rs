//! `io` ops in the simulator: exact counts, exact accounting, interrupts
//! routed per `irq_affinity`, and the record's `io` section.

use smplab_record::config::IrqAffinity;
use smplab_record::RunRecord;
use smplab_sim::{simulate, Platform, Scenario, VmSpec};
use smplab_workload::program::counter_names;

fn oltp(vcpus: u32, affinity: IrqAffinity) -> VmSpec {
    let mut v = VmSpec::from_workload("oltp", Some(4), 0.25, vcpus).expect("builtin");
    v.irq_affinity = affinity;
    v
}

fn run(pcpus: u32, vms: Vec<VmSpec>) -> Vec<RunRecord> {
    let s = Scenario::new(Platform::builtin("kvm2015").unwrap(), pcpus, vms);
    simulate(&s).expect("simulates")
}

fn assert_conserved(rec: &RunRecord) {
    let sim = rec.sim.as_ref().expect("sim section");
    let total: u64 = sim.vcpu_time_ns.values().sum();
    assert_eq!(total, rec.timing.wall_ns * u64::from(sim.vcpus));
    assert_eq!(sim.vcpu_time_ns.get("unattributed"), None);
    let native = sim.native_wall_ns.expect("native reference");
    let total: u64 = sim.native_time_ns.values().sum();
    assert_eq!(total, native * u64::from(sim.native_cores));
}

#[test]
fn io_counts_accounting_and_section() {
    let v = oltp(4, IrqAffinity::default());
    let expected = v.program.expected_counts();
    let recs = run(4, vec![v]);
    let r = &recs[0];
    assert!(r.is_ok(), "{:?}", r.outcome);
    assert_eq!(r.counters.ops, expected);
    assert_conserved(r);
    let io = r.io.as_ref().expect("io section");
    let n = expected[counter_names::IO];
    assert!(n > 0);
    assert_eq!(io.requests, n);
    assert_eq!(io.irq_latency.count, n);
    assert_eq!(io.wake_latency.count, n);
    // Default affinity: every interrupt on vCPU 0.
    assert_eq!(io.irqs_per_cpu, vec![n, 0, 0, 0]);
    let sim = r.sim.as_ref().unwrap();
    assert!(sim.vcpu_time_ns["kernel_io_handler"] > 0);
    // Each doorbell write is a device exit.
    assert!(sim.exits["io"] >= n);
    // A request takes at least its service time (30 µs for the log).
    assert!(io.device_latency.min_ns >= 29_900);
}

#[test]
fn balanced_and_set_affinity_spread_interrupts() {
    let recs = run(4, vec![oltp(4, IrqAffinity::Balanced)]);
    let io = recs[0].io.as_ref().unwrap();
    let (lo, hi) = (
        io.irqs_per_cpu.iter().min().copied().unwrap(),
        io.irqs_per_cpu.iter().max().copied().unwrap(),
    );
    assert!(hi - lo <= 1, "{:?}", io.irqs_per_cpu);
    let recs = run(4, vec![oltp(4, IrqAffinity::Vcpus(vec![1, 3]))]);
    let io = recs[0].io.as_ref().unwrap();
    assert_eq!(io.irqs_per_cpu[0], 0);
    assert_eq!(io.irqs_per_cpu[2], 0);
    assert!(io.irqs_per_cpu[1] > 0 && io.irqs_per_cpu[3] > 0);
}

#[test]
fn io_under_overcommit_conserves_and_finishes() {
    // Two 4-vCPU VMs on 2 pCPUs: interrupts for a preempted vCPU wait for it.
    let recs = run(
        2,
        vec![
            oltp(4, IrqAffinity::default()),
            VmSpec::from_workload("phases", Some(4), 0.25, 4).unwrap(),
        ],
    );
    for r in &recs {
        assert!(r.is_ok(), "{:?}", r.outcome);
        assert_conserved(r);
        assert!(r.io.is_some());
    }
}

#[test]
fn workloads_without_io_have_no_section() {
    let v = VmSpec::from_workload("vips", Some(2), 0.05, 2).unwrap();
    let recs = run(2, vec![v]);
    assert!(recs[0].io.is_none());
}
