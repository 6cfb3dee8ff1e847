//! Kulkarni & Kulkarni's adaptive tuner (§5.4 "host indicators") as a pure decision:
//! per window the driver reports what the host saw of one VM — rescheduling
//! IPIs, the cost of refilling caches after a dispatch, device-interrupt
//! delivery latency, spin detections — and the tuner answers with the three
//! multiprocessing parameters (§2.2): vCPU time slice, vCPU affinity and
//! interrupt affinity. The simulator (`smplab tune`) and, later, the real
//! multi-VM host drive the same [`Tuner`].
//!
//! The rules restate the seed's findings and the work it cites:
//! - frequent device interrupts delivered late (the vCPU they are routed to
//!   is not running) → route them to a running vCPU (vBalance [10]) and
//!   shorten the slice ([5], vTurbo [18]);
//! - many rescheduling IPIs or spin detections (synchronization) → shorter
//!   slices against lock-holder and lock-waiter preemption ([5], §1.1.1),
//!   and floating vCPUs so a woken vCPU can move to an idle pCPU (§4.3.1,
//!   fluidanimate);
//! - a large cache footprint refilled per dispatch with few rescheduling
//!   IPIs → keep the long slice and pin vCPUs (§4.3.1, streamcluster): each
//!   extra dispatch costs a refill.
//!
//! Hysteresis, three times over: each indicator turns a condition on at its
//! `*_enter` threshold and off only below half of it (a Schmitt trigger),
//! and a new setting must be proposed for `confirm_windows` windows in a row
//! before it is applied. Every applied change is a [`Decision`] carrying the
//! indicators of the window that confirmed it and the conditions they set.
//!
//! And memory: an indicator may vanish under its own cure (short slices
//! leave fewer spins for a sampler to see), so the condition turns off, the
//! cure is undone, the indicator comes back, and the tuner oscillates
//! between the two settings. A condition that turns on again within
//! `relapse_windows` of turning off, after its cure was in place, has
//! relapsed: from then on it stays on until its indicator has been low for
//! its `hold` (1 window at first; at a relapse twice the last hold and at
//! least 4 times the windows it stayed off; at most `max_hold_windows`).
//! A condition that stays off beyond `relapse_windows` forgets its hold,
//! and a condition turning on is never delayed, so a real phase change is
//! still seen at once; only the end of a relapsing condition waits for its
//! hold.
//!
//! And judgement, where the driver asks for it (`cure_check_windows`):
//! `io-late`'s indicator, the latency, is not its trigger, the interrupt
//! rate, so whether its cure works can be seen. A cure that did not lower
//! the latency is undone and not tried again for a while.

use smplab_record::config::IrqAffinity;
use std::fmt;

/// What the host saw of one VM during one window. Rates are per vCPU and
/// per second of the window, so thresholds do not depend on the VM's size.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Indicators {
    /// Window length, ns.
    pub window_ns: u64,
    /// Rescheduling (wakeup) IPIs sent, per vCPU per second.
    pub resched_ipis_per_s: f64,
    /// Mean cache-refill cost of one dispatch, ns (footprint × refill cost
    /// per line, the simulator's model; on hardware: cache misses after a
    /// switch × miss cost).
    pub refill_ns_per_dispatch: f64,
    /// Device interrupts delivered, per vCPU per second.
    pub irqs_per_s: f64,
    /// Mean delay from device completion to the guest handler, ns (0 when
    /// no interrupt was delivered in the window).
    pub irq_latency_ns: f64,
    /// Spin detections (PLE exits, SDB or sampled spins), per vCPU per second.
    pub spins_per_s: f64,
}

/// vCPU affinity: anywhere, or one pCPU each (spread evenly).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VcpuAffinity {
    Floating,
    Pinned,
}

impl fmt::Display for VcpuAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            VcpuAffinity::Floating => "floating",
            VcpuAffinity::Pinned => "pinned",
        })
    }
}

/// The three multiprocessing parameters of Kulkarni & Kulkarni.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Setting {
    pub slice_ns: u64,
    pub affinity: VcpuAffinity,
    pub irq: IrqAffinity,
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "slice {} us, {}, irq {}",
            self.slice_ns / 1000,
            self.affinity,
            self.irq
        )
    }
}

/// The tuner's own settings. Defaults are round figures from the seed's
/// orders of magnitude, not fitted to a workload (docs/sim.md, "The tuner").
#[derive(Debug, Clone, PartialEq)]
pub struct TunerConfig {
    /// How often the driver reports indicators, ns.
    pub window_ns: u64,
    /// The short slice: 100 us, Kulkarni & Kulkarni §5.3's micro-slice.
    pub short_slice_ns: u64,
    /// The long slice: the host's default (the driver fills it in).
    pub long_slice_ns: u64,
    /// Device interrupts per vCPU-second at which the VM counts as I/O-bound.
    pub irq_enter_per_s: f64,
    /// Mean interrupt latency above which routing and slices are changed, ns.
    pub irq_latency_target_ns: f64,
    /// Rescheduling IPIs per vCPU-second at which the VM counts as
    /// synchronization-heavy.
    pub ipi_enter_per_s: f64,
    /// Spin detections per vCPU-second at which it counts as spinning.
    pub spin_enter_per_s: f64,
    /// Refill cost per dispatch, as a fraction of the short slice, at which
    /// short slices cost more than they save and pinning pays.
    pub refill_enter_fraction: f64,
    /// Windows in a row a new setting must be proposed before it is applied.
    pub confirm_windows: u32,
    /// A condition back on within this many windows of turning off, after
    /// its cure was in place, has relapsed (its cure had hidden its
    /// indicator): its hold grows.
    pub relapse_windows: u32,
    /// The longest a relapsing condition is held on with its indicator low,
    /// in windows.
    pub max_hold_windows: u32,
    /// Interrupt routing used when interrupts need a running vCPU: `running`
    /// (vBalance) where the executor has it, else `balanced`.
    pub irq_to_running: IrqAffinity,
    /// Windows after `io-late`'s cure is applied at which the interrupt
    /// latency is compared with the latency before it (0: never).
    pub cure_check_windows: u32,
    /// The share of the latency the cure must remove to count as working;
    /// if it does not, `io-late` is switched off for a while (module
    /// documentation).
    pub cure_min_gain: f64,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            window_ns: 1_000_000,
            short_slice_ns: 100_000,
            long_slice_ns: crate::DEFAULT_SLICE_NS,
            irq_enter_per_s: 1_000.0,
            irq_latency_target_ns: 20_000.0,
            ipi_enter_per_s: 5_000.0,
            spin_enter_per_s: 500.0,
            refill_enter_fraction: 0.25,
            confirm_windows: 2,
            relapse_windows: 16,
            max_hold_windows: 64,
            irq_to_running: IrqAffinity::Running,
            // Off: the seed's rule as it stands (the simulator); the real
            // host's driver turns it on.
            cure_check_windows: 0,
            cure_min_gain: 0.2,
        }
    }
}

/// The conditions the indicators set (after hysteresis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Conditions {
    /// Frequent device interrupts delivered late.
    pub io_late: bool,
    /// Many rescheduling IPIs.
    pub sync_heavy: bool,
    /// Many spin detections.
    pub spinning: bool,
    /// Large refill per dispatch.
    pub cache_bound: bool,
}

impl fmt::Display for Conditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [
            (self.io_late, "io-late"),
            (self.sync_heavy, "sync-heavy"),
            (self.spinning, "spinning"),
            (self.cache_bound, "cache-bound"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|&(_, n)| n)
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join("+"))
        }
    }
}

/// One applied change.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Driver clock at the end of the confirming window, ns.
    pub at_ns: u64,
    pub from: Setting,
    pub to: Setting,
    pub conditions: Conditions,
    /// The conditions among `conditions` kept on only by their hold (their
    /// indicator is already low: they relapsed before).
    pub held: Conditions,
    /// Conditions switched off at this window because their cure did not
    /// help (`io-late`: the latency did not fall).
    pub failed: Conditions,
    /// The indicators of the confirming window.
    pub indicators: Indicators,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.indicators;
        let mut held = if self.held == Conditions::default() {
            String::new()
        } else {
            format!(", held: {}", self.held)
        };
        if self.failed != Conditions::default() {
            held.push_str(&format!(", cure did not help: {}", self.failed));
        }
        write!(
            f,
            "t={:.3} ms [{}{held}] -> {} (was {}); resched IPIs {:.0}/s, refill {:.1} us/dispatch, irqs {:.0}/s at {:.1} us, spins {:.0}/s",
            self.at_ns as f64 / 1e6,
            self.conditions,
            self.to,
            self.from,
            i.resched_ipis_per_s,
            i.refill_ns_per_dispatch / 1e3,
            i.irqs_per_s,
            i.irq_latency_ns / 1e3,
            i.spins_per_s,
        )
    }
}

/// At a relapse the hold is at least this many times the windows the
/// condition stayed off: the tuner then spends at least 4/5 of the time on
/// the cure of an indicator that returns whenever the cure is undone.
const RELAPSE_HOLD_FACTOR: u64 = 4;

/// One condition's memory (module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Memory {
    /// Windows in a row its indicator must be low before it turns off.
    hold: u32,
    /// Windows in a row its indicator has been low while it is on.
    low: u32,
    /// Since it turned on, the setting was once what the tuner proposed
    /// with it on: its cure was in place.
    cured: bool,
    /// The window it last turned off in, if it was cured then.
    left_at: Option<u64>,
}

impl Default for Memory {
    fn default() -> Self {
        Memory {
            hold: 1,
            low: 0,
            cured: false,
            left_at: None,
        }
    }
}

impl Memory {
    /// The condition after window `window`, given whether it was `on` and
    /// whether its indicator is above its (Schmitt) threshold; the second
    /// value says it is on only by its hold.
    fn step(&mut self, on: bool, above: bool, window: u64, c: &TunerConfig) -> (bool, bool) {
        if on {
            if above {
                self.low = 0;
                return (true, false);
            }
            self.low += 1;
            if self.low < self.hold {
                return (true, true);
            }
            self.low = 0;
            if self.cured {
                self.left_at = Some(window);
            } else {
                // It went before its cure came: the indicator was not
                // hidden by the cure, so there is nothing to remember.
                self.left_at = None;
                self.hold = 1;
            }
            return (false, false);
        }
        let since = self.left_at.map(|left| window.saturating_sub(left));
        match since {
            Some(n) if n > u64::from(c.relapse_windows) => {
                self.hold = 1;
                self.left_at = None;
            }
            Some(off) if above => {
                // Hold it longer than it stayed away (the time its
                // indicator needed to come back without the cure), and at
                // least twice as long as last time.
                let away =
                    u32::try_from(off.saturating_mul(RELAPSE_HOLD_FACTOR)).unwrap_or(u32::MAX);
                self.hold = self
                    .hold
                    .saturating_mul(2)
                    .max(away)
                    .min(c.max_hold_windows.max(1));
            }
            _ => {}
        }
        if above {
            self.cured = false;
            self.low = 0;
        }
        (above, false)
    }
}

/// Per condition: its memory.
#[derive(Debug, Clone, Copy, Default)]
struct Memories {
    io_late: Memory,
    sync_heavy: Memory,
    spinning: Memory,
    cache_bound: Memory,
}

/// Kulkarni & Kulkarni's tuner for one VM.
#[derive(Debug, Clone)]
pub struct Tuner {
    config: TunerConfig,
    current: Setting,
    conditions: Conditions,
    /// Conditions on only by their hold.
    held: Conditions,
    memory: Memories,
    /// Windows observed so far.
    windows: u64,
    /// `io-late`'s cure on trial: the window it was applied in and the
    /// latency of the window before.
    io_trial: Option<(u64, f64)>,
    /// This `io-late` episode's cure was judged already.
    io_judged: bool,
    /// `io-late` stays off until this window: its cure did not help.
    io_off_until: u64,
    /// Windows the next failed cure keeps it off.
    io_penalty: u32,
    /// Conditions switched off because their cure failed, until the change
    /// that follows is logged.
    failed: Conditions,
    /// The setting proposed by the last windows and for how many in a row.
    pending: Option<(Setting, u32)>,
    log: Vec<Decision>,
}

/// A Schmitt trigger: on at `enter`, off below `enter / 2`.
fn trigger(on: bool, value: f64, enter: f64) -> bool {
    if on {
        value >= enter / 2.0
    } else {
        value >= enter
    }
}

impl Tuner {
    /// A tuner starting from `initial` (the host's default setting).
    pub fn new(config: TunerConfig, initial: Setting) -> Tuner {
        Tuner {
            io_penalty: config.relapse_windows.max(1),
            config,
            current: initial,
            conditions: Conditions::default(),
            held: Conditions::default(),
            memory: Memories::default(),
            windows: 0,
            io_trial: None,
            io_judged: false,
            io_off_until: 0,
            failed: Conditions::default(),
            pending: None,
            log: Vec::new(),
        }
    }

    pub fn config(&self) -> &TunerConfig {
        &self.config
    }

    pub fn current(&self) -> &Setting {
        &self.current
    }

    pub fn conditions(&self) -> Conditions {
        self.conditions
    }

    /// The conditions kept on only by their hold (module documentation).
    pub fn held(&self) -> Conditions {
        self.held
    }

    /// Per condition (io-late, sync-heavy, spinning, cache-bound): windows
    /// its indicator must stay low before it turns off.
    pub fn holds(&self) -> [u32; 4] {
        let m = &self.memory;
        [
            m.io_late.hold,
            m.sync_heavy.hold,
            m.spinning.hold,
            m.cache_bound.hold,
        ]
    }

    /// Every change applied so far, oldest first.
    pub fn log(&self) -> &[Decision] {
        &self.log
    }

    fn update_conditions(&mut self, i: &Indicators) {
        let c = &self.config;
        let old = self.conditions;
        // Late interrupts need both: enough of them and a latency above
        // target. Once on, it stays on while the rate stays above half the
        // threshold, even if the cure brought the latency down.
        let io_rate = trigger(old.io_late, i.irqs_per_s, c.irq_enter_per_s);
        let io_late = if old.io_late {
            io_rate
        } else {
            io_rate && i.irq_latency_ns >= c.irq_latency_target_ns
        };
        let refill_enter = c.refill_enter_fraction * c.short_slice_ns as f64;
        let w = self.windows;
        self.windows += 1;
        // Its cure failed lately: off, whatever the interrupts do.
        let io_late = io_late && w >= self.io_off_until;
        let m = &mut self.memory;
        let (io_late, io_held) = m.io_late.step(old.io_late, io_late, w, c);
        let (sync_heavy, sync_held) = m.sync_heavy.step(
            old.sync_heavy,
            trigger(old.sync_heavy, i.resched_ipis_per_s, c.ipi_enter_per_s),
            w,
            c,
        );
        let (spinning, spin_held) = m.spinning.step(
            old.spinning,
            trigger(old.spinning, i.spins_per_s, c.spin_enter_per_s),
            w,
            c,
        );
        let (cache_bound, cache_held) = m.cache_bound.step(
            old.cache_bound,
            trigger(old.cache_bound, i.refill_ns_per_dispatch, refill_enter),
            w,
            c,
        );
        self.conditions = Conditions {
            io_late,
            sync_heavy,
            spinning,
            cache_bound,
        };
        self.held = Conditions {
            io_late: io_held,
            sync_heavy: sync_held,
            spinning: spin_held,
            cache_bound: cache_held,
        };
    }

    /// The setting the current conditions call for.
    fn propose(&self) -> Setting {
        let c = &self.config;
        let k = self.conditions;
        let wants_short = k.io_late || k.sync_heavy || k.spinning;
        // A refill per dispatch costlier than a good part of the short slice
        // makes short slices lose more than they save (streamcluster in
        // Kulkarni & Kulkarni §4.3.1 and §5.3): the footprint wins.
        let slice_ns = if wants_short && !k.cache_bound {
            c.short_slice_ns
        } else {
            c.long_slice_ns
        };
        let affinity = if k.sync_heavy || k.spinning {
            VcpuAffinity::Floating
        } else if k.cache_bound {
            VcpuAffinity::Pinned
        } else {
            self.current.affinity
        };
        // Routing matters only while interrupts come: leave it alone otherwise.
        let irq = if k.io_late {
            c.irq_to_running.clone()
        } else {
            self.current.irq.clone()
        };
        Setting {
            slice_ns,
            affinity,
            irq,
        }
    }

    /// The setting is what the tuner proposes with the conditions now on:
    /// their cures are in place.
    fn mark_cured(&mut self) {
        let k = self.conditions;
        let m = &mut self.memory;
        for (on, memory) in [
            (k.io_late, &mut m.io_late),
            (k.sync_heavy, &mut m.sync_heavy),
            (k.spinning, &mut m.spinning),
            (k.cache_bound, &mut m.cache_bound),
        ] {
            if on {
                memory.cured = true;
            }
        }
    }

    /// Judge `io-late`'s cure `cure_check_windows` after it was applied:
    /// a latency that did not fall by `cure_min_gain` switches `io-late`
    /// off for `io_penalty` windows (doubling at each failure, at most
    /// `max_hold_windows`). Kulkarni & Kulkarni's rule (late interrupts → short
    /// slices) holds where a dispatch is cheap; on a host where it is not,
    /// the shorter slice only costs.
    fn judge_cure(&mut self, i: &Indicators) {
        if !self.conditions.io_late {
            self.io_trial = None;
            self.io_judged = false;
            return;
        }
        let c = &self.config;
        let Some((at, before)) = self.io_trial else {
            return;
        };
        if c.cure_check_windows == 0
            || self.windows.saturating_sub(at) <= u64::from(c.cure_check_windows)
        {
            return;
        }
        self.io_trial = None;
        self.io_judged = true;
        if i.irq_latency_ns <= before * (1.0 - c.cure_min_gain) {
            self.io_penalty = c.relapse_windows.max(1);
            return;
        }
        self.io_off_until = self.windows + u64::from(self.io_penalty);
        self.io_penalty = self
            .io_penalty
            .saturating_mul(2)
            .min(c.max_hold_windows.max(1));
        self.conditions.io_late = false;
        self.held.io_late = false;
        self.memory.io_late = Memory::default();
        self.failed.io_late = true;
    }

    /// A decision was applied with `i` the indicators before it: put
    /// `io-late`'s cure on trial if it just came.
    fn start_trial(&mut self, i: &Indicators) {
        if self.conditions.io_late
            && self.io_trial.is_none()
            && !self.io_judged
            && i.irq_latency_ns > 0.0
        {
            self.io_trial = Some((self.windows, i.irq_latency_ns));
        }
    }

    /// One window's indicators, at driver time `now_ns`: the setting to apply
    /// if it changed (also logged), else `None`.
    pub fn observe(&mut self, now_ns: u64, indicators: Indicators) -> Option<Setting> {
        self.update_conditions(&indicators);
        self.judge_cure(&indicators);
        let proposal = self.propose();
        if proposal == self.current {
            self.pending = None;
            self.failed = Conditions::default();
            self.mark_cured();
            return None;
        }
        let count = match &self.pending {
            Some((p, n)) if *p == proposal => n + 1,
            _ => 1,
        };
        if count < self.config.confirm_windows.max(1) {
            self.pending = Some((proposal, count));
            return None;
        }
        self.pending = None;
        self.log.push(Decision {
            at_ns: now_ns,
            from: self.current.clone(),
            to: proposal.clone(),
            conditions: self.conditions,
            held: self.held,
            failed: std::mem::take(&mut self.failed),
            indicators,
        });
        self.current = proposal.clone();
        self.mark_cured();
        self.start_trial(&indicators);
        Some(proposal)
    }
}

#[cfg(test)]
#[path = "tune_tests.rs"]
mod tests;
