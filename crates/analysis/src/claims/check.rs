//! `smplab claims check`: recompute every deterministic figure and compare
//! it with the value the ledger states.

use super::figures::{self, FigureError};
use super::ledger::{Claim, Ledger};
use std::fmt::Write as _;

/// One recomputed claim.
#[derive(Debug)]
pub struct Outcome {
    pub id: String,
    pub stated: f64,
    pub tolerance: f64,
    pub unit: String,
    /// The recomputed value, or why it could not be computed.
    pub got: Result<f64, String>,
    /// How long the producer took, s.
    pub seconds: f64,
}

impl Outcome {
    /// Recomputed and within the tolerance.
    pub fn holds(&self) -> bool {
        matches!(self.got, Ok(g) if (g - self.stated).abs() <= self.tolerance + 1e-12 * self.stated.abs())
    }
}

/// Recompute one claim (its producer must exist: the ledger's parser checked).
pub fn recompute(c: &Claim) -> Outcome {
    let start = std::time::Instant::now();
    let got = match c.figure.as_ref().and_then(|f| figures::find(f.get_ref())) {
        Some(f) => (f.produce)().map_err(|e: FigureError| e.to_string()),
        None => Err("no producer".into()),
    };
    Outcome {
        id: c.id().to_string(),
        stated: c.value,
        tolerance: c.tolerance(),
        unit: c.unit.clone(),
        got,
        seconds: start.elapsed().as_secs_f64(),
    }
}

/// Recompute every deterministic claim of `ledger` (those with `filter`
/// in their id when given), in parallel.
pub fn check(ledger: &Ledger, filter: Option<&str>) -> Vec<Outcome> {
    use rayon::prelude::*;
    let claims: Vec<&Claim> = ledger
        .claims
        .iter()
        .filter(|c| c.kind.deterministic())
        .filter(|c| filter.is_none_or(|f| c.id().contains(f)))
        .collect();
    claims.par_iter().map(|c| recompute(c)).collect()
}

/// The drift table: every outcome that does not hold, one row each.
pub fn drift_table(outcomes: &[Outcome]) -> String {
    let mut t = String::from("| claim | stated | got | tolerance |\n| --- | --- | --- | --- |\n");
    for o in outcomes.iter().filter(|o| !o.holds()) {
        let got = match &o.got {
            Ok(g) => format!("{g:.6}"),
            Err(e) => format!("error: {e}"),
        };
        let _ = writeln!(
            t,
            "| {} | {} | {} | ±{} |",
            o.id,
            super::render::value_text(o.stated, &o.unit),
            got,
            o.tolerance
        );
    }
    t.trim_end().to_string()
}
