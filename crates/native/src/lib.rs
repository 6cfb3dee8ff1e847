//! smplab-native: runs a workload [`Program`] on real host threads with real
//! spinning and real futex blocking, and measures it (docs/native.md).
//!
//! [`run`] is what the CLI and the lab call; it returns one [`RunRecord`].
//! [`execute`] returns the richer [`Execution`] (per-object tallies used by the
//! conservation tests). [`primitives`] holds the spin locks, futex mutex,
//! barrier and queue themselves, public for the bench and tests.

mod device;
mod exec;
mod gate;
mod limits;
pub mod primitives;
mod shared;
pub mod sys;

use exec::{Stop, Tallies, Worker};
pub use limits::{thread_limit, ThreadLimit};
use primitives::{Ctx, Stats};
use shared::Shared;
use smplab_record::window::Settle;
use smplab_record::{
    exit, Executor, RunRecord, ThreadTiming, WindowClock, WorkloadInfo, WorkloadWindow,
};
use smplab_workload::program::OpCounts;
use smplab_workload::Program;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How to run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NativeOptions {
    /// Thread `i` (start order: group 0's threads first) is pinned to
    /// `pin[i % pin.len()]`. `None` lets the kernel place threads.
    pub pin: Option<Vec<usize>>,
    /// Give up (and return [`NativeError::Timeout`]) if the workload has not
    /// finished this long after it started. `None` waits for ever.
    pub timeout: Option<Duration>,
    /// CPUs the device stand-in's completion thread may run on (`io` ops);
    /// empty: not pinned.
    pub io_thread_cpus: Vec<usize>,
}

/// Why a native run failed.
#[derive(Debug, thiserror::Error)]
pub enum NativeError {
    #[error("--pin is empty; give a comma-separated list of CPU numbers such as 0,1")]
    EmptyPin,
    #[error("cannot pin to CPU {cpu}: this process may only run on CPUs {allowed}; choose CPUs from that list")]
    BadCpu { cpu: usize, allowed: String },
    #[error("cannot read this process's CPU affinity to check --pin: {0}")]
    Affinity(std::io::Error),
    #[error("invalid program: {0}")]
    BadProgram(String),
    #[error("cannot allocate {what}: {source}; reduce the workload's buffer sizes or scale")]
    Memory {
        what: String,
        source: std::io::Error,
    },
    #[error("the workload has {threads} threads but this host can start only {limit} more, limited by {limited_by}; lower --threads")]
    TooManyThreads {
        threads: u64,
        limit: u64,
        limited_by: String,
    },
    #[error("cannot start thread {thread}: {source}; lower --threads or raise the process/thread limit (ulimit -u)")]
    Spawn {
        thread: String,
        source: std::io::Error,
    },
    #[error("the device completion thread could not be pinned to CPUs {cpus}: {source}")]
    PinIoThread {
        cpus: String,
        source: std::io::Error,
    },
    #[error("thread {thread} could not be pinned to CPU {cpu}: {source}")]
    Pin {
        thread: String,
        cpu: usize,
        source: std::io::Error,
    },
    #[error("thread {thread} failed: {reason}")]
    Thread { thread: String, reason: String },
    #[error("thread {thread} panicked: {message} (a bug in smplab-native; please report it)")]
    Panic { thread: String, message: String },
    #[error("the workload did not finish within {0:?}; it may deadlock (e.g. a lock held across a barrier) or need a longer --timeout")]
    Timeout(Duration),
    #[error("after being aborted ({cause}), {stuck} thread(s) did not stop within {grace:?}; they were left running")]
    Stuck {
        cause: String,
        stuck: u32,
        grace: Duration,
    },
}

impl NativeError {
    /// The `smplab` process exit status for this error (`smplab_record::exit`).
    pub fn exit_status(&self) -> i32 {
        match self {
            NativeError::EmptyPin | NativeError::BadCpu { .. } | NativeError::BadProgram(_) => {
                exit::BAD_INPUT
            }
            NativeError::Memory { .. } | NativeError::TooManyThreads { .. } => exit::RESOURCE_LIMIT,
            NativeError::Spawn { source, .. }
                if matches!(
                    source.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::OutOfMemory
                ) =>
            {
                exit::RESOURCE_LIMIT
            }
            NativeError::Timeout(_) => exit::TIMEOUT,
            NativeError::Panic { .. } => exit::INTERNAL,
            NativeError::Affinity(_)
            | NativeError::Spawn { .. }
            | NativeError::Pin { .. }
            | NativeError::PinIoThread { .. }
            | NativeError::Thread { .. }
            | NativeError::Stuck { .. } => exit::RUN_FAILED,
        }
    }
}

/// What one thread did.
#[derive(Debug, Clone)]
pub struct ThreadReport {
    pub group: String,
    pub index: u32,
    /// CPU it was pinned to, if any.
    pub cpu: Option<usize>,
    /// CPU it was running on when it finished its last op.
    pub last_cpu: Option<usize>,
    pub wall_ns: u64,
    pub cpu_ns: u64,
    pub stats: Stats,
    pub counts: OpCounts,
    /// Units this thread claimed from each pool (decided at run time).
    pub pool_claims: Vec<u64>,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

/// Everything a run measured, plus the end state of every shared object.
#[derive(Debug, Clone)]
pub struct Execution {
    /// The first thread's start (its first clock read after the gate opened)
    /// to the last thread's end (its clock read after its last op).
    pub wall_ns: u64,
    /// Every thread ready at the gate, the gate opening, the last thread's
    /// end, on the host's CLOCK_MONOTONIC.
    pub window: WorkloadWindow,
    pub threads: Vec<ThreadReport>,
    pub counts: OpCounts,
    pub stats: Stats,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub spin_lock_acquires: Vec<u64>,
    pub spin_lock_releases: Vec<u64>,
    /// Whether each spin lock was still held when the run ended.
    pub spin_lock_held: Vec<bool>,
    pub mutex_acquires: Vec<u64>,
    pub mutex_releases: Vec<u64>,
    pub mutex_held: Vec<bool>,
    pub barrier_arrivals: Vec<u64>,
    pub barrier_generations: Vec<u64>,
    pub queue_pushes: Vec<u64>,
    pub queue_pops: Vec<u64>,
    /// Wrapping sums of the tokens pushed and popped per queue: equal iff (with
    /// overwhelming likelihood) every pushed token was popped.
    pub queue_push_sums: Vec<u64>,
    pub queue_pop_sums: Vec<u64>,
    /// Tokens left in each queue.
    pub queue_left: Vec<usize>,
    /// Units claimed from each pool over all threads, and units left
    /// (0 once drained).
    pub pool_claims: Vec<u64>,
    pub pool_left: Vec<u64>,
    pub counter_values: Vec<u64>,
    /// Device-request latencies, when the program ran `io` ops.
    pub io: Option<smplab_record::io::IoSection>,
}

/// Run `program` and describe it in a [`RunRecord`] (executor `native`).
pub fn run(
    program: &Program,
    mut workload: WorkloadInfo,
    opts: &NativeOptions,
) -> Result<RunRecord, NativeError> {
    workload.threads = program.total_threads();
    let mut record = RunRecord::new(Executor::Native, workload);
    let ex = execute(program, opts)?;
    record.set_config(
        "pin",
        match &opts.pin {
            Some(p) => serde_json::Value::from(p.clone()),
            None => serde_json::Value::Null,
        },
    );
    if let Some(t) = opts.timeout {
        record.set_config(
            "timeout_ms",
            u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
        );
    }
    record.timing.wall_ns = ex.wall_ns;
    record.timing.window = Some(ex.window);
    record.timing.threads = ex
        .threads
        .iter()
        .map(|t| ThreadTiming {
            group: t.group.clone(),
            index: t.index,
            wall_ns: t.wall_ns,
            cpu_ns: t.cpu_ns,
        })
        .collect();
    let c = &mut record.counters;
    c.ops = ex.counts.to_map();
    c.spin_iterations = ex.stats.spin_iterations;
    c.blocks = ex.stats.blocks;
    c.wakeups = ex.stats.wakeups;
    c.context_switches_voluntary = ex.voluntary_switches;
    c.context_switches_involuntary = ex.involuntary_switches;
    if !opts.io_thread_cpus.is_empty() {
        record.set_config("io_thread_cpus", opts.io_thread_cpus.clone());
    }
    record.io = ex.io;
    Ok(record)
}

/// Check a pin list against the CPUs this process may use.
pub fn check_pin(pin: &[usize]) -> Result<(), NativeError> {
    if pin.is_empty() {
        return Err(NativeError::EmptyPin);
    }
    let allowed = sys::allowed_cpus().map_err(NativeError::Affinity)?;
    for &cpu in pin {
        if !allowed.contains(&cpu) {
            return Err(NativeError::BadCpu {
                cpu,
                allowed: cpu_list(&allowed),
            });
        }
    }
    Ok(())
}

/// `0-3,6` style list.
fn cpu_list(cpus: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            cpus[i].to_string()
        } else {
            format!("{}-{}", cpus[i], cpus[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// What a worker thread hands back.
struct ThreadOut {
    start: Instant,
    end: Instant,
    report: ThreadReport,
    tallies: Tallies,
    sink: u64,
    io_wake_ns: Vec<u64>,
}

/// Increments `finished` (and `ready`, if the thread never got that far)
/// however the thread ends, including a panic, so the controller never waits
/// for a thread that is gone.
struct FinishGuard<'a> {
    shared: &'a Shared,
    ready_reported: bool,
}

impl FinishGuard<'_> {
    fn report_ready(&mut self) {
        self.ready_reported = true;
        self.shared.ready.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.shared.ready, 1);
    }
}

impl Drop for FinishGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.shared.abort.store(true, Ordering::SeqCst);
        }
        if !self.ready_reported {
            self.report_ready();
        }
        self.shared.finished.fetch_add(1, Ordering::SeqCst);
        sys::futex_wake(&self.shared.finished, u32::MAX);
    }
}

/// How long aborted threads get to notice and stop.
const ABORT_GRACE: Duration = Duration::from_secs(10);
/// How often the controller re-wakes sleepers while aborting, and polls.
const POLL: Duration = Duration::from_millis(10);

/// Run `program` on real threads and return everything measured.
pub fn execute(program: &Program, opts: &NativeOptions) -> Result<Execution, NativeError> {
    if let Some(pin) = &opts.pin {
        check_pin(pin)?;
    }
    if !opts.io_thread_cpus.is_empty() {
        check_pin(&opts.io_thread_cpus)?;
    }
    check_threads(program)?;
    // Threads pinned to a CPU list can run at once only on its distinct CPUs.
    let cpus = match &opts.pin {
        Some(pin) => pin.iter().collect::<std::collections::BTreeSet<_>>().len(),
        None => gate::StartGate::usable_cpus(),
    };
    let shared = Arc::new(Shared::new(program, cpus)?);
    let completion = if program.uses_io() {
        Some(spawn_completion_thread(&shared, &opts.io_thread_cpus)?)
    } else {
        None
    };
    let result = run_threads(&shared, program, opts);
    if let Some(h) = completion {
        shared.devices.stop();
        // The completion thread never panics on its own data; a join
        // error would only repeat a failure already recorded.
        let _ = h.join();
    }
    result
}

/// Start the device stand-in's completion thread, pinned to `cpus` if any.
fn spawn_completion_thread(
    shared: &Arc<Shared>,
    cpus: &[usize],
) -> Result<std::thread::JoinHandle<()>, NativeError> {
    let sh = Arc::clone(shared);
    let shown = cpu_list(cpus);
    let cpus = cpus.to_vec();
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("smplab-io".into())
        .spawn(move || {
            let pinned = if cpus.is_empty() {
                Ok(())
            } else {
                sys::pin_current_thread_to(&cpus)
            };
            let ok = pinned.is_ok();
            let _ = tx.send(pinned);
            if ok {
                sh.devices.serve();
            }
        })
        .map_err(|source| NativeError::Spawn {
            thread: "smplab-io".into(),
            source,
        })?;
    match rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(source)) => {
            let _ = handle.join();
            Err(NativeError::PinIoThread {
                cpus: shown,
                source,
            })
        }
        Err(_) => {
            let _ = handle.join();
            Err(NativeError::Thread {
                thread: "smplab-io".into(),
                reason: "the device completion thread ended before it started serving".into(),
            })
        }
    }
}

/// Run the worker threads of `program` on `shared`.
fn run_threads(
    shared: &Arc<Shared>,
    program: &Program,
    opts: &NativeOptions,
) -> Result<Execution, NativeError> {
    let shared = Arc::clone(shared);
    let program = Arc::new(program.clone());
    let plan = program.threads();
    // check_threads bounds the thread count far below u32::MAX.
    let n = u32::try_from(plan.len()).unwrap_or(u32::MAX);

    let handles = spawn_workers(&shared, &program, &plan, opts)?;

    // Wait for everyone at the gate, then open it.
    loop {
        let r = shared.ready.load(Ordering::SeqCst);
        if r >= n {
            break;
        }
        sys::futex_wait(&shared.ready, r, Some(POLL));
    }
    // The window's gap from `threads_ready_ns` to `start_ns` is the time the
    // threads took to settle on their own CPUs (gate.rs).
    let ready_ns = sys::monotonic_ns();
    let opening = shared.gate.settle_and_open();
    let released_ns = sys::monotonic_ns();
    let opened = Instant::now();

    wait_for_finish(&shared, n, opts.timeout, opened)?;
    let outs = join_workers(handles, &plan, &program)?;
    if let Some(e) = shared.take_failure() {
        return Err(e);
    }
    let mut ex = summarize(&shared, outs);
    ex.window.threads_ready_ns = ready_ns;
    ex.window.start_ns = released_ns;
    ex.window.end_ns = ex.window.end_ns.max(released_ns);
    ex.window.settle = Some(Settle {
        outcome: opening.into(),
        ns: released_ns.saturating_sub(ready_ns),
    });
    Ok(ex)
}

type WorkerHandle = std::thread::JoinHandle<Option<ThreadOut>>;

/// Start one named (and, with `opts.pin`, pinned) thread per entry of `plan`.
/// If one cannot start, abort and join those already started.
fn spawn_workers(
    shared: &Arc<Shared>,
    program: &Arc<Program>,
    plan: &[(usize, u32)],
    opts: &NativeOptions,
) -> Result<Vec<WorkerHandle>, NativeError> {
    let mut handles = Vec::with_capacity(plan.len());
    for (tid, &(gi, index)) in plan.iter().enumerate() {
        let name = format!("smplab-{}-{}", program.groups[gi].name, index);
        let cpu = opts.pin.as_ref().map(|p| p[tid % p.len()]);
        let (sh, pr) = (Arc::clone(shared), Arc::clone(program));
        let thread_name = name.clone();
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || worker(&sh, &pr, gi, index, tid as u64, cpu, thread_name));
        match spawned {
            Ok(h) => handles.push(h),
            Err(source) => {
                // Threads already started see the abort at the (now open) gate.
                shared.abort.store(true, Ordering::SeqCst);
                shared.wake_everyone();
                for h in handles {
                    let _ = h.join();
                }
                return Err(NativeError::Spawn {
                    thread: name,
                    source,
                });
            }
        }
    }
    Ok(handles)
}

/// Wait until all `n` threads have finished, enforcing the timeout (counted
/// from `opened`) and driving any abort; threads still running `ABORT_GRACE`
/// after an abort are reported stuck.
fn wait_for_finish(
    shared: &Shared,
    n: u32,
    timeout: Option<Duration>,
    opened: Instant,
) -> Result<(), NativeError> {
    // Wait for the end, enforcing the timeout and driving any abort.
    let mut aborted_at: Option<Instant> = None;
    loop {
        let f = shared.finished.load(Ordering::SeqCst);
        if f >= n {
            break;
        }
        if aborted_at.is_none() {
            if let Some(t) = timeout {
                if opened.elapsed() > t {
                    shared.fail(NativeError::Timeout(t));
                }
            }
            if shared.abort.load(Ordering::SeqCst) {
                aborted_at = Some(Instant::now());
            }
        }
        if let Some(at) = aborted_at {
            if at.elapsed() > ABORT_GRACE {
                let cause = shared
                    .take_failure()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "a thread failed".into());
                // The stuck threads keep `shared` alive through their Arc.
                return Err(NativeError::Stuck {
                    cause,
                    stuck: n - f,
                    grace: ABORT_GRACE,
                });
            }
            shared.wake_everyone();
        }
        sys::futex_wait(&shared.finished, f, Some(POLL));
    }
    Ok(())
}

/// Join the threads, collecting what each counted; the first panic, by plan
/// order, is the error.
fn join_workers(
    handles: Vec<WorkerHandle>,
    plan: &[(usize, u32)],
    program: &Program,
) -> Result<Vec<ThreadOut>, NativeError> {
    let mut outs = Vec::with_capacity(handles.len());
    let mut panic: Option<NativeError> = None;
    for (h, &(gi, index)) in handles.into_iter().zip(plan) {
        match h.join() {
            Ok(Some(out)) => outs.push(out),
            Ok(None) => {}
            Err(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                panic.get_or_insert(NativeError::Panic {
                    thread: format!("smplab-{}-{}", program.groups[gi].name, index),
                    message,
                });
            }
        }
    }
    if let Some(p) = panic {
        return Err(p);
    }
    Ok(outs)
}

/// Refuse, before any thread starts, a program with more threads than the
/// host can start (see `limits`).
fn check_threads(program: &Program) -> Result<(), NativeError> {
    let threads = u64::from(program.total_threads());
    let limit = thread_limit();
    if threads > limit.threads {
        return Err(NativeError::TooManyThreads {
            threads,
            limit: limit.threads,
            limited_by: limit.source,
        });
    }
    Ok(())
}

fn summarize(shared: &Shared, outs: Vec<ThreadOut>) -> Execution {
    let start = outs.iter().map(|o| o.start).min();
    let end = outs.iter().map(|o| o.end).max();
    let wall_ns = match (start, end) {
        (Some(s), Some(e)) => {
            u64::try_from(e.saturating_duration_since(s).as_nanos()).unwrap_or(u64::MAX)
        }
        _ => 0,
    };
    // Instant is CLOCK_MONOTONIC on Linux: place the last end on that clock.
    let (now, now_ns) = (Instant::now(), sys::monotonic_ns());
    let end_ns = end.map_or(now_ns, |e| {
        now_ns.saturating_sub(
            u64::try_from(now.saturating_duration_since(e).as_nanos()).unwrap_or(u64::MAX),
        )
    });
    let mut counts = OpCounts::default();
    let mut stats = Stats::default();
    let mut tallies = Tallies::new(shared);
    let (mut vol, mut invol) = (0u64, 0u64);
    let mut sink = 0u64;
    let mut threads = Vec::with_capacity(outs.len());
    let uses_io = outs.iter().any(|o| !o.io_wake_ns.is_empty());
    let io = uses_io.then(|| {
        shared
            .devices
            .section(outs.iter().flat_map(|o| o.io_wake_ns.iter().copied()))
    });
    for o in outs {
        counts.add(&o.report.counts);
        stats.add(&o.report.stats);
        tallies.add(&o.tallies);
        vol += o.report.voluntary_switches;
        invol += o.report.involuntary_switches;
        sink = sink.wrapping_add(o.sink);
        threads.push(o.report);
    }
    std::hint::black_box(sink);
    Execution {
        wall_ns,
        window: WorkloadWindow {
            clock: WindowClock::HostMonotonic,
            threads_ready_ns: 0,
            start_ns: 0,
            end_ns,
            start_gate: None,
            settle: None,
        },
        threads,
        counts,
        stats,
        voluntary_switches: vol,
        involuntary_switches: invol,
        spin_lock_held: shared.spin_locks.iter().map(|l| l.is_locked()).collect(),
        mutex_held: shared.mutexes.iter().map(|m| m.is_locked()).collect(),
        barrier_arrivals: shared.barriers.iter().map(|b| b.arrivals()).collect(),
        barrier_generations: shared.barriers.iter().map(|b| b.generations()).collect(),
        queue_left: shared.queues.iter().map(|q| q.len()).collect(),
        pool_left: shared
            .pools
            .iter()
            .map(|q| u64::try_from(q.0.load(Ordering::SeqCst)).unwrap_or(0))
            .collect(),
        pool_claims: tallies.claims,
        counter_values: shared
            .counters
            .iter()
            .map(|c| c.0.load(Ordering::SeqCst))
            .collect(),
        spin_lock_acquires: tallies.spin_acquires,
        spin_lock_releases: tallies.spin_releases,
        mutex_acquires: tallies.mutex_acquires,
        mutex_releases: tallies.mutex_releases,
        queue_pushes: tallies.pushes,
        queue_pops: tallies.pops,
        queue_push_sums: tallies.push_sum,
        queue_pop_sums: tallies.pop_sum,
        io,
    }
}

/// Body of one worker thread. Returns `None` if it did not complete (the
/// reason is in `shared.failure`).
fn worker(
    shared: &Shared,
    program: &Program,
    group: usize,
    index: u32,
    tid: u64,
    cpu: Option<usize>,
    name: String,
) -> Option<ThreadOut> {
    let mut guard = FinishGuard {
        shared,
        ready_reported: false,
    };
    let setup = (|| -> Result<sys::Mapping, NativeError> {
        if let Some(cpu) = cpu {
            sys::pin_current_thread(cpu).map_err(|source| NativeError::Pin {
                thread: name.clone(),
                cpu,
                source,
            })?;
        }
        // Allocated (and faulted in) by the thread itself, so its pages come
        // from the thread's own NUMA node, as a real program's would.
        let bytes = usize::try_from(program.private_bytes(group)).unwrap_or(usize::MAX);
        let private = sys::Mapping::new(bytes).map_err(|source| NativeError::Memory {
            what: format!("private buffer of {name} ({bytes} bytes)"),
            source,
        })?;
        for page in private.bytes().iter().step_by(sys::PAGE) {
            page.store(0, Ordering::Relaxed);
        }
        // Every thread maps the shootdown pages, so every CPU running one of
        // our threads holds TLB entries the shootdowns must flush.
        for page in shared.shoot.bytes().iter().step_by(sys::PAGE) {
            page.store(1, Ordering::Relaxed);
        }
        Ok(private)
    })();
    let private = match setup {
        Ok(p) => Some(p),
        Err(e) => {
            shared.fail(e);
            None
        }
    };
    guard.report_ready();
    let private = private?;
    // The start gate: all threads begin together, each on its own CPU when
    // there are enough (gate.rs).
    shared.gate.wait(usize::try_from(tid).unwrap_or(usize::MAX));
    if shared.abort.load(Ordering::SeqCst) {
        return None;
    }

    let mut w = Worker::new(shared, Ctx::with_abort(&shared.abort), private, tid);
    let (vol0, invol0) = sys::thread_context_switches();
    let cpu0 = sys::thread_cpu_ns();
    let start = Instant::now();
    let result = w.run(&program.groups[group].ops);
    let end = Instant::now();
    let cpu1 = sys::thread_cpu_ns();
    let (vol1, invol1) = sys::thread_context_switches();
    let last_cpu = sys::current_cpu();
    match result {
        Ok(()) => {}
        Err(Stop::Aborted) => return None,
        Err(Stop::Failed(reason)) => {
            shared.fail(NativeError::Thread {
                thread: name,
                reason,
            });
            return None;
        }
    }
    Some(ThreadOut {
        start,
        end,
        report: ThreadReport {
            group: program.groups[group].name.clone(),
            index,
            cpu,
            last_cpu,
            wall_ns: u64::try_from(end.saturating_duration_since(start).as_nanos())
                .unwrap_or(u64::MAX),
            cpu_ns: cpu1.saturating_sub(cpu0),
            stats: w.ctx.stats,
            counts: w.counts,
            pool_claims: w.tallies.claims.clone(),
            voluntary_switches: vol1.saturating_sub(vol0),
            involuntary_switches: invol1.saturating_sub(invol0),
        },
        tallies: w.tallies,
        sink: w.sink,
        io_wake_ns: w.io_wake_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "");
    }

    #[test]
    fn exit_statuses_match_the_shared_table() {
        assert_eq!(NativeError::EmptyPin.exit_status(), exit::BAD_INPUT);
        assert_eq!(
            NativeError::Timeout(Duration::from_secs(1)).exit_status(),
            exit::TIMEOUT
        );
        assert_eq!(
            NativeError::Thread {
                thread: "t".into(),
                reason: "r".into()
            }
            .exit_status(),
            exit::RUN_FAILED
        );
    }
}
