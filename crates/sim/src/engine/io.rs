//! Device I/O (`io` ops) and interrupt routing (Kulkarni & Kulkarni).
//!
//! Each VM has its own devices. A request occupies one of its device's
//! `queue_depth` slots for its service time (later ones queue in submission
//! order); the submitting thread blocks (`TState::IoWait`). At the due time
//! the host thread that completes requests injects the interrupt: after the
//! host's injection cost (`vmm.exit_ns`, the KVM_IRQ_LINE round trip), plus a
//! host context switch (`vmm.vcpu_switch_ns`) when none of its allowed pCPUs
//! (`io_thread_cpus`, or any) is idle so it must preempt a vCPU. The
//! interrupt goes to the vCPU the guest's IOAPIC routes it to
//! (`irq_affinity`: one vCPU, a set in turn, every vCPU in turn, or vBalance's
//! choice of a vCPU the host is running at that moment) as an
//! `Ipi` event, so it is received exactly like an IPI: at once on a running
//! vCPU (injection exit and EOI exit without APICv), after the wakeup latency
//! on a halted one, and only when the host runs it again on a preempted one:
//! the latency the seed's interrupt affinity question is about. Its handler
//! (`cpu.wake_ns`: the guest driver's completion work is a wakeup of the
//! waiter) then wakes the waiter through the guest scheduler, like a timer
//! wakeup. On bare metal (the native reference) the device interrupts the
//! routed core directly: no injection cost.
//!
//! Limitation: the host thread's own CPU time is not taken from the vCPU it
//! preempts (only its switch-in delays the interrupt).

use super::{exit, HostState, Sim, TState, NONE};
use crate::breakdown as cause;
use crate::events::Kind;
use crate::scenario::VmSpec;
use smplab_record::config::IrqAffinity;
use smplab_record::io::{DeviceQueue, IoSection};
use smplab_record::LatencyHistogram;

/// Marks an entry of `Vcpu::irqs` as a device completion for the thread in
/// the low bits (shootdown IPIs carry their initiator thread without it).
pub(super) const IO_IRQ: u32 = 1 << 31;

/// Devices, routing and measurements of one VM.
pub(crate) struct VmIo {
    /// Per device: its requests (thread, service time).
    devices: Vec<DeviceQueue<(u32, u64)>>,
    affinity: IrqAffinity,
    /// Host pCPUs the completing thread may run on (empty: any).
    io_cpus: Vec<u32>,
    virtualized: bool,
    first_thread: u32,
    n_vcpus: u32,
    /// Per VM-local thread: device, submission time and due (completion)
    /// time of its request.
    device_of: Vec<u32>,
    submit: Vec<u64>,
    due: Vec<u64>,
    /// Per VM-local thread: completion time of a request whose waiter was
    /// woken but has not run yet (u64::MAX: none).
    woken_due: Vec<u64>,
    irq_seq: u64,
    requests: u64,
    irq_ns: Vec<u64>,
    wake_ns: Vec<u64>,
    device_ns: Vec<u64>,
    irqs_per_vcpu: Vec<u64>,
}

impl VmIo {
    /// The device host thread's allowed pCPUs are given and all satisfy
    /// `inside` (none given: it may use the whole host).
    pub(super) fn cpus_within(&self, inside: impl Fn(u32) -> bool) -> bool {
        !self.io_cpus.is_empty() && self.io_cpus.iter().all(|&p| inside(p))
    }

    /// The VM has devices (its program has `io` ops).
    pub fn has_devices(&self) -> bool {
        !self.devices.is_empty()
    }

    pub fn new(spec: &VmSpec, first_thread: u32, virtualized: bool, pcpus: usize) -> VmIo {
        let threads = spec.program.total_threads() as usize;
        VmIo {
            devices: spec
                .program
                .devices
                .iter()
                .map(|d| DeviceQueue::new(d.queue_depth))
                .collect(),
            affinity: spec.irq_affinity.clone(),
            io_cpus: spec
                .io_thread_cpus
                .iter()
                .copied()
                .filter(|&c| (c as usize) < pcpus)
                .collect(),
            virtualized,
            first_thread,
            n_vcpus: spec.vcpus,
            device_of: vec![0; threads],
            submit: vec![0; threads],
            due: vec![0; threads],
            woken_due: vec![u64::MAX; threads],
            irq_seq: 0,
            requests: 0,
            irq_ns: Vec::new(),
            wake_ns: Vec::new(),
            device_ns: Vec::new(),
            irqs_per_vcpu: vec![0; spec.vcpus as usize],
        }
    }

    /// Delivery latencies so far (completion to handler), in delivery order.
    pub(super) fn irq_latencies(&self) -> &[u64] {
        &self.irq_ns
    }

    pub(super) fn irq_affinity(&self) -> &IrqAffinity {
        &self.affinity
    }

    /// When the last request completed on the device (`None`: no request).
    pub(crate) fn last_completion_ns(&self) -> Option<u64> {
        (self.requests > 0)
            .then(|| self.due.iter().copied().max())
            .flatten()
    }

    /// Route later completions anew (the adaptive tuner).
    pub(super) fn set_irq_affinity(&mut self, affinity: IrqAffinity) {
        self.affinity = affinity;
    }

    /// The record's `io` section (`None` if the VM ran no `io` op).
    pub fn section(&self) -> Option<IoSection> {
        (self.requests > 0).then(|| IoSection {
            requests: self.requests,
            irq_latency: LatencyHistogram::from_samples(&self.irq_ns),
            wake_latency: LatencyHistogram::from_samples(&self.wake_ns),
            device_latency: LatencyHistogram::from_samples(&self.device_ns),
            irqs_per_cpu: self.irqs_per_vcpu.clone(),
        })
    }
}

impl Sim {
    fn io_local(&self, t: u32) -> (usize, usize) {
        let vm = self.threads[t as usize].vm as usize;
        (vm, (t - self.io[vm].first_thread) as usize)
    }

    /// Thread `t` on vCPU `v` submits a request and blocks until its
    /// completion interrupt's handler wakes it.
    pub(super) fn io_submit(
        &mut self,
        v: u32,
        t: u32,
        device: u32,
        service_ns: u64,
    ) -> super::flow::Flow {
        let now = self.now;
        let (vm, local) = self.io_local(t);
        self.vms[vm].ops[crate::code::counter::IO] += 1;
        self.threads[t as usize].pc += 1;
        let io = &mut self.io[vm];
        io.device_of[local] = device;
        io.submit[local] = now;
        if io.devices[device as usize]
            .submit((t, service_ns))
            .is_some()
        {
            io.due[local] = now + service_ns;
            self.push(now + service_ns, Kind::Timer { thread: t });
        }
        let costs = self.vms[vm].costs;
        if costs.virtualized {
            // The doorbell write is a device exit to the user-space VMM.
            self.count_exits(v, exit::DEVICE, 1);
            self.add_overhead(v, cause::EXIT_IO, costs.user_exit);
        }
        self.vms[vm].blocks += 1;
        self.block_current(v, t, TState::IoWait)
    }

    /// Thread `t`'s request is done on the device: free its slot, start the
    /// next queued request, and send the completion interrupt.
    pub(super) fn io_complete(&mut self, t: u32) {
        let now = self.now;
        let (vm, local) = self.io_local(t);
        let io = &mut self.io[vm];
        io.requests += 1;
        io.device_ns.push(now - io.submit[local]);
        io.due[local] = now;
        if let Some((next, service)) = io.devices[io.device_of[local] as usize].complete() {
            let nl = (next - io.first_thread) as usize;
            io.due[nl] = now + service;
            self.push(now + service, Kind::Timer { thread: next });
        }
        let io = &mut self.io[vm];
        let k = io.irq_seq;
        io.irq_seq += 1;
        let mut target = io.affinity.target(k, io.n_vcpus);
        if io.affinity == IrqAffinity::Running {
            let (first, n) = (self.vms[vm].first_vcpu, self.vms[vm].n_vcpus);
            // In turn from the k-th vCPU: the first one the host runs now.
            target = (0..n)
                .map(|i| (target + i) % n)
                .find(|&i| self.vcpus[(first + i) as usize].host == HostState::Running)
                .unwrap_or(0);
        }
        let io = &mut self.io[vm];
        if let Some(c) = io.irqs_per_vcpu.get_mut(target as usize) {
            *c += 1;
        }
        let host = if io.virtualized {
            let costs = self.vms[vm].costs;
            let cpus = &self.io[vm].io_cpus;
            let idle = |p: u32| self.pcpus[p as usize].cur == NONE;
            let some_idle = if cpus.is_empty() {
                (0..u32::try_from(self.pcpus.len()).unwrap_or(u32::MAX)).any(idle)
            } else {
                cpus.iter().any(|&p| idle(p))
            };
            costs.exit + if some_idle { 0 } else { costs.switch }
        } else {
            0
        };
        let u = self.vms[vm].first_vcpu + target;
        self.push(
            now + host,
            Kind::Ipi {
                vcpu: u,
                from: t | IO_IRQ,
            },
        );
    }

    /// The handler of `t`'s completion interrupt starts (first time only).
    pub(super) fn io_handler_starts(&mut self, t: u32) {
        let (vm, local) = self.io_local(t);
        let lat = self.now - self.io[vm].due[local];
        self.io[vm].irq_ns.push(lat);
    }

    /// The handler finished: wake the waiter through the guest scheduler.
    pub(super) fn io_handler_done(&mut self, t: u32) {
        let (vm, local) = self.io_local(t);
        let io = &mut self.io[vm];
        io.woken_due[local] = io.due[local];
        if self.threads[t as usize].state == TState::IoWait {
            self.wake_thread(t, None);
        }
    }

    /// Thread `t` is about to run on a vCPU: if an `io` completion woke it,
    /// that wait is over.
    #[inline]
    pub(super) fn io_note_running(&mut self, t: u32) {
        let vm = self.threads[t as usize].vm as usize;
        if !self.io_active.get(vm).copied().unwrap_or(false) {
            // No `io` ops: skip the VM's cold `io` entry on the hot path.
            return;
        }
        let Some(io) = self.io.get_mut(vm) else {
            return;
        };
        let local = (t - io.first_thread) as usize;
        if io.woken_due[local] != u64::MAX {
            let d = std::mem::replace(&mut io.woken_due[local], u64::MAX);
            io.wake_ns.push(self.now - d);
        }
    }
}
