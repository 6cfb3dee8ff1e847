//! The simulator's side of a diagnosis: its exact time accounting
//! ([`smplab_sim::breakdown`]) for the unmodified baseline, printed beside the
//! remove-one-factor table, and the causes that name what remains when every
//! factor is removed (the simulator charges every nanosecond, so the remainder
//! is never "not among these factors" there).

use crate::metrics::Results;
use smplab_experiment::point::Point;
use smplab_record::{Executor, RunRecord};
use smplab_sim::breakdown;

/// How many causes the remainder sentence names.
const NAMED_CAUSES: usize = 3;

/// What the simulator's accounting says about the baseline of a diagnosis.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SimExplanation {
    /// The table of [`breakdown::format_breakdown`] for one baseline record.
    pub table: String,
    /// The causes that add most to the VM's wall time over bare metal, with
    /// their share of the difference (1.0 = all of it), largest first.
    pub causes: Vec<(String, f64)>,
}

/// The accounting of the unmodified baseline `b`, if it is a simulator point
/// with stored runs carrying accounting. The sim is deterministic per seed, so
/// any baseline record stands for the configuration; the one with the median
/// wall time is used.
pub fn explain(results: &Results, b: &Point) -> Option<SimExplanation> {
    if b.executor() != Executor::Sim {
        return None;
    }
    let mut recs: Vec<&RunRecord> = results
        .get(b)?
        .iter()
        .flat_map(|e| e.records.iter())
        .filter(|r| breakdown::rows(r).is_some())
        .collect();
    recs.sort_by_key(|r| r.timing.wall_ns);
    let r = *recs.get(recs.len() / 2)?;
    of_record(r)
}

/// The explanation of one sim record.
pub fn of_record(r: &RunRecord) -> Option<SimExplanation> {
    let table = breakdown::format_breakdown(r)?;
    let native = r.sim.as_ref()?.native_wall_ns? as f64;
    let diff = r.timing.wall_ns as f64 - native;
    let mut causes: Vec<(String, f64)> = breakdown::rows(r)?
        .into_iter()
        .filter(|row| row.delta_ns() > 0.0 && diff > 0.0)
        .map(|row| (row.cause.to_string(), row.delta_ns() / diff))
        .collect();
    causes.sort_by(|a, b| b.1.total_cmp(&a.1));
    causes.truncate(NAMED_CAUSES);
    Some(SimExplanation { table, causes })
}

/// The sentence naming the remainder by cause: `exit_apic_icr (+41% of the
/// difference: exit: APIC ICR write (IPI send)), ...`.
pub fn named_causes(x: &SimExplanation) -> String {
    x.causes
        .iter()
        .map(|(name, share)| {
            let desc = breakdown::index(name)
                .map(|i| breakdown::DESCRIPTIONS[i])
                .unwrap_or("");
            format!(
                "{name} ({:+.0}% of the VM-minus-bare-metal time: {desc})",
                share * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{attribute, baseline, table, Plan};
    use smplab_experiment::store::{Entry, Status, Store};
    use smplab_experiment::testutil::rec;
    use smplab_record::sim::SimSection;
    use std::collections::BTreeMap;

    fn times(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A sim record of `vcpus` vCPUs whose wall is `wall_ms`, against bare
    /// metal of 100 ms: user work 100 ms per vCPU, the rest split as given.
    fn sim_rec(vcpus: u32, wall_ms: u64, extra: &[(&str, u64)]) -> RunRecord {
        let ms = 1_000_000u64;
        let mut r = rec(Executor::Sim, "dedup", vcpus, wall_ms * ms);
        let mut vm = vec![("user", 100 * ms * u64::from(vcpus))];
        vm.extend(extra.iter().map(|(k, v)| (*k, v * ms * u64::from(vcpus))));
        r.sim = Some(SimSection {
            vcpus,
            native_cores: vcpus,
            native_wall_ns: Some(100 * ms),
            vcpu_time_ns: times(&vm),
            native_time_ns: times(&[("user", 100 * ms * u64::from(vcpus))]),
            ..Default::default()
        });
        r
    }

    /// The diagnose text of a sim run prints the accounting table and names
    /// the remainder by the breakdown's causes instead of "not among these
    /// factors".
    #[test]
    fn sim_diagnosis_names_the_remainder_by_cause() {
        let plan = Plan::new(baseline(
            Executor::Sim,
            "dedup",
            4,
            0.1,
            smplab_record::config::DEFAULT_PLATFORM,
        ));
        // Baseline +100%: 60 ms of APIC ICR exits, 40 ms of spin on locks.
        let mut es = vec![Entry::new(
            plan.baseline.clone(),
            Status::Ok,
            0.0,
            vec![sim_rec(4, 200, &[("exit_apic_icr", 60), ("spin_lock", 40)])],
        )];
        for (_, p) in &plan.removed {
            es.push(Entry::new(
                p.clone(),
                Status::Ok,
                0.0,
                vec![sim_rec(4, 195, &[("exit_apic_icr", 60), ("spin_lock", 35)])],
            ));
        }
        es.push(Entry::new(
            plan.all_removed.clone(),
            Status::Ok,
            0.0,
            vec![sim_rec(4, 190, &[("exit_apic_icr", 60), ("spin_lock", 30)])],
        ));
        let store = Store::from_entries(es);
        let a = attribute(&Results::new(&store), &plan).unwrap();
        let x = a.sim.as_ref().expect("sim accounting of the baseline");
        assert_eq!(x.causes[0].0, "exit_apic_icr");
        assert!((x.causes[0].1 - 0.6).abs() < 1e-9, "{x:?}");
        assert_eq!(x.causes[1].0, "spin_lock");
        let t = table(&a);
        assert!(t.contains("where the time went"), "{t}");
        assert!(t.contains("exit_apic_icr"), "{t}");
        assert!(t.contains("spin_lock"), "{t}");
        assert!(t.contains("+60% of the VM-minus-bare-metal time"), "{t}");
        assert!(!t.contains("not among these factors"), "{t}");
    }

    #[test]
    fn no_explanation_without_accounting() {
        let mut r = rec(Executor::Sim, "dedup", 4, 1);
        assert!(of_record(&r).is_none());
        r.sim = Some(SimSection::default());
        assert!(of_record(&r).is_none());
    }
}
