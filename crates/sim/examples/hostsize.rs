//! One size of `smplab bench sim-scale` in this process, for profiling
//! (docs/sim-performance.md, "Host size"): P pCPUs, P/4 VMs of the
//! streamcluster profile with 16 threads on 16 vCPUs at scale 100 (the
//! bench's scenario, without its bare-loop baseline) for a simulated
//! horizon; prints processed events, CPU seconds, events/s and peak RSS.
//! `PLATFORM=name` picks another platform than the bench's kvm2015.
//! `cargo run --release -p smplab-sim --example hostsize -- PCPUS [simulated-ms]`

use smplab_sim::{simulate_raw, Platform, Scenario, VmSpec};

#[path = "common/proc_stats.rs"]
mod proc_stats;
use proc_stats::{cpu_seconds, peak_rss_kib};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pcpus: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(512);
    let ms: u64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(1000);
    let vm = VmSpec::from_workload("streamcluster", Some(16), 100.0, 16)?;
    let mut s = Scenario::new(
        Platform::builtin(std::env::var("PLATFORM").as_deref().unwrap_or("kvm2015"))?,
        pcpus,
        vec![vm; (pcpus / 4).max(1) as usize],
    );
    s.horizon_ns = Some(ms * 1_000_000);
    s.native_reference = false;
    let c0 = cpu_seconds();
    let t = std::time::Instant::now();
    let r = simulate_raw(&s)?;
    let wall = t.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - c0;
    println!(
        "{pcpus} pCPUs, {ms} ms: {} events, {wall:.2} s wall, {cpu:.2} s CPU, {:.2} M events/s CPU, {:.1} ns/event, peak RSS {:.1} MiB",
        r.events,
        r.events as f64 / cpu.max(1e-9) / 1e6,
        cpu * 1e9 / r.events as f64,
        peak_rss_kib() as f64 / 1024.0
    );
    Ok(())
}
