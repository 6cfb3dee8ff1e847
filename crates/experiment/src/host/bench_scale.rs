//! Each workload profile's scale in `smplab host bench`: long enough that
//! one 2-vCPU VM alone on the two host CPUs runs its workload for at least
//! [`MIN_ALONE_MS`] (shorter runs measure start-up and sampling phase more
//! than scheduling), short enough that a bench of every policy stays
//! minutes. `--scale` overrides it for every workload; the bench warns when
//! that makes a run shorter than [`MIN_ALONE_MS`] here.
//!
//! `alone_ms_at_1` is the workload wall of one VM alone under `linux` at
//! scale 1 on the 2-core development host (docs/host.md, "Bench scales"):
//! the shortest of 2–4 runs on a host loaded by builds (load 8–9), so a
//! quiet host's runs are no longer. The scale is chosen so the
//! estimate is 130–300 ms; every profile's work grows in proportion to its
//! scale.

/// The shortest workload wall of one VM alone that a host bench counts as
/// meaningful (ms).
pub const MIN_ALONE_MS: f64 = 100.0;

/// A profile's default scale in the host bench and its measured length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchScale {
    pub workload: &'static str,
    pub scale: f64,
    /// One VM alone under `linux` at scale 1 (ms), as measured.
    pub alone_ms_at_1: f64,
}

/// Scale of a workload the table does not name (a profile file).
pub const UNKNOWN_WORKLOAD_SCALE: f64 = 1.0;

/// Every built-in profile's host-bench scale.
pub const BENCH_SCALES: &[BenchScale] = &[
    BenchScale {
        workload: "spinlock",
        scale: 2.0,
        alone_ms_at_1: 119.0,
    },
    // Per unit of scale from 6 runs at scale 4 (96–184 ms, load 5–7): at
    // scale 1 its fixed start-up dominates (43 ms), and scale 4 fell under
    // 100 ms in 1 run of 6.
    BenchScale {
        workload: "streamcluster",
        scale: 8.0,
        alone_ms_at_1: 24.0,
    },
    BenchScale {
        workload: "dedup",
        scale: 0.5,
        alone_ms_at_1: 288.0,
    },
    BenchScale {
        workload: "blackscholes",
        scale: 1.5,
        alone_ms_at_1: 123.0,
    },
    BenchScale {
        workload: "canneal",
        scale: 6.0,
        alone_ms_at_1: 26.0,
    },
    BenchScale {
        workload: "fluidanimate",
        scale: 6.0,
        alone_ms_at_1: 26.0,
    },
    BenchScale {
        workload: "ocean_ncp",
        scale: 1.0,
        alone_ms_at_1: 176.0,
    },
    BenchScale {
        workload: "vips",
        scale: 2.0,
        alone_ms_at_1: 70.0,
    },
    BenchScale {
        workload: "volrend",
        scale: 8.0,
        alone_ms_at_1: 18.0,
    },
    BenchScale {
        workload: "shootdown",
        scale: 1.0,
        alone_ms_at_1: 187.0,
    },
    BenchScale {
        workload: "oltp",
        scale: 1.0,
        alone_ms_at_1: 260.0,
    },
    BenchScale {
        workload: "phases",
        scale: 1.0,
        alone_ms_at_1: 270.0,
    },
];

fn entry(workload: &str) -> Option<&'static BenchScale> {
    BENCH_SCALES.iter().find(|b| b.workload == workload)
}

/// `workload`'s default scale in the host bench.
pub fn bench_scale(workload: &str) -> f64 {
    entry(workload).map_or(UNKNOWN_WORKLOAD_SCALE, |b| b.scale)
}

/// The expected workload wall of one VM alone at `scale` (ms), for a
/// profile the table names.
pub fn expected_alone_ms(workload: &str, scale: f64) -> Option<f64> {
    entry(workload).map(|b| b.alone_ms_at_1 * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_in_profile_has_a_scale_that_runs_long_enough() {
        for name in smplab_workload::builtin::names() {
            let ms = expected_alone_ms(name, bench_scale(name))
                .unwrap_or_else(|| panic!("{name} has no host-bench scale"));
            assert!((MIN_ALONE_MS..=400.0).contains(&ms), "{name}: {ms} ms");
        }
        assert_eq!(bench_scale("my-profile.toml"), UNKNOWN_WORKLOAD_SCALE);
        assert_eq!(expected_alone_ms("my-profile.toml", 1.0), None);
        assert_eq!(expected_alone_ms("dedup", 1.0), Some(288.0));
    }
}
