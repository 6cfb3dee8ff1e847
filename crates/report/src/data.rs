//! What the report's sections share: 95% intervals of per-repetition
//! samples (`smplab_stats::MedianCi`), one colour per executor, the
//! "default set-up" a headline number is quoted for, and number formats.

use smplab_analysis::metrics::{mean_wall_s, sim_native_s, Results};
use smplab_chart::{esc, palette, Colour, IntervalRow, LegendEntry};
use smplab_experiment::point::{Point, Variant};
use smplab_record::Executor;
use smplab_stats::MedianCi;
use std::collections::BTreeSet;

/// Every executor, in the order the report lists them; the i-th is drawn
/// in the palette's i-th series colour (smplab-vmm blue, QEMU orange, the
/// simulator bluish green, native black).
pub const EXECUTORS: &[Executor] = &Executor::ALL;

/// The colour of an executor: the same in every plot.
pub fn colour(e: Executor) -> Colour {
    palette::series(executor_rank(e))
}

/// An executor's place in [`EXECUTORS`], for sorting.
pub fn executor_rank(e: Executor) -> usize {
    EXECUTORS
        .iter()
        .position(|x| *x == e)
        .unwrap_or(EXECUTORS.len())
}

/// What a reader calls the executor.
pub fn executor_name(e: Executor) -> &'static str {
    e.reader_name()
}

/// A legend of the executors in `used`, in the report's order, each in its
/// colour.
pub fn executor_legend(used: impl IntoIterator<Item = Executor>) -> Vec<LegendEntry> {
    let used: Vec<Executor> = used.into_iter().collect();
    EXECUTORS
        .iter()
        .filter(|e| used.contains(e))
        .map(|e| (executor_name(*e).to_string(), colour(*e)))
        .collect()
}

/// Per-repetition wall times (seconds; the mean over VMs of multi-VM points).
pub fn wall_samples(results: &Results, p: &Point) -> Vec<f64> {
    results.get(p).map_or_else(Vec::new, |es| {
        es.iter().map(|e| mean_wall_s(&e.records)).collect()
    })
}

pub fn wall_ci(results: &Results, p: &Point) -> Option<MedianCi> {
    MedianCi::of(&wall_samples(results, p))
}

/// Per-repetition native times `p` is compared with: the native runs of the
/// same workload for measured executors, the simulator's own no-virtualization
/// model of each run for the simulator.
pub fn native_samples(results: &Results, p: &Point) -> Vec<f64> {
    if p.executor() == Executor::Sim {
        return results.get(p).map_or_else(Vec::new, |es| {
            es.iter().filter_map(|e| sim_native_s(&e.records)).collect()
        });
    }
    results.native_for(p).map_or_else(Vec::new, |es| {
        es.iter().map(|e| mean_wall_s(&e.records)).collect()
    })
}

/// One configuration's slowdown as a row of an interval chart (percent),
/// its repetitions and coverage as the hover text.
pub fn slowdown_row(label: String, ci: &MedianCi, executor: Executor) -> IntervalRow {
    IntervalRow {
        label,
        median: ci.median * 100.0,
        lo: ci.lo * 100.0,
        hi: ci.hi * 100.0,
        quartiles: None,
        colour: colour(executor),
        note: format!("{} repetitions, coverage {:.0}%", ci.n, ci.coverage * 100.0),
    }
}

/// The slowdown versus native with its 95% interval: per repetition
/// `T / median(T_native) − 1` (the simulator: against its own native model of
/// the same run), the interval of their median.
pub fn slowdown_ci(results: &Results, p: &Point) -> Option<MedianCi> {
    if p.executor() == Executor::Native {
        return None;
    }
    let walls = wall_samples(results, p);
    let natives = native_samples(results, p);
    let samples: Vec<f64> = if p.executor() == Executor::Sim && natives.len() == walls.len() {
        walls
            .iter()
            .zip(&natives)
            .filter(|(_, n)| **n > 0.0)
            .map(|(w, n)| w / n - 1.0)
            .collect()
    } else {
        let native = MedianCi::of(&natives)?.median;
        if native <= 0.0 {
            return None;
        }
        walls.iter().map(|w| w / native - 1.0).collect()
    };
    MedianCi::of(&samples)
}

/// Whether `p`'s wall time differs from native outside the noise: the two
/// intervals do not overlap. `None` without both.
pub fn differs_from_native(results: &Results, p: &Point) -> Option<bool> {
    if p.executor() == Executor::Native {
        return None;
    }
    let a = wall_ci(results, p)?;
    let b = MedianCi::of(&native_samples(results, p))?;
    Some(a.differs_from(&b))
}

/// Weighted speedup of a `vms = K` point with its interval: metrics' one
/// definition, which counts only runs whose VMs' workload windows overlapped.
pub fn weighted_speedup_ci(results: &Results, p: &Point) -> Option<MedianCi> {
    results.weighted_speedup_ci(p).map(|w| w.ci)
}

/// The default set-up: every setting at its one default (HLT idle, the
/// workload as written, floating vCPUs, the default device sync mode; in the
/// simulator the platform's PLE and no APICv), any size and VM count, outside a
/// study: the configuration headline numbers are quoted for. Compared through
/// the store key, never setting by setting.
pub fn is_default_setup(p: &Point) -> bool {
    use smplab_record::config::{RunConfig, DEFAULT_PLATFORM};
    if p.study.is_some() || p.variant != Variant::AsIs {
        return false;
    }
    if p.executor() == Executor::Native {
        return p.native_twin().config_key() == p.config_key();
    }
    let platform = p.config.platform().unwrap_or(DEFAULT_PLATFORM);
    let mut default = RunConfig::defaults(p.executor(), p.vcpus().unwrap_or(1), platform);
    default.set_vms(p.vms());
    let mut b = p.clone();
    b.config = default;
    b.config_key() == p.config_key()
}

/// The workloads of the run (successful configurations outside studies, such
/// as calibration probes), sorted.
pub fn workloads(results: &Results) -> Vec<String> {
    results
        .points()
        .filter(|p| p.study.is_none())
        .map(|p| p.workload.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The configuration a workload's headline number on `executor` is quoted
/// for: default set-up, one VM, preferring `vcpus` (to pair a simulation with
/// a measurement), then the most repetitions, then the most vCPUs.
pub fn headline<'r>(
    results: &'r Results,
    workload: &str,
    executor: Executor,
    vcpus: Option<u32>,
) -> Option<&'r Point> {
    results
        .points()
        .filter(|p| {
            p.executor() == executor
                && p.workload == workload
                && p.vms() == 1
                && is_default_setup(p)
        })
        .max_by_key(|p| {
            (
                vcpus.is_some() && p.vcpus() == vcpus,
                results.get(p).map_or(0, |v| v.len()),
                p.vcpus(),
            )
        })
}

/// An anchor-safe id fragment.
pub fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// A percentage with its interval, `+35% [+30 – +41]`, as HTML; a dagger
/// marks an interval of fewer than 6 repetitions (the range, covering the
/// median with less than 95%).
pub fn pct_ci(ci: Option<MedianCi>) -> String {
    match ci {
        // Exactly repeatable (the simulator with equal seeds' outcomes): no bracket.
        Some(c) if c.lo == c.hi => pct(c.median),
        Some(c) => format!(
            "{} <span class=\"ci\">[{} – {}]{}</span>",
            pct(c.median),
            pct_bare(c.lo),
            pct_bare(c.hi),
            dagger(&c)
        ),
        None => "–".into(),
    }
}

/// A signed percentage of a fraction: one decimal below ±100%, none above.
pub fn pct(v: f64) -> String {
    format!("{}%", pct_bare(v))
}

fn pct_bare(v: f64) -> String {
    if (v * 100.0).abs() >= 100.0 {
        format!("{:+.0}", v * 100.0)
    } else {
        format!("{:+.1}", v * 100.0)
    }
}

/// A configuration's label for display: without the workload when the
/// context names it, a platform file path shortened to its file name, and
/// the workload scale (sweeps and diagnoses may differ only in it).
pub fn display_label(p: &Point, drop_workload: bool) -> String {
    let label = p.label();
    let mut tokens: Vec<String> = label
        .split(' ')
        .filter(|t| !(drop_workload && *t == p.workload))
        .map(|t| {
            if t.contains('/') && t.ends_with(".toml") {
                std::path::Path::new(t)
                    .file_name()
                    .map_or(t.to_string(), |f| f.to_string_lossy().into_owned())
            } else {
                t.to_string()
            }
        })
        .collect();
    // Before a trailing "(study)" tag.
    let at = tokens
        .iter()
        .position(|t| t.starts_with('('))
        .unwrap_or(tokens.len());
    tokens.insert(at, format!("scale={}", p.scale));
    tokens.join(" ")
}

/// A number with its interval, `1.52 [1.40 – 1.61]`, as HTML.
pub fn num_ci(ci: Option<MedianCi>, scale: f64, digits: usize) -> String {
    match ci {
        Some(c) => format!(
            "{:.d$} <span class=\"ci\">[{:.d$} – {:.d$}]{}</span>",
            c.median * scale,
            c.lo * scale,
            c.hi * scale,
            dagger(&c),
            d = digits
        ),
        None => "–".into(),
    }
}

fn dagger(c: &MedianCi) -> &'static str {
    if c.coverage < 0.95 {
        "†"
    } else {
        ""
    }
}

/// The noise status of a difference as a short HTML badge.
pub fn noise_badge(outside: bool) -> &'static str {
    if outside {
        "<span class=\"sig\">outside noise</span>"
    } else {
        "<span class=\"noise\">~ within noise</span>"
    }
}

/// A `data-v` attribute for sorting a table cell by value.
pub fn sort_value(v: Option<f64>) -> String {
    match v.filter(|v| v.is_finite()) {
        Some(v) => format!(" data-v=\"{v}\""),
        None => " data-v=\"\"".into(),
    }
}

/// A link that opens the raw-data table filtered to `filter`.
pub fn rows_link(filter: &str, text: &str) -> String {
    format!(
        "<a href=\"#raw\" data-filter=\"{}\">{}</a>",
        esc(filter),
        esc(text)
    )
}
