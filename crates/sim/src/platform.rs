//! Platform profiles: what every modeled action costs on one kind of host.
//!
//! A profile is a TOML file (format in docs/sim.md). Two are built in:
//! `kvm2015` (the 2015-era KVM host of the papers, each cost cited in
//! `platforms/kvm2015.toml`) and `pvm-here` (this development machine,
//! `platforms/pvm-here.toml`). `smplab calibrate` writes files of the same format.
//! Every field is required so that a calibrated file never silently inherits a
//! guess from a built-in profile.

use crate::error::{locate, SimError};
use serde::{Deserialize, Serialize};

/// Costs of one host kind. All times in nanoseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Platform {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub cpu: CpuCosts,
    /// Guest kernel work inside a VM when it costs something else than on
    /// bare metal (on a host that emulates guest CPL0, ~100x more). Absent:
    /// a VM's kernel paths cost what `cpu` says, as with hardware-assisted
    /// virtualization, where guest kernel code runs at native speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_kernel: Option<KernelCosts>,
    pub native: NativeCosts,
    pub vmm: VmmCosts,
    pub cache: CacheCosts,
    pub sdb: SdbCosts,
    /// smplab-vmm's software spin detector, as the `spin` policy sees it.
    #[serde(default, skip_serializing_if = "HostSpinDetector::is_measured")]
    pub host_spin: HostSpinDetector,
    pub device: DeviceCosts,
    pub defaults: Defaults,
}

/// Costs of user-mode work, the same natively and in a VM (hardware-assisted
/// virtualization runs guest user code at full speed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuCosts {
    /// One iteration of the compute kernel (imul+add dependency chain).
    pub compute_ns_per_iter: f64,
    /// One access of a `touch` walk whose line is in the private caches.
    pub touch_ns_per_access: f64,
    /// One atomic read-modify-write on a shared line.
    pub atomic_ns: u64,
    /// Moving a contended cache line to another core (lock hand-off latency).
    pub line_transfer_ns: u64,
    /// One pass of a spin loop with PAUSE.
    pub spin_iter_pause_ns: f64,
    /// One pass of a spin loop without PAUSE.
    pub spin_iter_nopause_ns: f64,
    /// Uncontended mutex / queue operation (user-space fast path).
    pub sync_op_ns: u64,
    /// Guest (or native) kernel work to block a thread and switch to another.
    pub context_switch_ns: u64,
    /// Kernel work of a wakeup (futex wake, enqueue on a run queue).
    pub wake_ns: u64,
    /// A sched_yield system call.
    pub yield_ns: u64,
    /// Running one shootdown handler (flush + ack) on a target CPU.
    pub shootdown_handler_ns: u64,
    /// Kernel time slice of the guest (native) scheduler among threads on one CPU.
    pub guest_slice_ns: u64,
}

/// Guest kernel paths, each a whole path from kernel entry to return (the
/// entry and exit of the kernel are part of every kind's cost).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelCosts {
    /// Block a thread and switch to another (scheduler path).
    pub context_switch_ns: u64,
    /// Wake a blocked thread (futex wake, enqueue on a run queue).
    pub wake_ns: u64,
    /// A sched_yield system call.
    pub yield_ns: u64,
    /// One shootdown handler (flush + ack) on a target CPU.
    pub shootdown_handler_ns: u64,
    /// An idle CPU switching to a thread woken for it: the idle loop's pick,
    /// the switch from the idle context and the return from the thread's
    /// blocking call (plus the wake interrupt's entry and EOI when it was
    /// halted). Paid by the woken thread's CPU before the thread runs, so it
    /// is kernel time there, not idle. 0 (the default, and bare metal,
    /// where it is a microsecond or two) folds it into nothing.
    #[serde(default)]
    pub switch_in_ns: u64,
}

/// Costs natively (no VMM): the reference run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NativeCosts {
    /// Sending an IPI (APIC register write).
    pub ipi_send_ns: u64,
    /// IPI delivery to a running core (interrupt entry + handler + EOI).
    pub ipi_receive_ns: u64,
    /// Waking a core from its idle state (C1 → C0) on an IPI.
    pub idle_wake_ns: u64,
    /// Polling idle noticing new work (need_resched flag, no IPI).
    pub poll_notice_ns: u64,
    /// How long the idle governor polls before entering C1 (predicted-short
    /// idle periods are polled, not halted).
    pub idle_poll_ns: u64,
}

/// VMM mechanisms (exits, IPIs, halts, host scheduling).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmmCosts {
    /// Round trip of a simple exit handled in the kernel (exit + handler + entry).
    pub exit_ns: u64,
    /// Exit to the user-space VMM and back (device models).
    pub user_exit_ns: u64,
    /// HLT exit: block the vCPU thread in the host.
    pub hlt_exit_ns: u64,
    /// Waking a halted vCPU thread (kick + host scheduler wakeup) before it can be dispatched.
    pub hlt_wake_ns: u64,
    /// Waking a vCPU that is still inside the host's halt-poll window.
    pub halt_poll_wake_ns: u64,
    /// Sending an IPI without APIC virtualization (ICR write exit).
    pub ipi_send_ns: u64,
    /// Sending an IPI with APIC virtualization.
    pub ipi_send_apicv_ns: u64,
    /// Receiving an interrupt on a running vCPU without APICv (kick exit, injection, EOI exit).
    pub ipi_receive_ns: u64,
    /// Receiving an interrupt on a running vCPU with APICv (posted interrupt, no EOI exit).
    pub ipi_receive_apicv_ns: u64,
    /// Host context switch from one vCPU thread to another on a pCPU (plus VM entry).
    pub vcpu_switch_ns: u64,
    /// Guest polling idle noticing new work (same as native: no IPI).
    pub poll_notice_ns: u64,
    /// Pause-loop exiting: spinning this long without leaving the loop causes a PLE exit.
    pub ple_window_ns: u64,
    /// PLE gap: PAUSEs further apart than this are not one loop.
    pub ple_gap_ns: u64,
}

/// First-order cache model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheCosts {
    /// pCPUs per core (SMT siblings, 1 without SMT): the host scheduler's
    /// smallest balancing domain when above 1.
    pub pcpus_per_core: u32,
    /// pCPUs per last-level-cache domain (socket).
    pub pcpus_per_llc: u32,
    pub line_bytes: u64,
    /// Refilling one line from the shared LLC (after a switch on the same domain).
    pub refill_llc_ns_per_line: f64,
    /// Refilling one line from memory / a remote LLC (after a cross-domain migration).
    pub refill_remote_ns_per_line: f64,
    /// Private cache capacity per core: warm-up never refills more than this.
    pub private_bytes: u64,
    /// Shared-buffer accesses cost this much more when every sharing partner runs
    /// in another LLC domain (scaled by the fraction that does).
    pub remote_share_factor: f64,
    /// A write walk's access of a line another core wrote since (fetched
    /// modified from that core's cache, then owned): the walk's effective
    /// cost per such line, its misses overlapped as an out-of-order core
    /// overlaps them, so less than `cpu.line_transfer_ns`, a hand-off's
    /// full latency (docs/sim.md, "Shared writes").
    pub shared_write_ns_per_line: f64,
}

/// The Spin Detection Buffer (Wells et al. §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SdbCosts {
    /// Time to detect a spin: one window of 1024 committed instructions, plus
    /// the windows needed to confirm it.
    pub detect_ns: u64,
    /// Probability that one window of useful work is misclassified as a spin.
    pub false_positive_rate: f64,
    /// Length of one detection window of useful work (1024 instructions).
    pub window_ns: u64,
}

/// smplab-vmm's software spin detector (crates/vmm/src/host/spin.rs), for
/// the simulator's `spin` policy (engine/spin_detector.rs). The default is
/// its measurement with `smplab host` (policy `spin:4ms`, 2 VMs x 2 vCPUs
/// on 2 host CPUs, scale 1, 1 ms sampling; 3 runs each of spinlock,
/// streamcluster, dedup and blackscholes, 2026-11-27 on the PVM host, load
/// ~10; docs/host.md, "Software spin detection"): sample precision 1.00 in
/// every run, 0 false detections in 3,787 samples (3,144 on dedup and
/// blackscholes); the guest's spin waits PAUSE, so each is called at its
/// first sample in the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HostSpinDetector {
    /// Samples in a row a spin must be seen in before it is called.
    pub confirm_samples: u32,
    /// Share of samples of a vCPU that does not spin called spinning.
    pub false_positive_rate: f64,
}

impl Default for HostSpinDetector {
    fn default() -> Self {
        HostSpinDetector {
            confirm_samples: 1,
            false_positive_rate: 0.0,
        }
    }
}

impl HostSpinDetector {
    /// Whether these are the measured figures (the default, left out of a
    /// written profile).
    pub fn is_measured(&self) -> bool {
        *self == HostSpinDetector::default()
    }
}

/// Device emulation (Partheymüller).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceCosts {
    /// Handling one device-model request (the serialized part).
    pub service_ns: u64,
}

/// Default settings a scenario gets when it does not say otherwise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    /// Host time slice of the proportional fair share scheduler.
    pub time_slice_ns: u64,
    /// KVM halt_poll_ns.
    pub halt_poll_ns: u64,
    /// The pause-loop exiting the host's CPUs have (`off` when a profile
    /// does not say: a mechanism is never assumed).
    #[serde(default = "no_ple")]
    pub ple: smplab_record::config::Ple,
    /// Fair policy: interval of the periodic load balance of a scheduling
    /// domain (core, LLC, host) per pCPU it spans (Linux `sd_init()`: a
    /// domain's `min_interval` is its weight in ms).
    pub balance_ns_per_pcpu: u64,
    /// Fair policy: half-life of the runnable average a vCPU's load is
    /// measured by (Linux PELT: `LOAD_AVG_PERIOD`, 32 ms).
    pub load_half_life_ns: u64,
    /// Fair policy: a domain is imbalanced when its busiest pCPU's load
    /// exceeds its least busy one's by this percentage (Linux `sd_init()`:
    /// `imbalance_pct`, 117).
    pub imbalance_pct: u32,
    /// The host kernel's timer interrupt rate per pCPU (`CONFIG_HZ`): each
    /// tick that lands on a vCPU in guest mode is an `irq` exit.
    pub host_tick_hz: u32,
}

fn no_ple() -> smplab_record::config::Ple {
    smplab_record::config::Ple::Off
}

const KVM2015: &str = include_str!("../platforms/kvm2015.toml");
const PVM_HERE: &str = include_str!("../platforms/pvm-here.toml");
const AMDV_TCG: &str = include_str!("../platforms/amdv-tcg.toml");

/// Names of the built-in profiles.
pub const BUILTIN: &[&str] = &["kvm2015", "pvm-here", "amdv-tcg"];

impl Platform {
    /// Kernel path costs on bare metal (`virtualized == false`) or in a VM.
    pub fn kernel(&self, virtualized: bool) -> KernelCosts {
        match (virtualized, self.vm_kernel) {
            (true, Some(k)) => k,
            _ => KernelCosts {
                context_switch_ns: self.cpu.context_switch_ns,
                wake_ns: self.cpu.wake_ns,
                yield_ns: self.cpu.yield_ns,
                shootdown_handler_ns: self.cpu.shootdown_handler_ns,
                switch_in_ns: 0,
            },
        }
    }

    /// A built-in profile: `kvm2015`, `pvm-here` or `amdv-tcg` (the nested
    /// AMD-V host, calibrated there: emulated timings).
    pub fn builtin(name: &str) -> Result<Platform, SimError> {
        let text = match name {
            "kvm2015" => KVM2015,
            "pvm-here" => PVM_HERE,
            "amdv-tcg" => AMDV_TCG,
            _ => {
                return Err(SimError::UnknownPlatform {
                    name: name.to_string(),
                })
            }
        };
        Platform::from_text(&format!("builtin:{name}"), text)
    }

    /// Parse profile text; errors point at file:line:col.
    pub fn from_text(origin: &str, text: &str) -> Result<Platform, SimError> {
        let p: Platform = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            locate(origin, text, offset, e.message().trim().replace('\n', "; "))
        })?;
        p.check(origin)?;
        Ok(p)
    }

    /// A built-in name, or a path to a profile file.
    pub fn resolve(name_or_path: &str) -> Result<Platform, SimError> {
        if BUILTIN.contains(&name_or_path) {
            return Platform::builtin(name_or_path);
        }
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") {
            let text = std::fs::read_to_string(name_or_path).map_err(|source| SimError::Io {
                path: name_or_path.to_string(),
                source,
            })?;
            return Platform::from_text(name_or_path, &text);
        }
        Err(SimError::UnknownPlatform {
            name: name_or_path.to_string(),
        })
    }

    /// Values serde accepts but the model cannot use.
    fn check(&self, origin: &str) -> Result<(), SimError> {
        let bad = |what: &str| SimError::BadPlatform {
            origin: origin.to_string(),
            message: what.to_string(),
        };
        if !(self.cpu.compute_ns_per_iter > 0.0 && self.cpu.compute_ns_per_iter.is_finite()) {
            return Err(bad("cpu.compute_ns_per_iter must be a positive number"));
        }
        if !(self.cpu.spin_iter_pause_ns > 0.0 && self.cpu.spin_iter_nopause_ns > 0.0) {
            return Err(bad("cpu.spin_iter_*_ns must be positive"));
        }
        let floats = [
            ("cpu.touch_ns_per_access", self.cpu.touch_ns_per_access),
            (
                "cache.refill_llc_ns_per_line",
                self.cache.refill_llc_ns_per_line,
            ),
            (
                "cache.refill_remote_ns_per_line",
                self.cache.refill_remote_ns_per_line,
            ),
            ("cache.remote_share_factor", self.cache.remote_share_factor),
            (
                "cache.shared_write_ns_per_line",
                self.cache.shared_write_ns_per_line,
            ),
        ];
        if let Some((name, _)) = floats.iter().find(|(_, v)| !(*v >= 0.0 && v.is_finite())) {
            return Err(bad(&format!("{name} must be a finite number >= 0")));
        }
        if self.cache.pcpus_per_llc == 0 || self.cache.line_bytes == 0 {
            return Err(bad(
                "cache.pcpus_per_llc and cache.line_bytes must be at least 1",
            ));
        }
        if !(0.0..=1.0).contains(&self.host_spin.false_positive_rate) {
            return Err(bad("host_spin.false_positive_rate must be between 0 and 1"));
        }
        if !(0.0..=1.0).contains(&self.sdb.false_positive_rate) {
            return Err(bad("sdb.false_positive_rate must be between 0 and 1"));
        }
        if self.sdb.window_ns == 0 || self.defaults.time_slice_ns == 0 {
            return Err(bad(
                "sdb.window_ns and defaults.time_slice_ns must be positive",
            ));
        }
        if self.defaults.balance_ns_per_pcpu == 0 || self.defaults.load_half_life_ns == 0 {
            return Err(bad(
                "defaults.balance_ns_per_pcpu and defaults.load_half_life_ns must be positive",
            ));
        }
        if self.defaults.imbalance_pct < 100 {
            return Err(bad("defaults.imbalance_pct must be at least 100"));
        }
        if self.cache.pcpus_per_core == 0 {
            return Err(bad("cache.pcpus_per_core must be at least 1"));
        }
        if self.cpu.guest_slice_ns == 0 {
            return Err(bad("cpu.guest_slice_ns must be positive"));
        }
        Ok(())
    }

    /// The profile as TOML (what `smplab calibrate` writes).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_round_trip() {
        for name in BUILTIN {
            let p = Platform::builtin(name).expect("builtin parses");
            assert_eq!(&p.name, name);
            let back = Platform::from_text("x", &p.to_toml()).expect("round trip");
            assert_eq!(back, p);
        }
    }

    #[test]
    fn errors_are_located() {
        let text = Platform::builtin("kvm2015").unwrap().to_toml();
        let broken = text.replace("exit_ns = ", "exit_nz = ");
        let e = Platform::from_text("p.toml", &broken)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml:"), "{e}");
        assert!(e.contains("exit_nz"), "{e}");
        assert!(Platform::builtin("nope")
            .unwrap_err()
            .to_string()
            .contains("kvm2015"));
    }
}
