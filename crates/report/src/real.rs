//! Real programs beside their traced models (the seeds' method on real
//! programs): per program, the real slowdown — Linux on smplab-vmm and on
//! QEMU against the same program natively, all timed by the same init —
//! beside the model's — `smplab trace` → `trace model` run in the smplab
//! guest against the model natively, and the simulator against its own
//! native model. A large disagreement is listed as a finding.

use crate::{Ctx, Page};
use smplab_analysis::metrics::Results;
use smplab_chart::esc;
use smplab_experiment::point::Point;
use smplab_record::Executor;
use smplab_stats::MedianCi;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A disagreement counts as large when the two slowdowns' intervals do not
/// overlap and their medians are this far apart (in slowdown, 0.10 = 10
/// percentage points): smaller gaps are within what a traced model's
/// compute sizing misses on a shared 2-core host.
pub const LARGE_DISAGREEMENT: f64 = 0.10;

/// One program's row.
#[derive(Debug, Clone, PartialEq)]
pub struct RealRow {
    /// The program's name (its file name; the model carries the same name).
    pub name: String,
    /// Its command line.
    pub command: String,
    /// Median native wall time of the program, seconds.
    pub native_s: Option<f64>,
    /// Linux on smplab-vmm over native, minus 1.
    pub linux: Option<MedianCi>,
    /// Linux on QEMU over native, minus 1.
    pub linux_qemu: Option<MedianCi>,
    /// The model in the smplab guest on smplab-vmm over the model natively, minus 1.
    pub model_vm: Option<MedianCi>,
    /// The simulator's slowdown of the model.
    pub model_sim: Option<MedianCi>,
    /// Large disagreements between the real and the modelled slowdown.
    pub findings: Vec<String>,
}

/// The record-level workload name of a configuration (the program's file
/// name, or the model's name, which `trace model` takes from the program).
fn workload_name(results: &Results, p: &Point) -> Option<String> {
    Some(
        results
            .get(p)?
            .first()?
            .records
            .first()?
            .workload
            .name
            .clone(),
    )
}

/// The first configuration (in key order) of `executor` among `points`.
fn first<'p>(points: &[&'p Point], executor: Executor) -> Option<&'p Point> {
    points.iter().copied().find(|p| p.executor() == executor)
}

/// Every program in the results with its real and modelled slowdowns.
pub fn rows(results: &Results) -> Vec<RealRow> {
    let mut programs: BTreeMap<Vec<String>, Vec<&Point>> = BTreeMap::new();
    let mut models: BTreeMap<String, Vec<&Point>> = BTreeMap::new();
    for p in results.points() {
        if p.is_program() {
            programs.entry(p.program.clone()).or_default().push(p);
        } else if let Some(name) = workload_name(results, p) {
            models.entry(name).or_default().push(p);
        }
    }
    let mut out = Vec::new();
    for (argv, points) in programs {
        let Some(name) = points.first().and_then(|p| workload_name(results, p)) else {
            continue;
        };
        let model = models.get(&name).map(Vec::as_slice).unwrap_or(&[]);
        let native_s = first(&points, Executor::Native)
            .and_then(|p| results.wall_ci(p))
            .map(|c| c.median);
        let slow = |ps: &[&Point], e| first(ps, e).and_then(|p| results.slowdown_ci(p));
        let mut row = RealRow {
            command: smplab_experiment::point::command_line(&argv),
            name,
            native_s,
            linux: slow(&points, Executor::Linux),
            linux_qemu: slow(&points, Executor::LinuxQemu),
            model_vm: slow(model, Executor::Vm),
            model_sim: slow(model, Executor::Sim),
            findings: Vec::new(),
        };
        row.findings = disagreements(&row);
        out.push(row);
    }
    out
}

/// The large disagreements of a row, each a sentence with the likely why.
pub fn disagreements(row: &RealRow) -> Vec<String> {
    let mut out = Vec::new();
    let Some(real) = &row.linux else {
        return out;
    };
    for (model, what) in [
        (&row.model_vm, "its model in the smplab guest"),
        (&row.model_sim, "the simulator's prediction for its model"),
    ] {
        let Some(m) = model else { continue };
        let apart = real.lo > m.hi || m.lo > real.hi;
        let gap = real.median - m.median;
        if !apart || gap.abs() < LARGE_DISAGREEMENT {
            continue;
        }
        let why = if real.hi < 0.0 {
            "the program ran faster in the guest than natively, which virtualization itself \
             cannot cause: the native and guest runs differ in what the host gives them (an \
             emulated CPU's timings, the host's page cache and load against the guest's \
             in-memory root), so re-measure with more repetitions on a quiet hardware host \
             before reading the model's error"
        } else if gap > 0.0 {
            "the real program pays for what its model leaves out: the model replays only the \
             pthread synchronization and CPU time the trace recorded, not the page faults, \
             file reads and writes and other system calls that exit to the hypervisor in a \
             Linux guest (nor Linux's own timer and scheduler work)"
        } else {
            "the model costs more in a guest than the program does: its synchronization runs \
             through the smplab guest's own scheduler and futexes, whose blocking and wake-up \
             IPIs cost exits that Linux's (with kvm-clock and PV features) avoid or batch"
        };
        out.push(format!(
            "{}: Linux on smplab-vmm {} vs {what} {} ({:+.0} points): {why}.",
            row.name,
            pct(real),
            pct(m),
            gap * 100.0
        ));
    }
    out
}

fn pct(c: &MedianCi) -> String {
    let dagger = if c.n < 6 { "†" } else { "" };
    format!(
        "{:+.1}% [{:+.1} – {:+.1}]{dagger}",
        c.median * 100.0,
        c.lo * 100.0,
        c.hi * 100.0
    )
}

fn cell(c: &Option<MedianCi>) -> String {
    c.as_ref().map_or_else(|| "—".to_string(), pct)
}

const HEADINGS: [&str; 6] = [
    "program",
    "native",
    "linux/native",
    "linux-qemu/native",
    "model vm/native",
    "model sim",
];

fn cells(r: &RealRow) -> [String; 6] {
    [
        r.name.clone(),
        r.native_s
            .map_or_else(|| "—".into(), |s| format!("{:.3} s", s)),
        cell(&r.linux),
        cell(&r.linux_qemu),
        cell(&r.model_vm),
        cell(&r.model_sim),
    ]
}

/// The table as text (what `smplab lab real` prints), findings below it.
pub fn table_text(rows: &[RealRow]) -> String {
    let body: Vec<[String; 6]> = rows.iter().map(cells).collect();
    let mut widths = HEADINGS.map(|h| h.chars().count());
    for r in &body {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            let pad = w.saturating_sub(c.chars().count());
            if i == 0 {
                let _ = write!(s, "{c}{}", " ".repeat(pad));
            } else {
                let _ = write!(s, "  {}{c}", " ".repeat(pad));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = line(&HEADINGS.map(String::from));
    for r in &body {
        s.push_str(&line(r));
    }
    s.push_str(
        "slowdown median [95% interval] (†: fewer than 6 repetitions, the range); \
         real: the same init times the program in the guest and natively; \
         model: smplab trace → trace model\n",
    );
    let findings: Vec<&String> = rows.iter().flat_map(|r| &r.findings).collect();
    if findings.is_empty() {
        s.push_str("no large disagreement between a real slowdown and its model's\n");
    } else {
        s.push_str("findings (large disagreements):\n");
        for f in findings {
            let _ = writeln!(s, "  - {f}");
        }
    }
    s
}

/// The report's section, when the store has real programs.
pub(crate) fn render(ctx: &Ctx, page: &mut Page) {
    let rows = rows(ctx.results);
    if rows.is_empty() {
        return;
    }
    let mut h = String::from(
        "<p class=\"lead\">Each program's slowdown in a Linux guest (against the same program \
         natively, timed by the same init) beside its traced model's (in the smplab guest \
         against the model natively, and the simulator's). Median [95% interval].</p>\
         <div class=\"scroll\"><table><thead><tr>",
    );
    for t in HEADINGS {
        let _ = write!(h, "<th>{}</th>", esc(t));
    }
    h.push_str("</tr></thead><tbody>");
    for r in &rows {
        let c = cells(r);
        let _ = write!(
            h,
            "<tr><td title=\"{}\">{}</td>",
            esc(&r.command),
            esc(&c[0])
        );
        for x in &c[1..] {
            let _ = write!(h, "<td>{}</td>", esc(x));
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table></div>");
    let findings: Vec<&String> = rows.iter().flat_map(|r| &r.findings).collect();
    if findings.is_empty() {
        h.push_str("<p>No large disagreement between a real slowdown and its model's.</p>");
    } else {
        h.push_str("<h3>Findings: large disagreements</h3><ul>");
        for f in findings {
            let _ = write!(h, "<li>{}</li>", esc(f));
        }
        h.push_str("</ul>");
    }
    page.section("real", "Real programs vs their models", &h);
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_experiment::{Entry, Status, Store};
    use smplab_record::config::{
        LinuxGuestSettings, LinuxQemuSettings, LinuxSettings, NativeSettings, QemuMachine,
        RunConfig, SimSettings, SyncMode,
    };
    use smplab_record::{RunRecord, WorkloadInfo};

    // Casts: canned times are a few seconds, positive: they fit a u64 of ns.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn put(
        entries: &mut Vec<Entry>,
        p: &Point,
        info: &WorkloadInfo,
        reps: &[f64],
        sim_native: f64,
    ) {
        for (rep, &s) in reps.iter().enumerate() {
            let mut p = p.clone();
            p.rep = u32::try_from(rep).unwrap();
            let mut r = RunRecord::new(p.executor(), info.clone());
            r.timing.wall_ns = (s * 1e9) as u64;
            if p.executor() == Executor::Sim {
                r.sim = Some(smplab_record::sim::SimSection {
                    native_wall_ns: Some((sim_native * 1e9) as u64),
                    ..Default::default()
                });
            }
            r.run = Some(p.config.clone());
            entries.push(Entry::new(p, Status::Ok, 1.0, vec![r]));
        }
    }

    fn canned(linux: f64, model_vm: f64) -> Store {
        let mut entries = Vec::new();
        let argv: Vec<String> = ["pigz", "-p", "2", "-k", "in"].map(String::from).into();
        let info = WorkloadInfo::for_program(&argv);
        let jitter = [1.0, 1.01, 0.99, 1.02, 0.98, 1.0];
        let scaled = |t: f64| jitter.iter().map(|j| t * j).collect::<Vec<_>>();
        let native = Point::for_program(argv.clone(), RunConfig::Native(NativeSettings::default()));
        put(&mut entries, &native, &info, &scaled(1.0), 0.0);
        let l = Point::for_program(
            argv.clone(),
            RunConfig::Linux(LinuxSettings {
                guest: LinuxGuestSettings::new(2),
                sync: SyncMode::Fine,
                irqchip: Default::default(),
            }),
        );
        put(&mut entries, &l, &info, &scaled(1.0 + linux), 0.0);
        let q = Point::for_program(
            argv,
            RunConfig::LinuxQemu(LinuxQemuSettings {
                guest: LinuxGuestSettings::new(2),
                machine: QemuMachine::Microvm,
            }),
        );
        put(&mut entries, &q, &info, &scaled(1.3), 0.0);
        let model = WorkloadInfo {
            name: "pigz".into(),
            source: "models/pigz.toml".into(),
            n: 3,
            threads: 3,
            ..Default::default()
        };
        let mn = Point::new(
            "models/pigz.toml",
            3,
            1.0,
            RunConfig::Native(NativeSettings::default()),
        );
        put(&mut entries, &mn, &model, &scaled(2.0), 0.0);
        let mut vm = mn.clone();
        vm.config = RunConfig::defaults(Executor::Vm, 2, "pvm-here");
        put(
            &mut entries,
            &vm,
            &model,
            &scaled(2.0 * (1.0 + model_vm)),
            0.0,
        );
        let mut sim = mn.clone();
        sim.config = RunConfig::Sim(SimSettings::new(2, "pvm-here"));
        put(&mut entries, &sim, &model, &scaled(2.2), 2.0);
        Store::from_entries(entries)
    }

    #[test]
    fn the_table_pairs_each_program_with_its_model() {
        let store = canned(0.2, 0.25);
        let results = Results::new(&store);
        let rows = rows(&results);
        assert_eq!(rows.len(), 1, "{rows:?}");
        let r = &rows[0];
        assert_eq!(r.name, "pigz");
        assert_eq!(r.command, "pigz -p 2 -k in");
        assert!((r.linux.unwrap().median - 0.2).abs() < 1e-6, "{r:?}");
        assert!((r.linux_qemu.unwrap().median - 0.3).abs() < 1e-6);
        assert!((r.model_vm.unwrap().median - 0.25).abs() < 1e-6);
        assert!((r.model_sim.unwrap().median - 0.1).abs() < 1e-6);
        // 0.2 vs 0.25 and vs 0.10: within 10 points, no finding.
        assert!(r.findings.is_empty(), "{:?}", r.findings);
        let text = table_text(&rows);
        assert!(
            text.starts_with("program   native ") && text.contains("  model sim\n"),
            "{text}"
        );
        assert!(
            text.contains("pigz     1.000 s  +20.0% [+20.0 – +20.0]"),
            "{text}"
        );
        assert!(text.contains("no large disagreement"), "{text}");
        let html = crate::render_html(&store, &Default::default());
        assert!(html.contains("Real programs vs their models"));
    }

    #[test]
    fn a_guest_faster_than_native_is_flagged_as_the_host_not_the_model() {
        let store = canned(-0.3, 0.05);
        let rows = rows(&Results::new(&store));
        let f = &rows[0].findings;
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f[0].contains("faster in the guest than natively"),
            "{}",
            f[0]
        );
    }

    #[test]
    fn a_large_disagreement_is_a_finding_with_its_why() {
        let store = canned(0.6, 0.05);
        let rows = rows(&Results::new(&store));
        let f = &rows[0].findings;
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(
            f[0].starts_with("pigz: Linux on smplab-vmm +60.0%"),
            "{}",
            f[0]
        );
        assert!(f[0].contains("page faults"), "{}", f[0]);
        assert!(table_text(&rows).contains("findings (large disagreements):"));
    }
}
