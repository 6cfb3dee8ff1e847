//! Confidence intervals for medians of repeated measurements, and the
//! "is this difference outside the noise" test every report and diagnosis uses.
//!
//! The interval is distribution-free: for `n` sorted samples the 95% interval
//! of the median is `[x(j), x(k)]` with `j`, `k` the order statistics whose
//! binomial(n, 1/2) coverage first reaches 95% (the classic sign-test
//! interval, e.g. Conover, *Practical Nonparametric Statistics*, §3.2). Run
//! times are skewed (interference only ever adds time), so no normality is
//! assumed. With fewer than 6 samples no pair of order statistics reaches 95%;
//! the interval is then the full range and [`MedianCi::coverage`] says what it
//! covers.

use serde::{Deserialize, Serialize};

/// Target relative half-width of a measured point's interval: ±5% of the
/// median: the project's rule for every measured point (docs/lab.md,
/// "Experiment specs": adaptive repetitions).
pub const TARGET_REL_HALF_WIDTH: f64 = 0.05;

/// The median of some samples with its confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MedianCi {
    pub median: f64,
    /// Lower end of the interval.
    pub lo: f64,
    /// Upper end of the interval.
    pub hi: f64,
    /// Samples.
    pub n: usize,
    /// Probability that `[lo, hi]` holds the true median (≥ 0.95 when n ≥ 6).
    pub coverage: f64,
}

impl MedianCi {
    /// The interval of the median of `samples` (NaNs are ignored). `None` for
    /// no samples.
    pub fn of(samples: &[f64]) -> Option<MedianCi> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = median_of_sorted(&v);
        let (j, coverage) = order_statistic_index(n, 0.95);
        Some(MedianCi {
            median,
            lo: v[j],
            hi: v[n - 1 - j],
            n,
            coverage,
        })
    }

    /// Half the interval's width relative to the median (∞ for a zero median
    /// with a non-zero width).
    pub fn rel_half_width(&self) -> f64 {
        let half = (self.hi - self.lo) / 2.0;
        if half == 0.0 {
            0.0
        } else if self.median == 0.0 {
            f64::INFINITY
        } else {
            half / self.median.abs()
        }
    }

    /// The interval reaches 95% coverage and is within ±`rel` of the median.
    pub fn is_narrow(&self, rel: f64) -> bool {
        self.coverage >= 0.95 && self.rel_half_width() <= rel
    }

    /// The two intervals do not overlap: the difference of the medians is
    /// outside the noise of either measurement.
    pub fn differs_from(&self, other: &MedianCi) -> bool {
        self.hi < other.lo || other.hi < self.lo
    }

    /// `median [lo–hi]` with `digits` decimals, for tables.
    pub fn display(&self, digits: usize) -> String {
        format!(
            "{:.d$} [{:.d$}–{:.d$}]",
            self.median,
            self.lo,
            self.hi,
            d = digits
        )
    }
}

/// The median of `samples` (NaNs ignored; the mean of the two middle values
/// for an even count); `None` for no samples. The one median every table uses.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(median_of_sorted(&v))
}

/// The median of sorted, non-empty `v`.
pub fn median_of_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The largest 0-based `j` such that `[x(j), x(n-1-j)]` covers the median with
/// probability ≥ `level`, and that coverage; `(0, coverage of the range)` when
/// even the full range falls short.
fn order_statistic_index(n: usize, level: f64) -> (usize, f64) {
    // coverage(j) = 1 - 2 * P(Bin(n, 1/2) <= j)
    let mut cdf = Vec::with_capacity(n + 1);
    let mut p = 0.5f64.powi(i32::try_from(n).unwrap_or(i32::MAX));
    let mut acc = 0.0;
    for k in 0..=n {
        acc += p;
        cdf.push(acc);
        // P(k+1) = P(k) * (n-k)/(k+1)
        p = p * (n - k) as f64 / (k + 1) as f64;
    }
    let coverage = |j: usize| 1.0 - 2.0 * cdf[j];
    let mut best = (0, coverage(0));
    for j in 0..n / 2 {
        let c = coverage(j);
        if c >= level {
            best = (j, c);
        } else {
            break;
        }
    }
    best
}

/// Samples needed before a 95% interval exists at all.
pub const MIN_SAMPLES_FOR_95: usize = 6;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_order_statistics() {
        // n = 6: [x(0), x(5)] covers 1 - 2/64 = 0.969.
        let (j, c) = order_statistic_index(6, 0.95);
        assert_eq!(j, 0);
        assert!((c - 0.96875).abs() < 1e-9);
        // n = 10: [x(1), x(8)] covers 0.9785.
        let (j, c) = order_statistic_index(10, 0.95);
        assert_eq!(j, 1);
        assert!((c - 0.978515625).abs() < 1e-9);
        // n = 5: the range covers only 0.9375.
        let (j, c) = order_statistic_index(5, 0.95);
        assert_eq!(j, 0);
        assert!(c < 0.95);
    }

    #[test]
    fn interval_contains_median_and_narrowness() {
        let ci = MedianCi::of(&[10.0, 10.1, 9.9, 10.05, 9.95, 10.02]).unwrap();
        assert!(ci.lo <= ci.median && ci.median <= ci.hi);
        assert!(ci.is_narrow(TARGET_REL_HALF_WIDTH));
        let wide = MedianCi::of(&[10.0, 14.0, 9.0, 10.0, 6.0, 10.0]).unwrap();
        assert!(!wide.is_narrow(TARGET_REL_HALF_WIDTH));
        let few = MedianCi::of(&[10.0, 10.0, 10.0]).unwrap();
        assert!(
            !few.is_narrow(TARGET_REL_HALF_WIDTH),
            "3 samples never reach 95%"
        );
    }

    #[test]
    fn differs_only_outside_noise() {
        let a = MedianCi::of(&[1.0, 1.1, 1.05, 0.95, 1.0, 1.02]).unwrap();
        let b = MedianCi::of(&[1.04, 1.2, 1.1, 1.0, 1.08, 1.06]).unwrap();
        let c = MedianCi::of(&[2.0, 2.1, 2.05, 1.95, 2.0, 2.02]).unwrap();
        assert!(!a.differs_from(&b));
        assert!(a.differs_from(&c));
        assert!(MedianCi::of(&[]).is_none());
        assert!(MedianCi::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn median_is_the_middle_or_the_mean_of_the_two_middles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&[]), None);
        assert_eq!(
            median(&[1.0, 9.0, 2.0, 7.0]),
            MedianCi::of(&[1.0, 9.0, 2.0, 7.0]).map(|c| c.median)
        );
    }
}

/// The interval of the median of per-pair ratios `b / a` of interleaved
/// pairs `(a, b)` (a baseline run, then its variant, back to back). Pairing
/// cancels the slow drift of a shared host (another tenant's load lasts
/// longer than one pair), which two independent intervals cannot: their
/// widths add the drift twice. Pairs with a non-positive or NaN baseline are
/// dropped. `None` when no pair is left.
pub fn paired_ratio(pairs: &[(f64, f64)]) -> Option<MedianCi> {
    let ratios: Vec<f64> = pairs
        .iter()
        .filter(|(a, b)| *a > 0.0 && a.is_finite() && b.is_finite())
        .map(|(a, b)| b / a)
        .collect();
    MedianCi::of(&ratios)
}

impl MedianCi {
    /// The interval reaches 95% coverage and does not hold `x`: for a paired
    /// ratio, `excludes(1.0)` is "the difference is outside the noise".
    pub fn excludes(&self, x: f64) -> bool {
        self.coverage >= 0.95 && (x < self.lo || x > self.hi)
    }
}

#[cfg(test)]
mod paired_tests {
    use super::*;

    #[test]
    fn paired_ratio_cancels_a_shared_drift() {
        // The host slows down 2x halfway; every variant is 10% slower than its
        // baseline. Independent intervals overlap; the paired one does not.
        let pairs: Vec<(f64, f64)> = (0..8)
            .map(|i| {
                let drift = if i < 4 { 1.0 } else { 2.0 };
                (100.0 * drift, 110.0 * drift)
            })
            .collect();
        let a = MedianCi::of(&pairs.iter().map(|p| p.0).collect::<Vec<_>>()).unwrap();
        let b = MedianCi::of(&pairs.iter().map(|p| p.1).collect::<Vec<_>>()).unwrap();
        assert!(!a.differs_from(&b));
        let r = paired_ratio(&pairs).unwrap();
        assert!((r.median - 1.1).abs() < 1e-12);
        assert!(r.excludes(1.0));
    }

    #[test]
    fn paired_ratio_drops_bad_baselines_and_needs_coverage() {
        assert!(paired_ratio(&[(0.0, 1.0), (f64::NAN, 1.0)]).is_none());
        let r = paired_ratio(&[(1.0, 1.2), (1.0, 1.3)]).unwrap();
        // Two pairs cannot reach 95% coverage: nothing is excluded.
        assert!(!r.excludes(1.0));
    }
}
