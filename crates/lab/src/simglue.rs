//! Glue to the simulator. Until smplab-sim's `simulate` API lands in this
//! build, sim points are stored as skipped with this reason.

use crate::point::Point;
use crate::runner::RunError;
use smplab_record::RunRecord;

const NOT_BUILT: &str = "the simulator (smplab-sim) is not available in this build";

pub fn availability() -> Result<(), String> {
    Err(NOT_BUILT.into())
}

pub fn run(_point: &Point) -> Result<Vec<RunRecord>, RunError> {
    Err(RunError::Unavailable(NOT_BUILT.into()))
}

/// The TOML text of a built-in platform profile, if the simulator is built in.
pub fn base_profile_text(_name: &str) -> Option<String> {
    None
}

/// Check that profile text parses as a simulator platform.
pub fn check_profile_text(_origin: &str, _text: &str) -> Result<(), String> {
    Ok(())
}
