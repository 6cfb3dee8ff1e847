//! Thin wrappers over the Linux system calls the executor needs: futex
//! wait/wake, anonymous mappings, CPU affinity, per-thread clocks and rusage.
//! Everything unsafe about talking to the kernel lives here.

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU8};
use std::time::Duration;

/// Block while `*word == expected` (FUTEX_WAIT_PRIVATE), at most `timeout`.
/// Returns `true` if the thread actually went to sleep (woken, timed out or
/// interrupted), `false` if the kernel refused because the word had already
/// changed (EAGAIN): only the former counts as a block.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> bool {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, 4-byte aligned AtomicU32 for the duration of the
    // call (we hold a reference); the kernel only reads it. `ts_ptr` is null or
    // points to a timespec on this stack frame. The remaining arguments are
    // ignored by FUTEX_WAIT.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return true;
    }
    // EAGAIN: value changed before we slept. EINTR/ETIMEDOUT: we did sleep.
    io::Error::last_os_error().raw_os_error() != Some(libc::EAGAIN)
}

/// Wake up to `n` threads blocked on `word`; returns how many were woken.
pub fn futex_wake(word: &AtomicU32, n: u32) -> u32 {
    let n = i32::try_from(n).unwrap_or(i32::MAX);
    // SAFETY: `word` is a live AtomicU32; FUTEX_WAKE only uses the address as a
    // key and never dereferences memory we do not own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    if r > 0 {
        u32::try_from(r).unwrap_or(u32::MAX)
    } else {
        0
    }
}

/// An anonymous private read-write mapping, zero-filled by the kernel and
/// page-aligned (so touches and shootdowns line up with pages). Shared between
/// the threads of this process, which all live in the same address space.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is only accessed through `&[AtomicU8]` (see `bytes`) or
// through mprotect, both of which are safe to use from any thread at once.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared access goes through atomics only.
unsafe impl Sync for Mapping {}

pub const PAGE: usize = 4096;

impl Mapping {
    /// Map `len` bytes (rounded up to whole pages; 0 maps nothing).
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Ok(Mapping {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
            });
        }
        let rounded = len
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "mapping size overflows"))?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing;
        // no existing memory is affected. The result is checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                rounded,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: ptr.cast(),
            len: rounded,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as bytes any thread may read and write concurrently.
    pub fn bytes(&self) -> &[AtomicU8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr..ptr+len` is a live read-write mapping owned by `self` for
        // the lifetime of the returned borrow; AtomicU8 has the size and alignment
        // of u8 and every bit pattern (the kernel zero-fills) is valid.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<AtomicU8>(), self.len) }
    }

    /// Change the protection of the first `pages` pages (clamped to the mapping).
    /// Crate-private: a write racing with a removed write permission would
    /// kill the process, so only the shootdown op (whose region no op writes
    /// after set-up) may call it.
    pub(crate) fn protect(&self, pages: usize, prot: libc::c_int) -> io::Result<()> {
        let len = pages.saturating_mul(PAGE).min(self.len);
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range lies inside our own mapping. Callers only drop write
        // permission while no thread writes to this mapping (the shootdown region
        // is written once during set-up, before the start gate), so no access can
        // fault.
        let r = unsafe { libc::mprotect(self.ptr.cast(), len, prot) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly the region this value mapped; no borrows of
            // it can outlive `self`.
            unsafe {
                libc::munmap(self.ptr.cast(), self.len);
            }
        }
    }
}

/// The CPUs this process may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass the size of the set we own; pid 0 means this thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: cpu < CPU_SETSIZE, the bound CPU_ISSET requires.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Largest CPU number a cpu_set_t can name.
pub const MAX_CPUS: usize = libc::CPU_SETSIZE as usize;

/// Pin the calling thread to one CPU.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= MAX_CPUS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} is beyond the {MAX_CPUS} CPUs an affinity mask can name"),
        ));
    }
    // SAFETY: plain data, all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; the set is ours and sized correctly.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Pin the calling thread to a set of CPUs (it may run on any of them).
pub fn pin_current_thread_to(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: plain data, all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= MAX_CPUS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond the {MAX_CPUS} CPUs an affinity mask can name"),
            ));
        }
        // SAFETY: cpu < CPU_SETSIZE, checked above.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: pid 0 is the calling thread; the set is ours and sized correctly.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// CPU time consumed by the calling thread so far, in nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes one timespec we own; the clock id is a constant Linux supports.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    u64::try_from(ts.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(ts.tv_nsec).unwrap_or(0))
}

/// Voluntary and involuntary context switches of the calling thread so far.
pub fn thread_context_switches() -> (u64, u64) {
    // SAFETY: rusage is plain data; all-zero is valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: writes one rusage we own; RUSAGE_THREAD reports the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if r != 0 {
        return (0, 0);
    }
    (
        u64::try_from(ru.ru_nvcsw).unwrap_or(0),
        u64::try_from(ru.ru_nivcsw).unwrap_or(0),
    )
}

/// Give up the CPU once.
pub fn yield_now() {
    // SAFETY: sched_yield has no arguments and cannot fail on Linux.
    unsafe {
        libc::sched_yield();
    }
}

/// Sleep at least `ns` nanoseconds with nanosleep, resuming after signals.
pub fn sleep_ns(ns: u64) {
    let mut req = libc::timespec {
        tv_sec: libc::time_t::try_from(ns / 1_000_000_000).unwrap_or(libc::time_t::MAX),
        // Below 1e9, so it always fits.
        tv_nsec: libc::c_long::try_from(ns % 1_000_000_000).unwrap_or(0),
    };
    loop {
        let mut rem = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: both pointers are to timespecs on this stack frame.
        let r = unsafe { libc::nanosleep(&req, &mut rem) };
        if r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
        req = rem;
    }
}

/// The CPU the calling thread is running on right now.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes no arguments; -1 signals an error.
    let c = unsafe { libc::sched_getcpu() };
    usize::try_from(c).ok()
}

pub use smplab_record::window::monotonic_ns;
