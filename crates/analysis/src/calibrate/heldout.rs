//! Held-out validation: configurations the fit never saw — built-in profiles
//! (the micro-runs are none of them), some at a vCPU count no micro-run
//! uses (3 vCPUs on this 2-core host, so also overcommitted) — predicted with
//! a profile and run for real, natively and in smplab-vmm.

use super::fit::{simulate, SimCase};
use crate::metrics::{Results, Summary};
use smplab_experiment::point::{Point, Variant};
use smplab_record::config::{
    GuestSettings, IdlePolicy, NativeSettings, RunConfig, SyncMode, VmSettings,
};
use smplab_sim::Platform;
use smplab_stats::{MedianCi, TARGET_REL_HALF_WIDTH};

/// `(built-in profile, threads = vCPUs)` of the held-out set.
pub const HELDOUT: &[(&str, u32)] = &[
    ("blackscholes", 2),
    ("dedup", 2),
    ("ocean_ncp", 2),
    ("streamcluster", 2),
    ("spinlock", 2),
    ("canneal", 2),
    ("volrend", 3),
    ("fluidanimate", 3),
];

/// Scale of the held-out runs relative to the calibration's scale: the
/// built-in profiles are longer than the micro-runs.
pub const SCALE_FACTOR: f64 = 0.5;

/// The stored point of a held-out configuration (`vm` false: natively).
pub fn point(workload: &str, n: u32, vm: bool, scale: f64) -> Point {
    let config = if vm {
        RunConfig::Vm(VmSettings::new(GuestSettings::new(n), SyncMode::Fine))
    } else {
        RunConfig::Native(NativeSettings::default())
    };
    let mut p = Point::new(workload, n, scale, config);
    p.variant = Variant::AsIs;
    p.timeout_s = 120;
    p.study = Some("calibrate-heldout".into());
    p
}

/// Every held-out configuration once (repetition 0): the calibration
/// repeats them with [`smplab_experiment::sweep::run_repeated`].
pub fn points(scale: f64) -> Vec<Point> {
    HELDOUT
        .iter()
        .flat_map(|&(w, n)| [true, false].map(|vm| point(w, n, vm, scale)))
        .collect()
}

/// One held-out configuration: measured and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub measured_wall_ns: f64,
    pub predicted_wall_ns: f64,
    pub measured_slowdown: f64,
    pub predicted_slowdown: f64,
    /// 95% interval of the median VM wall time over its repetitions
    /// (seconds; None when not known).
    pub vm_ci: Option<MedianCi>,
    /// The same of the native wall time the slowdown divides by.
    pub native_ci: Option<MedianCi>,
}

impl Row {
    /// |relative error| of the VM wall time.
    pub fn wall_error(&self) -> f64 {
        ((self.predicted_wall_ns - self.measured_wall_ns) / self.measured_wall_ns).abs()
    }
    /// |relative error| of the slowdown (VM wall / native wall).
    pub fn slowdown_error(&self) -> f64 {
        ((self.predicted_slowdown - self.measured_slowdown) / self.measured_slowdown).abs()
    }
    /// The measured VM wall time is certain by the project's rule: its 95%
    /// interval is within ±5% of the median. Only then is its wall error
    /// more than the host's noise.
    pub fn wall_is_narrow(&self) -> bool {
        is_narrow(self.vm_ci.as_ref())
    }
    /// The measured slowdown is certain: both wall times it divides are.
    pub fn slowdown_is_narrow(&self) -> bool {
        self.wall_is_narrow() && is_narrow(self.native_ci.as_ref())
    }
}

fn is_narrow(ci: Option<&MedianCi>) -> bool {
    ci.is_some_and(|c| c.is_narrow(TARGET_REL_HALF_WIDTH))
}

/// Median over stored repetitions of a point's wall time.
pub fn median_wall(results: &Results, p: &Point) -> Option<f64> {
    results.wall(p).map(|s| s.median * 1e9)
}

/// The median wall time (ns) of a point's stored repetitions and its 95%
/// interval (seconds, as [`Results::wall_ci`] gives it).
pub fn measured_wall(results: &Results, p: &Point) -> Option<(f64, MedianCi)> {
    results.wall_ci(p).map(|ci| (ci.median * 1e9, ci))
}

/// Predict every held-out configuration with `platform` on a host of
/// `pcpus` cores and set it beside the stored measurements. Configurations
/// without both measurements are left out; `problems` says why.
pub fn evaluate(
    results: &Results,
    platform: &Platform,
    scale: f64,
    pcpus: u32,
) -> (Vec<Row>, Vec<String>) {
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    for &(w, n) in HELDOUT {
        let label = format!("{w} {n} vCPUs");
        let vm = measured_wall(results, &point(w, n, true, scale));
        let native = measured_wall(results, &point(w, n, false, scale));
        let (Some((vm, vm_ci)), Some((native, native_ci))) = (vm, native) else {
            problems.push(format!("{label}: not measured on both executors"));
            continue;
        };
        let case = smplab_workload::Source::resolve(w).and_then(|src| {
            let program = src.instantiate(Some(n), scale)?;
            let info = src.workload_info(&program);
            Ok(SimCase {
                program,
                info,
                vcpus: n,
                pcpus,
                idle: IdlePolicy::default(),
            })
        });
        let predicted = case
            .map_err(|e| e.to_string())
            .and_then(|c| simulate(platform, &c).map_err(|e| e.to_string()));
        match predicted {
            Ok((pvm, pnative)) => rows.push(Row {
                label,
                measured_wall_ns: vm,
                predicted_wall_ns: pvm,
                measured_slowdown: vm / native,
                predicted_slowdown: pvm / pnative,
                vm_ci: Some(vm_ci),
                native_ci: Some(native_ci),
            }),
            Err(e) => problems.push(format!("{label}: not simulated: {e}")),
        }
    }
    (rows, problems)
}

/// Median |relative error| of wall time and of slowdown over every row: the
/// headline figure of the calibration (docs/lab.md), whatever the rows' certainty.
pub fn medians(rows: &[Row]) -> Option<(f64, f64)> {
    let w = Summary::of(&rows.iter().map(Row::wall_error).collect::<Vec<_>>())?;
    let s = Summary::of(&rows.iter().map(Row::slowdown_error).collect::<Vec<_>>())?;
    Some((w.median, s.median))
}

/// Median |relative error| over the rows whose measurement is narrow, and
/// over how many rows each is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NarrowMedians {
    /// Over rows whose VM wall interval is narrow ([`Row::wall_is_narrow`]).
    pub wall: Option<f64>,
    pub wall_rows: usize,
    /// Over rows whose VM and native intervals both are
    /// ([`Row::slowdown_is_narrow`]).
    pub slowdown: Option<f64>,
    pub slowdown_rows: usize,
}

/// The medians of the narrow rows only: each error counted only where the
/// measurements it compares against are certain (a wall error needs the VM
/// wall, a slowdown error the VM and the native wall).
pub fn narrow_medians(rows: &[Row]) -> NarrowMedians {
    let of = |keep: fn(&Row) -> bool, err: fn(&Row) -> f64| {
        let v: Vec<f64> = rows.iter().filter(|r| keep(r)).map(err).collect();
        (Summary::of(&v).map(|s| s.median), v.len())
    };
    let (wall, wall_rows) = of(Row::wall_is_narrow, Row::wall_error);
    let (slowdown, slowdown_rows) = of(Row::slowdown_is_narrow, Row::slowdown_error);
    NarrowMedians {
        wall,
        wall_rows,
        slowdown,
        slowdown_rows,
    }
}

/// `±x.x%` of an interval with its mark: `*` wider than ±5%, `†` fewer
/// than 6 runs (the range, under 95% coverage); `–` when unknown.
fn interval_cell(ci: Option<&MedianCi>) -> String {
    ci.map_or_else(
        || "–".to_string(),
        |c| {
            let mark = if c.coverage < 0.95 {
                "†"
            } else if !c.is_narrow(TARGET_REL_HALF_WIDTH) {
                "*"
            } else {
                " "
            };
            format!("±{:.1}%{mark}", c.rel_half_width() * 100.0)
        },
    )
}

fn runs_cell(r: &Row) -> String {
    let n = |c: Option<&MedianCi>| c.map_or("–".to_string(), |c| c.n.to_string());
    format!("{}/{}", n(r.vm_ci.as_ref()), n(r.native_ci.as_ref()))
}

fn pct_cell(v: Option<f64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| format!("{:.0}%", v * 100.0))
}

/// Columns of [`table`]; the wall error is column 5, the slowdown error 9.
const HEADER: [&str; 10] = [
    "configuration",
    "runs vm/nat",
    "wall meas.",
    "vm ±95%",
    "wall pred.",
    "error",
    "slowdown",
    "native ±95%",
    "pred.",
    "error",
];

/// The per-point table with the medians: each point's measured 95%
/// intervals of the VM and the native wall time as ±% of the median (marked
/// when wider than ±5%), then the median |error| over all points (the
/// headline) and over the narrow points only.
pub fn table(title: &str, rows: &[Row]) -> String {
    let mut cells: Vec<[String; 10]> = vec![HEADER.map(String::from)];
    for r in rows {
        cells.push([
            r.label.clone(),
            runs_cell(r),
            format!("{:.1} ms", r.measured_wall_ns / 1e6),
            interval_cell(r.vm_ci.as_ref()),
            format!("{:.1} ms", r.predicted_wall_ns / 1e6),
            format!("{:.0}%", r.wall_error() * 100.0),
            format!("{:.2}x", r.measured_slowdown),
            interval_cell(r.native_ci.as_ref()),
            format!("{:.2}x", r.predicted_slowdown),
            format!("{:.0}%", r.slowdown_error() * 100.0),
        ]);
    }
    let mut footer: Vec<(String, String, String)> = Vec::new();
    if let Some((w, sl)) = medians(rows) {
        footer.push((
            format!("median |error|, all {} points", rows.len()),
            pct_cell(Some(w)),
            pct_cell(Some(sl)),
        ));
        let n = narrow_medians(rows);
        footer.push((
            format!(
                "median |error|, narrow points only ({} wall, {} slowdown)",
                n.wall_rows, n.slowdown_rows
            ),
            pct_cell(n.wall),
            pct_cell(n.slowdown),
        ));
    }
    let mut widths: Vec<usize> = (0..10)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    // A footer label spans the columns before the wall error.
    let span = |w: &[usize]| w[..5].iter().sum::<usize>() + 2 * 4;
    let label_w = footer
        .iter()
        .map(|f| f.0.chars().count())
        .max()
        .unwrap_or(0);
    if label_w > span(&widths) {
        widths[0] += label_w - span(&widths);
    }
    let pad = |s: &str, w: usize| " ".repeat(w.saturating_sub(s.chars().count()));
    let mut out = format!("{title}\n");
    for r in &cells {
        let mut line = format!("  {}{}", r[0], pad(&r[0], widths[0]));
        for c in 1..10 {
            line.push_str(&format!("  {}{}", pad(&r[c], widths[c]), r[c]));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    // The slowdown error right-aligned under column 9: columns 6-9 and
    // the three gaps between them.
    let to_slowdown_error = widths[6..].iter().sum::<usize>() + 2 * 3;
    for (label, w, sl) in &footer {
        out.push_str(&format!(
            "  {label}{}  {}{w}  {}{sl}\n",
            pad(label, span(&widths)),
            pad(w, widths[5]),
            pad(sl, to_slowdown_error),
        ));
    }
    if !rows.is_empty() {
        out.push_str(
            "  ±95%: half-width of the 95% interval of the median wall time over the runs, as % of the median;\n  * wider than ±5% after the most repetitions, † fewer than 6 runs (the range). Narrow points only:\n  wall errors where the vm interval is within ±5%, slowdown errors where both intervals are.\n",
        );
    }
    out
}
