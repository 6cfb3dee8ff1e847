//! Prints the reproduction figures of docs/sim-reproduction.md (Ding & Shan,
//! Kulkarni & Kulkarni, Wells et al.) at a larger scale than the tests use. `cargo run --release -p smplab-sim --example repro [scale]`

use smplab_sim::{simulate, Idle, Placement, Platform, Policy, Scenario, Topology, VmSpec};

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> VmSpec {
    VmSpec::from_workload(name, Some(n), scale, vcpus).expect("builtin")
}

fn wall(s: &Scenario) -> (Vec<u64>, Option<u64>, u64) {
    let r = simulate(s).expect("simulate");
    let sim = r[0].sim.clone().unwrap();
    (
        r.iter().map(|r| r.timing.wall_ns).collect(),
        sim.native_wall_ns,
        sim.spin_ns
            + r.iter()
                .skip(1)
                .map(|r| r.sim.as_ref().unwrap().spin_ns)
                .sum::<u64>(),
    )
}

fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.25);
    let k = Platform::builtin("kvm2015").unwrap();
    println!("== Ding & Shan: 16 vCPUs on 16 pCPUs, slowdown vs native");
    for name in [
        "blackscholes",
        "canneal",
        "dedup",
        "fluidanimate",
        "ocean_ncp",
        "streamcluster",
        "vips",
        "volrend",
    ] {
        let mut out = String::new();
        for idle in [Idle::Hlt, Idle::Poll] {
            let mut v = vm(name, 16, scale, 16);
            v.idle = idle;
            let s = Scenario::new(k.clone(), 16, vec![v]);
            let (w, n, _) = wall(&s);
            out += &format!(
                "  {:>5}: {:6.1}%",
                idle.label(),
                (w[0] as f64 / n.unwrap() as f64 - 1.0) * 100.0
            );
        }
        println!("{name:>14}{out}");
    }
    println!("== Ding & Shan: weighted speedup with 2 VMs (16 vCPUs each, 16 pCPUs; runs need many 6 ms host slices, so 30x the scale)");
    for name in ["streamcluster", "dedup", "volrend", "blackscholes"] {
        for block in [false, true] {
            let mut v = vm(name, 16, scale * 30.0, 16);
            if block {
                v.program = v.program.spin_to_block();
            }
            let base = wall(&Scenario::new(k.clone(), 16, vec![v.clone()])).0[0] as f64;
            let (w2, _, _) = wall(&Scenario::new(k.clone(), 16, vec![v.clone(), v]));
            let ws: f64 = w2.iter().map(|&w| base / w as f64).sum();
            println!(
                "{name:>14} {:>6}: weighted speedup {ws:.2}",
                if block { "+block" } else { "" }
            );
        }
    }
    println!("== Wells et al.: spinlock, 24 vCPUs on 8 pCPUs");
    for (label, slice, sdb, safe) in [
        ("100us", 100_000, false, false),
        ("10us", 10_000, false, false),
        ("safepoint", 100_000, false, true),
        ("sdb", 100_000, true, false),
    ] {
        let mut v = vm("spinlock", 24, scale, 24);
        v.ple = smplab_sim::Ple::Off;
        if sdb {
            v.sdb = Some(Default::default());
        }
        let mut s = Scenario::new(k.clone(), 8, vec![v]);
        s.policy = Policy::fair().with_slice(slice);
        if safe {
            // Safe points are a user-level policy's: the round robin's.
            s.policy.kind = smplab_sim::PolicyKind::RoundRobin;
            s.policy.safe_point_grace_ns = Some(1_000_000);
        }
        let (w, _, spin) = wall(&s);
        println!(
            "{label:>10}: wall {:.2} ms, spin {:.2} ms",
            w[0] as f64 / 1e6,
            spin as f64 / 1e6
        );
    }
    println!("== Wells et al.: two 8-vCPU VMs on 8 pCPUs, gang vs partition");
    for name in ["vips", "canneal", "ocean_ncp", "streamcluster"] {
        let mut res = String::new();
        for pol in ["gang:100us", "partition:100us"] {
            let mut v = vm(name, 8, scale, 8);
            v.sdb = Some(Default::default());
            let mut s = Scenario::new(k.clone(), 8, vec![v.clone(), v]);
            s.policy = Policy::parse(pol).unwrap();
            let (w, _, _) = wall(&s);
            res += &format!(
                "  {pol}: {:.2} ms",
                w.iter().copied().max().unwrap() as f64 / 1e6
            );
        }
        println!("{name:>14}{res}");
    }
    println!("== Kulkarni & Kulkarni: 8 vCPUs on 6 pCPUs (3 LLC domains), pin vs float");
    for name in ["streamcluster", "fluidanimate"] {
        let mut res = String::new();
        for aff in [Placement::Float, Placement::Spread] {
            let mut v = vm(name, 8, scale, 8);
            v.placement = aff.clone();
            let mut s = Scenario::new(k.clone(), 6, vec![v]);
            s.topology = Topology {
                pcpus_per_llc: Some(2),
            };
            let (w, _, _) = wall(&s);
            res += &format!("  {}: {:.2} ms", aff, w[0] as f64 / 1e6);
        }
        println!("{name:>14}{res}");
    }
}
