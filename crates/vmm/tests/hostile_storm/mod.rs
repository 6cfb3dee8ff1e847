//! The hostile Linux init's storm, shared by linux_hostile.rs (`--irqchip
//! user`) and linux_hostile_kernel.rs (the in-kernel irqchip): Debian's
//! kernel with a static C init (`linux_init/hostile.c`, built by build.rs
//! with `gcc -static`) that, as root with iopl(3) and /dev/mem, issues random
//! port and MMIO reads and writes from one thread per CPU for
//! [`STORM_SECONDS`], then reports its counts and ends the VM with status 0
//! on the debug-exit port. The accesses it leaves out are listed in
//! hostile.c: those that stop the VM (debug exit, ACPI sleep control, reset
//! control, the i8042's reset) and those that would take CPUs or interrupts
//! away from the kernel that has to report (the 8259s' commands, the LAPIC's
//! ID, TPR, LDR, DFR, SVR, ICR low word, LVTs and timer, the IOAPIC's data
//! window); the irqchip models' fuzzers (crates/vmm/src/irqchip/fuzz.rs) and
//! the concurrent fuzz guest (concurrent_fuzz.rs) cover those registers.
//!
//! smplab-vmm runs with its seccomp filters on (the default; the test checks
//! the record says so): a system call outside a thread's list would end the
//! whole test process with status 20, so a storm that reports is a storm
//! the filters passed. It must also stay up, end by the guest's debug exit,
//! count the unclaimed accesses, and keep the interrupt controllers'
//! invariants (`VmRun::irqchip_violations`) except those a guest can bring
//! about on its own (`IrqchipViolation::guest_can_cause`), which are printed.

// Each test target uses a part of this module (the kernel's, no report parsing).
#![allow(dead_code)]

use crate::linux_common::{all_online, boot, describe, initramfs, marker_line, tail, Boot};
use smplab_vmm::{GuestStop, Irqchip, SyncMode};
use std::time::Duration;

const INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux_hostile_init"));
const START_MARKER: &str = "@@SMPLAB-HOSTILE-START ";
const REPORT_MARKER: &str = "@@SMPLAB-HOSTILE ";
/// Seconds of storm per boot (one boot per sync mode and irqchip).
pub const STORM_SECONDS: u64 = 8;
const VCPUS: u32 = 2;

/// The init's report line, `{"cpus":N,...}`, as (name, value) pairs.
pub fn report_counts(report: &str) -> Vec<(String, u64)> {
    report
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .split(',')
        .filter_map(|pair| {
            let (name, value) = pair.split_once(':')?;
            Some((name.trim_matches('"').to_string(), value.parse().ok()?))
        })
        .collect()
}

pub fn count(counts: &[(String, u64)], name: &str) -> u64 {
    counts
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

/// One boot with the storm on `irqchip` in `sync`; returns the guest's
/// access count.
pub fn storm(irqchip: Irqchip, sync: SyncMode) -> u64 {
    let initrd = initramfs(INIT);
    let request = Boot {
        initrd: &initrd,
        vcpus: VCPUS,
        sync,
        irqchip,
        // iomem=relaxed: /dev/mem may map the LAPIC and IOAPIC pages, which
        // the kernel claims.
        cmdline: format!(
            "console=ttyS0 quiet panic=-1 iomem=relaxed smplab.hostile_s={STORM_SECONDS}"
        ),
        timeout: Duration::from_secs(180),
    };
    let what = describe(&request);
    let (run, console) = boot(&request);
    let tail = tail(&console, 3000);
    // The init's diagnosis lines (smplab.sym=, see hostile.c), if asked for.
    for line in console
        .lines()
        .filter(|l| l.contains("@@SMPLAB-HOSTILE-SYMBOL"))
    {
        eprintln!("{what}: {}", line.trim_end());
    }
    let start = marker_line(&console, START_MARKER)
        .unwrap_or_else(|| panic!("{what}: the init never started; console tail:\n{tail}"));
    assert!(
        start.ends_with(&format!("online={}", all_online(VCPUS))),
        "{what}: {start}"
    );
    let report = marker_line(&console, REPORT_MARKER).unwrap_or_else(|| {
        panic!(
            "{what}: no report; stopped by {:?}; console tail:\n{tail}",
            run.stop
        )
    });
    let counts = report_counts(report);
    assert_eq!(
        run.stop,
        GuestStop::DebugExit(0),
        "{what}: console tail:\n{tail}"
    );
    let section = &run.section;
    assert!(section.seccomp, "{what}: ran without its seccomp filters");
    assert_eq!(count(&counts, "cpus"), u64::from(VCPUS), "{what}: {report}");
    assert_eq!(
        count(&counts, "mmio_regions"),
        9,
        "{what}: every region mapped: {report}"
    );
    for name in ["port_reads", "port_writes", "mmio_reads", "mmio_writes"] {
        assert!(count(&counts, name) > 0, "{what}: no {name}: {report}");
    }
    // Most ports and the holes are unclaimed: the bus counted them.
    assert!(
        section.unclaimed_accesses > 0,
        "{what}: no unclaimed access counted"
    );
    let (guest_caused, broken): (Vec<_>, Vec<_>) = run
        .irqchip_violations
        .iter()
        .partition(|v| v.guest_can_cause());
    assert!(
        broken.is_empty(),
        "{what}: the interrupt controllers' invariants broke: {broken:#?}"
    );
    let guest_accesses: u64 = counts
        .iter()
        .filter(|(n, _)| n.ends_with("_reads") || n.ends_with("_writes"))
        .map(|(_, v)| *v)
        .sum();
    eprintln!(
        "{what}: seccomp on, no violation; the init made {guest_accesses} accesses ({report}); \
         the VMM counted {} unclaimed; user irqchip ignored {:?}; irqchip states a guest can \
         cause: {guest_caused:?}",
        section.unclaimed_accesses,
        section.user_irqchip.as_ref().map(|s| &s.ignored)
    );
    guest_accesses
}
