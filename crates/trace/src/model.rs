//! From a trace to a workload model: the flat per-thread ops of `tokens`,
//! loops found where the op sequence repeats (compute segments averaged over
//! the iterations, so total CPU time is kept), compute time converted to
//! iterations of the compute kernel at this host's measured speed, written as
//! workload TOML and checked with the workload validator.

use crate::analyze::Analysis;
use crate::format::Trace;
use crate::tokens::{self, QueueRole, SyncOp, Tokens};
use crate::TraceError;
use std::collections::HashMap;
use std::fmt::Write;

/// Longest loop body looked for, in nodes (a compute plus an op is two).
const MAX_PERIOD: usize = 96;
/// Compression passes (each pass can nest the loops of the previous one).
const PASSES: usize = 3;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Compute(f64),
    Op(SyncOp),
    Rep { count: u64, body: Vec<Node> },
}

/// Interned structural keys: computes are all alike (their length is
/// averaged), ops and loops are compared exactly.
#[derive(Default)]
struct Keys {
    ops: HashMap<SyncOp, u32>,
    reps: HashMap<(u64, Vec<u32>), u32>,
    next: u32,
}

impl Keys {
    fn key(&mut self, n: &Node) -> u32 {
        match n {
            Node::Compute(_) => 0,
            Node::Op(op) => {
                if let Some(k) = self.ops.get(op) {
                    return *k;
                }
                self.next += 1;
                self.ops.insert(op.clone(), self.next);
                self.next
            }
            Node::Rep { count, body } => {
                let inner: Vec<u32> = body.iter().map(|b| self.key(b)).collect();
                if let Some(k) = self.reps.get(&(*count, inner.clone())) {
                    return *k;
                }
                self.next += 1;
                self.reps.insert((*count, inner), self.next);
                self.next
            }
        }
    }
}

/// A loop body must take and release its own locks (the validator's rule).
fn balanced(body: &[Node]) -> bool {
    let mut held: Vec<&SyncOp> = Vec::new();
    for n in body {
        if let Node::Op(op) = n {
            match op {
                SyncOp::Lock(_) | SyncOp::SpinLock(_) => held.push(op),
                SyncOp::Unlock(name) | SyncOp::SpinUnlock(name) => {
                    let pos = held.iter().position(|h| match h {
                        SyncOp::Lock(x) | SyncOp::SpinLock(x) => x == name,
                        _ => false,
                    });
                    match pos {
                        Some(i) => {
                            held.remove(i);
                        }
                        None => return false,
                    }
                }
                _ => {}
            }
        }
    }
    held.is_empty()
}

/// Position-wise mean of `r` structurally equal copies of a body.
fn merge(copies: &[&[Node]]) -> Vec<Node> {
    let first = copies[0];
    (0..first.len())
        .map(|j| match &first[j] {
            Node::Compute(_) => {
                let sum: f64 = copies
                    .iter()
                    .map(|c| match c[j] {
                        Node::Compute(x) => x,
                        _ => 0.0,
                    })
                    .sum();
                Node::Compute(sum / copies.len() as f64)
            }
            Node::Op(op) => Node::Op(op.clone()),
            Node::Rep { count, .. } => {
                let bodies: Vec<&[Node]> = copies
                    .iter()
                    .map(|c| match &c[j] {
                        Node::Rep { body, .. } => body.as_slice(),
                        _ => &[],
                    })
                    .collect();
                Node::Rep {
                    count: *count,
                    body: merge(&bodies),
                }
            }
        })
        .collect()
}

/// One greedy pass: at each position take the period whose repetitions cover
/// the most nodes (at least two copies, balanced body), else move on.
fn compress(nodes: Vec<Node>, keys: &mut Keys) -> Vec<Node> {
    let k: Vec<u32> = nodes.iter().map(|n| keys.key(n)).collect();
    let n = k.len();
    let mut out = Vec::new();
    let mut i = 0;
    while i < n {
        let mut best: Option<(usize, usize)> = None;
        for p in 1..=MAX_PERIOD.min((n - i) / 2) {
            if k[i..i + p] != k[i + p..i + 2 * p] {
                continue;
            }
            let mut r = 2;
            while i + (r + 1) * p <= n && k[i + r * p..i + (r + 1) * p] == k[i..i + p] {
                r += 1;
            }
            // Only bodies with an op in them are worth a loop.
            let has_op = k[i..i + p].iter().any(|x| *x != 0);
            if has_op && best.is_none_or(|(bp, br)| p * r > bp * br) && balanced(&nodes[i..i + p]) {
                best = Some((p, r));
            }
        }
        match best {
            Some((p, r)) => {
                let copies: Vec<&[Node]> =
                    (0..r).map(|c| &nodes[i + c * p..i + (c + 1) * p]).collect();
                out.push(Node::Rep {
                    count: r as u64,
                    body: merge(&copies),
                });
                i += p * r;
            }
            None => {
                out.push(nodes[i].clone());
                i += 1;
            }
        }
    }
    out
}

/// Merge neighbouring computes (loop boundaries leave some).
fn tidy(nodes: Vec<Node>) -> Vec<Node> {
    let mut out: Vec<Node> = Vec::new();
    for n in nodes {
        match (out.last_mut(), n) {
            (Some(Node::Compute(a)), Node::Compute(b)) => *a += b,
            (_, Node::Rep { count, body }) => out.push(Node::Rep {
                count,
                body: tidy(body),
            }),
            (_, n) => out.push(n),
        }
    }
    out
}

/// Options for building a model.
#[derive(Debug, Clone)]
pub struct ModelOptions {
    /// The workload's name.
    pub name: String,
    /// Compute-kernel iterations per ns of traced CPU time (None: measure).
    pub iters_per_ns: Option<f64>,
}

/// Kernel iterations per ns of thread CPU time on this host: the best of a
/// few 4M-iteration runs timed with the thread CPU clock (immune to
/// preemption on a busy machine).
pub fn measure_iters_per_ns() -> f64 {
    let cpu = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes one timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
    };
    const ITERS: u64 = 1 << 22;
    let mut best: f64 = 0.0;
    let mut state = 1u64;
    for _ in 0..7 {
        let t0 = cpu();
        state = std::hint::black_box(smplab_workload::compute::compute(ITERS, state));
        let dt = cpu() - t0;
        if dt > 0.0 {
            best = best.max(ITERS as f64 / dt);
        }
    }
    if best > 0.0 {
        best
    } else {
        1.0
    }
}

/// The model: TOML text that validates, and how it was made.
#[derive(Debug, Clone)]
pub struct Model {
    pub toml: String,
    pub iters_per_ns: f64,
    pub tokens: Tokens,
    /// Ops per thread before and after loop finding.
    pub flat_ops: usize,
    pub compressed_ops: usize,
}

fn count_ops(nodes: &[Node]) -> usize {
    nodes
        .iter()
        .map(|n| match n {
            Node::Rep { body, .. } => 1 + count_ops(body),
            _ => 1,
        })
        .sum()
}

/// Build the workload model of a trace.
pub fn build(trace: &Trace, analysis: &Analysis, opts: &ModelOptions) -> Result<Model, TraceError> {
    let tokens = tokens::build(trace, &analysis.wakes);
    let ipn = opts.iters_per_ns.unwrap_or_else(measure_iters_per_ns);
    let mut keys = Keys::default();
    let mut programs = Vec::new();
    let mut flat_ops = 0;
    let mut compressed_ops = 0;
    for t in &tokens.threads {
        let mut nodes = Vec::with_capacity(t.items.len() * 2 + 1);
        for it in &t.items {
            nodes.push(Node::Compute(it.pre_cpu_ns as f64));
            nodes.push(Node::Op(it.op.clone()));
        }
        nodes.push(Node::Compute(t.tail_cpu_ns as f64));
        flat_ops += nodes.len();
        for _ in 0..PASSES {
            nodes = compress(tidy(nodes), &mut keys);
        }
        let nodes = tidy(nodes);
        compressed_ops += count_ops(&nodes);
        programs.push(nodes);
    }
    let toml = write_toml(trace, analysis, &tokens, &programs, ipn, &opts.name);
    let origin = format!("{} (generated)", opts.name);
    let source = smplab_workload::Source::from_text(&origin, &toml)
        .map_err(|e| TraceError::Model(e.to_string()))?;
    source
        .instantiate(None, 1.0)
        .map_err(|e| TraceError::Model(e.to_string()))?;
    Ok(Model {
        toml,
        iters_per_ns: ipn,
        tokens,
        flat_ops,
        compressed_ops,
    })
}

fn quote(s: &str) -> String {
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(q, "\\u{:04X}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

// Casts: f64 `as` u64 saturates and maps NaN to 0, the clamp wanted for an iteration count.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn write_ops(out: &mut String, nodes: &[Node], ipn: f64, indent: usize) {
    let pad = " ".repeat(indent);
    for n in nodes {
        match n {
            Node::Compute(ns) => {
                let iters = (ns * ipn).round() as u64;
                if iters > 0 {
                    let _ = writeln!(out, "{pad}{{ compute = {iters} }},");
                }
            }
            Node::Op(op) => {
                let (k, v) = match op {
                    SyncOp::Lock(m) => ("lock", quote(m)),
                    SyncOp::Unlock(m) => ("unlock", quote(m)),
                    SyncOp::SpinLock(m) => ("spin_lock", quote(m)),
                    SyncOp::SpinUnlock(m) => ("spin_unlock", quote(m)),
                    SyncOp::Barrier(b) => ("barrier", quote(b)),
                    SyncOp::Push(q) => ("push", quote(q)),
                    SyncOp::Pop(q) => ("pop", quote(q)),
                    SyncOp::SleepUs(us) => ("sleep_us", us.to_string()),
                };
                let _ = writeln!(out, "{pad}{{ {k} = {v} }},");
            }
            Node::Rep { count, body } => {
                let _ = writeln!(out, "{pad}{{ repeat = {{ count = {count}, ops = [");
                write_ops(out, body, ipn, indent + 2);
                let _ = writeln!(out, "{pad}] }} }},");
            }
        }
    }
}

fn write_toml(
    trace: &Trace,
    analysis: &Analysis,
    tokens: &Tokens,
    programs: &[Vec<Node>],
    ipn: f64,
    name: &str,
) -> String {
    let mut o = String::new();
    let threads = programs.len();
    let argv = trace.argv.join(" ");
    let _ = writeln!(
        o,
        "# Generated by `smplab trace model` from a trace of: {argv}"
    );
    let _ = writeln!(
        o,
        "# Compute: {ipn:.4} kernel iterations per ns of traced thread CPU time (this host).\n\
         # Each traced thread is one group; roles: main, poolK (threads sharing a start\n\
         # routine), stageK (a thread alone with its routine). Queues `cvC_tT` carry the\n\
         # wake-ups of condition variable C to thread T, `semS` a semaphore, `start_tT` /\n\
         # `join_tT` thread creation and join. docs/trace-format.md explains the mapping."
    );
    let _ = writeln!(o, "name = {}", quote(name));
    let _ =
        writeln!(
            o,
            "description = {}",
            quote(&format!(
            "Synchronization structure of `{argv}` ({threads} threads), traced by smplab trace{}",
            if trace.complete() { "" } else { " (INCOMPLETE trace)" }
        ))
        );
    let _ = writeln!(
        o,
        "imitates = {}",
        quote(&format!(
            "{argv}: its pthread calls and per-thread CPU time between them"
        ))
    );
    let _ = writeln!(
        o,
        "default_threads = {}",
        trace
            .threads_hint
            .unwrap_or(u32::try_from(threads).unwrap_or(u32::MAX))
            .max(1)
    );
    o.push('\n');
    for m in &tokens.mutexes {
        let _ = writeln!(o, "[mutexes.{m}]");
    }
    for s in &tokens.spins {
        let _ = writeln!(o, "[spin_locks.{s}]\nkind = \"ttas\"");
    }
    for (b, parties) in &tokens.barriers {
        let _ = writeln!(o, "[barriers.{b}]\nparties = {parties}");
    }
    for (q, (role, pushes)) in &tokens.queues {
        let what = match role {
            QueueRole::Cond => "condition-variable wake-ups",
            QueueRole::Sem => "semaphore",
            QueueRole::Start => "thread start",
            QueueRole::Join => "thread join",
        };
        let _ = writeln!(o, "[queues.{q}] # {what}\ncapacity = {}", (*pushes).max(1));
    }
    for (ti, nodes) in programs.iter().enumerate() {
        let role = analysis
            .threads
            .get(ti)
            .map(|t| t.role.as_str())
            .unwrap_or("thread");
        let _ = writeln!(
            o,
            "\n[[groups]]\nname = {}\nthreads = 1\nops = [",
            quote(&format!("{role}-t{ti}"))
        );
        write_ops(&mut o, nodes, ipn, 2);
        o.push_str("]\n");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flat(iterations: usize) -> Vec<Node> {
        let mut v = Vec::new();
        for i in 0..iterations {
            v.push(Node::Compute(100.0 + i as f64));
            v.push(Node::Op(SyncOp::Lock("m0".into())));
            v.push(Node::Compute(10.0));
            v.push(Node::Op(SyncOp::Unlock("m0".into())));
        }
        v.push(Node::Compute(5.0));
        v
    }

    fn total_compute(nodes: &[Node]) -> f64 {
        nodes
            .iter()
            .map(|n| match n {
                Node::Compute(x) => *x,
                Node::Rep { count, body } => *count as f64 * total_compute(body),
                Node::Op(_) => 0.0,
            })
            .sum()
    }

    #[test]
    fn a_repeated_critical_section_becomes_one_loop_keeping_cpu() {
        let nodes = flat(50);
        let before = total_compute(&nodes);
        let mut keys = Keys::default();
        let mut out = nodes;
        for _ in 0..PASSES {
            out = compress(tidy(out), &mut keys);
        }
        let out = tidy(out);
        assert!(out.len() <= 3, "{out:?}");
        assert!(out.iter().any(|n| matches!(n, Node::Rep { count: 50, .. })));
        assert!((total_compute(&out) - before).abs() < 1e-6);
    }

    #[test]
    fn a_loop_body_never_splits_a_critical_section() {
        // lock A, lock B, unlock A, unlock B repeated: rotations of the body
        // that leave a lock held at the end must not be chosen.
        let body = [
            SyncOp::Lock("a".into()),
            SyncOp::Unlock("a".into()),
            SyncOp::Push("q".into()),
        ];
        let mut nodes = vec![Node::Op(SyncOp::Pop("q".into()))];
        for _ in 0..10 {
            for op in &body {
                nodes.push(Node::Compute(1.0));
                nodes.push(Node::Op(op.clone()));
            }
        }
        let mut keys = Keys::default();
        let out = compress(nodes, &mut keys);
        fn check(nodes: &[Node]) {
            for n in nodes {
                if let Node::Rep { body, .. } = n {
                    assert!(balanced(body), "{body:?}");
                    check(body);
                }
            }
        }
        check(&out);
        assert!(out.iter().any(|n| matches!(n, Node::Rep { .. })));
    }
}
