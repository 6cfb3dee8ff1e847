//! VM construction, PVH boot and the vCPU threads.

use crate::bus::{AddressSpace, BusBuilder, BusClient, ClientStats, SyncMode};
use crate::control::RunControl;
use crate::devices::window::{window_section, VcpuWindow, WindowCounts, WindowState};
use crate::devices::{
    ConsoleWriter, DebugExit, ExclusiveWorkDevice, PmTimer, ResultPort, Uart, WindowDevice,
    WorkDevice,
};
use crate::error::{RegisterDump, VmmError};
use crate::kvm_stats;
use crate::placement::{allowed_cpus, pin_current_thread};
use crate::{ConsoleSink, KernelImage, VmConfig, VmRun};
use kvm_bindings::{kvm_segment, kvm_userspace_memory_region, KVM_MAX_CPUID_ENTRIES};
use kvm_ioctls::{Cap, Kvm, VcpuExit, VcpuFd, VmFd};
use linux_loader::configurator::pvh::PvhBootConfigurator;
use linux_loader::configurator::{BootConfigurator, BootParams};
use linux_loader::loader::elf::start_info::{
    hvm_memmap_table_entry, hvm_modlist_entry, hvm_start_info, XEN_HVM_MEMMAP_TYPE_RAM,
    XEN_HVM_START_MAGIC_VALUE,
};
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::KernelLoader;
use smplab_record::vmm::VmmSection;
use std::io::Cursor;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vm_memory::{
    Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, GuestMemoryRegion,
    MemoryRegionAddress,
};
use vmm_sys_util::signal::{register_signal_handler, Killable, SIGRTMIN};

// The guest ABI's ports (docs/guest-abi.md).
pub const UART_PORT: u64 = 0x3f8;
pub const DEBUG_EXIT_PORT: u64 = 0x501;
pub const RESULT_PORT: u64 = 0x520;
pub const WORK_PORT: u64 = 0x530;
pub const PM_TIMER_PORT: u64 = 0x608;
pub const WINDOW_PORT: u64 = 0x540;

// Boot data layout in low memory (below the conventional 0x9fc00 RAM end).
const GDT_ADDR: u64 = 0x500;
const START_INFO_ADDR: u64 = 0x6000;
const MEMMAP_ADDR: u64 = 0x6040;
const MEMMAP_MAX_ENTRIES: usize = 8;
const MODLIST_ADDR: u64 = 0x6100;
const MODLIST_MAX_ENTRIES: usize = 120;
const CMDLINE_ADDR: u64 = 0x7000;
const CMDLINE_MAX_BYTES: usize = 0x1000;
const LOW_RAM_END: u64 = 0x9_fc00;
const HIGH_RAM_START: u64 = 0x10_0000;
/// RAM above this goes above 4 GiB, leaving room for the LAPIC/IOAPIC window.
const MMIO_HOLE_START: u64 = 0xc000_0000;
const FOUR_GIB: u64 = 0x1_0000_0000;
const MIN_MEM_BYTES: u64 = 2 << 20;
/// KVM on Intel needs three pages for the real-mode TSS below 4 GiB.
const TSS_ADDR: usize = 0xfffb_d000;

/// The real-time signal used to kick vCPU threads out of KVM_RUN.
fn kick_signal() -> i32 {
    SIGRTMIN()
}

extern "C" fn on_kick(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Nothing to do: the signal's only job is to make KVM_RUN return EINTR.
}

fn install_kick_handler() -> Result<(), VmmError> {
    // Process-wide and idempotent: installed once, the outcome remembered.
    static INSTALLED: OnceLock<Result<(), i32>> = OnceLock::new();
    let outcome = INSTALLED
        .get_or_init(|| register_signal_handler(kick_signal(), on_kick).map_err(|e| e.errno()));
    outcome.map_err(|errno| VmmError::Thread {
        name: "vCPU kick signal handler".into(),
        source: std::io::Error::from_raw_os_error(errno),
    })
}

/// Names of the exit reasons counted per vCPU, in counter order.
const EXIT_REASONS: [&str; 14] = [
    "io_in",
    "io_out",
    "mmio_read",
    "mmio_write",
    "hlt",
    "shutdown",
    "intr",
    "eagain",
    "internal_error",
    "fail_entry",
    "system_event",
    "irq_window_open",
    "memory_fault",
    "other",
];

#[derive(Clone, Copy)]
enum ExitReason {
    IoIn = 0,
    IoOut,
    MmioRead,
    MmioWrite,
    Hlt,
    Shutdown,
    Intr,
    Eagain,
    InternalError,
    FailEntry,
    SystemEvent,
    IrqWindowOpen,
    MemoryFault,
    Other,
}

/// What a vCPU thread hands back when it stops.
struct VcpuReport {
    index: u32,
    vcpu: VcpuFd,
    exits: [u64; EXIT_REASONS.len()],
    client: ClientStats,
    window: Option<WindowCounts>,
    outcome: Result<(), VmmError>,
}

/// Environment variable naming another KVM device node than /dev/kvm (used by
/// tests to simulate a host without KVM).
pub const KVM_DEVICE_ENV: &str = "SMPLAB_KVM_DEVICE";

/// Open /dev/kvm (or `$SMPLAB_KVM_DEVICE`), mapping failure to the "unavailable" error.
pub fn open_kvm() -> Result<Kvm, VmmError> {
    let path = std::env::var(KVM_DEVICE_ENV).unwrap_or_else(|_| "/dev/kvm".to_string());
    let c_path = std::ffi::CString::new(path).map_err(|_| VmmError::KvmUnavailable {
        source: kvm_ioctls::Error::new(libc::EINVAL),
    })?;
    Kvm::new_with_path(&c_path).map_err(|source| VmmError::KvmUnavailable { source })
}

fn read_kernel(image: &KernelImage) -> Result<Vec<u8>, VmmError> {
    match image {
        KernelImage::Bytes(bytes) => Ok(bytes.clone()),
        KernelImage::Path(path) => std::fs::read(path).map_err(|source| VmmError::KernelRead {
            path: path.clone(),
            source,
        }),
    }
}

/// RAM layout: `(guest address, bytes)` for each region.
fn ram_regions(mem_bytes: u64) -> Vec<(GuestAddress, usize)> {
    let low = mem_bytes.min(MMIO_HOLE_START);
    let mut regions = vec![(GuestAddress(0), low as usize)];
    if mem_bytes > low {
        regions.push((GuestAddress(FOUR_GIB), (mem_bytes - low) as usize));
    }
    regions
}

fn validate(config: &VmConfig, max_vcpus: u32) -> Result<(), VmmError> {
    if config.vcpus == 0 {
        return Err(VmmError::BadConfig("a VM needs at least 1 vCPU".into()));
    }
    if config.vcpus > max_vcpus {
        return Err(VmmError::TooManyVcpus {
            requested: config.vcpus,
            max: max_vcpus,
        });
    }
    if config.mem_bytes < MIN_MEM_BYTES {
        return Err(VmmError::BadConfig(format!(
            "guest memory {} bytes is below the minimum of {MIN_MEM_BYTES} bytes (2 MiB)",
            config.mem_bytes
        )));
    }
    if usize::try_from(config.mem_bytes).is_err() || config.mem_bytes > (1 << 46) {
        return Err(VmmError::Memory {
            bytes: config.mem_bytes,
            reason: "larger than this host can map".into(),
        });
    }
    let allowed = allowed_cpus();
    let named = config
        .placement
        .all_cpus()
        .iter()
        .chain(config.io_cpu.iter());
    for &cpu in named {
        if !allowed.contains(&cpu) {
            return Err(VmmError::Placement {
                thread: "vCPU/I/O".into(),
                cpus: vec![cpu],
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "host CPU {cpu} is not among the CPUs this process may use {allowed:?}"
                    ),
                ),
            });
        }
    }
    Ok(())
}

/// Loaded kernel: entry point and the end of its image.
struct Loaded {
    entry: u64,
    kernel_end: u64,
}

fn load_kernel(mem: &GuestMemoryMmap, kernel: &[u8]) -> Result<Loaded, VmmError> {
    if kernel.len() < 4 || &kernel[..4] != b"\x7fELF" {
        return Err(VmmError::BadKernel(
            "no ELF magic at the start of the file".into(),
        ));
    }
    if kernel.get(4) != Some(&2) || kernel.get(18) != Some(&62) {
        return Err(VmmError::BadKernel(
            "not a 64-bit x86-64 ELF (class or machine field)".into(),
        ));
    }
    let result = Elf::load(mem, None, &mut Cursor::new(kernel), None)
        .map_err(|e| VmmError::BadKernel(format!("{e}")))?;
    match result.pvh_boot_cap {
        PvhBootCapability::PvhEntryPresent(entry) => Ok(Loaded {
            entry: entry.raw_value(),
            kernel_end: result.kernel_end,
        }),
        _ => Err(VmmError::NoPvhEntry),
    }
}

fn boot_err(what: &str) -> impl FnOnce(vm_memory::GuestMemoryError) -> VmmError + '_ {
    move |e| VmmError::BootDataTooLarge(format!("{what}: {e}"))
}

/// Write the command line, modules, e820 map, GDT and hvm_start_info.
fn write_boot_data(
    mem: &GuestMemoryMmap,
    config: &VmConfig,
    kernel_end: u64,
) -> Result<(), VmmError> {
    // Command line, NUL-terminated.
    let cmdline = config.cmdline.as_bytes();
    if cmdline.len() >= CMDLINE_MAX_BYTES || cmdline.contains(&0) {
        return Err(VmmError::BadConfig(format!(
            "the command line must be under {CMDLINE_MAX_BYTES} bytes and contain no NUL byte"
        )));
    }
    let mut cmd = cmdline.to_vec();
    cmd.push(0);
    mem.write_slice(&cmd, GuestAddress(CMDLINE_ADDR))
        .map_err(boot_err("command line"))?;

    // Modules, page-aligned after the kernel (and never below 1 MiB).
    if config.modules.len() > MODLIST_MAX_ENTRIES {
        return Err(VmmError::BadConfig(format!(
            "{} modules given; at most {MODLIST_MAX_ENTRIES} are supported",
            config.modules.len()
        )));
    }
    let mut next = kernel_end.max(HIGH_RAM_START);
    let mut modlist = Vec::new();
    for (i, module) in config.modules.iter().enumerate() {
        next = next
            .checked_add(0xfff)
            .map(|n| n & !0xfff)
            .ok_or_else(|| VmmError::BootDataTooLarge("module address overflow".into()))?;
        mem.write_slice(module, GuestAddress(next)).map_err(|e| {
            VmmError::BootDataTooLarge(format!("module {i} ({} bytes): {e}", module.len()))
        })?;
        modlist.push(hvm_modlist_entry {
            paddr: next,
            size: module.len() as u64,
            cmdline_paddr: 0,
            reserved: 0,
        });
        next += module.len() as u64;
    }

    // e820 map: low RAM, RAM from 1 MiB, and RAM above 4 GiB if any.
    let mut memmap = vec![hvm_memmap_table_entry {
        addr: 0,
        size: LOW_RAM_END,
        type_: XEN_HVM_MEMMAP_TYPE_RAM,
        reserved: 0,
    }];
    for (start, len) in ram_regions(config.mem_bytes) {
        let start = start.raw_value().max(HIGH_RAM_START);
        let end = if start >= FOUR_GIB {
            start + len as u64
        } else {
            len as u64
        };
        if end > start {
            memmap.push(hvm_memmap_table_entry {
                addr: start,
                size: end - start,
                type_: XEN_HVM_MEMMAP_TYPE_RAM,
                reserved: 0,
            });
        }
    }
    debug_assert!(memmap.len() <= MEMMAP_MAX_ENTRIES);

    // A flat GDT, so segment reloads before the guest's own lgdt stay valid.
    let gdt: [u64; 4] = [
        0,
        0x00cf_9b00_0000_ffff, // 0x08: code, 32-bit, 4 GiB
        0x00cf_9300_0000_ffff, // 0x10: data, 4 GiB
        0x0000_8b00_0000_0067, // 0x18: TSS (busy)
    ];
    for (i, d) in gdt.iter().enumerate() {
        mem.write_obj(*d, GuestAddress(GDT_ADDR + 8 * i as u64))
            .map_err(boot_err("GDT"))?;
    }

    let start_info = hvm_start_info {
        magic: XEN_HVM_START_MAGIC_VALUE,
        version: 1,
        flags: 0,
        nr_modules: modlist.len() as u32,
        modlist_paddr: if modlist.is_empty() { 0 } else { MODLIST_ADDR },
        cmdline_paddr: CMDLINE_ADDR,
        rsdp_paddr: 0,
        memmap_paddr: MEMMAP_ADDR,
        memmap_entries: memmap.len() as u32,
        reserved: 0,
    };
    let mut params = BootParams::new(&start_info, GuestAddress(START_INFO_ADDR));
    params.set_sections(&memmap, GuestAddress(MEMMAP_ADDR));
    if !modlist.is_empty() {
        params.set_modules(&modlist, GuestAddress(MODLIST_ADDR));
    }
    PvhBootConfigurator::write_bootparams(&params, mem)
        .map_err(|e| VmmError::BootDataTooLarge(format!("PVH start info: {e}")))
}

fn segment(selector: u16, type_: u8, s: u8) -> kvm_segment {
    kvm_segment {
        base: 0,
        limit: 0xffff_ffff,
        selector,
        type_,
        present: 1,
        dpl: 0,
        db: 1,
        s,
        l: 0,
        g: 1,
        avl: 0,
        unusable: 0,
        padding: 0,
    }
}

/// PVH entry state: 32-bit protected mode, paging off, flat segments, %ebx = start info.
pub fn set_pvh_entry(vcpu: &VcpuFd, entry: u64) -> Result<(), VmmError> {
    let mut sregs = vcpu.get_sregs().map_err(VmmError::kvm("KVM_GET_SREGS"))?;
    sregs.cs = segment(0x08, 0xb, 1);
    let data = segment(0x10, 0x3, 1);
    sregs.ds = data;
    sregs.es = data;
    sregs.fs = data;
    sregs.gs = data;
    sregs.ss = data;
    sregs.tr = kvm_segment {
        limit: 0x67,
        g: 0,
        db: 0,
        ..segment(0x18, 0xb, 0)
    };
    sregs.gdt.base = GDT_ADDR;
    sregs.gdt.limit = 31;
    sregs.cr0 = 0x11; // PE | ET
    sregs.cr4 = 0;
    sregs.efer = 0;
    vcpu.set_sregs(&sregs)
        .map_err(VmmError::kvm("KVM_SET_SREGS"))?;
    let mut regs = vcpu.get_regs().map_err(VmmError::kvm("KVM_GET_REGS"))?;
    regs.rflags = 0x2;
    regs.rip = entry;
    regs.rbx = START_INFO_ADDR;
    regs.rsp = 0;
    vcpu.set_regs(&regs)
        .map_err(VmmError::kvm("KVM_SET_REGS"))?;
    Ok(())
}

pub fn set_cpuid(kvm: &Kvm, vcpu: &VcpuFd, index: u32) -> Result<(), VmmError> {
    let mut cpuid = kvm
        .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
        .map_err(VmmError::kvm("KVM_GET_SUPPORTED_CPUID"))?;
    for entry in cpuid.as_mut_slice() {
        match entry.function {
            // Initial APIC id in EBX[31:24].
            1 => entry.ebx = (entry.ebx & 0x00ff_ffff) | (index << 24),
            // x2APIC id in EDX of the topology leaves.
            0xb | 0x1f => entry.edx = index,
            _ => {}
        }
    }
    vcpu.set_cpuid2(&cpuid)
        .map_err(VmmError::kvm("KVM_SET_CPUID2"))
}

/// Ask for transparent huge pages on guest RAM (as QEMU does): with THP in
/// `madvise` mode, the host's default, RAM is otherwise backed by 4 KiB pages
/// and KVM can only map the guest with 4 KiB entries, which costs TLB reach on
/// memory-heavy workloads. Advice only: failure leaves 4 KiB pages.
fn advise_huge_pages(mem: &GuestMemoryMmap) {
    for region in mem.iter() {
        let Ok(host) = mem.get_host_address(region.start_addr()) else {
            continue;
        };
        // SAFETY: `host` and `len` describe one mapping owned by `mem`, which
        // outlives this call; madvise(MADV_HUGEPAGE) changes no contents and no
        // protection, it only lets the kernel back the range with huge pages.
        unsafe {
            libc::madvise(
                host.cast::<libc::c_void>(),
                region.len() as usize,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

fn register_memory(vm: &VmFd, mem: &GuestMemoryMmap) -> Result<(), VmmError> {
    for (slot, region) in mem.iter().enumerate() {
        let host = region
            .get_host_address(MemoryRegionAddress(0))
            .map_err(|e| VmmError::Memory {
                bytes: region.len(),
                reason: e.to_string(),
            })?;
        let region_desc = kvm_userspace_memory_region {
            slot: slot as u32,
            flags: 0,
            guest_phys_addr: region.start_addr().raw_value(),
            memory_size: region.len(),
            userspace_addr: host as u64,
        };
        // SAFETY: the host range is a live mmap owned by `mem`. In run_vm `mem` is
        // declared before the VM and every vCPU, so it is dropped after them (and
        // leaked if a vCPU thread could not be stopped); slots do not overlap.
        unsafe { vm.set_user_memory_region(region_desc) }
            .map_err(VmmError::kvm("KVM_SET_USER_MEMORY_REGION"))?;
    }
    Ok(())
}

/// The buffer of a [`ConsoleSink::Capture`] console.
type CapturedConsole = Option<Arc<Mutex<Vec<u8>>>>;

fn console_writer(sink: &ConsoleSink) -> Result<(ConsoleWriter, CapturedConsole), VmmError> {
    Ok(match sink {
        ConsoleSink::Stdout => (ConsoleWriter::Stdout(std::io::stdout()), None),
        ConsoleSink::File(path) => {
            let file = std::fs::File::create(path).map_err(|source| VmmError::Console {
                path: path.clone(),
                source,
            })?;
            (ConsoleWriter::File(std::io::BufWriter::new(file)), None)
        }
        ConsoleSink::Capture => {
            let buf = Arc::new(Mutex::new(Vec::new()));
            (ConsoleWriter::Capture(buf.clone()), Some(buf))
        }
        ConsoleSink::Discard => (ConsoleWriter::Discard, None),
    })
}

/// Build and run a VM until the guest writes the debug-exit port, crashes, or
/// the timeout passes.
pub fn run_vm(config: &VmConfig) -> Result<VmRun, VmmError> {
    let wall_start = Instant::now();
    // First, so a run that fails before its guest is ready withdraws from the gate.
    let gate_ticket = config.start_gate.as_ref().map(crate::StartGate::ticket);
    let kvm = open_kvm()?;
    if !kvm.check_extension(Cap::Irqchip) || !kvm.check_extension(Cap::UserMemory) {
        return Err(VmmError::KvmCapabilityMissing(
            "KVM_CAP_IRQCHIP / KVM_CAP_USER_MEMORY",
        ));
    }
    let max_vcpus = kvm.get_max_vcpus().min(u32::MAX as usize) as u32;
    validate(config, max_vcpus)?;
    let kernel = read_kernel(&config.kernel)?;

    let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(config.mem_bytes)).map_err(|e| {
        VmmError::Memory {
            bytes: config.mem_bytes,
            reason: e.to_string(),
        }
    })?;
    advise_huge_pages(&mem);
    let loaded = load_kernel(&mem, &kernel)?;
    write_boot_data(&mem, config, loaded.kernel_end)?;

    let vm = kvm.create_vm().map_err(VmmError::kvm("KVM_CREATE_VM"))?;
    // Intel needs the TSS address before the irqchip; elsewhere it is harmless.
    let _ = vm.set_tss_address(TSS_ADDR);
    vm.create_irq_chip()
        .map_err(VmmError::kvm("KVM_CREATE_IRQCHIP"))?;
    register_memory(&vm, &mem)?;

    let mut vcpus = Vec::new();
    for index in 0..config.vcpus {
        let vcpu = vm
            .create_vcpu(u64::from(index))
            .map_err(VmmError::kvm("KVM_CREATE_VCPU"))?;
        set_cpuid(&kvm, &vcpu, index)?;
        if index == 0 {
            set_pvh_entry(&vcpu, loaded.entry)?;
        }
        vcpus.push(vcpu);
    }
    let tsc_hz = vcpus
        .first()
        .and_then(|v| v.get_tsc_khz().ok())
        .map(|khz| u64::from(khz) * 1000)
        .filter(|&hz| hz > 0)
        .unwrap_or_else(crate::devices::pm_timer::calibrate_tsc_hz);

    // Devices.
    let control = Arc::new(RunControl::new());
    let (console, captured) = console_writer(&config.console)?;
    let mut builder = BusBuilder::new();
    let bus_err = |e: crate::bus::BusError| VmmError::BadConfig(e.to_string());
    let uart = builder
        .add_exclusive(AddressSpace::Pio, UART_PORT, 8, "uart", Uart::new(console))
        .map_err(bus_err)?;
    builder
        .add_concurrent(
            AddressSpace::Pio,
            DEBUG_EXIT_PORT,
            2,
            "debug_exit",
            Arc::new(DebugExit::new(control.clone())),
        )
        .map_err(bus_err)?;
    let result_port = builder
        .add_exclusive(
            AddressSpace::Pio,
            RESULT_PORT,
            1,
            "result",
            ResultPort::new(),
        )
        .map_err(bus_err)?;
    if config.work_exclusive {
        builder
            .add_exclusive(
                AddressSpace::Pio,
                WORK_PORT,
                4,
                "work",
                ExclusiveWorkDevice::new(config.work_ns),
            )
            .map_err(bus_err)?;
    } else {
        builder
            .add_concurrent(
                AddressSpace::Pio,
                WORK_PORT,
                4,
                "work",
                Arc::new(WorkDevice::new(config.work_ns)),
            )
            .map_err(bus_err)?;
    }
    builder
        .add_concurrent(
            AddressSpace::Pio,
            PM_TIMER_PORT,
            4,
            "pm_timer",
            Arc::new(PmTimer::new(tsc_hz)),
        )
        .map_err(bus_err)?;
    let window = Arc::new(WindowState::default());
    let vcpu_stats = vcpus.iter().map(|v| kvm_stats::open_stats(v).ok());
    let window_device = WindowDevice::new(
        window.clone(),
        gate_ticket,
        vcpu_stats.collect(),
        control.clone(),
    );
    builder
        .add_concurrent(
            AddressSpace::Pio,
            WINDOW_PORT,
            4,
            "window",
            Arc::new(window_device),
        )
        .map_err(bus_err)?;
    let bus = builder
        .build(config.sync, config.io_cpu)
        .map_err(|source| VmmError::Thread {
            name: "smplab-io".into(),
            source,
        })?;

    let vm_stats_file = kvm_stats::open_stats(&vm).ok();
    install_kick_handler()?;

    // vCPU threads.
    let run_start = Instant::now();
    let mut handles: Vec<JoinHandle<VcpuReport>> = Vec::new();
    let mut spawn_error = None;
    for (index, vcpu) in vcpus.into_iter().enumerate() {
        let index = index as u32;
        let client = bus.client();
        let control_for_thread = control.clone();
        let cpus = config.placement.cpus_for_vcpu(index as usize);
        let mem_bytes = config.mem_bytes;
        let name = format!("smplab-vcpu-{index}");
        let vcpu_window = VcpuWindow::new(window.clone());
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || {
                let control = &control_for_thread;
                vcpu_thread(index, vcpu, client, control, cpus, mem_bytes, vcpu_window)
            });
        match spawned {
            Ok(handle) => handles.push(handle),
            Err(source) => {
                spawn_error = Some(VmmError::Thread { name, source });
                control.request_stop();
                break;
            }
        }
    }

    let stopped = spawn_error.is_some() || control.wait_for_stop(config.timeout);
    control.request_stop();
    let run_wall = run_start.elapsed();
    let mut reports = match stop_vcpus(handles) {
        Ok(reports) => reports,
        Err(e) => {
            // A vCPU thread may still be inside KVM_RUN: keep the guest memory
            // mapped for it (leaked) rather than unmap it under the VM.
            std::mem::forget(mem);
            return Err(e);
        }
    };
    let io_stats = bus.shutdown();

    // Measurements.
    let names = bus.entry_names();
    let mut merged: Option<ClientStats> = None;
    let mut section = VmmSection {
        sync: config.sync.to_string(),
        vcpus: config.vcpus,
        ..VmmSection::default()
    };
    let mut first_error = spawn_error;
    let windows = reports.iter_mut().map(|r| r.window.take()).collect();
    section.window = window_section(&window, windows, &EXIT_REASONS, &names, config.sync);
    for report in &reports {
        section.exits_per_vcpu.push(
            EXIT_REASONS
                .iter()
                .zip(report.exits)
                .filter(|(_, n)| *n > 0)
                .map(|(name, n)| (name.to_string(), n))
                .collect(),
        );
        section.kvm_vcpu_stats.push(
            kvm_stats::open_stats(&report.vcpu)
                .and_then(|f| kvm_stats::read_stats(&f))
                .unwrap_or_default(),
        );
        match &mut merged {
            None => merged = Some(client_clone(&report.client)),
            Some(m) => m.merge(&report.client),
        }
    }
    if let Some(m) = &merged {
        section.exit_latency = m.latency_by_device(&names, config.sync);
        if config.sync == SyncMode::Global {
            section.global_lock_wait = Some(smplab_record::LatencyHistogram::from_hdr(
                &m.global_lock_wait,
            ));
        }
    }
    section.io_thread = io_stats;
    section.unclaimed_accesses = bus.unclaimed_accesses();
    section.kvm_vm_stats = vm_stats_file
        .as_ref()
        .and_then(|f| kvm_stats::read_stats(f).ok())
        .unwrap_or_default();
    section.run_wall_ns = Some(run_wall.as_nanos() as u64);
    section.tsc_hz = Some(tsc_hz);
    let (rss, guest_resident) = crate::rss::measure(&mem);
    section.rss_bytes = rss;
    section.guest_resident_bytes = guest_resident;
    section.vmm_overhead_bytes = match (rss, guest_resident) {
        (Some(r), Some(g)) => Some(r.saturating_sub(g)),
        _ => None,
    };

    for report in reports {
        if let Err(e) = report.outcome {
            if first_error.is_none() {
                first_error = Some(e);
            }
        } else if !stopped && report.index == 0 && first_error.is_none() {
            first_error = Some(VmmError::Timeout {
                seconds: config.timeout.unwrap_or_default().as_secs_f64(),
                registers: RegisterDump::capture(0, &report.vcpu),
            });
        }
    }
    // The VM and vCPU fds are gone now; the guest memory may be unmapped.
    drop(vm);
    if let Some(e) = first_error {
        return Err(e);
    }

    let result = {
        let mut port = result_port.lock().unwrap_or_else(|e| e.into_inner());
        port.take()
    };
    {
        let mut uart = uart.lock().unwrap_or_else(|e| e.into_inner());
        let _ = uart.flush();
    }
    let console = captured
        .map(|buf| std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default();
    let exit_code = control.exit_code().ok_or_else(|| VmmError::VcpuThread {
        vcpu: 0,
        reason: "the VM stopped without an exit code".into(),
    })?;
    section.exit_code = Some(exit_code);
    Ok(VmRun {
        exit_code,
        result,
        console,
        wall: wall_start.elapsed(),
        section,
    })
}

fn client_clone(stats: &ClientStats) -> ClientStats {
    let mut fresh = ClientStats {
        latency: stats
            .latency
            .iter()
            .map(|_| smplab_record::histogram::new_histogram())
            .collect(),
        global_lock_wait: smplab_record::histogram::new_histogram(),
        unclaimed_reads: 0,
        unclaimed_writes: 0,
    };
    fresh.merge(stats);
    fresh
}

/// Kick every vCPU thread out of KVM_RUN until all have returned, then join them.
fn stop_vcpus(handles: Vec<JoinHandle<VcpuReport>>) -> Result<Vec<VcpuReport>, VmmError> {
    let give_up = Instant::now() + Duration::from_secs(30);
    // A signal that lands just before a thread enters KVM_RUN is lost, so kick
    // repeatedly until every thread has seen the stop flag.
    while handles.iter().any(|h| !h.is_finished()) {
        for handle in handles.iter().filter(|h| !h.is_finished()) {
            let _ = handle.kill(kick_signal());
        }
        if Instant::now() > give_up {
            return Err(VmmError::VcpuThread {
                vcpu: 0,
                reason: "a vCPU thread did not stop within 30 s of being kicked".into(),
            });
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut reports = Vec::new();
    for (index, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(report) => reports.push(report),
            Err(_) => {
                return Err(VmmError::VcpuThread {
                    vcpu: index as u32,
                    reason: "the vCPU thread panicked (a bug in smplab-vmm)".into(),
                })
            }
        }
    }
    Ok(reports)
}

fn vcpu_thread(
    index: u32,
    mut vcpu: VcpuFd,
    mut client: BusClient,
    control: &RunControl,
    cpus: Option<Vec<usize>>,
    mem_bytes: u64,
    mut window: VcpuWindow,
) -> VcpuReport {
    /// Requests a VM stop when the thread ends for any reason, a panic included,
    /// so the waiting thread can never wait on a vCPU that is gone.
    struct StopOnExit<'a>(&'a RunControl);
    impl Drop for StopOnExit<'_> {
        fn drop(&mut self) {
            self.0.request_stop();
        }
    }
    let _stop_on_exit = StopOnExit(control);
    let mut exits = [0u64; EXIT_REASONS.len()];
    let outcome = (|| {
        if let Some(cpus) = &cpus {
            pin_current_thread(cpus).map_err(|source| VmmError::Placement {
                thread: format!("smplab-vcpu-{index}"),
                cpus: cpus.clone(),
                source,
            })?;
        }
        run_loop(
            index,
            &mut vcpu,
            &mut client,
            control,
            &mut exits,
            mem_bytes,
            &mut window,
        )
    })();
    VcpuReport {
        index,
        vcpu,
        exits,
        window: window.finish(&exits, &client.stats),
        client: client.stats,
        outcome,
    }
}

fn run_loop(
    index: u32,
    vcpu: &mut VcpuFd,
    client: &mut BusClient,
    control: &RunControl,
    exits: &mut [u64; EXIT_REASONS.len()],
    mem_bytes: u64,
    window: &mut VcpuWindow,
) -> Result<(), VmmError> {
    let crash = |vcpu: &VcpuFd, reason: String| VmmError::GuestCrash {
        vcpu: index,
        reason,
        registers: RegisterDump::capture(index, vcpu),
    };
    loop {
        if control.should_stop() {
            return Ok(());
        }
        let mut pending_pio = None;
        let ran = vcpu.run();
        // Before the exit is handled and counted: split counts at window edges.
        window.observe(&exits[..], &client.stats);
        let reason = match ran {
            // The access width is only in kvm_run (the slice kvm-ioctls hands out
            // is size * count bytes), so port I/O is handled after the match.
            Ok(VcpuExit::IoIn(port, _)) => {
                pending_pio = Some((port, true));
                ExitReason::IoIn
            }
            Ok(VcpuExit::IoOut(port, _)) => {
                pending_pio = Some((port, false));
                ExitReason::IoOut
            }
            Ok(VcpuExit::MmioRead(addr, data)) => {
                if !client.read(AddressSpace::Mmio, addr, data) {
                    exits[ExitReason::MmioRead as usize] += 1;
                    return Err(VmmError::GuestMemoryFault {
                        vcpu: index,
                        addr,
                        mem_bytes,
                        registers: RegisterDump::capture(index, vcpu),
                    });
                }
                ExitReason::MmioRead
            }
            Ok(VcpuExit::MmioWrite(addr, data)) => {
                if !client.write(AddressSpace::Mmio, addr, data) {
                    exits[ExitReason::MmioWrite as usize] += 1;
                    return Err(VmmError::GuestMemoryFault {
                        vcpu: index,
                        addr,
                        mem_bytes,
                        registers: RegisterDump::capture(index, vcpu),
                    });
                }
                ExitReason::MmioWrite
            }
            Ok(VcpuExit::Hlt) => ExitReason::Hlt,
            Ok(VcpuExit::IrqWindowOpen) => ExitReason::IrqWindowOpen,
            Ok(VcpuExit::Shutdown) => {
                exits[ExitReason::Shutdown as usize] += 1;
                return Err(crash(
                    vcpu,
                    "triple fault or shutdown (KVM_EXIT_SHUTDOWN)".into(),
                ));
            }
            Ok(VcpuExit::InternalError) => {
                exits[ExitReason::InternalError as usize] += 1;
                // SAFETY: exit_reason is KVM_EXIT_INTERNAL_ERROR, so the `internal`
                // member of the union is the one KVM filled.
                let suberror = unsafe { vcpu.get_kvm_run().__bindgen_anon_1.internal.suberror };
                let what = if suberror == 1 {
                    "emulation failure: the guest ran an instruction KVM's emulator cannot handle (on PVM hosts also a fault with no usable IDT)"
                } else {
                    "KVM internal error"
                };
                return Err(crash(
                    vcpu,
                    format!("{what} (KVM_EXIT_INTERNAL_ERROR, suberror {suberror})"),
                ));
            }
            Ok(VcpuExit::FailEntry(hw_reason, cpu)) => {
                exits[ExitReason::FailEntry as usize] += 1;
                return Err(crash(
                    vcpu,
                    format!("VM entry failed (KVM_EXIT_FAIL_ENTRY, hardware reason {hw_reason:#x} on host CPU {cpu}): invalid guest state"),
                ));
            }
            Ok(VcpuExit::SystemEvent(kind, _)) => {
                exits[ExitReason::SystemEvent as usize] += 1;
                return Err(crash(
                    vcpu,
                    format!("guest requested system event {kind} (shutdown/reset/crash)"),
                ));
            }
            Ok(VcpuExit::MemoryFault { gpa, .. }) => {
                exits[ExitReason::MemoryFault as usize] += 1;
                return Err(VmmError::GuestMemoryFault {
                    vcpu: index,
                    addr: gpa,
                    mem_bytes,
                    registers: RegisterDump::capture(index, vcpu),
                });
            }
            Ok(VcpuExit::Exception) | Ok(VcpuExit::Unknown) => {
                exits[ExitReason::Other as usize] += 1;
                return Err(crash(vcpu, "unhandled exception exit".into()));
            }
            Ok(_) => ExitReason::Other,
            Err(e) if e.errno() == libc::EINTR => ExitReason::Intr,
            Err(e) if e.errno() == libc::EAGAIN => {
                // PVM: an AP not yet started by INIT/SIPI returns EAGAIN instead of
                // blocking in the kernel. Back off briefly instead of spinning.
                std::thread::sleep(Duration::from_micros(50));
                ExitReason::Eagain
            }
            Err(e) if e.errno() == libc::EFAULT => {
                exits[ExitReason::MemoryFault as usize] += 1;
                return Err(VmmError::GuestMemoryFault {
                    vcpu: index,
                    addr: 0,
                    mem_bytes,
                    registers: RegisterDump::capture(index, vcpu),
                });
            }
            Err(source) => {
                return Err(VmmError::Kvm {
                    call: "KVM_RUN",
                    source,
                })
            }
        };
        if let Some((port, input)) = pending_pio {
            handle_pio(vcpu, client, port, input);
        }
        exits[reason as usize] += 1;
    }
}

/// The port I/O of the exit just taken, split into the guest's accesses: `size`
/// bytes each, `count` times (string I/O such as `rep outsb` repeats the access).
fn handle_pio(vcpu: &mut VcpuFd, client: &mut BusClient, port: u16, input: bool) {
    let run = vcpu.get_kvm_run();
    // SAFETY: called right after KVM_RUN returned KVM_EXIT_IO, so `io` is the
    // union member KVM filled in.
    let io = unsafe { run.__bindgen_anon_1.io };
    let size = usize::from(io.size).clamp(1, 8);
    let len = size.saturating_mul(io.count as usize);
    let base = (run as *mut kvm_bindings::kvm_run).cast::<u8>();
    // SAFETY: for a port-I/O exit KVM puts the `size * count` data bytes at
    // `data_offset` inside the kvm_run mapping of this vCPU (kvm-ioctls builds its
    // IoIn/IoOut slices the same way); the slice is the only live reference into
    // kvm_run and ends with this function, before the next KVM_RUN.
    let data = unsafe { std::slice::from_raw_parts_mut(base.add(io.data_offset as usize), len) };
    for chunk in data.chunks_mut(size) {
        if input {
            client.read(AddressSpace::Pio, u64::from(port), chunk);
        } else {
            client.write(AddressSpace::Pio, u64::from(port), chunk);
        }
    }
}

/// The KVM capabilities smplab-vmm uses and whether this host has them (the
/// maximum vCPU count is [`max_vcpus`]).
pub fn kvm_capabilities() -> Result<Vec<(String, bool)>, VmmError> {
    let kvm = open_kvm()?;
    let mut caps: Vec<(String, bool)> = [
        ("KVM_CAP_IRQCHIP", Cap::Irqchip),
        ("KVM_CAP_USER_MEMORY", Cap::UserMemory),
        ("KVM_CAP_SET_TSS_ADDR", Cap::SetTssAddr),
        ("KVM_CAP_EXT_CPUID", Cap::ExtCpuid),
        ("KVM_CAP_MP_STATE", Cap::MpState),
        ("KVM_CAP_IMMEDIATE_EXIT", Cap::ImmediateExit),
        ("KVM_CAP_GET_TSC_KHZ", Cap::GetTscKhz),
        ("KVM_CAP_TSC_DEADLINE_TIMER", Cap::TscDeadlineTimer),
        ("KVM_CAP_X2APIC_API", Cap::X2ApicApi),
    ]
    .into_iter()
    .map(|(name, cap)| (name.to_string(), kvm.check_extension(cap)))
    .collect();
    caps.push((
        "KVM_CAP_BINARY_STATS_FD".to_string(),
        kvm.check_extension_raw(kvm_stats::KVM_CAP_BINARY_STATS_FD) > 0,
    ));
    Ok(caps)
}

/// The maximum number of vCPUs KVM allows per VM on this host.
pub fn max_vcpus() -> Result<u32, VmmError> {
    Ok(open_kvm()?.get_max_vcpus().min(u32::MAX as usize) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_with(modules: Vec<Vec<u8>>, cmdline: &str, mem_bytes: u64) -> VmConfig {
        let mut config = VmConfig::new(KernelImage::Bytes(Vec::new()));
        config.modules = modules;
        config.cmdline = cmdline.to_string();
        config.mem_bytes = mem_bytes;
        config
    }

    #[test]
    fn boot_data_follows_the_pvh_contract() {
        let mem_bytes = 32 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let modules = vec![b"workload".to_vec(), vec![7u8; 5000]];
        let config = config_with(modules.clone(), "cpus=2 idle=poll", mem_bytes);
        write_boot_data(&mem, &config, 0x12_3456).unwrap();

        let info: hvm_start_info = mem.read_obj(GuestAddress(START_INFO_ADDR)).unwrap();
        assert_eq!(info.magic, XEN_HVM_START_MAGIC_VALUE);
        assert_eq!(info.version, 1);
        let mut cmd = vec![0u8; 17];
        mem.read_slice(&mut cmd, GuestAddress(info.cmdline_paddr))
            .unwrap();
        assert_eq!(&cmd, b"cpus=2 idle=poll\0");

        assert_eq!(info.nr_modules, 2);
        let mut previous_end = 0x12_3456;
        for (i, module) in modules.iter().enumerate() {
            let entry: hvm_modlist_entry = mem
                .read_obj(GuestAddress(info.modlist_paddr + 32 * i as u64))
                .unwrap();
            assert_eq!(entry.size, module.len() as u64);
            assert_eq!(entry.paddr % 0x1000, 0, "modules are page-aligned");
            assert!(entry.paddr >= previous_end, "modules follow the kernel");
            let mut bytes = vec![0u8; module.len()];
            mem.read_slice(&mut bytes, GuestAddress(entry.paddr))
                .unwrap();
            assert_eq!(&bytes, module);
            previous_end = entry.paddr + entry.size;
        }

        let ram: Vec<(u64, u64)> = (0..info.memmap_entries)
            .map(|i| {
                let e: hvm_memmap_table_entry = mem
                    .read_obj(GuestAddress(info.memmap_paddr + 24 * u64::from(i)))
                    .unwrap();
                assert_eq!(e.type_, XEN_HVM_MEMMAP_TYPE_RAM);
                (e.addr, e.size)
            })
            .collect();
        assert_eq!(
            ram,
            vec![
                (0, LOW_RAM_END),
                (HIGH_RAM_START, mem_bytes - HIGH_RAM_START)
            ]
        );
    }

    #[test]
    fn memory_above_the_hole_is_mapped_above_4_gib() {
        let regions = ram_regions(4 << 30);
        assert_eq!(regions[0], (GuestAddress(0), MMIO_HOLE_START as usize));
        assert_eq!(regions[1], (GuestAddress(FOUR_GIB), (1 << 30) as usize));
        assert_eq!(ram_regions(64 << 20).len(), 1);
    }

    #[test]
    fn oversized_boot_data_is_an_error() {
        let mem_bytes = 4 << 20;
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(mem_bytes)).unwrap();
        let too_big = config_with(vec![vec![0u8; 8 << 20]], "", mem_bytes);
        let err = write_boot_data(&mem, &too_big, 0x10_0000).unwrap_err();
        assert!(matches!(err, VmmError::BootDataTooLarge(_)), "{err}");
        assert_eq!(err.exit_status(), smplab_record::exit::RESOURCE_LIMIT);
        let long_cmdline = config_with(Vec::new(), &"x".repeat(5000), mem_bytes);
        assert!(matches!(
            write_boot_data(&mem, &long_cmdline, 0x10_0000),
            Err(VmmError::BadConfig(_))
        ));
        let nul = config_with(Vec::new(), "a\0b", mem_bytes);
        assert!(write_boot_data(&mem, &nul, 0x10_0000).is_err());
    }

    #[test]
    fn non_elf_and_wrong_machine_are_bad_kernels() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&ram_regions(4 << 20)).unwrap();
        for bytes in [
            &b""[..],
            b"\x7fEL",
            b"MZ\x90\x00 not elf",
            b"\x7fELF\x01\x01\x01",
        ] {
            assert!(matches!(
                load_kernel(&mem, bytes),
                Err(VmmError::BadKernel(_))
            ));
        }
        let mut elf = crate::test_guest::GuestProgram::default().elf();
        elf[18] = 3; // EM_386
        assert!(matches!(
            load_kernel(&mem, &elf),
            Err(VmmError::BadKernel(_))
        ));
        // Truncated program headers.
        let elf = crate::test_guest::GuestProgram::default().elf();
        assert!(load_kernel(&mem, &elf[..100]).is_err());
        // A segment beyond guest memory.
        let far = crate::test_guest::pvh_elf(0x10_0000, &[(0x4000_0000, vec![0x90; 16])]);
        assert!(matches!(
            load_kernel(&mem, &far),
            Err(VmmError::BadKernel(_))
        ));
    }
}
