//! From events to per-thread synchronization ops: the flat form of the model,
//! before loops are found. Every op carries the CPU time its thread spent
//! since the previous op (the compute segment in front of it).
//!
//! Mapping (docs/trace-format.md, "From trace to model"):
//! - mutex and rwlock acquisitions/releases → `lock`/`unlock` (an rwlock
//!   becomes a mutex: readers are serialized); recursive re-locks and unlocks
//!   of a lock the thread does not hold are dropped;
//! - a condition wait → `unlock m`, `pop` from the waiter's queue for that
//!   condition, `lock m`; the signal/broadcast that woke it (`analyze::Wake`)
//!   → `push` to that queue; a timed-out wait → `sleep_us` of its wait;
//! - semaphores → a queue: posts (and the initial value) push, downs pop;
//! - barriers → barriers with the traced party count;
//! - spin locks → ttas spin locks with PAUSE (glibc's algorithm);
//! - thread create/join → a start queue the creator pushes and the new thread
//!   pops first, and a join queue the thread pushes last and the joiner pops.

use crate::analyze::{self, Wake};
use crate::format::{Event, Kind, Trace};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SyncOp {
    Lock(String),
    Unlock(String),
    SpinLock(String),
    SpinUnlock(String),
    Barrier(String),
    Push(String),
    Pop(String),
    SleepUs(u64),
}

/// One op and the CPU time before it.
#[derive(Debug, Clone)]
pub struct Item {
    pub pre_cpu_ns: u64,
    pub t_ns: u64,
    pub op: SyncOp,
}

#[derive(Debug, Clone, Default)]
pub struct ThreadOps {
    pub items: Vec<Item>,
    /// CPU time after the last op.
    pub tail_cpu_ns: u64,
}

/// What a queue stands for (for per-kind counts and comments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QueueRole {
    Cond,
    Sem,
    Start,
    Join,
}

#[derive(Debug, Clone, Default)]
pub struct Tokens {
    pub threads: Vec<ThreadOps>,
    pub mutexes: Vec<String>,
    pub spins: Vec<String>,
    /// Barrier name → parties.
    pub barriers: BTreeMap<String, u32>,
    /// Queue name → (role, pushes).
    pub queues: BTreeMap<String, (QueueRole, u64)>,
    /// Lock ops dropped (recursive re-locks, unlocks by a non-holder).
    pub dropped_lock_ops: u64,
    /// Pops and barrier arrivals dropped because the thread held a lock.
    pub dropped_waits: u64,
    /// Pushes/pops/barrier arrivals dropped to balance an incomplete trace.
    pub dropped_balance: u64,
}

/// Short per-kind names for objects, numbered in order of first use.
#[derive(Default)]
struct Names {
    map: HashMap<(&'static str, u64), String>,
    next: HashMap<&'static str, usize>,
}

impl Names {
    fn get(&mut self, prefix: &'static str, addr: u64) -> String {
        if let Some(n) = self.map.get(&(prefix, addr)) {
            return n.clone();
        }
        let k = self.next.entry(prefix).or_default();
        let name = format!("{prefix}{k}");
        *k += 1;
        self.map.insert((prefix, addr), name.clone());
        name
    }
}

/// Per-thread builder state: held locks with depth, carried CPU time.
struct Builder {
    ops: ThreadOps,
    held: HashMap<String, u32>,
    cpu_mark: u64,
    carry: u64,
    dropped: u64,
    dropped_waits: u64,
    /// Pushes made under a lock, emitted when the last lock is released.
    pending: Vec<(u64, SyncOp)>,
}

impl Builder {
    fn op(&mut self, t_ns: u64, op: SyncOp) {
        let pre = std::mem::take(&mut self.carry);
        self.ops.items.push(Item {
            pre_cpu_ns: pre,
            t_ns,
            op,
        });
    }
    /// A hand-off to another thread. The workload validator forbids queue
    /// ops and barriers under a lock (they could deadlock), so a push made
    /// while holding locks (a signal inside its critical section, a create
    /// under a lock) waits until the thread has released them all: the woken
    /// thread needed that lock anyway. A pop or barrier under a lock is
    /// dropped (and counted); `balance` then drops the matching push.
    fn handoff(&mut self, t_ns: u64, op: SyncOp) {
        if self.held.is_empty() {
            self.op(t_ns, op);
        } else if matches!(op, SyncOp::Push(_)) {
            self.pending.push((t_ns, op));
        } else {
            self.dropped_waits += 1;
        }
    }
    fn lock(&mut self, t: u64, name: &str, spin: bool) {
        let d = self.held.entry(name.to_string()).or_default();
        *d += 1;
        if *d == 1 {
            let n = name.to_string();
            self.op(
                t,
                if spin {
                    SyncOp::SpinLock(n)
                } else {
                    SyncOp::Lock(n)
                },
            );
        } else {
            self.dropped += 1;
        }
    }
    fn unlock(&mut self, t: u64, name: &str, spin: bool) {
        match self.held.get_mut(name) {
            Some(d) if *d > 1 => {
                *d -= 1;
                self.dropped += 1;
            }
            Some(d) if *d == 1 => {
                self.held.remove(name);
                let n = name.to_string();
                self.op(
                    t,
                    if spin {
                        SyncOp::SpinUnlock(n)
                    } else {
                        SyncOp::Unlock(n)
                    },
                );
                if self.held.is_empty() {
                    for (pt, op) in std::mem::take(&mut self.pending) {
                        self.op(pt.max(t), op);
                    }
                }
            }
            _ => self.dropped += 1,
        }
    }
}

pub fn build(trace: &Trace, wakes: &[Wake]) -> Tokens {
    let mut names = Names::default();
    let mut tokens = Tokens::default();
    // Who each wake-up is for: signal event → waiter threads; wait → matched.
    let mut wakes_by: HashMap<(usize, usize), Vec<usize>> = HashMap::new();
    let mut woken: HashMap<(usize, usize), ()> = HashMap::new();
    for w in wakes {
        wakes_by.entry(w.by).or_default().push(w.waiter.0);
        woken.insert(w.waiter, ());
    }
    // pthread_t → thread index (the latest thread with that id started before).
    let mut pthreads: Vec<(u64, u64, usize)> = trace
        .threads
        .iter()
        .enumerate()
        .filter_map(|(i, evs)| {
            evs.iter()
                .find(|e| e.kind == Kind::ThreadStart)
                .map(|e| (e.arg, e.t_ns, i))
        })
        .collect();
    pthreads.sort();
    let joined = |pt: u64, t: u64| {
        pthreads
            .iter()
            .filter(|(p, start, _)| *p == pt && *start <= t)
            .map(|x| x.2)
            .next_back()
    };
    for (ti, evs) in trace.threads.iter().enumerate() {
        let mut b = Builder {
            ops: ThreadOps::default(),
            held: HashMap::new(),
            cpu_mark: 0,
            carry: 0,
            dropped: 0,
            dropped_waits: 0,
            pending: Vec::new(),
        };
        for (i, e) in evs.iter().enumerate() {
            b.carry += e.cpu_ns.saturating_sub(b.cpu_mark);
            // Spinning inside the call is CPU but not compute.
            let spun = if e.kind == Kind::SpinLock {
                e.wait_ns
            } else {
                0
            };
            b.cpu_mark = e.cpu_ns.max(b.cpu_mark) + spun;
            event_ops(
                &mut b,
                &mut names,
                &mut tokens,
                ti,
                i,
                e,
                &wakes_by,
                &woken,
                &joined,
            );
        }
        // Leave nothing held at the end (a killed program may have).
        let mut still: Vec<String> = b.held.keys().cloned().collect();
        still.sort();
        let t = evs.last().map(|e| e.end_ns()).unwrap_or(0);
        for name in still {
            let spin = name.starts_with("spin");
            b.held.insert(name.clone(), 1);
            b.unlock(t, &name, spin);
        }
        for (pt, op) in std::mem::take(&mut b.pending) {
            b.op(pt, op);
        }
        b.ops.tail_cpu_ns = b.carry;
        tokens.dropped_lock_ops += b.dropped;
        tokens.dropped_waits += b.dropped_waits;
        tokens.threads.push(b.ops);
    }
    seed_semaphores(trace, &mut names, &mut tokens);
    balance(&mut tokens);
    list_locks(&mut tokens);
    tokens
}

/// Semaphore initial values: tokens pushed by the thread that called sem_init,
/// at the time it called it.
fn seed_semaphores(trace: &Trace, names: &mut Names, tokens: &mut Tokens) {
    for (ti, evs) in trace.threads.iter().enumerate() {
        for e in evs
            .iter()
            .filter(|e| e.kind == Kind::SemInit && !e.failed())
        {
            let name = names.get("sem", e.obj);
            let pos = tokens.threads[ti]
                .items
                .partition_point(|it| it.t_ns <= e.t_ns);
            for _ in 0..e.arg.min(1 << 20) {
                tokens.threads[ti].items.insert(
                    pos,
                    Item {
                        pre_cpu_ns: 0,
                        t_ns: e.t_ns,
                        op: SyncOp::Push(name.clone()),
                    },
                );
            }
            tokens.queues.entry(name).or_insert((QueueRole::Sem, 0));
        }
    }
}

/// The mutex and spin lock tables: every lock some thread takes.
fn list_locks(tokens: &mut Tokens) {
    let mut mutexes = std::collections::BTreeSet::new();
    let mut spins = std::collections::BTreeSet::new();
    for it in tokens.threads.iter().flat_map(|t| &t.items) {
        match &it.op {
            SyncOp::Lock(n) => {
                mutexes.insert(n.clone());
            }
            SyncOp::SpinLock(n) => {
                spins.insert(n.clone());
            }
            _ => {}
        }
    }
    tokens.mutexes = mutexes.into_iter().collect();
    tokens.spins = spins.into_iter().collect();
}

#[allow(clippy::too_many_arguments)]
fn event_ops(
    b: &mut Builder,
    names: &mut Names,
    tokens: &mut Tokens,
    ti: usize,
    i: usize,
    e: &Event,
    wakes_by: &HashMap<(usize, usize), Vec<usize>>,
    woken: &HashMap<(usize, usize), ()>,
    joined: &dyn Fn(u64, u64) -> Option<usize>,
) {
    let t = e.t_ns;
    let mut queue = |name: String, role: QueueRole| register_queue(&mut tokens.queues, name, role);
    match e.kind {
        Kind::ThreadStart if ti > 0 => b.handoff(
            t,
            SyncOp::Pop(queue(format!("start_t{ti}"), QueueRole::Start)),
        ),
        Kind::ThreadExit => b.handoff(
            t,
            SyncOp::Push(queue(format!("join_t{ti}"), QueueRole::Join)),
        ),
        Kind::Create if !e.failed() => b.handoff(
            t,
            SyncOp::Push(queue(format!("start_t{}", e.arg), QueueRole::Start)),
        ),
        Kind::Join if !e.failed() => {
            if let Some(child) = joined(e.obj, e.t_ns) {
                b.handoff(
                    t,
                    SyncOp::Pop(queue(format!("join_t{child}"), QueueRole::Join)),
                );
            }
        }
        Kind::MutexLock | Kind::MutexTrylock | Kind::MutexTimedlock if analyze::acquired(e) => {
            b.lock(t, &names.get("m", e.obj), false)
        }
        Kind::MutexUnlock if !e.failed() => b.unlock(t, &names.get("m", e.obj), false),
        Kind::RwRdlock | Kind::RwWrlock if analyze::acquired(e) => {
            b.lock(t, &names.get("rw", e.obj), false)
        }
        Kind::RwUnlock if !e.failed() => b.unlock(t, &names.get("rw", e.obj), false),
        Kind::SpinLock if analyze::acquired(e) => b.lock(t, &names.get("spin", e.obj), true),
        Kind::SpinUnlock => b.unlock(t, &names.get("spin", e.obj), true),
        Kind::CondWait | Kind::CondTimedwait => {
            let was_woken = woken.contains_key(&(ti, i));
            cond_wait(b, names, &mut tokens.queues, ti, e, was_woken);
        }
        Kind::CondSignal | Kind::CondBroadcast => {
            let cv = names.get("cv", e.obj);
            if let Some(waiters) = wakes_by.get(&(ti, i)) {
                for w in waiters {
                    b.handoff(
                        t,
                        SyncOp::Push(queue(format!("{cv}_t{w}"), QueueRole::Cond)),
                    );
                }
            }
        }
        Kind::BarrierWait if !e.failed() => {
            let name = names.get("bar", e.obj);
            tokens.barriers.entry(name.clone()).or_insert(0);
            b.handoff(t, SyncOp::Barrier(name));
        }
        Kind::BarrierInit if !e.failed() => {
            let name = names.get("bar", e.obj);
            tokens
                .barriers
                .insert(name, u32::try_from(e.arg).unwrap_or(u32::MAX));
        }
        Kind::SemWait if !e.failed() => b.handoff(
            t,
            SyncOp::Pop(queue(names.get("sem", e.obj), QueueRole::Sem)),
        ),
        Kind::SemPost if !e.failed() => b.handoff(
            t,
            SyncOp::Push(queue(names.get("sem", e.obj), QueueRole::Sem)),
        ),
        Kind::SemInit => {
            names.get("sem", e.obj);
        }
        _ => {}
    }
}

/// Note `name` as a queue with `role` (its count starts at 0) and return it.
fn register_queue(
    queues: &mut BTreeMap<String, (QueueRole, u64)>,
    name: String,
    role: QueueRole,
) -> String {
    queues.entry(name.clone()).or_insert((role, 0));
    name
}

/// A condition wait: the mutex is released, the wait pops this thread's token
/// from the condition's queue if a signal woke it (or sleeps if it timed out),
/// and the mutex is taken again on return.
fn cond_wait(
    b: &mut Builder,
    names: &mut Names,
    queues: &mut BTreeMap<String, (QueueRole, u64)>,
    ti: usize,
    e: &Event,
    was_woken: bool,
) {
    let t = e.t_ns;
    let m = names.get("m", e.arg);
    let cv = names.get("cv", e.obj);
    let held = b.held.get(&m).copied().unwrap_or(0) == 1;
    if held {
        b.unlock(t, &m, false);
    }
    if was_woken {
        b.handoff(
            t,
            SyncOp::Pop(register_queue(
                queues,
                format!("{cv}_t{ti}"),
                QueueRole::Cond,
            )),
        );
    } else if e.timed_out() {
        b.op(t, SyncOp::SleepUs(e.wait_ns / 1000));
    }
    if held && analyze::reacquires_mutex(e) {
        b.lock(e.end_ns(), &m, false);
    }
}

/// Make every queue's pushes equal its pops and every barrier's arrivals a
/// multiple of its parties, dropping the latest surplus ops (in a complete
/// trace only a semaphore's final value is surplus). A dropped op's CPU time
/// moves to the next op of its thread.
fn balance(tokens: &mut Tokens) {
    // (time, thread, item) of every push/pop/arrival per object.
    let mut pushes: HashMap<String, Vec<(u64, usize, usize)>> = HashMap::new();
    let mut pops: HashMap<String, Vec<(u64, usize, usize)>> = HashMap::new();
    let mut arrivals: HashMap<String, Vec<(u64, usize, usize)>> = HashMap::new();
    for (ti, t) in tokens.threads.iter().enumerate() {
        for (ii, it) in t.items.iter().enumerate() {
            let key = (it.t_ns, ti, ii);
            match &it.op {
                SyncOp::Push(q) => pushes.entry(q.clone()).or_default().push(key),
                SyncOp::Pop(q) => pops.entry(q.clone()).or_default().push(key),
                SyncOp::Barrier(b) => arrivals.entry(b.clone()).or_default().push(key),
                _ => {}
            }
        }
    }
    let mut drop: Vec<(usize, usize)> = Vec::new();
    let queue_names: Vec<String> = tokens.queues.keys().cloned().collect();
    for q in queue_names {
        let mut pu = pushes.remove(&q).unwrap_or_default();
        let mut po = pops.remove(&q).unwrap_or_default();
        pu.sort();
        po.sort();
        let keep = pu.len().min(po.len());
        drop.extend(pu[keep..].iter().map(|k| (k.1, k.2)));
        drop.extend(po[keep..].iter().map(|k| (k.1, k.2)));
        if let Some(entry) = tokens.queues.get_mut(&q) {
            entry.1 = keep as u64;
        }
    }
    tokens.queues.retain(|_, (_, n)| *n > 0);
    let barrier_names: Vec<String> = tokens.barriers.keys().cloned().collect();
    for bn in barrier_names {
        let mut arr = arrivals.remove(&bn).unwrap_or_default();
        arr.sort();
        let users = {
            let mut th: Vec<usize> = arr.iter().map(|a| a.1).collect();
            th.sort();
            th.dedup();
            u32::try_from(th.len()).unwrap_or(u32::MAX)
        };
        let parties = match tokens.barriers.get(&bn).copied() {
            Some(p) if p > 0 && p <= users => p,
            _ => users.max(1),
        };
        tokens.barriers.insert(bn.clone(), parties);
        let keep = arr.len() / parties as usize * parties as usize;
        drop.extend(arr[keep..].iter().map(|k| (k.1, k.2)));
    }
    tokens.dropped_balance += drop.len() as u64;
    drop.sort();
    for (ti, ii) in drop.into_iter().rev() {
        let t = &mut tokens.threads[ti];
        let it = t.items.remove(ii);
        match t.items.get_mut(ii) {
            Some(next) => next.pre_cpu_ns += it.pre_cpu_ns,
            None => t.tail_cpu_ns += it.pre_cpu_ns,
        }
    }
    // Barriers no one reaches any more.
    let used: std::collections::HashSet<String> = tokens
        .threads
        .iter()
        .flat_map(|t| &t.items)
        .filter_map(|it| match &it.op {
            SyncOp::Barrier(b) => Some(b.clone()),
            _ => None,
        })
        .collect();
    tokens.barriers.retain(|b, _| used.contains(b));
}
