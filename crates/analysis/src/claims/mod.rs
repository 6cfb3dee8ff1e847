//! The claims ledger (docs/claims.toml): every figure the README and docs
//! state, with the command that produces it, the stated value and its
//! tolerance, its kind (a deterministic simulator figure, a figure measured
//! on a host, or a fitted one: calibration, not evidence) and, for the
//! papers' figures, the paper's value and where the paper gives it.
//!
//! - [`ledger`]: the types and the parser (problems as file:line:col);
//! - [`figures`]: the in-process producers of the deterministic figures;
//! - [`check`]: recompute them and report drift;
//! - [`audit`]: every figure in the docs is a claim or exempt with its reason;
//! - [`render`]: the docs' figure tables, generated between markers;
//! - [`measure`]: re-measure the host figures into a results file.
//!
//! It lives in the analysis crate because its producers need the simulator
//! and the tuner study (analysis's own) and its measurements the calibration
//! probes; the cli crate holds only the command's flags and output.

pub mod audit;
pub mod check;
pub mod figures;
pub mod ledger;
pub mod measure;
pub mod render;

pub use ledger::{Claim, Kind, Ledger, Status};

/// The ledger's path under the repository root.
pub const LEDGER_PATH: &str = "docs/claims.toml";

/// Parse the ledger at `path` (named as `shown` in messages), with the
/// producers of this build.
pub fn load(path: &std::path::Path, shown: &str) -> Result<Ledger, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(Ledger::parse(shown, &text, |name| {
        figures::find(name).is_some() || measure::find(name).is_some()
    })?)
}

/// Why the ledger could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read the ledger {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Invalid(#[from] smplab_record::diag::Diagnostics),
}

/// How many claims of each standing, for the summary line.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// The papers' figures, by status.
    pub paper_figures: usize,
    pub reproduced: usize,
    pub shape: usize,
    pub calibration: usize,
    pub missed: usize,
    /// Our own figures (no paper), and how many of them miss their goal.
    pub own: usize,
    pub own_missed: usize,
}

pub fn tally(ledger: &Ledger) -> Tally {
    let mut t = Tally::default();
    for c in &ledger.claims {
        if c.paper.is_none() {
            t.own += 1;
            t.own_missed += usize::from(c.status() == Status::Missed);
            continue;
        }
        t.paper_figures += 1;
        match c.status() {
            Status::Reproduced => t.reproduced += 1,
            Status::Shape => t.shape += 1,
            Status::Calibration => t.calibration += 1,
            Status::Missed => t.missed += 1,
            Status::Stated => {}
        }
    }
    t
}
