//! Latency histograms as stored in the record: summary percentiles plus the
//! non-empty buckets, so reports can redraw the distribution.

use serde::{Deserialize, Serialize};

/// A latency distribution in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LatencyHistogram {
    pub count: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    /// `(upper bound of bucket in ns, count)` for non-empty log-spaced buckets.
    #[serde(default)]
    pub buckets: Vec<(u64, u64)>,
}

impl LatencyHistogram {
    /// Summarize an HDR histogram of nanosecond values.
    pub fn from_hdr(h: &hdrhistogram::Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let buckets = h
            .iter_log(1.max(h.min()), 2.0)
            .filter(|v| v.count_since_last_iteration() > 0)
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect();
        LatencyHistogram {
            count: h.len(),
            min_ns: h.min(),
            max_ns: h.max(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            buckets,
        }
    }

    /// Summarize raw samples (nanoseconds).
    pub fn from_samples(samples: &[u64]) -> Self {
        let mut h = new_histogram();
        for &s in samples {
            h.saturating_record(s);
        }
        Self::from_hdr(&h)
    }
}

/// A histogram for nanosecond latencies from 1 ns to 1 hour, 3 significant digits.
pub fn new_histogram() -> hdrhistogram::Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts (low >= 1, high >= 2*low,
    // sigfig <= 5), so construction cannot fail.
    hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_samples() {
        let samples: Vec<u64> = (1..=1000).collect();
        let h = LatencyHistogram::from_samples(&samples);
        assert_eq!(h.count, 1000);
        assert_eq!(h.min_ns, 1);
        assert!((i64::try_from(h.p50_ns).unwrap_or(i64::MAX) - 500).abs() <= 1);
        assert!(h.max_ns >= 999);
        assert_eq!(h.buckets.iter().map(|b| b.1).sum::<u64>(), 1000);
    }

    #[test]
    fn empty_histogram_is_default() {
        assert_eq!(
            LatencyHistogram::from_samples(&[]),
            LatencyHistogram::default()
        );
    }
}
