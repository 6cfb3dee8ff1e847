//! The precision line: how many of the measured configurations of a store
//! reached the ±5% target (the 95% interval of the median wall time, or for a
//! VM configuration the interval of its paired ratio to native), and for the
//! others why not — what other processes and the hypervisor took from the
//! host while they ran (`RunRecord::interference`), and how many repetitions
//! were left out as disturbed by steal.

use smplab_analysis::metrics::Results;
use smplab_experiment::store::Store;
use smplab_record::Executor;
use smplab_stats::{median, TARGET_REL_HALF_WIDTH};

/// The line, or `None` when the store has no measured configuration (native
/// or smplab-vmm, outside a study such as a diagnosis or a calibration).
pub fn precision_line(results: &Results, store: &Store) -> Option<String> {
    let rel = TARGET_REL_HALF_WIDTH;
    let (mut measured, mut narrow, mut by_pairs) = (0usize, 0usize, 0usize);
    let (mut other, mut steal) = (Vec::new(), Vec::new());
    for p in results
        .points()
        .filter(|p| matches!(p.executor(), Executor::Native | Executor::Vm) && p.study.is_none())
    {
        let Some(prec) = results.precision(p, rel) else {
            continue;
        };
        measured += 1;
        if prec.is_narrow() {
            narrow += 1;
            by_pairs += usize::from(!prec.own_narrow);
            continue;
        }
        for i in results
            .get(p)
            .into_iter()
            .flatten()
            .flat_map(|e| e.records.iter())
            .filter_map(|r| r.interference.as_ref())
        {
            steal.push(i.steal_fraction);
            other.extend(i.other_cpu_fraction);
        }
    }
    if measured == 0 {
        return None;
    }
    // Casts: counts of configurations are far below 2^52.
    #[allow(clippy::cast_precision_loss)]
    let share = narrow as f64 * 100.0 / measured as f64;
    let mut line = format!(
        "Precision: {narrow} of {measured} measured configurations ({share:.0}%) reached ±{:.0}% (95% interval of the median wall time, or of the paired ratio to native for {by_pairs} of them).",
        rel * 100.0
    );
    if narrow < measured {
        let pct = |v: &[f64], digits: usize| {
            median(v).map_or_else(
                || "an unmeasured share".to_string(),
                |f| format!("{:.digits$}%", f * 100.0),
            )
        };
        let disturbed = store.entries().iter().filter(|e| e.disturbed).count();
        line.push_str(&format!(
            " The other {}: while they ran, other processes used a median {} of the host's CPU time and the hypervisor stole {}; {disturbed} repetitions were left out as disturbed by steal. Their differences are less certain: re-measure them on a quiet host.",
            measured - narrow,
            pct(&other, 0),
            pct(&steal, 1),
        ));
    }
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_experiment::store::{Entry, Status};
    use smplab_experiment::testutil::{rec, vm_point};
    use smplab_record::interference::Interference;

    /// dedup: the host is 1.5x slower in odd repetitions for both runs of a
    /// pair (VM narrow by its paired ratio, native wide); one VM repetition
    /// disturbed by steal is counted.
    #[test]
    fn counts_narrow_configurations_and_says_why_the_others_are_not() {
        let vm = vm_point("dedup", 2, 0);
        let native = vm.native_twin();
        let mut es = vec![];
        for rep in 0..8u32 {
            let slow = if rep % 2 == 1 { 3 } else { 2 };
            let at = |p: &smplab_experiment::point::Point, e: Executor, wall: u64| {
                let mut p = p.clone();
                p.rep = rep;
                let mut r = rec(e, "dedup", 2, wall);
                r.interference = Some(Interference {
                    other_cpu_fraction: Some(0.8),
                    ..Default::default()
                });
                Entry::new(p, Status::Ok, 0.0, vec![r])
            };
            es.push(at(&native, Executor::Native, 100 * slow));
            es.push(at(&vm, Executor::Vm, 300 * slow));
        }
        let mut disturbed = es[1].clone();
        disturbed.disturbed = true;
        es.insert(1, disturbed);
        let store = Store::from_entries(es);
        let line = precision_line(&Results::new(&store), &store).unwrap();
        assert!(
            line.contains("1 of 2 measured configurations (50%) reached ±5%"),
            "{line}"
        );
        assert!(
            line.contains("paired ratio to native for 1 of them"),
            "{line}"
        );
        assert!(line.contains("other processes used a median 80%"), "{line}");
        assert!(line.contains("1 repetitions were left out"), "{line}");
        let empty = Store::from_entries(vec![]);
        assert!(precision_line(&Results::new(&empty), &empty).is_none());
    }
}
