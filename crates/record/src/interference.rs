//! What other tenants took from this host while a run was measured: the
//! hypervisor's steal time (`/proc/stat`, the `cpu` line's 8th column) and
//! the kernel's CPU pressure (`/proc/pressure/cpu`, `some total`) and the CPU
//! time other processes on this host used (`/proc/stat`'s busy columns minus
//! this process's own `getrusage`). Read at the start and the end of a
//! measured window; the difference is stored with the repetition
//! (`RunRecord::interference`) so a run disturbed from outside can be told
//! apart from a slow configuration. On a shared cloud VM steal moves during runs (a native run of
//! the same work varies by 1.5x with the same CPU time); on bare metal it
//! stays 0.

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Steal above this share of the window's CPU time marks a repetition as
/// disturbed: 5%, the same as the ±5% half-width every measured point aims
/// for (docs/lab.md, "Experiment specs"), so a disturbed repetition alone can
/// move a point by more than its target noise.
pub const DEFAULT_STEAL_THRESHOLD: f64 = 0.05;

/// Host-wide counters at one instant.
#[derive(Debug, Clone, Copy)]
pub struct HostCounters {
    /// Sum of the `cpu` line's columns (all CPUs), in clock ticks.
    total_ticks: u64,
    /// The `cpu` line's steal column, in clock ticks.
    steal_ticks: u64,
    /// `/proc/pressure/cpu` `some total=` in µs, when PSI is enabled.
    pressure_some_us: Option<u64>,
    /// The `cpu` line's busy columns (user, nice, system, irq, softirq), in
    /// clock ticks: every process's CPU time, this one's included.
    busy_ticks: u64,
    /// CPU time of this process and its waited-for children (QEMU), in µs.
    own_cpu_us: Option<u64>,
    at: Instant,
}

/// The interference measured over one window.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Interference {
    /// Steal time over all CPU time of the window (0..1).
    pub steal_fraction: f64,
    /// Share of the window in which some runnable task waited for a CPU
    /// (0..1). Counts this run's own threads too, so it is context, not a
    /// verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pressure_fraction: Option<f64>,
    /// The window's wall length in seconds.
    pub window_s: f64,
    /// Share of all CPUs' time in the window that other processes on this
    /// host used (0..1): another tenant's build on a shared machine. Context,
    /// not a verdict (`/proc/stat` counts in 10 ms ticks: coarse for short
    /// windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpu_fraction: Option<f64>,
}

impl Interference {
    /// Steal exceeds `threshold`: the repetition was disturbed from outside.
    pub fn is_disturbed(&self, threshold: f64) -> bool {
        self.steal_fraction > threshold
    }
}

impl HostCounters {
    /// Reads the counters now; `None` where `/proc/stat` is unreadable.
    pub fn read() -> Option<HostCounters> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let (total_ticks, steal_ticks) = parse_cpu_line(&stat)?;
        let busy_ticks = parse_busy_ticks(&stat).unwrap_or(0);
        let pressure_some_us = std::fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|t| parse_pressure_some_total(&t));
        Some(HostCounters {
            total_ticks,
            steal_ticks,
            pressure_some_us,
            busy_ticks,
            own_cpu_us: own_cpu_us(),
            at: Instant::now(),
        })
    }

    /// The interference between `self` (start) and `end`.
    pub fn until(&self, end: &HostCounters) -> Interference {
        let total = end.total_ticks.saturating_sub(self.total_ticks);
        let steal = end.steal_ticks.saturating_sub(self.steal_ticks);
        let window = end.at.saturating_duration_since(self.at);
        let window_us = window.as_secs_f64() * 1e6;
        let cpu_pressure_fraction = match (self.pressure_some_us, end.pressure_some_us) {
            (Some(a), Some(b)) if window_us > 0.0 => {
                Some((b.saturating_sub(a) as f64 / window_us).min(1.0))
            }
            _ => None,
        };
        let other_cpu_fraction = match (self.own_cpu_us, end.own_cpu_us, clock_ticks_per_s()) {
            (Some(a), Some(b), Some(hz)) if total > 0 => {
                let busy_s = end.busy_ticks.saturating_sub(self.busy_ticks) as f64 / hz;
                let own_s = b.saturating_sub(a) as f64 / 1e6;
                let total_s = total as f64 / hz;
                Some(((busy_s - own_s) / total_s).clamp(0.0, 1.0))
            }
            _ => None,
        };
        Interference {
            steal_fraction: if total == 0 {
                0.0
            } else {
                steal as f64 / total as f64
            },
            cpu_pressure_fraction,
            window_s: window.as_secs_f64(),
            other_cpu_fraction,
        }
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/stat`.
fn clock_ticks_per_s() -> Option<f64> {
    // SAFETY: sysconf reads a constant of the C library; no memory is passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    // Casts: a tick rate is a small positive integer (100 on Linux).
    #[allow(clippy::cast_precision_loss)]
    (hz > 0).then_some(hz as f64)
}

/// CPU time (user + system) of this process and its waited-for children, µs.
fn own_cpu_us() -> Option<u64> {
    let mut total = 0u64;
    for who in [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN] {
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage writes one rusage through a valid pointer to a local.
        if unsafe { libc::getrusage(who, &mut ru) } != 0 {
            return None;
        }
        for tv in [ru.ru_utime, ru.ru_stime] {
            let us = u64::try_from(tv.tv_sec)
                .ok()?
                .saturating_mul(1_000_000)
                .saturating_add(u64::try_from(tv.tv_usec).ok()?);
            total = total.saturating_add(us);
        }
    }
    Some(total)
}

/// The steal threshold above which a repetition is disturbed: a fraction of
/// the window's CPU time in (0, 1]; 1 turns the filter off (steal never
/// exceeds all of the time). One type for the flag (`--steal-threshold`), the
/// sweep and the store.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct StealThreshold(f64);

impl Default for StealThreshold {
    fn default() -> Self {
        StealThreshold(DEFAULT_STEAL_THRESHOLD)
    }
}

/// A steal threshold outside (0, 1].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("steal threshold `{0}`: give a fraction of the run's CPU time in (0, 1], e.g. 0.05 (1 keeps every repetition)")]
pub struct BadStealThreshold(pub String);

impl StealThreshold {
    /// Keeps every repetition, however much was stolen.
    pub const OFF: StealThreshold = StealThreshold(1.0);

    pub fn new(fraction: f64) -> Result<Self, BadStealThreshold> {
        if fraction.is_finite() && fraction > 0.0 && fraction <= 1.0 {
            Ok(StealThreshold(fraction))
        } else {
            Err(BadStealThreshold(fraction.to_string()))
        }
    }

    pub fn fraction(self) -> f64 {
        self.0
    }

    /// The filter is on (below 1).
    pub fn is_on(self) -> bool {
        self.0 < 1.0
    }

    /// Whether `records` (one repetition) were disturbed: some record's steal
    /// exceeds the threshold. Records without interference (the simulator,
    /// old records) are not.
    pub fn disturbs<'a>(
        self,
        interference: impl IntoIterator<Item = Option<&'a Interference>>,
    ) -> bool {
        self.is_on()
            && interference
                .into_iter()
                .flatten()
                .any(|i| i.is_disturbed(self.0))
    }
}

impl TryFrom<f64> for StealThreshold {
    type Error = BadStealThreshold;
    fn try_from(x: f64) -> Result<Self, Self::Error> {
        StealThreshold::new(x)
    }
}

impl From<StealThreshold> for f64 {
    fn from(t: StealThreshold) -> f64 {
        t.0
    }
}

impl std::str::FromStr for StealThreshold {
    type Err = BadStealThreshold;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let x: f64 = s
            .trim()
            .parse()
            .map_err(|_| BadStealThreshold(s.to_string()))?;
        StealThreshold::new(x).map_err(|_| BadStealThreshold(s.to_string()))
    }
}

impl std::fmt::Display for StealThreshold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// `(sum of all columns, steal column)` of `/proc/stat`'s aggregate `cpu` line.
fn parse_cpu_line(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let cols: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal guest guest_nice: guest
    // time is already counted in user/nice, so it is not added again.
    let steal = *cols.get(7)?;
    let total = cols.iter().take(8).sum();
    Some((total, steal))
}

/// The busy columns (user, nice, system, irq, softirq) of `/proc/stat`'s
/// aggregate `cpu` line, in clock ticks.
fn parse_busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let cols: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    Some([0, 1, 2, 5, 6].iter().filter_map(|&i| cols.get(i)).sum())
}

fn parse_pressure_some_total(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with("some "))?
        .split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_cpu_line_without_counting_guest_twice() {
        let stat = "cpu  100 0 50 800 10 0 5 35 70 0\ncpu0 1 2 3\n";
        assert_eq!(parse_cpu_line(stat), Some((1000, 35)));
        assert_eq!(parse_cpu_line("intr 1 2\n"), None);
        assert_eq!(parse_busy_ticks(stat), Some(155));
    }

    /// 2 CPUs for 1 s at 100 ticks/s: 200 ticks, 10 of them stolen, 150
    /// busy, of which this process used 0.5 s: others used 1.0 of 2.0 s.
    #[test]
    fn other_processes_share_is_busy_time_minus_our_own() {
        let at = Instant::now();
        let a = HostCounters {
            total_ticks: 1000,
            steal_ticks: 5,
            pressure_some_us: Some(0),
            busy_ticks: 300,
            own_cpu_us: Some(2_000_000),
            at,
        };
        let b = HostCounters {
            total_ticks: 1200,
            steal_ticks: 15,
            pressure_some_us: Some(250_000),
            busy_ticks: 450,
            own_cpu_us: Some(2_500_000),
            at: at + std::time::Duration::from_secs(1),
        };
        let i = a.until(&b);
        assert!((i.steal_fraction - 0.05).abs() < 1e-12);
        assert!((i.cpu_pressure_fraction.unwrap() - 0.25).abs() < 1e-9);
        if clock_ticks_per_s() == Some(100.0) {
            assert!((i.other_cpu_fraction.unwrap() - 0.5).abs() < 1e-9, "{i:?}");
        }
        assert_eq!(a.until(&a).other_cpu_fraction, None, "no tick: unknown");
    }

    #[test]
    fn steal_threshold_is_validated_and_one_turns_it_off() {
        assert_eq!("0.1".parse::<StealThreshold>().unwrap().fraction(), 0.1);
        for bad in ["0", "-0.1", "1.5", "NaN", "x", ""] {
            let e = bad.parse::<StealThreshold>().unwrap_err();
            assert!(e.to_string().contains("(0, 1]"), "{bad}: {e}");
        }
        let stolen = Interference {
            steal_fraction: 0.2,
            ..Interference::default()
        };
        assert!(StealThreshold::default().disturbs([Some(&stolen), None]));
        assert!(!StealThreshold::OFF.disturbs([Some(&stolen)]));
        assert!(!StealThreshold::default().disturbs([None]));
        let back: StealThreshold = serde_json::from_str("0.25").unwrap();
        assert_eq!(back.fraction(), 0.25);
        assert!(serde_json::from_str::<StealThreshold>("2").is_err());
    }

    #[test]
    fn parses_pressure() {
        let t = "some avg10=3.93 avg60=9.38 avg300=10.46 total=4317150344\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure_some_total(t), Some(4_317_150_344));
    }

    #[test]
    fn a_window_on_this_host_is_in_range() {
        let a = HostCounters::read().expect("/proc/stat readable on Linux");
        let x: u64 = (0..2_000_000u64).fold(0, |s, i| s.wrapping_add(i * i));
        std::hint::black_box(x);
        let b = HostCounters::read().expect("/proc/stat readable on Linux");
        let i = a.until(&b);
        assert!((0.0..=1.0).contains(&i.steal_fraction));
        assert!(i.window_s >= 0.0);
        // No clock tick may have passed in so short a window: then unknown.
        assert!(i
            .other_cpu_fraction
            .is_none_or(|f| (0.0..=1.0).contains(&f)));
        assert!(!Interference::default().is_disturbed(DEFAULT_STEAL_THRESHOLD));
        let disturbed = Interference {
            steal_fraction: 0.2,
            ..Interference::default()
        };
        assert!(disturbed.is_disturbed(DEFAULT_STEAL_THRESHOLD));
    }
}
