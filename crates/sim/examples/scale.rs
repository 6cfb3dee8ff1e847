//! The scale target (docs/sim-performance.md): 1024 pCPUs, 256 VMs of 16 vCPUs each, one
//! simulated second; prints host time, events and peak RSS.
//! `cargo run --release -p smplab-sim --example scale [simulated-ms]`

use smplab_sim::{simulate, Platform, Scenario, VmSpec};
use std::time::Instant;

#[path = "common/proc_stats.rs"]
mod proc_stats;
use proc_stats::{cpu_seconds, peak_rss_kib};

fn main() {
    let ms: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let k = Platform::builtin("kvm2015").expect("builtin");
    // A mix of the built-in profiles, 16 threads each, scaled so no instance
    // finishes within the horizon.
    let names = [
        "blackscholes",
        "canneal",
        "dedup",
        "fluidanimate",
        "ocean_ncp",
        "streamcluster",
        "vips",
        "volrend",
    ];
    let vms: Vec<VmSpec> = (0..256)
        .map(|i| {
            VmSpec::from_workload(names[i % names.len()], Some(16), 100.0, 16).expect("builtin")
        })
        .collect();
    let mut s = Scenario::new(k, 1024, vms);
    s.horizon_ns = Some(ms * 1_000_000);
    s.native_reference = false;
    let t = Instant::now();
    let c0 = cpu_seconds();
    let recs = simulate(&s).expect("simulate");
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    let sim = recs[0].sim.as_ref().expect("sim section");
    let finished = recs.iter().filter(|r| r.is_ok()).count();
    println!(
        "1024 pCPUs, 256 VMs x 16 vCPUs, {ms} simulated ms: {secs:.2} s wall, {cpu:.2} s CPU, {} events ({:.2} M events/s of CPU time), peak RSS {:.1} MiB, {finished} VMs finished",
        sim.events,
        sim.events as f64 / cpu.max(1e-9) / 1e6,
        peak_rss_kib() as f64 / 1024.0
    );
}
