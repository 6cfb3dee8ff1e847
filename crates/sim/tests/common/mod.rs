//! The random scenario generator the fuzz test (`tests/fuzz.rs`) and the
//! golden test (`tests/golden.rs`) share. The golden hashes depend on the
//! exact sequence of draws below: a change here that alters which scenario a
//! seed gives changes them.

use smplab_record::config::IrqAffinity;
use smplab_sim::*;

/// The scenario generator's random number generator (an LCG, so cases are
/// reproducible from the seed alone).
pub struct Draw(pub u64);

impl Draw {
    pub fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// The next random scenario (None when its settings are invalid together);
/// every case draws the same amount whatever it turns out to be, so case `i`
/// of a seed is always the same scenario.
// Casts: test code: the values come from small fixed or generator-bounded ranges.
#[allow(clippy::cast_possible_truncation)]
pub fn draw_scenario(d: &mut Draw) -> Option<Scenario> {
    let mut r = |n: u64| d.next(n);
    let names: Vec<&str> = smplab_workload::builtin::names().collect();
    let platforms = [
        Platform::builtin("kvm2015").unwrap(),
        Platform::builtin("pvm-here").unwrap(),
    ];
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
        // The range's size is drawn before the choice, as it always was (the
        // golden hashes depend on the order of draws).
        let range = 1 + r(pcpus as u64) as usize;
        v.placement = match r(3) {
            0 => Placement::Float,
            1 => Placement::Spread,
            _ => Placement::Cpus((0..range).collect()),
        };
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
    s.check().ok()?;
    s.horizon_ns = Some(1_000_000_000);
    Some(s)
}
