//! Glue from a sim [`Point`] to `smplab_sim::simulate`.
//!
//! Mapping (docs/lab.md): the host has as many pCPUs as one VM has vCPUs
//! (seed 000's set-up: a VM as big as the machine), so `vms > 1` overcommits
//! it; `pin = pinned` is `Affinity::Pin`, a CPU list `a-b` is a range;
//! `ple` true is Intel PLE; repetitions use different seeds. The built-in
//! workloads do no device I/O, so no device-exit stream is modelled and the
//! sync mode has nothing to serialize (as in the measured guest).

use crate::point::Point;
use crate::runner::{prepare, RunError};
use smplab_record::RunRecord;
use smplab_sim::{Affinity, Idle, Platform, Ple, Scenario, VmSpec};

pub fn availability() -> Result<(), String> {
    Ok(())
}

fn affinity(pin: &str) -> Result<Affinity, RunError> {
    match pin {
        "none" => Ok(Affinity::Float),
        "pinned" => Ok(Affinity::Pin),
        list => {
            let cpus = smplab_record::cpus::parse_cpu_list(list)
                .map_err(|e| RunError::Failed(format!("pin: {e}")))?;
            let (lo, hi) = (
                *cpus.iter().min().unwrap_or(&0),
                *cpus.iter().max().unwrap_or(&0),
            );
            if hi - lo + 1 == cpus.len() {
                Ok(Affinity::Range {
                    first: lo as u32,
                    count: cpus.len() as u32,
                })
            } else {
                Ok(Affinity::Pin)
            }
        }
    }
}

pub fn run(point: &Point) -> Result<Vec<RunRecord>, RunError> {
    let platform_name = point.platform.as_deref().unwrap_or("pvm-here");
    let platform = Platform::resolve(platform_name).map_err(|e| RunError::Failed(e.to_string()))?;
    let (program, info) = prepare(point)?;
    let vcpus = point.vcpus.unwrap_or(1);
    let idle = Idle::parse(
        point.idle.as_deref().unwrap_or("hlt"),
        platform.defaults.halt_poll_ns,
    )
    .map_err(RunError::Failed)?;
    let aff = affinity(&point.pin)?;
    let vms: Vec<VmSpec> = (0..point.vms)
        .map(|_| {
            let mut vm = VmSpec::new(program.clone(), info.clone(), vcpus);
            vm.idle = idle;
            vm.affinity = aff;
            vm.ple = if point.ple.unwrap_or(true) {
                Ple::Intel
            } else {
                Ple::Off
            };
            vm.apicv = point.apicv.unwrap_or(false);
            vm
        })
        .collect();
    let mut s = Scenario::new(platform, vcpus, vms);
    s.seed = 1 + point.rep as u64;
    let mut records = simulate_with_timeout(s, std::time::Duration::from_secs(point.timeout_s))?;
    for r in &mut records {
        r.set_config("lab_point", point.key());
        r.set_config("platform_source", platform_name);
    }
    Ok(records)
}

/// `smplab_sim::simulate` with a host-time limit.
fn simulate_with_timeout(
    s: Scenario,
    limit: std::time::Duration,
) -> Result<Vec<RunRecord>, RunError> {
    with_timeout(limit, move || {
        smplab_sim::simulate(&s).map_err(|e| e.to_string())
    })
}

/// Run `f` on its own thread, giving up after `limit`. The simulator has no
/// way to be stopped from outside, so on timeout the thread is left to finish
/// in the background (it ends with the process) and the point fails with a
/// reason; the sweep goes on.
pub fn with_timeout<T: Send + 'static>(
    limit: std::time::Duration,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, RunError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("smplab-sim".into())
        .spawn(move || {
            // The receiver may be gone after a timeout; nothing to do then.
            let _ = tx.send(f());
        });
    if let Err(e) = spawned {
        return Err(RunError::Failed(format!(
            "cannot start the simulation thread: {e}"
        )));
    }
    match rx.recv_timeout(limit) {
        Ok(r) => r.map_err(RunError::Failed),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(RunError::Failed(format!(
            "the simulation was still running after {} s of host time (timeout_s); it is left to finish in the background. Lower the scale or raise timeout_s",
            limit.as_secs_f64()
        ))),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(RunError::Failed(
            "the simulation thread ended without a result (it panicked)".into(),
        )),
    }
}

/// The TOML text of a built-in platform profile.
pub fn base_profile_text(name: &str) -> Option<String> {
    Platform::builtin(name).ok().map(|p| p.to_toml())
}

/// Check that profile text parses as a simulator platform.
pub fn check_profile_text(origin: &str, text: &str) -> Result<(), String> {
    Platform::from_text(origin, text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_simulation_that_never_ends_fails_the_point() {
        // Blocks until the test process ends: only the limit can return.
        let (_keep, never) = std::sync::mpsc::channel::<()>();
        let r: Result<(), RunError> = with_timeout(Duration::from_millis(50), move || {
            let _ = never.recv();
            Ok(())
        });
        match r {
            Err(RunError::Failed(m)) => assert!(m.contains("still running"), "{m}"),
            other => panic!("expected a failure, got {other:?}"),
        }
        let ok = with_timeout(Duration::from_secs(600), || Ok(7));
        assert_eq!(ok, Ok(7));
        let err: Result<u8, _> = with_timeout(Duration::from_secs(600), || Err("bad".into()));
        assert_eq!(err, Err(RunError::Failed("bad".into())));
    }
}
