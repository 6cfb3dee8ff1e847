//! Kulkarni & Kulkarni exploration: pin/float wall-time ratio per profile and pCPU count
//! (8 vCPUs, 8 threads). `cargo run --release -p smplab-sim --example grid001 [scale]`
use smplab_sim::{simulate, Placement, Platform, Scenario, Topology, VmSpec};
fn main() {
    let scale: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let k = Platform::builtin("kvm2015").unwrap();
    for llc in [1u32, 2, 4] {
        println!("pcpus_per_llc {llc}");
        for name in [
            "blackscholes",
            "dedup",
            "fluidanimate",
            "ocean_ncp",
            "streamcluster",
            "vips",
        ] {
            let mut line = format!("{name:>14}");
            for pcpus in [3u32, 4, 5, 6, 7] {
                let mut w = [0u64; 2];
                for (i, aff) in [Placement::Float, Placement::Spread]
                    .into_iter()
                    .enumerate()
                {
                    let mut v = VmSpec::from_workload(name, Some(8), scale, 8).unwrap();
                    v.placement = aff.clone();
                    let mut s = Scenario::new(k.clone(), pcpus, vec![v]);
                    s.topology = Topology {
                        pcpus_per_llc: Some(llc),
                    };
                    s.native_reference = false;
                    w[i] = simulate(&s).unwrap()[0].timing.wall_ns;
                }
                line += &format!("  p{pcpus}: {:.3}", w[1] as f64 / w[0] as f64);
            }
            println!("{line}");
        }
    }
}
