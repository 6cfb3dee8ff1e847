//! The compact binary encoding of a [`Program`] handed to the guest kernel
//! (PVH module 0). Specified in docs/program-encoding.md; the guest's C decoder
//! and [`decode`] here follow that document. Little-endian, no padding, no names.

use crate::program::*;
use crate::spec::{BarrierWait, Rmw, SpinKind};

pub const MAGIC: &[u8; 4] = b"SMPW";
pub const VERSION: u16 = 1;

pub mod opcode {
    pub const COMPUTE: u8 = 0x01;
    pub const TOUCH: u8 = 0x02;
    pub const SPIN_LOCK: u8 = 0x03;
    pub const SPIN_UNLOCK: u8 = 0x04;
    pub const MUTEX_LOCK: u8 = 0x05;
    pub const MUTEX_UNLOCK: u8 = 0x06;
    pub const BARRIER: u8 = 0x07;
    pub const PUSH: u8 = 0x08;
    pub const POP: u8 = 0x09;
    pub const ATOMIC: u8 = 0x0a;
    pub const SLEEP: u8 = 0x0b;
    pub const YIELD: u8 = 0x0c;
    pub const SHOOTDOWN: u8 = 0x0d;
    pub const REPEAT: u8 = 0x0e;
    pub const IO: u8 = 0x0f;
    pub const DRAIN: u8 = 0x10;
}

/// Buffer index meaning "the thread's private buffer".
pub const PRIVATE_BUFFER: u32 = u32::MAX;

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
}

fn spin_kind(k: SpinKind) -> u8 {
    match k {
        SpinKind::Tas => 0,
        SpinKind::Ttas => 1,
        SpinKind::Ticket => 2,
    }
}

fn wait_kind(w: BarrierWait) -> u8 {
    match w {
        BarrierWait::Spin => 0,
        BarrierWait::Block => 1,
        BarrierWait::SpinThenBlock => 2,
    }
}

fn rmw_kind(r: Rmw) -> u8 {
    match r {
        Rmw::Add => 0,
        Rmw::Cas => 1,
        Rmw::Swap => 2,
    }
}

fn ops(w: &mut W, ops: &[Op]) {
    use opcode::*;
    for op in ops {
        match op {
            Op::Compute { iters } => {
                w.u8(COMPUTE);
                w.u64(*iters);
            }
            Op::Touch {
                buffer,
                bytes,
                stride,
                write,
            } => {
                w.u8(TOUCH);
                w.u32(match buffer {
                    BufferRef::Private => PRIVATE_BUFFER,
                    BufferRef::Shared(i) => *i,
                });
                w.u8(*write as u8);
                w.u64(*bytes);
                w.u64(*stride);
            }
            Op::SpinLock(i) => {
                w.u8(SPIN_LOCK);
                w.u32(*i);
            }
            Op::SpinUnlock(i) => {
                w.u8(SPIN_UNLOCK);
                w.u32(*i);
            }
            Op::MutexLock(i) => {
                w.u8(MUTEX_LOCK);
                w.u32(*i);
            }
            Op::MutexUnlock(i) => {
                w.u8(MUTEX_UNLOCK);
                w.u32(*i);
            }
            Op::Barrier(i) => {
                w.u8(BARRIER);
                w.u32(*i);
            }
            Op::Push(i) => {
                w.u8(PUSH);
                w.u32(*i);
            }
            Op::Pop(i) => {
                w.u8(POP);
                w.u32(*i);
            }
            Op::Atomic { counter, rmw } => {
                w.u8(ATOMIC);
                w.u32(*counter);
                w.u8(rmw_kind(*rmw));
            }
            Op::SleepNs(ns) => {
                w.u8(SLEEP);
                w.u64(*ns);
            }
            Op::Yield(k) => {
                w.u8(YIELD);
                w.u64(*k);
            }
            Op::Shootdown { pages } => {
                w.u8(SHOOTDOWN);
                w.u32(*pages);
            }
            Op::Io { device, service_ns } => {
                w.u8(IO);
                w.u32(*device);
                w.u64(*service_ns);
            }
            Op::Repeat { count, body } => {
                let mut inner = W(Vec::new());
                self::ops(&mut inner, body);
                w.u8(REPEAT);
                w.u64(*count);
                w.u32(u32::try_from(inner.0.len()).unwrap_or(u32::MAX));
                w.0.extend_from_slice(&inner.0);
            }
            Op::Drain { pool, body } => {
                let mut inner = W(Vec::new());
                self::ops(&mut inner, body);
                w.u8(DRAIN);
                w.u32(*pool);
                w.u32(u32::try_from(inner.0.len()).unwrap_or(u32::MAX));
                w.0.extend_from_slice(&inner.0);
            }
        }
    }
}

/// Encode a validated program for the guest.
pub fn encode(p: &Program) -> Vec<u8> {
    let mut w = W(Vec::new());
    w.0.extend_from_slice(MAGIC);
    w.u16(VERSION);
    w.u16(0);
    w.u32(p.n);
    w.u32(p.total_threads());
    for len in [
        p.spin_locks.len(),
        p.mutexes.len(),
        p.barriers.len(),
        p.queues.len(),
        p.counters.len(),
        p.buffers.len(),
        p.groups.len(),
    ] {
        w.u32(u32::try_from(len).unwrap_or(u32::MAX));
    }
    for l in &p.spin_locks {
        w.u8(spin_kind(l.kind));
        w.u8(l.pause as u8);
    }
    for m in &p.mutexes {
        w.u32(m.spin_limit);
    }
    for b in &p.barriers {
        w.u32(b.parties);
        w.u8(wait_kind(b.wait));
        w.u8(b.pause as u8);
        w.u32(b.spin_limit);
    }
    for q in &p.queues {
        w.u32(q.capacity);
    }
    for b in &p.buffers {
        w.u64(b.bytes);
    }
    for (gi, g) in p.groups.iter().enumerate() {
        let mut body = W(Vec::new());
        ops(&mut body, &g.ops);
        w.u32(g.threads);
        w.u64(p.private_bytes(gi));
        w.u32(u32::try_from(body.0.len()).unwrap_or(u32::MAX));
        w.0.extend_from_slice(&body.0);
    }
    // The device table trails the groups so a decoder that predates devices
    // still reads everything before it unchanged.
    w.u32(u32::try_from(p.devices.len()).unwrap_or(u32::MAX));
    for d in &p.devices {
        w.u32(d.queue_depth);
    }
    // The pool table trails the devices, for the same reason.
    w.u32(u32::try_from(p.pools.len()).unwrap_or(u32::MAX));
    for pool in &p.pools {
        w.u64(pool.units);
    }
    w.0
}

/// Errors decoding (only for malformed bytes; `encode` output always decodes).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("program encoding is truncated at byte {0}")]
    Truncated(usize),
    #[error("not a smplab program encoding (bad magic or version)")]
    BadHeader,
    #[error("unknown opcode {0:#04x} at byte {1}")]
    BadOpcode(u8, usize),
    #[error("bad enum value {0} at byte {1}")]
    BadValue(u8, usize),
}

struct R<'a> {
    b: &'a [u8],
    pos: usize,
}

impl R<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or(DecodeError::Truncated(self.pos))?;
        let s = self
            .b
            .get(self.pos..end)
            .ok_or(DecodeError::Truncated(self.pos))?;
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
}

fn decode_ops(b: &[u8]) -> Result<Vec<Op>, DecodeError> {
    use opcode::*;
    let mut r = R { b, pos: 0 };
    let mut out = Vec::new();
    while r.pos < b.len() {
        let at = r.pos;
        let op = match r.u8()? {
            COMPUTE => Op::Compute { iters: r.u64()? },
            TOUCH => {
                let buf = r.u32()?;
                let write = r.u8()? != 0;
                Op::Touch {
                    buffer: if buf == PRIVATE_BUFFER {
                        BufferRef::Private
                    } else {
                        BufferRef::Shared(buf)
                    },
                    write,
                    bytes: r.u64()?,
                    stride: r.u64()?,
                }
            }
            SPIN_LOCK => Op::SpinLock(r.u32()?),
            SPIN_UNLOCK => Op::SpinUnlock(r.u32()?),
            MUTEX_LOCK => Op::MutexLock(r.u32()?),
            MUTEX_UNLOCK => Op::MutexUnlock(r.u32()?),
            BARRIER => Op::Barrier(r.u32()?),
            PUSH => Op::Push(r.u32()?),
            POP => Op::Pop(r.u32()?),
            ATOMIC => {
                let counter = r.u32()?;
                let at = r.pos;
                let rmw = match r.u8()? {
                    0 => Rmw::Add,
                    1 => Rmw::Cas,
                    2 => Rmw::Swap,
                    v => return Err(DecodeError::BadValue(v, at)),
                };
                Op::Atomic { counter, rmw }
            }
            SLEEP => Op::SleepNs(r.u64()?),
            YIELD => Op::Yield(r.u64()?),
            SHOOTDOWN => Op::Shootdown { pages: r.u32()? },
            IO => Op::Io {
                device: r.u32()?,
                service_ns: r.u64()?,
            },
            REPEAT => {
                let count = r.u64()?;
                let len = r.u32()? as usize;
                let body = decode_ops(r.take(len)?)?;
                Op::Repeat { count, body }
            }
            DRAIN => {
                let pool = r.u32()?;
                let len = r.u32()? as usize;
                let body = decode_ops(r.take(len)?)?;
                Op::Drain { pool, body }
            }
            other => return Err(DecodeError::BadOpcode(other, at)),
        };
        out.push(op);
    }
    Ok(out)
}

/// Decode the thread groups of an encoding: `(threads, private_bytes, ops)` per
/// group. Used by tests to prove the encoding loses nothing executors need.
pub fn decode_groups(bytes: &[u8]) -> Result<Vec<(u32, u64, Vec<Op>)>, DecodeError> {
    decode_groups_and_devices(bytes).map(|(g, _)| g)
}

/// Thread groups as `decode_groups` gives them, and the device table (each
/// device's queue depth).
#[allow(clippy::type_complexity)]
pub fn decode_groups_and_devices(
    bytes: &[u8],
) -> Result<(Vec<(u32, u64, Vec<Op>)>, Vec<u32>), DecodeError> {
    decode_tables(bytes).map(|t| (t.groups, t.devices))
}

/// The parts of an encoding executors run from.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// `(threads, private_bytes, ops)` per group.
    pub groups: Vec<(u32, u64, Vec<Op>)>,
    /// Each device's queue depth.
    pub devices: Vec<u32>,
    /// Each pool's units.
    pub pools: Vec<u64>,
}

/// Decode groups, devices and pools.
pub fn decode_tables(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let mut r = R { b: bytes, pos: 0 };
    if r.take(4)? != MAGIC || r.u16()? != VERSION {
        return Err(DecodeError::BadHeader);
    }
    r.u16()?;
    r.u32()?;
    r.u32()?;
    let mut lens = [0usize; 7];
    for l in &mut lens {
        *l = r.u32()? as usize;
    }
    r.take(
        lens[0]
            .checked_mul(2)
            .ok_or(DecodeError::Truncated(r.pos))?,
    )?;
    r.take(
        lens[1]
            .checked_mul(4)
            .ok_or(DecodeError::Truncated(r.pos))?,
    )?;
    r.take(
        lens[2]
            .checked_mul(10)
            .ok_or(DecodeError::Truncated(r.pos))?,
    )?;
    r.take(
        lens[3]
            .checked_mul(4)
            .ok_or(DecodeError::Truncated(r.pos))?,
    )?;
    r.take(
        lens[5]
            .checked_mul(8)
            .ok_or(DecodeError::Truncated(r.pos))?,
    )?;
    let mut groups = Vec::new();
    for _ in 0..lens[6] {
        let threads = r.u32()?;
        let private = r.u64()?;
        let len = r.u32()? as usize;
        groups.push((threads, private, decode_ops(r.take(len)?)?));
    }
    let devices = (0..r.u32()?)
        .map(|_| r.u32())
        .collect::<Result<Vec<u32>, _>>()?;
    let pools = (0..r.u32()?)
        .map(|_| r.u64())
        .collect::<Result<Vec<u64>, _>>()?;
    Ok(Decoded {
        groups,
        devices,
        pools,
    })
}
