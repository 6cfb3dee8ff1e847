//! Whole calibrate-and-check runs on a shared host: wait for the other
//! processes to leave the CPUs before a run, measure their share of the CPUs
//! during it, and rerun a run they disturbed (within a budget). The
//! simulator models this host without other tenants, so a run in which
//! another tenant's build took a large share of the 2 cores measures that
//! build, not the host: its micro-runs' wall times stretch by the share the
//! build took (docs/sim-calibration.md, "Sealed held-out set").
//!
//! Under Linux's autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`)
//! a `nice` value acts only inside its own session, so another session's
//! `nice -n 19` build still gets an equal share of the CPUs against a
//! measurement: niceness does not keep it out of the way; waiting does.

use smplab_record::interference::HostCounters;
use std::time::{Duration, Instant};

/// Other processes' share of all CPUs below which the host counts as quiet
/// before a run starts.
pub const QUIET_BEFORE: f64 = 0.10;

/// Other processes' share of all CPUs during a whole run above which the run
/// is disturbed: discarded and run again while the budget lasts.
pub const DISTURBED_DURING: f64 = 0.25;

/// Longest wait for a quiet host before a run (then it runs anyway, and the
/// share during it decides).
pub const MAX_WAIT: Duration = Duration::from_secs(120);

/// How long each look at the host lasts while waiting.
const SAMPLE: Duration = Duration::from_secs(2);

/// Other processes' share of all CPUs between two readings (None when
/// `/proc/stat` is unreadable or no tick passed).
pub fn others_share(start: &HostCounters, end: &HostCounters) -> Option<f64> {
    start.until(end).other_cpu_fraction
}

/// Wait until other processes used less than [`QUIET_BEFORE`] of the CPUs
/// over one sample, or `max_wait` passed. Returns the last sample's share
/// and how long it waited.
pub fn wait_for_quiet(max_wait: Duration) -> (Option<f64>, Duration) {
    let started = Instant::now();
    loop {
        let Some(a) = HostCounters::read() else {
            return (None, started.elapsed());
        };
        std::thread::sleep(SAMPLE);
        let share = HostCounters::read().and_then(|b| others_share(&a, &b));
        if share.is_none_or(|s| s < QUIET_BEFORE) || started.elapsed() >= max_wait {
            return (share, started.elapsed());
        }
    }
}

/// What to do with a finished run, given the other processes' share of the
/// CPUs during it and how many reruns are left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Quiet enough (or not measurable): its figures count.
    Keep,
    /// Disturbed and a rerun is left: discard it, run again.
    Rerun,
    /// Disturbed, no rerun left: its figures count, flagged as disturbed.
    KeepDisturbed,
}

pub fn verdict(others: Option<f64>, reruns_left: usize) -> Verdict {
    match others {
        Some(s) if s > DISTURBED_DURING => {
            if reruns_left > 0 {
                Verdict::Rerun
            } else {
                Verdict::KeepDisturbed
            }
        }
        _ => Verdict::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disturbed_run_is_rerun_while_the_budget_lasts() {
        assert_eq!(verdict(Some(0.05), 2), Verdict::Keep);
        assert_eq!(verdict(Some(DISTURBED_DURING), 2), Verdict::Keep);
        assert_eq!(verdict(Some(0.6), 2), Verdict::Rerun);
        assert_eq!(verdict(Some(0.6), 0), Verdict::KeepDisturbed);
        // Not measurable: no verdict against the run.
        assert_eq!(verdict(None, 0), Verdict::Keep);
    }
}
