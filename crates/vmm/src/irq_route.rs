//! Run-time interrupt routing of the smplab guest's block device (the
//! guest-level interrupt affinity of Kulkarni & Kulkarni, *Benchmarking
//! Multiprocessing Parameters in a Virtualized Multi-Core Environment*, §2.2.3,
//! changed while the VM runs): the routing
//! page at guest-physical `0x9c00`–`0x9c3f` (docs/guest-abi.md, "The
//! routing page"). The host writes a vCPU mask; the guest's block-device
//! handler reads it at every interrupt and, before its EOI, points the
//! IOAPIC entry at the next vCPU of the mask (ascending, wrapping), so the
//! interrupt after the one being handled goes there. 0 means the boot-time
//! `io_irq=` list. The guest writes back the destination it programmed last
//! and its count of handler entries.
//!
//! The page is ordinary guest RAM and the IOAPIC write is the guest's own,
//! so the same routing works with KVM's in-kernel irqchip and with
//! smplab-vmm's user-space one.

use smplab_record::config::IrqAffinity;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Guest-physical address of the routing page.
pub const IRQ_ROUTE_ADDR: u64 = 0x9c00;
/// First address after it (0x9c40 onwards is not the routing page's).
pub const IRQ_ROUTE_END: u64 = 0x9c40;
/// The host's vCPU mask (bit i = vCPU i; 0 = the boot-time list).
const MASK: u64 = IRQ_ROUTE_ADDR;
/// The guest's last programmed destination, vCPU + 1 (0: none yet).
const DEST: u64 = IRQ_ROUTE_ADDR + 8;
/// The guest's count of block-device handler entries.
const COUNT: u64 = IRQ_ROUTE_ADDR + 16;

/// Why the routing could not be set or read.
#[derive(Debug, thiserror::Error)]
pub enum IrqRouteError {
    #[error("the VM's memory does not exist yet: set the interrupt routing once the VM runs")]
    NotRunning,
    #[error("cannot access the routing page at guest-physical {IRQ_ROUTE_ADDR:#x}: {0}")]
    Memory(#[source] vm_memory::GuestMemoryError),
}

/// A handle on one VM's routing page: make it before the VM runs, give it
/// to [`crate::VmConfig::irq_route`] (or get one from
/// [`crate::host::HostScheduler::irq_route`]), and set the routing from any
/// thread while the VM runs. Cheap to clone; all clones name the same VM.
/// It keeps the guest memory mapped until the last clone is dropped.
#[derive(Debug, Clone, Default)]
pub struct IrqRoute {
    memory: Arc<Mutex<Option<GuestMemoryMmap>>>,
}

/// Two handles are equal when they name the same VM.
impl PartialEq for IrqRoute {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.memory, &other.memory)
    }
}
impl Eq for IrqRoute {}

impl IrqRoute {
    /// A handle not bound to a VM yet.
    pub fn new() -> IrqRoute {
        IrqRoute::default()
    }

    fn lock(&self) -> MutexGuard<'_, Option<GuestMemoryMmap>> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bind to the VM whose memory this is (`run_vm`, before the vCPUs run).
    pub(crate) fn bind(&self, memory: GuestMemoryMmap) {
        *self.lock() = Some(memory);
    }

    /// Whether a VM's memory is bound.
    pub fn is_bound(&self) -> bool {
        self.lock().is_some()
    }

    /// Route the block device's interrupts to the vCPUs of `mask` in turn
    /// (bit i = vCPU i); 0 returns to the boot-time `io_irq=` list. Bits of
    /// vCPUs the guest did not bring up are ignored by the guest. Takes
    /// effect from the interrupt after the next one the guest handles.
    pub fn set_mask(&self, mask: u64) -> Result<(), IrqRouteError> {
        let guard = self.lock();
        let memory = guard.as_ref().ok_or(IrqRouteError::NotRunning)?;
        memory
            .store(mask, GuestAddress(MASK), Ordering::Release)
            .map_err(IrqRouteError::Memory)
    }

    /// The mask the host set last (0: the boot-time list).
    pub fn mask(&self) -> Result<u64, IrqRouteError> {
        self.load(MASK)
    }

    /// The vCPU the guest last pointed the IOAPIC entry at (`None` before
    /// its first programming: no `io` ops, or not booted yet).
    pub fn destination(&self) -> Result<Option<u32>, IrqRouteError> {
        let dest = self.load(DEST)?;
        Ok(dest
            .checked_sub(1)
            .and_then(|d| u32::try_from(d).ok())
            .filter(|&d| d < 64))
    }

    /// Block-device interrupts the guest has handled so far (all vCPUs,
    /// with those that found no completion).
    pub fn interrupts(&self) -> Result<u64, IrqRouteError> {
        self.load(COUNT)
    }

    fn load(&self, addr: u64) -> Result<u64, IrqRouteError> {
        let guard = self.lock();
        let memory = guard.as_ref().ok_or(IrqRouteError::NotRunning)?;
        memory
            .load(GuestAddress(addr), Ordering::Acquire)
            .map_err(IrqRouteError::Memory)
    }
}

/// The routing mask of a fixed interrupt affinity on a VM of `vcpus` vCPUs:
/// its vCPUs (list order and repeats are not kept: the guest takes the
/// mask's vCPUs in ascending order), every vCPU for `balanced`. `None` for
/// `running`, which only a host scheduler that knows who runs can maintain
/// ([`crate::host::HostScheduler::set_irq_affinity`]), and for a set naming
/// no vCPU below `vcpus` or 64.
pub fn mask_of(affinity: &IrqAffinity, vcpus: u32) -> Option<u64> {
    let vcpus = vcpus.min(64);
    let all = if vcpus >= 64 {
        u64::MAX
    } else {
        (1u64 << vcpus) - 1
    };
    let mask = match affinity {
        IrqAffinity::Running => return None,
        IrqAffinity::Balanced => all,
        IrqAffinity::Vcpus(set) => set
            .iter()
            .filter(|&&v| v < vcpus)
            .fold(0u64, |m, &v| m | (1u64 << v)),
    };
    (mask != 0).then_some(mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_of_affinities() {
        assert_eq!(mask_of(&IrqAffinity::default(), 2), Some(1));
        assert_eq!(mask_of(&IrqAffinity::Balanced, 3), Some(0b111));
        assert_eq!(mask_of(&IrqAffinity::Balanced, 64), Some(u64::MAX));
        assert_eq!(mask_of(&IrqAffinity::Vcpus(vec![2, 0, 2]), 3), Some(0b101));
        assert_eq!(mask_of(&IrqAffinity::Vcpus(vec![5]), 2), None);
        assert_eq!(mask_of(&IrqAffinity::Running, 2), None);
    }

    #[test]
    fn an_unbound_handle_refuses_and_a_bound_one_writes_guest_memory() {
        let route = IrqRoute::new();
        assert!(matches!(route.set_mask(1), Err(IrqRouteError::NotRunning)));
        let memory =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
        route.clone().bind(memory.clone());
        assert!(route.is_bound());
        route.set_mask(0b10).unwrap();
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x9c00)).unwrap(), 2);
        assert_eq!(route.mask().unwrap(), 2);
        assert_eq!(route.destination().unwrap(), None);
        memory.write_obj(2u64, GuestAddress(0x9c08)).unwrap();
        memory.write_obj(7u64, GuestAddress(0x9c10)).unwrap();
        assert_eq!(route.destination().unwrap(), Some(1));
        assert_eq!(route.interrupts().unwrap(), 7);
    }
}
