//! smplab-vmm's own resident memory at 1, 2 and 8 vCPUs: each measurement
//! runs in a fresh child process (this test binary again, running
//! `child_entry` only), which reads its RSS before building the VM and its
//! RSS and the resident guest pages at the end (the record's `rss_bytes`,
//! `guest_resident_bytes`), so neither the test harness nor an earlier run
//! is in the figure. Prints a table; asserts the bounds: at most
//! 5 MiB beyond touched guest memory for 1 vCPU, at most 0.5 MiB more per
//! extra vCPU. `SMPLAB_RSS_GUEST_ELF=PREFIX` also writes the guests' ELFs
//! (`PREFIX-N.elf` for N vCPUs), for `/usr/bin/time -f %M smplab vmm
//! --kernel PREFIX-N.elf --vcpus N --mem 64M`; `SMPLAB_RSS_SMAPS=1` makes
//! each child first run a longer guest and print its mappings of 64 KiB
//! resident or more while it runs (where the memory goes).
//! Without /dev/kvm it prints a note and passes; with SMPLAB_REQUIRE_KVM=1
//! it fails instead.

mod kvm_check;

use kvm_check::kvm_usable;

use smplab_vmm::test_guest::GuestProgram;
use smplab_vmm::{run_vm, ConsoleSink, KernelImage, SyncMode, VmConfig};
use std::time::Duration;

const CHILD_ENV: &str = "SMPLAB_RSS_CHILD";

/// The guest: port I/O on every vCPU, 64 MiB configured, a few
/// pages touched.
fn program(vcpus: u32) -> GuestProgram {
    GuestProgram {
        aps: u16::try_from(vcpus - 1).expect("a few vCPUs"),
        bsp_loops: 2_000,
        ap_loops: 2_000,
        ..GuestProgram::default()
    }
}

/// `vcpus sync before_kib rss_kib guest_kib hwm_kib` on stdout.
#[test]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let mut words = spec.split(',');
    let vcpus: u32 = words.next().and_then(|w| w.parse().ok()).expect("vCPUs");
    let sync: SyncMode = words.next().and_then(|w| w.parse().ok()).expect("sync");
    let mut config = VmConfig::new(KernelImage::Bytes(program(vcpus).elf()));
    config.vcpus = vcpus;
    config.mem_bytes = 64 << 20;
    config.sync = sync;
    config.console = ConsoleSink::Capture;
    config.timeout = Some(Duration::from_secs(120));
    config.cmdline = format!("cpus={vcpus}");
    let before = smplab_vmm::rss::process_rss_bytes().expect("VmRSS");
    if std::env::var("SMPLAB_RSS_SMAPS").is_ok() {
        let mut long = config.clone();
        long.kernel = KernelImage::Bytes(
            GuestProgram {
                bsp_loops: 400_000,
                ap_loops: 400_000,
                ..program(vcpus)
            }
            .elf(),
        );
        let t = std::thread::spawn(move || run_vm(&long).map(|r| r.exit_code));
        std::thread::sleep(Duration::from_millis(500));
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let mut head = String::new();
        let mut total = 0;
        for line in smaps.lines() {
            if line.contains('-') && !line.starts_with(|c: char| c.is_ascii_uppercase()) {
                head = line.to_string();
            } else if let Some(kb) = line.strip_prefix("Rss:") {
                let kb: u64 = kb
                    .trim()
                    .trim_end_matches(" kB")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                total += kb;
                if kb >= 64 {
                    eprintln!("SMAPS {kb:>7} kB {head}");
                }
            }
        }
        eprintln!("SMAPS total {total} kB");
        let _ = t.join();
    }
    let run = run_vm(&config).expect("run");
    let s = &run.section;
    let hwm = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    println!(
        "RSS-CHILD {vcpus} {sync} {} {} {} {hwm}",
        before / 1024,
        s.rss_bytes.unwrap_or(0) / 1024,
        s.guest_resident_bytes.unwrap_or(0) / 1024
    );
}

/// `(before, rss at end, guest resident, peak)` in KiB of one child run.
fn measure(vcpus: u32, sync: SyncMode) -> (u64, u64, u64, u64) {
    let exe = std::env::current_exe().expect("test binary");
    let out = std::process::Command::new(exe)
        .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{vcpus},{sync}"))
        .output()
        .expect("child runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("RSS-CHILD ").map(|(_, figures)| figures))
        .unwrap_or_else(|| {
            panic!(
                "no figures: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[1], n[2], n[3], n[4])
}

#[test]
fn the_vmm_stays_small_per_vcpu() {
    if !kvm_usable() {
        return;
    }
    if let Ok(prefix) = std::env::var("SMPLAB_RSS_GUEST_ELF") {
        for vcpus in [1, 2, 8] {
            std::fs::write(format!("{prefix}-{vcpus}.elf"), program(vcpus).elf())
                .expect("guest ELF");
        }
    }
    println!("vCPUs  sync      before  end RSS  guest  VMM (end - before - guest)  peak");
    for sync in [SyncMode::Fine, SyncMode::IoThread] {
        let mut overhead = Vec::new();
        for vcpus in [1, 2, 8] {
            let (before, rss, guest, hwm) = measure(vcpus, sync);
            let vmm = rss.saturating_sub(before).saturating_sub(guest);
            println!(
                "{vcpus:>5}  {sync:<8} {before:>6}K {rss:>7}K {guest:>5}K {vmm:>10}K {hwm:>20}K"
            );
            overhead.push((vcpus, vmm));
        }
        let (_, one) = overhead[0];
        let (_, eight) = overhead[2];
        assert!(one <= 5 * 1024, "{sync}: {one} KiB for 1 vCPU");
        let per_extra = eight.saturating_sub(one) / 7;
        assert!(
            per_extra <= 512,
            "{sync}: {per_extra} KiB per extra vCPU ({overhead:?})"
        );
    }
}
