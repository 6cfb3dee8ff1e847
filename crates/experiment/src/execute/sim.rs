//! Glue from a simulator run configuration to `smplab_sim::simulate`.
//!
//! Mapping (docs/lab.md): the host has `pcpus` pCPUs, by default as many as
//! one VM has vCPUs (Ding & Shan's set-up: a VM as big as the machine), so
//! `vms > 1` overcommits it; the placement goes to the model as is (`pinned`:
//! vCPU i on its own pCPU, spread evenly; a CPU list must be one contiguous
//! range, which confines the vCPUs); PLE defaults to the platform's. The device sync
//! mode is modelled for device exits; the built-in workloads make none inside
//! their workload window (as the measured guest does not: its interrupt
//! controllers are in the kernel), so the mode has nothing to serialize there.

use smplab_record::config::SimSettings;
use smplab_record::{exit, RunRecord, WorkloadInfo};
use smplab_sim::{DeviceSync, Devices, Idle, Platform, Scenario, Sdb, SimError, VmSpec};
use smplab_workload::Program;
use std::time::Duration;

/// Why a simulation produced no records.
#[derive(Debug, thiserror::Error)]
pub enum SimRunError {
    #[error(transparent)]
    Model(#[from] SimError),
    #[error("the simulation was still running after {secs} s of host time (timeout); it is left to finish in the background. Lower the scale or raise the timeout")]
    Timeout { secs: f64 },
    #[error("cannot start the simulation thread: {0}")]
    Thread(std::io::Error),
    #[error("the simulation thread ended without a result (it panicked: a bug in smplab, please report it)")]
    Panicked,
}

impl SimRunError {
    pub fn exit_status(&self) -> i32 {
        match self {
            SimRunError::Model(_) => exit::BAD_INPUT,
            SimRunError::Timeout { .. } => exit::TIMEOUT,
            SimRunError::Thread(_) => exit::RESOURCE_LIMIT,
            SimRunError::Panicked => exit::INTERNAL,
        }
    }
}

/// The scenario a simulator configuration describes.
pub fn scenario(
    program: &Program,
    info: &WorkloadInfo,
    s: &SimSettings,
) -> Result<Scenario, SimError> {
    scenario_on(program, info, s, Platform::resolve(&s.platform)?)
}

/// The scenario a simulator configuration describes on `platform` instead
/// of the one it names: calibration tries candidate platforms that have no
/// name yet, through the same mapping as every other simulated run.
pub fn scenario_on(
    program: &Program,
    info: &WorkloadInfo,
    s: &SimSettings,
    platform: Platform,
) -> Result<Scenario, SimError> {
    // The host's halt-poll window: the setting's, else the platform's, as
    // `SimSettings::host_halt_poll_ns` documents (a calibrated profile
    // carries this host's `kvm.halt_poll_ns`, which its fit assumed).
    let window = s
        .host_halt_poll_ns
        .unwrap_or(platform.defaults.halt_poll_ns);
    let idle = Idle::from_setting(s.idle, window)?;
    let ple = s.ple.unwrap_or(platform.defaults.ple);
    let vm = {
        let mut vm = VmSpec::new(program.clone(), info.clone(), s.vcpus);
        vm.idle = idle;
        vm.placement = s.placement.clone();
        vm.ple = ple;
        vm.apicv = s.apicv;
        vm.sdb = s.sdb.then(Sdb::default);
        vm.irq_affinity = s.irq_affinity.clone();
        vm.io_thread_cpus = s
            .io_thread_cpus
            .0
            .iter()
            .map(|&c| u32::try_from(c).unwrap_or(u32::MAX))
            .collect();
        // Device exits the workload makes inside its window: none for the
        // workload model today (no I/O operation), so the sync mode is
        // carried but serializes nothing.
        vm.devices = Some(Devices {
            exits_per_ms: 0.0,
            sync: DeviceSync::from(s.sync),
            synchronous: 1.0,
        });
        vm
    };
    let vms = vec![vm; usize::try_from(s.vms).unwrap_or(1)];
    let mut scenario = Scenario::new(platform, s.pcpus.unwrap_or(s.vcpus), vms);
    scenario.policy = s.policy;
    scenario.seed = s.seed;
    scenario.check()?;
    Ok(scenario)
}

/// The simulator runs everywhere.
pub(super) fn availability(_limits: &super::RunLimits) -> Result<(), (String, i32)> {
    Ok(())
}

impl super::Execute for SimSettings {
    fn run(
        &self,
        program: &Program,
        info: &WorkloadInfo,
        limits: &super::RunLimits,
        _host_cores: usize,
    ) -> Result<Vec<RunRecord>, super::ExecuteError> {
        Ok(run(program, info, self, limits.timeout)?)
    }
}

/// Simulate a configuration, giving up after `limit` of host time.
pub fn run(
    program: &Program,
    info: &WorkloadInfo,
    s: &SimSettings,
    limit: Duration,
) -> Result<Vec<RunRecord>, SimRunError> {
    let sc = scenario(program, info, s)?;
    let mut records = with_timeout(limit, move || {
        smplab_sim::simulate(&sc).map_err(SimRunError::from)
    })?;
    for r in &mut records {
        r.set_config("platform_source", s.platform.clone());
    }
    Ok(records)
}

/// Run `f` on its own thread, giving up after `limit`. The simulator has no
/// way to be stopped from outside, so on timeout the thread is left to finish
/// in the background (it ends with the process) and the point fails with a
/// reason; the sweep goes on.
pub fn with_timeout<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> Result<T, SimRunError> + Send + 'static,
) -> Result<T, SimRunError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("smplab-sim".into())
        .spawn(move || {
            // The receiver may be gone after a timeout; nothing to do then.
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        return Err(SimRunError::Thread(e));
    }
    match rx.recv_timeout(limit) {
        Ok(r) => r,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(SimRunError::Timeout {
            secs: limit.as_secs_f64(),
        }),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(SimRunError::Panicked),
    }
}

/// The TOML text of a built-in platform profile.
pub fn base_profile_text(name: &str) -> Option<String> {
    Platform::builtin(name).ok().map(|p| p.to_toml())
}

/// Check that profile text parses as a simulator platform.
pub fn check_profile_text(origin: &str, text: &str) -> Result<(), smplab_sim::SimError> {
    Platform::from_text(origin, text).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_simulation_that_never_ends_fails_the_point() {
        // Blocks until the test process ends: only the limit can return.
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        let r: Result<(), SimRunError> = with_timeout(Duration::from_millis(50), move || {
            let _ = never.recv();
            Ok(())
        });
        match r {
            Err(e @ SimRunError::Timeout { .. }) => {
                assert!(e.to_string().contains("still running"), "{e}");
                assert_eq!(e.exit_status(), exit::TIMEOUT);
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        let ok = with_timeout(Duration::from_secs(600), || Ok(7));
        assert_eq!(ok.ok(), Some(7));
        let err: Result<u8, _> =
            with_timeout(Duration::from_secs(600), || Err(SimRunError::Panicked));
        assert!(matches!(err, Err(SimRunError::Panicked)));
    }
}
