//! VMM mechanisms beyond scheduling: pause-loop exiting, the Spin Detection
//! Buffer (spin detection and false positives, both leading to spin-triggered
//! preemption), and device-model exits with their synchronization (Partheymüller:
//! global lock, I/O thread with posted writes, hybrid, fine-grained).
//! IPI and HLT costs are applied where the guest sends and halts (guest.rs).

use super::{exit, Act, Sim};
use crate::breakdown as cause;
use crate::events::Kind;
use crate::scenario::DeviceSync;

/// Causes during which a vCPU executes guest code in guest mode, whatever
/// the platform: user work and spinning, the guest's polling idle loop (at
/// CPL3 in smplab's guest), cache refills and line transfers.
const GUEST_MODE: [usize; 8] = [
    cause::USER,
    cause::USER_SYNC,
    cause::SPIN_LOCK,
    cause::SPIN_MUTEX,
    cause::SPIN_BARRIER,
    cause::IDLE_POLL,
    cause::CACHE_REFILL,
    cause::CACHE_LINE_TRANSFER,
];

/// Guest kernel causes: in guest mode with hardware-assisted virtualization,
/// in the host's instruction emulator on a platform with `[vm_kernel]` costs
/// (PVM here: guest CPL0 is emulated), where a host tick is no exit.
const GUEST_KERNEL: [usize; 7] = [
    cause::KERNEL_SCHED,
    cause::KERNEL_FUTEX,
    cause::KERNEL_IPI_SEND,
    cause::KERNEL_IPI_HANDLER,
    cause::KERNEL_SHOOTDOWN_HANDLER,
    cause::KERNEL_IO_HANDLER,
    cause::SPIN_SHOOTDOWN,
];

impl Sim {
    /// Host timer-tick exits of one VM (part of `irq`): the host's timer
    /// interrupt fires on each pCPU `defaults.host_tick_hz` times a second
    /// (the host kernel's `CONFIG_HZ`; Linux keeps the tick on a busy CPU),
    /// and each that lands while a vCPU runs in guest mode takes it out
    /// (KVM counts an `irq_exits`). Counted as the expected number over the
    /// VM's guest-mode time `by_cause`, rounded. Its time (a few µs per
    /// tick, under 0.3% of the vCPU's time at 250 Hz) is already in the
    /// per-operation costs that calibration measures, as it is in native
    /// runs, so it is not charged again. On this PVM host the rate agrees
    /// with KVM's `irq_exits` (docs/sim.md, "Exits").
    pub(super) fn host_tick_exits(&self, by_cause: &[u64; cause::N]) -> u64 {
        let guest_ns: u64 = (0..cause::N)
            .filter(|&c| self.in_guest_mode(c))
            .map(|c| by_cause[c])
            .sum();
        let hz = u128::from(self.platform.defaults.host_tick_hz);
        u64::try_from((u128::from(guest_ns) * hz + 500_000_000) / 1_000_000_000).unwrap_or(u64::MAX)
    }

    /// Whether a vCPU whose time goes to cause `c` is in guest mode, where
    /// a host interrupt (a tick, or the kick IPI that delivers a virtual
    /// interrupt) forces an exit. Guest kernel work is guest mode with
    /// hardware-assisted virtualization, and in the host's emulator on a
    /// platform with `[vm_kernel]` costs (PVM here).
    pub(super) fn in_guest_mode(&self, c: usize) -> bool {
        GUEST_MODE.contains(&c) || (self.platform.vm_kernel.is_none() && GUEST_KERNEL.contains(&c))
    }

    /// A virtual interrupt (IPI or device completion) is posted to running
    /// vCPU `u` without APICv: if `u` is in guest mode, KVM kicks its pCPU
    /// with a host IPI (`kvm_vcpu_kick` sends one only to a vCPU in
    /// `IN_GUEST_MODE`), whose external-interrupt exit KVM counts as an
    /// `irq_exits`. The kick's time is part of `ipi_receive_ns` (the
    /// `apic_eoi` cause), so nothing more is charged. Outside guest mode
    /// (an exit, emulated guest kernel work, halt-polling) the interrupt is
    /// picked up at the next entry without one. With APICv, posted
    /// interrupts reach a running vCPU without an exit.
    pub(super) fn count_kick_exit(&mut self, u: u32) {
        if self.current_cause(u).is_some_and(|c| self.in_guest_mode(c)) {
            self.count_exits(u, exit::IRQ, 1);
        }
    }

    /// PLE fired: exit, then yield the pCPU if someone can use it. With nobody
    /// to yield to, KVM grows the window (here: doubles, at most 16x).
    pub(super) fn ple_exit(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm as usize;
        let exit_ns = self.vms[vm].costs.exit;
        self.interrupt_act(v);
        let vc = &mut self.vcpus[v as usize];
        self.vm_exits[vc.vm as usize][exit::PLE] += 1;
        vc.yielded = true;
        self.add_overhead(v, cause::EXIT_PLE, exit_ns);
        let yielded = self.spin_yield(v);
        let vc = &mut self.vcpus[v as usize];
        vc.yielded = false;
        if yielded {
            return;
        }
        vc.ple_shift = (vc.ple_shift + 1).min(4);
        self.resume(v);
    }

    /// The SDB classified the vCPU as spinning (or idle-polling): preempt it
    /// in favour of a waiting vCPU. Re-armed only when someone queues here.
    pub(super) fn sdb_detects(&mut self, v: u32) {
        let vm = self.vcpus[v as usize].vm as usize;
        let exit_ns = self.vms[vm].costs.exit;
        self.interrupt_act(v);
        let vc = &mut self.vcpus[v as usize];
        self.vm_exits[vc.vm as usize][exit::SDB] += 1;
        vc.sdb_at = u64::MAX;
        vc.yielded = true;
        self.add_overhead(v, cause::EXIT_SDB, exit_ns);
        let yielded = self.spin_yield(v);
        self.vcpus[v as usize].yielded = false;
        if yielded {
            return;
        }
        self.resume(v);
    }

    /// Arm the SDB on pCPU `p` when vCPUs wait there: detection of a current
    /// spinner, and the next false positive during useful work.
    pub(super) fn arm_sdb_false_positive(&mut self, p: u32) {
        let pc = &self.pcpus[p as usize];
        let v = pc.cur;
        if v == super::NONE || !self.contended(p) {
            return;
        }
        let vm = self.vcpus[v as usize].vm as usize;
        if !self.vms[vm].sdb {
            return;
        }
        let costs = self.vms[vm].costs;
        let now = self.now;
        let vc = &mut self.vcpus[v as usize];
        if matches!(vc.act, Act::Spin | Act::IdlePoll) && vc.sdb_at == u64::MAX {
            vc.sdb_at = now + costs.sdb_detect;
            self.reschedule(v);
        }
        if !self.pcpus[p as usize].sdb_armed && costs.sdb_fp > 0.0 {
            self.pcpus[p as usize].sdb_armed = true;
            let u = self.rand_f64_on(p);
            // Windows until the first misclassification: geometric.
            let windows = if costs.sdb_fp >= 1.0 {
                1.0
            } else {
                ((1.0 - u).ln() / (1.0 - costs.sdb_fp).ln()).ceil().max(1.0)
            };
            let at = now.saturating_add(crate::units_from_f64(
                windows * self.platform.sdb.window_ns as f64,
            ));
            let gen = self.pcpus[p as usize].slice_gen;
            self.push(at, Kind::SdbFalse { pcpu: p, gen });
        }
    }

    /// A false positive: useful work looked like a spin and gets preempted.
    pub(super) fn sdb_false_positive(&mut self, p: u32) {
        self.pcpus[p as usize].sdb_armed = false;
        let v = self.pcpus[p as usize].cur;
        if v == super::NONE {
            return;
        }
        // The SDB classifies windows of committed guest instructions: a
        // misclassification needs one whole window of the segment since the
        // vCPU resumed guest work. A false positive armed during the
        // dispatch's exit and switch overhead used to land a few ns into the
        // segment, so each dispatch made almost no progress and paid another
        // exit (a starvation the fuzz test found on pvm-here with 50-100 µs
        // slices, idle pollers and a 50% false-positive rate).
        let vc = &self.vcpus[v as usize];
        let in_guest = vc.act == Act::Segment
            && self.now.saturating_sub(vc.seg_start) >= self.platform.sdb.window_ns;
        if in_guest && self.contended(p) {
            let vm = self.vcpus[v as usize].vm as usize;
            let exit_ns = self.vms[vm].costs.exit;
            let vc = &mut self.vcpus[v as usize];
            self.vm_exits[vc.vm as usize][exit::SDB] += 1;
            self.add_overhead(v, cause::EXIT_SDB, exit_ns);
            if self.phost.is_some() {
                self.interrupt_act(v);
                if !self.policy_spin_exit(v) {
                    self.resume(v);
                }
            } else {
                let _ = self.preempt(p);
            }
        } else {
            self.arm_sdb_false_positive(p);
        }
    }

    /// A device-model exit in the middle of a segment.
    pub(super) fn device_exit(&mut self, v: u32) {
        self.interrupt_act(v);
        let vm = self.vcpus[v as usize].vm as usize;
        let Some(d) = self.vms[vm].devices else {
            self.resume(v);
            return;
        };
        let costs = self.vms[vm].costs;
        let service = self.platform.device.service_ns;
        let now = self.now;
        let period = crate::units_from_f64(1e6 / d.exits_per_ms);
        let take = |acc: &mut f64, frac: f64| {
            *acc += frac;
            if *acc >= 1.0 {
                *acc -= 1.0;
                true
            } else {
                false
            }
        };
        let vmr = &mut self.vms[vm];
        // Serialized server (global lock or I/O thread): FIFO in time order,
        // exact because events are processed in time order.
        let serial = |sync: bool, vmr: &mut super::Vm| -> (u64, u64) {
            let start = vmr.device_busy_until.max(now);
            vmr.device_busy_until = start + service;
            if sync {
                (start - now, start + service - now)
            } else {
                (0, 0)
            }
        };
        let (wait, stall) = match d.sync {
            DeviceSync::Fine => (0, service),
            DeviceSync::Global => serial(true, vmr),
            DeviceSync::IoThread => {
                let sync = take(&mut vmr.device_sync_acc, d.synchronous);
                serial(sync, vmr)
            }
            DeviceSync::Hybrid { bypass } => {
                if take(&mut vmr.device_bypass_acc, bypass) {
                    (0, service)
                } else {
                    let sync = take(&mut vmr.device_sync_acc, d.synchronous);
                    serial(sync, vmr)
                }
            }
        };
        vmr.device_wait_ns += wait;
        let vc = &mut self.vcpus[v as usize];
        self.vm_exits[vc.vm as usize][exit::DEVICE] += 1;
        vc.next_device_in = period.max(1);
        self.add_overhead(v, cause::DEVICE_WAIT, wait);
        self.add_overhead(v, cause::EXIT_IO, costs.user_exit + stall - wait);
        self.resume(v);
    }
}
