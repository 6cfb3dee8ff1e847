//! The host spec's `tune = true`: Kulkarni & Kulkarni's tuner (`smplab_policy::tune`)
//! watching a real `smplab host` run. Every window it reads the user-level
//! scheduler's counts per VM (the input side) and carries out each VM's
//! setting (the output side, [`apply_setting`]): the host slice (the
//! shortest any VM's tuner asks for), the VM's vCPU affinity (pinned or
//! floating, `HostScheduler::set_vm_affinity`) and its guest's interrupt
//! routing (`HostScheduler::set_irq_affinity`: the routing page, `running`
//! kept up to date by the scheduler). Its input (`host::indicators`): spin
//! detections (the sampler's), rescheduling IPIs and device-interrupt
//! latency (the guest's published counters); refill cost is not measurable
//! on this host. docs/host.md.

use super::indicators::VmIndicators;
use smplab_policy::tune::{Setting, Tuner, TunerConfig, VcpuAffinity};
use smplab_record::config::IrqAffinity;
use smplab_vmm::host::{HostError, HostScheduler};
use smplab_vmm::irq_route::IrqRouteError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The tuner's window on the real host.
pub const HOST_WINDOW: Duration = Duration::from_millis(20);

/// Spin detections per sample at which the host's tuner calls a VM spinning.
pub const HOST_SPIN_SHARE: f64 = 0.05;

/// Windows within which a condition that comes back counts as relapsed
/// (`TunerConfig::relapse_windows`): 500 ms, above the 100–300 ms in which
/// the tuner without memory flipped between 4 ms and 1 ms on dedup here
/// (docs/lab.md).
pub const HOST_RELAPSE_WINDOWS: u32 = 25;

/// The longest a relapsing condition is held (`max_hold_windows`): 1.28 s.
pub const HOST_MAX_HOLD_WINDOWS: u32 = 64;

/// Windows after io-late's cure at which its latency is judged: the
/// smoothing span plus one, so the judged latency is all under the cure.
pub const HOST_CURE_CHECK_WINDOWS: u32 = super::indicators::HOST_SMOOTH_WINDOWS + 1;

/// Run the tuner until `stop`; returns its decisions, as printed.
/// `initial_affinity[vm]`: the VM's vCPU and interrupt affinity as the run
/// began.
pub fn tune_host(
    scheduler: &HostScheduler,
    vcpus_per_vm: &[u32],
    initial_affinity: &[(VcpuAffinity, IrqAffinity)],
    sample_interval: Duration,
    long: u64,
    stop: &AtomicBool,
) -> Vec<String> {
    let config = TunerConfig {
        window_ns: u64::try_from(HOST_WINDOW.as_nanos()).unwrap_or(u64::MAX),
        // The scheduler acts once per sample: no slice below it.
        short_slice_ns: u64::try_from(sample_interval.as_nanos()).unwrap_or(1_000_000),
        long_slice_ns: long,
        // The sampler sees at most one spin per sample of a running vCPU:
        // "spinning" is 5% of the samples a vCPU running all the time gets.
        spin_enter_per_s: HOST_SPIN_SHARE / sample_interval.as_secs_f64().max(1e-6),
        relapse_windows: HOST_RELAPSE_WINDOWS,
        max_hold_windows: HOST_MAX_HOLD_WINDOWS,
        // A dispatch is dear here (every preemption and sample is a kick
        // out of KVM_RUN): judge io-late's short slice once the smoothed
        // latency holds only windows under it.
        cure_check_windows: HOST_CURE_CHECK_WINDOWS,
        ..TunerConfig::default()
    };
    let initial: Vec<Setting> = (0..vcpus_per_vm.len())
        .map(|vm| {
            let (affinity, irq) = initial_affinity
                .get(vm)
                .cloned()
                .unwrap_or((VcpuAffinity::Floating, IrqAffinity::default()));
            Setting {
                slice_ns: long,
                affinity,
                irq,
            }
        })
        .collect();
    let mut tuners: Vec<Tuner> = initial
        .iter()
        .map(|i| Tuner::new(config.clone(), i.clone()))
        .collect();
    let start = Instant::now();
    let mut inputs: Vec<VmIndicators> = vcpus_per_vm
        .iter()
        .map(|&n| VmIndicators::new(n as usize))
        .collect();
    let mut log = Vec::new();
    // Per VM: the setting in force on the host (the tuner's, once applied).
    let mut applied = initial;
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(HOST_WINDOW);
        let stats = scheduler.vcpu_stats();
        let guest = scheduler.guest_counters();
        let now = Instant::now();
        let at_ns = u64::try_from(now.duration_since(start).as_nanos()).unwrap_or(u64::MAX);
        let mut base = 0usize;
        for (vm, &n) in vcpus_per_vm.iter().enumerate() {
            let mine = || stats.iter().skip(base).take(n as usize);
            let spins: u64 = mine().map(|s| s.spins_detected).sum();
            let run_ns: u64 = mine().map(|s| s.run_ns).sum();
            let counters = guest.get(base..base + n as usize).unwrap_or(&[]);
            base += n as usize;
            let indicators = inputs[vm].observe(spins, run_ns, counters, config.window_ns);
            if tuners[vm].observe(at_ns, indicators).is_some() {
                if let Some(d) = tuners[vm].log().last() {
                    log.push(format!("vm {vm}: {d}"));
                }
            }
        }
        for (vm, tuner) in tuners.iter().enumerate() {
            log.extend(apply_setting(
                scheduler,
                vm,
                &mut applied[vm],
                tuner.current(),
            ));
        }
        let slice = tuners
            .iter()
            .map(|t| t.current().slice_ns)
            .min()
            .unwrap_or(long);
        scheduler.set_slice_ns(slice);
    }
    for (vm, input) in inputs.iter().enumerate() {
        log.push(format!("vm {vm}: saw {}", input.summary()));
    }
    log
}

/// Carry out VM `vm`'s `wanted` setting where it differs from `applied`
/// (the one in force): its vCPU affinity and its interrupt routing (the
/// slice is the host's, set by the caller). Returns the log lines of what it
/// did. `applied` follows what took effect; a routing the guest cannot take
/// yet (its memory does not exist) is left for the next window, any other
/// refusal is logged once and not retried.
pub fn apply_setting(
    scheduler: &HostScheduler,
    vm: usize,
    applied: &mut Setting,
    wanted: &Setting,
) -> Vec<String> {
    let mut log = Vec::new();
    applied.slice_ns = wanted.slice_ns;
    if wanted.affinity != applied.affinity {
        match scheduler.set_vm_affinity(vm, wanted.affinity) {
            Ok(()) => log.push(format!(
                "vm {vm}: applied vCPU affinity {}",
                wanted.affinity
            )),
            Err(e) => log.push(format!(
                "vm {vm}: vCPU affinity {} not applied: {e}",
                wanted.affinity
            )),
        }
        applied.affinity = wanted.affinity;
    }
    if wanted.irq != applied.irq {
        match scheduler.set_irq_affinity(vm, &wanted.irq) {
            Ok(()) => {
                log.push(format!(
                    "vm {vm}: applied interrupt affinity {}",
                    wanted.irq
                ));
                applied.irq = wanted.irq.clone();
            }
            Err(HostError::IrqRoute(IrqRouteError::NotRunning)) => {}
            Err(e) => {
                log.push(format!(
                    "vm {vm}: interrupt affinity {} not applied: {e}",
                    wanted.irq
                ));
                applied.irq = wanted.irq.clone();
            }
        }
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_policy::{Affinity, HostPolicy};
    use smplab_vmm::host::Sampling;

    fn setting(affinity: VcpuAffinity, irq: IrqAffinity) -> Setting {
        Setting {
            slice_ns: 4_000_000,
            affinity,
            irq,
        }
    }

    #[test]
    fn apply_setting_pins_routes_and_retries_only_what_can_succeed_later() {
        let cpus: Vec<usize> = smplab_vmm::placement::allowed_cpus()
            .into_iter()
            .take(2)
            .collect();
        let policy: HostPolicy = "rr:4ms".parse().unwrap();
        let sched = HostScheduler::new(&policy, &[2, 2], &cpus, Sampling::default()).unwrap();
        let mut applied = setting(VcpuAffinity::Floating, IrqAffinity::default());
        let pinned = setting(VcpuAffinity::Pinned, IrqAffinity::default());
        let log = apply_setting(&sched, 1, &mut applied, &pinned);
        assert_eq!(log, vec!["vm 1: applied vCPU affinity pinned".to_string()]);
        assert_eq!(applied, pinned);
        assert_eq!(
            sched.vcpu_affinity(1, 1),
            Affinity::Pcpus(vec![1 % cpus.len()])
        );
        assert_eq!(sched.vcpu_affinity(0, 1), Affinity::Any, "VM 0 untouched");
        // No VM memory yet: a vCPU routing waits for the next window.
        let to_1 = setting(VcpuAffinity::Pinned, IrqAffinity::Vcpus(vec![1]));
        assert!(apply_setting(&sched, 1, &mut applied, &to_1).is_empty());
        assert_eq!(applied.irq, IrqAffinity::default(), "retried later");
        // `running` is the scheduler's to maintain: taken at once.
        let running = setting(VcpuAffinity::Pinned, IrqAffinity::Running);
        let log = apply_setting(&sched, 1, &mut applied, &running);
        assert_eq!(
            log,
            vec!["vm 1: applied interrupt affinity running".to_string()]
        );
        // A VM that does not exist: said once, not retried.
        let mut other = setting(VcpuAffinity::Floating, IrqAffinity::default());
        let log = apply_setting(&sched, 7, &mut other, &pinned);
        assert_eq!(log.len(), 1, "{log:?}");
        assert!(log[0].contains("VM 7 does not exist"), "{log:?}");
        assert!(apply_setting(&sched, 7, &mut other, &pinned).is_empty());
    }
}
