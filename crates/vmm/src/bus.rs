//! The port-I/O and MMIO bus and its four synchronization modes.
//!
//! Every device lives in a [`DeviceSlot`]: an exclusive (not thread-safe) device sits
//! behind its own mutex and cannot be reached without it; a concurrent device is
//! shared as `Arc<dyn ConcurrentDevice>`. The mode decides the route of each entry:
//!
//! | mode       | exclusive device               | concurrent device        |
//! |------------|--------------------------------|--------------------------|
//! | `global`   | global lock, then device lock  | global lock              |
//! | `iothread` | queued to the I/O thread       | queued to the I/O thread |
//! | `hybrid`   | queued to the I/O thread       | bypass (vCPU thread)     |
//! | `fine`     | device lock on the vCPU thread | bypass (vCPU thread)     |
//!
//! Lock order: the global lock (if taken) before a device lock; the I/O thread
//! takes only device locks; no device handler takes a bus lock. So no cycle exists.
//!
//! Queued writes are posted: the vCPU resumes as soon as the request is in the
//! queue. Queued reads wait for their reply. The queue is one FIFO with one
//! consumer, so a read is served after every write enqueued before it (by any
//! thread), which is the read-after-posted-write rule of the thesis's I/O thread.

use crate::devices::{ConcurrentDevice, DeviceSlot, ExclusiveDevice};
use crate::io_thread::{poll_then_block, record, Defect, IoThread, Request};
pub use crate::io_thread::{POLL_BEFORE_BLOCK, QUEUE_CAPACITY};
use crate::rss::growing_histogram;
use hdrhistogram::Histogram;
use smplab_record::vmm::IoThreadStats;
use smplab_record::LatencyHistogram;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How device emulation is serialized: the run configuration's one type.
pub use smplab_record::config::settings::{SyncMode, UnknownSyncMode};

/// Port I/O or memory-mapped I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AddressSpace {
    Pio,
    Mmio,
}

/// Errors building a bus.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BusError {
    #[error("device {name} at {base:#x}+{len:#x} overlaps device {other}")]
    Overlap {
        name: String,
        other: String,
        base: u64,
        len: u64,
    },
    #[error("device {name} has an empty or wrapping address range {base:#x}+{len:#x}")]
    BadRange { name: String, base: u64, len: u64 },
}

/// The path an access takes, fixed per entry when the bus is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    GlobalLock,
    Queued,
    /// Only ever chosen for `DeviceSlot::Concurrent` (see [`Bus::route_for`]).
    Bypass,
    /// Fine mode, exclusive device: its own lock on the vCPU thread.
    DeviceLock,
}

struct Entry {
    space: AddressSpace,
    base: u64,
    len: u64,
    name: String,
    slot_index: usize,
    route: Route,
}

/// Collects devices before the mode is known.
#[derive(Default)]
pub struct BusBuilder {
    entries: Vec<(AddressSpace, u64, u64, String, usize)>,
    slots: Vec<DeviceSlot>,
    defect: Option<Defect>,
}

impl BusBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Build the bus with `defect` (tests of the stress harness only; not
    /// reachable outside this crate).
    pub(crate) fn with_defect(mut self, defect: Defect) -> Self {
        self.defect = Some(defect);
        self
    }

    /// Register a not-thread-safe device; returns the shared handle so the VMM can
    /// read the device's state after the run.
    pub fn add_exclusive<D: ExclusiveDevice + 'static>(
        &mut self,
        space: AddressSpace,
        base: u64,
        len: u64,
        name: &str,
        device: D,
    ) -> Result<Arc<Mutex<D>>, BusError> {
        let shared = Arc::new(Mutex::new(device));
        let slot: Arc<Mutex<dyn ExclusiveDevice>> = shared.clone();
        self.add_slot(space, base, len, name, DeviceSlot::Exclusive(slot))?;
        Ok(shared)
    }

    /// Register a thread-safe device (it may be handled on the vCPU threads).
    pub fn add_concurrent<D: ConcurrentDevice + 'static>(
        &mut self,
        space: AddressSpace,
        base: u64,
        len: u64,
        name: &str,
        device: Arc<D>,
    ) -> Result<(), BusError> {
        self.add_slot(space, base, len, name, DeviceSlot::Concurrent(device))
    }

    fn add_slot(
        &mut self,
        space: AddressSpace,
        base: u64,
        len: u64,
        name: &str,
        slot: DeviceSlot,
    ) -> Result<(), BusError> {
        let end = match base.checked_add(len) {
            Some(end) if len > 0 => end,
            _ => {
                return Err(BusError::BadRange {
                    name: name.to_string(),
                    base,
                    len,
                })
            }
        };
        for (s, b, l, other, _) in &self.entries {
            if *s == space && base < b + l && *b < end {
                return Err(BusError::Overlap {
                    name: name.to_string(),
                    other: other.clone(),
                    base,
                    len,
                });
            }
        }
        self.slots.push(slot);
        self.entries
            .push((space, base, len, name.to_string(), self.slots.len() - 1));
        Ok(())
    }

    /// Fix the routes for `mode` and start the I/O thread if the mode has one.
    pub fn build(self, mode: SyncMode, io_cpu: Option<usize>) -> Result<Arc<Bus>, std::io::Error> {
        let slots: Arc<[DeviceSlot]> = self.slots.into();
        let mut entries: Vec<Entry> = self
            .entries
            .into_iter()
            .map(|(space, base, len, name, slot_index)| Entry {
                route: Bus::route_for(mode, &slots[slot_index]),
                space,
                base,
                len,
                name,
                slot_index,
            })
            .collect();
        entries.sort_by_key(|e| (e.space, e.base));
        let io_thread = if mode.has_io_thread() {
            Some(IoThread::start(slots.clone(), io_cpu, self.defect)?)
        } else {
            None
        };
        Ok(Arc::new(Bus {
            mode,
            entries,
            slots,
            global_lock: Mutex::new(()),
            io_thread: Mutex::new(io_thread),
            unclaimed: AtomicU64::new(0),
        }))
    }
}

/// The bus shared by all vCPU threads.
pub struct Bus {
    mode: SyncMode,
    entries: Vec<Entry>,
    slots: Arc<[DeviceSlot]>,
    global_lock: Mutex<()>,
    io_thread: Mutex<Option<IoThread>>,
    unclaimed: AtomicU64,
}

impl Bus {
    /// The route an access to `slot` takes in `mode`. Bypass is only possible for
    /// a concurrent slot: the match below is the single place routes are chosen.
    pub fn route_for(mode: SyncMode, slot: &DeviceSlot) -> Route {
        match (mode, slot) {
            (SyncMode::Global, _) => Route::GlobalLock,
            (SyncMode::IoThread, _) => Route::Queued,
            (SyncMode::Hybrid, DeviceSlot::Exclusive(_)) => Route::Queued,
            (SyncMode::Fine, DeviceSlot::Exclusive(_)) => Route::DeviceLock,
            (SyncMode::Hybrid | SyncMode::Fine, DeviceSlot::Concurrent(_)) => Route::Bypass,
        }
    }

    pub fn mode(&self) -> SyncMode {
        self.mode
    }

    /// Names of the devices, indexed like the per-client latency histograms.
    pub fn entry_names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.name.clone()).collect()
    }

    /// The route of the device that claims `addr`, if any.
    pub fn route_of(&self, space: AddressSpace, addr: u64) -> Option<Route> {
        self.find(space, addr).map(|i| self.entries[i].route)
    }

    fn find(&self, space: AddressSpace, addr: u64) -> Option<usize> {
        // Few devices: a linear scan over a sorted, small vector beats a map here.
        self.entries
            .iter()
            .position(|e| e.space == space && addr >= e.base && addr - e.base < e.len)
    }

    /// Accesses to addresses no device claims, over all clients.
    pub fn unclaimed_accesses(&self) -> u64 {
        self.unclaimed.load(Ordering::Relaxed)
    }

    /// A per-thread handle for issuing accesses.
    pub fn client(self: &Arc<Self>) -> BusClient {
        let queue = self
            .io_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|io| io.sender.clone());
        BusClient {
            bus: self.clone(),
            queue,
            depth: self
                .io_thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .map(|io| io.depth.clone()),
            stats: ClientStats::new(self.entries.len()),
        }
    }

    /// Stop the I/O thread after it has served every queued request, and return
    /// its statistics. Call after all clients have finished.
    pub fn shutdown(&self) -> Option<IoThreadStats> {
        let io = self
            .io_thread
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        Some(io.stop())
    }
}

/// Per-client measurements, merged by the VMM after the run.
#[derive(Clone)]
pub struct ClientStats {
    /// Handling latency per bus entry (indexed like [`Bus::entry_names`]).
    pub latency: Vec<Histogram<u64>>,
    /// Wait for the global lock (global mode only).
    pub global_lock_wait: Histogram<u64>,
    pub unclaimed_reads: u64,
    pub unclaimed_writes: u64,
}

impl ClientStats {
    pub(crate) fn new(entries: usize) -> Self {
        ClientStats {
            latency: (0..entries).map(|_| growing_histogram()).collect(),
            global_lock_wait: growing_histogram(),
            unclaimed_reads: 0,
            unclaimed_writes: 0,
        }
    }

    /// Merge `other` into `self` (same bus).
    pub fn merge(&mut self, other: &ClientStats) {
        for (a, b) in self.latency.iter_mut().zip(&other.latency) {
            // Same bounds on both sides, so adding cannot fail.
            let _ = a.add(b);
        }
        let _ = self.global_lock_wait.add(&other.global_lock_wait);
        self.unclaimed_reads += other.unclaimed_reads;
        self.unclaimed_writes += other.unclaimed_writes;
    }

    /// Latency histograms keyed `device/mode`, leaving out devices never accessed.
    pub fn latency_by_device(
        &self,
        names: &[String],
        mode: SyncMode,
    ) -> BTreeMap<String, LatencyHistogram> {
        names
            .iter()
            .zip(&self.latency)
            .filter(|(_, h)| !h.is_empty())
            .map(|(name, h)| (format!("{name}/{mode}"), LatencyHistogram::from_hdr(h)))
            .collect()
    }
}

/// A guest access in either direction, with its data.
enum Access<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

impl Access<'_> {
    /// Carry the access out on `slot`, on this thread.
    fn on(self, slot: &DeviceSlot, offset: u64) {
        match self {
            Access::Read(data) => slot.read(offset, data),
            Access::Write(data) => slot.write(offset, data),
        }
    }
}

/// One thread's door to the bus (a vCPU thread, or a stress-test thread).
pub struct BusClient {
    bus: Arc<Bus>,
    queue: Option<SyncSender<Request>>,
    depth: Option<Arc<AtomicU64>>,
    pub stats: ClientStats,
}

impl BusClient {
    /// Guest read; unclaimed addresses read as all-ones. Returns false if unclaimed.
    pub fn read(&mut self, space: AddressSpace, addr: u64, data: &mut [u8]) -> bool {
        self.access(space, addr, Access::Read(data))
    }

    /// Guest write; writes to unclaimed addresses are dropped. Returns false if unclaimed.
    pub fn write(&mut self, space: AddressSpace, addr: u64, data: &[u8]) -> bool {
        self.access(space, addr, Access::Write(data))
    }

    /// The one path of both directions: lookup, unclaimed accounting, the
    /// entry's route and its latency. Only the device call and the queued
    /// form (a read waits for its reply, a write is posted) differ.
    fn access(&mut self, space: AddressSpace, addr: u64, access: Access<'_>) -> bool {
        let start = Instant::now();
        let Some(index) = self.bus.find(space, addr) else {
            match access {
                Access::Read(data) => {
                    data.fill(0xff);
                    self.stats.unclaimed_reads += 1;
                }
                Access::Write(_) => self.stats.unclaimed_writes += 1,
            }
            self.bus.unclaimed.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        let entry = &self.bus.entries[index];
        let offset = addr - entry.base;
        let slot = &self.bus.slots[entry.slot_index];
        match entry.route {
            Route::GlobalLock => {
                let guard = self
                    .bus
                    .global_lock
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                record(&mut self.stats.global_lock_wait, start.elapsed());
                access.on(slot, offset);
                drop(guard);
            }
            Route::Bypass | Route::DeviceLock => access.on(slot, offset),
            Route::Queued => {
                let slot_index = entry.slot_index;
                match access {
                    Access::Read(data) => self.queued_read(slot_index, offset, data),
                    Access::Write(data) => self.posted_write(slot_index, offset, data),
                }
            }
        }
        record(&mut self.stats.latency[index], start.elapsed());
        true
    }

    fn queued_read(&mut self, slot: usize, offset: u64, data: &mut [u8]) {
        let len = u8::try_from(data.len().min(8)).unwrap_or(8);
        // A fresh one-slot channel per read: if the I/O thread is gone, the reply
        // sender is dropped with the request and the read fails instead of hanging.
        let (reply, answer) = mpsc::sync_channel(1);
        let request = Request::Read {
            slot,
            offset,
            len,
            reply,
            enqueued: Instant::now(),
        };
        if !self.enqueue(request) {
            data.fill(0xff);
            return;
        }
        match poll_then_block(&answer) {
            Ok(bytes) => {
                let n = usize::from(len);
                data[..n].copy_from_slice(&bytes[..n]);
                data[n..].fill(0);
            }
            // The I/O thread is gone (VM shutting down): behave like an absent device.
            Err(_) => data.fill(0xff),
        }
    }

    fn posted_write(&mut self, slot: usize, offset: u64, data: &[u8]) {
        let mut bytes = [0u8; 8];
        let len = data.len().min(8);
        bytes[..len].copy_from_slice(&data[..len]);
        self.enqueue(Request::Write {
            slot,
            offset,
            len: u8::try_from(len).unwrap_or(8),
            data: bytes,
            enqueued: Instant::now(),
        });
    }

    fn enqueue(&self, request: Request) -> bool {
        let (Some(queue), Some(depth)) = (&self.queue, &self.depth) else {
            return false;
        };
        depth.fetch_add(1, Ordering::Relaxed);
        if queue.send(request).is_err() {
            depth.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devices::{ResultPort, WorkDevice};

    fn bus(mode: SyncMode) -> (Arc<Bus>, Arc<Mutex<ResultPort>>) {
        let mut b = BusBuilder::new();
        let result = b
            .add_exclusive(AddressSpace::Pio, 0x520, 1, "result", ResultPort::new())
            .unwrap();
        b.add_concurrent(
            AddressSpace::Pio,
            0x530,
            4,
            "work",
            Arc::new(WorkDevice::new(0)),
        )
        .unwrap();
        (b.build(mode, None).unwrap(), result)
    }

    #[test]
    fn routes_follow_the_table_and_only_concurrent_devices_bypass() {
        let expect = [
            (SyncMode::Global, Route::GlobalLock, Route::GlobalLock),
            (SyncMode::IoThread, Route::Queued, Route::Queued),
            (SyncMode::Hybrid, Route::Queued, Route::Bypass),
            (SyncMode::Fine, Route::DeviceLock, Route::Bypass),
        ];
        for (mode, exclusive, concurrent) in expect {
            let (bus, _) = bus(mode);
            assert_eq!(
                bus.route_of(AddressSpace::Pio, 0x520),
                Some(exclusive),
                "{mode}"
            );
            assert_eq!(
                bus.route_of(AddressSpace::Pio, 0x533),
                Some(concurrent),
                "{mode}"
            );
            assert_eq!(bus.route_of(AddressSpace::Pio, 0x534), None);
            assert_eq!(bus.route_of(AddressSpace::Mmio, 0x530), None);
            bus.shutdown();
        }
    }

    #[test]
    fn overlapping_and_empty_ranges_are_refused() {
        let mut b = BusBuilder::new();
        b.add_concurrent(
            AddressSpace::Pio,
            0x10,
            4,
            "a",
            Arc::new(WorkDevice::new(0)),
        )
        .unwrap();
        let overlap = b.add_concurrent(
            AddressSpace::Pio,
            0x13,
            4,
            "b",
            Arc::new(WorkDevice::new(0)),
        );
        assert!(matches!(overlap, Err(BusError::Overlap { .. })));
        let other_space = b.add_concurrent(
            AddressSpace::Mmio,
            0x10,
            4,
            "c",
            Arc::new(WorkDevice::new(0)),
        );
        assert!(other_space.is_ok());
        for (base, len) in [(0, 0), (u64::MAX, 2)] {
            let bad = b.add_concurrent(
                AddressSpace::Pio,
                base,
                len,
                "d",
                Arc::new(WorkDevice::new(0)),
            );
            assert!(matches!(bad, Err(BusError::BadRange { .. })));
        }
    }

    #[test]
    fn accesses_after_shutdown_fail_soft_instead_of_hanging() {
        let (bus, result) = bus(SyncMode::IoThread);
        let mut client = bus.client();
        assert!(client.write(AddressSpace::Pio, 0x520, b"a"));
        let stats = bus.shutdown().expect("io thread ran");
        assert_eq!((stats.requests, stats.posted_writes), (1, 1));
        let mut data = [0u8; 4];
        assert!(client.read(AddressSpace::Pio, 0x530, &mut data));
        assert_eq!(data, [0xff; 4]);
        client.write(AddressSpace::Pio, 0x520, b"b");
        assert_eq!(result.lock().unwrap().bytes(), b"a");
    }

    #[test]
    fn a_flood_of_posted_writes_is_bounded_and_complete() {
        let (bus, result) = bus(SyncMode::Hybrid);
        let mut client = bus.client();
        let n = QUEUE_CAPACITY * 4;
        for i in 0..n {
            client.write(AddressSpace::Pio, 0x520, &i.to_le_bytes()[..1]);
        }
        let mut data = [0u8; 1];
        client.read(AddressSpace::Pio, 0x520, &mut data);
        let stats = bus.shutdown().expect("io thread ran");
        // Depth counts the queue, the request being taken out and one blocked sender.
        assert!(
            stats.max_queue_depth <= QUEUE_CAPACITY as u64 + 2,
            "{stats:?}"
        );
        let stored = result.lock().unwrap().bytes().to_vec();
        assert_eq!(stored.len(), n);
        assert!(stored
            .iter()
            .enumerate()
            .all(|(i, &b)| b == i.to_le_bytes()[0]));
    }

    #[test]
    fn unclaimed_reads_and_writes_are_both_counted_in_every_mode() {
        for mode in SyncMode::ALL {
            let (bus, _) = bus(mode);
            let mut client = bus.client();
            assert!(!client.write(AddressSpace::Pio, 0x600, &[1]), "{mode}");
            assert_eq!(bus.unclaimed_accesses(), 1, "{mode}: an unclaimed write");
            let mut data = [0u8; 2];
            assert!(!client.read(AddressSpace::Pio, 0x600, &mut data));
            assert_eq!(data, [0xff; 2], "{mode}: unclaimed reads see all-ones");
            assert_eq!(bus.unclaimed_accesses(), 2, "{mode}");
            assert_eq!(
                (client.stats.unclaimed_reads, client.stats.unclaimed_writes),
                (1, 1),
                "{mode}"
            );
            // A claimed access is not counted.
            assert!(client.write(AddressSpace::Pio, 0x520, &[1]));
            assert_eq!(bus.unclaimed_accesses(), 2, "{mode}");
            bus.shutdown();
        }
    }

    #[test]
    fn sync_modes_parse_and_print() {
        for mode in SyncMode::ALL {
            assert_eq!(mode.as_str().parse::<SyncMode>(), Ok(mode));
            assert_eq!(mode.to_string(), mode.as_str());
        }
        assert_eq!("IO-Thread".parse::<SyncMode>(), Ok(SyncMode::IoThread));
        let err = "bkl".parse::<SyncMode>().unwrap_err();
        assert!(err.to_string().contains("global, iothread, hybrid or fine"));
    }
}
