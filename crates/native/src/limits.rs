//! How many more threads this host can give the executor, checked before any
//! thread starts. A Rust thread that cannot map its signal stack aborts the
//! whole process (status 134, "failed to set up alternative stack guard
//! page") instead of returning an error, so the limits that make thread
//! creation fail must be checked up front.

use std::io;

/// Memory mappings one worker thread adds: its stack and guard page, its
/// signal stack and guard page (set up by the Rust runtime), its private
/// buffer, with one to spare.
pub const MAPS_PER_THREAD: u64 = 6;
/// Memory a thread itself costs: the touched part of its user stack (the
/// 2 MiB reservation is address space only), its signal stack, its kernel
/// stack and task structures. Buffers are not counted here: a buffer that
/// cannot be mapped is its own error (`NativeError::Memory`).
const THREAD_BYTES: u64 = 96 * 1024;

/// The tightest of the host's limits on new threads, and which one it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadLimit {
    /// Most workload threads that can still be started.
    pub threads: u64,
    /// What sets the limit, in words a user can act on.
    pub source: String,
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Threads (scheduling entities) alive on the host: `/proc/loadavg` field 4,
/// `running/total`.
fn host_threads() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .1
        .parse()
        .ok()
}

fn own_line(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn rlimit_nproc() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer to a local.
    let r = unsafe { libc::getrlimit(libc::RLIMIT_NPROC, &mut lim) };
    (r == 0 && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kib.saturating_mul(1024))
}

fn map_count() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/maps")?;
    Ok(text.lines().count() as u64)
}

/// The host's limit on new worker threads. Unknown limits (a /proc file that
/// cannot be read) are left out.
pub fn thread_limit() -> ThreadLimit {
    let mut best = ThreadLimit {
        threads: u64::MAX,
        source: "no limit found".into(),
    };
    let mut consider = |threads: u64, source: String| {
        if threads < best.threads {
            best = ThreadLimit { threads, source };
        }
    };
    let own = own_line("Threads:").unwrap_or(1);
    let host = host_threads();
    if let Some(max) = rlimit_nproc() {
        consider(
            max.saturating_sub(own),
            format!("the per-user process limit RLIMIT_NPROC ({max}; `ulimit -u`)"),
        );
    }
    if let (Some(max), Some(live)) = (read_u64("/proc/sys/kernel/threads-max"), host) {
        consider(
            max.saturating_sub(live),
            format!("the kernel's threads-max ({max}, {live} threads alive)"),
        );
    }
    if let (Some(max), Some(live)) = (read_u64("/proc/sys/kernel/pid_max"), host) {
        consider(
            max.saturating_sub(live),
            format!("the kernel's pid_max ({max} thread ids, {live} in use)"),
        );
    }
    if let (Some(max), Ok(used)) = (read_u64("/proc/sys/vm/max_map_count"), map_count()) {
        consider(
            max.saturating_sub(used) / MAPS_PER_THREAD,
            format!(
                "vm.max_map_count ({max} memory mappings per process, {used} in use, {MAPS_PER_THREAD} per thread)"
            ),
        );
    }
    if let Some(avail) = mem_available_bytes() {
        consider(
            avail / THREAD_BYTES,
            format!(
                "available memory ({} MiB, {} KiB per thread)",
                avail >> 20,
                THREAD_BYTES >> 10
            ),
        );
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_limit_is_finite_and_allows_a_few_threads() {
        let l = thread_limit();
        assert!(l.threads > 8, "{l:?}");
        assert!(l.threads < u64::MAX, "a Linux host has limits: {l:?}");
        assert!(!l.source.is_empty());
    }
}
