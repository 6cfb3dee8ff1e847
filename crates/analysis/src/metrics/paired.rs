//! Comparisons measured as interleaved pairs: a configuration's repetition
//! `r` against its native twin's repetition `r`, which the sweep ran right
//! beside it (`smplab_experiment::sweep`, "Pairs"). The interval of the
//! paired ratio's median cancels what the shared host did to both runs of a
//! pair; two independent intervals count that drift twice.

use super::Results;
use smplab_experiment::point::Point;
use smplab_experiment::sweep::mean_wall_s;
use smplab_record::Executor;
use smplab_stats::{paired_ratio, MedianCi, MIN_SAMPLES_FOR_95};
use std::collections::BTreeMap;

impl Results<'_> {
    /// The paired ratio of `p`'s wall time to its native twin's, repetition
    /// by repetition (mean over VMs); `None` for native and simulator points
    /// or without a common repetition.
    pub fn paired_native_ratio(&self, p: &Point) -> Option<MedianCi> {
        if matches!(p.executor(), Executor::Native | Executor::Sim) {
            return None;
        }
        let native: BTreeMap<u32, f64> = self
            .native_for(p)?
            .iter()
            .map(|e| (e.point.rep, mean_wall_s(&e.records)))
            .collect();
        let pairs: Vec<(f64, f64)> = self
            .get(p)?
            .iter()
            .filter_map(|e| Some((*native.get(&e.point.rep)?, mean_wall_s(&e.records))))
            .collect();
        paired_ratio(&pairs)
    }

    /// The slowdown versus native from interleaved pairs (paired ratio − 1),
    /// when there are enough pairs for a 95% interval.
    pub fn paired_slowdown_ci(&self, p: &Point) -> Option<MedianCi> {
        let r = self
            .paired_native_ratio(p)
            .filter(|r| r.n >= MIN_SAMPLES_FOR_95)?;
        Some(MedianCi {
            median: r.median - 1.0,
            lo: r.lo - 1.0,
            hi: r.hi - 1.0,
            ..r
        })
    }

    /// Whether configuration `p` reached a relative half-width of `rel`: its
    /// own wall-time interval, or (VM configurations) the interval of its
    /// paired ratio to native. `None` without runs.
    pub fn precision(&self, p: &Point, rel: f64) -> Option<Precision> {
        let own = self.wall_ci(p)?;
        let paired = self.paired_native_ratio(p);
        Some(Precision {
            own_narrow: own.is_narrow(rel),
            paired_narrow: paired.is_some_and(|c| c.is_narrow(rel)),
            own,
            paired,
        })
    }
}

/// How certain a measured configuration is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Precision {
    pub own: MedianCi,
    pub paired: Option<MedianCi>,
    pub own_narrow: bool,
    pub paired_narrow: bool,
}

impl Precision {
    pub fn is_narrow(&self) -> bool {
        self.own_narrow || self.paired_narrow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_experiment::store::{Entry, Status, Store};
    use smplab_experiment::testutil::{rec, vm_point};

    /// The host is 1.5x slower in odd repetitions, for both runs of a pair:
    /// the independent slowdown interval is wide, the paired one is a point.
    #[test]
    fn paired_slowdown_cancels_the_drift_of_a_pair() {
        let vm = vm_point("dedup", 2, 0);
        let native = vm.native_twin();
        let mut es = vec![];
        for rep in 0..6u32 {
            let slow = if rep % 2 == 1 { 3 } else { 2 };
            let mut n = native.clone();
            n.rep = rep;
            let mut v = vm.clone();
            v.rep = rep;
            es.push(Entry::new(
                n,
                Status::Ok,
                0.0,
                vec![rec(Executor::Native, "dedup", 2, 100 * slow)],
            ));
            es.push(Entry::new(
                v,
                Status::Ok,
                0.0,
                vec![rec(Executor::Vm, "dedup", 2, 300 * slow)],
            ));
        }
        let store = Store::from_entries(es);
        let r = Results::new(&store);
        let paired = r.paired_slowdown_ci(&vm).unwrap();
        assert!(
            (paired.median - 2.0).abs() < 1e-12 && paired.lo == paired.hi,
            "{paired:?}"
        );
        assert_eq!(
            r.slowdown_ci(&vm),
            Some(paired),
            "the paired interval is reported"
        );
        let p = r.precision(&vm, 0.05).unwrap();
        assert!(!p.own_narrow && p.paired_narrow && p.is_narrow());
        assert!(r.paired_native_ratio(&native).is_none());
    }
}
