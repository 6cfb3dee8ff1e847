//! Seed 001's adaptive tuner (§5.4 "host indicators") as a pure decision:
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
//! Hysteresis, twice over: each indicator turns a condition on at its
//! `*_enter` threshold and off only below half of it (a Schmitt trigger),
//! and a new setting must be proposed for `confirm_windows` windows in a row
//! before it is applied. Every applied change is a [`Decision`] carrying the
//! indicators of the window that confirmed it and the conditions they set.

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

/// The three multiprocessing parameters of seed 001.
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
    /// The short slice: 100 us, seed 001 §5.3's micro-slice.
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
    /// Interrupt routing used when interrupts need a running vCPU: `running`
    /// (vBalance) where the executor has it, else `balanced`.
    pub irq_to_running: IrqAffinity,
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
            irq_to_running: IrqAffinity::Running,
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
    /// The indicators of the confirming window.
    pub indicators: Indicators,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.indicators;
        write!(
            f,
            "t={:.3} ms [{}] -> {} (was {}); resched IPIs {:.0}/s, refill {:.1} us/dispatch, irqs {:.0}/s at {:.1} us, spins {:.0}/s",
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

/// Seed 001's tuner for one VM.
#[derive(Debug, Clone)]
pub struct Tuner {
    config: TunerConfig,
    current: Setting,
    conditions: Conditions,
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
            config,
            current: initial,
            conditions: Conditions::default(),
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
        self.conditions = Conditions {
            io_late,
            sync_heavy: trigger(old.sync_heavy, i.resched_ipis_per_s, c.ipi_enter_per_s),
            spinning: trigger(old.spinning, i.spins_per_s, c.spin_enter_per_s),
            cache_bound: trigger(old.cache_bound, i.refill_ns_per_dispatch, refill_enter),
        };
    }

    /// The setting the current conditions call for.
    fn propose(&self) -> Setting {
        let c = &self.config;
        let k = self.conditions;
        let wants_short = k.io_late || k.sync_heavy || k.spinning;
        // A refill per dispatch costlier than a good part of the short slice
        // makes short slices lose more than they save (streamcluster in
        // seed 001 §4.3.1 and §5.3): the footprint wins.
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

    /// One window's indicators, at driver time `now_ns`: the setting to apply
    /// if it changed (also logged), else `None`.
    pub fn observe(&mut self, now_ns: u64, indicators: Indicators) -> Option<Setting> {
        self.update_conditions(&indicators);
        let proposal = self.propose();
        if proposal == self.current {
            self.pending = None;
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
            indicators,
        });
        self.current = proposal.clone();
        Some(proposal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn initial() -> Setting {
        Setting {
            slice_ns: 24_000_000,
            affinity: VcpuAffinity::Floating,
            irq: IrqAffinity::default(),
        }
    }

    fn tuner() -> Tuner {
        let config = TunerConfig {
            long_slice_ns: 24_000_000,
            ..TunerConfig::default()
        };
        Tuner::new(config, initial())
    }

    fn io_phase() -> Indicators {
        Indicators {
            window_ns: 1_000_000,
            irqs_per_s: 6_000.0,
            irq_latency_ns: 400_000.0,
            resched_ipis_per_s: 2_000.0,
            ..Indicators::default()
        }
    }

    fn sync_phase() -> Indicators {
        Indicators {
            window_ns: 1_000_000,
            resched_ipis_per_s: 12_000.0,
            spins_per_s: 100.0,
            ..Indicators::default()
        }
    }

    #[test]
    fn a_phase_change_changes_the_setting_after_confirmation() {
        let mut t = tuner();
        assert_eq!(
            t.observe(1_000_000, io_phase()),
            None,
            "one window is not enough"
        );
        let s = t
            .observe(2_000_000, io_phase())
            .expect("confirmed I/O phase");
        assert_eq!(s.slice_ns, 100_000);
        assert_eq!(s.irq, IrqAffinity::Running);
        for k in 3..10 {
            assert_eq!(t.observe(k * 1_000_000, io_phase()), None);
        }
        // A compute phase with a large footprint: no more interrupts, few
        // wakeups, an expensive refill per dispatch.
        let compute = Indicators {
            window_ns: 1_000_000,
            refill_ns_per_dispatch: 60_000.0,
            resched_ipis_per_s: 200.0,
            ..Indicators::default()
        };
        let mut changed = None;
        for k in 10..14 {
            if let Some(s) = t.observe(k * 1_000_000, compute) {
                changed = Some((k, s));
                break;
            }
        }
        let (k, s) = changed.expect("the tuner must react to the new phase");
        assert_eq!(k, 11, "reacts at the second window of the new phase");
        assert_eq!(s.affinity, VcpuAffinity::Pinned);
        assert_eq!(s.slice_ns, 24_000_000);
        assert!(!t.conditions().io_late && t.conditions().cache_bound);
        assert_eq!(t.log().len(), 2);
        assert!(
            t.log()[1].to_string().contains("cache-bound"),
            "{}",
            t.log()[1]
        );
    }

    #[test]
    fn synchronization_asks_for_short_floating_slices() {
        let mut t = tuner();
        t.observe(1_000_000, sync_phase());
        let s = t.observe(2_000_000, sync_phase()).expect("confirmed");
        assert_eq!(s.slice_ns, 100_000);
        assert_eq!(s.affinity, VcpuAffinity::Floating);
        assert_eq!(
            s.irq,
            IrqAffinity::default(),
            "no interrupts: routing untouched"
        );
    }

    #[test]
    fn hysteresis_holds_a_setting_on_a_noisy_steady_phase() {
        let mut t = tuner();
        t.observe(1_000_000, io_phase());
        t.observe(2_000_000, io_phase());
        assert_eq!(t.log().len(), 1);
        // The same phase with its rate swinging between 60% and 140% of the
        // entry threshold and its latency cured: no change.
        let mut x = 7u64;
        for k in 3..200u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let f = 0.6 + 0.8 * ((x >> 33) as f64 / (1u64 << 31) as f64);
            let i = Indicators {
                irqs_per_s: 1_000.0 * f,
                irq_latency_ns: 5_000.0,
                ..io_phase()
            };
            assert_eq!(t.observe(k * 1_000_000, i), None, "changed at window {k}");
        }
        assert_eq!(t.log().len(), 1);
    }

    #[test]
    fn a_single_odd_window_changes_nothing() {
        let mut t = tuner();
        for k in 0..50u64 {
            let i = if k % 2 == 0 {
                sync_phase()
            } else {
                Indicators::default()
            };
            // A quiet window drops sync-heavy (below half the threshold),
            // so no proposal is ever confirmed twice in a row.
            t.observe(k * 1_000_000, i);
        }
        assert!(t.log().is_empty(), "{:?}", t.log());
    }

    #[test]
    fn cache_bound_keeps_the_long_slice_and_pins() {
        let mut t = tuner();
        let i = Indicators {
            window_ns: 1_000_000,
            refill_ns_per_dispatch: 80_000.0,
            resched_ipis_per_s: 100.0,
            spins_per_s: 900.0,
            ..Indicators::default()
        };
        t.observe(1_000_000, i);
        t.observe(2_000_000, i);
        // Spinning asks for short slices and floating, the footprint forbids
        // short slices: long slice, floating.
        assert_eq!(t.current().slice_ns, 24_000_000);
        let quiet = Indicators {
            spins_per_s: 0.0,
            ..i
        };
        t.observe(3_000_000, quiet);
        t.observe(4_000_000, quiet);
        assert_eq!(t.current().affinity, VcpuAffinity::Pinned);
        assert_eq!(t.current().slice_ns, 24_000_000);
    }
}
