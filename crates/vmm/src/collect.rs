//! The collector: builds the record's `vmm` section ([`VmmSection`]) from the
//! stopped vCPUs (exit counts, bus latencies, KVM's per-vCPU stats), the bus
//! (I/O thread, unclaimed accesses) and the VM (KVM's VM stats, memory).

use crate::bus::{ClientStats, SyncMode};
use crate::kvm_stats;
use crate::vcpu::Vcpu;
use smplab_record::vmm::{IoThreadStats, VmmSection};
use smplab_record::LatencyHistogram;
use std::fs::File;
use std::time::Duration;
use vm_memory::GuestMemoryMmap;

/// Gathers per-vCPU measurements, then the VM-wide ones, into one section.
pub struct Collector {
    sync: SyncMode,
    section: VmmSection,
    /// Bus latencies of every vCPU so far, merged.
    bus: Option<ClientStats>,
}

/// VM-wide measurements, taken after every vCPU stopped.
pub struct VmMeasurements<'a> {
    pub io_thread: Option<IoThreadStats>,
    pub unclaimed_accesses: u64,
    pub vm_stats: Option<&'a File>,
    pub memory: &'a GuestMemoryMmap,
    pub run_wall: Duration,
    pub tsc_hz: u64,
}

impl Collector {
    pub fn new(sync: SyncMode, vcpus: u32) -> Self {
        Collector {
            sync,
            section: VmmSection {
                sync: sync.to_string(),
                vcpus,
                ..VmmSection::default()
            },
            bus: None,
        }
    }

    /// Add one stopped vCPU (in index order).
    pub fn add_vcpu(&mut self, vcpu: &Vcpu) {
        self.section
            .exits_per_vcpu
            .push(vcpu.exit_counts().to_record());
        self.section.kvm_vcpu_stats.push(
            kvm_stats::open_stats(vcpu.fd())
                .and_then(|f| kvm_stats::read_stats(&f))
                .unwrap_or_default(),
        );
        match &mut self.bus {
            None => self.bus = Some(copy_of(vcpu.bus_stats())),
            Some(merged) => merged.merge(vcpu.bus_stats()),
        }
    }

    /// The section, with the VM-wide measurements; `device_names` are the bus
    /// entries' names ([`crate::bus::Bus::entry_names`]).
    pub fn finish(mut self, device_names: &[String], vm: VmMeasurements<'_>) -> VmmSection {
        let section = &mut self.section;
        if let Some(bus) = &self.bus {
            section.exit_latency = bus.latency_by_device(device_names, self.sync);
            if self.sync == SyncMode::Global {
                section.global_lock_wait = Some(LatencyHistogram::from_hdr(&bus.global_lock_wait));
            }
        }
        section.io_thread = vm.io_thread;
        section.unclaimed_accesses = vm.unclaimed_accesses;
        section.kvm_vm_stats = vm
            .vm_stats
            .and_then(|f| kvm_stats::read_stats(f).ok())
            .unwrap_or_default();
        section.run_wall_ns = Some(u64::try_from(vm.run_wall.as_nanos()).unwrap_or(u64::MAX));
        section.tsc_hz = Some(vm.tsc_hz);
        let (rss, guest_resident) = crate::rss::measure(vm.memory);
        section.rss_bytes = rss;
        section.guest_resident_bytes = guest_resident;
        section.vmm_overhead_bytes = match (rss, guest_resident) {
            (Some(r), Some(g)) => Some(r.saturating_sub(g)),
            _ => None,
        };
        self.section
    }
}

/// A fresh copy of `stats` (hdrhistogram has no cheap clone of the set).
fn copy_of(stats: &ClientStats) -> ClientStats {
    let mut fresh = ClientStats {
        latency: stats
            .latency
            .iter()
            .map(|_| crate::rss::growing_histogram())
            .collect(),
        global_lock_wait: crate::rss::growing_histogram(),
        unclaimed_reads: 0,
        unclaimed_writes: 0,
    };
    fresh.merge(stats);
    fresh
}
