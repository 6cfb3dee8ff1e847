//! Properties every policy keeps under any sequence of events.

use proptest::prelude::*;
use smplab_policy::{Action, Decider, HostPolicy, PolicyKind, Sample, Scheduler, VcpuState};

#[derive(Debug, Clone)]
enum Event {
    Tick(u64),
    Sample {
        vcpu: usize,
        spin: bool,
        halt: bool,
        kernel: bool,
    },
    /// A preempted vCPU's thread acknowledges (the oldest pending one).
    Stop,
    Finish(usize),
    /// The simulator's events: a vCPU halts, wakes, or a PLE/SDB exit.
    Block(usize),
    Wake(usize),
    SpinExit(usize),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        (1u64..3_000_000).prop_map(Event::Tick),
        (0usize..8, any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
            |(vcpu, spin, halt, kernel)| Event::Sample {
                vcpu,
                spin,
                halt,
                kernel
            }
        ),
        Just(Event::Stop),
        Just(Event::Stop),
        (0usize..4).prop_map(Event::Finish),
        (0usize..8).prop_map(Event::Block),
        (0usize..8).prop_map(Event::Wake),
        (0usize..8).prop_map(Event::SpinExit),
    ]
}

/// Every user-level policy of the registry, with a 1 ms slice, alone or
/// wrapped in safe points (so a new policy is covered once it is named).
fn policy() -> impl Strategy<Value = HostPolicy> {
    let user_level: Vec<PolicyKind> = PolicyKind::ALL
        .iter()
        .copied()
        .filter(|k| k.decider() == Decider::UserLevel)
        .collect();
    (prop::sample::select(user_level), any::<bool>()).prop_map(|(kind, safe)| {
        let grace = if safe { "+safepoint:500us" } else { "" };
        format!("{}:1ms{grace}", kind.name()).parse().unwrap()
    })
}

fn check(s: &Scheduler, vms: usize, vcpus: &[u32]) -> Result<(), TestCaseError> {
    // One occupant per pCPU, and occupant and state agree.
    for p in 0..s.pcpus() {
        if let Some(v) = s.occupant(p) {
            let on_p = matches!(s.state(v), VcpuState::Running { pcpu, .. } if pcpu == p);
            prop_assert!(on_p, "occupant and state disagree");
            prop_assert!(s.allowed(s.vm_of(v), p), "partition crossed");
        }
    }
    for v in 0..s.vcpus() {
        if let VcpuState::Running { pcpu, .. } = s.state(v) {
            prop_assert_eq!(s.occupant(pcpu), Some(v));
        }
    }
    if s.policy().kind == PolicyKind::Gang {
        let mut on: Vec<usize> = (0..s.pcpus())
            .filter_map(|p| s.occupant(p))
            .map(|v| s.vm_of(v))
            .collect();
        on.sort_unstable();
        on.dedup();
        // VMs share a turn only when all their vCPUs fit together.
        let need: usize = on.iter().map(|&vm| vcpus[vm] as usize).sum();
        prop_assert!(need <= s.pcpus(), "gangs that do not fit at once: {on:?}");
    }
    // Work conserving (not gang): a free pCPU means nobody eligible waits.
    if s.policy().kind != PolicyKind::Gang {
        for p in 0..s.pcpus() {
            if s.occupant(p).is_none() {
                let waiting = (0..s.vcpus()).any(|v| {
                    matches!(s.state(v), VcpuState::Runnable { .. }) && s.allowed(s.vm_of(v), p)
                });
                prop_assert!(!waiting, "pCPU {p} idle while a vCPU waits");
            }
        }
    }
    let _ = vms;
    Ok(())
}

proptest! {
    #[test]
    fn every_policy_keeps_its_invariants(
        policy in policy(),
        vcpus in prop::collection::vec(1u32..=2, 1..=4),
        pcpus in 2usize..=4,
        events in prop::collection::vec(event(), 0..200),
    ) {
        let Ok(mut s) = Scheduler::new(&policy, &vcpus, pcpus) else {
            return Ok(()); // e.g. partition with more VMs than pCPUs
        };
        let vms = vcpus.len();
        let mut now = 0;
        let mut pending: Vec<usize> = Vec::new();
        let apply = |s: &mut Scheduler, actions: Vec<Action>, pending: &mut Vec<usize>| {
            for a in actions {
                if let Action::Preempt { vcpu } = a {
                    pending.push(vcpu);
                }
            }
            let _ = s;
        };
        let a = s.start(now);
        apply(&mut s, a, &mut pending);
        check(&s, vms, &vcpus)?;
        for e in events {
            let a = match e {
                Event::Tick(dt) => { now += dt; s.tick(now) }
                Event::Sample { vcpu, spin, halt, kernel } => {
                    let vcpu = vcpu % s.vcpus();
                    s.sample(vcpu, now, Sample { spinning: spin, halted: halt, in_kernel: kernel })
                }
                Event::Stop => {
                    if pending.is_empty() { Vec::new() } else { let v = pending.remove(0); s.stopped(v, now) }
                }
                Event::Finish(vm) => {
                    let vm = vm % vms;
                    pending.retain(|&v| s.vm_of(v) != vm);
                    s.finished(vm, now)
                }
                Event::Block(v) => {
                    let v = v % s.vcpus();
                    pending.retain(|&u| u != v);
                    s.block(v, now)
                }
                Event::Wake(v) => s.wake(v % s.vcpus(), now),
                Event::SpinExit(v) => s.spin_exit(v % s.vcpus(), now),
            };
            apply(&mut s, a, &mut pending);
            check(&s, vms, &vcpus)?;
        }
        // Accounting never exceeds the wall clock.
        s.account_until(now);
        for v in 0..s.vcpus() {
            prop_assert!(s.stats(v).run_ns + s.stats(v).wait_ns <= now);
        }
        for &busy in s.pcpu_busy_ns() {
            prop_assert!(busy <= now);
        }
    }
}
