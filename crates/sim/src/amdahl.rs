//! Seed 004's scalability model of device-emulation synchronization (Amdahl's
//! law with a parallel fraction reduced by serialized exit handling), eq. 5.1
//! and Figure 3.7:
//!
//! ```text
//! exit handling        = exits/s × exit cycles / CPU Hz × N
//! parallel fraction    = P × (1 − exit handling × synchronous share)
//! S(N)                 = 1 / ((1 − P') + P'/N)
//! ```

/// Amdahl's law: speedup on `n` CPUs of a program with parallel fraction `p`.
pub fn amdahl(p: f64, n: f64) -> f64 {
    1.0 / ((1.0 - p) + p / n)
}

/// Parallel fraction left when an I/O thread serializes the synchronous share
/// of exit handling (Figure 3.7). `exit_share_per_cpu`: fraction of one CPU's
/// time spent handling exits (0.159% in seed 004); `sync_share`: fraction of
/// requests that are synchronous (62.98%).
pub fn io_thread_parallel_fraction(
    p: f64,
    n: f64,
    exit_share_per_cpu: f64,
    sync_share: f64,
) -> f64 {
    p * (1.0 - exit_share_per_cpu * n * sync_share)
}

/// Eq. 5.1: projected speedup of the I/O thread design on `n` CPUs.
pub fn speedup(p: f64, n: f64, exit_share_per_cpu: f64, sync_share: f64) -> f64 {
    amdahl(
        io_thread_parallel_fraction(p, n, exit_share_per_cpu, sync_share),
        n,
    )
}

/// Fraction of one CPU's time spent in exit handling: `exits / seconds ×
/// cycles per exit / Hz` (Figure 3.6).
pub fn exit_share(exits: f64, seconds: f64, cycles_per_exit: f64, hz: f64) -> f64 {
    exits / seconds * cycles_per_exit / hz
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(x: f64, digits: i32) -> f64 {
        let m = 10f64.powi(digits);
        (x * m).round() / m
    }

    /// Figure 3.7 of seed 004, reproduced from Table 3.1's raw numbers.
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
        let p = io_thread_parallel_fraction(0.975, 16.0, per_cpu, sync);
        assert_eq!(round(p * 100.0, 2), 95.94);
        let io = speedup(0.975, 16.0, per_cpu, sync);
        let native = amdahl(0.975, 16.0);
        assert_eq!(round(io, 2), 9.94);
        assert_eq!(round(native, 2), 11.64);
        // The figure computes the loss from the rounded speedups.
        let loss = 1.0 - round(io, 2) / round(native, 2);
        assert_eq!(round(loss * 100.0, 1), 14.6);
    }
}
