//! The host spec's `tune = true`: seed 001's tuner (`smplab_policy::tune`)
//! watching a real `smplab host` run. Every window it reads the user-level
//! scheduler's counts per VM and sets the host slice (the shortest any VM's
//! tuner asks for). Its input (`host::indicators`): spin detections (the
//! sampler's), rescheduling IPIs and device-interrupt latency (the guest's
//! published counters); refill cost is not measurable on this host.
//! Affinity and interrupt routing are not applied (the scheduler has no
//! per-vCPU affinity; the guest's routing is fixed at boot). docs/host.md.

use super::indicators::VmIndicators;
use smplab_policy::tune::{Setting, Tuner, TunerConfig, VcpuAffinity};
use smplab_record::config::IrqAffinity;
use smplab_vmm::host::HostScheduler;
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
pub fn tune_host(
    scheduler: &HostScheduler,
    vcpus_per_vm: &[u32],
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
    let initial = Setting {
        slice_ns: long,
        affinity: VcpuAffinity::Floating,
        irq: IrqAffinity::default(),
    };
    let mut tuners: Vec<Tuner> = vcpus_per_vm
        .iter()
        .map(|_| Tuner::new(config.clone(), initial.clone()))
        .collect();
    let start = Instant::now();
    let mut inputs: Vec<VmIndicators> = vcpus_per_vm
        .iter()
        .map(|&n| VmIndicators::new(n as usize))
        .collect();
    let mut log = Vec::new();
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
