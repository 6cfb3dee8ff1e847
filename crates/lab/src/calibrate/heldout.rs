//! Held-out validation: configurations the fit never saw — built-in profiles
//! (the micro-runs are none of them), some at a vCPU count no micro-run
//! uses (3 vCPUs on this 2-core host, so also overcommitted) — predicted with
//! a profile and run for real, natively and in smplab-vmm.

use super::fit::{simulate, SimCase};
use crate::metrics::{Results, Summary};
use crate::point::{Point, Variant};
use smplab_record::config::{
    GuestSettings, IdlePolicy, NativeSettings, RunConfig, SyncMode, VmSettings,
};
use smplab_sim::Platform;

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

/// Every held-out point, `reps` repetitions, interleaved.
pub fn points(scale: f64, reps: u32) -> Vec<Point> {
    let mut out = Vec::new();
    for rep in 0..reps {
        for &(w, n) in HELDOUT {
            for vm in [true, false] {
                let mut p = point(w, n, vm, scale);
                p.rep = rep;
                out.push(p);
            }
        }
    }
    out
}

/// One held-out configuration: measured and predicted.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub measured_wall_ns: f64,
    pub predicted_wall_ns: f64,
    pub measured_slowdown: f64,
    pub predicted_slowdown: f64,
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
}

/// Median over stored repetitions of a point's wall time.
pub fn median_wall(results: &Results, p: &Point) -> Option<f64> {
    results.wall(p).map(|s| s.median * 1e9)
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
        let vm = median_wall(results, &point(w, n, true, scale));
        let native = median_wall(results, &point(w, n, false, scale));
        let (Some(vm), Some(native)) = (vm, native) else {
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
            }),
            Err(e) => problems.push(format!("{label}: not simulated: {e}")),
        }
    }
    (rows, problems)
}

/// Median |relative error| of wall time and of slowdown.
pub fn medians(rows: &[Row]) -> Option<(f64, f64)> {
    let w = Summary::of(&rows.iter().map(Row::wall_error).collect::<Vec<_>>())?;
    let s = Summary::of(&rows.iter().map(Row::slowdown_error).collect::<Vec<_>>())?;
    Some((w.median, s.median))
}

/// The per-point table with the medians.
pub fn table(title: &str, rows: &[Row]) -> String {
    let mut s = format!(
        "{title}\n  {:<26} {:>11} {:>11} {:>7}   {:>9} {:>9} {:>7}\n",
        "configuration", "wall meas.", "wall pred.", "error", "slowdown", "pred.", "error"
    );
    for r in rows {
        s.push_str(&format!(
            "  {:<26} {:>8.1} ms {:>8.1} ms {:>6.0}%   {:>8.2}x {:>8.2}x {:>6.0}%\n",
            r.label,
            r.measured_wall_ns / 1e6,
            r.predicted_wall_ns / 1e6,
            r.wall_error() * 100.0,
            r.measured_slowdown,
            r.predicted_slowdown,
            r.slowdown_error() * 100.0
        ));
    }
    if let Some((w, sl)) = medians(rows) {
        s.push_str(&format!(
            "  {:<26} {:>30.0}% {:>28.0}%\n",
            "median |error|",
            w * 100.0,
            sl * 100.0
        ));
    }
    s
}
