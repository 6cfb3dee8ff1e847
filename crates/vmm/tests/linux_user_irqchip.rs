//! Debian's stock kernel on smplab-vmm with `--irqchip user`: the VMM's own
//! LAPIC set, IOAPIC and 8259 pair (crates/vmm/src/irqchip) in place of
//! KVM's, under each sync mode, with every vCPU online. The init is
//! linux_boot.rs's (`linux_init/init.c`): it prints the online CPUs and ends
//! the VM with status 0x5a on the debug-exit port.
//!
//! By default four boots cover the four sync modes and N = 1, 2, 4 and 8
//! (8 overcommitted on the nested host's 2 CPUs) between them (linux_boot.rs
//! covers the in-kernel irqchip); `SMPLAB_LINUX_MATRIX=full` boots every N x
//! mode, with Debian's `cloud` flavour kernel too when it is there
//! (linux_common::cloud_bzimage). Linux needs hardware-style KVM: elsewhere the test says why it ran
//! nowhere (see linux_common).

mod linux_common;

use linux_common::{
    all_online, boot_kernel, bzimage, cloud_bzimage, describe, hardware_kvm, initramfs,
    marker_line, tail, Boot,
};
use smplab_vmm::{GuestStop, Irqchip, SyncMode};
use std::sync::OnceLock;
use std::time::Duration;

/// linux_boot.rs's init, built by build.rs (empty if gcc could not build it).
const INIT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux_init"));
const INIT_MARKER: &str = "@@SMPLAB-LINUX-INIT";
const ONLINE_MARKER: &str = "@@SMPLAB-LINUX-ONLINE ";
const STATUS_OK: u32 = 0x5a;
/// Under TCG, 8 vCPUs on 2 with every interrupt through the VMM are slow.
const BOOT_TIMEOUT: Duration = Duration::from_secs(280);

fn initrd() -> &'static [u8] {
    static INITRD: OnceLock<Vec<u8>> = OnceLock::new();
    INITRD.get_or_init(|| initramfs(INIT))
}

fn check(vcpus: u32, sync: SyncMode) {
    check_kernel(bzimage(), "", vcpus, sync);
}

/// Boot `kernel` (named `name` in messages) on the user irqchip.
fn check_kernel(kernel: &[u8], name: &str, vcpus: u32, sync: SyncMode) {
    let request = Boot {
        initrd: initrd(),
        vcpus,
        sync,
        irqchip: Irqchip::User,
        cmdline: "console=ttyS0 quiet panic=-1".into(),
        timeout: BOOT_TIMEOUT,
    };
    let what = format!("{name}{}", describe(&request));
    let (run, console) = boot_kernel(kernel, &request);
    let tail = tail(&console, 3000);
    assert!(
        console.contains(INIT_MARKER),
        "{what}: the init never ran; stopped by {:?}; console tail:\n{tail}",
        run.stop
    );
    let online = marker_line(&console, ONLINE_MARKER)
        .unwrap_or_else(|| panic!("{what}: no online line; console tail:\n{tail}"));
    assert_eq!(online, all_online(vcpus), "{what}: console tail:\n{tail}");
    assert_eq!(
        run.stop,
        GuestStop::DebugExit(STATUS_OK),
        "{what}: console tail:\n{tail}"
    );
    // The interrupts came from the VMM's models: injected with KVM_INTERRUPT
    // (the LAPIC timer at least), and the HLTs of idle APs reached the VMM
    // (one CPU may never idle in so short a boot).
    let stats = run
        .section
        .user_irqchip
        .as_ref()
        .unwrap_or_else(|| panic!("{what}: no user_irqchip section"));
    assert!(stats.injected > 0, "{what}: nothing injected: {stats:?}");
    assert!(
        vcpus == 1 || stats.halts_polled + stats.halts_slept > 0,
        "{what}: no HLT reached the VMM: {stats:?}"
    );
    eprintln!(
        "{what}: injected {}, NMIs {}, halts polled {} slept {}, ignored {:?}",
        stats.injected, stats.nmis, stats.halts_polled, stats.halts_slept, stats.ignored
    );
}

const SYNC_MODES: [SyncMode; 4] = [
    SyncMode::Global,
    SyncMode::IoThread,
    SyncMode::Hybrid,
    SyncMode::Fine,
];

#[test]
fn linux_boots_on_the_user_irqchip_with_every_cpu_online() {
    if !hardware_kvm("linux_user_irqchip") {
        return;
    }
    if std::env::var("SMPLAB_LINUX_MATRIX").as_deref() == Ok("full") {
        for vcpus in [1, 2, 4, 8] {
            for sync in SYNC_MODES {
                check(vcpus, sync);
            }
        }
        // Debian's cloud flavour too, when it is there.
        if let Some(cloud) = cloud_bzimage() {
            for vcpus in [1, 2, 4, 8] {
                for sync in SYNC_MODES {
                    check_kernel(cloud, "cloud ", vcpus, sync);
                }
            }
        }
        return;
    }
    // Every sync mode and every N once.
    check(2, SyncMode::Hybrid);
    check(1, SyncMode::Global);
    check(4, SyncMode::IoThread);
    check(8, SyncMode::Fine);
}
