//! The thesis's scalability model (Figure 3.7, equations 5.1/5.2): Amdahl's law
//! with the parallel fraction reduced by the share of serialized exit handling.

/// Inputs of the model for one workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AmdahlInputs {
    /// Parallel fraction of the workload itself (native), 0..=1.
    pub parallel_fraction: f64,
    /// Exits per second per vCPU.
    pub exits_per_sec_per_cpu: f64,
    /// Handling time per exit in seconds.
    pub handling_secs: f64,
    /// Share of exits that serialize (synchronous requests), 0..=1.
    pub serialized_share: f64,
}

/// Speedup on `n` CPUs per eq. 5.1: P(N) = P * (1 - exit_handling(N) * share),
/// with exit_handling(N) = exits/s per CPU * handling time * N (Figure 3.7).
pub fn projected_speedup(inputs: &AmdahlInputs, n: u32) -> f64 {
    let n_f = f64::from(n.max(1));
    let exit_handling = inputs.exits_per_sec_per_cpu * inputs.handling_secs * n_f;
    let p = (inputs.parallel_fraction * (1.0 - exit_handling * inputs.serialized_share))
        .clamp(0.0, 1.0);
    1.0 / ((1.0 - p) + p / n_f)
}

/// Upper bound on the speedup when the serialized part of exit handling is one
/// server: it can complete at most 1 / handling_secs serialized requests per
/// second, so N vCPUs cannot beat `1 / (rate_1 * handling * share)` times the
/// 1-vCPU throughput, nor N. (Not in the thesis; shown next to eq. 5.1, which
/// saturates at 1x once N times the per-CPU handling share exceeds 1.)
pub fn serial_server_bound(inputs: &AmdahlInputs, n: u32) -> f64 {
    let n_f = f64::from(n.max(1));
    let load = inputs.exits_per_sec_per_cpu * inputs.handling_secs * inputs.serialized_share;
    if load <= 0.0 {
        n_f
    } else {
        n_f.min(1.0 / load).max(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_thesis_figure_3_7() {
        // Table 3.1 / Figure 3.6: 1845.4 exits/s, 2301 cycles at 2.67 GHz, 62.98 %
        // synchronous, P = 97.5 %; the thesis gets S(16) = 9.94 (I/O thread).
        let inputs = AmdahlInputs {
            parallel_fraction: 0.975,
            exits_per_sec_per_cpu: 867_341.0 / 470.0,
            handling_secs: 2301.0 / 2.67e9,
            serialized_share: 759_141.0 / (759_141.0 + 446_213.0),
        };
        let s16 = projected_speedup(&inputs, 16);
        assert!((s16 - 9.94).abs() < 0.05, "{s16}");
        let native = projected_speedup(
            &AmdahlInputs {
                serialized_share: 0.0,
                ..inputs
            },
            16,
        );
        assert!((native - 11.64).abs() < 0.05, "{native}");
        assert!((projected_speedup(&inputs, 1) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn serial_server_bound_caps_at_the_server_rate() {
        let inputs = AmdahlInputs {
            parallel_fraction: 1.0,
            exits_per_sec_per_cpu: 50_000.0,
            handling_secs: 10e-6,
            serialized_share: 1.0,
        };
        // The server is half busy with one vCPU: at most 2x.
        assert!((serial_server_bound(&inputs, 4) - 2.0).abs() < 1e-9);
        assert!((serial_server_bound(&inputs, 1) - 1.0).abs() < 1e-9);
        let bypass = AmdahlInputs {
            serialized_share: 0.0,
            ..inputs
        };
        assert!((serial_server_bound(&bypass, 3) - 3.0).abs() < 1e-9);
    }
}
