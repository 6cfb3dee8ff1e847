//! `smplab calibrate`: fit the simulator's platform costs to this host and
//! check the fit on configurations it never saw.
//!
//! 1. **Micro-runs** ([`micro`]): small programs, each dominated by one or
//!    two kinds of cost (compute, buffer walks, block + wake, halting and its
//!    wakeup IPI, shootdowns), run natively and in smplab-vmm. They and the
//!    held-out runs are repeated by the project's rule
//!    ([`smplab_experiment::sweep::run_repeated`]): at least 6 times, until the 95%
//!    interval of the median wall time is within ±5% of it or the maximum.
//! 2. **Fit** ([`fit`]): the guest kernel path costs (separately for bare
//!    metal, `cpu.*`, and in a VM, `vm_kernel.*`), IPI and wakeup costs and
//!    the CPU speed are fitted by least squares so that the simulator
//!    reproduces the micro-runs' wall times, each weighted by how certain its
//!    median is; the residual of every micro-run is reported.
//! 3. **Direct measurements**: the user-space exit round trip from
//!    smplab-vmm's port-read loop guest (slope of wall time over reads), and
//!    the host's `kvm.halt_poll_ns`.
//! 4. **Held-out check** ([`heldout`]): built-in profiles, some at a vCPU
//!    count no micro-run uses, predicted with the written profile and run for
//!    real; per-point and median errors of wall time and slowdown, with each
//!    point's measured intervals and the medians over the narrow points too.
//!
//! The written profile is pvm-here with the fitted and measured fields
//! replaced; its header comment and description say which, and when.
//! Fields not in the fit keep pvm-here's cited values (the APICv costs
//! cannot be measured on a host without APICv).

pub mod fit;
pub mod heldout;
pub mod micro;
pub mod probes;
pub mod quiet;
pub mod sealed;

/// Why a calibration could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    #[error("the simulator is not in this build, so there is no base profile to calibrate; the measurements above are all there is")]
    NoSimulator,
    #[error("the base platform profile does not parse: {0}")]
    BaseProfile(#[from] toml::de::Error),
    #[error("the base platform profile has no [{section}] section for {field}")]
    NoSection { section: String, field: String },
    #[error("cannot write the profile as TOML: {0}")]
    Serialize(#[from] toml::ser::Error),
    #[error("the calibrated profile is not a valid platform: {0}")]
    InvalidProfile(#[source] smplab_sim::SimError),
    #[error("{path}: cannot write the calibrated profile: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot write the micro-run programs: {source}")]
    Programs {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the fit could not simulate a micro-run: {0}")]
    Fit(#[source] smplab_sim::SimError),
    #[error("micro-run {name}: {source}")]
    Micro {
        name: String,
        #[source]
        source: smplab_workload::WorkloadError,
    },
    #[error("no micro-run was measured on both executors, so there is nothing to fit (see the failed points above)")]
    NothingToFit,
    #[error(transparent)]
    Store(#[from] smplab_experiment::store::StoreError),
}

use crate::metrics::Results;
use smplab_experiment::sweep::{Repetitions, SweepSummary};
use smplab_record::RunRecord;
use smplab_sim::Platform;
use smplab_stats::MedianCi;
use std::collections::BTreeMap;
use std::path::Path;

/// One measured or fitted cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Profile field, `section.key`.
    pub field: &'static str,
    /// Nanoseconds (per iteration or access for the `cpu.*_per_*` fields).
    pub value: f64,
    /// Range over repetitions.
    pub spread: Option<(f64, f64)>,
    /// How it was measured, for the table and the profile's description.
    pub how: String,
}

/// The outcome of a calibration.
#[derive(Debug, Clone, Default)]
pub struct Calibration {
    pub estimates: Vec<Estimate>,
    /// `(field or quantity, why it is not measured)`.
    pub unmeasured: Vec<(String, String)>,
    /// Related observations that are not profile fields (the fit's
    /// residuals, KVM halt stats).
    pub info: Vec<(String, String)>,
}

/// Everything a calibration found: the profile fields, the fit behind them
/// and the held-out check of the profile they make.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub cal: Calibration,
    pub fit: Option<fit::Fit>,
    /// The written profile predicting the held-out set.
    pub heldout: Vec<heldout::Row>,
    /// Held-out configurations that could not be compared, with why.
    pub heldout_problems: Vec<String>,
    /// Micro-run and held-out configurations that reached the maximum of
    /// repetitions without a narrow interval: `(label, wall-time interval)`.
    pub wide: Vec<(String, MedianCi)>,
    /// The most repetitions a configuration had.
    pub max_reps: u32,
}

/// Host cores the real runs share (the simulator's pCPUs for them).
pub fn host_cores() -> u32 {
    std::thread::available_parallelism()
        .ok()
        .and_then(|n| u32::try_from(n.get()).ok())
        .unwrap_or(1)
}

/// Measured micro-runs as fit observations (medians over repetitions, with
/// their intervals).
pub fn observations(
    results: &Results,
    dir: &Path,
    scale: f64,
) -> Result<Vec<fit::Observation>, CalibrateError> {
    let mut obs = Vec::new();
    for m in micro::MICROS {
        let vm = heldout::measured_wall(results, &micro::point(dir, m, true, scale));
        let native = if m.native {
            heldout::measured_wall(results, &micro::point(dir, m, false, scale))
        } else {
            None
        };
        if vm.is_none() && native.is_none() {
            continue;
        }
        let (program, info) = micro::program(m, scale).map_err(|source| CalibrateError::Micro {
            name: m.name.into(),
            source,
        })?;
        obs.push(fit::Observation {
            name: m.name.into(),
            case: fit::SimCase {
                program,
                info,
                vcpus: m.vcpus,
                pcpus: m.vcpus,
                idle: m.idle,
            },
            vm_ns: vm.map(|v| v.0),
            native_ns: native.map(|v| v.0),
            vm_ci: vm.map(|v| v.1),
            native_ci: native.map(|v| v.1),
            vm_idle: if m.idle_fitted {
                results
                    .idle_fraction(&micro::point(dir, m, true, scale))
                    .map(|s| s.median)
            } else {
                None
            },
        });
    }
    Ok(obs)
}

/// Today's date (UTC) as `YYYY-MM-DD`, for the profile's provenance.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date(secs / 86_400)
}

/// `YYYY-MM-DD` of a day count since 1970-01-01 (the proleptic Gregorian
/// calendar, H. Hinnant's days-from-civil inverse).
pub fn civil_date(days: u64) -> String {
    let z = i64::try_from(days).unwrap_or(i64::MAX - 719_468) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Turn a fit into profile estimates and residual lines.
pub fn record_fit(cal: &mut Calibration, f: &fit::Fit, n_obs: usize) {
    let date = today();
    for &(field, value, sens) in &f.values {
        let how = if sens < fit::WEAK {
            format!("measured by smplab calibrate on {date}: least-squares fit to {n_obs} micro-runs; weakly determined (sensitivity {sens:.3}), so it stays near pvm-here's value")
        } else {
            format!("measured by smplab calibrate on {date}: least-squares fit to {n_obs} micro-runs (sensitivity {sens:.2})")
        };
        cal.estimates.push(Estimate {
            field,
            value,
            spread: None,
            how,
        });
    }
    for r in &f.residuals {
        let (measured, fitted) = if r.kind.is_fraction() {
            (
                format!("{:.3}", r.measured_ns),
                format!("{:.3}", r.fitted_ns),
            )
        } else {
            (
                format!("{:.2} ms", r.measured_ns / 1e6),
                format!("{:.2} ms", r.fitted_ns / 1e6),
            )
        };
        cal.info.push((
            format!("residual {} {}", r.name, r.kind),
            format!(
                "measured {measured}, fitted {fitted} ({:+.1}%), weight {:.2} (certainty {:.2})",
                r.rel() * 100.0,
                r.weight,
                r.certainty
            ),
        ));
    }
}

/// The profile a calibration writes, as the simulator reads it.
pub fn profile(cal: &Calibration) -> Result<Platform, CalibrateError> {
    let base =
        smplab_experiment::execute::sim::base_profile_text(smplab_record::config::DEFAULT_PLATFORM)
            .ok_or(CalibrateError::NoSimulator)?;
    let text = apply_to_profile(&base, "calibrated", cal)?;
    Platform::from_text("calibrated", &text).map_err(CalibrateError::InvalidProfile)
}

/// The configurations a calibration runs: every micro-run, then every
/// held-out configuration, once each (repetition 0). `scale` sizes the
/// micro-runs, the held-out runs use [`heldout::SCALE_FACTOR`] of it.
pub fn probe_points(dir: &Path, scale: f64) -> Vec<smplab_experiment::point::Point> {
    let mut pts = micro::points(dir, scale);
    pts.extend(heldout::points(scale * heldout::SCALE_FACTOR));
    pts
}

/// Run the micro-runs and the held-out set as `reps` says, resuming from
/// what `store` has. [`smplab_experiment::sweep::run_repeated`] goes round-robin (every
/// configuration still repeating runs its repetition r before any runs
/// r + 1), so slow drifts of the host's load (other work on its cores) hit
/// the fitted and the checked runs alike; a configuration whose interval is
/// narrow stops, the others go on to the maximum.
pub fn run_probes(
    runner: &dyn smplab_experiment::runner::Runner,
    store: &mut smplab_experiment::store::Store,
    dir: &Path,
    scale: f64,
    reps: &Repetitions,
    progress: bool,
) -> Result<SweepSummary, CalibrateError> {
    let mut swept = smplab_experiment::sweep::run_repeated(
        &probe_points(dir, scale),
        store,
        runner,
        &smplab_experiment::sweep::SweepOptions {
            retry_failed: true,
            progress,
        },
        reps,
    )?;
    // Short labels for lists beside the demo's sweeps: the micro-runs'
    // workloads are program paths, and a held-out configuration reads like
    // a sweep's.
    let programs = format!("{}/", micro::program_dir(dir).display());
    for (label, _) in &mut swept.wide {
        *label = format!("calibration: {}", label.replace(&programs, ""));
    }
    Ok(swept)
}

/// Run the micro-runs and the held-out set on this host, fit, and check.
/// Runs go into `store` (resumable); the micro-run programs are written
/// beside it. `scale` sizes the micro-runs (the held-out runs use
/// [`heldout::SCALE_FACTOR`] of it); `reps` says how often each runs.
pub fn measure(
    runner: &dyn smplab_experiment::runner::Runner,
    store: &mut smplab_experiment::store::Store,
    scale: f64,
    reps: &Repetitions,
    progress: bool,
) -> Result<Report, CalibrateError> {
    let dir = store
        .path()
        .parent()
        .map_or_else(|| Path::new(".").to_path_buf(), Path::to_path_buf);
    micro::write_programs(&dir).map_err(|source| CalibrateError::Programs {
        path: micro::program_dir(&dir).display().to_string(),
        source,
    })?;
    let host = smplab_record::host::KvmFacts::detect();
    let hscale = scale * heldout::SCALE_FACTOR;
    let swept = run_probes(runner, store, &dir, scale, reps, progress)?;
    let results = Results::new(store);
    let obs = observations(&results, &dir, scale)?;
    if obs.is_empty() {
        return Err(CalibrateError::NothingToFit);
    }
    let mut base = Platform::builtin(smplab_record::config::DEFAULT_PLATFORM)
        .map_err(|_| CalibrateError::NoSimulator)?;
    if let Some(w) = host.halt_poll_ns {
        base.defaults.halt_poll_ns = w;
    }
    let started = std::time::Instant::now();
    let f = fit::fit(&base, fit::PARAMS, &obs, 20).map_err(CalibrateError::Fit)?;
    let mut cal = Calibration::default();
    record_fit(&mut cal, &f, obs.len());
    cal.info.push((
        "fit".into(),
        format!(
            "{} Levenberg–Marquardt iterations, {} simulations, {:.1} s",
            f.iterations,
            f.simulations,
            started.elapsed().as_secs_f64()
        ),
    ));
    let hlt = micro::MICROS
        .iter()
        .find(|m| m.name == "relay")
        .map(|m| micro::point(&dir, m, true, scale));
    if let Some(es) = hlt.as_ref().and_then(|p| results.get(p)) {
        let recs: Vec<&RunRecord> = es.iter().flat_map(|e| e.records.iter()).collect();
        cal.info.extend(kvm_halt_info(&recs));
    }
    // The exit probe's slope is over every run of both lengths: as many
    // rounds as every configuration above gets at least.
    measure_exit(&mut cal, reps.min);
    if let Some(w) = host.halt_poll_ns {
        cal.estimates.push(Estimate {
            field: "defaults.halt_poll_ns",
            value: w as f64,
            spread: None,
            how: format!(
                "the host's kvm.halt_poll_ns module parameter, read by smplab calibrate on {}",
                today()
            ),
        });
    }
    let platform = profile(&cal)?;
    let (rows, problems) = heldout::evaluate(&results, &platform, hscale, host_cores());
    Ok(Report {
        cal,
        fit: Some(f),
        heldout: rows,
        heldout_problems: problems,
        wide: swept.wide,
        max_reps: reps.max,
    })
}

/// The user-space exit round trip: smplab-vmm's port-read loop guest at two
/// lengths, the slope of wall time over reads.
fn measure_exit(cal: &mut Calibration, reps: u32) {
    let mut samples = Vec::new();
    let mut loop_err = None;
    for _ in 0..reps {
        for reads in LOOP_READS {
            match crate::calibrate::probes::port_loop_wall_ns(reads) {
                Ok(w) => samples.push((u64::from(reads), w)),
                Err(e) => loop_err = Some(e),
            }
        }
    }
    match slope(&samples) {
        Some(ns) => cal.estimates.push(Estimate {
            field: "vmm.user_exit_ns",
            value: ns.max(0.0),
            spread: None,
            how: format!(
                "measured by smplab calibrate on {}: smplab-vmm port-read loop guest (CPL0), {} vs {} reads, {} runs: slope of wall time over reads",
                today(),
                LOOP_READS[0],
                LOOP_READS[1],
                samples.len()
            ),
        }),
        None => cal.unmeasured.push((
            "vmm.user_exit_ns".into(),
            format!(
                "the port-read loop guest did not run: {}",
                loop_err.map_or_else(|| "no samples".into(), |e| e.to_string())
            ),
        )),
    }
}

/// Loop lengths of the exit round-trip probe.
const LOOP_READS: [u32; 2] = [2_000, 20_000];

/// Predict the held-out set with another profile (e.g. an earlier
/// calibration) from the runs already in `store`.
pub fn compare(
    store: &smplab_experiment::store::Store,
    platform: &Platform,
    scale: f64,
) -> (Vec<heldout::Row>, Vec<String>) {
    heldout::evaluate(
        &Results::new(store),
        platform,
        scale * heldout::SCALE_FACTOR,
        host_cores(),
    )
}

/// The micro-runs (the fit's own data) predicted with `platform` beside
/// their measurements: the in-sample counterpart of the held-out rows.
/// Micro-runs measured only in the VM have no slowdown and are left out.
pub fn fitted_rows(
    results: &Results,
    dir: &Path,
    scale: f64,
    platform: &Platform,
) -> Vec<heldout::Row> {
    let Ok(obs) = observations(results, dir, scale) else {
        return Vec::new();
    };
    obs.iter()
        .filter_map(|o| {
            let (vm, native) = (o.vm_ns?, o.native_ns?);
            let (pvm, pnative) = fit::simulate(platform, &o.case).ok()?;
            Some(heldout::Row {
                label: format!("micro {}", o.name),
                measured_wall_ns: vm,
                predicted_wall_ns: pvm,
                measured_slowdown: vm / native,
                predicted_slowdown: pvm / pnative,
                vm_ci: o.vm_ci,
                native_ci: o.native_ci,
            })
        })
        .collect()
}

/// The fit and held-out check as text for the terminal.
pub fn report_text(r: &Report) -> String {
    let mut s = table(&r.cal);
    if !r.heldout.is_empty() {
        s.push('\n');
        s.push_str(&heldout::table(
            "Held-out check (built-in profiles, not in the fit; predicted with the written profile):",
            &r.heldout,
        ));
    }
    for p in &r.heldout_problems {
        s.push_str(&format!("  held-out {p}\n"));
    }
    s.push_str(&wide_text(&r.wide, r.max_reps));
    s
}

/// The configurations that stayed wide, one line each, or nothing.
pub fn wide_text(wide: &[(String, MedianCi)], max_reps: u32) -> String {
    if wide.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n{} calibration configurations reached {max_reps} repetitions without a 95% interval within ±5% of the median (their fit weight is lower, their held-out errors less certain):\n",
        wide.len()
    );
    for (label, ci) in wide {
        s.push_str(&format!(
            "  {label}: ±{:.1}% over {} runs\n",
            ci.rel_half_width() * 100.0,
            ci.n
        ));
    }
    s
}

/// Exit round trip from `(reads, wall_ns)` runs of the port-read loop guest:
/// the least-squares slope of wall time over reads.
pub fn slope(samples: &[(u64, u64)]) -> Option<f64> {
    if samples.len() < 2 {
        return None;
    }
    let n = samples.len() as f64;
    let mx = samples.iter().map(|s| s.0 as f64).sum::<f64>() / n;
    let my = samples.iter().map(|s| s.1 as f64).sum::<f64>() / n;
    let sxx: f64 = samples.iter().map(|s| (s.0 as f64 - mx).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = samples
        .iter()
        .map(|s| (s.0 as f64 - mx) * (s.1 as f64 - my))
        .sum();
    Some(sxy / sxx)
}

/// Set measured fields in a platform profile's TOML text and rename it.
pub fn apply_to_profile(
    base: &str,
    name: &str,
    cal: &Calibration,
) -> Result<String, CalibrateError> {
    let mut t: toml::Table = base.parse()?;
    for e in &cal.estimates {
        let (section, key) = e.field.split_once('.').unwrap_or(("", e.field));
        let Some(toml::Value::Table(sec)) = t.get_mut(section) else {
            return Err(CalibrateError::NoSection {
                section: section.into(),
                field: e.field.into(),
            });
        };
        let old = sec.get(key).cloned();
        let v = match old {
            Some(toml::Value::Float(_)) => toml::Value::Float(e.value),
            // Casts: estimates are finite, non-negative ns; f64 `as` i64
            // saturates (NaN to 0).
            #[allow(clippy::cast_possible_truncation)]
            _ => toml::Value::Integer(e.value.round().max(0.0) as i64),
        };
        sec.insert(key.to_string(), v);
    }
    let measured: Vec<&str> = cal.estimates.iter().map(|e| e.field).collect();
    t.insert("name".into(), toml::Value::String(name.into()));
    t.insert(
        "description".into(),
        toml::Value::String(format!(
            "Written by `smplab calibrate` on {}. Fitted to micro-runs or measured on this host: {}. Every other field is the pvm-here profile's (not measured here; the APICv costs cannot be on a host without APICv).",
            today(),
            measured.join(", ")
        )),
    );
    Ok(format!(
        "{}{}",
        profile_comment(&measured),
        toml::to_string_pretty(&t)?
    ))
}

/// Fields of the base profile that calibration never measures but a reader
/// might think it did, with why.
const NOT_MEASURED: &[(&str, &str)] = &[
    (
        "vmm.ipi_send_apicv_ns",
        "this host has no APICv (PVM), so there is nothing to measure",
    ),
    (
        "vmm.ipi_receive_apicv_ns",
        "this host has no APICv (PVM), so there is nothing to measure",
    ),
];

/// The header comment of a written profile: what was measured, what was kept.
fn profile_comment(measured: &[&str]) -> String {
    let mut c = format!("# Written by `smplab calibrate` on {}: the built-in pvm-here profile with the\n# fields fitted to this host's micro-runs (least squares, docs/sim.md \"Calibration\")\n# or measured directly replaced.\n", today());
    c.push_str(&format!(
        "# Fitted or measured here: {}.\n",
        measured.join(", ")
    ));
    c.push_str("# Every other field keeps pvm-here's value; its citations and measurements are in\n# crates/sim/platforms/pvm-here.toml. Not measured by calibrate, kept as cited there:\n");
    for (field, why) in NOT_MEASURED {
        if !measured.contains(field) {
            c.push_str(&format!("#   {field}: {why}.\n"));
        }
    }
    c
}

/// The calibration as a table for the terminal.
pub fn table(cal: &Calibration) -> String {
    let mut s = String::from("Calibration of this host (fitted to medians over repetitions):\n");
    for e in &cal.estimates {
        let spread = e
            .spread
            .map(|(a, b)| format!(" [{:.1}–{:.1}]", a, b))
            .unwrap_or_default();
        let unit = if e.field.ends_with("_per_iter") {
            "ns/iter"
        } else {
            "ns"
        };
        s.push_str(&format!(
            "  {:<26} {:>12.1} {unit}{spread}\n      {}\n",
            e.field, e.value, e.how
        ));
    }
    for (f, why) in &cal.unmeasured {
        s.push_str(&format!("  {f:<26} not measured: {why}\n"));
    }
    for (what, v) in &cal.info {
        s.push_str(&format!("  {what:<26} {v}\n"));
    }
    s
}

/// KVM's own halt statistics over the HLT-idle probe runs (summed over
/// vCPUs and repetitions): how often host halt polling caught the wakeup, and
/// how long halted vCPUs waited. Informational: the profile has no field for
/// them.
pub fn kvm_halt_info(records: &[&RunRecord]) -> Vec<(String, String)> {
    let mut sum: BTreeMap<&str, u64> = BTreeMap::new();
    for r in records {
        let Some(v) = &r.vmm else { continue };
        for stats in &v.kvm_vcpu_stats {
            for k in [
                "halt_attempted_poll",
                "halt_successful_poll",
                "halt_poll_success_ns",
                "halt_wait_ns",
                "halt_wakeup",
            ] {
                *sum.entry(k).or_default() += stats.get(k).copied().unwrap_or(0);
            }
        }
    }
    let mut out = Vec::new();
    let get = |k: &str| sum.get(k).copied().unwrap_or(0);
    if get("halt_attempted_poll") > 0 {
        out.push(("kvm halt polling".to_string(), {
            let ok = get("halt_successful_poll");
            let mut m = format!(
                "{ok} of {} host halt polls caught the wakeup ({:.0}%)",
                get("halt_attempted_poll"),
                ok as f64 / get("halt_attempted_poll") as f64 * 100.0
            );
            if ok > 0 {
                m.push_str(&format!(
                    ", after {:.1} µs on average",
                    get("halt_poll_success_ns") as f64 / ok as f64 / 1e3
                ));
            }
            m
        }));
    }
    if get("halt_wakeup") > 0 {
        out.push((
            "kvm halt wait".to_string(),
            format!(
                "{:.1} µs blocked per wakeup on average ({} wakeups)",
                get("halt_wait_ns") as f64 / get("halt_wakeup") as f64 / 1e3,
                get("halt_wakeup")
            ),
        ));
    }
    out
}

/// A small map for reports: field → value.
pub fn as_map(cal: &Calibration) -> BTreeMap<String, f64> {
    cal.estimates
        .iter()
        .map(|e| (e.field.to_string(), e.value))
        .collect()
}

/// Write the calibrated profile (pvm-here with measured fields replaced).
pub fn write_profile(cal: &Calibration, out: &std::path::Path) -> Result<(), CalibrateError> {
    let base =
        smplab_experiment::execute::sim::base_profile_text(smplab_record::config::DEFAULT_PLATFORM)
            .ok_or(CalibrateError::NoSimulator)?;
    let text = apply_to_profile(&base, "calibrated", cal)?;
    smplab_experiment::execute::sim::check_profile_text(&out.display().to_string(), &text)
        .map_err(CalibrateError::InvalidProfile)?;
    let write_err = |path: &std::path::Path| {
        let path = path.display().to_string();
        move |source| CalibrateError::Write { path, source }
    };
    if let Some(d) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d).map_err(write_err(d))?;
    }
    std::fs::write(out, text).map_err(write_err(out))
}

#[cfg(test)]
mod tests;
