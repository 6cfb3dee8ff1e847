//! VMM memory overhead: the process's resident set minus the guest pages that are
//! resident (guest RAM is an anonymous mapping, so it counts in VmRSS).

use vm_memory::{GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion, MemoryRegionAddress};

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
