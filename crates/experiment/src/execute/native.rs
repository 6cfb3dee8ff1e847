//! Native runs: the workload's threads on this host (`smplab_native`).

use super::{Execute, ExecuteError, RunLimits};
use smplab_record::config::NativeSettings;
use smplab_record::{RunRecord, WorkloadInfo};
use smplab_workload::Program;

/// Native runs need nothing the host may lack.
pub(super) fn availability(_limits: &RunLimits) -> Result<(), (String, i32)> {
    Ok(())
}

impl Execute for NativeSettings {
    fn run(
        &self,
        program: &Program,
        info: &WorkloadInfo,
        limits: &RunLimits,
        host_cores: usize,
    ) -> Result<Vec<RunRecord>, ExecuteError> {
        let opts = smplab_native::NativeOptions {
            pin: self.placement.cpus(host_cores),
            timeout: Some(limits.timeout),
            io_thread_cpus: self.io_thread_cpus.0.clone(),
        };
        Ok(vec![smplab_native::run(program, info.clone(), &opts)?])
    }
}
