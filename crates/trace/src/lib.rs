//! `smplab trace`: bring your own program. An `LD_PRELOAD` interposer
//! (`preload/trace.c`, built by `build.rs`) records every pthread
//! synchronization call of an unmodified, dynamically linked program
//! ([`run`]); the trace file ([`format`], docs/trace-format.md) is summarised
//! and drawn ([`analyze`], [`show`]) and turned into an ordinary workload
//! model that every executor runs ([`model`]).

pub mod analyze;
pub mod format;
pub mod model;
pub mod run;
pub mod show;
mod tokens;

pub use format::{Event, Kind, Trace};

use smplab_record::exit;

/// Everything that can go wrong tracing, reading or modelling a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("`{program}`: no such program (not a path to an executable file, nor found in PATH)")]
    NotFound { program: String },
    #[error("`{path}` cannot be executed: {why}")]
    NotExecutable { path: String, why: String },
    #[error(
        "`{path}` is a static binary (no PT_INTERP, not dynamically linked): LD_PRELOAD cannot \
         interpose on its pthread calls. Rebuild it without -static to trace it"
    )]
    StaticBinary { path: String },
    #[error("`{path}` is not an ELF executable or a #! script")]
    NotElf { path: String },
    #[error("{path}: corrupt trace at byte {offset}: {why}")]
    Corrupt {
        path: String,
        offset: usize,
        why: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: the trace has no events (was the program linked against libpthread?)")]
    Empty { path: String },
    /// The traced program ended before the interposer wrote any event (it
    /// was killed, or never reached a pthread call): nothing to show, and not
    /// a corrupt file.
    #[error("{path}: an incomplete trace with no events: the program ended before the interposer flushed (killed by a signal, or exec'd away)")]
    IncompleteEmpty { path: String },
    #[error("the model built from the trace does not validate (a bug in smplab trace): {0}")]
    Model(String),
}

impl TraceError {
    /// The process exit status for this error (`smplab_record::exit`).
    pub fn exit_status(&self) -> i32 {
        match self {
            TraceError::NotFound { .. } | TraceError::NotExecutable { .. } => {
                exit::PROGRAM_NOT_FOUND
            }
            TraceError::StaticBinary { .. } | TraceError::NotElf { .. } => exit::NOT_TRACEABLE,
            TraceError::Corrupt { .. } | TraceError::Empty { .. } => exit::BAD_TRACE,
            TraceError::IncompleteEmpty { .. } => exit::PARTIAL,
            TraceError::Io { .. } => exit::BAD_INPUT,
            TraceError::Spawn { .. } => exit::RUN_FAILED,
            TraceError::Model(_) => exit::INTERNAL,
        }
    }
}
