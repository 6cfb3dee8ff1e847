//! The summary table the demo prints and the report opens with: one row per
//! workload, slowdowns and weighted speedups with their intervals.

use smplab_analysis::metrics::Results;
use smplab_experiment::point::Point;
use smplab_record::Executor;

/// The summary table: one row per workload, slowdowns and weighted speedups
/// as `median [95% interval]`; `~` marks a slowdown whose wall time is
/// within the noise of native (the intervals overlap), `†` an interval of
/// fewer than 6 repetitions (the range).
pub fn summary_table(results: &Results, workloads: &[&str], scale: f64) -> String {
    use crate::data::{differs_from_native, headline, slowdown_ci, wall_ci, weighted_speedup_ci};
    use smplab_stats::MedianCi;
    let pct = |ci: Option<MedianCi>, noise: Option<bool>| {
        ci.map_or("–".to_string(), |c| {
            if c.lo == c.hi {
                // Exactly repeatable (the simulator): no interval to show.
                return format!("{:+.0}%", c.median * 100.0);
            }
            format!(
                "{:+.0}% [{:+.0},{:+.0}]{}{}",
                c.median * 100.0,
                c.lo * 100.0,
                c.hi * 100.0,
                if c.coverage < 0.95 { "†" } else { "" },
                if noise == Some(false) { "~" } else { "" }
            )
        })
    };
    let ws = |ci: Option<MedianCi>| {
        ci.map_or("–".to_string(), |c| {
            format!("{:.2} [{:.2},{:.2}]", c.median, c.lo, c.hi)
        })
    };
    let mut rows: Vec<[String; 8]> = vec![[
        "workload",
        "native ms",
        "vm",
        "qemu",
        "sim 2vcpu",
        "sim 16vcpu",
        "WS vm×2",
        "WS sim16×4",
    ]
    .map(String::from)];
    for w in workloads {
        // The default set-up at this scale, one VM, `vcpus` vCPUs.
        let one = |e: Executor, vcpus: u32| {
            headline(results, w, e, Some(vcpus))
                .filter(|p| p.vcpus() == Some(vcpus) && p.scale == scale)
        };
        let vm = one(Executor::Vm, 2);
        let native = vm
            .map(|p| crate::data::native_samples(results, p))
            .and_then(|v| MedianCi::of(&v))
            .or_else(|| {
                results
                    .points()
                    .find(|p| {
                        p.executor() == Executor::Native
                            && p.workload == *w
                            && p.threads == 2
                            && p.scale == scale
                            && crate::data::is_default_setup(p)
                    })
                    .and_then(|p| wall_ci(results, p))
            })
            .map_or("–".into(), |c| format!("{:.1}", c.median * 1e3));
        let slow = |p: Option<&Point>| {
            pct(
                p.and_then(|p| slowdown_ci(results, p)),
                p.and_then(|p| differs_from_native(results, p)),
            )
        };
        let with_vms = |p: Option<&Point>, k: u32| {
            p.and_then(|p| {
                let mut q = p.clone();
                q.config.set_vms(k);
                weighted_speedup_ci(results, &q)
            })
        };
        let sim16 = one(Executor::Sim, 16);
        rows.push([
            w.to_string(),
            native,
            slow(vm),
            slow(one(Executor::Qemu, 2)),
            slow(one(Executor::Sim, 2)),
            slow(sim16),
            ws(with_vms(vm, 2)),
            ws(with_vms(sim16, 4)),
        ]);
    }
    let mut out = aligned(&rows);
    out.push_str("Slowdown vs native: median [95% interval] over repetitions (sim: vs its own native model);\n~ within the noise of native, † fewer than 6 repetitions (the range). WS: weighted speedup, 1 = one VM's throughput.\n");
    if let Some(warning) = timing_warning(results) {
        out.push_str(&format!("Warning: {warning}.\n"));
    }
    out
}

/// The warning of the first measured record from an emulated CPU (its
/// timings measure the emulator), as the HTML report's header shows it.
pub fn timing_warning(results: &Results) -> Option<&'static str> {
    results
        .configs
        .values()
        .flatten()
        .flat_map(|e| e.records.iter())
        .find_map(|r| r.host.platform.timing_warning())
}

/// Rows as columns: the first left-aligned, the others right-aligned.
fn aligned(rows: &[[String; 8]]) -> String {
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = format!("{:<w$}", r[0], w = widths[0]);
        for c in 1..8 {
            let pad = widths[c].saturating_sub(r[c].chars().count());
            line.push_str(&format!("  {}{}", " ".repeat(pad), r[c]));
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}
