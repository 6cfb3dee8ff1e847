//! Per-vCPU dirty rings (`KVM_CAP_DIRTY_LOG_RING`): how many pages a vCPU
//! wrote since its last sample, the spin detector's second signal ("writes
//! (almost) nothing new").
//!
//! Set-up order (KVM's rules): enable the ring on the VM before the first
//! vCPU exists ([`enable`]), turn on dirty logging on every memory slot, then
//! map each vCPU's ring ([`DirtyRing::map`]). A ring holds at most one entry
//! per guest page between resets, and KVM reports it full
//! (KVM_EXIT_DIRTY_RING_FULL) [`RESERVED_ENTRIES`] before its end at most, so
//! a ring with that many entries beyond the guest's pages can never fill,
//! however long a vCPU goes unsampled (the `spin` policy skips samples while
//! no sibling is preempted).

use crate::vm::Vm;
use kvm_bindings::{kvm_dirty_gfn, kvm_enable_cap, kvm_userspace_memory_region};
use kvm_ioctls::VcpuFd;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use vm_memory::{Address, GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};

const KVM_CAP_DIRTY_LOG_RING: u32 = 192;
const KVM_MEM_LOG_DIRTY_PAGES: u32 = 1;
const KVM_DIRTY_LOG_PAGE_OFFSET: i64 = 64;
/// `_IO(KVMIO, 0xc7)`.
const KVM_RESET_DIRTY_RINGS: libc::c_ulong = 0xaec7;
const KVM_DIRTY_GFN_F_DIRTY: u32 = 1;
const KVM_DIRTY_GFN_F_RESET: u32 = 2;
/// The largest ring this host takes (PLATFORM.md: up to 1 MiB per vCPU).
const MAX_RING_BYTES: u64 = 1 << 20;
const PAGE: u64 = 4096;
/// Entries KVM keeps back before it calls a ring full: its reserve (64) plus
/// the CPU's dirty-log buffer (512 for Intel's PML), rounded up.
const RESERVED_ENTRIES: u64 = 1024;

/// Enable dirty rings on `vm` (no vCPU may exist yet) and dirty logging on
/// its memory slots; the ring's entry count, or `None` when this host or
/// this guest size does not allow a ring that cannot fill.
pub fn enable(vm: &Vm) -> Option<u32> {
    let pages: u64 = vm.memory().iter().map(|r| r.len() / PAGE).sum();
    let bytes = ((pages + RESERVED_ENTRIES) * 16)
        .next_power_of_two()
        .max(PAGE);
    if bytes > MAX_RING_BYTES {
        return None;
    }
    let mut cap = kvm_enable_cap {
        cap: KVM_CAP_DIRTY_LOG_RING,
        ..Default::default()
    };
    cap.args[0] = bytes;
    vm.fd().enable_cap(&cap).ok()?;
    for (slot, region) in vm.memory().iter().enumerate() {
        let host = region.get_host_address(MemoryRegionAddress(0)).ok()?;
        let desc = kvm_userspace_memory_region {
            slot: u32::try_from(slot).ok()?,
            flags: KVM_MEM_LOG_DIRTY_PAGES,
            guest_phys_addr: region.start_addr().raw_value(),
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: the same slot, host range and size `Vm::new` registered
        // (a live mmap the `Vm` owns); only the flags change.
        unsafe { vm.fd().set_user_memory_region(desc) }.ok()?;
    }
    u32::try_from(bytes / 16).ok()
}

/// One vCPU's dirty ring, mapped from its fd.
pub struct DirtyRing {
    entries: *mut kvm_dirty_gfn,
    count: u32,
    fetch: u32,
    vm_fd: i32,
}

// SAFETY: the mapping belongs to this ring alone (one per vCPU, used only by
// that vCPU's thread); the pointer is plain data when moved between threads.
unsafe impl Send for DirtyRing {}

impl DirtyRing {
    /// Map the ring of `fd` (`count` entries, as [`enable`] returned).
    /// `vm` must outlive the ring (its fd resets the rings).
    pub fn map(fd: &VcpuFd, count: u32, vm: &Vm) -> Option<DirtyRing> {
        let len = usize::try_from(count).ok()? * std::mem::size_of::<kvm_dirty_gfn>();
        // SAFETY: maps the vCPU fd's dirty ring at KVM's documented offset;
        // the result is checked against MAP_FAILED and unmapped in Drop.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                KVM_DIRTY_LOG_PAGE_OFFSET * 4096,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        Some(DirtyRing {
            entries: ptr.cast(),
            count,
            fetch: 0,
            vm_fd: vm.fd().as_raw_fd(),
        })
    }

    /// Pages written since the last harvest; re-arms them (KVM then traps
    /// the next write to each again).
    pub fn harvest(&mut self) -> u64 {
        let mut pages = 0;
        loop {
            let index = usize::try_from(self.fetch % self.count).unwrap_or(0);
            // SAFETY: index < count, inside the mapping; `flags` is shared
            // with KVM, so it is accessed atomically.
            let flags = unsafe {
                AtomicU32::from_ptr(std::ptr::addr_of_mut!((*self.entries.add(index)).flags))
            };
            if flags.load(Ordering::Acquire) & KVM_DIRTY_GFN_F_DIRTY == 0 {
                break;
            }
            flags.store(KVM_DIRTY_GFN_F_RESET, Ordering::Release);
            self.fetch = self.fetch.wrapping_add(1);
            pages += 1;
        }
        if pages > 0 {
            // SAFETY: a VM ioctl without argument on the live VM fd (the VM
            // outlives its vCPUs, see `map`).
            unsafe {
                libc::ioctl(self.vm_fd, KVM_RESET_DIRTY_RINGS, 0);
            }
        }
        pages
    }
}

impl Drop for DirtyRing {
    fn drop(&mut self) {
        let len = self.count as usize * std::mem::size_of::<kvm_dirty_gfn>();
        // SAFETY: unmaps exactly the mapping `map` made; nothing uses it after.
        unsafe {
            libc::munmap(self.entries.cast(), len);
        }
    }
}
