//! The input side of the host's tuner (`host::tuned`): per VM and 20 ms
//! window, Kulkarni & Kulkarni's indicators from what the real host can read while
//! its VMs run, smoothed over the last few windows.
//!
//! - spin detections: the user-level scheduler's sampler
//!   (`HostScheduler::vcpu_stats`);
//! - rescheduling IPIs sent and device completions with their completion →
//!   handler latency: the counters the guest publishes in its memory
//!   (`HostScheduler::guest_counters`, docs/guest-abi.md "Host
//!   indicators"), read without an exit;
//! - cache refill: not measurable here. This host has no hardware PMU
//!   (`perf_event_open` offers software events only: the kernel logs "PMU
//!   not available due to virtualization"), so LLC misses of the vCPU
//!   threads cannot be counted; the indicator stays 0 (docs/host.md).
//!
//! Rates are per second the VM's vCPUs ran (summed over its vCPUs, from the
//! scheduler's accounting), as the tuner's thresholds are per vCPU-second:
//! a VM waiting for pCPUs is not calmer, and one that ran twice as long on
//! two vCPUs has twice the chances to send an IPI.

use smplab_policy::tune::Indicators;
use smplab_vmm::host::GuestCounters;
use std::collections::VecDeque;
use std::fmt;

/// Windows the indicators are summed over: spins are sparse (at most one
/// per 1 ms sample) and so are device completions on this host (a request
/// takes ~0.2–45 ms to reach its handler, docs/guest.md), so one 20 ms
/// window holds 0 or a few and its rate swings between 0 and hundreds per
/// second; 100 ms smooths that.
pub const HOST_SMOOTH_WINDOWS: u32 = 5;

/// What one VM did in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    /// Spin detections of its vCPUs.
    pub spins: u64,
    /// Time its vCPUs ran (granted a pCPU), summed over them, ns.
    pub run_ns: u64,
    /// Counted by its guest: rescheduling IPIs sent, device completions
    /// taken, their completion → handler delays summed (ns).
    pub guest: GuestCounters,
}

impl WindowCounts {
    fn plus(&self, o: &WindowCounts) -> WindowCounts {
        WindowCounts {
            spins: self.spins.saturating_add(o.spins),
            run_ns: self.run_ns.saturating_add(o.run_ns),
            guest: self.guest.plus(&o.guest),
        }
    }
}

/// One VM's indicator input: its totals at the last window and the counts
/// of the last [`HOST_SMOOTH_WINDOWS`] windows.
#[derive(Debug, Clone)]
pub struct VmIndicators {
    last_spins: u64,
    last_run_ns: u64,
    /// Per vCPU, the guest's counters at the last window it published them.
    last_guest: Vec<Option<GuestCounters>>,
    recent: VecDeque<WindowCounts>,
    seen: IndicatorSummary,
}

impl VmIndicators {
    pub fn new(vcpus: usize) -> Self {
        VmIndicators {
            last_spins: 0,
            last_run_ns: 0,
            last_guest: vec![None; vcpus],
            recent: VecDeque::new(),
            seen: IndicatorSummary::default(),
        }
    }

    /// The window just ended: the VM's totals so far (spins and run time
    /// from the scheduler; per vCPU, the guest's counters, `None` where it
    /// has not published them) give this window's counts, and those of the
    /// last windows the indicators the tuner sees.
    pub fn observe(
        &mut self,
        spins_total: u64,
        run_ns_total: u64,
        guest: &[Option<GuestCounters>],
        window_ns: u64,
    ) -> Indicators {
        let mut counts = WindowCounts {
            spins: spins_total.saturating_sub(self.last_spins),
            run_ns: run_ns_total.saturating_sub(self.last_run_ns),
            guest: GuestCounters::default(),
        };
        self.last_spins = spins_total;
        self.last_run_ns = run_ns_total;
        for (last, now) in self.last_guest.iter_mut().zip(guest) {
            // The first reading is a baseline (boot's IPIs are not this
            // window's); a vCPU that stopped publishing keeps its last.
            if let (Some(before), Some(now)) = (last.as_ref(), now.as_ref()) {
                counts.guest = counts.guest.plus(&now.since(before));
            }
            if now.is_some() {
                *last = *now;
            }
        }
        self.recent.push_back(counts);
        if self.recent.len() > HOST_SMOOTH_WINDOWS as usize {
            self.recent.pop_front();
        }
        let sum = self
            .recent
            .iter()
            .fold(WindowCounts::default(), |a, c| a.plus(c));
        let indicators = indicators_of(&sum, window_ns);
        self.seen.add(&indicators);
        indicators
    }

    /// What this VM's indicators were over the run so far.
    pub fn summary(&self) -> &IndicatorSummary {
        &self.seen
    }
}

/// Indicators from counts summed over some windows.
#[allow(clippy::cast_precision_loss)] // counts and ns far below 2^52
pub fn indicators_of(sum: &WindowCounts, window_ns: u64) -> Indicators {
    let ran_s = sum.run_ns as f64 / 1e9;
    let rate = |n: u64| if ran_s > 0.0 { n as f64 / ran_s } else { 0.0 };
    let g = &sum.guest;
    Indicators {
        window_ns,
        resched_ipis_per_s: rate(g.resched_ipis),
        refill_ns_per_dispatch: 0.0,
        irqs_per_s: rate(g.io_completions),
        irq_latency_ns: if g.io_completions > 0 {
            g.irq_latency_ns as f64 / g.io_completions as f64
        } else {
            0.0
        },
        spins_per_s: rate(sum.spins),
    }
}

/// Mean and maximum of each indicator over the windows a VM was observed
/// (printed with the tuner's decisions, so a run shows what it saw).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IndicatorSummary {
    pub windows: u64,
    pub sum: Indicators,
    pub max: Indicators,
    /// Windows with at least one device completion (the latency's mean is
    /// over these only).
    pub latency_windows: u64,
}

impl IndicatorSummary {
    fn add(&mut self, i: &Indicators) {
        self.windows += 1;
        let (s, m) = (&mut self.sum, &mut self.max);
        s.resched_ipis_per_s += i.resched_ipis_per_s;
        s.irqs_per_s += i.irqs_per_s;
        s.spins_per_s += i.spins_per_s;
        m.resched_ipis_per_s = m.resched_ipis_per_s.max(i.resched_ipis_per_s);
        m.irqs_per_s = m.irqs_per_s.max(i.irqs_per_s);
        m.spins_per_s = m.spins_per_s.max(i.spins_per_s);
        m.irq_latency_ns = m.irq_latency_ns.max(i.irq_latency_ns);
        if i.irqs_per_s > 0.0 {
            self.latency_windows += 1;
            s.irq_latency_ns += i.irq_latency_ns;
        }
    }

    /// The mean of each indicator.
    #[allow(clippy::cast_precision_loss)] // window counts
    pub fn mean(&self) -> Indicators {
        let n = self.windows.max(1) as f64;
        Indicators {
            window_ns: self.sum.window_ns,
            resched_ipis_per_s: self.sum.resched_ipis_per_s / n,
            refill_ns_per_dispatch: 0.0,
            irqs_per_s: self.sum.irqs_per_s / n,
            irq_latency_ns: self.sum.irq_latency_ns / self.latency_windows.max(1) as f64,
            spins_per_s: self.sum.spins_per_s / n,
        }
    }
}

impl fmt::Display for IndicatorSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (a, m) = (self.mean(), self.max);
        write!(
            f,
            "{} windows, mean [max]: resched IPIs {:.0} [{:.0}]/s, irqs {:.0} [{:.0}]/s at {:.1} [{:.1}] us, spins {:.0} [{:.0}]/s, refill not measurable here",
            self.windows,
            a.resched_ipis_per_s,
            m.resched_ipis_per_s,
            a.irqs_per_s,
            m.irqs_per_s,
            a.irq_latency_ns / 1e3,
            m.irq_latency_ns / 1e3,
            a.spins_per_s,
            m.spins_per_s,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(ipis: u64, done: u64, lat_ns: u64) -> Option<GuestCounters> {
        Some(GuestCounters {
            resched_ipis: ipis,
            io_completions: done,
            irq_latency_ns: lat_ns,
        })
    }

    #[test]
    fn rates_are_per_vcpu_second_run_and_smoothed_over_windows() {
        let mut v = VmIndicators::new(2);
        // Before the guest publishes: nothing but spins.
        let i = v.observe(2, 20_000_000, &[None, None], 20_000_000);
        assert_eq!(i.resched_ipis_per_s, 0.0);
        assert!((i.spins_per_s - 100.0).abs() < 1e-9, "{i:?}");
        // First readings are the baseline: boot's 500 IPIs do not count.
        let i = v.observe(
            2,
            40_000_000,
            &[guest(500, 0, 0), guest(0, 0, 0)],
            20_000_000,
        );
        assert_eq!(i.resched_ipis_per_s, 0.0);
        // 30 IPIs and 4 completions (200 us each) in a window where the two
        // vCPUs ran 30 ms in all; with the earlier windows, 70 ms ran.
        let i = v.observe(
            2,
            70_000_000,
            &[guest(520, 1, 200_000), guest(10, 3, 600_000)],
            20_000_000,
        );
        assert!((i.resched_ipis_per_s - 30.0 / 0.07).abs() < 1e-6, "{i:?}");
        assert!((i.irqs_per_s - 4.0 / 0.07).abs() < 1e-6, "{i:?}");
        assert!((i.irq_latency_ns - 200_000.0).abs() < 1e-6, "{i:?}");
        // A vCPU whose reading is missing keeps its last one.
        let i = v.observe(2, 80_000_000, &[guest(520, 1, 200_000), None], 20_000_000);
        assert!((i.resched_ipis_per_s - 30.0 / 0.08).abs() < 1e-6, "{i:?}");
        for _ in 0..HOST_SMOOTH_WINDOWS {
            v.observe(
                2,
                80_000_000,
                &[guest(520, 1, 200_000), guest(10, 3, 600_000)],
                20_000_000,
            );
        }
        // The busy window has left the smoothing span; nobody ran.
        let i = v.observe(2, 80_000_000, &[None, guest(10, 3, 600_000)], 20_000_000);
        assert_eq!(i.resched_ipis_per_s, 0.0);
        assert_eq!(i.irq_latency_ns, 0.0);
        let s = v.summary();
        assert_eq!(s.windows, 5 + u64::from(HOST_SMOOTH_WINDOWS));
        assert!(s.max.resched_ipis_per_s >= 30.0 / 0.08);
        assert!(s.to_string().contains("refill not measurable"), "{s}");
    }
}
