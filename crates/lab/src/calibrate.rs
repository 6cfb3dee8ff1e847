//! `smplab calibrate`: measure what VMM mechanisms cost on this host with the
//! VM executor, and write a simulator platform profile with those costs.
//!
//! Every estimate is a difference of wall times between two runs that differ
//! in one mechanism, divided by how often the mechanism ran (counted by the
//! guest or KVM), so fixed costs (boot, result stream) cancel:
//!
//! | profile field | probe | estimate |
//! |---|---|---|
//! | `vmm.user_exit_ns` | smplab-vmm's port-read loop guest, 2 000 vs 20 000 reads | Δwall / Δreads |
//! | `vmm.exit_ns` | blackscholes, 1 vCPU, guest timer 0 vs 4 000 Hz | Δwall / ticks (the guest's tick counter) |
//! | `vmm.ipi_receive_ns` | shootdown, 2 vCPUs, polling idle, vs native | (T_vm − T_native) / IPIs received |
//! | `vmm.hlt_wake_ns` | ocean_ncp, 2 vCPUs, HLT vs polling idle | (T_hlt − T_poll) / halts |
//! | `vmm.halt_poll_wake_ns` | ocean_ncp, guest halt-polling vs polling idle | (T_haltpoll − T_poll) / halts |
//! | `cpu.compute_ns_per_iter` | blackscholes natively, 1 thread | wall / compute iterations |
//! | `defaults.halt_poll_ns` | the host's `kvm.halt_poll_ns` | read from sysfs |
//!
//! Fields not in this table keep the values of the `pvm-here` profile; the
//! written file lists which is which in its description and its header
//! comment. In particular the APICv costs (`vmm.ipi_send_apicv_ns`,
//! `vmm.ipi_receive_apicv_ns`) cannot be measured on a host without APICv:
//! they keep pvm-here's cited values, and the comment says so.

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
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

use crate::metrics::{Results, Summary};
use crate::point::{Point, Variant};
use smplab_record::config::{
    GuestSettings, IdlePolicy, NativeSettings, RunConfig, SyncMode, VmSettings,
};
use smplab_record::{Executor, RunRecord};
use std::collections::BTreeMap;

/// One measured cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// Profile field, `section.key`.
    pub field: &'static str,
    /// Nanoseconds (per iteration for `cpu.compute_ns_per_iter`).
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
    /// Related observations that are not profile fields (KVM halt stats).
    pub info: Vec<(String, String)>,
}

fn point(
    executor: Executor,
    workload: &str,
    n: u32,
    scale: f64,
    idle: Option<IdlePolicy>,
) -> Point {
    let config = match executor {
        Executor::Native => RunConfig::Native(NativeSettings::default()),
        // The probes do no device I/O of their own; fine-grained sync (the
        // default) keeps the result stream off any lock.
        _ => RunConfig::Vm(VmSettings::new(
            GuestSettings {
                idle: idle.unwrap_or_default(),
                ..GuestSettings::new(n)
            },
            SyncMode::Fine,
        )),
    };
    let mut p = Point::new(workload, n, scale, config);
    p.variant = Variant::AsIs;
    p.timeout_s = 120;
    p.study = Some("calibrate".into());
    p
}

/// The probes that go through the lab's runner (stored, resumable).
pub struct Probes {
    pub compute_native: Point,
    pub shootdown_native: Point,
    pub shootdown_vm: Point,
    pub wake_hlt: Point,
    pub wake_poll: Point,
    pub wake_haltpoll: Point,
}

impl Probes {
    pub fn new(scale: f64, halt_poll_window_ns: u64) -> Probes {
        // The wakeup probes divide a wall-time difference by a few dozen
        // halts: run them longer than the others so noise averages out.
        let long = long_scale(scale);
        Probes {
            compute_native: point(Executor::Native, "blackscholes", 1, scale, None),
            shootdown_native: point(Executor::Native, "shootdown", 2, scale, None),
            // Polling idle: IPI targets are busy, the case PLATFORM.md measures at ~22 µs.
            shootdown_vm: point(Executor::Vm, "shootdown", 2, scale, Some(IdlePolicy::Poll)),
            wake_hlt: point(Executor::Vm, "ocean_ncp", 2, long, Some(IdlePolicy::Hlt)),
            wake_poll: point(Executor::Vm, "ocean_ncp", 2, long, Some(IdlePolicy::Poll)),
            wake_haltpoll: point(
                Executor::Vm,
                "ocean_ncp",
                2,
                long,
                Some(IdlePolicy::HaltPoll {
                    ns: halt_poll_window_ns,
                }),
            ),
        }
    }

    pub fn points(&self, reps: u32) -> Vec<Point> {
        let all = [
            &self.compute_native,
            &self.shootdown_native,
            &self.shootdown_vm,
            &self.wake_hlt,
            &self.wake_poll,
            &self.wake_haltpoll,
        ];
        (0..reps)
            .flat_map(|rep| {
                all.iter().map(move |p| {
                    let mut q = (*p).clone();
                    q.rep = rep;
                    q
                })
            })
            .collect()
    }
}

fn records<'a>(results: &'a Results, p: &Point) -> Vec<&'a RunRecord> {
    results
        .get(p)
        .map(|es| es.iter().flat_map(|e| e.records.iter()).collect())
        .unwrap_or_default()
}

fn median(v: &[f64]) -> Option<Summary> {
    Summary::of(v)
}

/// Per-event cost from a run with the mechanism and one without:
/// per repetition of `with`, `(T_with − median T_without) / events`.
fn per_event(
    with: &[&RunRecord],
    without: &[&RunRecord],
    events: impl Fn(&RunRecord) -> Option<u64>,
) -> Option<Summary> {
    let base = median(
        &without
            .iter()
            .map(|r| r.timing.wall_ns as f64)
            .collect::<Vec<_>>(),
    )?
    .median;
    let v: Vec<f64> = with
        .iter()
        .filter_map(|r| {
            let n = events(r)?;
            (n > 0).then(|| (r.timing.wall_ns as f64 - base) / n as f64)
        })
        .collect();
    median(&v)
}

fn est(field: &'static str, s: Summary, how: String) -> Estimate {
    Estimate {
        field,
        value: s.median.max(0.0),
        spread: Some((s.min, s.max)),
        how,
    }
}

/// Record an estimate, or, when the mechanism made the run *faster* (a
/// difference of noisy wall times can go negative), say so instead of writing
/// a meaningless cost.
fn push_estimate(cal: &mut Calibration, field: &'static str, s: Summary, how: String) {
    if s.median > 0.0 {
        cal.estimates.push(est(field, s, how));
    } else {
        cal.unmeasured.push((
            field.into(),
            format!(
                "the run with the mechanism was not slower (median difference {:.1} µs per event, range {:.1}–{:.1}); wall-time noise exceeds the cost here. Rerun on a quieter host or with a larger --scale. ({how})",
                s.median / 1e3,
                s.min / 1e3,
                s.max / 1e3
            ),
        ));
    }
}

/// Derive every estimate the stored probe runs allow.
pub fn derive(results: &Results, probes: &Probes, cal: &mut Calibration) {
    // Compute kernel speed.
    let c: Vec<f64> = records(results, &probes.compute_native)
        .iter()
        .filter_map(|r| {
            let iters = *r.counters.ops.get("compute_iters")?;
            (iters > 0).then(|| r.timing.wall_ns as f64 / iters as f64)
        })
        .collect();
    match median(&c) {
        Some(s) => cal.estimates.push(est(
            "cpu.compute_ns_per_iter",
            s,
            "blackscholes natively on 1 thread: wall / compute iterations (its barriers and touches are included, so this errs high)".into(),
        )),
        None => cal.unmeasured.push((
            "cpu.compute_ns_per_iter".into(),
            "the native blackscholes probe did not run".into(),
        )),
    }

    // IPI to a busy vCPU.
    let ipis = |r: &RunRecord| r.guest.as_ref().map(|g| g.ipis_received);
    match per_event(
        &records(results, &probes.shootdown_vm),
        &records(results, &probes.shootdown_native),
        ipis,
    ) {
        Some(s) => push_estimate(
            cal,
            "vmm.ipi_receive_ns",
            s,
            "shootdown on 2 vCPUs with polling idle vs natively: extra wall time per IPI received (send, delivery, the guest's CPL0 handler and ack on the critical path)".into(),
        ),
        None => cal.unmeasured.push((
            "vmm.ipi_receive_ns".into(),
            "the shootdown probes did not both run, or the guest reported no IPIs".into(),
        )),
    }

    // HLT wakeup without and with guest halt polling.
    let halts = |r: &RunRecord| r.guest.as_ref().map(|g| g.halts);
    let poll = records(results, &probes.wake_poll);
    match per_event(&records(results, &probes.wake_hlt), &poll, halts) {
        Some(s) => push_estimate(
            cal,
            "vmm.hlt_wake_ns",
            s,
            "ocean_ncp on 2 vCPUs, HLT vs polling idle: extra wall time per guest halt (HLT exit, host block, IPI kick, wakeup)".into(),
        ),
        None => cal.unmeasured.push((
            "vmm.hlt_wake_ns".into(),
            "the HLT and polling-idle probes did not both run, or no vCPU halted".into(),
        )),
    }
    match per_event(&records(results, &probes.wake_haltpoll), &poll, halts) {
        Some(s) => push_estimate(
            cal,
            "vmm.halt_poll_wake_ns",
            s,
            format!(
                "ocean_ncp on 2 vCPUs, guest idle {} vs polling idle: extra wall time per halt that still happened",
                probes.wake_haltpoll.config.idle().unwrap_or_default()
            ),
        ),
        None => cal.unmeasured.push((
            "vmm.halt_poll_wake_ns".into(),
            "with guest halt polling no vCPU halted (every wait ended inside the poll window), so there is nothing to divide by".into(),
        )),
    }
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
// Casts: statistics are finite and non-negative; f64 `as` integer saturates (NaN to 0), which is the clamp wanted; counts are small.
#[allow(clippy::cast_possible_truncation)]
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
            _ => toml::Value::Integer(e.value.round().max(0.0) as i64),
        };
        sec.insert(key.to_string(), v);
    }
    let measured: Vec<&str> = cal.estimates.iter().map(|e| e.field).collect();
    t.insert("name".into(), toml::Value::String(name.into()));
    t.insert(
        "description".into(),
        toml::Value::String(format!(
            "Written by `smplab calibrate`. Measured on this host: {}. Every other field is the pvm-here profile's (not measured here; the APICv costs cannot be on a host without APICv).",
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
    let mut c = String::from("# Written by `smplab calibrate`: the built-in pvm-here profile with the fields\n# measured on this host replaced.\n");
    c.push_str(&format!("# Measured here: {}.\n", measured.join(", ")));
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
    let mut s = String::from("Calibration of this host (medians over repetitions):\n");
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

/// One run of the timer probe: wall time and the LAPIC timer ticks the guest
/// counted (`None` when its record has no per-vCPU counters).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimerRun {
    pub wall_ns: u64,
    pub ticks: Option<u64>,
}

impl TimerRun {
    /// From a guest run's record: ticks summed over vCPUs.
    pub fn of(r: &RunRecord) -> TimerRun {
        TimerRun {
            wall_ns: r.timing.wall_ns,
            ticks: r
                .guest
                .as_ref()
                .filter(|g| !g.per_vcpu.is_empty())
                .map(|g| g.per_vcpu.iter().map(|v| v.timer_ticks).sum()),
        }
    }
}

/// Per-tick cost of the guest timer: `(T_ticking − median T_tickless) /
/// ticks`, ticks as the guest counted them (its LAPIC timer interrupts over
/// the whole run, so this errs low by the ticks outside the workload window).
/// Runs without a tick count are left out.
pub fn timer_cost(ticking: &[TimerRun], tickless: &[u64]) -> Option<Summary> {
    let base = Summary::of(&tickless.iter().map(|&w| w as f64).collect::<Vec<_>>())?.median;
    let v: Vec<f64> = ticking
        .iter()
        .filter_map(|r| {
            let ticks = r.ticks.filter(|&t| t > 0)?;
            Some((r.wall_ns as f64 - base) / ticks as f64)
        })
        .collect();
    Summary::of(&v)
}

/// Blackscholes on one vCPU with the guest timer at `timer_hz` (0: tickless):
/// the guest's record, whose per-vCPU counters include the ticks taken.
pub fn timer_probe(timer_hz: u32, scale: f64) -> Result<RunRecord, ProbeError> {
    let src = smplab_workload::Source::resolve("blackscholes")?;
    let program = src.instantiate(Some(1), scale)?;
    let info = src.workload_info(&program);
    let opts = smplab_guest::VmRunOptions {
        vcpus: 1,
        timer_hz: Some(timer_hz),
        timeout: std::time::Duration::from_secs(120),
        ..Default::default()
    };
    Ok(smplab_guest::run_vm(&program, info, &opts)?)
}

/// Why a direct probe run (outside the lab runner) failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(transparent)]
    Workload(#[from] smplab_workload::WorkloadError),
    #[error(transparent)]
    Guest(#[from] smplab_guest::GuestError),
}

/// A small map for reports: field → value.
pub fn as_map(cal: &Calibration) -> BTreeMap<String, f64> {
    cal.estimates
        .iter()
        .map(|e| (e.field.to_string(), e.value))
        .collect()
}

/// Loop lengths of the exit round-trip probe.
const LOOP_READS: [u32; 2] = [2_000, 20_000];
/// Guest timer rate of the timer probe (the guest's own maximum is 5 kHz).
const TIMER_HZ: u32 = 4_000;

/// Scale of the probes whose per-event cost is small against run-to-run noise.
pub fn long_scale(scale: f64) -> f64 {
    (scale * 5.0).clamp(scale, 2.0)
}

/// Run every probe on this host and derive the calibration. Probe runs of the
/// lab runner go into `store` (resumable); the two direct probes run each time.
pub fn measure(
    runner: &dyn crate::runner::Runner,
    store: &mut crate::store::Store,
    scale: f64,
    reps: u32,
    progress: bool,
) -> Result<Calibration, crate::store::StoreError> {
    let host = smplab_record::host::KvmFacts::detect();
    let window = host.halt_poll_ns.filter(|&w| w > 0).unwrap_or(200_000);
    let probes = Probes::new(scale, window);
    crate::sweep::run_points(
        &probes.points(reps),
        store,
        runner,
        &crate::sweep::SweepOptions {
            retry_failed: true,
            progress,
        },
    )?;
    let mut cal = Calibration::default();
    let results = Results::new(store);
    derive(&results, &probes, &mut cal);
    cal.info = kvm_halt_info(&records(&results, &probes.wake_hlt));

    // Exit round trip: the port-read loop at two lengths.
    let mut samples = Vec::new();
    let mut loop_err = None;
    for _ in 0..reps {
        for reads in LOOP_READS {
            match crate::exec::port_loop_wall_ns(reads) {
                Ok(w) => samples.push((reads as u64, w)),
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
                "smplab-vmm port-read loop guest (CPL0), {} vs {} reads, {} runs: slope of wall time over reads",
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

    // Timer tick: tickless vs ticking guest.
    let (mut ticking, mut tickless, mut timer_err) = (Vec::new(), Vec::new(), None);
    for _ in 0..reps {
        match timer_probe(TIMER_HZ, long_scale(scale)) {
            Ok(r) => ticking.push(TimerRun::of(&r)),
            Err(e) => timer_err = Some(e.to_string()),
        }
        match timer_probe(0, long_scale(scale)) {
            Ok(r) => tickless.push(r.timing.wall_ns),
            Err(e) => timer_err = Some(e.to_string()),
        }
    }
    if timer_err.is_none() && !ticking.is_empty() && ticking.iter().all(|r| r.ticks.is_none()) {
        timer_err = Some("the guest records carry no per-vCPU tick counts".into());
    }
    match timer_cost(&ticking, &tickless) {
        Some(s) => push_estimate(
            &mut cal,
            "vmm.exit_ns",
            s,
            format!(
                "blackscholes on 1 vCPU, guest timer {TIMER_HZ} Hz vs tickless: extra wall time per tick the guest counted (the timer exit handled in KVM, the injection, and the guest's CPL0 tick handler)"
            ),
        ),
        None => cal.unmeasured.push((
            "vmm.exit_ns".into(),
            format!(
                "the timer probe did not run: {}",
                timer_err.unwrap_or_else(|| "too short to tick".into())
            ),
        )),
    }
    if let Some(w) = host.halt_poll_ns {
        cal.estimates.push(Estimate {
            field: "defaults.halt_poll_ns",
            value: w as f64,
            spread: None,
            how: "the host's kvm.halt_poll_ns module parameter".into(),
        });
    }
    Ok(cal)
}

/// Write the calibrated profile (pvm-here with measured fields replaced).
pub fn write_profile(cal: &Calibration, out: &std::path::Path) -> Result<(), CalibrateError> {
    let base = crate::simglue::base_profile_text("pvm-here").ok_or(CalibrateError::NoSimulator)?;
    let text = apply_to_profile(&base, "calibrated", cal)?;
    crate::simglue::check_profile_text(&out.display().to_string(), &text)
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
mod tests {
    use super::*;
    use crate::store::{Entry, Status, Store};
    use crate::testutil::rec;
    use smplab_record::guest::GuestSection;

    const MS: u64 = 1_000_000;

    fn with_guest(mut r: RunRecord, ipis: u64, halts: u64) -> RunRecord {
        r.guest = Some(GuestSection {
            ipis_received: ipis,
            halts,
            ..Default::default()
        });
        r
    }

    #[test]
    fn derivations_on_hand_made_runs() {
        let p = Probes::new(0.1, 200_000);
        let mut compute = rec(Executor::Native, "blackscholes", 1, 10 * MS);
        compute
            .counters
            .ops
            .insert("compute_iters".into(), 10_000_000);
        let es = vec![
            Entry::new(p.compute_native.clone(), Status::Ok, 0.0, vec![compute]),
            Entry::new(
                p.shootdown_native.clone(),
                Status::Ok,
                0.0,
                vec![rec(Executor::Native, "shootdown", 2, 10 * MS)],
            ),
            // 1000 IPIs, 22 ms extra -> 22 µs per IPI.
            Entry::new(
                p.shootdown_vm.clone(),
                Status::Ok,
                0.0,
                vec![with_guest(
                    rec(Executor::Vm, "shootdown", 2, 32 * MS),
                    1000,
                    0,
                )],
            ),
            Entry::new(
                p.wake_poll.clone(),
                Status::Ok,
                0.0,
                vec![with_guest(rec(Executor::Vm, "ocean_ncp", 2, 20 * MS), 0, 0)],
            ),
            // 100 halts, 8 ms extra -> 80 µs per halt.
            Entry::new(
                p.wake_hlt.clone(),
                Status::Ok,
                0.0,
                vec![with_guest(
                    rec(Executor::Vm, "ocean_ncp", 2, 28 * MS),
                    0,
                    100,
                )],
            ),
            // Halt polling: every wait ended in the window, no halts.
            Entry::new(
                p.wake_haltpoll.clone(),
                Status::Ok,
                0.0,
                vec![with_guest(rec(Executor::Vm, "ocean_ncp", 2, 21 * MS), 0, 0)],
            ),
        ];
        let store = Store::from_entries(es);
        let mut cal = Calibration::default();
        derive(&Results::new(&store), &p, &mut cal);
        let m = as_map(&cal);
        assert!((m["cpu.compute_ns_per_iter"] - 1.0).abs() < 1e-9);
        assert!((m["vmm.ipi_receive_ns"] - 22_000.0).abs() < 1e-6);
        assert!((m["vmm.hlt_wake_ns"] - 80_000.0).abs() < 1e-6);
        assert!(!m.contains_key("vmm.halt_poll_wake_ns"));
        assert_eq!(cal.unmeasured.len(), 1);
        assert!(table(&cal).contains("not measured"));
    }

    #[test]
    fn kvm_halt_statistics_are_summarized() {
        let mut r = rec(Executor::Vm, "ocean_ncp", 2, MS);
        let mut k = BTreeMap::new();
        k.insert("halt_attempted_poll".to_string(), 10u64);
        k.insert("halt_successful_poll".to_string(), 4u64);
        k.insert("halt_poll_success_ns".to_string(), 20_000u64);
        k.insert("halt_wait_ns".to_string(), 600_000u64);
        k.insert("halt_wakeup".to_string(), 6u64);
        r.vmm = Some(smplab_record::vmm::VmmSection {
            kvm_vcpu_stats: vec![k],
            ..Default::default()
        });
        let info = kvm_halt_info(&[&r]);
        assert!(
            info[0].1.contains("4 of 10")
                && info[0].1.contains("40%")
                && info[0].1.contains("5.0 µs"),
            "{info:?}"
        );
        assert!(info[1].1.contains("100.0 µs"), "{info:?}");
        assert!(kvm_halt_info(&[]).is_empty());
    }

    #[test]
    fn slope_and_timer_cost() {
        // 9.5 µs per read plus 30 ms of set-up.
        let s = slope(&[(2000, 30 * MS + 19 * MS), (20000, 30 * MS + 190 * MS)]).unwrap();
        assert!((s - 9500.0).abs() < 1e-6);
        assert!(slope(&[(5, 5)]).is_none());
        // 1000 ticks counted by the guest, 20 ms extra -> 20 µs per tick.
        let run = TimerRun {
            wall_ns: 1_020 * MS,
            ticks: Some(1000),
        };
        let t = timer_cost(&[run], &[1_000 * MS]).unwrap();
        assert!((t.median - 20_000.0).abs() < 1e-6);
        // No tick counter: no estimate (no hz × wall guess).
        let blind = TimerRun {
            wall_ns: 1_020 * MS,
            ticks: None,
        };
        assert!(timer_cost(&[blind], &[1_000 * MS]).is_none());
        // Ticks come from the record's per-vCPU counters.
        let mut r = rec(Executor::Vm, "blackscholes", 1, 1_020 * MS);
        r.guest = Some(GuestSection {
            per_vcpu: vec![
                smplab_record::guest::GuestVcpuCounters {
                    timer_ticks: 600,
                    ..Default::default()
                },
                smplab_record::guest::GuestVcpuCounters {
                    timer_ticks: 400,
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        assert_eq!(TimerRun::of(&r), run);
    }

    #[test]
    fn profile_fields_are_replaced_and_typed() {
        let base = "name = \"pvm-here\"\ndescription = \"x\"\n[vmm]\nexit_ns = 100\nuser_exit_ns = 200\n[cpu]\ncompute_ns_per_iter = 0.3\n";
        let cal = Calibration {
            estimates: vec![
                Estimate {
                    field: "vmm.user_exit_ns",
                    value: 9512.4,
                    spread: None,
                    how: String::new(),
                },
                Estimate {
                    field: "cpu.compute_ns_per_iter",
                    value: 0.29,
                    spread: None,
                    how: String::new(),
                },
            ],
            unmeasured: vec![],
            info: vec![],
        };
        let out = apply_to_profile(base, "calibrated", &cal).unwrap();
        let t: toml::Table = out.parse().unwrap();
        assert_eq!(t["name"].as_str(), Some("calibrated"));
        assert_eq!(t["vmm"]["user_exit_ns"].as_integer(), Some(9512));
        assert_eq!(t["vmm"]["exit_ns"].as_integer(), Some(100));
        assert_eq!(t["cpu"]["compute_ns_per_iter"].as_float(), Some(0.29));
        assert!(t["description"]
            .as_str()
            .unwrap()
            .contains("vmm.user_exit_ns"));
        // The APICv costs are not measured: kept, and the comment says so.
        assert!(out.starts_with("# Written by `smplab calibrate`"), "{out}");
        assert!(
            out.contains("#   vmm.ipi_receive_apicv_ns: this host has no APICv"),
            "{out}"
        );
        let bad = Calibration {
            estimates: vec![Estimate {
                field: "nosuch.x",
                value: 1.0,
                spread: None,
                how: String::new(),
            }],
            unmeasured: vec![],
            info: vec![],
        };
        assert!(matches!(
            apply_to_profile(base, "c", &bad),
            Err(CalibrateError::NoSection { .. })
        ));
    }
}
