//! `smplab demo`: a small study end to end — built-in profiles natively, in
//! smplab-vmm and QEMU, the same at 16-vCPU scale in the simulator, a
//! calibration so the simulator predicts this host, a diagnosis of one
//! profile — then a summary table and the report. Whatever cannot run here is
//! skipped with the reason, and the rest still runs.

use smplab_analysis::diagnose::{self, Plan};
use smplab_analysis::metrics::Results;
use smplab_experiment::runner::real::RealRunner;
use smplab_record::{out, outln};

use smplab_experiment::runner::Runner;
use smplab_experiment::spec::ExperimentSpec;
use smplab_experiment::store::{Status, Store};
use smplab_experiment::sweep::{run_repeated_with, Repetitions, SweepOptions};
use smplab_record::exit::{self, report_error};
use smplab_record::interference::StealThreshold;
use smplab_record::Executor;
use smplab_report::{write_report, ReportOptions};
use smplab_stats::MedianCi;
use std::path::{Path, PathBuf};

/// What `smplab demo` runs (the command layer fills it from its arguments).
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Output directory (store, report, calibrated profile, specs).
    pub out: PathBuf,
    /// Most repetitions of a configuration: each is repeated (at least 6
    /// times, or `reps` if fewer) until the 95% interval of its median wall
    /// time is within ±5%, or `reps` is reached.
    pub reps: u32,
    /// Workload scale.
    pub scale: f64,
    /// Start over instead of resuming.
    pub fresh: bool,
    /// Draw progress bars.
    pub progress: bool,
    /// Repetitions whose host steal exceeds this are flagged, left out and rerun.
    pub steal: StealThreshold,
}

/// Default workload scale, 5× the former 0.2 (where runs were 2–6 ms
/// natively and one scheduler preemption exceeded ±5%). At 1.0 the built-in
/// profiles run ~10–30 ms natively with 2 threads and ~30–200 ms in
/// smplab-vmm on 2 vCPUs (2 VMs: up to ~3 s for dedup) on the 2-core PVM
/// development host. Larger scales cost more than the demo's ~5 minutes: the
/// VM slowdowns here are 5–20×, and the simulator's host time grows faster
/// than the scale (dedup at 16 vCPUs × 4 VMs: 34 ms at 0.2, tens of seconds
/// at 2). Pass `--scale` for longer, steadier runs. Figures: docs/lab.md.
pub const DEFAULT_SCALE: f64 = 1.0;
/// Largest scale of the calibration's micro-runs in the demo (the same as
/// `smplab calibrate`'s default; the held-out runs use half of it).
pub const CALIBRATION_SCALE: f64 = 1.0;
/// Default most repetitions of a configuration: enough for the interval of
/// a median to leave out the two most extreme runs on each side
/// (`smplab_stats`), so one disturbed run does not decide it.
pub const DEFAULT_MAX_REPS: u32 = 12;

/// The profiles the demo studies: one per behaviour Ding & Shan found costly
/// (embarrassingly parallel, pipeline with blocking queues, blocking barriers,
/// spin-then-block barriers, user-space spin lock).
pub const WORKLOADS: &[&str] = &[
    "blackscholes",
    "dedup",
    "ocean_ncp",
    "streamcluster",
    "spinlock",
];
/// The profile diagnosed (Ding & Shan's worst case).
pub const DIAGNOSED: &str = "dedup";

/// The demo's experiment specs, written into the output directory too so a
/// user can rerun or extend them with `smplab lab run`.
pub fn specs(reps: u32, scale: f64, platform: &str) -> Vec<(&'static str, String)> {
    let wl = WORKLOADS
        .iter()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(", ");
    vec![
        (
            "demo-measured.toml",
            format!(
                "# Natively and in smplab-vmm, 2 vCPUs (this host's cores), 1 and 2 VMs.\nname = \"demo-measured\"\nrepetitions = {reps}\ntimeout_s = 120\n[matrix]\nexecutor = [\"native\", \"vm\"]\nworkload = [{wl}]\nvcpus = 2\nvms = [1, 2]\nscale = {scale}\n"
            ),
        ),
        (
            "demo-scaling.toml",
            format!(
                "# Speedup from 1 to 2 vCPUs (threads = vCPUs), natively and in smplab-vmm, for the Amdahl projection.\nname = \"demo-scaling\"\nrepetitions = {reps}\ntimeout_s = 120\n[matrix]\nexecutor = [\"native\", \"vm\"]\nworkload = [{wl}]\nvcpus = [1, 2]\nscale = {scale}\n"
            ),
        ),
        (
            "demo-qemu.toml",
            format!(
                "# The same in QEMU (one repetition: its firmware takes seconds to start).\nname = \"demo-qemu\"\nrepetitions = 1\ntimeout_s = 120\n[matrix]\nexecutor = \"qemu\"\nworkload = [{wl}]\nvcpus = 2\nscale = {scale}\n"
            ),
        ),
        (
            "demo-sim.toml",
            format!(
                "# The simulator: beside the measurements (2 vCPUs) and at 16-vCPU scale, 1 to 4 VMs.\nname = \"demo-sim\"\nrepetitions = {reps}\ntimeout_s = 120\n[matrix]\nexecutor = \"sim\"\nworkload = [{wl}]\nvcpus = [2, 16]\nvms = [1, 2, 4]\nplatform = \"{platform}\"\nscale = {scale}\n"
            ),
        ),
    ]
}

/// Rows as text columns, the first left-aligned and the others right-aligned,
/// each as wide as its widest cell: intervals of large slowdowns are long.
/// The simulator's predictions beside the measurements, fitted and
/// held-out apart: the calibration's micro-runs (the data of the fit), its
/// held-out set (built-in profiles, some at a vCPU count no micro-run uses)
/// and the demo's own sweeps (held-out too: none is a micro-run), each with
/// its median |relative error|. None when there is nothing to compare.
pub fn prediction_table(
    results: &Results,
    store: &Store,
    cal_scale: f64,
    platform: &str,
) -> Option<String> {
    let mut out = String::new();
    if let Ok(p) = smplab_sim::Platform::resolve(platform) {
        let dir = store
            .path()
            .parent()
            .map_or_else(|| Path::new(".").to_path_buf(), Path::to_path_buf);
        let fitted = smplab_analysis::calibrate::fitted_rows(results, &dir, cal_scale, &p);
        if !fitted.is_empty() {
            out.push_str(&smplab_analysis::calibrate::heldout::table(
                &format!("Simulator ({}) beside measurements, FITTED: the calibration's micro-runs (in-sample)", p.name),
                &fitted,
            ));
        }
        let (held, _) = smplab_analysis::calibrate::compare(store, &p, cal_scale);
        if !held.is_empty() {
            out.push_str(&smplab_analysis::calibrate::heldout::table(
                "HELD-OUT: built-in profiles and vCPU counts not in the fit",
                &held,
            ));
        }
    }
    let preds = results.predictions(None);
    if !preds.is_empty() {
        out.push_str("HELD-OUT: the demo's sweeps (built-in profiles, 2 vCPUs, 1 and 2 VMs), median |relative error|\n(for a fraction or a slowdown, the median |absolute error| beside it in percentage points;\nfor a slowdown also the error of the VM/native ratio, as the held-out tables give it):\n");
        for (m, e) in smplab_analysis::metrics::prediction_error_by_metric(&preds) {
            out.push_str(&prediction_error_line(&m, &e));
        }
    }
    (!out.is_empty()).then_some(out)
}

/// One metric's line of the prediction table: the median |relative error|
/// over the pairs that have one, the pairs left out because their measured
/// value is 0 (relative error undefined), for a fraction or a slowdown the
/// median |absolute error| over every pair in percentage points, and for a
/// slowdown the median error of the VM/native ratio.
fn prediction_error_line(metric: &str, e: &smplab_analysis::metrics::PredictionErrors) -> String {
    let rel = e.rel.map_or_else(
        || "     —".to_string(),
        |s| format!("{:>6.0}%", s.median * 100.0),
    );
    let counted = e.rel.map_or(0, |s| s.n);
    let mut line = format!("  {metric:<18} {rel}  ({counted} pairs");
    if e.rel_undefined > 0 {
        line.push_str(&format!(
            "; {} measured 0, no relative error",
            e.rel_undefined
        ));
    }
    line.push(')');
    if smplab_analysis::metrics::error_reads_in_points(metric) {
        if let Some(a) = e.abs {
            line.push_str(&format!(
                "   |absolute error| {:.1} pp ({} pairs)",
                a.median * 100.0,
                a.n
            ));
        }
    }
    if let Some(r) = e.ratio {
        line.push_str(&format!(
            "; as VM/native ratio (the held-out tables' slowdown) {:.0}%",
            r.median * 100.0
        ));
    }
    line.push('\n');
    line
}

pub fn run(args: &DemoOptions) -> i32 {
    run_with(&RealRunner::default(), args)
}

/// The demo with any runner (tests use a fake one). Calibration needs the
/// real VM executor and runs only when `runner` offers both vm and sim.
pub fn run_with(runner: &dyn Runner, args: &DemoOptions) -> i32 {
    match demo_steps(runner, args) {
        Ok(status) | Err(Stopped(status)) => status,
    }
}

/// A step that stopped the demo: its exit status, the error already reported.
struct Stopped(i32);

/// The demo's steps in order: open the store and say what runs here, then
/// (1) calibrate, (2) sweep, (3) diagnose, (4) summarise and write the report.
fn demo_steps(runner: &dyn Runner, args: &DemoOptions) -> Result<i32, Stopped> {
    let mut demo = Demo::open(runner, args)?;
    demo.announce();
    // 1. Calibrate the simulator to this host, so its 2-vCPU predictions can
    //    be set beside the measurements.
    let mut cal = demo.calibrate()?;
    // 2. The sweeps.
    demo.sweeps(&cal.platform)?;
    // 3. Diagnosis of one profile, measured and simulated.
    let plans = demo.diagnoses()?;
    // 4. Summary and report.
    outln!("[4/4] report");
    let results = Results::new(&demo.store);
    outln!();
    let summary = smplab_report::summary_table(&results, WORKLOADS, args.scale);
    out!("{summary}");
    for plan in &plans {
        if let Some(a) = diagnose::attribute(&results, plan) {
            outln!();
            out!("{}", diagnose::table(&a));
        }
    }
    if let Some(t) = prediction_table(&results, &demo.store, cal.scale, &cal.platform) {
        outln!();
        out!("{t}");
    }
    // Also at the top of the report.
    let line = smplab_report::precision_line(&results, &demo.store);
    demo.list_wide(&mut cal.wide);
    if let Some(line) = line {
        outln!("\n{line}");
    }
    if demo.disturbed > 0 {
        outln!(
            "{} repetitions ran while the hypervisor stole more than {} of their CPU time: left out ({} rerun).",
            demo.disturbed,
            args.steal,
            demo.reruns
        );
    }
    let problems = list_failed(&demo.store);
    demo.write_report(cal.calibration)?;
    for n in &demo.notes {
        outln!("note: {n}");
    }
    Ok(if demo.failed > 0 || problems > 0 {
        exit::PARTIAL
    } else {
        exit::OK
    })
}

/// What the demo's steps share: the store they fill, how they repeat points,
/// which executors run here, and what they found on the way.
struct Demo<'a> {
    runner: &'a dyn Runner,
    args: &'a DemoOptions,
    store_path: PathBuf,
    store: Store,
    reps: Repetitions,
    opts: SweepOptions,
    vm: bool,
    qemu: bool,
    sim: bool,
    /// Skipped parts and caveats, printed and put in the report.
    notes: Vec<String>,
    /// Points that failed in the sweeps and diagnoses.
    failed: usize,
    /// The sweeps' and diagnoses' configurations that reached the most
    /// repetitions without a ±5% interval.
    wide: Vec<(String, MedianCi)>,
    /// Repetitions flagged as disturbed by steal, and runs repeated for them.
    disturbed: usize,
    reruns: usize,
}

/// The calibration step's outcome: the platform the simulator runs on.
struct Calibrated {
    /// What the report says about the calibration; None when skipped.
    calibration: Option<smplab_analysis::calibrate::Calibration>,
    /// The calibrated profile's path, or `pvm-here` without one.
    platform: String,
    /// The calibration's largest scale.
    scale: f64,
    /// The calibration's configurations that reached the most repetitions
    /// without a ±5% interval.
    wide: Vec<(String, MedianCi)>,
}

impl<'a> Demo<'a> {
    /// Check the options, open (or, fresh, restart) the store and find out
    /// which executors run here.
    fn open(runner: &'a dyn Runner, args: &'a DemoOptions) -> Result<Self, Stopped> {
        if !(args.scale.is_finite() && args.scale > 0.0) || args.reps == 0 {
            report_error("--scale must be positive and --reps at least 1");
            return Err(Stopped(exit::BAD_INPUT));
        }
        let store_path = args.out.join("results.jsonl");
        if args.fresh {
            let _ = std::fs::remove_file(&store_path);
        }
        let store = Store::open(&store_path).map_err(|e| {
            report_error(&e);
            Stopped(exit::RUN_FAILED)
        })?;
        let mut notes = Vec::new();
        let mut can = |e: Executor, what: &str| match runner.availability(e) {
            Ok(()) => true,
            Err(why) => {
                notes.push(format!("Skipped {what}: {why}."));
                false
            }
        };
        let vm = can(Executor::Vm, "smplab-vmm runs and the calibration");
        let qemu = can(Executor::Qemu, "QEMU runs");
        let sim = can(Executor::Sim, "simulator runs");
        Ok(Demo {
            runner,
            args,
            store_path,
            store,
            reps: Repetitions::adaptive(args.reps),
            opts: SweepOptions {
                retry_failed: false,
                progress: args.progress,
            },
            vm,
            qemu,
            sim,
            notes,
            failed: 0,
            wide: Vec::new(),
            disturbed: 0,
            reruns: 0,
        })
    }

    /// Say what the demo runs and what it skips.
    fn announce(&self) {
        outln!(
            "smplab demo: {} profiles × native{}{}{}, {}–{} repetitions (until ±5%), scale {} → {}",
            WORKLOADS.len(),
            if self.vm { ", smplab-vmm" } else { "" },
            if self.qemu { ", QEMU" } else { "" },
            if self.sim {
                ", simulator (2 and 16 vCPUs)"
            } else {
                ""
            },
            self.reps.min,
            self.reps.max,
            self.args.scale,
            self.args.out.display()
        );
        for n in &self.notes {
            outln!("  {n}");
        }
    }

    /// Step 1: calibrate the simulator to this host (or reuse the profile an
    /// earlier demo wrote); without KVM and the simulator, `pvm-here`.
    fn calibrate(&mut self) -> Result<Calibrated, Stopped> {
        let args = self.args;
        let calibrated = args.out.join("calibrated.toml");
        let mut cal = Calibrated {
            calibration: None,
            platform: smplab_record::config::DEFAULT_PLATFORM.to_string(),
            scale: args.scale.min(CALIBRATION_SCALE),
            wide: Vec::new(),
        };
        if !(self.vm && self.sim) {
            outln!("[1/4] calibration skipped (needs KVM and the simulator)");
            return Ok(cal);
        }
        if calibrated.exists() && !args.fresh {
            outln!("[1/4] calibration: reusing {}", calibrated.display());
            cal.platform = calibrated.display().to_string();
            // The fitted fields are in the profile; its header says how.
            let mut reused = smplab_analysis::calibrate::Calibration::default();
            reused.unmeasured.push((
                "fitted fields".into(),
                format!(
                    "fitted when {} was written; see that file",
                    calibrated.display()
                ),
            ));
            cal.calibration = Some(reused);
            return Ok(cal);
        }
        outln!(
            "[1/4] calibrating the simulator to this host: micro-runs, least-squares fit, held-out check"
        );
        // Repeated like the sweeps (at least 6 runs, until ±5%, at most
        // --reps): the fit and the held-out check are only as certain
        // as the medians they compare.
        let rep = smplab_analysis::calibrate::measure(
            self.runner,
            &mut self.store,
            cal.scale,
            &self.reps,
            args.progress,
        )
        .map_err(|e| {
            report_error(&e);
            Stopped(exit::RUN_FAILED)
        })?;
        out!("{}", smplab_analysis::calibrate::table(&rep.cal));
        cal.wide = rep.wide;
        match smplab_analysis::calibrate::write_profile(&rep.cal, &calibrated) {
            Ok(()) => cal.platform = calibrated.display().to_string(),
            Err(e) => self.notes.push(format!(
                "Calibration not written ({e}); the simulator used pvm-here."
            )),
        }
        cal.calibration = Some(rep.cal);
        Ok(cal)
    }

    /// Step 2: write the demo's specs and run their points on the executors
    /// available here, simulator points on `platform`.
    fn sweeps(&mut self, platform: &str) -> Result<(), Stopped> {
        outln!("[2/4] sweeps: native, smplab-vmm, QEMU, simulator");
        let out = &self.args.out;
        let (mut points, mut qemu_points) = (Vec::new(), Vec::new());
        for (file, text) in specs(self.args.reps, self.args.scale, platform) {
            let _ = std::fs::create_dir_all(out);
            let _ = std::fs::write(out.join(file), &text);
            let spec = ExperimentSpec::from_text(file, &text).map_err(|e| {
                report_error(format!("internal error: demo spec {file}: {e}"));
                Stopped(exit::INTERNAL)
            })?;
            for p in spec.points {
                match p.executor() {
                    Executor::Vm if self.vm => points.push(p),
                    Executor::Sim if self.sim => points.push(p),
                    Executor::Native => points.push(p),
                    // One QEMU run per configuration: its firmware takes
                    // seconds to start.
                    Executor::Qemu if self.qemu => qemu_points.push(p),
                    _ => {}
                }
            }
        }
        let (store, runner, opts) = (&mut self.store, self.runner, &self.opts);
        let steal = self.args.steal;
        let swept =
            run_repeated_with(&points, store, runner, opts, &self.reps, steal).and_then(|a| {
                let b = run_repeated_with(
                    &qemu_points,
                    store,
                    runner,
                    opts,
                    &Repetitions::fixed(1),
                    steal,
                )?;
                Ok([a, b])
            });
        match swept {
            Ok([a, b]) => {
                self.failed += a.failed;
                self.disturbed += a.disturbed + b.disturbed;
                self.reruns += a.reruns + b.reruns;
                self.wide.extend(a.wide);
                // One QEMU run never has an interval: not a finding worth listing.
                self.failed += b.failed;
                Ok(())
            }
            Err(e) => {
                report_error(&e);
                Err(Stopped(exit::RUN_FAILED))
            }
        }
    }

    /// Step 3: diagnose [`DIAGNOSED`] in smplab-vmm and in the simulator,
    /// each plan's configurations repeated until their intervals are narrow.
    fn diagnoses(&mut self) -> Result<Vec<Plan>, Stopped> {
        outln!("[3/4] diagnosing {DIAGNOSED}: one factor removed at a time");
        let scale = self.args.scale;
        let mut plans = Vec::new();
        // Longer runs for the measured diagnosis when the demo is small: its
        // credits are differences of wall times, and scheduling noise on a shared
        // host is per run, not per unit of work.
        let diag_scale = (scale * 5.0).min(1.0).max(scale);
        if self.vm {
            plans.push(Plan::new(diagnose::baseline(
                Executor::Vm,
                DIAGNOSED,
                2,
                diag_scale,
                "",
            )));
        }
        if self.sim {
            plans.push(Plan::new(diagnose::baseline(
                Executor::Sim,
                DIAGNOSED,
                16,
                scale,
                smplab_record::config::DEFAULT_PLATFORM,
            )));
        }
        for plan in &plans {
            // Every configuration of the plan (native included) interleaved,
            // repeated until its interval is narrow: credits are only given
            // outside the noise.
            let mut pts = plan.points(1);
            for p in &mut pts {
                p.timeout_s = 120;
            }
            match run_repeated_with(
                &pts,
                &mut self.store,
                self.runner,
                &self.opts,
                &self.reps,
                self.args.steal,
            ) {
                Ok(s) => {
                    self.failed += s.failed;
                    self.disturbed += s.disturbed;
                    self.reruns += s.reruns;
                    self.wide.extend(s.wide);
                }
                Err(e) => {
                    report_error(&e);
                    return Err(Stopped(exit::RUN_FAILED));
                }
            }
        }
        Ok(plans)
    }

    /// List the configurations (the calibration's, `calibration_wide`, last)
    /// that reached the most repetitions without a ±5% interval, with a note.
    fn list_wide(&mut self, calibration_wide: &mut Vec<(String, MedianCi)>) {
        let of_calibration = calibration_wide.len();
        let wide = &mut self.wide;
        wide.append(calibration_wide);
        if wide.is_empty() {
            return;
        }
        outln!(
            "\n{} configurations ({of_calibration} of them the calibration's) reached {} repetitions without a 95% interval within ±5% of the median (the host is noisy; their differences are less certain):",
            wide.len(),
            self.reps.max
        );
        for (label, ci) in wide.iter().take(10) {
            outln!(
                "  {label}: ±{:.1}% over {} runs",
                ci.rel_half_width() * 100.0,
                ci.n
            );
        }
        self.notes.push(format!(
            "{} configurations ({of_calibration} of them the calibration's) reached {} repetitions without a 95% interval within ±5% of the median.",
            wide.len(),
            self.reps.max
        ));
    }

    /// Write the report (with the notes and the calibration) and say where
    /// it and the store are.
    fn write_report(
        &self,
        calibration: Option<smplab_analysis::calibrate::Calibration>,
    ) -> Result<(), Stopped> {
        let out = &self.args.out;
        let report_dir = out.join("report");
        match write_report(
            &self.store,
            &report_dir,
            &ReportOptions {
                title: "smplab demo".into(),
                notes: self.notes.clone(),
                sections: vec![],
                calibration,
            },
        ) {
            Ok(f) => {
                outln!("\nreport: {}", f.html.display());
                outln!(
                    "store:  {}   (rerun `smplab demo` to resume; specs: {})",
                    self.store_path.display(),
                    out.join("demo-*.toml").display()
                );
                Ok(())
            }
            Err(e) => {
                report_error(&e);
                Err(Stopped(exit::RUN_FAILED))
            }
        }
    }
}

/// List the store's failed points (the first five, one line each); how many
/// there are.
fn list_failed(store: &Store) -> usize {
    let problems: Vec<_> = store
        .latest()
        .into_iter()
        .filter(|e| matches!(e.status, Status::Failed { .. }))
        .collect();
    if !problems.is_empty() {
        outln!(
            "\n{} points failed (reasons in the report):",
            problems.len()
        );
        for e in problems.iter().take(5) {
            if let Status::Failed { reason } = &e.status {
                outln!(
                    "  {}: {}",
                    e.point.label(),
                    reason.lines().next().unwrap_or("")
                );
            }
        }
    }
    problems.len()
}

/// Whether `dir` holds a finished demo (used by tests).
pub fn has_report(dir: &Path) -> bool {
    dir.join("report").join("index.html").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_experiment::runner::fake::FakeRunner;

    /// The idle line keeps the relative median, says how many pairs had
    /// none (measured 0) and gives the absolute error in points beside it;
    /// so does the slowdown line (a slowdown is a fraction of native time).
    #[test]
    fn the_prediction_line_counts_measured_zeros_and_gives_points_for_fractions_and_slowdowns() {
        let p =
            |metric: &str, measured: f64, predicted: f64| smplab_analysis::metrics::Prediction {
                label: "x".into(),
                metric: metric.into(),
                measured,
                predicted,
            };
        let by = smplab_analysis::metrics::prediction_error_by_metric(&[
            p("idle fraction", 0.0, 0.000002),
            p("idle fraction", 0.1, 0.15),
            p("idle fraction", 0.2, 0.26),
            p("slowdown", 2.0, 3.0),
        ]);
        let idle = prediction_error_line("idle fraction", &by["idle fraction"]);
        assert!(
            idle.contains("40%  (2 pairs; 1 measured 0, no relative error)"),
            "{idle}"
        );
        assert!(idle.contains("|absolute error| 5.0 pp (3 pairs)"), "{idle}");
        // A slowdown of +200% predicted at +300%: 50% off, 100 points, and
        // as ratios 4x for 3x, 33% off.
        let slow = prediction_error_line("slowdown", &by["slowdown"]);
        assert!(
            slow.contains("50%  (1 pairs)")
                && slow.contains("|absolute error| 100.0 pp (1 pairs)")
                && slow.contains("as VM/native ratio (the held-out tables' slowdown) 33%"),
            "{slow}"
        );
        assert!(!idle.contains("ratio"), "{idle}");
    }

    #[test]
    fn without_kvm_or_qemu_it_runs_what_it_can_and_says_what_it_skipped() {
        let out = smplab_experiment::testutil::temp_dir("demo");
        let mut runner = FakeRunner::new();
        runner.unavailable = vec![Executor::Vm, Executor::Qemu];
        let args = DemoOptions {
            out: out.clone(),
            reps: 1,
            scale: 0.05,
            fresh: true,
            progress: false,
            steal: StealThreshold::default(),
        };
        let code = run_with(&runner, &args);
        assert_eq!(code, exit::OK);
        assert!(has_report(&out));
        let html = std::fs::read_to_string(out.join("report/index.html")).unwrap();
        assert!(
            html.contains("Skipped smplab-vmm runs"),
            "notes name what was skipped"
        );
        assert!(html.contains("Skipped QEMU runs"));
        assert!(
            out.join("demo-measured.toml").is_file(),
            "specs are written for reruns"
        );
        let store = Store::read(&out.join("results.jsonl")).unwrap();
        assert!(store
            .entries()
            .iter()
            .all(|e| e.point.executor() != Executor::Vm));
        assert!(store
            .entries()
            .iter()
            .any(|e| e.point.executor() == Executor::Sim));
        assert!(store
            .entries()
            .iter()
            .any(|e| e.point.executor() == Executor::Native));
        // Resuming runs nothing new.
        let before = store.entries().len();
        let args = DemoOptions {
            fresh: false,
            ..args
        };
        assert_eq!(run_with(&runner, &args), exit::OK);
        assert_eq!(
            Store::read(&out.join("results.jsonl"))
                .unwrap()
                .entries()
                .len(),
            before
        );
    }
}
