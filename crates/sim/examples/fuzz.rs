//! Random small scenarios over every setting, to catch panics and stalls.
//! Run in the debug profile so debug assertions are on:
//! `cargo run -p smplab-sim --example fuzz [count] [seed]`
use smplab_sim::*;

fn main() {
    let count: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut x: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut r = move |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let names = [
        "blackscholes",
        "canneal",
        "dedup",
        "fluidanimate",
        "ocean_ncp",
        "streamcluster",
        "vips",
        "volrend",
        "spinlock",
        "shootdown",
    ];
    let platforms = [
        Platform::builtin("kvm2015").unwrap(),
        Platform::builtin("pvm-here").unwrap(),
    ];
    for i in 0..count {
        let pcpus = 1 + r(8) as u32;
        let nvms = 1 + r(3) as usize;
        let policy = match r(5) {
            0 => "fair",
            1 => "fair:50us",
            2 => "fair:200us+safepoint:100us",
            3 => "partition:100us",
            _ => "gang:200us",
        };
        let mut vms = Vec::new();
        for _ in 0..nvms {
            let name = names[r(names.len() as u64) as usize];
            let vcpus = 1 + r(if policy.starts_with("gang") {
                pcpus as u64
            } else {
                8
            }) as u32;
            let n = 1 + r(6) as u32;
            let mut v = VmSpec::from_workload(name, Some(n), 0.02, vcpus).unwrap();
            v.idle = [Idle::Hlt, Idle::Poll, Idle::HaltPoll(20_000)][r(3) as usize];
            v.affinity = [
                Affinity::Float,
                Affinity::Pin,
                Affinity::Range {
                    first: 0,
                    count: 1 + r(pcpus as u64) as u32,
                },
            ][r(3) as usize];
            v.ple = [Ple::Off, Ple::Intel, Ple::Amd][r(3) as usize];
            v.apicv = r(2) == 0;
            if r(2) == 0 {
                v.sdb = Some(Sdb {
                    detect_ns: None,
                    false_positive_rate: Some([0.0, 0.01, 0.5][r(3) as usize]),
                });
            }
            if r(3) == 0 {
                v.devices = Some(Devices {
                    exits_per_ms: [0.5, 10.0, 200.0][r(3) as usize],
                    sync: [
                        DeviceSync::Global,
                        DeviceSync::IoThread,
                        DeviceSync::Hybrid { bypass: 0.3 },
                        DeviceSync::Fine,
                    ][r(4) as usize],
                    synchronous: 0.6,
                });
            }
            if r(4) == 0 {
                v.program = v.program.spin_to_block();
            }
            vms.push(v);
        }
        let mut s = Scenario::new(platforms[r(2) as usize].clone(), pcpus, vms);
        s.policy = Policy::parse(policy).unwrap();
        s.seed = r(1000);
        s.topology = Topology {
            pcpus_per_llc: Some(1 + r(4) as u32),
        };
        if s.check().is_err() {
            continue;
        }
        if let Some(only) = std::env::var("FUZZ_ONLY")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            if i != only {
                continue;
            }
            s.horizon_ns = std::env::var("FUZZ_HORIZON_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(|ms| ms * 1_000_000);
            eprintln!("platform {}", s.platform.name);
        }
        let t = std::time::Instant::now();
        if std::env::var_os("FUZZ_VERBOSE").is_some() {
            eprintln!(
                "case {i}: {} pCPUs, llc {:?}, policy {}, seed {}, VMs: {:?}",
                s.pcpus,
                s.topology.pcpus_per_llc,
                s.policy.label(),
                s.seed,
                s.vms
                    .iter()
                    .map(|v| (
                        v.program.name.clone(),
                        v.program.n,
                        v.vcpus,
                        v.idle,
                        v.affinity,
                        v.ple,
                        v.apicv,
                        v.sdb,
                        v.devices
                    ))
                    .collect::<Vec<_>>()
            );
        }
        match simulate(&s) {
            Ok(recs) => {
                if s.horizon_ns.is_some() {
                    for rec in &recs {
                        eprintln!("{}", smplab_sim::cli::summary_line(rec));
                    }
                    continue;
                }
                for (v, rec) in s.vms.iter().zip(&recs) {
                    assert!(rec.is_ok());
                    assert_eq!(rec.counters.ops, v.program.expected_counts(), "case {i}");
                }
            }
            Err(e) => panic!("case {i}: {e}\n{s:?}"),
        }
        let secs = t.elapsed().as_secs_f64();
        if secs > 2.0 {
            eprintln!(
                "\nslow case {i}: {secs:.1} s: {} pCPUs, policy {}, VMs: {:?}",
                s.pcpus,
                s.policy.label(),
                s.vms
                    .iter()
                    .map(|v| (
                        v.program.name.clone(),
                        v.vcpus,
                        v.idle,
                        v.affinity,
                        v.ple,
                        v.sdb.is_some(),
                        v.devices.map(|d| d.exits_per_ms)
                    ))
                    .collect::<Vec<_>>()
            );
        }
    }
    println!("{count} cases ok");
}
