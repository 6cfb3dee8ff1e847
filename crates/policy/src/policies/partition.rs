//! `partition[:SLICE]`: the pCPUs are split among the VMs in contiguous
//! shares proportional to their sizes; each VM is round-robin on its own
//! share (Wells et al. §6). The core keeps every vCPU inside its VM's share.

use crate::{PcpuId, Policy, PolicyError};

#[derive(Debug, Clone, Copy)]
pub struct Partition;

impl Partition {
    /// Refused with fewer pCPUs than VMs: every VM needs one of its own.
    pub fn new(vcpus_per_vm: &[u32], pcpus: usize) -> Result<Partition, PolicyError> {
        let vms = vcpus_per_vm.len();
        if vms > pcpus {
            return Err(PolicyError::PartitionTooSmall { vms, pcpus });
        }
        Ok(Partition)
    }
}

impl Policy for Partition {
    fn shares(&self, vcpus_per_vm: &[u32], pcpus: usize) -> Vec<(PcpuId, PcpuId)> {
        partition_shares(vcpus_per_vm, pcpus)
    }
}

/// Split `pcpus` into contiguous shares proportional to each VM's vCPUs, at
/// least one pCPU each (Wells et al. §6 gives each VM the pCPUs its size asks
/// for). Needs `vcpus_per_vm.len() <= pcpus`.
pub fn partition_shares(vcpus_per_vm: &[u32], pcpus: usize) -> Vec<(PcpuId, PcpuId)> {
    let total: u64 = vcpus_per_vm.iter().map(|&v| u64::from(v)).sum();
    let n = vcpus_per_vm.len();
    let mut out = Vec::with_capacity(n);
    let (mut lo, mut acc) = (0usize, 0u64);
    for (i, &v) in vcpus_per_vm.iter().enumerate() {
        acc += u64::from(v);
        let prop = usize::try_from(acc * pcpus as u64 / total.max(1)).unwrap_or(pcpus);
        let hi = prop
            .max(lo + 1)
            .min(pcpus.saturating_sub(n - i - 1))
            .max(lo);
        out.push((lo, hi));
        lo = hi;
    }
    out
}
