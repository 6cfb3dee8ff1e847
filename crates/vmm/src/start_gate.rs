//! A start gate shared by K VMs, so their workloads start together: each VM's
//! window device arrives when its guest says "ready" and answers "go" once the
//! gate opens. The gate opens when every VM that has not failed has arrived,
//! or when `max_wait` has passed since the first arrival, so a sibling that
//! crashed or hangs in boot cannot hold the others for ever.
//!
//! A VM holds a [`GateTicket`]; dropping the ticket without arriving (the run
//! failed before its guest was ready) withdraws it, and the others stop
//! waiting for it at once.

use smplab_record::window::{GateOutcome, StartGateRecord};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A gate for `parties` runs. Clones share the gate.
#[derive(Clone)]
pub struct StartGate {
    inner: Arc<Inner>,
}

struct Inner {
    parties: usize,
    max_wait: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    arrived: usize,
    withdrawn: usize,
    first_arrival: Option<Instant>,
    outcome: Option<GateOutcome>,
}

impl std::fmt::Debug for StartGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartGate")
            .field("parties", &self.inner.parties)
            .field("max_wait", &self.inner.max_wait)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they are the same gate.
impl PartialEq for StartGate {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}
impl Eq for StartGate {}

impl StartGate {
    /// A gate for `parties` runs (at least 1) that opens at the latest
    /// `max_wait` after the first run arrived.
    pub fn new(parties: usize, max_wait: Duration) -> Self {
        StartGate {
            inner: Arc::new(Inner {
                parties: parties.max(1),
                max_wait,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    pub fn parties(&self) -> usize {
        self.inner.parties
    }

    /// One run's place at the gate. Take one per run, before anything that can
    /// fail, so a failed run withdraws (by dropping it).
    pub fn ticket(&self) -> GateTicket {
        GateTicket {
            gate: self.clone(),
            arrived_at: None,
            opened: None,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Open the gate if everyone still expected is here or the wait is over.
    fn settle(&self, state: &mut State, now: Instant) {
        if state.outcome.is_some() {
            return;
        }
        if state.arrived > 0 && state.arrived + state.withdrawn >= self.inner.parties {
            state.outcome = Some(GateOutcome::Opened);
        } else if state
            .first_arrival
            .is_some_and(|t| now.saturating_duration_since(t) >= self.inner.max_wait)
        {
            state.outcome = Some(GateOutcome::TimedOut);
        }
        if state.outcome.is_some() {
            self.inner.changed.notify_all();
        }
    }
}

/// One run's place at a [`StartGate`].
#[derive(Debug)]
pub struct GateTicket {
    gate: StartGate,
    arrived_at: Option<Instant>,
    opened: Option<StartGateRecord>,
}

impl GateTicket {
    /// This run is ready. Idempotent.
    pub fn arrive(&mut self) {
        if self.arrived_at.is_some() {
            return;
        }
        let now = Instant::now();
        self.arrived_at = Some(now);
        let mut state = self.gate.lock();
        state.arrived += 1;
        state.first_arrival.get_or_insert(now);
        self.gate.settle(&mut state, now);
    }

    /// Arrive (if not yet) and wait at most `slice` for the gate to open.
    /// `None`: still closed, ask again (the caller stays responsive to a stop).
    pub fn wait(&mut self, slice: Duration) -> Option<StartGateRecord> {
        if let Some(done) = self.opened {
            return Some(done);
        }
        self.arrive();
        let until = Instant::now() + slice;
        let mut state = self.gate.lock();
        loop {
            let now = Instant::now();
            self.gate.settle(&mut state, now);
            if let Some(outcome) = state.outcome {
                let arrived_at = self.arrived_at.unwrap_or(now);
                let record = StartGateRecord {
                    parties: u32::try_from(self.gate.inner.parties).unwrap_or(u32::MAX),
                    arrived: u32::try_from(state.arrived).unwrap_or(u32::MAX),
                    outcome,
                    waited_ns: u64::try_from(now.saturating_duration_since(arrived_at).as_nanos())
                        .unwrap_or(u64::MAX),
                };
                self.opened = Some(record);
                return Some(record);
            }
            if now >= until {
                return None;
            }
            // Wake at the slice's end or when the wait limit could expire.
            let mut timeout = until - now;
            if let Some(first) = state.first_arrival {
                let limit = (first + self.gate.inner.max_wait).saturating_duration_since(now);
                timeout = timeout.min(limit.max(Duration::from_micros(100)));
            }
            state = self
                .gate
                .inner
                .changed
                .wait_timeout(state, timeout)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for GateTicket {
    fn drop(&mut self) {
        if self.arrived_at.is_none() {
            let mut state = self.gate.lock();
            state.withdrawn += 1;
            self.gate.settle(&mut state, Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_when_all_arrive_and_not_before() {
        let gate = StartGate::new(2, Duration::from_secs(60));
        let mut a = gate.ticket();
        let mut b = gate.ticket();
        assert_eq!(a.wait(Duration::from_millis(1)), None, "b not there yet");
        let waiter = std::thread::spawn(move || loop {
            if let Some(r) = a.wait(Duration::from_millis(5)) {
                return r;
            }
        });
        let rb = loop {
            if let Some(r) = b.wait(Duration::from_millis(5)) {
                break r;
            }
        };
        let ra = waiter.join().expect("waiter");
        assert_eq!(ra.outcome, GateOutcome::Opened);
        assert_eq!(rb.outcome, GateOutcome::Opened);
        assert_eq!((ra.parties, ra.arrived), (2, 2));
    }

    #[test]
    fn a_failed_sibling_withdraws_by_dropping_its_ticket() {
        let gate = StartGate::new(2, Duration::from_secs(60));
        let mut a = gate.ticket();
        let b = gate.ticket();
        assert_eq!(a.wait(Duration::from_millis(1)), None);
        drop(b);
        let r = a.wait(Duration::from_millis(1)).expect("opened");
        assert_eq!(r.outcome, GateOutcome::Opened);
        assert_eq!(r.arrived, 1);
    }

    #[test]
    fn a_hung_sibling_cannot_hold_the_gate_past_max_wait() {
        let gate = StartGate::new(2, Duration::from_millis(20));
        let mut a = gate.ticket();
        let _hung = gate.ticket();
        let r = loop {
            if let Some(r) = a.wait(Duration::from_millis(5)) {
                break r;
            }
        };
        assert_eq!(r.outcome, GateOutcome::TimedOut);
        assert_eq!(r.arrived, 1);
        assert!(r.waited_ns >= 20_000_000);
    }

    #[test]
    fn handles_compare_by_identity() {
        let g = StartGate::new(3, Duration::from_secs(1));
        assert_eq!(g, g.clone());
        assert_ne!(g, StartGate::new(3, Duration::from_secs(1)));
        assert!(format!("{g:?}").contains("parties: 3"));
    }
}
