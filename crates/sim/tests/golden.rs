//! Result preservation: a fixed set of scenarios must produce bit-identical
//! records and raw run figures (every simulated number, the processed and
//! stale event counts) to the hashes below, which were computed on `main`
//! before the event-loop optimizations of issue 10 ("honest speed"). A
//! change that only makes the simulator faster must keep them; a change
//! that means to alter the model's results regenerates them with
//! `SMPLAB_SIM_GOLDEN_PRINT=1 cargo test --release -p smplab-sim --test golden -- --nocapture`
//! and says why in its commit.

use smplab_record::config::IrqAffinity;
use smplab_sim::*;

/// FNV-1a, 64-bit: a stable hash of a canonical JSON text.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Everything the simulator computes about one scenario, with the host facts,
/// the start time and the host seconds (which vary run to run) left out.
fn fingerprint(s: &Scenario) -> u64 {
    let recs = simulate(s).unwrap_or_else(|e| panic!("{e}"));
    let mut parts = Vec::new();
    for r in &recs {
        let mut sim = serde_json::to_value(&r.sim).unwrap();
        if let Some(m) = sim.as_object_mut() {
            m.remove("sim_host_seconds");
        }
        parts.push(serde_json::json!({
            "outcome": r.outcome,
            "timing": r.timing,
            "counters": r.counters,
            "sim": sim,
            "io": r.io,
        }));
    }
    let raw = simulate_raw(s).unwrap_or_else(|e| panic!("{e}"));
    parts.push(serde_json::json!({
        "events": raw.events,
        "stale": raw.stale_events,
        "end": raw.end_ns,
        "pcpu": raw.pcpu_totals,
    }));
    fnv1a(serde_json::to_string(&parts).unwrap().as_bytes())
}

/// Random small scenarios over every setting (the fuzz test's generator with
/// its own seed), then a few larger fixed ones.
// Casts: values come from small generator-bounded ranges.
#[allow(clippy::cast_possible_truncation)]
fn scenarios() -> Vec<(String, Scenario)> {
    let mut x: u64 = 4242;
    let mut r = move |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    let names: Vec<&str> = smplab_workload::builtin::names().collect();
    let platforms = [
        Platform::builtin("kvm2015").unwrap(),
        Platform::builtin("pvm-here").unwrap(),
    ];
    let mut out = Vec::new();
    for i in 0..40 {
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
            v.irq_affinity = match r(4) {
                0 => IrqAffinity::default(),
                1 => IrqAffinity::Balanced,
                2 => IrqAffinity::Running,
                _ => IrqAffinity::Vcpus(vec![vcpus - 1, 0]),
            };
            if r(2) == 0 {
                v.io_thread_cpus = vec![pcpus - 1];
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
        s.horizon_ns = Some(1_000_000_000);
        s.native_reference = i % 4 == 0;
        out.push((format!("random {i}"), s));
    }
    // The events bench's model.
    let k = Platform::builtin("kvm2015").unwrap();
    let a = VmSpec::from_workload("dedup", Some(16), 0.5, 16).unwrap();
    let b = VmSpec::from_workload("streamcluster", Some(16), 2.0, 16).unwrap();
    let mut s = Scenario::new(k.clone(), 16, vec![a, b]);
    s.native_reference = false;
    out.push(("bench model".into(), s));
    // A small version of the scale point: many VMs, many pCPUs, a horizon
    // (far events, periodic balancing across LLC domains, unfinished VMs).
    let mix = ["canneal", "dedup", "ocean_ncp", "streamcluster", "volrend"];
    let vms = (0..24)
        .map(|i| VmSpec::from_workload(mix[i % mix.len()], Some(8), 5.0, 8).unwrap())
        .collect();
    let mut s = Scenario::new(k.clone(), 64, vms);
    s.horizon_ns = Some(30_000_000);
    s.native_reference = false;
    out.push(("64 pCPUs, 24 VMs, 30 ms".into(), s));
    // Seed 000's dedup with polling idle and its native reference.
    let mut v = VmSpec::from_workload("dedup", Some(16), 0.3, 16).unwrap();
    v.idle = Idle::Poll;
    out.push(("dedup poll".into(), Scenario::new(k, 16, vec![v])));
    out
}

/// Hashes computed on `main` at 1c099ba, in the order of `scenarios()`.
const GOLDEN: &[u64] = &[
    0xeeb8b9c4dacfa0c8, // random 0
    0x6777d0a1285828e4, // random 1
    0x9aeaa8ee08191abe, // random 2
    0x2d4442a01b21b6a5, // random 3
    0x5ba9550277e1f5f6, // random 4
    0x9ae7aa12275882a1, // random 5
    0xf4f9027b5c4269e1, // random 6
    0xb70a6f6d2c7281cf, // random 7
    0xd99c2eab11be3243, // random 8
    0x00d9d1c4f5ad8685, // random 9
    0x63f95d94ec191e58, // random 10
    0x772b6bd9383f0b82, // random 11
    0xdcef905750ee507c, // random 12
    0x6213eade9a429ca3, // random 13
    0x47d8a76664fa7f40, // random 14
    0x301c3fb21901006f, // random 15
    0xaf3bbc0410ea086f, // random 16
    0xcbc5b3329e941071, // random 17
    0x2a542fb7266d7a5e, // random 18
    0xe2870d463d07fce1, // random 19
    0xca4830e9cbc74e28, // random 20
    0x638281176c47840d, // random 21
    0x9f7e39f52007cf13, // random 22
    0xbcb9800e94466f42, // random 23
    0xf89493e74fd5f8ab, // random 24
    0x426936969b18d66e, // random 25
    0xaed3f24f75909374, // random 26
    0xd78ed6734c408902, // random 27
    0x0cbebd734bb61945, // random 28
    0x3d7abd259bb01b2b, // random 29
    0x4d75fdec7986dddd, // random 30
    0xf536e76cc6011885, // random 31
    0xa00192f7b9154a6e, // random 32
    0xd28ba3f28741bd53, // random 33
    0x2fabe2a8fc673091, // random 34
    0x5ca8aa94a98514eb, // random 35
    0xba32d554bd02e3ec, // random 36
    0x3e6616a03ce67130, // random 37
    0xe3df210d80125773, // random 38
    0x94450757bbaa5e37, // random 39
    0x02b9b1838d7366e7, // bench model
    0x208dc681d3691eb7, // 64 pCPUs, 24 VMs, 30 ms
    0x7b5fc62069b5879b, // dedup poll
];

#[test]
fn fixed_scenarios_give_bit_identical_results() {
    let got: Vec<(String, u64)> = scenarios()
        .into_iter()
        .map(|(name, s)| {
            let h = fingerprint(&s);
            (name, h)
        })
        .collect();
    if std::env::var_os("SMPLAB_SIM_GOLDEN_PRINT").is_some() {
        for (name, h) in &got {
            println!("    0x{h:016x}, // {name}");
        }
    }
    // The same scenario twice gives the same hash (the fingerprint leaves out
    // everything that varies between runs).
    let (_, first) = &scenarios()[0];
    assert_eq!(
        fingerprint(first),
        got[0].1,
        "fingerprint not deterministic"
    );
    assert_eq!(got.len(), GOLDEN.len(), "scenario count changed");
    for ((name, h), want) in got.iter().zip(GOLDEN) {
        assert_eq!(*h, *want, "{name}: results differ from the golden run");
    }
}
