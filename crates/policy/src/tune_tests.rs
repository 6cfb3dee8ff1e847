//! Tests of the tuner (`tune.rs`).

use super::*;

fn initial() -> Setting {
    Setting {
        slice_ns: 24_000_000,
        affinity: VcpuAffinity::Floating,
        irq: IrqAffinity::default(),
    }
}

fn tuner() -> Tuner {
    let config = TunerConfig {
        long_slice_ns: 24_000_000,
        ..TunerConfig::default()
    };
    Tuner::new(config, initial())
}

fn io_phase() -> Indicators {
    Indicators {
        window_ns: 1_000_000,
        irqs_per_s: 6_000.0,
        irq_latency_ns: 400_000.0,
        resched_ipis_per_s: 2_000.0,
        ..Indicators::default()
    }
}

fn sync_phase() -> Indicators {
    Indicators {
        window_ns: 1_000_000,
        resched_ipis_per_s: 12_000.0,
        spins_per_s: 100.0,
        ..Indicators::default()
    }
}

#[test]
fn a_phase_change_changes_the_setting_after_confirmation() {
    let mut t = tuner();
    assert_eq!(
        t.observe(1_000_000, io_phase()),
        None,
        "one window is not enough"
    );
    let s = t
        .observe(2_000_000, io_phase())
        .expect("confirmed I/O phase");
    assert_eq!(s.slice_ns, 100_000);
    assert_eq!(s.irq, IrqAffinity::Running);
    for k in 3..10 {
        assert_eq!(t.observe(k * 1_000_000, io_phase()), None);
    }
    // A compute phase with a large footprint: no more interrupts, few
    // wakeups, an expensive refill per dispatch.
    let compute = Indicators {
        window_ns: 1_000_000,
        refill_ns_per_dispatch: 60_000.0,
        resched_ipis_per_s: 200.0,
        ..Indicators::default()
    };
    let mut changed = None;
    for k in 10..14 {
        if let Some(s) = t.observe(k * 1_000_000, compute) {
            changed = Some((k, s));
            break;
        }
    }
    let (k, s) = changed.expect("the tuner must react to the new phase");
    assert_eq!(k, 11, "reacts at the second window of the new phase");
    assert_eq!(s.affinity, VcpuAffinity::Pinned);
    assert_eq!(s.slice_ns, 24_000_000);
    assert!(!t.conditions().io_late && t.conditions().cache_bound);
    assert_eq!(t.log().len(), 2);
    assert!(
        t.log()[1].to_string().contains("cache-bound"),
        "{}",
        t.log()[1]
    );
}

#[test]
fn synchronization_asks_for_short_floating_slices() {
    let mut t = tuner();
    t.observe(1_000_000, sync_phase());
    let s = t.observe(2_000_000, sync_phase()).expect("confirmed");
    assert_eq!(s.slice_ns, 100_000);
    assert_eq!(s.affinity, VcpuAffinity::Floating);
    assert_eq!(
        s.irq,
        IrqAffinity::default(),
        "no interrupts: routing untouched"
    );
}

#[test]
fn hysteresis_holds_a_setting_on_a_noisy_steady_phase() {
    let mut t = tuner();
    t.observe(1_000_000, io_phase());
    t.observe(2_000_000, io_phase());
    assert_eq!(t.log().len(), 1);
    // The same phase with its rate swinging between 60% and 140% of the
    // entry threshold and its latency cured: no change.
    let mut x = 7u64;
    for k in 3..200u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let f = 0.6 + 0.8 * ((x >> 33) as f64 / (1u64 << 31) as f64);
        let i = Indicators {
            irqs_per_s: 1_000.0 * f,
            irq_latency_ns: 5_000.0,
            ..io_phase()
        };
        assert_eq!(t.observe(k * 1_000_000, i), None, "changed at window {k}");
    }
    assert_eq!(t.log().len(), 1);
}

#[test]
fn a_single_odd_window_changes_nothing() {
    let mut t = tuner();
    for k in 0..50u64 {
        let i = if k % 2 == 0 {
            sync_phase()
        } else {
            Indicators::default()
        };
        // A quiet window drops sync-heavy (below half the threshold),
        // so no proposal is ever confirmed twice in a row.
        t.observe(k * 1_000_000, i);
    }
    assert!(t.log().is_empty(), "{:?}", t.log());
}

#[test]
fn cache_bound_keeps_the_long_slice_and_pins() {
    let mut t = tuner();
    let i = Indicators {
        window_ns: 1_000_000,
        refill_ns_per_dispatch: 80_000.0,
        resched_ipis_per_s: 100.0,
        spins_per_s: 900.0,
        ..Indicators::default()
    };
    t.observe(1_000_000, i);
    t.observe(2_000_000, i);
    // Spinning asks for short slices and floating, the footprint forbids
    // short slices: long slice, floating.
    assert_eq!(t.current().slice_ns, 24_000_000);
    let quiet = Indicators {
        spins_per_s: 0.0,
        ..i
    };
    t.observe(3_000_000, quiet);
    t.observe(4_000_000, quiet);
    assert_eq!(t.current().affinity, VcpuAffinity::Pinned);
    assert_eq!(t.current().slice_ns, 24_000_000);
}

/// A VM whose spins show only under the long slice: the short slice
/// (the cure) hides them, as on the real host's dedup.
fn hidden_by_cure(t: &Tuner) -> Indicators {
    Indicators {
        window_ns: 1_000_000,
        spins_per_s: if t.current().slice_ns == 100_000 {
            0.0
        } else {
            2_000.0
        },
        ..Indicators::default()
    }
}

/// Runs `windows` windows of `hidden_by_cure` from window `from`;
/// returns the windows spent on the short slice and the decisions made.
fn closed_loop(t: &mut Tuner, from: u64, windows: u64) -> (u64, usize) {
    let before = t.log().len();
    let mut short = 0;
    for k in from..from + windows {
        let i = hidden_by_cure(t);
        t.observe(k * 1_000_000, i);
        short += u64::from(t.current().slice_ns == 100_000);
    }
    (short, t.log().len() - before)
}

#[test]
fn an_indicator_hidden_by_its_cure_does_not_make_the_tuner_oscillate() {
    // Without memory (a hold of at most one window) the tuner flips
    // between the two slices every few windows, half its time on each.
    let mut forgetful = Tuner::new(
        TunerConfig {
            long_slice_ns: 24_000_000,
            max_hold_windows: 1,
            ..TunerConfig::default()
        },
        initial(),
    );
    let (short, changes) = closed_loop(&mut forgetful, 0, 1000);
    assert!(changes > 200, "{changes} changes");
    assert!(short < 700, "{short} of 1000 windows short");
    // With memory each relapse doubles the hold, so after a few flips
    // it stays on the short slice for max_hold_windows at a time.
    let mut t = tuner();
    let (short, changes) = closed_loop(&mut t, 0, 1000);
    assert!(changes < 50, "{changes} changes: {:#?}", t.log());
    assert!(short > 900, "{short} of 1000 windows short");
    assert_eq!(t.holds()[2], t.config().max_hold_windows);
    assert!(t.held().spinning || !t.conditions().spinning || t.current().slice_ns == 100_000);
    // Once settled, every stay on the short slice lasts the full hold.
    let mut run = 0u64;
    let mut stays = Vec::new();
    for k in 1000..2000u64 {
        let i = hidden_by_cure(&t);
        t.observe(k * 1_000_000, i);
        if t.current().slice_ns == 100_000 {
            run += 1;
        } else if run > 0 {
            stays.push(run);
            run = 0;
        }
    }
    // (The first stay began before window 1000.)
    assert!(stays.len() > 2, "{stays:?}");
    assert!(
        stays[1..]
            .iter()
            .all(|&n| n >= u64::from(t.config().max_hold_windows)),
        "{stays:?}"
    );
}

#[test]
fn memory_still_lets_a_real_phase_change_through() {
    let mut t = tuner();
    closed_loop(&mut t, 0, 300);
    assert_eq!(t.holds()[2], t.config().max_hold_windows);
    // A new phase with another signature is seen at once: an I/O phase
    // moves the interrupts at its second window (the confirmation).
    let io = |t: &Tuner| Indicators {
        irqs_per_s: 6_000.0,
        irq_latency_ns: 400_000.0,
        ..hidden_by_cure(t)
    };
    let mut moved = None;
    for k in 300..310u64 {
        let i = io(&t);
        if t.observe(k * 1_000_000, i)
            .is_some_and(|s| s.irq == IrqAffinity::Running)
        {
            moved = Some(k);
            break;
        }
    }
    assert_eq!(moved, Some(301), "{:#?}", t.log());
    // The spins end for good (nothing else left): the long slice is back
    // within the hold plus the confirmation, not never.
    let quiet = Indicators {
        window_ns: 1_000_000,
        ..Indicators::default()
    };
    let bound = u64::from(t.config().max_hold_windows + t.config().confirm_windows);
    let mut back = None;
    for k in 0..bound + 10 {
        t.observe((310 + k) * 1_000_000, quiet);
        if t.current().slice_ns == 24_000_000 {
            back = Some(k + 1);
            break;
        }
    }
    let back = back.expect("the long slice must come back");
    assert!(back <= bound, "{back} windows > {bound}");
    // Off beyond relapse_windows, the condition forgets its hold.
    for k in 0..u64::from(t.config().relapse_windows) + 2 {
        t.observe((400 + k) * 1_000_000, quiet);
    }
    assert_eq!(t.holds()[2], 1);
}

#[test]
fn a_cure_that_does_not_lower_the_latency_is_undone_and_not_retried_at_once() {
    let mut t = Tuner::new(
        TunerConfig {
            long_slice_ns: 24_000_000,
            cure_check_windows: 4,
            ..TunerConfig::default()
        },
        initial(),
    );
    // Late interrupts whatever the slice: the cure does not help.
    let mut changes = Vec::new();
    for k in 0..200u64 {
        if let Some(s) = t.observe(k * 1_000_000, io_phase()) {
            changes.push((k, s.slice_ns));
        }
    }
    assert_eq!(changes[0], (1, 100_000), "{changes:?}");
    // Judged after 4 windows on the cure (at window 6), back to the
    // long slice at the confirmation.
    assert_eq!(changes[1], (7, 24_000_000), "{changes:?}");
    let failed = &t.log()[1];
    assert!(failed.failed.io_late);
    assert!(
        failed.to_string().contains("cure did not help: io-late"),
        "{failed}"
    );
    // Retried after relapse_windows (16), then after 32, 64, 64...:
    // few changes, most windows on the long slice.
    assert_eq!(changes[2].0, 6 + 16 + 2, "{changes:?}");
    assert!(changes[4].0 - changes[3].0 > changes[2].0 - changes[1].0);
    assert!(changes.len() <= 10, "{changes:?}");

    // A cure that works stays: the latency falls under the short slice.
    let mut t = Tuner::new(
        TunerConfig {
            long_slice_ns: 24_000_000,
            cure_check_windows: 4,
            ..TunerConfig::default()
        },
        initial(),
    );
    for k in 0..100u64 {
        let cured = t.current().slice_ns == 100_000;
        let i = Indicators {
            irq_latency_ns: if cured { 100_000.0 } else { 400_000.0 },
            ..io_phase()
        };
        t.observe(k * 1_000_000, i);
    }
    assert_eq!(t.log().len(), 1, "{:#?}", t.log());
    assert_eq!(t.current().slice_ns, 100_000);
}
