//! The device stand-in behind `io` ops: block-like devices served by one
//! completion thread, which plays both the device (it knows when each request
//! is done) and its interrupt (it wakes the waiting thread's futex).
//!
//! Each device serves `queue_depth` requests at once in submission order; a
//! request that finds every slot busy waits in the device's queue and starts
//! the moment a slot frees, on the device's own clock (its predecessor's due
//! time), so the device's timing does not depend on when the completion
//! thread got to run. Latencies are measured from a request's due time:
//! `irq_latency` until the completion thread handles it (timer expiry plus
//! host scheduling of that thread, which `io_thread_cpus` pins), and
//! `wake_latency` until the waiter runs again.

use crate::primitives::{Aborted, CachePadded, Ctx};
use crate::sys;
use smplab_record::histogram::new_histogram;
use smplab_record::io::{DeviceQueue, IoSection};
use smplab_record::LatencyHistogram;
use smplab_workload::Program;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Longest a waiter sleeps before looking at the abort flag again.
const ABORT_POLL: Duration = Duration::from_millis(100);

/// One thread's completion word: 0 while its request is outstanding, 1 once
/// the completion thread has handled it; `due_ns` is the request's due time.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    done: AtomicU32,
    due_ns: AtomicU64,
}

#[derive(Debug)]
struct Pending {
    tid: usize,
    service_ns: u64,
    submit_ns: u64,
}

/// `(due_ns, tid, device, submit_ns)`, earliest first.
type Timer = Reverse<(u64, usize, u32, u64)>;

struct State {
    devices: Vec<DeviceQueue<Pending>>,
    timers: BinaryHeap<Timer>,
    stop: bool,
    irq: hdrhistogram::Histogram<u64>,
    device: hdrhistogram::Histogram<u64>,
    irqs_per_cpu: Vec<u64>,
    requests: u64,
}

/// The devices of one run, shared by its threads and the completion thread.
pub(crate) struct Devices {
    state: Mutex<State>,
    cv: Condvar,
    slots: Vec<CachePadded<Slot>>,
}

impl Devices {
    pub fn new(p: &Program) -> Self {
        let threads = p.total_threads() as usize;
        Devices {
            state: Mutex::new(State {
                devices: p
                    .devices
                    .iter()
                    .map(|d| DeviceQueue::new(d.queue_depth))
                    .collect(),
                timers: BinaryHeap::new(),
                stop: false,
                irq: new_histogram(),
                device: new_histogram(),
                irqs_per_cpu: Vec::new(),
                requests: 0,
            }),
            cv: Condvar::new(),
            slots: (0..threads).map(|_| CachePadded(Slot::default())).collect(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock already aborts the run; the data
        // (histograms and queues) stays usable, so poisoning is ignored.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Submit a request of thread `tid` and block until its completion.
    /// Returns the completion → running-again latency in ns and whether the
    /// thread really slept.
    pub fn io(
        &self,
        tid: usize,
        device: u32,
        service_ns: u64,
        ctx: &Ctx<'_>,
    ) -> Result<(u64, bool), Aborted> {
        let slot = &self.slots[tid];
        slot.done.store(0, Ordering::SeqCst);
        let now = sys::monotonic_ns();
        {
            let mut st = self.lock();
            let request = Pending {
                tid,
                service_ns,
                submit_ns: now,
            };
            if st.devices[device as usize].submit(request).is_some() {
                st.timers
                    .push(Reverse((now.saturating_add(service_ns), tid, device, now)));
            }
        }
        self.cv.notify_one();
        let mut slept = false;
        while slot.done.load(Ordering::Acquire) == 0 {
            if ctx.aborted() {
                return Err(Aborted);
            }
            slept |= sys::futex_wait(&slot.done, 0, Some(ABORT_POLL));
        }
        let woke = sys::monotonic_ns();
        Ok((
            woke.saturating_sub(slot.due_ns.load(Ordering::Acquire)),
            slept,
        ))
    }

    /// The completion thread's loop: sleep until the earliest due request,
    /// complete it (wake its waiter, start the next queued one), until `stop`.
    pub fn serve(&self) {
        // Timer slack would add up to 50 µs to every completion: the device
        // stand-in must be as punctual as the host allows.
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only
        // changes the calling thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let Some(&Reverse((due, tid, device, submit))) = st.timers.peek() else {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let now = sys::monotonic_ns();
            if now < due {
                st = self
                    .cv
                    .wait_timeout(st, Duration::from_nanos(due - now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            st.timers.pop();
            st.irq.saturating_record(now - due);
            st.device.saturating_record(due.saturating_sub(submit));
            st.requests += 1;
            let cpu = sys::current_cpu().unwrap_or(0);
            if st.irqs_per_cpu.len() <= cpu {
                st.irqs_per_cpu.resize(cpu + 1, 0);
            }
            st.irqs_per_cpu[cpu] += 1;
            if let Some(next) = st.devices[device as usize].complete() {
                // The slot frees at `due` on the device's clock.
                let start = due.max(next.submit_ns);
                st.timers.push(Reverse((
                    start.saturating_add(next.service_ns),
                    next.tid,
                    device,
                    next.submit_ns,
                )));
            }
            let slot = &self.slots[tid];
            slot.due_ns.store(due, Ordering::Release);
            slot.done.store(1, Ordering::Release);
            sys::futex_wake(&slot.done, 1);
        }
    }

    /// Stop the completion thread.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }

    /// Wake every waiter so it sees the abort flag.
    pub fn wake_all(&self) {
        for s in &self.slots {
            sys::futex_wake(&s.done, u32::MAX);
        }
    }

    /// The record's `io` section, given every waiter's wake latencies.
    pub fn section(&self, wake_ns: impl Iterator<Item = u64>) -> IoSection {
        let st = self.lock();
        let mut wake = new_histogram();
        for w in wake_ns {
            wake.saturating_record(w);
        }
        IoSection {
            requests: st.requests,
            irq_latency: LatencyHistogram::from_hdr(&st.irq),
            wake_latency: LatencyHistogram::from_hdr(&wake),
            device_latency: LatencyHistogram::from_hdr(&st.device),
            irqs_per_cpu: st.irqs_per_cpu.clone(),
        }
    }
}
