//! The real runner behind [`Runner`]: a [`Point`] through the one execute
//! path ([`crate::execute::execute`]). Everything else in the lab is tested
//! without it.

use crate::execute::{
    availability, execute, execute_program, ExecuteError, RealProgram, RunLimits,
};
use crate::point::Point;
use crate::runner::{prepare, RunError, Runner};
use smplab_record::config::RunConfig;
use smplab_record::{Executor, RunRecord};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Runs points on this machine.
#[derive(Debug, Clone, Default)]
pub struct RealRunner {
    /// QEMU binary; `None`: `qemu-system-x86_64` on PATH.
    pub qemu_binary: Option<PathBuf>,
}

impl From<ExecuteError> for RunError {
    fn from(e: ExecuteError) -> RunError {
        if e.is_unavailable() {
            RunError::Unavailable(e.to_string())
        } else {
            RunError::Failed(e.to_string())
        }
    }
}

impl RealRunner {
    fn limits(&self, timeout_s: u64) -> RunLimits {
        RunLimits {
            timeout: Duration::from_secs(timeout_s.max(1)),
            show_console: false,
            qemu_binary: self.qemu_binary.clone(),
        }
    }
}

/// The configuration a point runs with: a simulator repetition gets its own
/// seed (repetition r runs seed 1 + r), so repetitions differ as measured
/// runs do.
pub fn run_config(point: &Point) -> RunConfig {
    let mut config = point.config.clone();
    if let RunConfig::Sim(s) = &mut config {
        s.seed = 1 + u64::from(point.rep);
    }
    config
}

impl Runner for RealRunner {
    fn availability(&self, executor: Executor) -> Result<(), crate::execute::ExecuteError> {
        availability(executor, &self.limits(1))
    }

    fn run(&self, point: &Point) -> Result<Vec<RunRecord>, RunError> {
        let limits = self.limits(point.timeout_s);
        let busy = BusyThreads::start(point.busy_host_threads);
        let result = if point.is_program() {
            RealProgram::new(point.program.clone())
                .map_err(ExecuteError::from)
                .and_then(|p| execute_program(&p, &run_config(point), &limits))
        } else {
            let (program, info) = prepare(point)?;
            execute(&program, &info, &run_config(point), &limits)
        };
        drop(busy);
        let mut records = result?;
        for r in &mut records {
            r.set_config("lab_point", point.key());
        }
        Ok(records)
    }
}

/// Busy host threads (floating) for a point's `busy_host_threads`, stopped
/// and joined on drop.
struct BusyThreads {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyThreads {
    fn start(n: u32) -> BusyThreads {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .filter_map(|i| {
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name(format!("smplab-busy-{i}"))
                    .spawn(move || {
                        let mut x = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            x = std::hint::black_box(x.wrapping_mul(6364136223846793005) + 1);
                        }
                    })
                    .ok()
            })
            .collect();
        BusyThreads { stop, threads }
    }
}

impl Drop for BusyThreads {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
