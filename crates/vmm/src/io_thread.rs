//! The I/O thread of the `iothread` and `hybrid` modes: one consumer of one
//! bounded FIFO of requests, so a read is served after every write posted
//! before it (the read-after-posted-write rule of the thesis's I/O thread).

use crate::devices::DeviceSlot;
use hdrhistogram::Histogram;
use smplab_record::vmm::IoThreadStats;
use smplab_record::LatencyHistogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A bug built into a bus's I/O thread on purpose, so a test can show that
/// the stress harness (stress.rs) catches it. Never set outside tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Defect {
    /// The I/O thread holds each posted write back and delivers it after the
    /// request that follows it (a posted write overtaken by a later access).
    ReorderPostedWrites,
}

/// How long a waiter polls its channel before blocking. A futex wake-up costs
/// tens of microseconds on nested (PVM) hosts, more than an exit; a short poll
/// phase (like QEMU's AioContext `poll-max-ns`, or KVM's halt polling) keeps
/// back-to-back requests off that path. Bounded, so an idle VM costs no CPU.
pub const POLL_BEFORE_BLOCK: Duration = Duration::from_micros(50);

pub(crate) fn poll_then_block<T>(receiver: &Receiver<T>) -> Result<T, mpsc::RecvError> {
    let start = Instant::now();
    loop {
        match receiver.try_recv() {
            Ok(value) => return Ok(value),
            Err(mpsc::TryRecvError::Disconnected) => return Err(mpsc::RecvError),
            Err(mpsc::TryRecvError::Empty) => {
                if start.elapsed() >= POLL_BEFORE_BLOCK {
                    return receiver.recv();
                }
                // Yield rather than spin: when the host is short of cores the thread
                // we wait for may need this one (sched_yield is cheap when idle).
                std::thread::yield_now();
            }
        }
    }
}

pub(crate) fn record(h: &mut Histogram<u64>, d: Duration) {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    h.saturating_record(ns.clamp(1, crate::rss::HISTOGRAM_HIGH_NS));
}

pub(crate) enum Request {
    Read {
        slot: usize,
        offset: u64,
        len: u8,
        reply: SyncSender<[u8; 8]>,
        enqueued: Instant,
    },
    Write {
        slot: usize,
        offset: u64,
        len: u8,
        data: [u8; 8],
        enqueued: Instant,
    },
    Shutdown,
}

/// Requests the I/O thread's queue holds before a vCPU posting more waits: a
/// guest cannot grow host memory without bound by flooding posted writes (the
/// credit limit of a posted-write buffer).
pub const QUEUE_CAPACITY: usize = 1024;

pub(crate) struct IoThread {
    pub(crate) sender: SyncSender<Request>,
    pub(crate) depth: Arc<AtomicU64>,
    handle: JoinHandle<IoThreadStats>,
}

impl IoThread {
    pub(crate) fn start(
        slots: Arc<[DeviceSlot]>,
        io_cpu: Option<usize>,
        defect: Option<Defect>,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::sync_channel::<Request>(QUEUE_CAPACITY);
        let depth = Arc::new(AtomicU64::new(0));
        let thread_depth = depth.clone();
        let filter = crate::seccomp::ThreadFilter::for_spawn(crate::seccomp::ThreadKind::Io);
        let handle = std::thread::Builder::new()
            .name("smplab-io".to_string())
            .spawn(move || {
                if let Some(cpu) = io_cpu {
                    // Placement was validated before the VM started; a failure here
                    // only loses the pinning, not correctness.
                    let _ = crate::placement::pin_current_thread(&[cpu]);
                }
                filter.install_or_exit(0);
                io_thread_loop(&slots, &receiver, &thread_depth, defect)
            })?;
        Ok(IoThread {
            sender,
            depth,
            handle,
        })
    }

    pub(crate) fn stop(self) -> IoThreadStats {
        let _ = self.sender.send(Request::Shutdown);
        self.handle.join().unwrap_or_default()
    }
}

fn io_thread_loop(
    slots: &[DeviceSlot],
    receiver: &Receiver<Request>,
    depth: &AtomicU64,
    defect: Option<Defect>,
) -> IoThreadStats {
    let started = Instant::now();
    let mut server = IoServer {
        slots,
        busy: Duration::ZERO,
        stats: IoThreadStats::default(),
        depth_sum: 0,
        queue_wait: crate::rss::growing_histogram(),
        handling: crate::rss::growing_histogram(),
    };
    // Defect::ReorderPostedWrites: the posted write being held back.
    let mut held: Option<Request> = None;
    while let Ok(request) = poll_then_block(receiver) {
        if matches!(request, Request::Shutdown) {
            break;
        }
        let queued = depth.fetch_sub(1, Ordering::Relaxed);
        if defect == Some(Defect::ReorderPostedWrites)
            && held.is_none()
            && matches!(request, Request::Write { .. })
        {
            held = Some(request);
            continue;
        }
        server.serve(request, queued);
        if let Some(late) = held.take() {
            server.serve(late, queued);
        }
    }
    if let Some(late) = held.take() {
        server.serve(late, 0);
    }
    let IoServer {
        busy,
        mut stats,
        depth_sum,
        queue_wait,
        handling,
        ..
    } = server;
    if !queue_wait.is_empty() {
        stats.queue_wait = Some(LatencyHistogram::from_hdr(&queue_wait));
        stats.handling = Some(LatencyHistogram::from_hdr(&handling));
    }
    if stats.requests > 0 {
        stats.mean_queue_depth = depth_sum as f64 / stats.requests as f64;
    }
    let wall = started.elapsed().as_secs_f64();
    if wall > 0.0 {
        stats.utilization = busy.as_secs_f64() / wall;
    }
    stats
}

/// The I/O thread's devices and its running measurements.
struct IoServer<'a> {
    slots: &'a [DeviceSlot],
    busy: Duration,
    stats: IoThreadStats,
    depth_sum: u128,
    queue_wait: Histogram<u64>,
    handling: Histogram<u64>,
}

impl IoServer<'_> {
    /// Serve one request; `queued` is the queue depth when it was taken out.
    fn serve(&mut self, request: Request, queued: u64) {
        let begin = Instant::now();
        match request {
            Request::Shutdown => return,
            Request::Read {
                slot,
                offset,
                len,
                reply,
                enqueued,
            } => {
                record(
                    &mut self.queue_wait,
                    begin.saturating_duration_since(enqueued),
                );
                let mut bytes = [0u8; 8];
                if let Some(dev) = self.slots.get(slot) {
                    dev.read(offset, &mut bytes[..usize::from(len)]);
                }
                // The reader may have gone away (VM stopping); nothing to do then.
                let _ = reply.send(bytes);
            }
            Request::Write {
                slot,
                offset,
                len,
                data,
                enqueued,
            } => {
                record(
                    &mut self.queue_wait,
                    begin.saturating_duration_since(enqueued),
                );
                self.stats.posted_writes += 1;
                if let Some(dev) = self.slots.get(slot) {
                    dev.write(offset, &data[..usize::from(len)]);
                }
            }
        }
        self.stats.requests += 1;
        self.stats.max_queue_depth = self.stats.max_queue_depth.max(queued);
        self.depth_sum += u128::from(queued);
        let spent = begin.elapsed();
        record(&mut self.handling, spent);
        self.busy += spent;
    }
}
