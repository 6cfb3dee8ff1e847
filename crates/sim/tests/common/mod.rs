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

    /// A draw below `n` as a u32 (`n` is a small count).
    pub fn small(&mut self, n: u64) -> u32 {
        u32::try_from(self.next(n)).expect("a draw below a small n fits in u32")
    }

    /// A draw below `n` as an index.
    pub fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.next(n as u64)).expect("a draw below a usize fits in usize")
    }
}

/// The next random scenario (None when its settings are invalid together);
/// every case draws the same amount whatever it turns out to be, so case `i`
/// of a seed is always the same scenario.
pub fn draw_scenario(d: &mut Draw) -> Option<Scenario> {
    let names: Vec<&str> = smplab_workload::builtin::names().collect();
    let platforms = [
        Platform::builtin("kvm2015").unwrap(),
        Platform::builtin("pvm-here").unwrap(),
    ];
    let pcpus = 1 + d.small(8);
    let nvms = 1 + d.index(3);
    let policy = match d.next(5) {
        0 => "fair",
        1 => "fair:50us",
        2 => "fair:200us+safepoint:100us",
        3 => "partition:100us",
        _ => "gang:200us",
    };
    let mut vms = Vec::new();
    for _ in 0..nvms {
        let name = names[d.index(names.len())];
        let vcpus = 1 + d.small(if policy.starts_with("gang") {
            u64::from(pcpus)
        } else {
            8
        });
        let n = 1 + d.small(6);
        let mut v = VmSpec::from_workload(name, Some(n), 0.02, vcpus).unwrap();
        v.idle = [Idle::Hlt, Idle::Poll, Idle::HaltPoll(20_000)][d.index(3)];
        // The range's size is drawn before the choice, as it always was (the
        // golden hashes depend on the order of draws).
        let range = 1 + d.index(pcpus as usize);
        v.placement = match d.next(3) {
            0 => Placement::Float,
            1 => Placement::Spread,
            _ => Placement::Cpus((0..range).collect()),
        };
        v.ple = [Ple::Off, Ple::Intel, Ple::Amd][d.index(3)];
        v.apicv = d.next(2) == 0;
        if d.next(2) == 0 {
            v.sdb = Some(Sdb {
                detect_ns: None,
                false_positive_rate: Some([0.0, 0.01, 0.5][d.index(3)]),
            });
        }
        if d.next(3) == 0 {
            v.devices = Some(Devices {
                exits_per_ms: [0.5, 10.0, 200.0][d.index(3)],
                sync: [
                    DeviceSync::Global,
                    DeviceSync::IoThread,
                    DeviceSync::Hybrid { bypass: 0.3 },
                    DeviceSync::Fine,
                ][d.index(4)],
                synchronous: 0.6,
            });
        }
        if d.next(4) == 0 {
            v.program = v.program.spin_to_block();
        }
        v.irq_affinity = match d.next(4) {
            0 => IrqAffinity::default(),
            1 => IrqAffinity::Balanced,
            2 => IrqAffinity::Running,
            _ => IrqAffinity::Vcpus(vec![vcpus - 1, 0]),
        };
        if d.next(2) == 0 {
            v.io_thread_cpus = vec![pcpus - 1];
        }
        vms.push(v);
    }
    let mut s = Scenario::new(platforms[d.index(2)].clone(), pcpus, vms);
    s.policy = Policy::parse(policy).unwrap();
    s.seed = d.next(1000);
    s.topology = Topology {
        pcpus_per_llc: Some(1 + d.small(4)),
    };
    s.check().ok()?;
    s.horizon_ns = Some(1_000_000_000);
    Some(s)
}
