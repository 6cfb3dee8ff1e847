//! The least-squares fit: platform parameters that make the simulator
//! reproduce the micro-runs' measured wall times and, where a VM micro-run
//! idles, its measured idle fraction.
//!
//! The model is the simulator itself, so what is fitted is what predicts:
//! for parameters θ, each micro-run's simulated VM wall time and its
//! simulated bare-metal wall time are compared with the measured ones as log
//! ratios `ln(predicted / measured)` (a relative error that treats too fast
//! and too slow alike). Levenberg–Marquardt minimizes their sum of squares
//! over `ln θ`, with a finite-difference Jacobian (one simulation per
//! parameter and micro-run per iteration; the micro-runs simulate in
//! milliseconds). A weak prior row per parameter, `PRIOR_WEIGHT · ln(θ/θ₀)`,
//! keeps a parameter the micro-runs cannot see at its profile value instead
//! of letting it wander; its column norm in the Jacobian says how well the
//! data determine it (reported as `sensitivity`).
//!
//! Why idle fractions too: every micro-run that wakes a halted or polling
//! waiter has the waker's wake (`vm_kernel.wake_ns`) and the waiter's
//! switch back from idle (`vm_kernel.switch_in_ns`) on its critical path
//! in turn, so wall times see only their sum. They differ in where the time
//! goes: during the wake the waiter's vCPU is idle, during the switch-in it
//! works. The guest measures its vCPUs' halted (or polling) time, so a VM
//! micro-run's idle fraction separates the two (docs/sim.md, "Switch-in
//! from idle").
//!
//! Each log ratio is scaled by its measurement's [`certainty`]: a median
//! whose 95% interval is wide counts less (docs/sim.md, "Calibration").

use smplab_experiment::execute::sim::scenario_on;
use smplab_record::config::SimSettings;
use smplab_sim::platform::KernelCosts;
use smplab_sim::{Platform, SimError};
use smplab_stats::MedianCi;
use smplab_workload::Program;

/// One fitted platform field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    /// `section.key` in the profile.
    pub field: &'static str,
    /// Bounds of the search, in the field's unit.
    pub lo: f64,
    pub hi: f64,
}

const fn param(field: &'static str, lo: f64, hi: f64) -> Param {
    Param { field, lo, hi }
}

/// The fitted fields: per kind, a bare-metal cost and a VM cost (the
/// vm_kernel section for guest kernel paths, vmm for exits and wakeups).
pub const PARAMS: &[Param] = &[
    param("cpu.compute_ns_per_iter", 0.05, 50.0),
    param("cpu.touch_ns_per_access", 0.01, 100.0),
    param("cache.shared_write_ns_per_line", 0.1, 1000.0),
    param("cpu.context_switch_ns", 50.0, 1e6),
    param("cpu.wake_ns", 50.0, 1e6),
    param("cpu.shootdown_handler_ns", 50.0, 1e6),
    param("native.ipi_receive_ns", 50.0, 1e6),
    param("native.idle_wake_ns", 50.0, 1e6),
    param("vm_kernel.context_switch_ns", 100.0, 5e7),
    param("vm_kernel.wake_ns", 100.0, 5e7),
    param("vm_kernel.switch_in_ns", 100.0, 5e7),
    param("vm_kernel.shootdown_handler_ns", 100.0, 5e7),
    param("vmm.ipi_send_ns", 100.0, 5e7),
    param("vmm.ipi_receive_ns", 100.0, 5e7),
    param("vmm.hlt_wake_ns", 100.0, 5e7),
];

/// Weight of the prior rows against the log-ratio residuals: a parameter
/// moves far from its profile value only when the data ask for it.
pub const PRIOR_WEIGHT: f64 = 0.05;

fn kernel_mut(p: &mut Platform) -> &mut KernelCosts {
    let k = p.kernel(true);
    p.vm_kernel.get_or_insert(k)
}

/// The value of a fitted field.
pub fn get(p: &Platform, field: &str) -> Option<f64> {
    let k = p.kernel(true);
    let v = match field {
        "cpu.compute_ns_per_iter" => p.cpu.compute_ns_per_iter,
        "cpu.touch_ns_per_access" => p.cpu.touch_ns_per_access,
        "cache.shared_write_ns_per_line" => p.cache.shared_write_ns_per_line,
        "cpu.context_switch_ns" => p.cpu.context_switch_ns as f64,
        "cpu.wake_ns" => p.cpu.wake_ns as f64,
        "cpu.shootdown_handler_ns" => p.cpu.shootdown_handler_ns as f64,
        "native.ipi_receive_ns" => p.native.ipi_receive_ns as f64,
        "native.idle_wake_ns" => p.native.idle_wake_ns as f64,
        "vm_kernel.context_switch_ns" => k.context_switch_ns as f64,
        "vm_kernel.wake_ns" => k.wake_ns as f64,
        "vm_kernel.switch_in_ns" => k.switch_in_ns as f64,
        "vm_kernel.shootdown_handler_ns" => k.shootdown_handler_ns as f64,
        "vmm.ipi_send_ns" => p.vmm.ipi_send_ns as f64,
        "vmm.ipi_receive_ns" => p.vmm.ipi_receive_ns as f64,
        "vmm.hlt_wake_ns" => p.vmm.hlt_wake_ns as f64,
        _ => return None,
    };
    Some(v)
}

/// Set a fitted field (nanosecond fields round to whole ns). False for a
/// field this module does not know.
pub fn set(p: &mut Platform, field: &str, v: f64) -> bool {
    // Casts: values are clamped to the parameter bounds (finite, positive)
    // first; `as` saturates.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ns = v.round().max(1.0) as u64;
    match field {
        "cpu.compute_ns_per_iter" => p.cpu.compute_ns_per_iter = v,
        "cpu.touch_ns_per_access" => p.cpu.touch_ns_per_access = v,
        "cache.shared_write_ns_per_line" => p.cache.shared_write_ns_per_line = v,
        "cpu.context_switch_ns" => p.cpu.context_switch_ns = ns,
        "cpu.wake_ns" => p.cpu.wake_ns = ns,
        "cpu.shootdown_handler_ns" => p.cpu.shootdown_handler_ns = ns,
        "native.ipi_receive_ns" => p.native.ipi_receive_ns = ns,
        "native.idle_wake_ns" => p.native.idle_wake_ns = ns,
        "vm_kernel.context_switch_ns" => kernel_mut(p).context_switch_ns = ns,
        "vm_kernel.wake_ns" => kernel_mut(p).wake_ns = ns,
        "vm_kernel.switch_in_ns" => kernel_mut(p).switch_in_ns = ns,
        "vm_kernel.shootdown_handler_ns" => kernel_mut(p).shootdown_handler_ns = ns,
        "vmm.ipi_send_ns" => p.vmm.ipi_send_ns = ns,
        "vmm.ipi_receive_ns" => p.vmm.ipi_receive_ns = ns,
        "vmm.hlt_wake_ns" => p.vmm.hlt_wake_ns = ns,
        _ => return false,
    }
    true
}

/// One configuration to simulate: a program on `vcpus` vCPUs (and as many
/// pCPUs, at most `pcpus`) with a guest idle policy.
#[derive(Debug, Clone)]
pub struct SimCase {
    pub program: Program,
    pub info: smplab_record::WorkloadInfo,
    pub vcpus: u32,
    pub pcpus: u32,
    pub idle: smplab_record::config::IdlePolicy,
}

/// Simulated `(VM wall, bare-metal wall)` of a case, in ns.
pub fn simulate(p: &Platform, c: &SimCase) -> Result<(f64, f64), SimError> {
    simulate_with_idle(p, c).map(|s| (s.vm_ns, s.native_ns))
}

/// What the fit compares of one simulated micro-run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Simulated {
    pub vm_ns: f64,
    pub native_ns: f64,
    /// The VM's idle fraction (`crate::metrics::idle_fraction`).
    pub vm_idle: f64,
}

/// Simulated VM and bare-metal wall times and the VM's idle fraction.
pub fn simulate_with_idle(p: &Platform, c: &SimCase) -> Result<Simulated, SimError> {
    // The same mapping from settings to a scenario as every simulated run
    // (`smplab_experiment::execute::sim`), on the candidate platform.
    let mut settings = SimSettings::new(c.vcpus, p.name.clone());
    settings.pcpus = Some(c.pcpus.min(c.vcpus).max(1));
    settings.idle = c.idle;
    let sc = scenario_on(&c.program, &c.info, &settings, p.clone())?;
    let r = smplab_sim::simulate(&sc)?;
    let rec = r
        .first()
        .ok_or_else(|| SimError::Scenario("the simulation returned no record".into()))?;
    let native = rec
        .sim
        .as_ref()
        .and_then(|s| s.native_wall_ns)
        .ok_or_else(|| SimError::Scenario("the simulation has no bare-metal reference".into()))?;
    Ok(Simulated {
        vm_ns: rec.timing.wall_ns as f64,
        native_ns: native as f64,
        vm_idle: crate::metrics::idle_fraction(rec).unwrap_or(0.0),
    })
}

/// Smallest measured idle fraction the fit compares: below it the idle
/// time is a few halts at the run's start and end, not the block/wake
/// traffic, and its log ratio would be noise.
pub const IDLE_ROW_MIN: f64 = 0.02;

/// Floor of a simulated idle fraction in the log ratio (a simulation with
/// no idle at all is then off by ln(measured / IDLE_FLOOR), not infinitely).
const IDLE_FLOOR: f64 = 1e-4;

/// The measured idle fraction a VM observation is fitted to, if any.
fn idle_row(o: &Observation) -> Option<f64> {
    o.vm_idle
        .filter(|m| *m >= IDLE_ROW_MIN && o.vm_ns.is_some_and(|v| v > 0.0))
}

/// A micro-run's measured wall times (medians over repetitions, ns), with
/// the 95% intervals of those medians (None: unknown, full weight).
#[derive(Debug, Clone)]
pub struct Observation {
    pub name: String,
    pub case: SimCase,
    pub vm_ns: Option<f64>,
    pub native_ns: Option<f64>,
    pub vm_ci: Option<MedianCi>,
    pub native_ci: Option<MedianCi>,
    /// The VM run's measured idle fraction (median over repetitions), fitted
    /// when at least [`IDLE_ROW_MIN`].
    pub vm_idle: Option<f64>,
}

/// The factor a log-ratio residual is scaled by for the certainty of its
/// measured median, in (0, 1].
///
/// Why: the robust loss below takes a residual's scale to be
/// [`ROBUST_SCALE`], how far the model misses a run it explains. A measured
/// median with standard error σ (in log units, as the residuals are) adds
/// its own independent error, so that residual's scale is √(c² + σ²);
/// dividing it by that and multiplying by c (so a certain measurement keeps
/// weight 1) is weighted least squares with the measurement's variance added
/// to the model's. σ comes from the 95% interval of the median, about ±1.96
/// standard errors (the sample median is asymptotically normal):
/// σ = ln(hi / lo) / (2 · 1.96). An interval at the ±5% target gives 0.996,
/// ±25% about 0.92, a median uncertain by a factor of 3 about 0.73: the
/// model's misfit, not the host's noise, dominates until a measurement is
/// very wide. Below 6 runs the interval is the range (coverage under 95%),
/// which understates σ; the calibration runs at least 6.
pub fn certainty(ci: Option<&MedianCi>) -> f64 {
    let Some(c) = ci.filter(|c| c.lo > 0.0 && c.hi.is_finite()) else {
        return 1.0;
    };
    let sigma = (c.hi / c.lo).ln() / (2.0 * 1.96);
    ROBUST_SCALE / (ROBUST_SCALE.powi(2) + sigma.powi(2)).sqrt()
}

/// What one residual of the fit compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResidualKind {
    /// The micro-run's wall time in smplab-vmm, ns.
    VmWall,
    /// The micro-run's wall time natively, ns.
    NativeWall,
    /// The fraction of the VM run its vCPUs were idle.
    VmIdle,
}

impl ResidualKind {
    /// Whether the values are idle fractions rather than ns.
    pub fn is_fraction(self) -> bool {
        self == ResidualKind::VmIdle
    }
}

impl std::fmt::Display for ResidualKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ResidualKind::VmWall => "vm",
            ResidualKind::NativeWall => "native",
            ResidualKind::VmIdle => "vm idle",
        })
    }
}

/// One residual of the fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Residual {
    /// Micro-run name.
    pub name: String,
    /// What it compares (idle rows: the two values below are idle
    /// fractions, not ns).
    pub kind: ResidualKind,
    pub measured_ns: f64,
    pub fitted_ns: f64,
    /// Its weight in the robust fit's last iteration (1: full; small: the
    /// model could not explain the run, or its median is uncertain, so it
    /// was discounted): the square of [`certainty`] times the robust weight.
    pub weight: f64,
    /// [`certainty`] of the measured median.
    pub certainty: f64,
}

impl Residual {
    /// `(fitted − measured) / measured`.
    pub fn rel(&self) -> f64 {
        (self.fitted_ns - self.measured_ns) / self.measured_ns
    }
}

/// The outcome of a fit.
#[derive(Debug, Clone)]
pub struct Fit {
    pub platform: Platform,
    /// `(field, fitted value, sensitivity)`: sensitivity is the norm of the
    /// field's Jacobian column, d(log residual)/d(log value); below
    /// [`WEAK`] the micro-runs barely see the field.
    pub values: Vec<(&'static str, f64, f64)>,
    pub residuals: Vec<Residual>,
    pub iterations: u32,
    /// Simulations run.
    pub simulations: u64,
}

/// Sensitivity below which a field is reported as weakly determined.
pub const WEAK: f64 = 0.05;

/// Residual vector of θ (log ratios, then prior rows), and the simulated
/// pairs, or an error from the simulator.
fn residuals(
    base: &Platform,
    params: &[Param],
    theta: &[f64],
    theta0: &[f64],
    obs: &[Observation],
    sims: &mut u64,
) -> Result<(Vec<f64>, Vec<Simulated>), SimError> {
    let mut p = base.clone();
    for (q, &t) in params.iter().zip(theta) {
        set(&mut p, q.field, t.exp());
    }
    let mut r = Vec::new();
    let mut pairs = Vec::new();
    for o in obs {
        let sim = simulate_with_idle(&p, &o.case)?;
        *sims += 1;
        pairs.push(sim);
        for (m, s, ci) in [
            (o.vm_ns, sim.vm_ns, o.vm_ci),
            (o.native_ns, sim.native_ns, o.native_ci),
        ] {
            if let Some(m) = m.filter(|m| *m > 0.0) {
                r.push(certainty(ci.as_ref()) * (s.max(1.0) / m).ln());
            }
        }
        if let Some(m) = idle_row(o) {
            r.push((sim.vm_idle.max(IDLE_FLOOR) / m).ln());
        }
    }
    for (t, t0) in theta.iter().zip(theta0) {
        r.push(PRIOR_WEIGHT * (t - t0));
    }
    Ok((r, pairs))
}

/// Scale of the robust loss: a micro-run whose simulated wall time is off
/// by much more than ~30% (a log ratio of 0.3) counts less and less, so one
/// run the model cannot explain (a host effect outside the model) does not
/// drag every parameter toward it.
pub const ROBUST_SCALE: f64 = 0.3;

/// Weight of a log-ratio residual under the Cauchy loss (the square root of
/// the IRLS weight, applied to the residual).
fn cauchy_weight(r: f64) -> f64 {
    1.0 / (1.0 + (r / ROBUST_SCALE).powi(2)).sqrt()
}

fn weighted_cost(r: &[f64], w: &[f64]) -> f64 {
    r.iter().zip(w).map(|(x, w)| (w * x).powi(2)).sum()
}

/// Solve `a x = b` (a symmetric positive definite, n×n row-major) by
/// Gaussian elimination with partial pivoting; None if singular.
pub fn solve(mut a: Vec<f64>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let piv =
            (col..n).max_by(|&i, &j| a[i * n + col].abs().total_cmp(&a[j * n + col].abs()))?;
        if a[piv * n + col].abs() < 1e-300 {
            return None;
        }
        if piv != col {
            for k in 0..n {
                a.swap(piv * n + k, col * n + k);
            }
            b.swap(piv, col);
        }
        for row in col + 1..n {
            let f = a[row * n + col] / a[col * n + col];
            for k in col..n {
                a[row * n + k] -= f * a[col * n + k];
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for row in (0..n).rev() {
        let s: f64 = (row + 1..n).map(|k| a[row * n + k] * x[k]).sum();
        x[row] = (b[row] - s) / a[row * n + row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

/// Factors a coarse scan tries for each field before the local fit.
const SCAN: [f64; 6] = [0.1, 0.3, 3.0, 10.0, 30.0, 100.0];

/// A coarse start: one pass over the fields, each tried at [`SCAN`] times
/// its value (within its bounds), keeping whichever lowers the robust cost.
/// A cost that is small at the profile's value has a flat gradient there (its
/// share of the wall time is tiny), so a local fit alone would never find out
/// that the host makes it 30x dearer.
fn scan(
    base: &Platform,
    params: &[Param],
    theta: &mut [f64],
    theta0: &[f64],
    (lo, hi): (&[f64], &[f64]),
    obs: &[Observation],
    sims: &mut u64,
) -> Result<(), SimError> {
    let robust = |r: &[f64]| -> f64 {
        let data = r.len() - params.len();
        r.iter()
            .enumerate()
            .map(|(i, x)| {
                if i < data {
                    (x * cauchy_weight(*x)).powi(2)
                } else {
                    x * x
                }
            })
            .sum()
    };
    let (r, _) = residuals(base, params, theta, theta0, obs, sims)?;
    let mut best = robust(&r);
    for j in 0..params.len() {
        let start = theta[j];
        let mut keep = start;
        for f in SCAN {
            theta[j] = (start + f.ln()).clamp(lo[j], hi[j]);
            let (r, _) = residuals(base, params, theta, theta0, obs, sims)?;
            let c = robust(&r);
            if c < best {
                best = c;
                keep = theta[j];
            }
        }
        theta[j] = keep;
    }
    Ok(())
}

/// Step of the finite differences in ln θ: large enough to step over the
/// simulator's discreteness (whole events), small enough to be local.
const H: f64 = 0.05;

/// The starting point `ln θ₀` (each field's profile value, clamped to its
/// bounds) and the bounds in ln θ.
fn start(base: &Platform, params: &[Param]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let theta0: Vec<f64> = params
        .iter()
        .map(|q| get(base, q.field).unwrap_or(q.lo).clamp(q.lo, q.hi).ln())
        .collect();
    let (lo, hi): (Vec<f64>, Vec<f64>) = params.iter().map(|q| (q.lo.ln(), q.hi.ln())).unzip();
    (theta0, lo, hi)
}

/// What is fitted: the fields, the profile they start from (`ln θ₀`) and
/// the observations.
struct Problem<'a> {
    base: &'a Platform,
    params: &'a [Param],
    theta0: &'a [f64],
    obs: &'a [Observation],
}

impl Problem<'_> {
    /// [`residuals`] at `theta`.
    fn residuals(
        &self,
        theta: &[f64],
        sims: &mut u64,
    ) -> Result<(Vec<f64>, Vec<Simulated>), SimError> {
        residuals(self.base, self.params, theta, self.theta0, self.obs, sims)
    }
}

/// The residuals' weighted Jacobian at `theta` by forward differences
/// (row-major, rows × parameters), one residual evaluation per parameter.
fn jacobian(
    pb: &Problem,
    theta: &[f64],
    (r, w): (&[f64], &[f64]),
    sims: &mut u64,
) -> Result<Vec<f64>, SimError> {
    let (m, np) = (r.len(), pb.params.len());
    let mut jac = vec![0.0; m * np];
    for j in 0..np {
        let mut t = theta.to_vec();
        t[j] += H;
        let (rj, _) = pb.residuals(&t, sims)?;
        for i in 0..m {
            jac[i * np + j] = w[i] * (rj[i] - r[i]) / H;
        }
    }
    Ok(jac)
}

/// How well the data determine each field: the norm of its Jacobian
/// column over the data rows (the prior rows left out).
fn sensitivities(jac: &[f64], np: usize, data_rows: usize) -> Vec<f64> {
    (0..np)
        .map(|j| {
            (0..data_rows)
                .map(|i| jac[i * np + j].powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .collect()
}

/// The Gauss–Newton normal equations `JᵀJ` and `Jᵀ(w·r)`.
fn normal_equations(jac: &[f64], np: usize, r: &[f64], w: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let mut jtj = vec![0.0; np * np];
    let mut jtr = vec![0.0; np];
    for i in 0..r.len() {
        for a in 0..np {
            jtr[a] += jac[i * np + a] * w[i] * r[i];
            for b in 0..np {
                jtj[a * np + b] += jac[i * np + a] * jac[i * np + b];
            }
        }
    }
    (jtj, jtr)
}

/// The state of the Levenberg–Marquardt search.
struct Search {
    theta: Vec<f64>,
    r: Vec<f64>,
    /// Damping.
    mu: f64,
}

/// One damped step: up to 8 tries with growing damping until the weighted
/// cost falls below `c`. True when it fell by more than a negligible amount
/// (the search goes on); the state keeps the step taken, if any.
fn damped_step(
    pb: &Problem,
    s: &mut Search,
    (lo, hi): (&[f64], &[f64]),
    (jtj, jtr, w, c): (&[f64], &[f64], &[f64], f64),
    sims: &mut u64,
) -> Result<bool, SimError> {
    let np = pb.params.len();
    for _ in 0..8 {
        let mut a = jtj.to_vec();
        for d in 0..np {
            a[d * np + d] += s.mu * (jtj[d * np + d] + 1e-9);
        }
        let Some(step) = solve(a, jtr.iter().map(|v| -v).collect()) else {
            s.mu *= 10.0;
            continue;
        };
        let t: Vec<f64> = (0..np)
            .map(|k| (s.theta[k] + step[k].clamp(-2.0, 2.0)).clamp(lo[k], hi[k]))
            .collect();
        let (rt, _) = pb.residuals(&t, sims)?;
        let ct = weighted_cost(&rt, w);
        if ct < c {
            let improved = (c - ct) > 1e-6 * c.max(1e-12);
            s.theta = t;
            s.r = rt;
            s.mu = (s.mu / 3.0).max(1e-6);
            return Ok(improved);
        }
        s.mu *= 4.0;
    }
    Ok(false)
}

/// The reported residuals of the fitted simulations `pairs`, each with its
/// weight in the robust fit.
fn report_residuals(obs: &[Observation], pairs: Vec<Simulated>) -> Vec<Residual> {
    let mut res = Vec::new();
    for (o, sim) in obs.iter().zip(pairs) {
        for (kind, m, s, ci) in [
            (ResidualKind::VmWall, o.vm_ns, sim.vm_ns, o.vm_ci),
            (
                ResidualKind::NativeWall,
                o.native_ns,
                sim.native_ns,
                o.native_ci,
            ),
        ] {
            if let Some(m) = m.filter(|m| *m > 0.0) {
                let u = certainty(ci.as_ref());
                res.push(Residual {
                    name: o.name.clone(),
                    kind,
                    measured_ns: m,
                    fitted_ns: s,
                    weight: (u * cauchy_weight(u * (s.max(1.0) / m).ln())).powi(2),
                    certainty: u,
                });
            }
        }
        if let Some(m) = idle_row(o) {
            res.push(Residual {
                name: o.name.clone(),
                kind: ResidualKind::VmIdle,
                measured_ns: m,
                fitted_ns: sim.vm_idle,
                weight: cauchy_weight((sim.vm_idle.max(IDLE_FLOOR) / m).ln()).powi(2),
                // Idle rows are not scaled by an interval (none is kept).
                certainty: 1.0,
            });
        }
    }
    res
}

/// Fit `params` of `base` to the observations. `max_iter` bounds the
/// Levenberg–Marquardt steps: a coarse [`scan`], then iteratively
/// reweighted (Cauchy) damped Gauss–Newton steps until one no longer lowers
/// the cost.
pub fn fit(
    base: &Platform,
    params: &[Param],
    obs: &[Observation],
    max_iter: u32,
) -> Result<Fit, SimError> {
    let np = params.len();
    let mut sims = 0u64;
    let (theta0, lo, hi) = start(base, params);
    let mut theta = theta0.clone();
    scan(
        base,
        params,
        &mut theta,
        &theta0,
        (&lo, &hi),
        obs,
        &mut sims,
    )?;
    let pb = Problem {
        base,
        params,
        theta0: &theta0,
        obs,
    };
    let (r, _) = pb.residuals(&theta, &mut sims)?;
    let data_rows = r.len() - np;
    let mut w = vec![1.0; r.len()];
    let mut s = Search { theta, r, mu: 1e-2 };
    let mut iterations = 0;
    let mut sensitivity = vec![0.0; np];
    for _ in 0..max_iter {
        iterations += 1;
        // Iteratively reweighted: Cauchy weights from the current residuals.
        for (wi, ri) in w.iter_mut().zip(&s.r).take(data_rows) {
            *wi = cauchy_weight(*ri);
        }
        let c = weighted_cost(&s.r, &w);
        let jac = jacobian(&pb, &s.theta, (&s.r, &w), &mut sims)?;
        sensitivity = sensitivities(&jac, np, data_rows);
        let (jtj, jtr) = normal_equations(&jac, np, &s.r, &w);
        let improved = damped_step(&pb, &mut s, (&lo, &hi), (&jtj, &jtr, &w, c), &mut sims)?;
        if !improved {
            break;
        }
    }
    let mut platform = base.clone();
    for (q, &t) in params.iter().zip(&s.theta) {
        set(&mut platform, q.field, t.exp());
    }
    let (_, pairs) = pb.residuals(&s.theta, &mut sims)?;
    let residuals = report_residuals(obs, pairs);
    let values = params
        .iter()
        .zip(&sensitivity)
        .map(|(q, &s)| (q.field, get(&platform, q.field).unwrap_or(f64::NAN), s))
        .collect();
    Ok(Fit {
        platform,
        values,
        residuals,
        iterations,
        simulations: sims,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_param_reads_and_writes_its_field() {
        let mut p = Platform::builtin("kvm2015").expect("builtin");
        assert!(p.vm_kernel.is_none());
        for q in PARAMS {
            let v = get(&p, q.field).expect(q.field);
            assert!(set(&mut p, q.field, v * 2.0 + 3.0), "{}", q.field);
            let w = get(&p, q.field).expect(q.field);
            assert!(
                (w - (v * 2.0 + 3.0)).abs() <= 0.5,
                "{}: {v} -> {w}",
                q.field
            );
        }
        // Writing a VM kernel cost makes the section; bare metal is untouched.
        assert!(p.vm_kernel.is_some());
        assert_ne!(p.kernel(true), p.kernel(false));
        assert!(!set(&mut p, "nosuch.field", 1.0));
        assert!(get(&p, "nosuch.field").is_none());
    }

    #[test]
    fn certainty_falls_with_the_width_of_the_interval() {
        let ci = |lo: f64, hi: f64| MedianCi {
            median: 1.0,
            lo,
            hi,
            n: 8,
            coverage: 0.99,
        };
        assert_eq!(certainty(None), 1.0);
        assert_eq!(certainty(Some(&ci(1.0, 1.0))), 1.0);
        let at_target = certainty(Some(&ci(0.95, 1.05)));
        let quarter = certainty(Some(&ci(0.75, 1.25)));
        let factor_three = certainty(Some(&ci(0.5, 1.5)));
        assert!(at_target > 0.99 && at_target < 1.0, "{at_target}");
        assert!(quarter < at_target && factor_three < quarter);
        // σ = ln 3 / 3.92 = 0.280 against the robust scale 0.3.
        assert!((factor_three - 0.3 / (0.09f64 + 0.280_26f64.powi(2)).sqrt()).abs() < 1e-3);
        // No positive lower end: nothing to take a log of, full weight.
        assert_eq!(certainty(Some(&ci(0.0, 2.0))), 1.0);
    }

    #[test]
    fn solve_small_systems() {
        let x = solve(vec![4.0, 1.0, 1.0, 3.0], vec![1.0, 2.0]).unwrap();
        assert!((4.0 * x[0] + x[1] - 1.0).abs() < 1e-12);
        assert!((x[0] + 3.0 * x[1] - 2.0).abs() < 1e-12);
        assert!(solve(vec![1.0, 2.0, 2.0, 4.0], vec![1.0, 1.0]).is_none());
    }
}
