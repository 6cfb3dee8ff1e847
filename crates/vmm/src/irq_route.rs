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
//!
//! Being guest RAM, every word of it may hold anything when the host reads
//! it: a mask with bits beyond the VM's vCPUs, a destination that is not one
//! of them, a handler count that goes back or grows faster than interrupts
//! can be taken ([`crate::host::sensors::MAX_EVENTS_PER_S`]). Each read
//! checks its word; a word that fails is counted ([`IrqRoute::rejected`])
//! and the host's own value (the mask it wrote, no destination, the last
//! accepted count) is returned instead.

use crate::host::sensors::MAX_EVENTS_PER_S;
use smplab_record::config::IrqAffinity;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
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
    bound: Arc<Mutex<Bound>>,
    rejected: Arc<AtomicU64>,
}

/// The VM a handle is bound to and what the host knows of its page.
#[derive(Debug, Default)]
struct Bound {
    memory: Option<GuestMemoryMmap>,
    /// The VM's vCPUs: the bits a mask may have, the destinations there are.
    vcpus: u32,
    /// The mask the host wrote last.
    host_mask: u64,
    /// The handler count accepted last, and when it was read (or bound).
    interrupts: u64,
    interrupts_at: Option<Instant>,
}

/// Two handles are equal when they name the same VM.
impl PartialEq for IrqRoute {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.bound, &other.bound)
    }
}
impl Eq for IrqRoute {}

impl IrqRoute {
    /// A handle not bound to a VM yet.
    pub fn new() -> IrqRoute {
        IrqRoute::default()
    }

    fn lock(&self) -> MutexGuard<'_, Bound> {
        self.bound.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bind to the VM of `vcpus` vCPUs whose memory this is (`run_vm`,
    /// before the vCPUs run).
    pub(crate) fn bind(&self, memory: GuestMemoryMmap, vcpus: u32) {
        let mut bound = self.lock();
        bound.memory = Some(memory);
        bound.vcpus = vcpus;
        bound.interrupts = 0;
        bound.interrupts_at = Some(Instant::now());
    }

    /// Whether a VM's memory is bound.
    pub fn is_bound(&self) -> bool {
        self.lock().memory.is_some()
    }

    /// Words of the page the guest could have changed that a read refused
    /// so far (see the module comment).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Test hook for tests that play a hostile guest from the host: write
    /// `value` at guest-physical `gpa` of the bound VM (false: not bound, or
    /// outside its RAM).
    #[doc(hidden)]
    pub fn poke_for_tests(&self, gpa: u64, value: u64) -> bool {
        let bound = self.lock();
        bound
            .memory
            .as_ref()
            .is_some_and(|m| m.write_obj(value, GuestAddress(gpa)).is_ok())
    }

    fn reject(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Route the block device's interrupts to the vCPUs of `mask` in turn
    /// (bit i = vCPU i); 0 returns to the boot-time `io_irq=` list. Bits of
    /// vCPUs the guest did not bring up are ignored by the guest. Takes
    /// effect from the interrupt after the next one the guest handles.
    pub fn set_mask(&self, mask: u64) -> Result<(), IrqRouteError> {
        let mut bound = self.lock();
        let memory = bound.memory.as_ref().ok_or(IrqRouteError::NotRunning)?;
        memory
            .store(mask, GuestAddress(MASK), Ordering::Release)
            .map_err(IrqRouteError::Memory)?;
        bound.host_mask = mask;
        Ok(())
    }

    /// The mask on the page (0: the boot-time list). The guest never writes
    /// it: a mask with bits beyond the VM's vCPUs is refused (counted) and
    /// the one the host wrote last returned.
    pub fn mask(&self) -> Result<u64, IrqRouteError> {
        let bound = self.lock();
        let mask = load(&bound, MASK)?;
        if mask & !vcpu_bits(bound.vcpus) != 0 {
            self.reject();
            return Ok(bound.host_mask);
        }
        Ok(mask)
    }

    /// The vCPU the guest last pointed the IOAPIC entry at (`None` before
    /// its first programming: no `io` ops, or not booted yet, and for a
    /// value that names none of the VM's vCPUs, which is counted).
    pub fn destination(&self) -> Result<Option<u32>, IrqRouteError> {
        let bound = self.lock();
        let Some(dest) = load(&bound, DEST)?.checked_sub(1) else {
            return Ok(None);
        };
        match u32::try_from(dest) {
            Ok(d) if d < bound.vcpus => Ok(Some(d)),
            _ => {
                self.reject();
                Ok(None)
            }
        }
    }

    /// Block-device interrupts the guest has handled so far (all vCPUs,
    /// with those that found no completion). A count that went back or grew
    /// faster than the VM's vCPUs can take interrupts is refused (counted)
    /// and the last accepted one returned.
    pub fn interrupts(&self) -> Result<u64, IrqRouteError> {
        let mut bound = self.lock();
        let count = load(&bound, COUNT)?;
        let now = Instant::now();
        let since = bound.interrupts_at.map_or(std::time::Duration::ZERO, |at| {
            now.saturating_duration_since(at)
        });
        let allowed = u64::try_from(
            since.as_nanos() * u128::from(MAX_EVENTS_PER_S) * u128::from(bound.vcpus.max(1))
                / 1_000_000_000,
        )
        .unwrap_or(u64::MAX)
        .saturating_add(1_000);
        match count.checked_sub(bound.interrupts) {
            Some(grew) if grew <= allowed => {
                if grew > 0 {
                    bound.interrupts = count;
                    bound.interrupts_at = Some(now);
                }
                Ok(count)
            }
            _ => {
                self.reject();
                Ok(bound.interrupts)
            }
        }
    }
}

/// The mask of every vCPU of a VM with `vcpus` vCPUs.
fn vcpu_bits(vcpus: u32) -> u64 {
    if vcpus >= 64 {
        u64::MAX
    } else {
        (1u64 << vcpus) - 1
    }
}

fn load(bound: &Bound, addr: u64) -> Result<u64, IrqRouteError> {
    let memory = bound.memory.as_ref().ok_or(IrqRouteError::NotRunning)?;
    memory
        .load(GuestAddress(addr), Ordering::Acquire)
        .map_err(IrqRouteError::Memory)
}

/// The routing mask of a fixed interrupt affinity on a VM of `vcpus` vCPUs:
/// its vCPUs (list order and repeats are not kept: the guest takes the
/// mask's vCPUs in ascending order), every vCPU for `balanced`. `None` for
/// `running`, which only a host scheduler that knows who runs can maintain
/// ([`crate::host::HostScheduler::set_irq_affinity`]), and for a set naming
/// no vCPU below `vcpus` or 64.
pub fn mask_of(affinity: &IrqAffinity, vcpus: u32) -> Option<u64> {
    let vcpus = vcpus.min(64);
    let all = vcpu_bits(vcpus);
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
        route.clone().bind(memory.clone(), 2);
        assert!(route.is_bound());
        route.set_mask(0b10).unwrap();
        assert_eq!(memory.read_obj::<u64>(GuestAddress(0x9c00)).unwrap(), 2);
        assert_eq!(route.mask().unwrap(), 2);
        assert_eq!(route.destination().unwrap(), None);
        memory.write_obj(2u64, GuestAddress(0x9c08)).unwrap();
        memory.write_obj(7u64, GuestAddress(0x9c10)).unwrap();
        assert_eq!(route.destination().unwrap(), Some(1));
        assert_eq!(route.interrupts().unwrap(), 7);
        assert_eq!(route.rejected(), 0);
    }

    #[test]
    fn words_the_guest_wrote_that_cannot_be_true_are_refused_and_counted() {
        let route = IrqRoute::new();
        let memory =
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x10000)]).expect("memory");
        route.bind(memory.clone(), 2);
        route.set_mask(0b01).unwrap();
        // A mask with bits beyond the VM's 2 vCPUs: the host's own comes back.
        memory.write_obj(u64::MAX, GuestAddress(0x9c00)).unwrap();
        assert_eq!(route.mask().unwrap(), 0b01);
        // A destination that is not one of its vCPUs (vCPU 2, then u64::MAX - 1).
        memory.write_obj(3u64, GuestAddress(0x9c08)).unwrap();
        assert_eq!(route.destination().unwrap(), None);
        memory.write_obj(u64::MAX, GuestAddress(0x9c08)).unwrap();
        assert_eq!(route.destination().unwrap(), None);
        // A count far beyond what the time since binding allows, then one
        // that goes back after a good one.
        memory.write_obj(u64::MAX, GuestAddress(0x9c10)).unwrap();
        assert_eq!(route.interrupts().unwrap(), 0);
        memory.write_obj(50u64, GuestAddress(0x9c10)).unwrap();
        assert_eq!(route.interrupts().unwrap(), 50);
        memory.write_obj(40u64, GuestAddress(0x9c10)).unwrap();
        assert_eq!(route.interrupts().unwrap(), 50);
        assert_eq!(route.rejected(), 5);
    }
}
