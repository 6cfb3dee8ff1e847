//! What a trace says: objects by kind, per-kind counts (acquisitions, waits,
//! wake-ups, contention, time blocked), per-thread roles and times, and which
//! condition-variable signal woke which waiter.

use crate::format::{Event, Kind, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Kinds of synchronization object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjKind {
    Mutex,
    Cond,
    RwLock,
    Barrier,
    Spin,
    Sem,
    Thread,
}

impl ObjKind {
    pub fn name(self) -> &'static str {
        match self {
            ObjKind::Mutex => "mutex",
            ObjKind::Cond => "cond",
            ObjKind::RwLock => "rwlock",
            ObjKind::Barrier => "barrier",
            ObjKind::Spin => "spin",
            ObjKind::Sem => "semaphore",
            ObjKind::Thread => "thread",
        }
    }

    /// The kind of object an event is about (None: none).
    pub fn of(kind: Kind) -> ObjKind {
        match kind {
            Kind::MutexLock | Kind::MutexTrylock | Kind::MutexTimedlock | Kind::MutexUnlock => {
                ObjKind::Mutex
            }
            Kind::CondWait | Kind::CondTimedwait | Kind::CondSignal | Kind::CondBroadcast => {
                ObjKind::Cond
            }
            Kind::RwRdlock | Kind::RwWrlock | Kind::RwUnlock => ObjKind::RwLock,
            Kind::BarrierInit | Kind::BarrierWait => ObjKind::Barrier,
            Kind::SpinLock | Kind::SpinUnlock => ObjKind::Spin,
            Kind::SemInit | Kind::SemWait | Kind::SemPost => ObjKind::Sem,
            Kind::ThreadStart | Kind::ThreadExit | Kind::Create | Kind::Join => ObjKind::Thread,
        }
    }
}

/// Per-kind counts. Which fields a kind uses: see docs/trace-format.md.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct KindCounts {
    /// Distinct objects (addresses) seen.
    pub objects: u64,
    /// Calls of any function on this kind.
    pub calls: u64,
    /// Successful acquisitions: lock, trylock and timedlock that got it, and
    /// (mutex) the re-acquisition at the end of every condition wait.
    pub acquisitions: u64,
    /// Calls that had to wait (contended locks, blocked waits).
    pub contended: u64,
    /// Waits: condition waits, barrier arrivals, semaphore downs that succeeded.
    pub waits: u64,
    /// Wake-ups: condition waits matched to the signal/broadcast that ended
    /// them; semaphore posts; barrier openings.
    pub wakeups: u64,
    /// Tries that failed, timed calls that timed out.
    pub failed: u64,
    /// Time spent blocked or spinning inside these calls, over all threads.
    pub blocked_ns: u64,
}

/// One traced thread.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadInfo {
    pub index: usize,
    /// `main`, `poolK` (one of several threads with the same start routine) or
    /// `stageK` (the only thread with its start routine).
    pub role: String,
    pub start_routine: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub cpu_ns: u64,
    pub blocked_ns: u64,
    pub events: usize,
    pub exited: bool,
}

/// A condition wait matched to the call that woke it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// (thread, event index) of the signal or broadcast.
    pub by: (usize, usize),
    /// (thread, event index) of the wait.
    pub waiter: (usize, usize),
}

/// Everything `show` and `model` need from a trace.
#[derive(Debug, Clone)]
pub struct Analysis {
    pub threads: Vec<ThreadInfo>,
    pub kinds: BTreeMap<ObjKind, KindCounts>,
    pub wakes: Vec<Wake>,
    /// Condition waits that returned without a timeout and with no signal to
    /// match (spurious, or a signal the interposer could not see).
    pub unmatched_waits: u64,
}

/// Condition waits end with the mutex re-taken (also on timeout).
pub fn reacquires_mutex(e: &Event) -> bool {
    matches!(e.kind, Kind::CondWait | Kind::CondTimedwait) && (e.ret == 0 || e.timed_out())
}

/// Whether an event acquired its lock (mutex, rwlock, spin).
pub fn acquired(e: &Event) -> bool {
    matches!(
        e.kind,
        Kind::MutexLock
            | Kind::MutexTrylock
            | Kind::MutexTimedlock
            | Kind::RwRdlock
            | Kind::RwWrlock
            | Kind::SpinLock
    ) && !e.failed()
}

/// Match every condition wait to the signal or broadcast that ended it: the
/// earliest call on the same condition variable, by another thread, between
/// the wait's entry and its return, that is still free (a signal wakes one
/// waiter, a broadcast every waiter already waiting). Timed-out waits match
/// nothing.
pub fn match_wakeups(trace: &Trace) -> (Vec<Wake>, u64) {
    struct Sig {
        t: u64,
        thread: usize,
        idx: usize,
        broadcast: bool,
        used: bool,
    }
    let mut signals: HashMap<u64, Vec<Sig>> = HashMap::new();
    let mut waits: HashMap<u64, Vec<(u64, u64, usize, usize)>> = HashMap::new();
    for (ti, evs) in trace.threads.iter().enumerate() {
        for (i, e) in evs.iter().enumerate() {
            match e.kind {
                Kind::CondSignal | Kind::CondBroadcast => {
                    signals.entry(e.obj).or_default().push(Sig {
                        t: e.t_ns,
                        thread: ti,
                        idx: i,
                        broadcast: e.kind == Kind::CondBroadcast,
                        used: false,
                    })
                }
                Kind::CondWait | Kind::CondTimedwait if e.ret == 0 => waits
                    .entry(e.obj)
                    .or_default()
                    .push((e.t_ns, e.end_ns(), ti, i)),
                _ => {}
            }
        }
    }
    let mut wakes = Vec::new();
    let mut unmatched = 0;
    let mut conds: Vec<_> = waits.into_iter().collect();
    conds.sort_by_key(|(k, _)| *k);
    for (cond, mut ws) in conds {
        ws.sort_by_key(|w| (w.1, w.0));
        let sigs = signals.entry(cond).or_default();
        sigs.sort_by_key(|s| s.t);
        for (enter, exit, thread, idx) in ws {
            let first = sigs.partition_point(|s| s.t < enter);
            let found = sigs[first..]
                .iter_mut()
                .take_while(|s| s.t <= exit)
                .find(|s| s.thread != thread && (s.broadcast || !s.used));
            match found {
                Some(s) => {
                    s.used = true;
                    wakes.push(Wake {
                        by: (s.thread, s.idx),
                        waiter: (thread, idx),
                    });
                }
                None => unmatched += 1,
            }
        }
    }
    (wakes, unmatched)
}

/// Roles: `main` for thread 0; the other threads are grouped by start
/// routine and, within one routine, by what they wait for (the set of
/// condition variables, barriers and semaphores they wait on: threads of a
/// thread library's common trampoline, such as pigz's, differ there). A group
/// of several threads is a pool of workers (`poolK`), a thread alone a
/// pipeline stage (`stageK`); K counts groups in order of first appearance.
fn roles(trace: &Trace) -> Vec<(String, u64)> {
    use std::collections::BTreeSet;
    let routine = |evs: &Vec<Event>| {
        evs.iter()
            .find(|e| e.kind == Kind::ThreadStart)
            .map(|e| e.obj)
            .unwrap_or(0)
    };
    let waits_on = |evs: &Vec<Event>| -> BTreeSet<u64> {
        evs.iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    Kind::CondWait | Kind::CondTimedwait | Kind::BarrierWait | Kind::SemWait
                )
            })
            .map(|e| e.obj)
            .collect()
    };
    let similar = |a: &BTreeSet<u64>, b: &BTreeSet<u64>| {
        let union = a.union(b).count();
        union == 0 || a.intersection(b).count() * 2 >= union
    };
    // (routine, signature of the group's first thread, members)
    let mut groups: Vec<(u64, BTreeSet<u64>, Vec<usize>)> = Vec::new();
    for (i, evs) in trace.threads.iter().enumerate().skip(1) {
        let (r, sig) = (routine(evs), waits_on(evs));
        match groups.iter_mut().find(|g| g.0 == r && similar(&g.1, &sig)) {
            Some(g) => g.2.push(i),
            None => groups.push((r, sig, vec![i])),
        }
    }
    let mut out = vec![(String::new(), 0u64); trace.threads.len()];
    if let Some(first) = out.first_mut() {
        *first = ("main".to_string(), 0);
    }
    for (k, (r, _, members)) in groups.iter().enumerate() {
        let role = if members.len() > 1 {
            format!("pool{}", k + 1)
        } else {
            format!("stage{}", k + 1)
        };
        for m in members {
            out[*m] = (role.clone(), *r);
        }
    }
    out
}

pub fn analyze(trace: &Trace) -> Analysis {
    let (wakes, unmatched_waits) = match_wakeups(trace);
    let mut kinds: BTreeMap<ObjKind, KindCounts> = BTreeMap::new();
    let mut objects: HashMap<(ObjKind, u64), ()> = HashMap::new();
    let roles = roles(trace);
    let end = trace.end_ns();
    let mut threads = Vec::new();
    for (ti, evs) in trace.threads.iter().enumerate() {
        let mut blocked = 0u64;
        for e in evs {
            let ok = ObjKind::of(e.kind);
            let c = kinds.entry(ok).or_default();
            c.calls += 1;
            if ok != ObjKind::Thread {
                objects.insert((ok, e.obj), ());
            }
            if acquired(e) {
                c.acquisitions += 1;
            }
            if e.contended() && e.flags & crate::format::F_TRY == 0 {
                c.contended += 1;
            }
            if e.failed() || e.timed_out() {
                c.failed += 1;
            }
            match e.kind {
                Kind::CondWait | Kind::CondTimedwait => {
                    c.waits += 1;
                    if reacquires_mutex(e) {
                        kinds.entry(ObjKind::Mutex).or_default().acquisitions += 1;
                        objects.insert((ObjKind::Mutex, e.arg), ());
                    }
                }
                Kind::BarrierWait => {
                    c.waits += 1;
                    if e.flags & crate::format::F_SERIAL != 0 {
                        c.wakeups += 1;
                    }
                }
                Kind::SemWait if !e.failed() => c.waits += 1,
                Kind::SemPost if !e.failed() => c.wakeups += 1,
                Kind::Join => c.waits += 1,
                _ => {}
            }
            let c = kinds.entry(ok).or_default();
            c.blocked_ns += e.wait_ns;
            blocked += e.wait_ns;
        }
        let first = evs.first().map(|e| e.t_ns).unwrap_or(trace.start_ns);
        let last = evs.last();
        threads.push(ThreadInfo {
            index: ti,
            role: roles.get(ti).map(|r| r.0.clone()).unwrap_or_default(),
            start_routine: roles.get(ti).map(|r| r.1).unwrap_or(0),
            start_ns: first,
            end_ns: last.map(|e| e.end_ns()).unwrap_or(end),
            cpu_ns: last.map(|e| e.cpu_ns).unwrap_or(0),
            blocked_ns: blocked,
            events: evs.len(),
            exited: last.map(|e| e.kind == Kind::ThreadExit).unwrap_or(false),
        });
    }
    kinds.entry(ObjKind::Cond).or_default().wakeups = wakes.len() as u64;
    for (k, _) in objects.keys() {
        kinds.entry(*k).or_default().objects += 1;
    }
    // Kinds never seen stay out, except the cond entry made above.
    kinds.retain(|_, c| c.calls > 0 || c.acquisitions > 0);
    Analysis {
        threads,
        kinds,
        wakes,
        unmatched_waits,
    }
}
