//! A diagnosis for people: the attribution as a text table with its caveats
//! spelled out (the charts are the report's).

use super::Attribution;
use smplab_stats::MedianCi;

/// A slowdown interval in percent: `+12.3% [+10.1, +14.0]`.
fn pct_ci(ci: &MedianCi) -> String {
    format!(
        "{:+.1}% [{:+.1}, {:+.1}]",
        ci.median * 100.0,
        ci.lo * 100.0,
        ci.hi * 100.0
    )
}

/// The attribution as a text table.
pub fn table(a: &Attribution) -> String {
    let mut s = format!(
        "Diagnosis of {} on {} ({} vCPUs{}): native {:.3} ms, baseline slowdown {} (95% interval of the median, {} runs)\n",
        a.workload,
        a.executor,
        a.vcpus,
        if a.vms > 1 { format!(", {} VMs at once", a.vms) } else { String::new() },
        a.native_wall_s.median * 1e3,
        pct_ci(&a.baseline_ci),
        a.baseline_ci.n,
    );
    s.push_str(&format!(
        "  {:<22} {:>30} {:>26} {:>13}  {}\n",
        "factor removed",
        "slowdown without [95% interval]",
        "wall ÷ baseline, paired",
        "attributed",
        "how"
    ));
    let mut noisy = false;
    let mut few = a.baseline_ci.coverage < 0.95;
    for r in &a.rows {
        noisy |= !r.credited;
        few |= r.slowdown_without_ci.coverage < 0.95;
        let credit = if r.credited {
            format!("{:+.1}%", r.contribution * 100.0)
        } else {
            "within noise".to_string()
        };
        let paired = r.paired.map_or_else(
            || "no pairs".to_string(),
            |c| format!("{:.3} [{:.3}, {:.3}]", c.median, c.lo, c.hi),
        );
        s.push_str(&format!(
            "  {:<22} {:>30} {:>26} {:>13}  {}\n",
            r.factor,
            pct_ci(&r.slowdown_without_ci),
            paired,
            credit,
            r.removal
        ));
    }
    for (factor, why) in &a.not_applicable {
        s.push_str(&format!(
            "  {factor:<22} {:>30} {:>26} {:>13}  {why}\n",
            "", "", "not applicable"
        ));
    }
    if let (Some(all), Some(i)) = (a.all_removed_ci, a.interaction) {
        s.push_str(&format!(
            "  {:<22} {:>30} {:>26} {:>13}  (what no single credited removal explains)\n",
            "interaction",
            "",
            "",
            format!("{:+.1}%", i * 100.0)
        ));
        s.push_str(&format!(
            "  {:<22} {:>30} {:>26} {:>13}  every factor above removed at once\n",
            "remainder",
            pct_ci(&all),
            "",
            ""
        ));
    }
    for m in &a.missing {
        s.push_str(&format!("  {m}: no successful run, not attributed\n"));
    }
    match a.fewest_pairs() {
        Some(1) => s.push_str("  WARNING: one repetition. A single pair of runs cannot tell a factor from run order or host noise:\n  nothing is credited. Run at least 6 repetitions (--reps 6).\n"),
        Some(n) if a.too_few_pairs() => s.push_str(&format!("  WARNING: {n} repetitions. Fewer than 6 pairs have no 95% interval of the paired ratio: nothing is\n  credited. Run at least 6 repetitions (--reps 6).\n")),
        _ => {}
    }
    if noisy {
        s.push_str("  within noise: the 95% interval of the paired ratio (wall time without the factor ÷ the baseline's, runs of one\n  repetition back to back) holds 1, so the difference is not credited (it counts as 0 in the interaction);\n  more repetitions or longer runs narrow it.\n");
    }
    if few {
        s.push_str("  Fewer than 6 runs of a configuration: its interval is the full range and covers the median with less than 95%.\n");
    }
    remainder_note(&mut s, a);
    s.push_str(
        "  Factors interact: each is removed from the baseline alone, so the attributions need not add up;\n  the interaction line is the difference, and the order of removal would change a sequential split.\n",
    );
    if let Some(x) = &a.sim {
        s.push('\n');
        s.push_str(&x.table);
    }
    s
}

/// What the remainder (the slowdown left with every factor removed) says,
/// when it says something: the removals cost more than the factors, or most
/// of the slowdown is not among the factors (named by the simulator's
/// accounting where there is one, else the PVM host's emulated guest kernel).
fn remainder_note(s: &mut String, a: &Attribution) {
    if let Some(all) = a.all_removed {
        if a.baseline.median > 0.0 && all.median >= a.baseline.median {
            s.push_str(&format!(
                "  Removing every factor at once does not reduce the slowdown ({:+.1}% against {:+.1}%): here the\n  removals cost more than the factors (e.g. blocking instead of spinning pays a guest context switch per wait).\n",
                all.median * 100.0,
                a.baseline.median * 100.0
            ));
        } else if let (true, Some(x)) = (
            a.baseline.median > 0.0 && all.median > 0.5 * a.baseline.median,
            a.sim.as_ref().filter(|x| !x.causes.is_empty()),
        ) {
            s.push_str(&format!(
                "  Most of the slowdown ({:.0}% of it) remains with every factor removed; the simulator's accounting\n  of the baseline names where the VM's extra time goes: {}.\n",
                all.median / a.baseline.median * 100.0,
                super::sim::named_causes(x)
            ));
        } else if a.baseline.median > 0.0 && all.median > 0.5 * a.baseline.median {
            s.push_str(&format!(
                "  Most of the slowdown ({:.0}% of it) remains with every factor removed: its main cause is not among these factors.\n",
                all.median / a.baseline.median * 100.0
            ));
            if a.pvm_host {
                s.push_str("  On this PVM host guest kernel code (CPL0: blocking, wakeups, IPIs, the scheduler) runs in KVM's\n  instruction emulator, ~1000x slower than natively (PLATFORM.md) - the likely remainder.\n");
            }
        }
    }
}
