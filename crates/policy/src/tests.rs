use super::*;
use crate::tune::VcpuAffinity;

fn policy(text: &str) -> HostPolicy {
    text.parse().unwrap()
}

/// Apply the driver's part of `actions` at once: preempted vCPUs stop.
fn settle(s: &mut Scheduler, now: Ns, mut actions: Vec<Action>) {
    while let Some(a) = actions.pop() {
        if let Action::Preempt { vcpu } = a {
            actions.extend(s.stopped(vcpu, now));
        }
    }
}

fn running(s: &Scheduler) -> Vec<Option<VcpuId>> {
    (0..s.pcpus()).map(|p| s.occupant(p)).collect()
}

#[test]
fn the_simulators_fair_share_model_is_no_user_level_policy() {
    assert_eq!(
        Scheduler::new(&policy("fair"), &[2, 2], 2).unwrap_err(),
        PolicyError::SimulatorOnly
    );
    assert!(matches!(
        crate::check(
            &HostPolicy {
                safe_point_grace_ns: Some(1),
                ..policy("linux")
            },
            &[2],
            2
        ),
        Err(PolicyError::SafePointNeedsUserLevel(_))
    ));
    assert_eq!(crate::check(&policy("fair"), &[2], 2), Ok(()));
    assert_eq!(
        crate::check(&policy("gang"), &[3], 2),
        Err(PolicyError::GangTooLarge {
            vm: 0,
            vcpus: 3,
            pcpus: 2
        })
    );
}

#[test]
fn linux_has_no_user_level_scheduler() {
    assert_eq!(
        Scheduler::new(&policy("linux"), &[2, 2], 2).unwrap_err(),
        PolicyError::NotUserLevel
    );
}

#[test]
fn impossible_settings_are_refused() {
    assert!(matches!(
        Scheduler::new(&policy("partition"), &[1, 1, 1], 2),
        Err(PolicyError::PartitionTooSmall { vms: 3, pcpus: 2 })
    ));
    assert!(matches!(
        Scheduler::new(&policy("gang"), &[3], 2),
        Err(PolicyError::GangTooLarge { vm: 0, .. })
    ));
    assert_eq!(
        Scheduler::new(&policy("rr"), &[2], 0).unwrap_err(),
        PolicyError::NoPcpus
    );
    assert_eq!(
        Scheduler::new(&policy("rr"), &[2, 0], 2).unwrap_err(),
        PolicyError::NoVcpus
    );
}

#[test]
fn fair_rotates_after_a_slice() {
    let mut s = Scheduler::new(&policy("rr:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    assert_eq!(running(&s), vec![Some(0), Some(1)]);
    assert!(s.tick(500_000).is_empty(), "no slice is over yet");
    let a = s.tick(1_000_000);
    assert_eq!(a.len(), 2);
    settle(&mut s, 1_000_000, a);
    let mut on: Vec<_> = running(&s).into_iter().flatten().collect();
    on.sort_unstable();
    assert_eq!(on, vec![2, 3]);
    assert_eq!(s.stats(0).run_ns, 1_000_000);
    assert_eq!(s.stats(2).wait_ns, 1_000_000);
}

#[test]
fn a_slice_is_not_ended_when_nobody_waits() {
    let mut s = Scheduler::new(&policy("rr:1ms"), &[2], 2).unwrap();
    s.start(0);
    assert!(s.tick(5_000_000).is_empty());
}

#[test]
fn spin_yields_to_a_preempted_sibling() {
    let mut s = Scheduler::new(&policy("spin:10ms"), &[2, 2], 2).unwrap();
    s.start(0);
    // VM 0's vCPUs 0 and 1 are on; after a slice VM 1's 2 and 3 are.
    let a = s.tick(10_000_000);
    settle(&mut s, 10_000_000, a);
    // now vCPUs 2 and 3 (VM 1) run; 0 and 1 wait. VM 1's vCPU 2 spins:
    let a = s.sample(
        2,
        11_000_000,
        Sample {
            spinning: true,
            ..Sample::default()
        },
    );
    // No sibling of VM 1 waits (vCPU 3 runs): the one it waits for is
    // running, so it keeps its pCPU.
    assert!(a.is_empty(), "{a:?}");
    assert_eq!(s.stats(2).spins_detected, 1);
    // Slice over: 0 and 1 of VM 0 run again, 2 and 3 wait.
    let a = s.tick(20_000_000);
    settle(&mut s, 20_000_000, a);
    // VM 0's vCPU 0 spins; its sibling 1 runs: it keeps its pCPU.
    let spinning = Sample {
        spinning: true,
        ..Sample::default()
    };
    assert!(s.sample(0, 21_000_000, spinning).is_empty());
    assert!(s.core.was_spinning(0) && !s.core.was_spinning(1));
    assert_eq!(s.stats(2).yields_received, 0);
}

/// A spinner whose awaited sibling is preempted while another VM's vCPU
/// runs alone beside it: that vCPU is displaced for the sibling (a directed
/// swap), the spinner keeps its pCPU, and the pair's slices end together, so
/// the other VM's two vCPUs come back together.
#[test]
fn spin_swaps_the_awaited_sibling_in_beside_the_spinner() {
    let spinning = Sample {
        spinning: true,
        ..Sample::default()
    };
    let mut s = Scheduler::new(&policy("spin:10ms"), &[2, 2], 2).unwrap();
    s.start(0);
    // vCPU 1 halts: VM 1's vCPU 2 takes its pCPU; 0 and 2 run, each VM one
    // vCPU (3 and 1 wait): the round robin's drifted slices.
    let a = s.sample(
        1,
        1_000_000,
        Sample {
            halted: true,
            ..Sample::default()
        },
    );
    settle(&mut s, 1_000_000, a);
    assert_eq!(running(&s), vec![Some(0), Some(2)]);
    // vCPU 0 spins waiting for 1: 2 (running alone) is displaced, 0 stays.
    let a = s.sample(0, 2_000_000, spinning);
    assert_eq!(a, vec![Action::Preempt { vcpu: 2 }]);
    let a = s.stopped(2, 2_000_000);
    assert_eq!(a, vec![Action::Run { vcpu: 1, pcpu: 1 }]);
    assert_eq!(running(&s), vec![Some(0), Some(1)]);
    assert_eq!(s.stats(1).yields_received, 1);
    // 1's slice ends with 0's (at 10 ms, not 12): both leave, and VM 1's
    // vCPUs run together.
    assert_eq!(s.next_deadline(), Some(10_000_000));
    let a = s.tick(10_000_000);
    assert_eq!(a.len(), 2, "{a:?}");
    settle(&mut s, 10_000_000, a);
    let mut on = running(&s);
    on.sort();
    assert_eq!(on, vec![Some(2), Some(3)]);
    // A later run of vCPU 1 has its own full slice again.
    let a = s.tick(20_000_000);
    settle(&mut s, 20_000_000, a);
    assert_eq!(s.next_deadline(), Some(30_000_000));
}

/// Under `spin` a freed pCPU goes to a runnable vCPU whose sibling runs
/// before the longest waiting one (its VM then runs together), but never
/// back to the vCPU that just left it.
#[test]
fn spin_gives_a_freed_pcpu_to_a_running_vcpus_sibling() {
    let halted = Sample {
        halted: true,
        ..Sample::default()
    };
    for (text, expected) in [("spin:10ms", 0), ("rr:10ms", 3)] {
        let mut s = Scheduler::new(&policy(text), &[2, 2], 2).unwrap();
        s.start(0);
        // vCPU 0 halts: 2 (VM 1) takes p0; 1 and 2 run, 3 then 0 wait.
        let a = s.sample(0, 1_000_000, halted);
        settle(&mut s, 1_000_000, a);
        assert_eq!(running(&s), vec![Some(2), Some(1)], "{text}");
        // vCPU 2 halts: 3 waited longest, but 0's sibling 1 runs.
        let a = s.sample(2, 2_000_000, halted);
        settle(&mut s, 2_000_000, a);
        assert_eq!(running(&s), vec![Some(expected), Some(1)], "{text}");
    }
    // A slice end still hands the pCPU to the other VM.
    let mut s = Scheduler::new(&policy("spin:10ms"), &[2, 2], 2).unwrap();
    s.start(0);
    let a = s.tick(10_000_000);
    settle(&mut s, 10_000_000, a);
    let mut on = running(&s);
    on.sort();
    assert_eq!(on, vec![Some(2), Some(3)]);
}

/// The swap never splits a VM whose vCPUs run together: with VM 1 on two
/// of three pCPUs, the spinner yields its own pCPU instead.
#[test]
fn spin_yields_when_a_swap_would_split_a_co_running_vm() {
    let spinning = Sample {
        spinning: true,
        ..Sample::default()
    };
    let mut s = Scheduler::new(&policy("spin:10ms"), &[2, 2], 3).unwrap();
    s.start(0);
    // 0, 1, 2 run; 3 waits. vCPU 1 halts: 3 takes its pCPU, so VM 1 runs
    // both vCPUs and VM 0 runs 0 alone.
    let a = s.sample(
        1,
        1_000_000,
        Sample {
            halted: true,
            ..Sample::default()
        },
    );
    settle(&mut s, 1_000_000, a);
    assert_eq!(running(&s), vec![Some(0), Some(3), Some(2)]);
    let a = s.sample(0, 2_000_000, spinning);
    assert_eq!(a, vec![Action::Preempt { vcpu: 0 }]);
    let a = s.stopped(0, 2_000_000);
    assert_eq!(a, vec![Action::Run { vcpu: 1, pcpu: 0 }]);
}

/// A spinning vCPU yields to the sibling it most likely waits for: one
/// preempted while working (the lock holder) before one preempted while it
/// spun, even when the spinner queued earlier; among workers, the laggard.
#[test]
fn spin_yields_to_the_sibling_preempted_while_working() {
    let spinning = Sample {
        spinning: true,
        ..Sample::default()
    };
    // VM 0 has 3 vCPUs on 2 pCPUs: 0 and 1 run, 2 waits.
    let mut s = Scheduler::new(&policy("spin:10ms"), &[3], 2).unwrap();
    s.start(0);
    // vCPU 0 spins: sibling 2 waits, it gets 0's pCPU.
    let a = s.sample(0, 1_000_000, spinning);
    assert_eq!(a, vec![Action::Preempt { vcpu: 0 }]);
    let a = s.stopped(0, 1_000_000);
    assert!(matches!(a[..], [Action::Run { vcpu: 2, .. }]), "{a:?}");
    assert_eq!(s.stats(2).yields_received, 1);
    // Now 1 and 2 run, 0 waits having spun. vCPU 1's slice ends while it
    // works: 0 (queued first) gets its pCPU, 1 waits having worked.
    let a = s.tick(10_000_000);
    settle(&mut s, 10_000_000, a);
    assert!(matches!(s.state(1), VcpuState::Runnable { .. }));
    assert!(matches!(s.state(0), VcpuState::Running { .. }));
    // vCPU 2 spins: 1, preempted working, is the one it waits for.
    let a = s.sample(2, 10_500_000, spinning);
    assert_eq!(a, vec![Action::Preempt { vcpu: 2 }]);
    let a = s.stopped(2, 10_500_000);
    assert!(matches!(a[..], [Action::Run { vcpu: 1, .. }]), "{a:?}");
    // 0 and 1 run; 2 waits, known as a waiter.
    assert!(s.core.was_spinning(2));
    assert!(!s.core.was_spinning(1));
}

/// Among runnable siblings: workers before waiters, then the laggard.
#[test]
fn the_awaited_sibling_is_a_worker_then_the_laggard() {
    use crate::policies::spin::awaited_sibling;
    let mut s = Scheduler::new(&policy("spin:10ms"), &[4], 1).unwrap();
    s.start(0);
    // vCPU 0 runs; 1, 2, 3 wait. Make 1 a waiter (spun when last seen) and
    // give 2 more run time than 3.
    s.core.spinning[1] = true;
    s.core.stats[2].run_ns = 5_000_000;
    s.core.stats[3].run_ns = 1_000_000;
    assert_eq!(
        awaited_sibling(&s.core, 0, 0),
        Some(3),
        "the laggard worker"
    );
    s.core.spinning[3] = true;
    assert_eq!(awaited_sibling(&s.core, 0, 0), Some(2), "the only worker");
    s.core.spinning[2] = true;
    assert_eq!(
        awaited_sibling(&s.core, 0, 0),
        Some(1),
        "all waiters: the one that ran least"
    );
}

#[test]
fn fair_counts_spins_but_does_not_act_on_them() {
    let mut s = Scheduler::new(&policy("rr"), &[2, 2], 2).unwrap();
    s.start(0);
    let a = s.sample(
        0,
        1,
        Sample {
            spinning: true,
            ..Sample::default()
        },
    );
    assert!(a.is_empty());
    assert_eq!(s.stats(0).spins_detected, 1);
}

#[test]
fn a_halted_vcpu_yields_except_under_gang() {
    let halted = Sample {
        halted: true,
        ..Sample::default()
    };
    let mut s = Scheduler::new(&policy("rr"), &[2, 2], 2).unwrap();
    s.start(0);
    assert_eq!(s.sample(0, 1, halted), vec![Action::Preempt { vcpu: 0 }]);
    let mut g = Scheduler::new(&policy("gang"), &[2, 2], 2).unwrap();
    g.start(0);
    assert!(g.sample(0, 1, halted).is_empty());
}

#[test]
fn safepoint_defers_a_slice_end_in_the_kernel_up_to_the_grace() {
    let mut s = Scheduler::new(&policy("rr:1ms+safepoint:1ms"), &[1, 1], 1).unwrap();
    s.start(0);
    let kernel = Sample {
        in_kernel: true,
        ..Sample::default()
    };
    assert!(s.sample(0, 900_000, kernel).is_empty());
    assert!(s.tick(1_500_000).is_empty(), "in the kernel: deferred");
    assert_eq!(s.tick(2_000_000), vec![Action::Preempt { vcpu: 0 }]);
    assert_eq!(s.stats(0).safepoint_deferrals, 1);
}

#[test]
fn gang_switches_whole_vms() {
    let mut s = Scheduler::new(&policy("gang:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    assert_eq!(running(&s), vec![Some(0), Some(1)]);
    let a = s.tick(1_000_000);
    assert_eq!(a.len(), 2);
    // One of VM 0's vCPUs stopped: nobody of VM 1 may start yet.
    assert!(s.stopped(0, 1_000_000).is_empty());
    let a = s.stopped(1, 1_000_010);
    assert_eq!(a.len(), 2);
    let mut on: Vec<_> = running(&s).into_iter().flatten().collect();
    on.sort_unstable();
    assert_eq!(on, vec![2, 3]);
}

#[test]
fn partition_keeps_vms_apart() {
    let mut s = Scheduler::new(&policy("partition:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    assert_eq!(running(&s), vec![Some(0), Some(2)]);
    let a = s.tick(1_000_000);
    settle(&mut s, 1_000_000, a);
    assert_eq!(running(&s), vec![Some(1), Some(3)]);
}

#[test]
fn a_finished_vm_frees_its_pcpus() {
    let mut s = Scheduler::new(&policy("rr"), &[2, 2], 2).unwrap();
    s.start(0);
    let a = s.finished(0, 5);
    assert_eq!(a.len(), 2);
    assert_eq!(s.state(0), VcpuState::Finished);
    let mut on: Vec<_> = running(&s).into_iter().flatten().collect();
    on.sort_unstable();
    assert_eq!(on, vec![2, 3]);
    assert!(s.tick(u64::MAX / 2).is_empty(), "nobody waits any more");
}

#[test]
fn a_blocked_vcpu_frees_its_pcpu_and_queues_again_on_wake() {
    let mut s = Scheduler::new(&policy("rr:1ms"), &[2, 1], 2).unwrap();
    s.start(0);
    assert_eq!(running(&s), vec![Some(0), Some(1)]);
    let a = s.block(0, 100);
    assert_eq!(a, vec![Action::Run { vcpu: 2, pcpu: 0 }]);
    assert_eq!(s.state(0), VcpuState::Blocked);
    assert!(s.wake(0, 200).is_empty(), "both pCPUs are taken");
    assert!(s.someone_waits_for(1));
    // Blocked time is not steal time.
    s.account_until(300);
    assert_eq!(s.stats(0).wait_ns, 100);
}

#[test]
fn a_hardware_spin_exit_yields_under_fair_but_not_under_gang() {
    let mut s = Scheduler::new(&policy("rr:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    let a = s.spin_exit(0, 10);
    assert_eq!(a, vec![Action::Preempt { vcpu: 0 }]);
    let a = s.stopped(0, 10);
    // No sibling of vCPU 0 waits (vCPU 1 runs): the next in line gets it.
    assert_eq!(a, vec![Action::Run { vcpu: 2, pcpu: 0 }]);
    let mut g = Scheduler::new(&policy("gang:1ms"), &[2, 2], 2).unwrap();
    g.start(0);
    assert!(g.spin_exit(0, 10).is_empty());
    assert_eq!(g.stats(0).spins_detected, 1);
}

#[test]
fn gang_puts_vms_that_fit_together_in_one_turn() {
    let mut s = Scheduler::new(&policy("gang:1ms"), &[2, 2, 2], 4).unwrap();
    s.start(0);
    let vms: Vec<_> = running(&s)
        .into_iter()
        .map(|v| v.map(|v| s.vm_of(v)))
        .collect();
    assert_eq!(vms, vec![Some(0), Some(0), Some(1), Some(1)]);
    let a = s.tick(1_000_000);
    settle(&mut s, 1_000_000, a);
    let on: Vec<_> = running(&s)
        .into_iter()
        .flatten()
        .map(|v| s.vm_of(v))
        .collect();
    assert!(on.contains(&2), "VM 2 gets its turn: {on:?}");
}

#[test]
fn a_woken_gang_member_joins_its_turn() {
    let mut s = Scheduler::new(&policy("gang:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    assert!(s.block(1, 10).is_empty(), "the gang keeps its pCPU idle");
    assert_eq!(running(&s), vec![Some(0), None]);
    assert_eq!(s.wake(1, 20), vec![Action::Run { vcpu: 1, pcpu: 1 }]);
}

#[test]
fn partition_shares_follow_vm_sizes() {
    assert_eq!(partition_shares(&[2, 2], 2), vec![(0, 1), (1, 2)]);
    assert_eq!(partition_shares(&[6, 2], 8), vec![(0, 6), (6, 8)]);
    assert_eq!(
        partition_shares(&[16, 1, 1], 3),
        vec![(0, 1), (1, 2), (2, 3)]
    );
}

#[test]
fn a_deferred_slice_end_has_a_deadline_after_the_grace() {
    let mut s = Scheduler::new(&policy("rr:1ms+safepoint:500us"), &[2, 1], 2).unwrap();
    s.start(0);
    s.sample(
        0,
        10,
        Sample {
            in_kernel: true,
            ..Sample::default()
        },
    );
    s.sample(1, 10, Sample::default());
    assert_eq!(s.next_deadline(), Some(1_000_000));
    let a = s.tick(1_000_000);
    assert_eq!(a, vec![Action::Preempt { vcpu: 1 }]);
    settle(&mut s, 1_000_000, a);
    assert_eq!(s.next_deadline(), Some(1_500_000));
}

/// Drive `s` through `steps` pseudo-random events (ticks, samples, halts and
/// wakes), calling `check` after each with the actions it produced.
fn churn(s: &mut Scheduler, seed: u64, steps: u64, mut check: impl FnMut(&Scheduler, &[Action])) {
    let mut x = seed;
    let mut now = 0;
    let a = s.start(now);
    check(s, &a);
    for _ in 0..steps {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        now += 100_000 + (x >> 40) % 900_000;
        let v = ((x >> 20) % s.vcpus() as u64) as usize;
        let mut actions = match (x >> 10) % 5 {
            0 => s.block(v, now),
            1 => s.wake(v, now),
            2 => s.sample(
                v,
                now,
                Sample {
                    spinning: true,
                    ..Sample::default()
                },
            ),
            3 => s.sample(
                v,
                now,
                Sample {
                    halted: true,
                    ..Sample::default()
                },
            ),
            _ => s.tick(now),
        };
        check(s, &actions);
        // The driver stops preempted vCPUs one by one.
        while let Some(a) = actions.pop() {
            if let Action::Preempt { vcpu } = a {
                let more = s.stopped(vcpu, now);
                check(s, &more);
                actions.extend(more);
            }
        }
        // Blocked vCPUs come back now and then, so the run goes on.
        for w in 0..s.vcpus() {
            if s.state(w) == VcpuState::Blocked && (x >> (w % 32)) & 1 == 1 {
                let more = s.wake(w, now);
                check(s, &more);
                settle(s, now, more);
            }
        }
    }
}

#[test]
fn a_pinned_vcpu_never_runs_on_another_pcpu() {
    for text in [
        "rr:1ms",
        "spin:1ms",
        "gang:1ms",
        "partition:1ms",
        "rr:1ms+safepoint:500us",
    ] {
        // 2 VMs x 2 vCPUs on 2 pCPUs (partition: 2 VMs x 2 vCPUs on 4).
        let pcpus = if text.starts_with("partition") { 4 } else { 2 };
        let mut s = Scheduler::new(&policy(text), &[2, 2], pcpus).unwrap();
        for vm in 0..2 {
            assert!(s
                .set_vm_affinity(vm, VcpuAffinity::Pinned, 0)
                .unwrap()
                .is_empty());
        }
        let pin = |s: &Scheduler, v: VcpuId| match s.affinity(v) {
            Affinity::Pcpus(set) if set.len() == 1 => set[0],
            other => panic!("{text}: vCPU {v} not pinned: {other:?}"),
        };
        // vCPU i of every VM on pCPU i mod n of its VM's pCPUs.
        if pcpus == 2 {
            assert_eq!(
                (pin(&s, 0), pin(&s, 1), pin(&s, 2), pin(&s, 3)),
                (0, 1, 0, 1)
            );
        } else {
            assert_eq!(
                (pin(&s, 0), pin(&s, 1), pin(&s, 2), pin(&s, 3)),
                (0, 1, 2, 3)
            );
        }
        let mut runs = 0;
        churn(&mut s, 7, 3_000, |s, actions| {
            for a in actions {
                if let Action::Run { vcpu, pcpu } = *a {
                    runs += 1;
                    assert_eq!(pcpu, pin(s, vcpu), "{text}: vCPU {vcpu} ran on pCPU {pcpu}");
                }
            }
            for p in 0..s.pcpus() {
                if let Some(v) = s.occupant(p) {
                    assert_eq!(p, pin(s, v), "{text}: vCPU {v} occupies pCPU {p}");
                }
            }
        });
        assert!(runs > 100, "{text}: the churn dispatched only {runs} times");
    }
}

#[test]
fn a_changed_affinity_takes_effect_at_the_next_dispatch() {
    let mut s = Scheduler::new(&policy("rr:1ms"), &[2, 2], 2).unwrap();
    s.start(0);
    assert_eq!(running(&s), vec![Some(0), Some(1)]);
    // vCPU 0 runs on pCPU 0 and may now only use pCPU 1: it leaves at once.
    let a = s.set_affinity(0, Affinity::Pcpus(vec![1]), 10).unwrap();
    assert_eq!(a, vec![Action::Preempt { vcpu: 0 }]);
    assert_eq!(s.stats(0).preemptions, 1);
    // Its pCPU goes to the next in line that may use it (vCPU 2), not back to it.
    assert_eq!(s.stopped(0, 20), vec![Action::Run { vcpu: 2, pcpu: 0 }]);
    // A slice end on pCPU 0 finds nobody who may take it (vCPU 0 waits for
    // pCPU 1, vCPU 3 may go anywhere): vCPU 3 waits for both.
    let a = s.tick(1_100_000);
    settle(&mut s, 1_100_000, a);
    for p in 0..2 {
        if s.occupant(p) == Some(0) {
            assert_eq!(p, 1, "vCPU 0 must only run on pCPU 1");
        }
    }
    // Floating again: its next dispatch may use pCPU 0.
    assert!(s
        .set_affinity(0, Affinity::Any, 1_200_000)
        .unwrap()
        .is_empty());
    assert_eq!(s.affinity(0), &Affinity::Any);
    let mut on0 = false;
    churn(&mut s, 3, 400, |s, _| on0 |= s.occupant(0) == Some(0));
    assert!(on0, "floating vCPU 0 never ran on pCPU 0");
}

#[test]
fn floating_vcpus_are_scheduled_as_without_affinity() {
    for text in ["rr:1ms", "spin:1ms", "gang:1ms", "partition:1ms"] {
        let mut plain = Scheduler::new(&policy(text), &[2, 2], 2).unwrap();
        let mut floating = plain.clone();
        for vm in 0..2 {
            assert!(floating
                .set_vm_affinity(vm, VcpuAffinity::Floating, 0)
                .unwrap()
                .is_empty());
        }
        let mut a = Vec::new();
        churn(&mut plain, 11, 2_000, |_, x| a.extend_from_slice(x));
        let mut b = Vec::new();
        churn(&mut floating, 11, 2_000, |_, x| b.extend_from_slice(x));
        assert_eq!(a, b, "{text}");
        assert!(a.len() > 100, "{text}");
    }
}

#[test]
fn impossible_affinities_are_refused_and_change_nothing() {
    let mut s = Scheduler::new(&policy("partition"), &[2, 2], 2).unwrap();
    s.start(0);
    assert!(matches!(
        s.set_affinity(0, Affinity::Pcpus(vec![]), 1),
        Err(PolicyError::BadAffinity { vcpu: 0, .. })
    ));
    assert!(matches!(
        s.set_affinity(0, Affinity::Pcpus(vec![2]), 1),
        Err(PolicyError::BadAffinity { vcpu: 0, .. })
    ));
    // VM 0's share is pCPU 0: pCPU 1 alone would starve it.
    let e = s.set_affinity(1, Affinity::Pcpus(vec![1]), 1).unwrap_err();
    assert!(e.to_string().contains("share"), "{e}");
    assert!(matches!(
        s.set_affinity(4, Affinity::Any, 1),
        Err(PolicyError::NoSuchVcpu { vcpu: 4, vcpus: 4 })
    ));
    assert!(matches!(
        s.set_vm_affinity(2, VcpuAffinity::Pinned, 1),
        Err(PolicyError::NoSuchVm { vm: 2, vms: 2 })
    ));
    assert_eq!(s.affinity(1), &Affinity::Any);
    // Pinned under partition pins inside the share.
    s.set_vm_affinity(1, VcpuAffinity::Pinned, 1).unwrap();
    assert_eq!(s.affinity(2), &Affinity::Pcpus(vec![1]));
    assert_eq!(s.affinity(3), &Affinity::Pcpus(vec![1]));
}

/// `spin` asks for a spin sample only while a sibling of the vCPU is
/// preempted and could take its pCPU (then a verdict can act); `rr` counts
/// spins and always wants its samples.
#[test]
fn spin_samples_only_while_a_sibling_is_preempted() {
    let mut s = Scheduler::new(&policy("spin:10ms"), &[2, 2], 2).unwrap();
    s.start(0);
    // VM 0's two vCPUs run: nothing to yield to.
    assert!(matches!(s.state(0), VcpuState::Running { .. }));
    assert!(!s.wants_spin_sample(0) && !s.wants_spin_sample(1));
    // vCPU 1 halts: VM 1's vCPU 2 takes its pCPU. Now 0 and 2 run, each with
    // a preempted sibling (1, 3).
    let halted = Sample {
        halted: true,
        ..Sample::default()
    };
    let a = s.sample(1, 1_000_000, halted);
    settle(&mut s, 1_000_000, a);
    assert!(matches!(s.state(2), VcpuState::Running { .. }));
    assert!(s.wants_spin_sample(0) && s.wants_spin_sample(2));
    // A vCPU that does not run is never sampled.
    assert!(!s.wants_spin_sample(1));
    let mut rr = Scheduler::new(&policy("rr:10ms"), &[2, 2], 2).unwrap();
    rr.start(0);
    assert!(rr.wants_spin_sample(0), "rr's samples judge the detector");
    let mut safe = Scheduler::new(&policy("spin:10ms+safepoint:1ms"), &[2, 2], 2).unwrap();
    safe.start(0);
    assert!(
        !safe.wants_spin_sample(0),
        "the safe point forwards the hook"
    );
}
