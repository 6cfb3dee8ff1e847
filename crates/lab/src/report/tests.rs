//! Report tests on hand-made stores.

use super::*;
use crate::metrics::Results;
use crate::point::tests::vm_point;
use crate::store::Entry;
use crate::testutil::rec;
use smplab_record::sim::SimSection;
use smplab_record::vmm::VmmSection;
use smplab_record::Executor;
use smplab_record::LatencyHistogram;
use std::collections::BTreeMap;

/// A store with every kind of result the report draws.
pub fn sample_store() -> Store {
    let s = 1_000_000_000u64;
    let mut es = vec![];
    for (wl, nat, vm) in [
        ("dedup", 10, 27),
        ("streamcluster", 10, 14),
        ("blackscholes", 10, 10),
    ] {
        for rep in 0..3u32 {
            let mut n = vm_point(wl, 2, rep).native_twin();
            n.rep = rep;
            es.push(Entry::new(
                n,
                Status::Ok,
                0.0,
                vec![rec(
                    Executor::Native,
                    wl,
                    2,
                    nat * s / 10 + rep as u64 * 10_000_000,
                )],
            ));
            for vcpus in [1u32, 2] {
                let mut r = rec(
                    Executor::Vm,
                    wl,
                    vcpus,
                    vm * s / 10 / vcpus as u64 + rep as u64 * 20_000_000,
                );
                let mut per = BTreeMap::new();
                per.insert("io_out".to_string(), 4000 + rep as u64 * 100);
                per.insert("hlt".to_string(), 1500);
                per.insert("intr".to_string(), 700);
                let mut lat = BTreeMap::new();
                lat.insert(
                    "uart/global".to_string(),
                    LatencyHistogram::from_samples(
                        &(0..200).map(|i| 2000 + i * 50).collect::<Vec<_>>(),
                    ),
                );
                r.vmm = Some(VmmSection {
                    sync: "global".into(),
                    vcpus,
                    exits_per_vcpu: vec![per],
                    exit_latency: lat,
                    global_lock_wait: Some(LatencyHistogram::from_samples(&[100, 500, 900, 5000])),
                    ..Default::default()
                });
                let mut p = vm_point(wl, vcpus, rep);
                p.threads = vcpus;
                es.push(Entry::new(p, Status::Ok, 0.0, vec![r]));
            }
            let mut p2 = vm_point(wl, 2, rep);
            p2.vms = 2;
            es.push(Entry::new(
                p2,
                Status::Ok,
                0.0,
                vec![
                    rec(Executor::Vm, wl, 2, vm * s / 8),
                    rec(Executor::Vm, wl, 2, vm * s / 7),
                ],
            ));
            let mut sp = vm_point(wl, 2, rep);
            sp.executor = Executor::Sim;
            sp.platform = Some("pvm-here".into());
            sp.ple = Some(true);
            sp.apicv = Some(false);
            let mut sr = rec(Executor::Sim, wl, 2, vm * s / 9);
            let mut ex = BTreeMap::new();
            ex.insert("hlt".to_string(), 3000);
            ex.insert("ipi".to_string(), 2000);
            sr.sim = Some(SimSection {
                native_wall_ns: Some(nat * s / 10),
                vcpus: 2,
                idle_ns: s / 2,
                spin_ns: s / 3,
                exits: ex,
                ..Default::default()
            });
            es.push(Entry::new(sp, Status::Ok, 0.0, vec![sr]));
        }
    }
    es.push(Entry::new(
        vm_point("volrend", 2, 0),
        Status::Failed {
            reason: "guest crashed: <triple fault>".into(),
        },
        0.0,
        vec![],
    ));
    Store::from_entries(es)
}

#[test]
fn html_has_every_plot_kind_and_no_external_resources() {
    let store = sample_store();
    let html = render_html(
        &store,
        &ReportOptions {
            title: "t".into(),
            notes: vec!["qemu skipped: not installed".into()],
            sections: vec![],
        },
    );
    for section in [
        "Slowdown versus native",
        "Throughput as VMs are added",
        "Exits by reason",
        "Latency distributions",
        "Speedup versus vCPUs",
        "Simulator predictions beside measurements",
        "Macro versus micro",
        "Failed and skipped points",
    ] {
        assert!(html.contains(section), "missing {section}");
    }
    assert!(html.matches("<svg").count() >= 6);
    assert!(!html.contains("<script"));
    assert!(!html.contains("http://") || !html.contains("src=\"http"));
    assert!(!html.contains("NaN"));
    assert!(html.contains("&lt;triple fault&gt;"));
}

#[test]
fn csv_exports() {
    let store = sample_store();
    let results = Results::new(&store);
    let r = results_csv(&store);
    assert!(r.starts_with("executor,workload,"));
    // Every line has the header's column count (no stray commas).
    let cols = r.lines().next().unwrap().split(',').count();
    let failed = r.lines().find(|l| l.contains("failed")).unwrap();
    assert!(failed.contains("guest crashed: <triple fault>"), "{failed}");
    let m = metrics_csv(&results);
    let mcols = m.lines().next().unwrap().split(',').count();
    assert!(m.lines().skip(1).all(|l| l.split(',').count() == mcols));
    assert!(cols > 10);
    assert!(exits_csv(&results).contains("io_out"));
    assert!(predictions_csv(&results).contains("slowdown"));
    let t = text_summary(&results, 5);
    assert_eq!(t.lines().count(), 7, "{t}");
    assert!(t.contains("more in the report"));
}
