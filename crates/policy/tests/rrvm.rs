//! `rrvm`: round robin by VM, through the scheduler's public API.

use smplab_policy::{Action, HostPolicy, Scheduler, VcpuId};

fn settle(s: &mut Scheduler, now: u64, mut actions: Vec<Action>) {
    while let Some(a) = actions.pop() {
        if let Action::Preempt { vcpu } = a {
            actions.extend(s.stopped(vcpu, now));
        }
    }
}

fn vms_on(s: &Scheduler) -> Vec<Option<usize>> {
    (0..s.pcpus())
        .map(|p| s.occupant(p).map(|v: VcpuId| s.vm_of(v)))
        .collect()
}

#[test]
fn vms_take_turns_on_all_pcpus_and_lend_what_they_leave_free() {
    let policy: HostPolicy = "rrvm:1ms".parse().unwrap();
    assert_eq!(policy.to_string(), "rrvm:1ms");
    assert!(policy.is_user_level());
    // VM 0 has one vCPU, VM 1 two, on two pCPUs.
    let mut s = Scheduler::new(&policy, &[1, 2], 2).unwrap();
    let a = s.start(0);
    settle(&mut s, 0, a);
    // VM 0's turn: its vCPU runs, and the pCPU it leaves goes to VM 1.
    assert_eq!(vms_on(&s), vec![Some(0), Some(1)]);
    // VM 1's turn: it takes both pCPUs; its vCPU that ran on keeps its own
    // (no sibling waits for it), where plain round robin would preempt it.
    let a = s.tick(1_000_000);
    assert_eq!(a.len(), 1, "{a:?}");
    settle(&mut s, 1_000_000, a);
    assert_eq!(vms_on(&s), vec![Some(1), Some(1)]);
    // Within its turn nothing changes at the next vCPU slice end...
    let a = s.tick(1_500_000);
    assert!(a.is_empty(), "{a:?}");
    // ...and VM 0 gets a pCPU back when the turn passes.
    let a = s.tick(2_000_000);
    settle(&mut s, 2_000_000, a);
    assert!(vms_on(&s).contains(&Some(0)), "{:?}", vms_on(&s));
    let mut rr = Scheduler::new(&"rr:1ms".parse().unwrap(), &[1, 2], 2).unwrap();
    let a = rr.start(0);
    settle(&mut rr, 0, a);
    assert_eq!(rr.tick(1_000_000).len(), 2, "round robin ends both slices");
}
