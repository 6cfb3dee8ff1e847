//! Whether the event loop's steady state allocates: the host-size bench's
//! scenario (`smplab bench sim-scale`, here 256 pCPUs) simulated for a
//! horizon and for twice that, under a global allocator that counts calls.
//! Setup and the outcome allocate the same in both runs; what the second
//! run allocates beyond the first is what its extra events allocated
//! (0 for an allocation-free loop once queues and run queues reached their
//! peak sizes).
//! `cargo run --release -p smplab-sim --example allocs -- [pcpus] [simulated-ms] [llc]`
//! (`llc`: VMs confined to LLC domains, as the bench's default, which the
//! partitioned engine runs).

use smplab_sim::{simulate_raw, Placement, Platform, Scenario, VmSpec};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations and reallocations.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds `GlobalAlloc`'s contract; the counter has no effect on memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded with the caller's layout (see the impl).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (see `alloc`).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout` (see `alloc`).
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// (processed events, allocations) of one run of `ms` simulated ms.
fn run(pcpus: u32, ms: u64, llc: bool) -> Result<(u64, u64), smplab_sim::SimError> {
    let vm = VmSpec::from_workload("streamcluster", Some(16), 100.0, 16)?;
    let platform = Platform::builtin("kvm2015")?;
    let per_llc = platform.cache.pcpus_per_llc as usize;
    let vms = (0..(pcpus / 4) as usize)
        .map(|k| {
            let mut v = vm.clone();
            if llc {
                // The scale bench's `--placement llc`: the partitioned engine.
                let lo = 4 * k / per_llc * per_llc;
                v.placement = Placement::Cpus((lo..lo + per_llc).collect());
            }
            v
        })
        .collect();
    let mut s = Scenario::new(platform, pcpus, vms);
    s.horizon_ns = Some(ms * 1_000_000);
    s.native_reference = false;
    let a0 = ALLOCS.load(Ordering::Relaxed);
    let r = simulate_raw(&s)?;
    Ok((r.events, ALLOCS.load(Ordering::Relaxed) - a0))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pcpus: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let ms: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(50);
    let llc = args.next().as_deref() == Some("llc");
    let (e1, a1) = run(pcpus, ms, llc)?;
    let (e2, a2) = run(pcpus, 2 * ms, llc)?;
    println!("{pcpus} pCPUs, {ms} ms: {e1} events, {a1} allocations");
    println!(
        "{pcpus} pCPUs, {} ms: {e2} events, {a2} allocations",
        2 * ms
    );
    println!(
        "the second half: {} events, {} allocations ({:.6} per event)",
        e2 - e1,
        a2.saturating_sub(a1),
        a2.saturating_sub(a1) as f64 / (e2 - e1).max(1) as f64
    );
    Ok(())
}
