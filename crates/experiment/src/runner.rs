//! What the lab runs points with. The sweep, diagnosis and demo only see the
//! [`Runner`] trait, so they are tested with a fake runner and hand-made
//! records; [`real::RealRunner`] is the thin glue to the executors.

pub mod real;

use crate::point::{Point, Variant};
use smplab_record::{RunRecord, WorkloadInfo};
use smplab_workload::{Program, Source};

/// Why a point produced no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunError {
    /// The executor cannot run here (no KVM, no QEMU, not in this build). The
    /// point is stored as skipped and tried again on resume.
    Unavailable(String),
    /// The run failed; stored as failed with this reason.
    Failed(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Unavailable(r) => write!(f, "skipped: {r}"),
            RunError::Failed(r) => write!(f, "failed: {r}"),
        }
    }
}

/// Runs one point. Implementations must be callable from several threads
/// (the demo runs the simulator beside measurements).
pub trait Runner: Sync {
    /// Run `point`, returning one record per VM (one for a native point).
    fn run(&self, point: &Point) -> Result<Vec<RunRecord>, RunError>;

    /// `Err(reason)` when this runner cannot run `executor` here at all, so
    /// callers can say what they skip before trying.
    fn availability(
        &self,
        executor: smplab_record::Executor,
    ) -> Result<(), crate::execute::ExecuteError>;
}

/// Resolve and instantiate a point's workload, in the variant it asks for.
pub fn prepare(point: &Point) -> Result<(Program, WorkloadInfo), RunError> {
    let source =
        Source::resolve(&point.workload).map_err(|e| RunError::Failed(format!("workload: {e}")))?;
    let program = source
        .instantiate(Some(point.threads), point.scale)
        .map_err(|e| RunError::Failed(format!("workload: {e}")))?;
    let program = match point.variant {
        Variant::AsIs => program,
        Variant::SpinToBlock => program.spin_to_block(),
    };
    // Named after the workload, not the variant's program; the variant is a parameter.
    let mut info = source.workload_info(&program);
    info.name = source.spec.name.clone();
    if point.variant != Variant::AsIs {
        info.params.insert(
            "variant".to_string(),
            serde_json::json!(point.variant.as_str()),
        );
    }
    Ok((program, info))
}

#[doc(hidden)]
pub mod fake {
    //! A deterministic runner: wall time from a formula over the point's
    //! parameters, so diagnosis and metrics have known answers.
    use super::*;
    use smplab_record::config::{IdlePolicy, Ple, RunConfig, SyncMode};
    use smplab_record::{Executor, Outcome};

    pub struct FakeRunner {
        /// Keys of points that fail (crash) instead of producing a record.
        pub fail: Vec<String>,
        pub unavailable: Vec<Executor>,
        /// Sleep per point, so a test can kill a sweep part-way.
        pub delay: std::time::Duration,
    }

    impl Default for FakeRunner {
        fn default() -> Self {
            Self::new()
        }
    }

    impl FakeRunner {
        pub fn new() -> Self {
            FakeRunner {
                fail: vec![],
                unavailable: vec![],
                delay: std::time::Duration::ZERO,
            }
        }
    }

    /// Native 1.0 s; VM adds 0.4 s for HLT idle, 0.3 s for spinning, 0.2 s for
    /// global sync, 0.1 s unpinned; each VM beyond the first adds 50 %.
    // Casts: statistics are finite and non-negative; f64 `as` integer saturates (NaN to 0), which is the clamp wanted; counts are small.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    pub fn fake_wall_ns(p: &Point) -> u64 {
        let mut t = 1.0;
        if p.executor() != Executor::Native {
            if p.config.idle() == Some(IdlePolicy::Hlt) {
                t += 0.4;
            }
            if p.variant == Variant::AsIs {
                t += 0.3;
            }
            if p.config.sync() == Some(SyncMode::Global) {
                t += 0.2;
            }
            if p.config.placement().is_float() {
                t += 0.1;
            }
            if let RunConfig::Sim(s) = &p.config {
                if s.ple != Some(Ple::Off) {
                    t += 0.05;
                }
                if !s.apicv {
                    t += 0.05;
                }
            }
            t *= 1.0 + 0.5 * (p.vms() as f64 - 1.0);
        }
        (t * 1e9) as u64
    }

    impl Runner for FakeRunner {
        fn availability(&self, e: Executor) -> Result<(), crate::execute::ExecuteError> {
            if self.unavailable.contains(&e) {
                Err(crate::execute::ExecuteError::Unavailable {
                    executor: e,
                    reason: "not available in this build".into(),
                    status: smplab_record::exit::RUN_FAILED,
                })
            } else {
                Ok(())
            }
        }
        fn run(&self, point: &Point) -> Result<Vec<RunRecord>, RunError> {
            self.availability(point.executor())
                .map_err(|e| RunError::Unavailable(e.to_string()))?;
            std::thread::sleep(self.delay);
            if self.fail.contains(&point.key()) {
                return Err(RunError::Failed("guest crashed: triple fault".into()));
            }
            let info = if point.is_program() {
                WorkloadInfo::for_program(&point.program)
            } else {
                prepare(point)?.1
            };
            let mut out = Vec::new();
            for vm in 0..point.vms() {
                let mut r = crate::testutil::record(point.executor(), info.clone());
                r.timing.wall_ns = fake_wall_ns(point);
                r.outcome = Outcome::Ok;
                r.set_config("vm_index", vm);
                out.push(r);
            }
            Ok(out)
        }
    }
}
