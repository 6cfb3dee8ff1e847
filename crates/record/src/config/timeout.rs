//! The one timeout type every command takes (`--timeout`) and every spec
//! stores (`timeout`): how long one run may take before it is stopped.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How long one run may take when nobody says: long enough for the largest
/// built-in profile at scale 1 in a VM on the slow nested host, short
/// enough that a hung guest does not hold a sweep for long.
pub const DEFAULT_TIMEOUT: Timeout = Timeout(Duration::from_secs(300));

/// A positive run time limit. Printed and parsed as `30s`, `500ms`,
/// `100us`; a bare number is seconds (`--timeout 30`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timeout(Duration);

/// A malformed or zero timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadTimeout {
    #[error("bad timeout `{0}`: write e.g. 30s, 500ms, or a number of seconds")]
    Syntax(String),
    #[error("a timeout of `{0}` would stop every run at once: give a positive time, e.g. 30s")]
    Zero(String),
}

impl Timeout {
    /// A timeout of `d`, refused when zero.
    pub fn new(d: Duration) -> Result<Timeout, BadTimeout> {
        if d.is_zero() {
            Err(BadTimeout::Zero(format!("{d:?}")))
        } else {
            Ok(Timeout(d))
        }
    }

    /// `secs` whole seconds (`secs` > 0).
    pub fn from_secs(secs: u64) -> Result<Timeout, BadTimeout> {
        Timeout::new(Duration::from_secs(secs))
    }

    pub fn duration(self) -> Duration {
        self.0
    }
}

impl Default for Timeout {
    fn default() -> Timeout {
        DEFAULT_TIMEOUT
    }
}

impl From<Timeout> for Duration {
    fn from(t: Timeout) -> Duration {
        t.0
    }
}

impl FromStr for Timeout {
    type Err = BadTimeout;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let ns = if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            // A bare number is seconds: what a user means by `--timeout 30`.
            super::parse_duration(&format!("{t}s"))
        } else {
            super::parse_duration(t)
        }
        .map_err(|_| BadTimeout::Syntax(s.to_string()))?;
        if ns == 0 {
            return Err(BadTimeout::Zero(s.to_string()));
        }
        Ok(Timeout(Duration::from_nanos(ns)))
    }
}

impl fmt::Display for Timeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() == 0 {
            write!(f, "{}s", d.as_secs())
        } else if d.as_nanos().is_multiple_of(1_000_000) {
            write!(f, "{}ms", d.as_millis())
        } else if d.as_nanos().is_multiple_of(1000) {
            write!(f, "{}us", d.as_micros())
        } else {
            write!(f, "{}ns", d.as_nanos())
        }
    }
}

serde_as_string!(Timeout);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_numbers_are_seconds_and_units_are_read() {
        assert_eq!(
            "30".parse::<Timeout>().unwrap().duration(),
            Duration::from_secs(30)
        );
        assert_eq!(
            "1.5".parse::<Timeout>().unwrap().duration(),
            Duration::from_millis(1500)
        );
        assert_eq!(
            "500ms".parse::<Timeout>().unwrap().duration(),
            Duration::from_millis(500)
        );
        assert_eq!("2s".parse::<Timeout>().unwrap().to_string(), "2s");
        assert_eq!("1500ms".parse::<Timeout>().unwrap().to_string(), "1500ms");
    }

    #[test]
    fn zero_and_garbage_are_refused() {
        assert!(matches!("0".parse::<Timeout>(), Err(BadTimeout::Zero(_))));
        assert!(matches!("0ms".parse::<Timeout>(), Err(BadTimeout::Zero(_))));
        assert!(matches!(
            "soon".parse::<Timeout>(),
            Err(BadTimeout::Syntax(_))
        ));
        assert!(matches!(
            "-1".parse::<Timeout>(),
            Err(BadTimeout::Syntax(_))
        ));
        assert!(Timeout::new(Duration::ZERO).is_err());
    }

    #[test]
    fn round_trips_through_its_printed_form() {
        for s in ["1s", "300s", "250ms", "7us", "9ns"] {
            let t: Timeout = s.parse().unwrap();
            assert_eq!(t.to_string(), s);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(serde_json::from_str::<Timeout>(&json).unwrap(), t);
        }
        assert_eq!(DEFAULT_TIMEOUT.to_string(), "300s");
    }
}
