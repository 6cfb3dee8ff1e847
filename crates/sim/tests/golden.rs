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
/// the start time and the host seconds (which vary run to run) left out:
/// a hash of the simulated results and one of the event counts (kept apart
/// so a change in what counts as a processed event shows as such).
fn fingerprint(s: &Scenario) -> (u64, u64) {
    let recs = simulate(s).unwrap_or_else(|e| panic!("{e}"));
    let mut parts = Vec::new();
    let mut counts = Vec::new();
    for r in &recs {
        let mut sim = serde_json::to_value(&r.sim).unwrap();
        let mut events = serde_json::Value::Null;
        if let Some(m) = sim.as_object_mut() {
            m.remove("sim_host_seconds");
            events = m.remove("events").unwrap_or_default();
        }
        counts.push(events);
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
        "end": raw.end_ns,
        "pcpu": raw.pcpu_totals,
    }));
    counts.push(serde_json::json!([raw.events, raw.stale_events]));
    (
        fnv1a(serde_json::to_string(&parts).unwrap().as_bytes()),
        fnv1a(serde_json::to_string(&counts).unwrap().as_bytes()),
    )
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
    // Over 256 vCPUs: the event queue takes narrower buckets.
    let vms = (0..64)
        .map(|i| VmSpec::from_workload(mix[i % mix.len()], Some(16), 5.0, 16).unwrap())
        .collect();
    let mut s = Scenario::new(k.clone(), 128, vms);
    s.horizon_ns = Some(4_000_000);
    s.native_reference = false;
    out.push(("128 pCPUs, 64 VMs x 16, 4 ms".into(), s));
    // Seed 000's dedup with polling idle and its native reference.
    let mut v = VmSpec::from_workload("dedup", Some(16), 0.3, 16).unwrap();
    v.idle = Idle::Poll;
    out.push(("dedup poll".into(), Scenario::new(k, 16, vec![v])));
    out
}

/// (results, event counts) hashes, in the order of `scenarios()`, computed
/// on `main` at 1c099ba. One event count changed since, on purpose: the
/// event popped past the horizon is no longer counted as processed (and
/// no-op timers, deferred wakes and Steps of an idle vCPU count as stale;
/// the 128-pCPU results hash is main's, its count hash after that change).
const GOLDEN: &[(u64, u64)] = &[
    (0xb8cf34a134774a93, 0xcbaef1594155cab1), // random 0
    (0xa969714181546316, 0x5f4259bac281791e), // random 1
    (0xd8e5ab476e494f70, 0xf267e2504e01cd84), // random 2
    (0x50a1469a6dc49108, 0xd3ec66d2a7e33b08), // random 3
    (0x92f68eed411447aa, 0xcfcf2cb370f3bd9e), // random 4
    (0x7e12a65017500d9c, 0xd7c4e428b49b37b7), // random 5
    (0xc80a103232de4f38, 0x1b6f102297a183f6), // random 6
    (0x62cccde90ca0e7ee, 0x4b288c55053050b9), // random 7
    (0x57229cc637234c9f, 0x5e0e8d801cf83aa7), // random 8
    (0x45eecf81eecff306, 0xd10752e64b44c2c3), // random 9
    (0xc9b4f488c139d39f, 0x515100c725bc2219), // random 10
    (0x57a5633e75a7f595, 0x2c3f29943cf97c49), // random 11
    (0x54cd95a8955c96b0, 0x78ca31411abb3e18), // random 12
    (0x7d98458911618d39, 0x84ce0032aa456052), // random 13
    (0x552f3ce1b625dd6e, 0x4a160ee4916b2b5a), // random 14
    (0x11737f0375722fb1, 0x76e231f568abca90), // random 15
    (0x48d450c76ef457c4, 0x51768b659b30cf51), // random 16
    (0x7fc3600308f503de, 0xc1c14310dbc5243e), // random 17
    (0x213ca990be7dc533, 0x672240398401614b), // random 18
    (0x20988a275b9d32a7, 0xd58e1be59c864b72), // random 19
    (0x63aa0f29d43d324b, 0xbf1a8545002b0068), // random 20
    (0xdf1a73f76a48bcdc, 0x5d31a1932fa5b13a), // random 21
    (0xbbacbf3e3512b60c, 0x4c38fc590a517a36), // random 22
    (0x378a382f1f473c04, 0x32e88667d690b347), // random 23
    (0x6c33fa538bf45183, 0x54c20816df8a2a38), // random 24
    (0xc8e6080dec1dac7f, 0xdfd93eff8acd0ad1), // random 25
    (0xdd86f277a6da816f, 0xe2fd67f8667511e2), // random 26
    (0xb0ad6d95510eed7c, 0xd2628b0bb9bc1dd0), // random 27
    (0xc17e4e1cbd1f6a8f, 0x7c857f4dbfec52d4), // random 28
    (0x66dc4d2e31d189e0, 0xa91546fd5e0c3a2f), // random 29
    (0x9196a9c9581d61a6, 0xc0ed3e4cb18a9b2a), // random 30
    (0x70b63c79a2a16012, 0xac30267bfc1aa121), // random 31
    (0x50fd316df4d60def, 0xc3add00ba2ce1aee), // random 32
    (0x886e920673b7ede1, 0xbe3159142139d528), // random 33
    (0xdb6b4532f8e3a9ca, 0xc7f8aa8e1fa93296), // random 34
    (0x42d6ff9617a59f1d, 0x498267604b047fa8), // random 35
    (0x65ea05b78796f3d5, 0x8649aed251a9282d), // random 36
    (0x6094595cd8a54045, 0x42cf1f69a853c23f), // random 37
    (0x3b5a2aa448115cc6, 0x764025f7c0310c9d), // random 38
    (0x9a4332201f86032c, 0xeb4ec06934036fdf), // random 39
    (0xd53c091c97e0b534, 0x8e9935a8a1f02588), // bench model
    (0x19a3cc6312ebaa8b, 0xb73e4022beb835e4), // 64 pCPUs, 24 VMs, 30 ms
    (0x9487ceab9f592ced, 0x486b93211ffde706), // 128 pCPUs, 64 VMs x 16, 4 ms
    (0x0a2ec44684aa51e8, 0x1da0e4ebf985895b), // dedup poll
];

#[test]
fn fixed_scenarios_give_bit_identical_results() {
    let got: Vec<(String, (u64, u64))> = scenarios()
        .into_iter()
        .map(|(name, s)| {
            let h = fingerprint(&s);
            (name, h)
        })
        .collect();
    if std::env::var_os("SMPLAB_SIM_GOLDEN_PRINT").is_some() {
        for (name, h) in &got {
            println!("    (0x{:016x}, 0x{:016x}), // {name}", h.0, h.1);
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
        assert_eq!(h.0, want.0, "{name}: results differ from the golden run");
        assert_eq!(
            h.1, want.1,
            "{name}: event counts differ from the golden run"
        );
    }
}
