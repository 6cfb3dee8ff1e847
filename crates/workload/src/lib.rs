//! The smplab workload model.
//!
//! A workload is a TOML file (see `docs/workload-format.md`) describing a
//! multi-threaded program as thread groups running op lists with loops, over
//! named spin locks, mutexes, barriers, queues, counters and buffers. Loading one
//! means: [`validate::parse`] the text, then [`validate::instantiate`] it for a
//! thread parameter `n` and scale `s`, which evaluates counts, resolves names and
//! checks that it can run to completion, giving a [`Program`] every executor runs.

pub mod builtin;
pub mod compute;
pub mod encode;
pub mod expr;
pub mod program;
pub mod spec;
pub mod validate;

pub use program::{BufferRef, Group, Op, Program};
pub use spec::{BarrierWait, Rmw, SpinKind, WorkloadSpec};
pub use validate::{Diagnostic, Diagnostics, WorkloadError};

use std::path::Path;

/// A workload ready to instantiate: its spec plus the text and name it came from
/// (kept so later errors can still point into the file).
#[derive(Debug, Clone)]
pub struct Source {
    /// Path for files, `builtin:NAME` for built-in profiles.
    pub origin: String,
    pub text: String,
    pub spec: WorkloadSpec,
}

impl Source {
    /// Parse workload text.
    pub fn from_text(origin: &str, text: &str) -> Result<Self, WorkloadError> {
        let spec = validate::parse(origin, text)?;
        Ok(Source {
            origin: origin.to_string(),
            text: text.to_string(),
            spec,
        })
    }

    /// Read and parse a workload file.
    pub fn from_file(path: &Path) -> Result<Self, WorkloadError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::from_text(&shown, &text)
    }

    /// A built-in profile by name, or a file if `name_or_path` names one
    /// (contains a `/` or ends in `.toml`).
    pub fn resolve(name_or_path: &str) -> Result<Self, WorkloadError> {
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            return Self::from_file(Path::new(name_or_path));
        }
        let text = builtin::text(name_or_path)
            .ok_or_else(|| WorkloadError::UnknownWorkload(name_or_path.to_string()))?;
        Self::from_text(&format!("builtin:{name_or_path}"), text)
    }

    /// Whether this is a built-in profile.
    pub fn is_builtin(&self) -> bool {
        self.origin.starts_with("builtin:")
    }

    /// How a result record describes `program`, instantiated from this source.
    pub fn workload_info(&self, program: &Program) -> smplab_record::WorkloadInfo {
        let mut params = std::collections::BTreeMap::new();
        params.insert("scale".to_string(), serde_json::json!(program.scale));
        smplab_record::WorkloadInfo {
            name: program.name.clone(),
            source: if self.is_builtin() {
                "builtin".into()
            } else {
                self.origin.clone()
            },
            n: program.n,
            threads: program.total_threads(),
            params,
        }
    }

    /// Whether the thread parameter `n` changes the program: `false` when
    /// no thread count or amount mentions `n` (e.g. a model `smplab trace
    /// model` wrote, which keeps the traced program's threads as they were).
    pub fn uses_n(&self) -> bool {
        let d = self.spec.default_threads;
        let at = |n: u32| self.instantiate(Some(n), 1.0).ok();
        match (at(d), at(d.saturating_add(1))) {
            (Some(a), Some(b)) => {
                a.total_threads() != b.total_threads() || a.expected_counts() != b.expected_counts()
            }
            // One of them does not instantiate: `n` matters to validation.
            _ => true,
        }
    }

    /// The file's default thread parameter `n`.
    pub fn default_threads(&self) -> u32 {
        self.spec.default_threads
    }

    /// Instantiate with thread parameter `n` (None: the file's default) and scale.
    pub fn instantiate(&self, n: Option<u32>, scale: f64) -> Result<Program, WorkloadError> {
        let n = n.unwrap_or(self.spec.default_threads);
        validate::instantiate(&self.origin, &self.text, &self.spec, n, scale)
    }
}
