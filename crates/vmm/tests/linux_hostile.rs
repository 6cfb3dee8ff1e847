//! A hostile Linux guest: Debian's kernel with a static C init
//! (`linux_init/hostile.c`, built by build.rs with `gcc -static`) that, as
//! root with iopl(3) and /dev/mem, issues random port and MMIO reads and
//! writes from one thread per CPU for 10 s, then reports its counts and ends
//! the VM with status 0 on the debug-exit port. The accesses it leaves out
//! are listed in hostile.c: those that stop the VM (debug exit, ACPI sleep
//! control, reset control, the i8042's reset) and those that would take CPUs
//! or interrupts away from the kernel that has to report (the 8259s'
//! commands, the LAPIC's ID, TPR, LDR, DFR, SVR, ICR low word, LVTs and
//! timer, the IOAPIC's data window); the irqchip models' fuzzers
//! (crates/vmm/src/irqchip/fuzz.rs) cover those registers.
//!
//! smplab-vmm must stay up, end by the guest's debug exit, and count the
//! unclaimed accesses in its record. Both irqchips, 2 vCPUs (the nested
//! host's CPUs), one sync mode each; the in-kernel irqchip's case is
//! `--ignored` (its boot, before any hostile access, hangs there too often;
//! see that test).

mod linux_common;

use linux_common::{all_online, boot, describe, hardware_kvm, initramfs, marker_line, tail, Boot};
use smplab_vmm::{GuestStop, Irqchip, SyncMode};
use std::time::Duration;

const INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux_hostile_init"));
const START_MARKER: &str = "@@SMPLAB-HOSTILE-START ";
const REPORT_MARKER: &str = "@@SMPLAB-HOSTILE ";
const STORM_SECONDS: u64 = 10;
const VCPUS: u32 = 2;

/// The init's report line, `{"cpus":N,...}`, as (name, value) pairs.
fn report_counts(report: &str) -> Vec<(String, u64)> {
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

fn count(counts: &[(String, u64)], name: &str) -> u64 {
    counts
        .iter()
        .find(|(n, _)| n == name)
        .map_or(0, |(_, v)| *v)
}

fn storm(irqchip: Irqchip, sync: SyncMode) {
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
        timeout: Duration::from_secs(150),
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
    let section = &run.section;
    assert!(
        section.unclaimed_accesses > 0,
        "{what}: no unclaimed access counted"
    );
    let guest_accesses: u64 = counts
        .iter()
        .filter(|(n, _)| n.ends_with("_reads") || n.ends_with("_writes"))
        .map(|(_, v)| *v)
        .sum();
    eprintln!(
        "{what}: the init made {guest_accesses} accesses ({report}); the VMM counted {} unclaimed; user irqchip ignored {:?}",
        section.unclaimed_accesses,
        section.user_irqchip.as_ref().map(|s| &s.ignored)
    );
}

#[test]
fn a_hostile_init_leaves_the_vmm_standing_on_the_user_irqchip() {
    if !hardware_kvm("linux_hostile") {
        return;
    }
    storm(Irqchip::User, SyncMode::IoThread);
}

/// Out of CI: in the nested AMD-V host, Debian's kernel on KVM's in-kernel
/// irqchip with 2 vCPUs hung during boot, before the init ran (so before any
/// hostile access), in 4 of 5 boots, and linux_boot.rs's 8-vCPU boot once:
/// vCPU 0 in `native_halt` with interrupts off (as the paravirtual
/// spinlock's wait halts) or, with `nopvspin`, spinning on a lock. The user
/// irqchip never hung there.
/// Run it with `--ignored`; it passes whenever the kernel boots.
#[test]
#[ignore = "the in-kernel irqchip's Linux boot hangs before init in the nested host in 4 of 5 tries (see the comment)"]
fn a_hostile_init_leaves_the_vmm_standing_on_the_kernel_irqchip() {
    if !hardware_kvm("linux_hostile") {
        return;
    }
    storm(Irqchip::Kernel, SyncMode::Fine);
}

#[test]
fn the_report_line_parses() {
    let counts = report_counts(r#"{"cpus":2,"seconds":10,"port_reads":5,"mmio_writes":7}"#);
    assert_eq!(count(&counts, "cpus"), 2);
    assert_eq!(count(&counts, "port_reads"), 5);
    assert_eq!(count(&counts, "mmio_writes"), 7);
    assert_eq!(count(&counts, "absent"), 0);
}
