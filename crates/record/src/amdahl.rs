//! Seed 004's scalability model of device-emulation synchronization, written
//! once for every crate (the simulator, the VMM's bench, the lab's report):
//! Amdahl's law with the parallel fraction reduced by the serialized share of
//! exit handling (eq. 5.1 and Figure 3.7).
//!
//! ```text
//! exit handling per CPU h = exits/s per CPU × handling time per exit   (Figure 3.6)
//! P(N)                    = P · (1 − h · N · q)                        (Figure 3.7)
//! S(N)                    = 1 / ((1 − P(N)) + P(N)/N)                  (eq. 5.1)
//! ```
//!
//! `P` is the workload's native parallel fraction and `q` the share of exits
//! that serialize (synchronous requests through a global lock or I/O thread).

use serde::{Deserialize, Serialize};

/// Amdahl's law (eq. 2.1): speedup on `n` CPUs of a program with parallel
/// fraction `p`.
pub fn amdahl(p: f64, n: f64) -> f64 {
    1.0 / ((1.0 - p) + p / n)
}

/// The parallel fraction that explains a measured speedup `s` on `n` CPUs
/// (eq. 2.1 solved for P), clamped to [0, 1]; `None` for `n ≤ 1` or `s ≤ 0`.
pub fn parallel_fraction(s: f64, n: f64) -> Option<f64> {
    if n <= 1.0 || s <= 0.0 {
        return None;
    }
    Some(((1.0 - 1.0 / s) / (1.0 - 1.0 / n)).clamp(0.0, 1.0))
}

/// Fraction of one CPU's time spent handling exits: `exits / seconds ×
/// cycles per exit / Hz` (Figure 3.6).
pub fn exit_share(exits: f64, seconds: f64, cycles_per_exit: f64, hz: f64) -> f64 {
    exits / seconds * cycles_per_exit / hz
}

/// Inputs of the projection for one workload.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AmdahlInputs {
    /// Parallel fraction of the workload natively, 0..=1.
    pub p_native: f64,
    /// Exit handling per CPU: the fraction of one CPU's time spent handling
    /// exits (exits/s per CPU × handling seconds per exit).
    pub exit_handling_per_cpu: f64,
    /// Share of exits that serialize, 0..=1.
    pub sync_share: f64,
}

impl AmdahlInputs {
    /// Inputs from an exit rate per CPU and a handling time per exit.
    pub fn from_exit_rate(
        p_native: f64,
        exits_per_sec_per_cpu: f64,
        handling_secs: f64,
        sync_share: f64,
    ) -> Self {
        AmdahlInputs {
            p_native,
            exit_handling_per_cpu: exits_per_sec_per_cpu * handling_secs,
            sync_share,
        }
    }

    /// Figure 3.7: the parallel fraction left on `n` CPUs. The serialized
    /// load saturates at one whole CPU (the model has no meaning beyond).
    pub fn p_at(&self, n: f64) -> f64 {
        (self.p_native * (1.0 - (self.exit_handling_per_cpu * n * self.sync_share).min(1.0)))
            .clamp(0.0, 1.0)
    }

    /// Eq. 5.1: projected speedup on `n` CPUs.
    pub fn projected(&self, n: f64) -> f64 {
        let n = n.max(1.0);
        amdahl(self.p_at(n), n)
    }

    /// The native bound: Amdahl's law with `P` alone.
    pub fn native(&self, n: f64) -> f64 {
        amdahl(self.p_native, n.max(1.0))
    }

    /// Upper bound on the speedup when the serialized part of exit handling is
    /// one server: it completes at most `1 / handling` serialized requests per
    /// second, so `n` CPUs cannot beat `1 / (h · q)` times one CPU's
    /// throughput, nor `n`. (Not in the thesis; shown beside eq. 5.1, which
    /// saturates at 1× once `h · n · q` reaches 1.)
    pub fn serial_server_bound(&self, n: f64) -> f64 {
        let n = n.max(1.0);
        let load = self.exit_handling_per_cpu * self.sync_share;
        if load <= 0.0 {
            n
        } else {
            n.min(1.0 / load).max(1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(x: f64, digits: i32) -> f64 {
        let m = 10f64.powi(digits);
        (x * m).round() / m
    }

    /// Figure 3.7 of the Seoul thesis, reproduced from Table 3.1's raw numbers.
    #[test]
    fn figure_3_7() {
        // Figure 3.6: 867341 exits in 470 s at 2301 cycles each, 2.67 GHz.
        let per_cpu = exit_share(867_341.0, 470.0, 2301.0, 2.67e9);
        assert_eq!(round(per_cpu * 100.0, 3), 0.159);
        // The figure rounds the per-CPU share to 0.159% before multiplying.
        let per_cpu = 0.00159;
        assert_eq!(round(per_cpu * 16.0 * 100.0, 2), 2.54);
        let sync = 759_141.0 / (759_141.0 + 446_213.0);
        assert_eq!(round(sync * 100.0, 2), 62.98);
        let i = AmdahlInputs {
            p_native: 0.975,
            exit_handling_per_cpu: per_cpu,
            sync_share: sync,
        };
        assert_eq!(round(i.p_at(16.0) * 100.0, 2), 95.94);
        assert_eq!(round(i.projected(16.0), 2), 9.94);
        assert_eq!(round(i.native(16.0), 2), 11.64);
        assert_eq!(round(amdahl(0.975, 16.0), 2), 11.64);
        // The figure computes the loss from the rounded speedups.
        let loss = 1.0 - round(i.projected(16.0), 2) / round(i.native(16.0), 2);
        assert_eq!(round(loss * 100.0, 1), 14.6);
        assert!((i.projected(1.0) - 1.0).abs() < 1e-12);
        // From the raw rate and cycle count the projection agrees to 0.05.
        let raw = AmdahlInputs::from_exit_rate(0.975, 867_341.0 / 470.0, 2301.0 / 2.67e9, sync);
        assert!((raw.projected(16.0) - 9.94).abs() < 0.05);
    }

    #[test]
    fn parallel_fraction_inverts_amdahl() {
        let p = parallel_fraction(amdahl(0.9, 4.0), 4.0).unwrap();
        assert!((p - 0.9).abs() < 1e-12);
        assert!(parallel_fraction(2.0, 1.0).is_none());
        assert_eq!(parallel_fraction(10.0, 2.0), Some(1.0));
    }

    #[test]
    fn serial_server_bound_caps_at_the_server_rate() {
        // The server is half busy with one CPU: at most 2×.
        let i = AmdahlInputs::from_exit_rate(1.0, 50_000.0, 10e-6, 1.0);
        assert!((i.serial_server_bound(4.0) - 2.0).abs() < 1e-9);
        assert!((i.serial_server_bound(1.0) - 1.0).abs() < 1e-9);
        let bypass = AmdahlInputs {
            sync_share: 0.0,
            ..i
        };
        assert!((bypass.serial_server_bound(3.0) - 3.0).abs() < 1e-9);
        // Saturated: the projection falls to 1× (P(N) = 0), never below.
        assert!((i.projected(4.0) - 1.0).abs() < 1e-9);
    }
}
