//! Workload-window port (0x540, 32-bit; docs/guest-abi.md): the guest writes
//! `READY` once every workload thread exists and waits at its start gate,
//! reads the port until it answers `GO` (it answers `WAIT` while the host-side
//! [`StartGate`](crate::start_gate::StartGate) shared with other VMs is
//! closed), and writes `DONE` when the last workload thread has ended, before
//! its result stream. The device records the host `CLOCK_MONOTONIC` time of
//! each edge and the KVM vCPU statistics at "go" and "done"; each vCPU thread
//! splits its own exit counts at the same edges with a [`VcpuWindow`], so the
//! record can give the exits inside the workload window apart from boot and
//! the result stream.
//!
//! Thread-safe (atomics and short locks): a concurrent device. A read blocks
//! at most [`WAIT_SLICE`] and then answers `WAIT`, so the global lock or the
//! I/O thread (which may carry it in `global`/`iothread` modes) is never held
//! for long, and a VM asked to stop is never stuck in the device.

use super::{fill_le, le_value, ConcurrentDevice};
use crate::bus::{ClientStats, SyncMode};
use crate::control::RunControl;
use crate::exits::{ExitCounts, ExitReason};
use crate::start_gate::GateTicket;
use smplab_record::vmm::VmmWindow;
use smplab_record::window::StartGateRecord;
use smplab_record::LatencyHistogram;
use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Written by the guest: every worker exists and waits at the gate.
pub const READY: u32 = 1;
/// Written by the guest: the last worker has ended.
pub const DONE: u32 = 2;
/// Read answer: the host gate is still closed; read again. A distinctive
/// value, so a guest never mistakes a port some other VMM's device answers
/// with 0 for a reason to wait for ever.
pub const WAIT: u32 = u32::from_le_bytes(*b"WAIT");
/// Read answer: start the workload.
pub const GO: u32 = u32::from_le_bytes(*b"GO !");
/// Longest a single read blocks before answering [`WAIT`].
pub const WAIT_SLICE: Duration = Duration::from_millis(2);

/// Where the run is relative to the workload window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    BeforeGo = 0,
    InWindow = 1,
    AfterDone = 2,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::BeforeGo,
            1 => Phase::InWindow,
            _ => Phase::AfterDone,
        }
    }
}

#[derive(Default)]
struct Edges {
    ready_ns: Option<u64>,
    go_ns: Option<u64>,
    done_ns: Option<u64>,
    gate: Option<StartGateRecord>,
    kvm_at_go: Vec<BTreeMap<String, u64>>,
    kvm_at_done: Vec<BTreeMap<String, u64>>,
}

/// The window's phase (read by every vCPU thread on every exit) and its edges.
#[derive(Default)]
pub struct WindowState {
    phase: AtomicU8,
    edges: Mutex<Edges>,
}

impl WindowState {
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn edges(&self) -> std::sync::MutexGuard<'_, Edges> {
        self.edges.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub use smplab_record::window::monotonic_ns;

/// The device on port 0x540.
pub struct WindowDevice {
    state: Arc<WindowState>,
    ticket: Mutex<Option<GateTicket>>,
    kvm_stats: Vec<Option<File>>,
    control: Arc<RunControl>,
}

impl WindowDevice {
    /// `ticket`: this VM's place at a start gate shared with other VMs, if
    /// any; `kvm_stats`: the vCPUs' KVM stats files, read at "go" and "done".
    pub fn new(
        state: Arc<WindowState>,
        ticket: Option<GateTicket>,
        kvm_stats: Vec<Option<File>>,
        control: Arc<RunControl>,
    ) -> Self {
        WindowDevice {
            state,
            ticket: Mutex::new(ticket),
            kvm_stats,
            control,
        }
    }

    fn read_kvm_stats(&self) -> Vec<BTreeMap<String, u64>> {
        self.kvm_stats
            .iter()
            .map(|f| {
                f.as_ref()
                    .and_then(|f| crate::kvm_stats::read_stats(f).ok())
                    .unwrap_or_default()
            })
            .collect()
    }

    fn ready(&self) {
        let mut edges = self.state.edges();
        if edges.ready_ns.is_none() {
            edges.ready_ns = Some(monotonic_ns());
        }
        drop(edges);
        if let Some(ticket) = self
            .ticket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            ticket.arrive();
        }
    }

    fn answer(&self) -> u32 {
        if self.state.phase() != Phase::BeforeGo {
            return GO;
        }
        self.ready();
        let gate = {
            let mut ticket = self.ticket.lock().unwrap_or_else(|e| e.into_inner());
            match ticket.as_mut() {
                None => None,
                Some(t) => match t.wait(WAIT_SLICE) {
                    Some(record) => Some(record),
                    // A VM being stopped lets its guest go rather than wait.
                    None if !self.control.should_stop() => return WAIT,
                    None => None,
                },
            }
        };
        let kvm = self.read_kvm_stats();
        let mut edges = self.state.edges();
        edges.gate = gate;
        edges.kvm_at_go = kvm;
        edges.go_ns = Some(monotonic_ns());
        self.state
            .phase
            .store(Phase::InWindow as u8, Ordering::Release);
        GO
    }

    fn done(&self) {
        if self.state.phase() != Phase::InWindow {
            return;
        }
        let done_ns = monotonic_ns();
        self.state
            .phase
            .store(Phase::AfterDone as u8, Ordering::Release);
        let kvm = self.read_kvm_stats();
        let mut edges = self.state.edges();
        edges.done_ns = Some(done_ns);
        edges.kvm_at_done = kvm;
    }
}

impl ConcurrentDevice for WindowDevice {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        fill_le(data, u64::from(self.answer()), 0);
    }

    fn write(&self, _offset: u64, data: &[u8]) {
        match le_value(data) {
            v if v == u64::from(READY) => self.ready(),
            v if v == u64::from(DONE) => self.done(),
            _ => {}
        }
    }
}

/// One vCPU's statistics at a window edge.
struct Snapshot {
    exits: ExitCounts,
    stats: ClientStats,
}

/// One vCPU's exits inside the window.
pub struct WindowCounts {
    /// Reason name -> count, leaving out reasons never seen (the record form).
    pub exits: BTreeMap<String, u64>,
    pub stats: ClientStats,
}

/// Splits one vCPU thread's exit counts at the window's edges. The vCPU
/// calls [`VcpuWindow::observe`] right after each `KVM_RUN` returns, before it
/// handles and counts the exit (`Vcpu::handle_exit`): an exit observed inside
/// the window is counted inside it. (So the guest's "go" read falls before the window and its
/// "done" write inside it.)
pub struct VcpuWindow {
    state: Arc<WindowState>,
    seen: Phase,
    at_go: Option<Snapshot>,
    at_done: Option<Snapshot>,
}

impl VcpuWindow {
    pub fn new(state: Arc<WindowState>) -> Self {
        VcpuWindow {
            state,
            seen: Phase::BeforeGo,
            at_go: None,
            at_done: None,
        }
    }

    /// Note the counts so far if the phase changed since the last call.
    #[inline]
    pub fn observe(&mut self, exits: &ExitCounts, stats: &ClientStats) {
        let now = self.state.phase();
        if now != self.seen {
            self.transition(now, exits, stats);
        }
    }

    #[cold]
    fn transition(&mut self, now: Phase, exits: &ExitCounts, stats: &ClientStats) {
        let snap = || Snapshot {
            exits: *exits,
            stats: stats.clone(),
        };
        if self.at_go.is_none() && now >= Phase::InWindow {
            self.at_go = Some(snap());
        }
        if self.at_done.is_none() && now == Phase::AfterDone {
            self.at_done = Some(snap());
        }
        self.seen = now;
    }

    /// The exits inside the window, given the thread's final counts; `None`
    /// if the window never opened.
    pub fn finish(mut self, exits: &ExitCounts, stats: &ClientStats) -> Option<WindowCounts> {
        self.observe(exits, stats);
        let go = self.at_go?;
        let (end_exits, end_stats) = match &self.at_done {
            Some(done) => (&done.exits, &done.stats),
            None => (exits, stats),
        };
        let mut window = end_stats.clone();
        for (h, before) in window.latency.iter_mut().zip(&go.stats.latency) {
            // Every count at "go" is also in the later snapshot.
            let _ = h.subtract(before);
        }
        let _ = window.global_lock_wait.subtract(&go.stats.global_lock_wait);
        window.unclaimed_reads = window
            .unclaimed_reads
            .saturating_sub(go.stats.unclaimed_reads);
        window.unclaimed_writes = window
            .unclaimed_writes
            .saturating_sub(go.stats.unclaimed_writes);
        Some(WindowCounts {
            exits: ExitReason::ALL
                .iter()
                .map(|&r| (r, end_exits.get(r).saturating_sub(go.exits.get(r))))
                .filter(|(_, n)| *n > 0)
                .map(|(r, n)| (r.name().to_string(), n))
                .collect(),
            stats: window,
        })
    }
}

/// The record's window section from the device's edges and each vCPU's
/// window counts; `None` if the guest never got its "go".
pub fn window_section(
    state: &WindowState,
    per_vcpu: Vec<Option<WindowCounts>>,
    device_names: &[String],
    mode: SyncMode,
) -> Option<VmmWindow> {
    let edges = state.edges();
    let go_ns = edges.go_ns?;
    let mut merged: Option<ClientStats> = None;
    let mut exits_per_vcpu = Vec::new();
    for counts in &per_vcpu {
        let Some(counts) = counts else {
            exits_per_vcpu.push(BTreeMap::new());
            continue;
        };
        exits_per_vcpu.push(counts.exits.clone());
        match &mut merged {
            None => merged = Some(counts.stats.clone()),
            Some(m) => m.merge(&counts.stats),
        }
    }
    let kvm_vcpu_stats = edges
        .kvm_at_done
        .iter()
        .zip(&edges.kvm_at_go)
        .map(|(done, go)| {
            done.iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(go.get(k).copied().unwrap_or(0))))
                .collect()
        })
        .collect();
    Some(VmmWindow {
        ready_ns: edges.ready_ns.unwrap_or(go_ns),
        go_ns,
        done_ns: edges.done_ns,
        start_gate: edges.gate,
        exit_latency: merged
            .as_ref()
            .map(|m| m.latency_by_device(device_names, mode))
            .unwrap_or_default(),
        global_lock_wait: merged
            .as_ref()
            .filter(|_| mode == SyncMode::Global)
            .map(|m| LatencyHistogram::from_hdr(&m.global_lock_wait)),
        exits_per_vcpu,
        kvm_vcpu_stats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::start_gate::StartGate;

    fn device(ticket: Option<GateTicket>) -> (Arc<WindowState>, WindowDevice) {
        let state = Arc::new(WindowState::default());
        let dev = WindowDevice::new(
            state.clone(),
            ticket,
            Vec::new(),
            Arc::new(RunControl::new()),
        );
        (state, dev)
    }

    fn read(dev: &WindowDevice) -> u32 {
        let mut buf = [0u8; 4];
        dev.read(0, &mut buf);
        u32::from_le_bytes(buf)
    }

    #[test]
    fn ready_go_done_without_a_gate() {
        let (state, dev) = device(None);
        dev.write(0, &DONE.to_le_bytes()); // before go: ignored
        assert_eq!(state.phase(), Phase::BeforeGo);
        dev.write(0, &READY.to_le_bytes());
        assert_eq!(read(&dev), GO);
        assert_eq!(state.phase(), Phase::InWindow);
        assert_eq!(read(&dev), GO, "go is sticky");
        dev.write(0, &DONE.to_le_bytes());
        assert_eq!(state.phase(), Phase::AfterDone);
        let s = window_section(&state, vec![], &[], SyncMode::Fine).expect("window");
        assert!(s.ready_ns <= s.go_ns && s.go_ns <= s.done_ns.expect("done"));
        assert!(s.start_gate.is_none());
    }

    #[test]
    fn reads_wait_until_every_vm_is_ready() {
        let gate = StartGate::new(2, Duration::from_secs(60));
        let (state_a, a) = device(Some(gate.ticket()));
        let (_, b) = device(Some(gate.ticket()));
        assert_eq!(read(&a), WAIT);
        assert_eq!(state_a.phase(), Phase::BeforeGo);
        b.write(0, &READY.to_le_bytes());
        assert_eq!(read(&a), GO);
        assert_eq!(read(&b), GO);
        let s = window_section(&state_a, vec![], &[], SyncMode::Fine).expect("window");
        let g = s.start_gate.expect("gate");
        assert_eq!((g.parties, g.arrived), (2, 2));
    }

    #[test]
    fn vcpu_counts_are_split_at_the_edges() {
        let counts = |io_in: u64, hlt: u64| {
            let mut c = ExitCounts::default();
            (0..io_in).for_each(|_| c.count(ExitReason::IoIn));
            (0..hlt).for_each(|_| c.count(ExitReason::Hlt));
            c
        };
        let map = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let state = Arc::new(WindowState::default());
        let mut w = VcpuWindow::new(state.clone());
        let stats = ClientStats::new(1);
        w.observe(&counts(5, 1), &stats);
        state.phase.store(Phase::InWindow as u8, Ordering::Release);
        w.observe(&counts(6, 1), &stats); // 6 + 1 exits before go
        state.phase.store(Phase::AfterDone as u8, Ordering::Release);
        w.observe(&counts(9, 4), &stats); // 3 + 3 inside
        let inside = w.finish(&counts(20, 20), &stats).expect("window opened");
        assert_eq!(inside.exits, map(&[("io_in", 3), ("hlt", 3)]));
        // A window still open at the end counts up to the end.
        let state = Arc::new(WindowState::default());
        state.phase.store(Phase::InWindow as u8, Ordering::Release);
        let mut w = VcpuWindow::new(state);
        w.observe(&counts(2, 0), &stats);
        let open = w.finish(&counts(7, 0), &stats).expect("open");
        assert_eq!(open.exits, map(&[("io_in", 5)]));
        // Never opened: nothing.
        let w = VcpuWindow::new(Arc::new(WindowState::default()));
        assert!(w.finish(&counts(7, 0), &stats).is_none());
    }
}
