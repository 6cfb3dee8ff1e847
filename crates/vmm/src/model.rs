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
}
