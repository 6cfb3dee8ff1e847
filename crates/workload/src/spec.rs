//! The workload file format as written (TOML, deserialized with serde). Names and
//! values keep their source spans so validation can point at file:line:col.
//! `validate::instantiate` turns a [`WorkloadSpec`] into a [`crate::Program`].

use crate::expr::Count;
use serde::{Deserialize, Serialize};
use serde_spanned::Spanned;
use std::collections::BTreeMap;

/// A whole workload file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Which real program this imitates and how (built-in profiles fill it).
    #[serde(default)]
    pub imitates: String,
    /// `n` when the user gives no `--threads`.
    #[serde(default = "default_threads")]
    pub default_threads: u32,
    #[serde(default)]
    pub spin_locks: BTreeMap<String, Spanned<SpinLockSpec>>,
    #[serde(default)]
    pub mutexes: BTreeMap<String, Spanned<MutexSpec>>,
    #[serde(default)]
    pub barriers: BTreeMap<String, Spanned<BarrierSpec>>,
    #[serde(default)]
    pub queues: BTreeMap<String, Spanned<QueueSpec>>,
    #[serde(default)]
    pub counters: BTreeMap<String, Spanned<CounterSpec>>,
    #[serde(default)]
    pub buffers: BTreeMap<String, Spanned<BufferSpec>>,
    /// Block-like devices that `io` ops submit requests to.
    #[serde(default)]
    pub devices: BTreeMap<String, Spanned<DeviceSpec>>,
    /// Shared pools of work units that `drain` ops take from until empty.
    #[serde(default)]
    pub pools: BTreeMap<String, Spanned<PoolSpec>>,
    #[serde(default)]
    pub groups: Vec<Spanned<GroupSpec>>,
}

fn default_threads() -> u32 {
    4
}

/// Spin-lock algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SpinKind {
    /// test-and-set: every attempt is an atomic exchange.
    Tas,
    /// test-and-test-and-set: spin reading, exchange only when the lock looks free.
    #[default]
    Ttas,
    /// ticket lock: FIFO, one fetch-add per acquire, spin on `now_serving`.
    Ticket,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SpinLockSpec {
    #[serde(default)]
    pub kind: SpinKind,
    /// Execute PAUSE in the spin loop (visible to pause-loop exiting).
    #[serde(default = "yes")]
    pub pause: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MutexSpec {
    /// Spin this many iterations before blocking (adaptive mutex); 0 blocks at once.
    #[serde(default)]
    pub spin_limit: u32,
}

/// How a thread waits at a barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BarrierWait {
    /// Spin until the generation completes.
    Spin,
    /// Block (futex) until the generation completes.
    #[default]
    Block,
    /// Spin up to `spin_limit` iterations, then block (PARSEC streamcluster).
    SpinThenBlock,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BarrierSpec {
    pub parties: Count,
    #[serde(default)]
    pub wait: BarrierWait,
    #[serde(default)]
    pub spin_limit: u32,
    #[serde(default = "yes")]
    pub pause: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    pub capacity: Count,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CounterSpec {}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BufferSpec {
    pub bytes: Count,
}

/// A block-like device: requests are served `queue_depth` at a time, each
/// occupying one slot for its service time; more wait in the device's queue.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceSpec {
    /// Requests in service at once (device-side concurrency), default 1.
    #[serde(default)]
    pub queue_depth: Option<Count>,
}

/// A pool of `count` units of work, shared by the threads that drain it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    pub count: Spanned<Count>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GroupSpec {
    pub name: String,
    pub threads: Spanned<Count>,
    pub ops: Vec<Spanned<OpSpec>>,
}

/// Read-modify-write flavour of an atomic op.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Rmw {
    /// `lock xadd`.
    #[default]
    Add,
    /// compare-and-swap increment loop (`lock cmpxchg`), retried on conflict.
    Cas,
    /// `xchg`.
    Swap,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TouchSpec {
    pub bytes: Count,
    #[serde(default)]
    pub stride: Option<Count>,
    /// A shared buffer's name, or `private` (each thread its own).
    #[serde(default)]
    pub buffer: Option<Spanned<String>>,
    #[serde(default = "yes")]
    pub write: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AtomicSpec {
    pub counter: Spanned<String>,
    #[serde(default)]
    pub rmw: Rmw,
}

/// A synchronous device request: submit, then block until its completion
/// interrupt.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IoSpec {
    pub device: Spanned<String>,
    /// How long the device works on the request once it is in service.
    pub service_us: Spanned<Count>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RepeatSpec {
    pub count: Spanned<Count>,
    pub ops: Vec<Spanned<OpSpec>>,
}

/// Take units from a pool one at a time, running `ops` for each, until the
/// pool is empty.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DrainSpec {
    pub pool: Spanned<String>,
    pub ops: Vec<Spanned<OpSpec>>,
}

/// One operation, written as a one-key inline table: `{ compute = 1000 }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpSpec {
    /// Iterations of the compute kernel (see `compute`).
    Compute(Spanned<Count>),
    Touch(TouchSpec),
    SpinLock(Spanned<String>),
    SpinUnlock(Spanned<String>),
    /// Blocking mutex.
    Lock(Spanned<String>),
    Unlock(Spanned<String>),
    Barrier(Spanned<String>),
    Push(Spanned<String>),
    Pop(Spanned<String>),
    Atomic(AtomicSpec),
    SleepUs(Spanned<Count>),
    Yield(Spanned<Count>),
    /// Cross-CPU shootdown of this many pages.
    Shootdown(Spanned<Count>),
    /// Synchronous device I/O.
    Io(IoSpec),
    Repeat(RepeatSpec),
    /// Dynamic work distribution: claim units of a pool until it is empty.
    Drain(DrainSpec),
}

/// Names of the operations, for error messages and docs.
pub const OP_NAMES: &[&str] = &[
    "compute",
    "touch",
    "spin_lock",
    "spin_unlock",
    "lock",
    "unlock",
    "barrier",
    "push",
    "pop",
    "atomic",
    "sleep_us",
    "yield",
    "shootdown",
    "io",
    "repeat",
    "drain",
];
