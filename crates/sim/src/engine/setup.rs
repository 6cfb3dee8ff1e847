//! Building a simulation from a scenario: pCPUs, and per VM its compiled
//! program, threads, vCPUs (with their placement ranges), synchronization
//! objects, devices and costs.

use super::guest_rq::{GuestRq, RqLink};
use super::{
    exit, io, policy_host, Acct, Act, BarrierSt, Costs, HostState, MutexSt, Pcpu, QueueSt, Sim,
    SpinLockSt, TState, Thread, ThreadAcct, Vcpu, VcpuAcct, Vm, Wait, NONE,
};
use crate::breakdown as cause;
use crate::code::{compile, GroupCode};
use crate::events::Queue;
use crate::scenario::{pcpu_range_of, Idle, Placement, Scenario, VmSpec};
use crate::SimError;
use std::collections::VecDeque;
use std::sync::Arc;

impl Sim {
    pub fn new(s: &Scenario) -> Result<Sim, SimError> {
        s.check()?;
        let p = &s.platform;
        let per_llc = s
            .topology
            .pcpus_per_llc
            .unwrap_or(p.cache.pcpus_per_llc)
            .max(1);
        let domains = s.pcpus.div_ceil(per_llc);
        let slice_ns = s.policy.time_slice_ns.unwrap_or(p.defaults.time_slice_ns);
        let mut sim = Sim {
            now: 0,
            vacct: Vec::new(),
            tacct: Vec::new(),
            vm_by_cause: Vec::new(),
            vm_exits: Vec::new(),
            pcpu_by_cause: [0; cause::N],
            pcpu_busy: vec![0; s.pcpus as usize],
            q: Queue::for_vcpus(s.vms.iter().map(|v| u64::from(v.vcpus)).sum()),
            platform: p.clone(),
            policy: s.policy,
            slice_ns,
            pcpus: (0..s.pcpus)
                .map(|i| Pcpu {
                    cur: NONE,
                    rq: super::host_rq::HostRq::default(),
                    slice_gen: 0,
                    slice_end: u64::MAX,
                    slice_event_at: u64::MAX,
                    sdb_armed: false,
                    dispatched_at: 0,
                    last_vcpu: NONE,
                    buddy: NONE,
                    min_vr: 0,
                    domain: i / per_llc,
                    idle_ns: 0,
                    idle_since: u64::MAX,
                })
                .collect(),
            vcpus: Vec::new(),
            vruntime: Vec::new(),
            threads: Vec::new(),
            rq_links: Vec::new(),
            irq_queues: Vec::new(),
            vms: Vec::new(),
            idle_bits: super::bits::HostBits::new(s.pcpus as usize),
            busy_rq_bits: super::bits::HostBits::new(s.pcpus as usize),
            pcpu_load: vec![0; s.pcpus as usize],
            vcpu_rq_bits: Vec::new(),
            domains,
            per_llc,
            rngs: vec![stream_seed(s.seed, 0)],
            vms_done: 0,
            phost: policy_host::PolicyHost::new(s)?,
            stats: std::env::var_os("SMPLAB_SIM_STATS").is_some(),
            trace: std::env::var_os("SMPLAB_SIM_TRACE").is_some(),
            kind_counts: [0; 14],
            stale: 0,
            balance_failed: Vec::new(),
            balance_scratch: super::balance::BalanceScratch::default(),
            code_cache: Vec::new(),
            code: Vec::new(),
            io: Vec::new(),
            io_active: Vec::new(),
            tuner: None,
            parts: None,
            routing: false,
        };
        for i in 0..s.pcpus {
            sim.set_bit_idle(i, true);
        }
        let ranges = sim.vm_ranges(s);
        for (k, spec) in s.vms.iter().enumerate() {
            sim.add_vm(
                u32::try_from(k).unwrap_or(u32::MAX),
                spec,
                s.virtualized,
                ranges[k],
                u32::try_from(s.vms.len()).unwrap_or(u32::MAX),
            )?;
        }
        if sim.vm_domains().is_some() {
            // Every VM in one LLC domain: a stream per domain (the
            // partitioned engine's condition; `Sim::rngs`).
            sim.rngs = (0..u64::from(domains))
                .map(|d| stream_seed(s.seed, d))
                .collect();
        }
        Ok(sim)
    }

    /// Allowed pCPU range of each VM: the whole host, or its share under
    /// `partition` (the policy's decision, `smplab_policy::partition_shares`).
    fn vm_ranges(&self, s: &Scenario) -> Vec<(u32, u32)> {
        let pc = s.pcpus;
        match &self.phost {
            Some(ph) => (0..s.vms.len())
                .map(|k| {
                    let (lo, hi) = ph.sched.share(k);
                    let to32 = |x: usize| u32::try_from(x).unwrap_or(pc);
                    (to32(lo), to32(hi))
                })
                .collect(),
            None => vec![(0, pc); s.vms.len()],
        }
    }

    /// VM `k` of the scenario: its code, threads, vCPUs (allowed on pCPUs
    /// `range` when floating), devices and state.
    fn add_vm(
        &mut self,
        k: u32,
        spec: &VmSpec,
        virtualized: bool,
        range: (u32, u32),
        n_vms: u32,
    ) -> Result<(), SimError> {
        let (code, bases) = self.shared_code(spec)?;
        let costs = vm_costs(&self.platform, spec, virtualized);
        let first_thread = u32::try_from(self.threads.len()).unwrap_or(u32::MAX);
        let first_vcpu = u32::try_from(self.vcpus.len()).unwrap_or(u32::MAX);
        let n_threads = spec.program.total_threads();
        self.add_threads(k, spec, &code, &bases, first_vcpu);
        for i in 0..spec.vcpus {
            let (lo, hi) = vcpu_range(spec, virtualized, i, k, n_vms, range);
            self.add_vcpu(k, i, (lo, hi));
            // Threads start round-robin over the vCPUs.
            let v = first_vcpu + i;
            for t in (first_thread..first_thread + n_threads)
                .skip(i as usize)
                .step_by(spec.vcpus as usize)
            {
                self.rq_push_back(v, t);
            }
        }
        let dev_period = spec
            .devices
            .filter(|d| d.exits_per_ms > 0.0 && virtualized)
            .map(|d| crate::units_from_f64(1e6 / d.exits_per_ms));
        self.vcpu_rq_bits.resize(self.vcpus.len().div_ceil(64), 0);
        for v in first_vcpu..first_vcpu + spec.vcpus {
            self.vcpus[v as usize].next_device_in = dev_period.unwrap_or(u64::MAX);
            self.vcpu_rq_bit(v);
        }
        let vm_io = io::VmIo::new(spec, first_thread, virtualized, self.pcpus.len());
        self.io_active.push(vm_io.has_devices());
        self.io.push(vm_io);
        self.vm_by_cause.push([0; cause::N]);
        self.vm_exits.push([0; exit::N]);
        let vm = self.new_vm(spec, virtualized, costs, &code, (first_thread, first_vcpu));
        self.vms.push(vm);
        Ok(())
    }

    /// The VM's compiled program, appended to the shared code once per
    /// distinct program, and each group's first instruction in it.
    /// Identical programs share one compiled copy: with hundreds of VMs
    /// running a few profiles this keeps the interpreter's code in cache.
    fn shared_code(&mut self, spec: &VmSpec) -> Result<(Arc<Vec<GroupCode>>, Vec<u32>), SimError> {
        if let Some((_, c, b)) = self
            .code_cache
            .iter()
            .find(|(prog, _, _)| prog == &spec.program)
        {
            return Ok((Arc::clone(c), b.clone()));
        }
        let c = Arc::new(compile(&spec.program, &self.platform));
        let mut bases = Vec::with_capacity(c.len());
        for g in c.iter() {
            bases.push(u32::try_from(self.code.len()).map_err(|_| {
                SimError::Scenario("the programs have over 4 billion instructions in total".into())
            })?);
            self.code.extend_from_slice(&g.ins);
        }
        self.code_cache
            .push((spec.program.clone(), Arc::clone(&c), bases.clone()));
        Ok((c, bases))
    }

    /// The VM's threads, each starting on vCPU `index % vcpus`.
    fn add_threads(
        &mut self,
        k: u32,
        spec: &VmSpec,
        code: &[GroupCode],
        bases: &[u32],
        first_vcpu: u32,
    ) {
        let p = &self.platform;
        let line = p.cache.line_bytes.max(1);
        let cap = p.cache.private_bytes;
        for (ti, (g, idx)) in spec.program.threads().into_iter().enumerate() {
            let gc = &code[g];
            self.tacct.push(ThreadAcct::default());
            self.rq_links.push(RqLink::UNLINKED);
            self.threads.push(Thread {
                vm: k,
                group: u32::try_from(g).unwrap_or(u32::MAX),
                code: bases[g],
                index: idx,
                vcpu: first_vcpu + (u32::try_from(ti).unwrap_or(u32::MAX) % spec.vcpus),
                pc: 0,
                loops: Vec::with_capacity(gc.depth),
                state: TState::Running,
                wait: Wait::None,
                retry: false,
                seg_left: 0,
                carry: 0,
                seg_k_live: false,
                spin_deadline: u64::MAX,
                spin_budget: u64::MAX,
                spin_locks_held: 0,
                acks_pending: 0,
                end_ns: 0,
                cpu_ns: 0,
                private_lines: gc.private_bytes.min(cap) / line,
                shared_lines: gc.shared_bytes.min(cap.saturating_sub(gc.private_bytes)) / line,
                write_mask: gc.write_mask,
            });
        }
    }

    /// vCPU `i` of VM `k`, allowed on pCPUs `lo..hi`, with an empty run queue.
    fn add_vcpu(&mut self, k: u32, i: u32, (lo, hi): (u32, u32)) {
        self.vacct.push(VcpuAcct::default());
        self.irq_queues.push(VecDeque::new());
        self.vruntime.push(0);
        self.vcpus.push(Vcpu {
            vm: k,
            index: i,
            host: HostState::Halted,
            pcpu: NONE,
            last_pcpu: NONE,
            act: Act::Off,
            gen: 0,
            step_at: u64::MAX,
            act_end: 0,
            seg_start: 0,
            overhead_left: 0,
            handler_left: 0,
            cur: NONE,
            rq: GuestRq::EMPTY,
            irq_front: NONE,
            slice_end: 0,
            spin_since: 0,
            spin_iter_ns: 1.0,
            ple_at: u64::MAX,
            ple_shift: 0,
            sdb_at: u64::MAX,
            acct: Acct::Off,
            acct_since: 0,
            acct_pcpu: NONE,
            acct_thread: NONE,
            yielded: false,
            acct_closed: false,
            lo,
            hi,
            next_device_in: 0,
            wake_pending: false,
            vr_pcpu: NONE,
            // Linux starts a new task's load average full
            // (init_entity_runnable_average).
            load_avg: 1.0,
            load_at: 0,
        });
    }

    /// The VM's state: settings, costs, its threads' and vCPUs' index
    /// ranges, its synchronization objects and counters.
    fn new_vm(
        &self,
        spec: &VmSpec,
        virtualized: bool,
        costs: Costs,
        code: &[GroupCode],
        (first_thread, first_vcpu): (u32, u32),
    ) -> Vm {
        let prog = &spec.program;
        let n_threads = prog.total_threads();
        Vm {
            spec_idle: if virtualized { spec.idle } else { Idle::Hlt },
            ple: if virtualized {
                spec.ple
            } else {
                crate::scenario::Ple::Off
            },
            sdb: virtualized && spec.sdb.is_some(),
            devices: if virtualized { spec.devices } else { None },
            costs,
            first_thread,
            n_threads,
            first_vcpu,
            n_vcpus: spec.vcpus,
            spin_locks: prog
                .spin_locks
                .iter()
                .map(|d| SpinLockSt {
                    holder: NONE,
                    waiters: Vec::new(),
                    kind: d.kind,
                    pause: d.pause,
                })
                .collect(),
            mutexes: prog
                .mutexes
                .iter()
                .map(|d| MutexSt {
                    holder: NONE,
                    spinners: Vec::new(),
                    blocked: VecDeque::new(),
                    spin_limit: d.spin_limit,
                })
                .collect(),
            barriers: prog
                .barriers
                .iter()
                .map(|d| BarrierSt {
                    parties: d.parties,
                    arrived: 0,
                    waiters: Vec::new(),
                    wait: d.wait,
                    spin_limit: d.spin_limit,
                    pause: d.pause,
                })
                .collect(),
            queues: prog
                .queues
                .iter()
                .map(|d| QueueSt {
                    count: 0,
                    capacity: d.capacity,
                    pushers: VecDeque::new(),
                    poppers: VecDeque::new(),
                })
                .collect(),
            pools: prog.pools.iter().map(|q| q.units).collect(),
            ops: [0; crate::code::counter::N],
            spin_iters: 0.0,
            blocks: 0,
            wakeups: 0,
            cs_voluntary: 0,
            cs_involuntary: 0,
            done_threads: 0,
            end_ns: 0,
            running: 0,
            // Every thread starts in a vCPU run queue (`add_vm`).
            queued_threads: n_threads,
            running_per_domain: vec![0; self.domains as usize],
            writers_running: vec![0; crate::code::write_slots(code)],
            contended_slots: contended_slots(code, prog, spec.vcpus),
            ipis: 0,
            migrations: 0,
            warmup_ns: 0,
            device_busy_until: 0,
            device_sync_acc: 0.0,
            device_bypass_acc: 0.0,
            device_wait_ns: 0,
        }
    }
}

/// What a VM's mechanisms cost on platform `p`: the VMM's exits and IPIs in
/// a VM (APICv's where enabled), bare metal's IPIs and idle otherwise.
fn vm_costs(p: &crate::platform::Platform, spec: &VmSpec, virtualized: bool) -> Costs {
    if virtualized {
        Costs {
            virtualized,
            apicv: spec.apicv,
            ipi_send: if spec.apicv {
                p.vmm.ipi_send_apicv_ns
            } else {
                p.vmm.ipi_send_ns
            },
            ipi_receive: if spec.apicv {
                p.vmm.ipi_receive_apicv_ns
            } else {
                p.vmm.ipi_receive_ns
            },
            hlt_exit: p.vmm.hlt_exit_ns,
            wake_latency: p.vmm.hlt_wake_ns,
            halt_poll_wake: p.vmm.halt_poll_wake_ns,
            poll_notice: p.vmm.poll_notice_ns,
            switch: p.vmm.vcpu_switch_ns,
            exit: p.vmm.exit_ns,
            user_exit: p.vmm.user_exit_ns,
            sdb_detect: spec
                .sdb
                .and_then(|s| s.detect_ns)
                .unwrap_or(p.sdb.detect_ns),
            sdb_fp: spec
                .sdb
                .and_then(|s| s.false_positive_rate)
                .unwrap_or(p.sdb.false_positive_rate),
            native_idle_poll: 0,
            kernel: p.kernel(true),
        }
    } else {
        Costs {
            virtualized,
            apicv: false,
            ipi_send: p.native.ipi_send_ns,
            ipi_receive: p.native.ipi_receive_ns,
            hlt_exit: 0,
            wake_latency: p.native.idle_wake_ns,
            halt_poll_wake: p.native.poll_notice_ns,
            poll_notice: p.native.poll_notice_ns,
            switch: 0,
            exit: 0,
            user_exit: 0,
            sdb_detect: 0,
            sdb_fp: 0.0,
            native_idle_poll: p.native.idle_poll_ns,
            kernel: p.kernel(false),
        }
    }
}

/// The start of LLC domain `d`'s random stream (`Sim::rngs`): stream 0 is
/// the engine's single stream (so scenarios with one stream draw what they
/// always drew); the others start at scrambled points of splitmix64's
/// cycle of 2^64, far apart for any run's draws.
fn stream_seed(seed: u64, d: u64) -> u64 {
    let base = seed ^ 0x9E37_79B9_7F4A_7C15;
    if d == 0 {
        return base;
    }
    let mut z = d.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    base ^ z ^ (z >> 29)
}

/// vCPU `i`'s allowed pCPUs: its core on bare metal; in a VM, the VM's
/// range (`plo..phi`) when floating, one pCPU of it when pinned, or the
/// spec's range.
fn vcpu_range(
    spec: &VmSpec,
    virtualized: bool,
    i: u32,
    k: u32,
    n_vms: u32,
    (plo, phi): (u32, u32),
) -> (u32, u32) {
    if !virtualized {
        // Bare metal: CPU i is core i.
        return (i, i + 1);
    }
    match &spec.placement {
        Placement::Float => (plo, phi),
        Placement::Spread => {
            // Spread evenly; different VMs start at different offsets
            // so pinned VMs do not all pile onto pCPU 0.
            // k < n_vms, so the offset is below spec.vcpus and fits.
            let off = u32::try_from(u64::from(k) * u64::from(spec.vcpus) / u64::from(n_vms.max(1)))
                .unwrap_or(0);
            let p = plo + (i + off) % (phi - plo);
            (p, p + 1)
        }
        // `Scenario::check` (run first by `Sim::new`) refused a list that is
        // not one contiguous range of the host's pCPUs.
        Placement::Cpus(_) => match pcpu_range_of(&spec.placement, u32::MAX) {
            Ok(Some((first, count))) => (first, first + count),
            _ => (plo, phi),
        },
    }
}

/// Write slots of a program that at least two of its threads write, on a
/// VM of at least two vCPUs (`Vm::contended_slots`).
fn contended_slots(code: &[GroupCode], prog: &smplab_workload::Program, vcpus: u32) -> u64 {
    if vcpus < 2 {
        return 0;
    }
    let mut once = 0u64;
    let mut twice = 0u64;
    for (g, _) in prog.threads() {
        let m = code[g].write_mask;
        twice |= once & m;
        once |= m;
    }
    twice
}
