//! How many times each configuration of a spec runs: a fixed number, or
//! adaptively until the 95% interval of its median wall time is narrow.

use smplab_stats::{MedianCi, MIN_SAMPLES_FOR_95, TARGET_REL_HALF_WIDTH};

/// How many times each configuration runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Repetitions {
    /// Always at least this many (6 is the fewest for which a 95% interval of
    /// a median exists).
    pub min: u32,
    /// Never more than this many.
    pub max: u32,
    /// Stop once the interval's half-width is within this fraction of the
    /// median (0.05 = ±5%).
    pub rel_half_width: f64,
}

impl Default for Repetitions {
    /// Adaptive: at least 6, at most 20, until ±5%.
    fn default() -> Self {
        Repetitions {
            min: u32::try_from(MIN_SAMPLES_FOR_95).unwrap_or(u32::MAX),
            max: DEFAULT_MAX_REPETITIONS,
            rel_half_width: TARGET_REL_HALF_WIDTH,
        }
    }
}

/// The default maximum of adaptive repetition.
pub const DEFAULT_MAX_REPETITIONS: u32 = 20;

impl Repetitions {
    /// Exactly `n` repetitions, whatever the interval (`repetitions = N`).
    pub fn fixed(n: u32) -> Self {
        Repetitions {
            min: n,
            max: n,
            rel_half_width: TARGET_REL_HALF_WIDTH,
        }
    }

    /// Adaptive with a maximum (`repetitions = "auto"`, `max_repetitions = M`);
    /// the minimum is lowered to `max` when `max` is below 6.
    pub fn adaptive(max: u32) -> Self {
        let d = Repetitions::default();
        Repetitions {
            min: d.min.min(max),
            max,
            ..d
        }
    }

    /// Whether a configuration with `done` repetitions whose wall times have
    /// interval `ci` needs another one.
    pub fn wants_more(&self, done: u32, ci: Option<&MedianCi>) -> bool {
        if done < self.min {
            return true;
        }
        done < self.max && !ci.is_some_and(|c| c.is_narrow(self.rel_half_width))
    }
}
