//! The benches' views: each a function from a results store's entries (the
//! bench's points, any repetitions) to the table the bench prints. The
//! benches' points are their built-in specs (`crates/experiment/specs/bench-*.toml`).

pub mod host;
pub mod io;
pub mod irqchip;

use smplab_experiment::store::Entry;

/// `entries` in repetition order (a store keeps them in completion order).
fn by_rep<'a>(entries: &[&'a Entry]) -> Vec<&'a Entry> {
    let mut v = entries.to_vec();
    v.sort_by_key(|e| e.point.rep);
    v
}

/// The first line of a failed or skipped entry's reason.
fn failure(e: &Entry) -> Option<String> {
    match &e.status {
        smplab_experiment::store::Status::Ok => None,
        smplab_experiment::store::Status::Failed { reason }
        | smplab_experiment::store::Status::Skipped { reason } => {
            Some(reason.lines().next().unwrap_or("").to_string())
        }
    }
}
