//! The micro-runs: small workload programs, each dominated by one or two
//! kinds of cost, run natively and in smplab-vmm. Their wall times are what
//! [`super::fit`] fits the platform to.
//!
//! | micro-run | threads / vCPUs | what dominates it |
//! |---|---|---|
//! | `compute` | 2 / 2 | the compute kernel (`cpu.compute_ns_per_iter`), on both cores as the held-out runs use them |
//! | `touch` | 2 / 2 | buffer walks (`cpu.touch_ns_per_access`) |
//! | `sharedwrite` | 2 / 2 | both threads write the same 64 lines of a shared buffer between ~1.1 µs of compute: the lines the other core wrote since (`cache.shared_write_ns_per_line`; `compute` and `touch` are its no-sharing baseline) |
//! | `pingpong` | 2 / 2 | block + wake at a blocking barrier (`context_switch_ns`, `wake_ns`; ~6 µs of compute between meetings, so little else) |
//! | `relay` | 2 / 2 | two threads take turns computing ~0.5 ms through two queues, each blocked (its vCPU halted past the host's 200 µs halt-poll window) while the other computes: the IPI and wakeup of a halted vCPU on the critical path (`vmm.hlt_wake_ns`, `ipi_*`, `native.idle_wake_ns`) |
//! | `relay-poll` | 2 / 2 | the same turns, ~0.25 ms each, on a guest that polls when idle: the wake (`vm_kernel.wake_ns`) on the critical path without the halted vCPU's IPI and wakeup, and the waiter's block off it |
//! | `pingpong-1vcpu` | 2 / 1 | block + wake on one vCPU: no idle, no IPI (VM only: the native run would use both cores) |
//! | `shootdown1` | 1 / 1 | the shootdown handler alone (`shootdown_handler_ns`) |
//! | `shootdown2` | 2 / 2 | shootdown IPIs to a busy vCPU (`ipi_send_ns`, `ipi_receive_ns`, handler) |
//!
//! Every VM micro-run but `relay-poll` uses the guest's default HLT idle (as
//! the held-out runs and the demo do): polling idle on this host, whose two
//! cores other work shares, measures the host's load more than the VM's
//! costs.
//!
//! Why `relay-poll` (docs/sim.md, "Calibration"): a wake in a VM is the
//! waker's guest kernel work (`vm_kernel.wake_ns`), then, if the waiter's
//! vCPU is halted, an IPI and the host's wakeup of that vCPU
//! (`vmm.ipi_*`, `vmm.hlt_wake_ns`). Every wake needs a block before it, and a
//! block costs `vm_kernel.context_switch_ns` on the waiter's vCPU. In
//! `pingpong` both are on the critical path (their sum is what it measures);
//! in `relay` the block is hidden behind the other thread's compute but the
//! halted-vCPU wakeup is not, so the wake cost is only known up to the
//! wakeup's. A polling waiter's vCPU needs no IPI and no host wakeup, so in
//! `relay-poll` a turn is the wake plus the compute, as long as the compute
//! outlasts the waiter's block (compute + wake > context switch; here ~0.25 ms
//! against pvm-here's 0.2 ms switch). The three together separate the wake,
//! the switch and the halted-vCPU wakeup. A wake's share of a turn can be at
//! most about wake / switch (the compute must cover the block), so no
//! micro-run sees it more strongly than that. Its price: a polling vCPU never
//! gives its core back, so under other load on the host's two cores its turns
//! stretch (the robust fit then discounts it).
//!
//! Every wake of an idle waiter is followed by the waiter's way back from
//! idle (a switch and the return from its blocking call,
//! `vm_kernel.switch_in_ns`), so the wall times above see wake + switch-in
//! only as a sum. The guest's idle time tells them apart (during the wake
//! the waiter is idle, during its switch-in it works): the fit also
//! compares the measured idle fraction of the VM micro-runs whose idle time
//! is that traffic (`Micro::idle_fitted`: `pingpong`, `relay`,
//! `relay-poll`) when it is at least 2% (`fit.rs`).
//!
//! No micro-run holds a blocking mutex across its compute: whether the woken
//! waiter or the unlocker gets the mutex next is a race decided by the wake
//! cost, so such a run's wall time is a step function of it, which a
//! least-squares fit cannot follow (the former `handoff` micro-run made the
//! fit settle on a wrong step, docs/sim.md).
//!
//! Every program scales its repetition count by the workload scale `s`; at
//! `s = 1` each runs ~10–50 ms natively and ~0.1–1 s in smplab-vmm here.
//! The programs are written as files next to the calibration store (the lab
//! runner resolves a point's workload by path), under a versioned directory
//! so a changed program never reuses stale stored runs.

use smplab_experiment::point::{Point, Variant};
use smplab_record::config::{
    GuestSettings, IdlePolicy, NativeSettings, RunConfig, SyncMode, VmSettings,
};
use std::path::{Path, PathBuf};

/// One micro-run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Micro {
    pub name: &'static str,
    /// The workload program (the lab's workload TOML format).
    pub text: &'static str,
    pub threads: u32,
    pub vcpus: u32,
    pub idle: IdlePolicy,
    /// Also run natively (false when the native run could not match the
    /// simulator's bare-metal reference: that uses one core per vCPU).
    pub native: bool,
    /// The fit also compares the VM run's idle fraction: true for the
    /// micro-runs whose idle time is block/wake traffic (a waiter halted or
    /// polling while its partner works). The others idle only at their
    /// start and end, which at small scales is a third of a short run and
    /// no cost the fit has a field for.
    pub idle_fitted: bool,
}

const COMPUTE: &str = r#"name = "micro-compute"
description = "calibration micro-run: the compute kernel alone"
default_threads = 1
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = "40*s", ops = [ { compute = 250000 } ] } } ]
"#;

const TOUCH: &str = r#"name = "micro-touch"
description = "calibration micro-run: walks of a 256 KiB private buffer"
default_threads = 1
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = "2000*s", ops = [ { touch = { bytes = 262144, stride = 64 } } ] } } ]
"#;

const SHARED_WRITE: &str = r#"name = "micro-sharedwrite"
description = "calibration micro-run: threads write the same 64 lines of a shared buffer, with compute between walks"
default_threads = 2
[buffers.lines]
bytes = 4096
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = "10000*s", ops = [ { touch = { buffer = "lines", bytes = 4096, stride = 64 } }, { compute = 1000 } ] } } ]
"#;

const PINGPONG: &str = r#"name = "micro-pingpong"
description = "calibration micro-run: two threads meet at a blocking barrier"
default_threads = 2
[barriers.b]
parties = "n"
wait = "block"
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = "100*s", ops = [ { compute = 5000 }, { barrier = "b" } ] } } ]
"#;

const WAIT: &str = r#"name = "micro-relay"
description = "calibration micro-run: two threads take turns computing ~0.5 ms, each waiting blocked while the other computes"
default_threads = 2
[queues.to_b]
capacity = 1
[queues.to_a]
capacity = 1
[[groups]]
name = "a"
threads = 1
ops = [ { repeat = { count = "100*s", ops = [ { compute = 400000 }, { push = "to_b" }, { pop = "to_a" } ] } } ]
[[groups]]
name = "b"
threads = 1
ops = [ { repeat = { count = "100*s", ops = [ { pop = "to_b" }, { compute = 400000 }, { push = "to_a" } ] } } ]
"#;

const RELAY_POLL: &str = r#"name = "micro-relay-poll"
description = "calibration micro-run: two threads take turns computing ~0.25 ms, each waiting blocked while the other computes (run with a polling guest idle)"
default_threads = 2
[queues.to_b]
capacity = 1
[queues.to_a]
capacity = 1
[[groups]]
name = "a"
threads = 1
ops = [ { repeat = { count = "100*s", ops = [ { compute = 220000 }, { push = "to_b" }, { pop = "to_a" } ] } } ]
[[groups]]
name = "b"
threads = 1
ops = [ { repeat = { count = "100*s", ops = [ { pop = "to_b" }, { compute = 220000 }, { push = "to_a" } ] } } ]
"#;

const SHOOTDOWN: &str = r#"name = "micro-shootdown"
description = "calibration micro-run: shootdowns of one page, then compute"
default_threads = 1
[[groups]]
name = "w"
threads = "n"
ops = [ { repeat = { count = "100*s", ops = [ { shootdown = 1 }, { compute = 20000 } ] } } ]
"#;

const fn micro(
    name: &'static str,
    text: &'static str,
    threads: u32,
    vcpus: u32,
    idle: IdlePolicy,
    native: bool,
    idle_fitted: bool,
) -> Micro {
    Micro {
        name,
        text,
        threads,
        vcpus,
        idle,
        native,
        idle_fitted,
    }
}

/// Every micro-run.
pub const MICROS: &[Micro] = &[
    micro("compute", COMPUTE, 2, 2, IdlePolicy::Hlt, true, false),
    micro("touch", TOUCH, 2, 2, IdlePolicy::Hlt, true, false),
    micro(
        "sharedwrite",
        SHARED_WRITE,
        2,
        2,
        IdlePolicy::Hlt,
        true,
        false,
    ),
    micro("pingpong", PINGPONG, 2, 2, IdlePolicy::Hlt, true, true),
    micro("relay", WAIT, 2, 2, IdlePolicy::Hlt, true, true),
    micro("relay-poll", RELAY_POLL, 2, 2, IdlePolicy::Poll, true, true),
    micro(
        "pingpong-1vcpu",
        PINGPONG,
        2,
        1,
        IdlePolicy::Hlt,
        false,
        false,
    ),
    micro("shootdown1", SHOOTDOWN, 1, 1, IdlePolicy::Hlt, true, false),
    micro("shootdown2", SHOOTDOWN, 2, 2, IdlePolicy::Hlt, true, false),
];

/// Directory of the program files, versioned with the programs.
pub fn program_dir(store_dir: &Path) -> PathBuf {
    store_dir.join("micro-v3")
}

/// Path of a micro-run's program file.
pub fn program_path(store_dir: &Path, m: &Micro) -> PathBuf {
    // Programs shared by several micro-runs share a file.
    let file = m.text.lines().next().map_or("micro", |l| {
        l.trim_start_matches("name = \"").trim_end_matches('"')
    });
    program_dir(store_dir).join(format!("{file}.toml"))
}

/// Write the program files.
pub fn write_programs(store_dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(program_dir(store_dir))?;
    for m in MICROS {
        std::fs::write(program_path(store_dir, m), m.text)?;
    }
    Ok(())
}

/// The stored point of a micro-run on one executor (`vm` false: native).
pub fn point(store_dir: &Path, m: &Micro, vm: bool, scale: f64) -> Point {
    let config = if vm {
        RunConfig::Vm(VmSettings::new(
            GuestSettings {
                idle: m.idle,
                ..GuestSettings::new(m.vcpus)
            },
            SyncMode::Fine,
        ))
    } else {
        RunConfig::Native(NativeSettings::default())
    };
    let mut p = Point::new(
        program_path(store_dir, m).display().to_string(),
        m.threads,
        scale,
        config,
    );
    p.variant = Variant::AsIs;
    p.timeout_s = 120;
    p.study = Some(format!("calibrate-{}", m.name));
    p
}

/// Every micro-run configuration once (repetition 0): the calibration
/// repeats them with [`smplab_experiment::sweep::run_repeated`].
pub fn points(store_dir: &Path, scale: f64) -> Vec<Point> {
    let mut out = Vec::new();
    for m in MICROS {
        for vm in [true, false] {
            if vm || m.native {
                out.push(point(store_dir, m, vm, scale));
            }
        }
    }
    out
}

/// The program of a micro-run, instantiated for `threads` at `scale`.
pub fn program(
    m: &Micro,
    scale: f64,
) -> Result<(smplab_workload::Program, smplab_record::WorkloadInfo), smplab_workload::WorkloadError>
{
    let src = smplab_workload::Source::from_text(&format!("micro:{}", m.name), m.text)?;
    let prog = src.instantiate(Some(m.threads), scale)?;
    let info = src.workload_info(&prog);
    Ok((prog, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_micro_run_parses_and_has_its_file() {
        let dir = smplab_experiment::testutil::temp_dir("micro");
        write_programs(&dir).unwrap();
        for m in MICROS {
            let (p, _) = program(m, 1.0).expect(m.name);
            assert_eq!(p.total_threads(), m.threads, "{}", m.name);
            assert!(program_path(&dir, m).is_file(), "{}", m.name);
            let pt = point(&dir, m, true, 0.5);
            assert_eq!(pt.config.vcpus(), Some(m.vcpus));
        }
        let all = points(&dir, 0.5);
        let native = MICROS.iter().filter(|m| m.native).count();
        assert_eq!(all.len(), MICROS.len() + native);
        // Distinct configurations have distinct keys.
        let mut keys: Vec<String> = all.iter().map(|p| p.key()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), all.len());
    }
}
