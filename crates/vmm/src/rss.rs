//! VMM memory overhead: the process's resident set minus the guest pages that are
//! resident (guest RAM is an anonymous mapping, so it counts in VmRSS).

use hdrhistogram::Histogram;
use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

/// The longest latency the VMM's histograms keep apart (1 hour, the bound
/// of `smplab_record::histogram::new_histogram`); longer ones count as it.
pub const HISTOGRAM_HIGH_NS: u64 = 3_600_000_000_000;

/// A latency histogram with `new_histogram`'s precision (3 significant
/// digits) that starts small and grows with the largest value it records.
/// hdrhistogram zero-fills its whole count array when it is made: 270 KiB
/// for 1 ns..1 h, which for the per-vCPU, per-device latencies of the bus
/// was most of the VMM's resident memory (1.9 MiB per vCPU); grown to the
/// largest exit latency seen, one is 16–100 KiB. Record with values capped
/// at [`HISTOGRAM_HIGH_NS`].
pub fn growing_histogram() -> Histogram<u64> {
    // 3 significant digits is a valid precision (<= 5), so this cannot fail.
    Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"))
}

/// `VmRSS` of this process in bytes.
pub fn process_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident bytes of the guest memory mapping.
pub fn guest_resident_bytes(mem: &GuestMemoryMmap) -> Option<u64> {
    // SAFETY: sysconf has no memory effects.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = usize::try_from(page).ok().filter(|&p| p > 0)?;
    let mut resident = 0u64;
    for region in mem.iter() {
        let host = region.get_host_address(MemoryRegionAddress(0)).ok()?;
        let len = usize::try_from(region.len()).ok()?;
        let pages = len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        // SAFETY: [host, host+len) is one live, page-aligned mapping owned by `mem`
        // and `vec` has one byte per page of it, as mincore requires.
        let rc = unsafe { libc::mincore(host.cast(), len, vec.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        resident += vec.iter().filter(|&&b| b & 1 == 1).count() as u64 * page as u64;
    }
    Some(resident)
}

/// `(process RSS, resident guest bytes)`.
pub fn measure(mem: &GuestMemoryMmap) -> (Option<u64>, Option<u64>) {
    (process_rss_bytes(), guest_resident_bytes(mem))
}
