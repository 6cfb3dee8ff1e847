//! The workload window: when a run's workload threads were released and when
//! the last of them ended, on a clock that runs on one host can compare, and
//! how much the windows of runs meant to run together (K VMs) overlapped.

use serde::{Deserialize, Serialize};

/// The host's `CLOCK_MONOTONIC` in nanoseconds (the clock of
/// `std::time::Instant` on Linux), as a number other processes and records
/// can compare: the clock of [`WindowClock::HostMonotonic`] windows and of the
/// trace interposer's events.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer to a
    // local; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// The clock a [`WorkloadWindow`]'s times are read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowClock {
    /// The host's `CLOCK_MONOTONIC`, in nanoseconds: comparable between runs
    /// on the same host since its boot (native runs, smplab-vmm runs).
    HostMonotonic,
    /// The guest's TSC converted with its `tsc_hz`, in nanoseconds: comparable
    /// only within one guest (QEMU runs, where no VMM device reports the window).
    GuestTsc,
}

/// When the workload ran. `threads_ready_ns <= start_ns <= end_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadWindow {
    pub clock: WindowClock,
    /// Every workload thread existed and waited at the start gate.
    pub threads_ready_ns: u64,
    /// The start gate opened (native: the controller opened it once the
    /// spinning threads ran on their own CPUs, or at once when they outnumber
    /// the CPUs; smplab-vmm: its "go" to the guest; QEMU: the guest's own
    /// release).
    pub start_ns: u64,
    /// The last workload thread ended (smplab-vmm: the guest's "done").
    pub end_ns: u64,
    /// The host-side start gate shared with other runs, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_gate: Option<StartGateRecord>,
    /// How the threads settled on their own CPUs before the gate opened
    /// (absent from records older than settling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<Settle>,
}

impl WorkloadWindow {
    /// Length of the window in nanoseconds.
    pub fn len_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// How an executor let the workload's threads settle, each running on its
/// own CPU, before it opened its start gate (native: crates/native/src/gate.rs;
/// the smplab guest: `settle_waiters` in crates/guest/kernel/gate.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    pub outcome: SettleOutcome,
    /// Time spent watching the waiting threads, ns (0 when skipped).
    pub ns: u64,
}

/// Whether the threads settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleOutcome {
    /// More threads than CPUs (vCPUs): they cannot all run at once, so the
    /// gate opened as soon as all were ready.
    Skipped,
    /// Every waiting thread ran in three consecutive 200 µs samples.
    Settled,
    /// The 50 ms limit passed first (a loaded host).
    Unsettled,
}

/// How a host-side start gate shared by K runs opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartGateRecord {
    /// Runs the gate was made for.
    pub parties: u32,
    /// Runs that arrived before it opened (the others failed before arriving,
    /// or were late).
    pub arrived: u32,
    pub outcome: GateOutcome,
    /// How long this run waited at the gate, in nanoseconds.
    pub waited_ns: u64,
}

/// Why a start gate opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateOutcome {
    /// Every run that did not fail arrived.
    Opened,
    /// The gate's wait limit passed first: the runs did not start together.
    TimedOut,
}

/// Why the overlap of windows cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverlapError {
    #[error("no workload windows to compare")]
    Empty,
    #[error("run {index} has no workload window (recorded by an older smplab, or a failed run)")]
    Missing { index: usize },
    #[error("the windows are on different clocks ({first:?} and {other:?}); only host-monotonic windows of runs on one host can be compared")]
    MixedClocks {
        first: WindowClock,
        other: WindowClock,
    },
    #[error("guest-TSC windows of different guests cannot be compared; run the VMs on smplab-vmm, whose windows are on the host clock")]
    GuestClock,
}

/// The fraction of the union of `windows` during which all of them ran: the
/// length of their intersection over the length of their union, in `[0, 1]`.
/// 1 means they started and ended together; 0 that at no moment all ran.
/// A single window overlaps itself fully (1); an empty union gives 1 too
/// (nothing ran apart).
pub fn overlap(windows: &[WorkloadWindow]) -> Result<f64, OverlapError> {
    let first = windows.first().ok_or(OverlapError::Empty)?;
    if let Some(other) = windows.iter().find(|w| w.clock != first.clock) {
        return Err(OverlapError::MixedClocks {
            first: first.clock,
            other: other.clock,
        });
    }
    if windows.len() > 1 && first.clock == WindowClock::GuestTsc {
        return Err(OverlapError::GuestClock);
    }
    let union_start = windows.iter().map(|w| w.start_ns).min().unwrap_or(0);
    let union_end = windows.iter().map(|w| w.end_ns).max().unwrap_or(0);
    let both_start = windows.iter().map(|w| w.start_ns).max().unwrap_or(0);
    let both_end = windows.iter().map(|w| w.end_ns).min().unwrap_or(0);
    let union = union_end.saturating_sub(union_start);
    if union == 0 {
        return Ok(1.0);
    }
    Ok(both_end.saturating_sub(both_start) as f64 / union as f64)
}

/// [`overlap`] of the windows of stored records (`timing.window`).
pub fn overlap_of_records(records: &[crate::RunRecord]) -> Result<f64, OverlapError> {
    let windows = records
        .iter()
        .enumerate()
        .map(|(index, r)| r.timing.window.ok_or(OverlapError::Missing { index }))
        .collect::<Result<Vec<_>, _>>()?;
    overlap(&windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start_ns: u64, end_ns: u64) -> WorkloadWindow {
        WorkloadWindow {
            clock: WindowClock::HostMonotonic,
            threads_ready_ns: start_ns,
            start_ns,
            end_ns,
            start_gate: None,
            settle: None,
        }
    }

    #[test]
    fn overlap_is_intersection_over_union() {
        assert_eq!(overlap(&[w(0, 100), w(0, 100)]), Ok(1.0));
        assert_eq!(overlap(&[w(0, 100), w(50, 150)]), Ok(50.0 / 150.0));
        assert_eq!(overlap(&[w(0, 100), w(100, 200)]), Ok(0.0));
        assert_eq!(overlap(&[w(0, 100), w(300, 400)]), Ok(0.0));
        // Three: all three run together only in 40..60.
        assert_eq!(
            overlap(&[w(0, 60), w(40, 100), w(20, 80)]),
            Ok(20.0 / 100.0)
        );
        assert_eq!(overlap(&[w(5, 9)]), Ok(1.0));
        assert_eq!(overlap(&[w(5, 5), w(5, 5)]), Ok(1.0));
    }

    #[test]
    fn overlap_refuses_what_it_cannot_compare() {
        assert_eq!(overlap(&[]), Err(OverlapError::Empty));
        let mut g = w(0, 10);
        g.clock = WindowClock::GuestTsc;
        assert!(matches!(
            overlap(&[w(0, 10), g]),
            Err(OverlapError::MixedClocks { .. })
        ));
        assert_eq!(overlap(&[g, g]), Err(OverlapError::GuestClock));
        assert_eq!(overlap(&[g]), Ok(1.0));
    }

    #[test]
    fn records_without_windows_are_named() {
        let mut a = crate::RunRecord::new(crate::Executor::Vm, Default::default());
        let b = a.clone();
        a.timing.window = Some(w(0, 10));
        assert_eq!(
            overlap_of_records(&[a.clone(), b]),
            Err(OverlapError::Missing { index: 1 })
        );
        assert_eq!(overlap_of_records(&[a.clone(), a]), Ok(1.0));
    }
}
