//! What other tenants took from this host while a run was measured: the
//! hypervisor's steal time (`/proc/stat`, the `cpu` line's 8th column) and
//! the kernel's CPU pressure (`/proc/pressure/cpu`, `some total`). Read at the
//! start and the end of a measured window; the difference is stored with the
//! repetition so a run disturbed from outside can be told apart from a slow
//! configuration. On a shared cloud VM steal moves during runs (a native run of
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
        let pressure_some_us = std::fs::read_to_string("/proc/pressure/cpu")
            .ok()
            .and_then(|t| parse_pressure_some_total(&t));
        Some(HostCounters {
            total_ticks,
            steal_ticks,
            pressure_some_us,
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
        Interference {
            steal_fraction: if total == 0 {
                0.0
            } else {
                steal as f64 / total as f64
            },
            cpu_pressure_fraction,
            window_s: window.as_secs_f64(),
        }
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
        assert!(!Interference::default().is_disturbed(DEFAULT_STEAL_THRESHOLD));
        let disturbed = Interference {
            steal_fraction: 0.2,
            ..Interference::default()
        };
        assert!(disturbed.is_disturbed(DEFAULT_STEAL_THRESHOLD));
    }
}
