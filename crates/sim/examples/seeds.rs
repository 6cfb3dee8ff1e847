//! How the reproduction-target metrics vary with the seed (the tests use seed 1).
//! `cargo run --release -p smplab-sim --example seeds [n] [streamcluster-scale]`
use smplab_sim::{simulate, Placement, Platform, Policy, Scenario, Topology, VmSpec};

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> VmSpec {
    VmSpec::from_workload(name, Some(n), scale, vcpus).expect("builtin")
}

fn walls(s: &Scenario) -> Vec<u64> {
    simulate(s)
        .expect("simulate")
        .iter()
        .map(|r| r.timing.wall_ns)
        .collect()
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let k = Platform::builtin("kvm2015").expect("builtin");
    for seed in 1..=n {
        // streamcluster 2 VMs
        let sc: f64 = std::env::args()
            .nth(2)
            .and_then(|s| s.parse().ok())
            .unwrap_or(30.0);
        let spin = vm("streamcluster", 16, sc, 16);
        let mut block = spin.clone();
        block.program = block.program.spin_to_block();
        let ws = |v: &VmSpec| {
            let mut one = Scenario::new(k.clone(), 16, vec![v.clone()]);
            one.seed = seed;
            one.native_reference = false;
            let base = walls(&one)[0] as f64;
            let mut two = Scenario::new(k.clone(), 16, vec![v.clone(), v.clone()]);
            two.seed = seed;
            two.native_reference = false;
            walls(&two).iter().map(|&w| base / w as f64).sum::<f64>()
        };
        let (ws_spin, ws_block) = (ws(&spin), ws(&block));
        // Kulkarni & Kulkarni
        let ratio = |name: &str| {
            let mut w = [0u64; 2];
            for (i, aff) in [Placement::Float, Placement::Spread]
                .into_iter()
                .enumerate()
            {
                let mut v = vm(name, 8, 1.0, 8);
                v.placement = aff.clone();
                let mut s = Scenario::new(k.clone(), 6, vec![v]);
                s.topology = Topology {
                    pcpus_per_llc: Some(2),
                };
                s.native_reference = false;
                s.seed = seed;
                w[i] = walls(&s)[0];
            }
            w[1] as f64 / w[0] as f64
        };
        // Wells et al.
        let spin_ns = |sdb: bool| {
            let mut v = vm("spinlock", 24, 0.05, 24);
            v.ple = smplab_sim::Ple::Off;
            if sdb {
                v.sdb = Some(Default::default());
            }
            let mut s = Scenario::new(k.clone(), 8, vec![v]);
            s.policy = Policy::fair().with_slice(100_000);
            s.native_reference = false;
            s.seed = seed;
            simulate(&s).expect("simulate")[0]
                .sim
                .as_ref()
                .expect("sim")
                .spin_ns
        };
        let part = |policy: &str| {
            let mut v = vm("vips", 8, 1.0, 8);
            v.sdb = Some(Default::default());
            let mut s = Scenario::new(k.clone(), 8, vec![v.clone(), v]);
            s.policy = Policy::parse(policy).expect("policy");
            s.native_reference = false;
            s.seed = seed;
            walls(&s).into_iter().max().unwrap_or(0)
        };
        println!(
            "seed {seed}: ws spin {ws_spin:.2} block {ws_block:.2} | pin/float streamcluster {:.3} fluidanimate {:.3} | sdb/slices spin {:.3} | partition/gang {:.3}",
            ratio("streamcluster"),
            ratio("fluidanimate"),
            spin_ns(true) as f64 / spin_ns(false) as f64,
            part("partition:100us") as f64 / part("gang:100us") as f64
        );
    }
}
