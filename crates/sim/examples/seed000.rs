//! Ding & Shan's figures on `kvm2015`, paper vs model, with the accounting
//! breakdown of each slowdown (what `diagnose --executor sim` prints).
//! `cargo run --release -p smplab-sim --example seed000 [scale] [--explain] [--idle-poll-ns=N]`

use smplab_sim::{breakdown, simulate, Idle, Platform, Ple, RunRecord, Scenario, VmSpec};

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> VmSpec {
    VmSpec::from_workload(name, Some(n), scale, vcpus).expect("builtin")
}

fn run(s: &Scenario) -> Vec<RunRecord> {
    simulate(s).expect("simulate")
}

fn slowdown(r: &RunRecord) -> f64 {
    let n = r.sim.as_ref().and_then(|s| s.native_wall_ns).unwrap_or(1) as f64;
    (r.timing.wall_ns as f64 / n - 1.0) * 100.0
}

fn apic_exits(r: &RunRecord) -> u64 {
    let s = r.sim.as_ref().expect("sim");
    s.exits.get("apic_icr").copied().unwrap_or(0) + s.exits.get("apic_eoi").copied().unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scale: f64 = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .find_map(|a| a.parse().ok())
        .unwrap_or(0.25);
    let explain = args.iter().any(|a| a == "--explain");
    let mut k = Platform::builtin("kvm2015").expect("builtin");
    // `--idle-poll-ns=N`: the bare-metal idle governor's poll, a timing
    // perturbation to check how robust the figures are.
    if let Some(ns) = args
        .iter()
        .find_map(|a| a.strip_prefix("--idle-poll-ns="))
        .and_then(|v| v.parse().ok())
    {
        k.native.idle_poll_ns = ns;
    }
    let single = |name: &str, vcpus: u32, f: &dyn Fn(&mut VmSpec)| {
        // Ding & Shan runs as many threads as vCPUs.
        let mut v = vm(name, vcpus, scale, vcpus);
        f(&mut v);
        run(&Scenario::new(k.clone(), 16, vec![v])).remove(0)
    };
    let show = |label: &str, paper: f64, sim: f64, r: &RunRecord| {
        println!(
            "{label:<44} paper {paper:>7.1}  sim {sim:>7.1}  ratio {:>5.2}",
            sim / paper
        );
        let rate = r.sim.as_ref().map_or(0.0, |s| {
            apic_exits(r) as f64 / (r.timing.wall_ns as f64 / 1e9) / f64::from(s.vcpus.max(1))
        });
        println!("{:<44} APIC exits/s per vCPU {rate:.0}", "");
        if explain {
            if let Some(t) = breakdown::format_breakdown(r) {
                println!("{t}");
            }
        }
    };
    let r = single("dedup", 16, &|_| {});
    show("dedup slowdown %, HLT idle", 173.0, slowdown(&r), &r);
    let r = single("dedup", 16, &|v| v.idle = Idle::Poll);
    show("dedup slowdown %, polling idle", 103.0, slowdown(&r), &r);
    let r = single("ocean_ncp", 16, &|v| v.idle = Idle::Poll);
    show("ocean_ncp slowdown %, polling idle", 28.0, slowdown(&r), &r);
    let r = single("ocean_ncp", 16, &|v| {
        v.idle = Idle::Poll;
        v.ple = Ple::Off;
    });
    show(
        "ocean_ncp slowdown %, polling idle, PLE off",
        8.0,
        slowdown(&r),
        &r,
    );
    // Fig. 4 was measured on the R420 (6 cores), PLE off, polling idle.
    let r420 = |apicv: bool| {
        let mut v = vm("dedup", 4, scale, 4);
        v.idle = Idle::Poll;
        v.ple = Ple::Off;
        v.apicv = apicv;
        let mut s = Scenario::new(k.clone(), 6, vec![v]);
        s.topology = smplab_sim::Topology {
            pcpus_per_llc: Some(6),
        };
        run(&s).remove(0)
    };
    let a = r420(false);
    let b = r420(true);
    println!(
        "  dedup 4 vCPUs on 6 pCPUs, polling, PLE off: slowdown {:.1}% without APICv, {:.1}% with",
        slowdown(&a),
        slowdown(&b)
    );
    if explain {
        if let Some(t) = breakdown::format_breakdown(&a) {
            println!("  without APICv:\n{t}");
        }
    }
    let exits_cut = 100.0 * (1.0 - apic_exits(&b) as f64 / apic_exits(&a).max(1) as f64);
    let sd_cut = 100.0 * (1.0 - slowdown(&b) / slowdown(&a));
    show(
        "dedup 4 vCPUs: APICv cut of APIC exits %",
        52.0,
        exits_cut,
        &b,
    );
    show("dedup 4 vCPUs: APICv cut of slowdown %", 47.0, sd_cut, &b);
    for (vms, paper) in [(2usize, 1.04), (4, 1.06)] {
        let mut v = vm("streamcluster", 16, scale * 30.0, 16);
        // Fig. 5's baseline is Fig. 2's: the stock (spinning) benchmark in one VM.
        let base = run(&Scenario::new(k.clone(), 16, vec![v.clone()]))[0]
            .timing
            .wall_ns;
        v.program = v.program.spin_to_block();
        let own = run(&Scenario::new(k.clone(), 16, vec![v.clone()]))[0]
            .timing
            .wall_ns;
        println!("  streamcluster alone: spin {base} ns, blocking {own} ns");
        let rs = run(&Scenario::new(k.clone(), 16, vec![v; vms]));
        let ws = smplab_sim::weighted_speedup(own, &rs);
        println!(
            "  (normalized to the stock spinning benchmark alone instead: {:.2})",
            smplab_sim::weighted_speedup(base, &rs)
        );
        show(
            &format!("streamcluster blocking, {vms} VMs: throughput"),
            paper,
            ws,
            &rs[0],
        );
    }
}
