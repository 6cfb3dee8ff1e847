//! The trace file: blocks written by smplab (header, exit) and by the
//! interposer (events, library end). Layout in docs/trace-format.md and
//! `preload/trace.h`; keep the three in step.

use crate::TraceError;
use std::io::Write;
use std::path::Path;

pub const MAGIC: &[u8; 8] = b"SMPLTRC1";
pub const VERSION: u32 = 1;

pub const BLOCK_HEADER: u32 = 1;
pub const BLOCK_EVENTS: u32 = 2;
pub const BLOCK_LIB_END: u32 = 3;
pub const BLOCK_EXIT: u32 = 4;

pub const EVENT_BYTES: usize = 48;

/// What a call was (`kind` byte of an event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    ThreadStart,
    ThreadExit,
    Create,
    Join,
    MutexLock,
    MutexTrylock,
    MutexTimedlock,
    MutexUnlock,
    CondWait,
    CondTimedwait,
    CondSignal,
    CondBroadcast,
    RwRdlock,
    RwWrlock,
    RwUnlock,
    BarrierInit,
    BarrierWait,
    SpinLock,
    SpinUnlock,
    SemInit,
    SemWait,
    SemPost,
}

impl Kind {
    const ALL: [Kind; 22] = [
        Kind::ThreadStart,
        Kind::ThreadExit,
        Kind::Create,
        Kind::Join,
        Kind::MutexLock,
        Kind::MutexTrylock,
        Kind::MutexTimedlock,
        Kind::MutexUnlock,
        Kind::CondWait,
        Kind::CondTimedwait,
        Kind::CondSignal,
        Kind::CondBroadcast,
        Kind::RwRdlock,
        Kind::RwWrlock,
        Kind::RwUnlock,
        Kind::BarrierInit,
        Kind::BarrierWait,
        Kind::SpinLock,
        Kind::SpinUnlock,
        Kind::SemInit,
        Kind::SemWait,
        Kind::SemPost,
    ];

    /// The byte in the file (1-based, as in trace.h).
    pub fn code(self) -> u8 {
        let index = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        // Kind::ALL has far fewer than 255 entries.
        u8::try_from(index).map_or(u8::MAX, |i| i + 1)
    }

    pub fn from_code(code: u8) -> Option<Kind> {
        Self::ALL.get((code as usize).checked_sub(1)?).copied()
    }
}

pub const F_CONTENDED: u8 = 1;
pub const F_FAILED: u8 = 2;
pub const F_TIMEOUT: u8 = 4;
pub const F_SERIAL: u8 = 8;
pub const F_TRY: u8 = 16;

/// One traced call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// CLOCK_MONOTONIC at the call's entry.
    pub t_ns: u64,
    /// Time inside the call when it blocked or spun (0 on the fast path).
    pub wait_ns: u64,
    /// The calling thread's CPU clock at entry.
    pub cpu_ns: u64,
    pub obj: u64,
    pub arg: u64,
    pub kind: Kind,
    pub flags: u8,
    pub ret: i32,
}

impl Event {
    pub fn contended(&self) -> bool {
        self.flags & F_CONTENDED != 0
    }
    pub fn failed(&self) -> bool {
        self.flags & F_FAILED != 0
    }
    pub fn timed_out(&self) -> bool {
        self.flags & F_TIMEOUT != 0
    }
    /// When the call returned.
    pub fn end_ns(&self) -> u64 {
        self.t_ns.saturating_add(self.wait_ns)
    }

    pub fn to_bytes(&self) -> [u8; EVENT_BYTES] {
        let mut b = [0u8; EVENT_BYTES];
        b[0..8].copy_from_slice(&self.t_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.wait_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.cpu_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.obj.to_le_bytes());
        b[32..40].copy_from_slice(&self.arg.to_le_bytes());
        b[40] = self.kind.code();
        b[41] = self.flags;
        b[44..48].copy_from_slice(&self.ret.to_le_bytes());
        b
    }
}

/// How the traced program ended, as smplab saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    Exited(i32),
    Signaled(i32),
}

/// A whole trace, read and checked.
#[derive(Debug, Clone)]
pub struct Trace {
    pub argv: Vec<String>,
    pub threads_hint: Option<u32>,
    /// CLOCK_MONOTONIC just before the program started.
    pub start_ns: u64,
    pub start_unix: u64,
    /// Events per thread (index = thread number), in call order.
    pub threads: Vec<Vec<Event>>,
    /// The interposer's own end record (the program left through exit()).
    pub lib_end: Option<u64>,
    pub ending: Option<Ending>,
    pub wall_ns: Option<u64>,
}

impl Trace {
    /// Complete: the program exited normally, the interposer flushed at exit,
    /// and smplab recorded the end.
    pub fn complete(&self) -> bool {
        self.lib_end.is_some() && matches!(self.ending, Some(Ending::Exited(_)))
    }

    pub fn event_count(&self) -> usize {
        self.threads.iter().map(Vec::len).sum()
    }

    /// The end of the traced run: the exit record, else the last event seen.
    pub fn end_ns(&self) -> u64 {
        let last = self
            .threads
            .iter()
            .flat_map(|t| t.iter().map(Event::end_ns))
            .max()
            .unwrap_or(self.start_ns);
        match self.wall_ns {
            Some(w) => (self.start_ns + w).max(last),
            None => last,
        }
    }
}

fn corrupt(path: &Path, offset: usize, why: impl Into<String>) -> TraceError {
    TraceError::Corrupt {
        path: path.display().to_string(),
        offset,
        why: why.into(),
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.b.get(self.at..end)?;
        self.at = end;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

fn parse_event(b: &[u8]) -> Option<Event> {
    let u64_at =
        |i: usize| -> Option<u64> { Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?)) };
    Some(Event {
        t_ns: u64_at(0)?,
        wait_ns: u64_at(8)?,
        cpu_ns: u64_at(16)?,
        obj: u64_at(24)?,
        arg: u64_at(32)?,
        kind: Kind::from_code(*b.get(40)?)?,
        flags: *b.get(41)?,
        ret: i32::from_le_bytes(b.get(44..48)?.try_into().ok()?),
    })
}

/// Read and check a trace file.
pub fn read(path: &Path) -> Result<Trace, TraceError> {
    let bytes = std::fs::read(path).map_err(|source| TraceError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse(path, &bytes)
}

/// Parse trace bytes (`path` only names the file in errors).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Trace, TraceError> {
    let mut c = Cursor { b: bytes, at: 0 };
    let mut trace = Trace {
        argv: Vec::new(),
        threads_hint: None,
        start_ns: 0,
        start_unix: 0,
        threads: Vec::new(),
        lib_end: None,
        ending: None,
        wall_ns: None,
    };
    // Say "not a trace" before any length check can say "truncated".
    if !bytes.is_empty()
        && (bytes.get(0..4) != Some(&BLOCK_HEADER.to_le_bytes()[..])
            || bytes.get(8..16).is_some_and(|m| m != &MAGIC[..]))
    {
        return Err(corrupt(
            path,
            0,
            "this is not a smplab trace (no header block)",
        ));
    }
    let mut first = true;
    while c.at < bytes.len() {
        let at = c.at;
        let (Some(ty), Some(len)) = (c.u32(), c.u32()) else {
            return Err(corrupt(path, at, "a block header is cut short"));
        };
        let Some(payload) = c.take(len as usize) else {
            return Err(corrupt(
                path,
                at,
                format!("a block of type {ty} claims {len} bytes but the file ends first"),
            ));
        };
        let mut p = Cursor { b: payload, at: 0 };
        if first && ty != BLOCK_HEADER {
            return Err(corrupt(
                path,
                0,
                "this is not a smplab trace (no header block)",
            ));
        }
        match ty {
            BLOCK_HEADER if first => {
                first = false;
                parse_header(path, at, &mut p, &mut trace)?;
            }
            BLOCK_HEADER => return Err(corrupt(path, at, "a second header block")),
            BLOCK_EVENTS => parse_events(path, at, payload, &mut p, &mut trace)?,
            BLOCK_LIB_END => {
                let short = || corrupt(path, at, "short end block");
                let _threads = p.u32().ok_or_else(short)?;
                let _pad = p.u32().ok_or_else(short)?;
                trace.lib_end = Some(p.u64().ok_or_else(short)?);
            }
            BLOCK_EXIT => parse_exit(path, at, &mut p, &mut trace)?,
            other => return Err(corrupt(path, at, format!("unknown block type {other}"))),
        }
    }
    if first {
        return Err(corrupt(path, 0, "the file is empty"));
    }
    // A thread's chunks are written in order, but the exit-time flush can race
    // with a thread's own; order by time to be safe (stable: same-time calls
    // keep their order).
    for t in &mut trace.threads {
        t.sort_by_key(|e| e.t_ns);
    }
    Ok(trace)
}

/// The header block's payload after its type: magic, version, thread hint,
/// start times and argv. `at` is the block's offset, for errors.
fn parse_header(
    path: &Path,
    at: usize,
    p: &mut Cursor<'_>,
    trace: &mut Trace,
) -> Result<(), TraceError> {
    if p.take(8) != Some(&MAGIC[..]) {
        return Err(corrupt(path, at, "this is not a smplab trace (bad magic)"));
    }
    let version = p.u32().ok_or_else(|| corrupt(path, at, "short header"))?;
    if version != VERSION {
        return Err(corrupt(
            path,
            at,
            format!("trace format version {version}; this smplab reads {VERSION}"),
        ));
    }
    let short = || corrupt(path, at, "short header");
    let hint = p.u32().ok_or_else(short)?;
    trace.threads_hint = (hint != 0).then_some(hint);
    trace.start_ns = p.u64().ok_or_else(short)?;
    trace.start_unix = p.u64().ok_or_else(short)?;
    let argc = p.u32().ok_or_else(short)?;
    for _ in 0..argc {
        let n = p.u32().ok_or_else(short)?;
        let s = p.take(n as usize).ok_or_else(short)?;
        trace.argv.push(String::from_utf8_lossy(s).into_owned());
    }
    Ok(())
}

/// One thread's chunk of events, appended to that thread's list.
fn parse_events(
    path: &Path,
    at: usize,
    payload: &[u8],
    p: &mut Cursor<'_>,
    trace: &mut Trace,
) -> Result<(), TraceError> {
    let short = || corrupt(path, at, "short events block");
    let thread = p.u32().ok_or_else(short)? as usize;
    let count = p.u32().ok_or_else(short)? as usize;
    if payload.len() != 8 + count * EVENT_BYTES {
        return Err(corrupt(
            path,
            at,
            format!(
                "an events block of {count} events has {} bytes",
                payload.len()
            ),
        ));
    }
    if thread > 1 << 20 {
        return Err(corrupt(
            path,
            at,
            format!("thread number {thread} is absurd"),
        ));
    }
    if trace.threads.len() <= thread {
        trace.threads.resize(thread + 1, Vec::new());
    }
    for i in 0..count {
        let off = 8 + i * EVENT_BYTES;
        let ev = parse_event(&payload[off..off + EVENT_BYTES])
            .ok_or_else(|| corrupt(path, at + 8 + off, format!("event {i} has an unknown kind")))?;
        trace.threads[thread].push(ev);
    }
    Ok(())
}

/// How the traced program ended, and its wall time.
fn parse_exit(
    path: &Path,
    at: usize,
    p: &mut Cursor<'_>,
    trace: &mut Trace,
) -> Result<(), TraceError> {
    let short = || corrupt(path, at, "short exit block");
    let how = p.u32().ok_or_else(short)?;
    let code = p.u32().ok_or_else(short)?.cast_signed();
    let _end = p.u64().ok_or_else(short)?;
    trace.wall_ns = Some(p.u64().ok_or_else(short)?);
    trace.ending = Some(match how {
        0 => Ending::Exited(code),
        1 => Ending::Signaled(code),
        _ => return Err(corrupt(path, at, format!("unknown exit kind {how}"))),
    });
    Ok(())
}

fn block(ty: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + payload.len());
    v.extend_from_slice(&ty.to_le_bytes());
    v.extend_from_slice(
        &u32::try_from(payload.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    v.extend_from_slice(payload);
    v
}

/// The header block smplab writes before starting the program.
pub fn header_block(
    argv: &[String],
    threads_hint: Option<u32>,
    start_ns: u64,
    start_unix: u64,
) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(MAGIC);
    p.extend_from_slice(&VERSION.to_le_bytes());
    p.extend_from_slice(&threads_hint.unwrap_or(0).to_le_bytes());
    p.extend_from_slice(&start_ns.to_le_bytes());
    p.extend_from_slice(&start_unix.to_le_bytes());
    p.extend_from_slice(&u32::try_from(argv.len()).unwrap_or(u32::MAX).to_le_bytes());
    for a in argv {
        p.extend_from_slice(&u32::try_from(a.len()).unwrap_or(u32::MAX).to_le_bytes());
        p.extend_from_slice(a.as_bytes());
    }
    block(BLOCK_HEADER, &p)
}

/// The exit block smplab appends after the program ended.
pub fn exit_block(ending: Ending, end_ns: u64, wall_ns: u64) -> Vec<u8> {
    let (how, code) = match ending {
        Ending::Exited(c) => (0u32, c),
        Ending::Signaled(s) => (1u32, s),
    };
    let mut p = Vec::new();
    p.extend_from_slice(&how.to_le_bytes());
    p.extend_from_slice(&code.cast_unsigned().to_le_bytes());
    p.extend_from_slice(&end_ns.to_le_bytes());
    p.extend_from_slice(&wall_ns.to_le_bytes());
    block(BLOCK_EXIT, &p)
}

/// An events block, as the interposer writes it (tests build traces with it).
pub fn events_block(thread: u32, events: &[Event]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&thread.to_le_bytes());
    p.extend_from_slice(
        &u32::try_from(events.len())
            .unwrap_or(u32::MAX)
            .to_le_bytes(),
    );
    for e in events {
        p.extend_from_slice(&e.to_bytes());
    }
    block(BLOCK_EVENTS, &p)
}

/// The interposer's end block.
pub fn lib_end_block(threads: u32, t_ns: u64) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&threads.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&t_ns.to_le_bytes());
    block(BLOCK_LIB_END, &p)
}

/// Append bytes to a file.
pub fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    f.write_all(bytes)
}
