//! Errors of the simulator, with messages that say what to change.

use smplab_record::diag::{Diagnostics, SourceText};

/// Everything that can go wrong building or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Located problems in a spec or platform file, one `file:line:col:
    /// message` per line.
    #[error(transparent)]
    Invalid(#[from] Diagnostics),
    #[error("unknown platform profile `{name}`: use one of kvm2015, pvm-here, or a path to a profile TOML file")]
    UnknownPlatform { name: String },
    #[error("{origin}: invalid platform profile: {message}")]
    BadPlatform { origin: String, message: String },
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("workload: {0}")]
    Workload(#[from] smplab_workload::WorkloadError),
    /// A scenario that cannot be simulated as given.
    #[error("invalid scenario: {0}")]
    Scenario(String),
    /// The model reached a state where no thread can proceed and nothing is
    /// scheduled: a bug in the simulator or a program that cannot finish.
    #[error("simulation stalled at {at_ns} ns with {pending} threads unfinished (VM {vm}); this is a simulator bug, please report it with the scenario")]
    Stalled { at_ns: u64, pending: u32, vm: u32 },
}

impl SimError {
    /// The exit status `smplab` uses for this error.
    pub fn exit_status(&self) -> i32 {
        match self {
            SimError::Stalled { .. } => smplab_record::exit::INTERNAL,
            _ => smplab_record::exit::BAD_INPUT,
        }
    }
}

/// A located error at byte `offset` of `text` (1-based line and column in characters).
pub(crate) fn locate(
    file: &str,
    text: &str,
    offset: usize,
    message: impl Into<String>,
) -> SimError {
    SimError::Invalid(SourceText::new(file, text).at(offset, message).into())
}
