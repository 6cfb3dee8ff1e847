//! From text to [`Program`]: parse the TOML, evaluate counts, resolve names and
//! check that the program can run to completion. Every error carries the file,
//! line and column it is about.

mod locks;

use crate::expr::{Count, Env};
use crate::program::*;
use crate::spec::*;
use serde_spanned::Spanned;
use std::collections::BTreeMap;
use std::ops::Range;

pub use smplab_record::diag::{Diagnostic, Diagnostics};
use smplab_record::diag::{Position, SourceText};

/// Errors from loading a workload.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("{path}: cannot read workload file: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// One or more located problems; Display prints them one per line.
    #[error(transparent)]
    Invalid(#[from] Diagnostics),
    #[error("no built-in workload named `{0}`; `smplab workloads` lists them, or pass a path to a .toml file")]
    UnknownWorkload(String),
    #[error("--threads must be at least 1")]
    ZeroThreadParameter,
    #[error("--scale must be a positive number, got {0}")]
    BadScale(f64),
}

impl WorkloadError {
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            WorkloadError::Invalid(d) => d.as_slice(),
            _ => &[],
        }
    }
}

/// Parse a workload file's text. `file` is used only in messages.
pub fn parse(file: &str, text: &str) -> Result<WorkloadSpec, WorkloadError> {
    let loc = SourceText::new(file, text);
    toml::from_str::<WorkloadSpec>(text).map_err(|e| {
        let message = e
            .message()
            .replace("unknown variant", "unknown operation")
            .replace(
                "wrong number of keys",
                "an operation is a table with exactly one key; wrong number of keys",
            );
        WorkloadError::Invalid(loc.parse_error(e.span(), &message).into())
    })
}

/// Instantiate and validate a parsed spec with thread parameter `n` and scale `s`.
pub fn instantiate(
    file: &str,
    text: &str,
    spec: &WorkloadSpec,
    n: u32,
    scale: f64,
) -> Result<Program, WorkloadError> {
    if n == 0 {
        return Err(WorkloadError::ZeroThreadParameter);
    }
    if !(scale.is_finite() && scale > 0.0) {
        return Err(WorkloadError::BadScale(scale));
    }
    let mut cx = Cx {
        loc: SourceText::new(file, text),
        env: Env { n, s: scale },
        spec,
        diags: Diagnostics::default(),
        group: String::new(),
        drained_at: vec![None; spec.pools.len()],
    };
    let program = cx.build();
    if cx.diags.is_empty() {
        cx.check_balance(&program);
    }
    Ok(cx.diags.into_result(program)?)
}

struct Cx<'a> {
    loc: SourceText<'a>,
    env: Env,
    spec: &'a WorkloadSpec,
    diags: Diagnostics,
    /// The group whose ops are being built, for messages.
    group: String,
    /// Per pool: the group and span of the drain that takes from it.
    drained_at: Vec<Option<(String, Range<usize>)>>,
}

/// Where an op list sits, for the rules on where a drain may be.
#[derive(Clone, Copy, PartialEq)]
enum Nest {
    /// A group's own op list.
    Top,
    /// Inside a repeat body.
    Repeat,
    /// Inside a drain body.
    Drain,
}

/// Which table a name lives in, for "is a mutex, not a spin lock" hints.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    SpinLock,
    Mutex,
    Barrier,
    Queue,
    Counter,
    Buffer,
    Device,
    Pool,
}

impl Kind {
    fn noun(self) -> &'static str {
        match self {
            Kind::SpinLock => "spin lock",
            Kind::Mutex => "mutex",
            Kind::Barrier => "barrier",
            Kind::Queue => "queue",
            Kind::Counter => "counter",
            Kind::Buffer => "buffer",
            Kind::Device => "device",
            Kind::Pool => "pool",
        }
    }
    fn table(self) -> &'static str {
        match self {
            Kind::SpinLock => "spin_locks",
            Kind::Mutex => "mutexes",
            Kind::Barrier => "barriers",
            Kind::Queue => "queues",
            Kind::Counter => "counters",
            Kind::Buffer => "buffers",
            Kind::Device => "devices",
            Kind::Pool => "pools",
        }
    }
}

fn index_of<T>(map: &BTreeMap<String, T>, name: &str) -> Option<u32> {
    map.keys()
        .position(|k| k == name)
        .map(|i| u32::try_from(i).unwrap_or(u32::MAX))
}

impl Cx<'_> {
    fn count(&mut self, c: &Count, span: Range<usize>, what: &str) -> u64 {
        match c.eval(self.env) {
            Ok(v) => v,
            Err(e) => {
                self.diags.push(self.loc.span(span, format!("{what}: {e}")));
                0
            }
        }
    }

    fn count_u32(&mut self, c: &Count, span: Range<usize>, what: &str) -> u32 {
        let v = self.count(c, span.clone(), what);
        u32::try_from(v).unwrap_or_else(|_| {
            self.diags
                .push(self.loc.span(span, format!("{what}: {v} is too large")));
            0
        })
    }

    fn lookup(&self, name: &str, kind: Kind) -> Option<Kind> {
        let s = self.spec;
        let has = |k: Kind| match k {
            Kind::SpinLock => s.spin_locks.contains_key(name),
            Kind::Mutex => s.mutexes.contains_key(name),
            Kind::Barrier => s.barriers.contains_key(name),
            Kind::Queue => s.queues.contains_key(name),
            Kind::Counter => s.counters.contains_key(name),
            Kind::Buffer => s.buffers.contains_key(name),
            Kind::Device => s.devices.contains_key(name),
            Kind::Pool => s.pools.contains_key(name),
        };
        if has(kind) {
            return Some(kind);
        }
        [
            Kind::SpinLock,
            Kind::Mutex,
            Kind::Barrier,
            Kind::Queue,
            Kind::Counter,
            Kind::Buffer,
            Kind::Device,
            Kind::Pool,
        ]
        .into_iter()
        .find(|&k| has(k))
    }

    fn resolve(&mut self, name: &Spanned<String>, kind: Kind) -> u32 {
        let s = self.spec;
        let found = match kind {
            Kind::SpinLock => index_of(&s.spin_locks, name.get_ref()),
            Kind::Mutex => index_of(&s.mutexes, name.get_ref()),
            Kind::Barrier => index_of(&s.barriers, name.get_ref()),
            Kind::Queue => index_of(&s.queues, name.get_ref()),
            Kind::Counter => index_of(&s.counters, name.get_ref()),
            Kind::Buffer => index_of(&s.buffers, name.get_ref()),
            Kind::Device => index_of(&s.devices, name.get_ref()),
            Kind::Pool => index_of(&s.pools, name.get_ref()),
        };
        if let Some(i) = found {
            return i;
        }
        let msg = match self.lookup(name.get_ref(), kind) {
            Some(other) => format!(
                "`{}` is a {}, not a {}",
                name.get_ref(),
                other.noun(),
                kind.noun()
            ),
            None => format!(
                "undefined {} `{}`; declare it under [{}.{}]",
                kind.noun(),
                name.get_ref(),
                kind.table(),
                name.get_ref()
            ),
        };
        self.diags.push(self.loc.span(name.span(), msg));
        0
    }

    fn build(&mut self) -> Program {
        let spec = self.spec;
        let spin_locks = spec
            .spin_locks
            .iter()
            .map(|(name, l)| SpinLockDef {
                name: name.clone(),
                kind: l.get_ref().kind,
                pause: l.get_ref().pause,
            })
            .collect();
        let mutexes = spec
            .mutexes
            .iter()
            .map(|(name, m)| MutexDef {
                name: name.clone(),
                spin_limit: m.get_ref().spin_limit,
            })
            .collect();
        let counters = spec
            .counters
            .keys()
            .map(|name| CounterDef { name: name.clone() })
            .collect();
        let barriers = self.barriers();
        let queues = self.queues();
        let buffers = self.buffers();
        let devices = self.devices();
        let pools = self.pools();
        let groups = self.groups(&buffers);
        self.check_pools_drained();
        Program {
            name: spec.name.clone(),
            description: spec.description.clone(),
            imitates: spec.imitates.clone(),
            n: self.env.n,
            scale: self.env.s,
            spin_locks,
            mutexes,
            barriers,
            queues,
            counters,
            buffers,
            devices,
            pools,
            groups,
        }
    }

    /// The barrier table: every barrier needs at least one party.
    fn barriers(&mut self) -> Vec<BarrierDef> {
        let spec = self.spec;
        let mut barriers = Vec::new();
        for (name, b) in &spec.barriers {
            let parties = self.count_u32(&b.get_ref().parties, b.span(), "barrier parties");
            if parties == 0 {
                self.diags.push(self.loc.span(
                    b.span(),
                    format!("barrier `{name}` has 0 parties; it needs at least 1"),
                ));
            }
            barriers.push(BarrierDef {
                name: name.clone(),
                parties,
                wait: b.get_ref().wait,
                spin_limit: b.get_ref().spin_limit,
                pause: b.get_ref().pause,
            });
        }
        barriers
    }

    /// The queue table: every queue holds at least one token.
    fn queues(&mut self) -> Vec<QueueDef> {
        let spec = self.spec;
        let mut queues = Vec::new();
        for (name, q) in &spec.queues {
            let capacity = self.count_u32(&q.get_ref().capacity, q.span(), "queue capacity");
            if capacity == 0 {
                self.diags.push(self.loc.span(
                    q.span(),
                    format!("queue `{name}` has capacity 0; it needs at least 1"),
                ));
            }
            queues.push(QueueDef {
                name: name.clone(),
                capacity,
            });
        }
        queues
    }

    /// The shared buffer table: no empty buffers.
    fn buffers(&mut self) -> Vec<BufferDef> {
        let spec = self.spec;
        let mut buffers = Vec::new();
        for (name, b) in &spec.buffers {
            let bytes = self.count(&b.get_ref().bytes, b.span(), "buffer bytes");
            if bytes == 0 {
                self.diags.push(
                    self.loc
                        .span(b.span(), format!("buffer `{name}` has 0 bytes")),
                );
            }
            buffers.push(BufferDef {
                name: name.clone(),
                bytes,
            });
        }
        buffers
    }

    /// The device table: every device serves at least one request at once.
    fn devices(&mut self) -> Vec<DeviceDef> {
        let spec = self.spec;
        let mut devices = Vec::new();
        for (name, d) in &spec.devices {
            let queue_depth = match &d.get_ref().queue_depth {
                Some(c) => self.count_u32(c, d.span(), "device queue_depth"),
                None => 1,
            };
            if queue_depth == 0 {
                self.diags.push(self.loc.span(
                    d.span(),
                    format!("device `{name}` has queue_depth 0; it needs at least 1 (requests in service at once)"),
                ));
            }
            devices.push(DeviceDef {
                name: name.clone(),
                queue_depth,
            });
        }
        devices
    }

    /// The thread groups, each with at least one thread; their ops are
    /// resolved against the tables and their lock use checked.
    fn groups(&mut self, buffers: &[BufferDef]) -> Vec<Group> {
        let spec = self.spec;
        if spec.groups.is_empty() {
            self.diags.push(self.loc.at(
                0,
                "the workload has no thread groups; add at least one [[groups]] with threads and ops",
            ));
        }
        let mut groups = Vec::new();
        for g in &spec.groups {
            let gs = g.get_ref();
            let threads = self.count_u32(gs.threads.get_ref(), gs.threads.span(), "threads");
            if threads == 0 {
                self.diags.push(self.loc.span(
                    gs.threads.span(),
                    format!(
                        "group `{}` has zero threads; a group needs at least one thread",
                        gs.name
                    ),
                ));
            }
            self.group = gs.name.clone();
            let ops = self.ops(&gs.ops, buffers, Nest::Top);
            self.check_locks(&gs.name, &gs.ops);
            groups.push(Group {
                name: gs.name.clone(),
                threads,
                ops,
            });
        }
        groups
    }

    /// The pool table: every count a whole number of units that a signed
    /// 64-bit fetch-and-decrement can hold.
    fn pools(&mut self) -> Vec<PoolDef> {
        let mut pools = Vec::new();
        for (name, p) in &self.spec.pools {
            let c = &p.get_ref().count;
            let units = self.count(c.get_ref(), c.span(), "pool count");
            if i64::try_from(units).is_err() {
                self.diags.push(self.loc.span(
                    c.span(),
                    format!("pool `{name}` has {units} units; at most {} fit", i64::MAX),
                ));
            }
            pools.push(PoolDef {
                name: name.clone(),
                units,
            });
        }
        pools
    }

    /// Every pool is drained somewhere (its units are work the run must do).
    fn check_pools_drained(&mut self) {
        for (i, (name, p)) in self.spec.pools.iter().enumerate() {
            if self.drained_at.get(i).is_some_and(|d| d.is_none()) {
                self.diags.push(self.loc.span(
                    p.span(),
                    format!(
                        "pool `{name}` is never drained; add a `{{ drain = {{ pool = \"{name}\", ops = [...] }} }}` to a group or remove the pool"
                    ),
                ));
            }
        }
    }

    /// A drain: at the top level of a group's op list, the only drain of its
    /// pool, no barrier in its body (checked in `check_lock_scope`).
    fn drain(
        &mut self,
        d: &DrainSpec,
        span: Range<usize>,
        buffers: &[BufferDef],
        nest: Nest,
    ) -> Op {
        let pool = self.resolve(&d.pool, Kind::Pool);
        let name = d.pool.get_ref();
        match nest {
            Nest::Top => {}
            Nest::Repeat => self.diags.push(self.loc.span(
                span.clone(),
                format!(
                    "drain of pool `{name}` inside a repeat: the first pass empties the pool and later passes find nothing; put the drain at the top level of group `{}`'s ops",
                    self.group
                ),
            )),
            Nest::Drain => self.diags.push(self.loc.span(
                span.clone(),
                format!(
                    "drain of pool `{name}` inside another drain: a drain's body is the work of one unit and must be fixed; put the drain at the top level of group `{}`'s ops",
                    self.group
                ),
            )),
        }
        if self.spec.pools.contains_key(name) {
            match self.drained_at.get(pool as usize).cloned() {
                Some(Some((group, first))) => {
                    let first = Position::of(self.loc.text, first.start);
                    self.diags.push(self.loc.span(
                        span.clone(),
                        format!(
                            "pool `{name}` is already drained by group `{group}` at line {}, column {}: a pool is drained in one place, so each unit's work is one known body; declare another pool",
                            first.line, first.col
                        ),
                    ));
                }
                Some(None) => {
                    self.drained_at[pool as usize] = Some((self.group.clone(), span.clone()))
                }
                None => {}
            }
        }
        Op::Drain {
            pool,
            body: self.ops(&d.ops, buffers, Nest::Drain),
        }
    }

    /// A touch of the thread's private buffer or of a shared one it must fit in.
    fn touch(&mut self, t: &TouchSpec, span: Range<usize>, buffers: &[BufferDef]) -> Op {
        let bytes = self.count(&t.bytes, span.clone(), "touch bytes");
        let stride = match &t.stride {
            Some(s) => self.count(s, span.clone(), "touch stride"),
            None => 64,
        };
        if stride == 0 {
            self.diags.push(
                self.loc
                    .span(span.clone(), "touch stride must be at least 1"),
            );
        }
        let buffer = match &t.buffer {
            None => BufferRef::Private,
            Some(name) if name.get_ref() == "private" => BufferRef::Private,
            Some(name) => {
                let i = self.resolve(name, Kind::Buffer);
                if let Some(b) = buffers.get(i as usize) {
                    if bytes > b.bytes {
                        self.diags.push(self.loc.span(
                            span.clone(),
                            format!(
                                "touch of {bytes} bytes is larger than buffer `{}` ({} bytes)",
                                b.name, b.bytes
                            ),
                        ));
                    }
                }
                BufferRef::Shared(i)
            }
        };
        Op::Touch {
            buffer,
            bytes,
            stride: stride.max(1),
            write: t.write,
        }
    }

    /// An I/O request to a device, its service time in microseconds.
    fn io(&mut self, io: &IoSpec) -> Op {
        let device = self.resolve(&io.device, Kind::Device);
        let us = self.count(
            io.service_us.get_ref(),
            io.service_us.span(),
            "io service_us",
        );
        // An hour per request is far beyond any device; a larger value
        // is a typo, and ns must not overflow.
        if us > 3_600_000_000 {
            self.diags.push(self.loc.span(
                io.service_us.span(),
                format!(
                    "io service_us {us} is over an hour; write the service time in microseconds"
                ),
            ));
        }
        Op::Io {
            device,
            service_ns: us.saturating_mul(1000),
        }
    }

    fn ops(&mut self, ops: &[Spanned<OpSpec>], buffers: &[BufferDef], nest: Nest) -> Vec<Op> {
        ops.iter().map(|op| self.op(op, buffers, nest)).collect()
    }

    fn op(&mut self, op: &Spanned<OpSpec>, buffers: &[BufferDef], nest: Nest) -> Op {
        let span = op.span();
        match op.get_ref() {
            OpSpec::Compute(c) => Op::Compute {
                iters: self.count(c.get_ref(), c.span(), "compute"),
            },
            OpSpec::Touch(t) => self.touch(t, span, buffers),
            OpSpec::SpinLock(n) => Op::SpinLock(self.resolve(n, Kind::SpinLock)),
            OpSpec::SpinUnlock(n) => Op::SpinUnlock(self.resolve(n, Kind::SpinLock)),
            OpSpec::Lock(n) => Op::MutexLock(self.resolve(n, Kind::Mutex)),
            OpSpec::Unlock(n) => Op::MutexUnlock(self.resolve(n, Kind::Mutex)),
            OpSpec::Barrier(n) => Op::Barrier(self.resolve(n, Kind::Barrier)),
            OpSpec::Push(n) => Op::Push(self.resolve(n, Kind::Queue)),
            OpSpec::Pop(n) => Op::Pop(self.resolve(n, Kind::Queue)),
            OpSpec::Atomic(a) => Op::Atomic {
                counter: self.resolve(&a.counter, Kind::Counter),
                rmw: a.rmw,
            },
            OpSpec::SleepUs(c) => Op::SleepNs(
                self.count(c.get_ref(), c.span(), "sleep_us")
                    .saturating_mul(1000),
            ),
            OpSpec::Yield(c) => Op::Yield(self.count(c.get_ref(), c.span(), "yield")),
            OpSpec::Shootdown(c) => {
                let pages = self.count_u32(c.get_ref(), c.span(), "shootdown pages");
                if pages == 0 {
                    self.diags
                        .push(self.loc.span(c.span(), "shootdown needs at least 1 page"));
                }
                Op::Shootdown { pages }
            }
            OpSpec::Io(io) => self.io(io),
            OpSpec::Repeat(r) => Op::Repeat {
                count: self.count(r.count.get_ref(), r.count.span(), "repeat count"),
                // A repeat inside a drain is still inside the drain.
                body: self.ops(
                    &r.ops,
                    buffers,
                    if nest == Nest::Drain {
                        Nest::Drain
                    } else {
                        Nest::Repeat
                    },
                ),
            },
            OpSpec::Drain(d) => self.drain(d, span, buffers, nest),
        }
    }

    /// Barriers reachable and complete; queue pushes and pops balanced.
    fn check_balance(&mut self, program: &Program) {
        // Per barrier: how many threads ever wait on it, and total arrivals.
        let nb = program.barriers.len();
        let nq = program.queues.len();
        let mut users = vec![0u64; nb];
        let mut arrivals = vec![0u64; nb];
        // Most times one thread reaches each barrier.
        let mut per_thread_max = vec![0u64; nb];
        for g in &program.groups {
            // Per thread: barriers are never inside drains, so fixed.
            let mut b = vec![0u64; nb];
            tally_barriers(&g.ops, 1, &mut b);
            for i in 0..nb {
                if b[i] > 0 {
                    per_thread_max[i] = per_thread_max[i].max(b[i]);
                    users[i] += g.threads as u64;
                    arrivals[i] = arrivals[i].saturating_add(b[i].saturating_mul(g.threads as u64));
                }
            }
        }
        // Totals over the run: a drain's body runs once per unit in all.
        let mut pushes = vec![0u64; nq];
        let mut pops = vec![0u64; nq];
        program.visit_totals(|_, op, times| match op {
            Op::Push(i) => pushes[*i as usize] = pushes[*i as usize].saturating_add(times),
            Op::Pop(i) => pops[*i as usize] = pops[*i as usize].saturating_add(times),
            _ => {}
        });
        for (i, (name, spec)) in self.spec.barriers.iter().enumerate() {
            let parties = program.barriers[i].parties as u64;
            if parties == 0 || arrivals[i] == 0 {
                continue;
            }
            if parties > users[i] {
                self.diags.push(self.loc.span(
                    spec.span(),
                    format!(
                        "barrier `{name}` needs {parties} parties but only {} thread(s) ever wait on it, so it can never open",
                        users[i]
                    ),
                ));
            } else if parties < users[i] && per_thread_max[i] > 1 {
                self.diags.push(self.loc.span(
                    spec.span(),
                    format!(
                        "barrier `{name}` has {parties} parties but {} threads wait on it, some more than once: threads that run ahead can fill generations among themselves and strand the rest; make parties equal the number of threads that wait on it",
                        users[i]
                    ),
                ));
            } else if !arrivals[i].is_multiple_of(parties) {
                self.diags.push(self.loc.span(
                    spec.span(),
                    format!(
                        "barrier `{name}` is reached {} times in all, not a multiple of its {parties} parties: the last generation can never open",
                        arrivals[i]
                    ),
                ));
            }
        }
        for (i, (name, spec)) in self.spec.queues.iter().enumerate() {
            if pushes[i] != pops[i] {
                let (more, fate) = if pushes[i] > pops[i] {
                    ("pushes", "producers will block forever on a full queue")
                } else {
                    ("pops", "consumers will block forever on an empty queue")
                };
                self.diags.push(self.loc.span(
                    spec.span(),
                    format!(
                        "queue `{name}` can never balance: {} pushes against {} pops in all (too many {more}; {fate})",
                        pushes[i], pops[i]
                    ),
                ));
            }
        }
    }
}

/// How often one thread reaches each barrier.
fn tally_barriers(ops: &[Op], times: u64, b: &mut [u64]) {
    for op in ops {
        match op {
            Op::Barrier(i) => b[*i as usize] = b[*i as usize].saturating_add(times),
            Op::Repeat { count, body } => tally_barriers(body, times.saturating_mul(*count), b),
            _ => {}
        }
    }
}
