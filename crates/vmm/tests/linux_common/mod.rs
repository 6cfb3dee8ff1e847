//! What the Linux-guest tests (linux_boot.rs: the in-kernel irqchip;
//! linux_user_irqchip.rs: `--irqchip user`; linux_hostile.rs: the hostile
//! init) share: where the kernel is,
//! whether this host can boot it, an initramfs around one static init built
//! by build.rs, and one boot with a console capture. The kernel:
//! `$SMPLAB_LINUX_KERNEL`, else target/nested-host/vmlinuz, copied into the
//! nested AMD-V host with `--file`.

// Each test file uses a part of this module.
#![allow(dead_code)]

use smplab_record::host::{KvmBacking, KvmFacts};
use smplab_vmm::{run_vm, ConsoleSink, Irqchip, KernelImage, SyncMode, VmConfig, VmRun};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

pub const MEM_BYTES: u64 = 512 << 20;

/// One VM at a time: each has 512 MiB, and the nested host has 2 GiB.
static ONE_VM: Mutex<()> = Mutex::new(());
/// Boots so far in this process (names their console files).
static BOOTS: AtomicU32 = AtomicU32::new(0);

/// Whether this host can boot Linux guests; prints why not when it cannot
/// (PVM runs guest kernel code in KVM's instruction emulator: Linux cannot
/// boot there, docs/nested-host.md). With SMPLAB_REQUIRE_KVM=1 an unusable
/// hardware-style /dev/kvm is a failure.
pub fn hardware_kvm(test: &str) -> bool {
    let facts = KvmFacts::detect();
    let required = std::env::var("SMPLAB_REQUIRE_KVM").as_deref() == Ok("1");
    match facts.backing {
        KvmBacking::Hardware if facts.device_usable => true,
        KvmBacking::Hardware => {
            assert!(!required, "SMPLAB_REQUIRE_KVM=1 but /dev/kvm is unusable");
            eprintln!("note: {test} ran nowhere: /dev/kvm is not usable here");
            false
        }
        other => {
            eprintln!(
                "note: {test} ran nowhere: KVM here is {other:?}, not kvm_amd/kvm_intel; a Linux guest needs hardware-style KVM (run it in tools/nested-host/nested-host)"
            );
            false
        }
    }
}

pub fn kernel_path() -> PathBuf {
    std::env::var_os("SMPLAB_LINUX_KERNEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // The workspace root, lexically: inside the nested host only the
            // files given with --file exist.
            let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            let root = manifest
                .parent()
                .and_then(|p| p.parent())
                .unwrap_or(manifest);
            root.join("target/nested-host/vmlinuz")
        })
}

/// The bzImage, read once.
pub fn bzimage() -> &'static [u8] {
    static BZIMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    BZIMAGE.get_or_init(|| {
        let path = kernel_path();
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the Linux kernel {}: {e}; set SMPLAB_LINUX_KERNEL or copy it into the nested host with --file",
                path.display()
            )
        })
    })
}

/// Debian's `cloud` flavour kernel, a second stock kernel
/// (tools/nested-host/cloud-kernel writes it): `$SMPLAB_LINUX_CLOUD_KERNEL`,
/// else `vmlinuz-cloud` beside the kernel.
pub fn cloud_kernel_path() -> PathBuf {
    std::env::var_os("SMPLAB_LINUX_CLOUD_KERNEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| kernel_path().with_file_name("vmlinuz-cloud"))
}

/// The cloud kernel's bzImage, read once; `None` (with a note saying how to
/// get it) when it is not there: it is optional, only the full matrix boots it.
pub fn cloud_bzimage() -> Option<&'static [u8]> {
    static CLOUD: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    CLOUD
        .get_or_init(|| {
            let path = cloud_kernel_path();
            let read = std::fs::read(&path).ok();
            if read.is_none() {
                eprintln!(
                    "note: no cloud kernel at {} (tools/nested-host/cloud-kernel fetches it; copy it in with --file): the matrix boots the generic kernel only",
                    path.display()
                );
            }
            read
        })
        .as_deref()
}

/// A cpio "newc" archive: /dev/console (the init's stdio), /proc, /sys and
/// `init` as /init.
pub fn initramfs(init: &[u8]) -> Vec<u8> {
    assert!(
        !init.is_empty(),
        "build.rs could not build the init with gcc -static"
    );
    let mut cpio = Vec::new();
    /// Name, mode, device (major, minor), contents.
    type Entry<'a> = (&'a str, u32, (u32, u32), &'a [u8]);
    let entries: [Entry; 5] = [
        ("dev", 0o040_755, (0, 0), b""),
        ("dev/console", 0o020_600, (5, 1), b""),
        ("proc", 0o040_755, (0, 0), b""),
        ("sys", 0o040_755, (0, 0), b""),
        ("init", 0o100_755, (0, 0), init),
    ];
    for (ino, (name, mode, rdev, data)) in entries.into_iter().enumerate() {
        cpio_entry(&mut cpio, ino + 1, name, mode, rdev, data);
    }
    cpio_entry(&mut cpio, 0, "TRAILER!!!", 0, (0, 0), b"");
    cpio
}

fn cpio_entry(out: &mut Vec<u8>, ino: usize, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
    let fields = [
        ino,
        mode as usize,
        0,
        0,
        1,
        0,
        data.len(),
        0,
        0,
        rdev.0 as usize,
        rdev.1 as usize,
        name.len() + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for field in fields {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    out.resize(out.len().next_multiple_of(4), 0);
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// One boot to ask for.
pub struct Boot<'a> {
    pub initrd: &'a [u8],
    pub vcpus: u32,
    pub sync: SyncMode,
    pub irqchip: Irqchip,
    pub cmdline: String,
    pub timeout: Duration,
}

/// Boot the bzImage as `boot` says; the run and its console as text.
pub fn boot(boot: &Boot) -> (VmRun, String) {
    boot_kernel(bzimage(), boot)
}

/// Boot `kernel` (a bzImage or PVH ELF) as `boot` says.
pub fn boot_kernel(kernel: &[u8], boot: &Boot) -> (VmRun, String) {
    let mut config = VmConfig::new(KernelImage::Bytes(kernel.to_vec()));
    config.initrd = Some(boot.initrd.to_vec());
    config.vcpus = boot.vcpus;
    config.mem_bytes = MEM_BYTES;
    config.sync = boot.sync;
    config.irqchip = boot.irqchip;
    // A file, not a capture: a run that fails (a timeout) returns no
    // console, and its tail is what explains the failure.
    let console_path = std::env::temp_dir().join(format!(
        "smplab-linux-{}-{}.console",
        std::process::id(),
        BOOTS.fetch_add(1, Ordering::Relaxed)
    ));
    config.console = ConsoleSink::File(console_path.clone());
    config.timeout = Some(boot.timeout);
    // SMPLAB_LINUX_CMDLINE_EXTRA: words appended for a diagnosis (nokaslr,
    // loglevel=8, smplab.sym=ADDR for the hostile init).
    config.cmdline = match std::env::var("SMPLAB_LINUX_CMDLINE_EXTRA") {
        Ok(extra) => format!("{} {extra}", boot.cmdline),
        Err(_) => boot.cmdline.clone(),
    };
    let _one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let what = describe(boot);
    let started = Instant::now();
    let result = run_vm(&config);
    let console = std::fs::read(&console_path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let _ = std::fs::remove_file(&console_path);
    let run =
        result.unwrap_or_else(|e| panic!("{what}: {e}\nconsole tail:\n{}", tail(&console, 4000)));
    eprintln!(
        "{what}: {:.1} s, stopped by {:?}",
        started.elapsed().as_secs_f64(),
        run.stop
    );
    (run, console)
}

pub fn describe(boot: &Boot) -> String {
    let irqchip = match boot.irqchip {
        Irqchip::Kernel => "kernel",
        Irqchip::User => "user",
    };
    format!("x{} {} irqchip {irqchip}", boot.vcpus, boot.sync)
}

/// The last `chars` characters of the console, for a failure message.
pub fn tail(console: &str, chars: usize) -> String {
    let skip = console.chars().count().saturating_sub(chars);
    console.chars().skip(skip).collect()
}

/// The CPU list `0-{n-1}` (or `0`) that sysfs prints when all are online.
pub fn all_online(vcpus: u32) -> String {
    if vcpus == 1 {
        "0".into()
    } else {
        format!("0-{}", vcpus - 1)
    }
}

/// The rest of the first console line starting with `marker`.
pub fn marker_line<'a>(console: &'a str, marker: &str) -> Option<&'a str> {
    console.lines().find_map(|l| {
        let l = l.trim_end_matches(['\r', '\n']);
        l.find(marker).map(|at| &l[at + marker.len()..])
    })
}
