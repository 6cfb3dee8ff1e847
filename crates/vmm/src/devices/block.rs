//! Block-like device for the workload's `io` ops, at guest-physical
//! [`BLOCK_MMIO_GPA`] (MMIO, so a request is one 8-byte write: port I/O moves
//! at most 4 bytes). The guest submits a request with one write; a device
//! thread completes it after its service time, honouring each device's queue
//! depth, queues the request's tag on the completion FIFO and raises the
//! device's interrupt line; the guest's interrupt handler reads tags off the
//! FIFO and wakes the waiting threads.
//!
//! The interrupt is raised through [`IrqLine`], one small trait, so the same
//! device drives the in-kernel irqchip ([`KvmIrqLine`]: KVM_IRQ_LINE on a GSI
//! routed by the guest-programmed IOAPIC redirection entry) or the user-space
//! IOAPIC (`user_irqchip::UserIrqchip::irq_line`). The line is high while
//! the FIFO holds a completion and low once the handler has drained it, so it
//! works either way the guest programs the pin: level-triggered (the IOAPIC
//! re-delivers after EOI if more came) or edge-triggered (each rising edge
//! is a batch the handler drains; the smplab guest's choice, docs/guest.md).
//!
//! Registers (little-endian):
//! - offset 0, write 8 bytes: submit `tag | device << 16 | service_ns << 24`
//!   (tag: the guest's thread number; service time up to 2^40 ns).
//! - offset 8, read 8 bytes: the next completion, `tag | more << 16 |
//!   completion_tsc << 24` (`more`: another completion waits behind this one;
//!   `completion_tsc`: the low 40 bits of the guest TSC at the moment the
//!   request's service time ran out), or all-ones if none. A 4-byte read
//!   returns the low half.
//!
//! Interrupt latency is measured in the guest: its handler reads the TSC at
//! entry and subtracts the completion TSC the device hands it (one clock, no
//! exit in between). The device's own `irq_latency` (completion → the
//! handler's read) additionally holds the stub's emulated instructions and the
//! read's exit.

use super::{fill_le, le_value, ConcurrentDevice};
use smplab_record::io::DeviceQueue;
use smplab_record::LatencyHistogram;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The guest-physical address the guest submits to and reads completions
/// from (in the 2 MiB page that also holds the IOAPIC; no RAM, no in-kernel
/// device: KVM's IOAPIC decodes only 0xfec00000-0xfec000ff).
pub const BLOCK_MMIO_GPA: u64 = 0xfed0_0000;
/// Bytes of MMIO space the device decodes.
pub const BLOCK_MMIO_LEN: u64 = 16;
/// The IOAPIC input pin the device drives (above the 16 ISA pins, so KVM's
/// default routing sends it to the IOAPIC only, never to the 8259).
pub const BLOCK_IRQ_PIN: u32 = 16;
/// What a completion read returns when the FIFO is empty.
pub const NO_COMPLETION: u64 = u64::MAX;
/// The `more` bit of a completion word.
pub const COMPLETION_MORE: u64 = 1 << 16;
/// Bits of the guest TSC a completion word carries (424 s at 2.6 GHz).
pub const COMPLETION_TSC_BITS: u32 = 40;

/// The guest's TSC as the host can compute it: the host TSC plus KVM's
/// offset for this VM (0 on PVM hosts, where the guest reads the raw host TSC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestTsc {
    /// Guest TSC minus host TSC, in cycles (wrapping).
    pub offset: u64,
    /// TSC cycles per second.
    pub hz: u64,
}

impl GuestTsc {
    /// The guest TSC `ago` before now.
    pub fn before_now(&self, ago: Duration) -> u64 {
        // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
        let host = unsafe { core::arch::x86_64::_rdtsc() };
        let cycles =
            u64::try_from(ago.as_nanos() * u128::from(self.hz) / 1_000_000_000).unwrap_or(u64::MAX);
        host.wrapping_add(self.offset).wrapping_sub(cycles)
    }
}

/// What `run_vm` needs to register a block device: one queue depth per
/// device of the program (each at least 1), and the host CPUs its completion
/// thread may run on (empty: not pinned).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockConfig {
    pub queue_depths: Vec<u32>,
    pub thread_cpus: Vec<usize>,
}

/// An interrupt line a device drives.
pub trait IrqLine: Send + Sync {
    /// Assert (`true`) or deassert the line.
    fn set_level(&self, level: bool);
    /// Level changes the interrupt controller refused so far.
    fn failures(&self) -> u64 {
        0
    }
}

/// An input pin of the in-kernel IOAPIC (`KVM_CREATE_IRQCHIP`), driven with
/// KVM_IRQ_LINE. It owns a duplicate of the VM fd, so the device thread can
/// hold it for as long as it runs. The guest's redirection entry for `gsi`
/// decides the vector and the destination vCPUs (its interrupt affinity).
pub struct KvmIrqLine {
    vm: kvm_ioctls::VmFd,
    gsi: u32,
    /// KVM_IRQ_LINE calls the kernel refused (the VM is gone, or no irqchip).
    failures: std::sync::atomic::AtomicU64,
}

impl KvmIrqLine {
    pub fn new(kvm: &kvm_ioctls::Kvm, vm: &kvm_ioctls::VmFd, gsi: u32) -> std::io::Result<Self> {
        use std::os::unix::io::AsRawFd;
        // SAFETY: dup() of a VM fd that `vm` keeps open for this call; the
        // result is a new descriptor nobody else owns.
        let fd = unsafe { libc::dup(vm.as_raw_fd()) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is that fresh duplicate of a VM fd; the returned VmFd
        // becomes its sole owner and closes it when dropped.
        let vm = unsafe { kvm.create_vmfd_from_rawfd(fd) }
            .map_err(|e| std::io::Error::from_raw_os_error(e.errno()))?;
        Ok(KvmIrqLine {
            vm,
            gsi,
            failures: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// KVM_IRQ_LINE calls that failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl IrqLine for KvmIrqLine {
    fn set_level(&self, level: bool) {
        if self.vm.set_irq_line(self.gsi, level).is_err() {
            self.failures
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn failures(&self) -> u64 {
        KvmIrqLine::failures(self)
    }
}

/// Completion counts and latencies of a [`BlockDevice`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BlockStats {
    pub requests: u64,
    /// Completion → the guest's handler reading the tag.
    pub irq_latency: LatencyHistogram,
    /// Submission → completion.
    pub device_latency: LatencyHistogram,
    /// Submissions naming a device that does not exist, or beyond
    /// [`MAX_OUTSTANDING`] requests not yet read back (ignored).
    pub bad_submissions: u64,
    /// Interrupt-line changes the irqchip refused (KVM_IRQ_LINE errors).
    pub line_failures: u64,
}

struct State {
    /// Per device: waiting requests (tag, service ns, submitted).
    devs: Vec<DeviceQueue<(u32, u64, Instant)>>,
    /// (due, tag, device, submitted)
    timers: BinaryHeap<Reverse<(Instant, u32, u8, Instant)>>,
    /// (tag, completion time, guest TSC at completion)
    done: VecDeque<(u32, Instant, u64)>,
    stop: bool,
    irq: hdrhistogram::Histogram<u64>,
    device: hdrhistogram::Histogram<u64>,
    requests: u64,
    bad: u64,
    /// Requests submitted and not yet read back by the guest.
    outstanding: usize,
}

/// Requests the device holds at most (waiting, in service, or completed
/// and not yet read): a guest that submits without reading, or with hours
/// of service time, cannot grow host memory past this. The smplab guest
/// has at most one request per thread outstanding.
pub const MAX_OUTSTANDING: usize = 4096;

/// The device; shared by the bus (guest accesses) and its completion thread.
pub struct BlockDevice {
    state: Mutex<State>,
    cv: Condvar,
    line: Arc<dyn IrqLine>,
    tsc: GuestTsc,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl BlockDevice {
    /// A device with one queue per entry of `queue_depths` (each at least 1).
    pub fn new(queue_depths: &[u32], line: Arc<dyn IrqLine>, tsc: GuestTsc) -> Arc<Self> {
        Arc::new(BlockDevice {
            state: Mutex::new(State {
                devs: queue_depths.iter().map(|&d| DeviceQueue::new(d)).collect(),
                timers: BinaryHeap::new(),
                done: VecDeque::new(),
                stop: false,
                irq: smplab_record::histogram::new_histogram(),
                device: smplab_record::histogram::new_histogram(),
                requests: 0,
                bad: 0,
                outstanding: 0,
            }),
            cv: Condvar::new(),
            line,
            tsc,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain bookkeeping stays consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn submit(&self, word: u64) {
        // Masks keep each field in its type's range.
        let tag = u32::try_from(word & 0xffff).unwrap_or(0);
        let dev = u8::try_from((word >> 16) & 0xff).unwrap_or(0);
        let service = Duration::from_nanos(word >> 24);
        let now = Instant::now();
        let mut st = self.lock();
        if st.outstanding >= MAX_OUTSTANDING {
            st.bad += 1;
            return;
        }
        let Some(d) = st.devs.get_mut(usize::from(dev)) else {
            st.bad += 1;
            return;
        };
        let started = d.submit((tag, ns(service), now)).is_some();
        st.outstanding += 1;
        if started {
            st.timers.push(Reverse((now + service, tag, dev, now)));
            drop(st);
            self.cv.notify_one();
        }
    }

    fn pop_completion(&self) -> u64 {
        let now = Instant::now();
        let mut st = self.lock();
        match st.done.pop_front() {
            Some((tag, due, tsc)) => {
                st.outstanding = st.outstanding.saturating_sub(1);
                st.irq
                    .saturating_record(ns(now.saturating_duration_since(due)));
                let more = if st.done.is_empty() {
                    self.line.set_level(false);
                    0
                } else {
                    COMPLETION_MORE
                };
                let tsc = tsc & ((1 << COMPLETION_TSC_BITS) - 1);
                u64::from(tag & 0xffff) | more | tsc << 24
            }
            None => NO_COMPLETION,
        }
    }

    /// The completion thread's loop; returns after [`BlockDevice::stop`].
    pub fn serve(&self) {
        // Timer slack would add up to 50 µs to every completion (as natively:
        // smplab-native's device stand-in does the same).
        // SAFETY: PR_SET_TIMERSLACK takes one integer argument and only
        // changes the calling thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let Some(&Reverse((due, tag, dev, submitted))) = st.timers.peek() else {
                st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let now = Instant::now();
            if now < due {
                st = self
                    .cv
                    .wait_timeout(st, due - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
                continue;
            }
            st.timers.pop();
            st.requests += 1;
            st.device
                .saturating_record(ns(due.saturating_duration_since(submitted)));
            if let Some((next, service, sub)) = st.devs[usize::from(dev)].complete() {
                // The slot frees at `due` on the device's own clock.
                let start = due.max(sub);
                st.timers.push(Reverse((
                    start + Duration::from_nanos(service),
                    next,
                    dev,
                    sub,
                )));
            }
            let was_empty = st.done.is_empty();
            let tsc = self.tsc.before_now(now.saturating_duration_since(due));
            st.done.push_back((tag, due, tsc));
            if was_empty {
                self.line.set_level(true);
            }
        }
    }

    /// Start the completion thread, pinned to `cpus` (empty: not pinned).
    /// A pinning failure is reported by [`BlockDevice::pin_error`] after the
    /// run; the thread then serves unpinned.
    pub fn spawn(
        self: &Arc<Self>,
        cpus: Vec<usize>,
    ) -> std::io::Result<std::thread::JoinHandle<Option<std::io::Error>>> {
        let me = Arc::clone(self);
        let filter = crate::seccomp::ThreadFilter::for_spawn(crate::seccomp::ThreadKind::Block);
        std::thread::Builder::new()
            .name("smplab-blk".into())
            .spawn(move || {
                let pinned = if cpus.is_empty() {
                    None
                } else {
                    crate::placement::pin_current_thread(&cpus).err()
                };
                filter.install_or_exit(0);
                me.serve();
                pinned
            })
    }

    /// Make the completion thread return.
    pub fn stop(&self) {
        self.lock().stop = true;
        self.cv.notify_all();
    }

    pub fn stats(&self) -> BlockStats {
        let st = self.lock();
        BlockStats {
            requests: st.requests,
            irq_latency: LatencyHistogram::from_hdr(&st.irq),
            device_latency: LatencyHistogram::from_hdr(&st.device),
            bad_submissions: st.bad,
            line_failures: self.line.failures(),
        }
    }
}

impl ConcurrentDevice for BlockDevice {
    fn read(&self, offset: u64, data: &mut [u8]) {
        let value = if offset == 8 {
            self.pop_completion()
        } else {
            NO_COMPLETION
        };
        fill_le(data, value, 0);
    }

    fn write(&self, offset: u64, data: &[u8]) {
        if offset == 0 {
            self.submit(le_value(data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    #[derive(Default)]
    struct Line {
        level: AtomicBool,
        raises: AtomicU32,
    }
    impl IrqLine for Line {
        fn set_level(&self, level: bool) {
            if level && !self.level.swap(true, Ordering::SeqCst) {
                self.raises.fetch_add(1, Ordering::SeqCst);
            }
            if !level {
                self.level.store(false, Ordering::SeqCst);
            }
        }
    }

    fn word(tag: u64, dev: u64, service_ns: u64) -> [u8; 8] {
        (tag | dev << 16 | service_ns << 24).to_le_bytes()
    }

    fn read_word(d: &BlockDevice) -> u64 {
        let mut b = [0u8; 8];
        d.read(8, &mut b);
        u64::from_le_bytes(b)
    }

    fn tsc() -> GuestTsc {
        GuestTsc {
            offset: 0,
            hz: 1_000_000_000,
        }
    }

    #[test]
    fn completes_requests_raises_the_line_and_drains() {
        let line = Arc::new(Line::default());
        let dev = BlockDevice::new(&[1, 4], line.clone(), tsc());
        let h = dev.spawn(Vec::new()).unwrap();
        dev.write(0, &word(7, 0, 200_000));
        dev.write(0, &word(8, 0, 200_000));
        dev.write(0, &word(9, 1, 0));
        dev.write(0, &word(1, 5, 0)); // no such device
        let mut tags = Vec::new();
        while tags.len() < 3 {
            while !line.level.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            loop {
                let w = read_word(&dev);
                if w == NO_COMPLETION {
                    break;
                }
                tags.push(w & 0xffff);
                // The completion's TSC (here the host's, 1 GHz) is recent.
                let mask = (1u64 << COMPLETION_TSC_BITS) - 1;
                let age = (tsc().before_now(Duration::ZERO) & mask).wrapping_sub(w >> 24) & mask;
                assert!(age < 60 * 4_000_000_000, "completion TSC {:#x}", w >> 24);
                // The `more` bit says whether the FIFO still holds one.
                if w & COMPLETION_MORE == 0 {
                    assert_eq!(read_word(&dev), NO_COMPLETION);
                    break;
                }
            }
        }
        dev.stop();
        assert!(h.join().unwrap().is_none());
        // One slot on device 0: 8 is served after 7, never beside it.
        let pos = |t| tags.iter().position(|&x| x == t).unwrap();
        assert!(pos(7) < pos(8), "{tags:?}");
        tags.sort_unstable();
        assert_eq!(tags, [7, 8, 9]);
        assert!(!line.level.load(Ordering::SeqCst), "drained: line low");
        let s = dev.stats();
        assert_eq!((s.requests, s.bad_submissions), (3, 1));
        assert_eq!(s.irq_latency.count, 3);
        // Each request spends at least its service time in the device.
        assert!(s.device_latency.max_ns >= 199_000, "{s:?}");
    }

    #[test]
    fn a_guest_cannot_queue_more_than_max_outstanding_requests() {
        let dev = BlockDevice::new(&[1], Arc::new(Line::default()), tsc());
        // An hour of service each: none completes while the test runs.
        for tag in 0..MAX_OUTSTANDING + 100 {
            dev.write(0, &word(tag as u64 % 0xffff, 0, 3_600_000_000_000));
        }
        let st = dev.lock();
        assert_eq!(st.outstanding, MAX_OUTSTANDING);
        assert_eq!(st.bad, 100);
    }

    #[test]
    fn empty_fifo_reads_no_completion() {
        let dev = BlockDevice::new(&[1], Arc::new(Line::default()), tsc());
        assert_eq!(read_word(&dev), NO_COMPLETION);
        let mut other = [0u8; 4];
        dev.read(0, &mut other);
        assert_eq!(u32::from_le_bytes(other), u32::MAX);
    }
}
