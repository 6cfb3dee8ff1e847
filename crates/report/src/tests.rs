//! Report tests on hand-made stores.

use super::*;
use smplab_analysis::metrics::Results;
use smplab_experiment::store::Entry;
use smplab_experiment::testutil::rec;
use smplab_experiment::testutil::vm_point;
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
        for rep in 0..6u32 {
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
                    vm * s / 10 * 2 / vcpus as u64 + rep as u64 * 20_000_000,
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
            p2.config.set_vms(2);
            es.push(Entry::new(
                p2,
                Status::Ok,
                0.0,
                vec![
                    rec(Executor::Vm, wl, 2, vm * s / 8),
                    rec(Executor::Vm, wl, 2, vm * s / 7),
                ],
            ));
            let sp = smplab_experiment::testutil::as_sim(
                &vm_point(wl, 2, rep),
                smplab_record::config::DEFAULT_PLATFORM,
            );
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

/// `sample_store` plus a diagnosis of dedup on the VM (fake runner: known
/// credits, no noise).
pub fn sample_store_with_diagnosis() -> Store {
    use smplab_analysis::diagnose::{baseline, Plan};
    use smplab_experiment::runner::fake::FakeRunner;
    use smplab_experiment::sweep::{run_points, SweepOptions};
    let mut store = sample_store();
    let plan = Plan::new(baseline(Executor::Vm, "dedup", 2, 0.1, ""));
    run_points(
        &plan.points(6),
        &mut store,
        &FakeRunner::new(),
        &SweepOptions::default(),
    )
    .expect("fake diagnosis runs");
    store
}

/// A simulator sweep of `n` runs (5 workloads × vCPUs × VMs × scales ×
/// `reps` repetitions), the size a user's 10,000-point sweep reaches: with 5
/// repetitions 2,000 configurations, with 1 as many configurations as runs.
pub fn big_sim_store(n: usize, reps: u32) -> Store {
    let workloads = [
        "blackscholes",
        "dedup",
        "ocean_ncp",
        "streamcluster",
        "spinlock",
    ];
    let vcpus = [2u32, 4, 8, 16, 32];
    let vms = [1u32, 2, 4, 8];
    let per_scale = workloads.len() * vcpus.len() * vms.len() * reps as usize;
    let scales = n.div_ceil(per_scale);
    let mut es = Vec::with_capacity(n);
    'all: for si in 0..scales {
        for (wi, wl) in workloads.iter().enumerate() {
            for &v in &vcpus {
                for &k in &vms {
                    for rep in 0..reps {
                        if es.len() == n {
                            break 'all;
                        }
                        let mut p = smplab_experiment::testutil::as_sim(
                            &vm_point(wl, v, rep),
                            smplab_record::config::DEFAULT_PLATFORM,
                        );
                        p.scale = 0.05 * (si + 1) as f64;
                        p.config.set_vms(k);
                        let native = 1_000_000 * (10 + wi as u64) * (si as u64 + 1);
                        let wall = native
                            + native * (wi as u64 + 1) * v as u64 / 40 * k as u64
                            + rep as u64 * 10_000;
                        let records = (0..k)
                            .map(|_| {
                                let mut r = rec(Executor::Sim, wl, v, wall);
                                let mut ex = BTreeMap::new();
                                ex.insert("hlt".to_string(), 100 * v as u64);
                                ex.insert("ipi".to_string(), 50 * v as u64);
                                r.sim = Some(SimSection {
                                    native_wall_ns: Some(native),
                                    vcpus: v,
                                    idle_ns: wall / 4,
                                    spin_ns: wall / 8,
                                    exits: ex,
                                    ..Default::default()
                                });
                                r
                            })
                            .collect();
                        es.push(Entry::new(p, Status::Ok, 0.0, records));
                    }
                }
            }
        }
    }
    Store::from_entries(es)
}

fn opts() -> ReportOptions {
    ReportOptions {
        title: "t".into(),
        notes: vec!["qemu skipped: not installed".into()],
        sections: vec![],
        calibration: None,
    }
}

/// The text of the `<section id=ID>` of a page.
fn section<'h>(html: &'h str, id: &str) -> &'h str {
    let start = html
        .find(&format!("<section id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = html[start..]
        .find("</section>")
        .map_or(html.len(), |e| start + e);
    &html[start..end]
}

#[test]
fn sections_in_order_with_contents_and_no_external_resources() {
    let html = render_html(&sample_store_with_diagnosis(), &opts());
    let ids = [
        "findings",
        "workloads",
        "diagnosis",
        "scaling",
        "overcommit",
        "exits",
        "sim",
        "raw-data",
    ];
    let mut at = 0;
    for id in ids {
        let pos = html
            .find(&format!("<section id=\"{id}\">"))
            .unwrap_or_else(|| panic!("missing section {id}"));
        assert!(pos > at, "section {id} out of order");
        at = pos;
        assert!(
            html.contains(&format!("<a href=\"#{id}\">")),
            "{id} not in the table of contents"
        );
    }
    assert!(html.matches("<svg").count() >= 8);
    for class in [
        "class=\"pt\"",
        "class=\"series\"",
        "class=\"seg\"",
        "class=\"bin\"",
        "class=\"whisker\"",
    ] {
        assert!(html.contains(class), "no {class}");
    }
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    assert!(!html.contains("NaN"));
    assert!(html.contains("&lt;triple fault&gt;"));
    assert!(html.contains("qemu skipped: not installed"));
    // Raw data last and collapsed, sortable.
    let raw = section(&html, "raw-data");
    assert!(raw.contains("<details id=\"raw\">") && raw.contains("data-sort"));
}

#[test]
fn findings_name_every_workload_with_intervals_credits_remedy_and_sim() {
    let html = render_html(&sample_store_with_diagnosis(), &opts());
    let f = section(&html, "findings");
    for w in ["dedup", "streamcluster", "blackscholes"] {
        assert!(
            f.contains(&format!("id=\"finding-{w}\"")),
            "no finding for {w}"
        );
        assert!(
            f.contains(&format!("href=\"#wl-{w}\"")),
            "{w} not linked to its plot"
        );
        assert!(
            html.contains(&format!("id=\"wl-{w}\"")),
            "no section for {w}"
        );
    }
    let dedup = &f[f.find("id=\"finding-dedup\"").unwrap()..];
    let dedup = &dedup[..dedup.find("</tr>").unwrap()];
    // dedup: VM 2.7 s + reps vs native 1.0 s → about +170%, 6 reps: a 95% interval.
    assert!(dedup.contains("+17"), "{dedup}");
    assert!(
        dedup.contains("class=\"ci\">[") && !dedup.contains("†"),
        "{dedup}"
    );
    assert!(dedup.contains("outside noise"), "{dedup}");
    // The fake diagnosis: HLT idle credits 40 pp, the largest, listed first.
    // dedup's spin→block variant is the same program: not run, no credit.
    let hlt = dedup.find("HLT idle +40 pp").expect("HLT credit");
    let sync = dedup
        .find("global device lock +20 pp")
        .expect("device lock credit");
    assert!(hlt < sync, "largest first: {dedup}");
    assert!(!dedup.contains("user-space spinning +"), "{dedup}");
    assert!(html.contains("user-space spinning: not applicable, not run"));
    assert!(dedup.contains("href=\"#diag-dedup-vm\""));
    assert!(html.contains("id=\"diag-dedup-vm\""));
    // Remedy: removing every factor at once helps most in the fake.
    assert!(dedup.contains("every factor removed at once"), "{dedup}");
    // Simulator: 3.0 s vs native 1.0 s predicted against +170% measured.
    assert!(dedup.contains("predicted +200%"), "{dedup}");
    assert!(dedup.contains("off by"), "{dedup}");
    // blackscholes: VM equal to native within noise.
    let bs = &f[f.find("id=\"finding-blackscholes\"").unwrap()..];
    let bs = &bs[..bs.find("</tr>").unwrap()];
    assert!(bs.contains("within noise"), "{bs}");
    assert!(bs.contains("not diagnosed"), "{bs}");
}

#[test]
fn calibration_is_a_table() {
    use smplab_analysis::calibrate::{Calibration, Estimate};
    let mut o = opts();
    o.calibration = Some(Calibration {
        estimates: vec![Estimate {
            field: "vmm.ipi_receive_ns",
            value: 12345.6,
            spread: Some((11000.0, 13000.0)),
            how: "shootdown <2 vCPUs>".into(),
        }],
        unmeasured: vec![("vmm.hlt_wake_ns".into(), "polling was slower".into())],
        info: vec![],
    });
    let html = render_html(&sample_store(), &o);
    let c = section(&html, "calibration");
    assert!(c.contains("<table>") && !c.contains("<pre>"));
    assert!(c.contains("<code>vmm.ipi_receive_ns</code>") && c.contains("12.3µs"));
    assert!(c.contains("11.0µs – 13.0µs") && c.contains("shootdown &lt;2 vCPUs&gt;"));
    assert!(c.contains("not measured") && c.contains("polling was slower"));
}

#[test]
fn ten_thousand_simulator_runs_give_aggregated_plots() {
    let store = big_sim_store(10_000, 5);
    assert_eq!(store.entries().len(), 10_000);
    let t0 = std::time::Instant::now();
    let html = render_html(&store, &opts());
    eprintln!(
        "10,000 simulator runs: rendered in {:.2} s, {} kB",
        t0.elapsed().as_secs_f64(),
        html.len() / 1024
    );
    let f = section(&html, "findings");
    for w in [
        "blackscholes",
        "dedup",
        "ocean_ncp",
        "streamcluster",
        "spinlock",
    ] {
        assert!(
            f.contains(&format!("id=\"finding-{}\"", super::data::slug(w))),
            "no finding for {w}"
        );
    }
    // Distributions per executor and size, not a row per configuration.
    let wl = section(&html, "workloads");
    assert!(wl.contains("configs"), "aggregated rows");
    let marks = html.matches("class=\"pt\"").count()
        + html.matches("class=\"bar\"").count()
        + html.matches("class=\"seg\"").count();
    assert!(marks < 1500, "{marks} plot marks for 2000 configurations");
    // Simulated VMs share the host by construction: no exclusion sentence.
    assert!(!html.contains("multi-VM runs excluded"));
    // Every configuration is still in the (collapsed) raw table.
    assert_eq!(section(&html, "raw-data").matches("<tr><td>").count(), 2000);
}

#[test]
fn demo_summary_shows_intervals() {
    let store = sample_store();
    let t = crate::summary_table(
        &Results::new(&store),
        &["dedup", "streamcluster", "blackscholes"],
        0.1,
    );
    let dedup = t
        .lines()
        .find(|l| l.starts_with("dedup"))
        .expect("dedup row");
    // 6 repetitions: a real 95% interval, no dagger; outside the noise of native.
    assert!(dedup.contains("% [+"), "{t}");
    assert!(!dedup.contains('†') && !dedup.contains('~'), "{t}");
    let bs = t.lines().find(|l| l.starts_with("blackscholes")).unwrap();
    assert!(bs.contains('~'), "blackscholes runs as fast as native: {t}");
}

#[test]
fn the_summary_warns_when_timings_come_from_an_emulated_cpu() {
    let store = sample_store();
    let plain = crate::summary_table(&Results::new(&store), &["dedup"], 0.1);
    assert!(!plain.contains("Warning:"), "{plain}");
    let mut entries = store.entries().to_vec();
    for r in entries.iter_mut().flat_map(|e| e.records.iter_mut()) {
        r.host.platform = smplab_record::platform::Platform::HardwareKvmOnEmulatedCpu;
    }
    let store = smplab_experiment::store::Store::from_entries(entries);
    let t = crate::summary_table(&Results::new(&store), &["dedup"], 0.1);
    assert!(
        t.contains("Warning: timings come from a CPU emulated by QEMU's TCG"),
        "{t}"
    );
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

#[test]
fn display_labels_are_short_and_tell_scales_apart() {
    let mut p = smplab_experiment::testutil::as_sim(
        &vm_point("dedup", 2, 0),
        "/long/path/to/calibrated.toml",
    );
    p.study = Some("diagnose".into());
    let l = super::data::display_label(&p, true);
    assert!(!l.contains("dedup") && !l.contains("/long/path"), "{l}");
    assert!(
        l.contains("calibrated.toml") && l.ends_with("scale=0.1 (diagnose)"),
        "{l}"
    );
    let mut q = p.clone();
    q.scale = 0.2;
    assert_ne!(l, super::data::display_label(&q, true));
}

/// Every `attr="#RRGGBB"` value inside the page's `<svg>` elements.
fn svg_colours<'h>(html: &'h str, attr: &str) -> Vec<&'h str> {
    let needle = format!("{attr}=\"#");
    let mut out = vec![];
    for svg in html.split("<svg").skip(1) {
        let svg = &svg[..svg.find("</svg>").unwrap_or(svg.len())];
        let mut rest = svg;
        while let Some(at) = rest.find(&needle) {
            let v = &rest[at + needle.len() - 1..];
            out.push(&v[..v.find('"').unwrap_or(v.len())]);
            rest = &rest[at + needle.len()..];
        }
    }
    out
}

/// `(colour, text)` of every legend row: a swatch (`<rect … fill>` or a
/// line sample `<line … stroke>`) followed directly by its `<text>`.
fn legend_entries(html: &str) -> Vec<(String, String)> {
    let mut out = vec![];
    for (i, _) in html.match_indices("/><text x=") {
        let head = &html[..i];
        let el = &head[head.rfind('<').unwrap_or(0)..];
        let colour = ["fill=\"", "stroke=\""].iter().find_map(|a| {
            let at = el.rfind(a)? + a.len();
            Some(el[at..at + el[at..].find('"')?].to_string())
        });
        let text = &html[i + 2..];
        let text = &text[text.find('>').unwrap_or(0) + 1..];
        let text = &text[..text.find('<').unwrap_or(0)];
        let swatch = (el.starts_with("<rect") && el.contains("width=\"10\" height=\"10\""))
            || (el.starts_with("<line") && el.contains("stroke-width=\"2\""));
        if let Some(c) = colour.filter(|_| swatch) {
            out.push((c, text.to_string()));
        }
    }
    out
}

#[test]
fn every_plot_draws_in_palette_colours_and_executors_keep_theirs() {
    use smplab_chart::{palette, NEUTRALS};
    let mut html = render_html(&sample_store_with_diagnosis(), &opts());
    html.push_str(&crate::diagnosis_charts::charts(
        &smplab_analysis::diagnose::attribute(
            &Results::new(&sample_store_with_diagnosis()),
            &smplab_analysis::diagnose::Plan::new(smplab_analysis::diagnose::baseline(
                Executor::Vm,
                "dedup",
                2,
                0.1,
                "",
            )),
        )
        .expect("the fake diagnosis attributes"),
    ));
    let data: Vec<&str> = palette::all().map(|c| c.hex()).collect();
    let fills = svg_colours(&html, "fill");
    let strokes = svg_colours(&html, "stroke");
    assert!(fills.len() > 100 && strokes.len() > 100);
    for c in fills.iter().chain(&strokes) {
        assert!(
            data.contains(c) || NEUTRALS.contains(c),
            "{c} is neither a palette colour nor a neutral"
        );
    }
    // Factor and exit-reason segments are never in an executor's colour.
    let mut segs = 0;
    for (i, _) in html.match_indices("<rect class=\"seg\"") {
        let el = &html[i..i + html[i..].find('>').unwrap()];
        let fill = &el[el.find("fill=\"").unwrap() + 6..];
        let fill = &fill[..fill.find('"').unwrap()];
        assert!(
            !palette::SERIES.iter().any(|e| e.hex() == fill),
            "segment in an executor colour: {el}"
        );
        segs += 1;
    }
    assert!(segs >= 8, "{segs} segments");
    // Every legend row that names an executor shows that executor's colour,
    // in every plot.
    let legends = legend_entries(&html);
    let mut named = 0;
    for (c, text) in &legends {
        for &e in super::data::EXECUTORS {
            let name = super::data::executor_name(e);
            if text.split([' ', ',', '(']).any(|w| w == name) {
                assert_eq!(c, crate::data::colour(e).hex(), "legend {text:?}");
                named += 1;
            }
        }
    }
    assert!(named >= 6, "{named} executor legend rows in {legends:?}");
    // The same factor has the same colour wherever it is drawn.
    let hlt: Vec<&String> = legends
        .iter()
        .filter(|(_, t)| t == "HLT idle")
        .map(|(c, _)| c)
        .collect();
    assert!(
        hlt.len() >= 2,
        "HLT idle in the report and the diagnose chart"
    );
    assert!(hlt.iter().all(|c| *c == palette::category(0).hex()));
}

#[test]
fn intervals_where_there_were_repetitions() {
    let html = render_html(&sample_store_with_diagnosis(), &opts());
    // Exit stacks: one whisker per configuration with repetitions.
    let exits = section(&html, "exits");
    assert!(exits.contains("95% interval of the total"));
    assert!(exits.matches("class=\"whisker\"").count() >= 3, "{exits}");
    // Predicted vs measured: whiskers on the measured side (6 repetitions).
    let sim = section(&html, "sim");
    assert!(sim.matches("class=\"whisker\"").count() >= 3);
    // Scaling: the 95% interval, named so in the legend, not min–max.
    let sc = section(&html, "scaling");
    assert!(sc.contains("whiskers: 95% interval") && !sc.contains("min–max"));
    assert!(sc.contains("class=\"whisker\""));
}

#[test]
fn overcommit_and_findings_count_runs_left_out_of_weighted_speedup() {
    // sample_store's 2-VM runs carry no workload windows: counted, unchecked.
    let html = render_html(&sample_store(), &opts());
    let oc = section(&html, "overcommit");
    assert!(
        oc.contains("0 of 18 measured multi-VM runs excluded from weighted speedup"),
        "{oc}"
    );
    assert!(oc.contains("18 counted unchecked"), "{oc}");
    let f = section(&html, "findings");
    assert!(f.contains("0 of 18 measured multi-VM runs excluded"), "{f}");
    assert!(f.contains("href=\"#overcommit\""));
}

#[test]
fn runs_whose_vms_did_not_overlap_are_counted_as_excluded() {
    let window = |mut r: smplab_record::RunRecord, start_ms: u64, end_ms: u64| {
        r.timing.window = Some(smplab_record::WorkloadWindow {
            clock: smplab_record::WindowClock::HostMonotonic,
            threads_ready_ns: start_ms * 1_000_000,
            start_ns: start_ms * 1_000_000,
            end_ns: end_ms * 1_000_000,
            start_gate: None,
            settle: None,
        });
        r
    };
    let mut es: Vec<Entry> = sample_store().entries().to_vec();
    // dedup's 2-VM runs: repetitions 0 and 1 ran one VM after the other
    // (overlap 0), the others together.
    for e in es.iter_mut().filter(|e| e.point.vms() == 2) {
        let late = e.point.workload == "dedup" && e.point.rep < 2;
        let recs = std::mem::take(&mut e.records);
        e.records = recs
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                let start = if late { i as u64 * 5000 } else { 0 };
                window(r, start, start + 3000)
            })
            .collect();
    }
    let store = Store::from_entries(es);
    let results = Results::new(&store);
    let x = super::overcommit::exclusions(&results);
    assert_eq!((x.runs, x.excluded, x.unverified), (18, 2, 0));
    let html = render_html(&store, &opts());
    let sentence = "2 of 18 measured multi-VM runs excluded from weighted speedup because their VMs' workload windows overlapped less than 90%";
    assert!(section(&html, "overcommit").contains(sentence));
    assert!(section(&html, "findings").contains(sentence));
    assert!(!html.contains("counted unchecked"));
}
