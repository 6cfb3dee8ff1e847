//! Running a VM: build the [`Vm`], its devices and [`Vcpu`]s from a [`VmConfig`],
//! run one thread per vCPU until the guest exits, crashes or times out, stop them
//! and collect the record section.
//!
//! Threads: the caller's thread (builds, waits, stops, collects), one thread per
//! vCPU (`smplab-vcpu-N`), the I/O thread (`smplab-io`, iothread and hybrid
//! modes only), and the block device's completion thread (`smplab-blk`, when
//! the config has a block device; pinned per `BlockConfig::thread_cpus`).
//!
//! Lock order (a thread holding a lock only ever takes locks further down):
//! 1. `RunControl` state (stop request, exit code): held for a few stores, never
//!    while taking another lock.
//! 2. A vCPU's `Kicker` target: taken by the waiting thread to kick, by the vCPU
//!    thread to register itself; nothing else is taken under it (the signal and
//!    the waker need no lock).
//! 3. The bus's global lock (`global` mode), then
//! 4. one device's own lock (an exclusive device). The I/O thread takes only
//!    device locks; no device handler takes a bus lock, and the debug-exit device
//!    takes only (1). The console capture buffer and the result port are read
//!    after every vCPU and the I/O thread stopped.
//! 5. With `--irqchip user`, the interrupt-controller models' event sink
//!    (`user_irqchip::VmSink`, called inside (3)/(4)) takes a vCPU's `Kicker`
//!    target (2), whose waker takes that vCPU's `HaltWaiter` mutex, or the timer
//!    thread's state, or the EOI queue: leaves under which nothing else is
//!    taken, and (2) is never held while taking (3) or (4), so no cycle.
//! 6. The block device's state lock (taken inside a guest access or on its
//!    completion thread), then its interrupt line: KVM_IRQ_LINE, or the
//!    IOAPIC model's lock and (5) below it. Nothing takes the block device's
//!    lock under the IOAPIC's.
//!
//! Stopping: [`RunControl::request_stop`] first, then one [`Kicker::kick`] per
//! vCPU (see [`crate::vcpu`]); no re-signalling.

use crate::boot::{load_guest, read_kernel, BootEntry, MIN_MEM_BYTES};
use crate::collect::{Collector, VmMeasurements};
use crate::control::RunControl;
use crate::devices::block::GuestTsc;
use crate::devices::window::{window_section, VcpuWindow, WindowState};
use crate::devices::WindowDevice;
use crate::error::VmmError;
use crate::irq_route::IrqRoute;
use crate::placement::{allowed_cpus, pin_current_thread};
use crate::user_irqchip::{ResetState, UserIrqchip};
use crate::vcpu::{Kicker, Vcpu};
use crate::vm::{open_kvm, Irqchip, Vm};
use crate::{GuestStop, VmConfig, VmRun};
use attach::{attach_devices, Devices};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

mod attach;

// The guest ABI's ports (docs/guest-abi.md).
pub const UART_PORT: u64 = 0x3f8;
pub const DEBUG_EXIT_PORT: u64 = 0x501;
pub const RESULT_PORT: u64 = 0x520;
pub const WORK_PORT: u64 = 0x530;
pub const PM_TIMER_PORT: u64 = 0x608;
pub const WINDOW_PORT: u64 = 0x540;
/// The i8042's data port (its command port is 4 above); only its reset pulse
/// is modelled (`devices::power`).
pub const I8042_PORT: u64 = 0x60;
/// The UART's ISA interrupt, on the IOAPIC's pin 4 (the ACPI DSDT's COM1).
pub const UART_IRQ_PIN: u32 = 4;

/// How long the stopping thread waits for kicked vCPU threads to return before
/// it reports a bug (a kick is never lost, so this only catches a stuck thread).
const STOP_GIVE_UP: Duration = Duration::from_secs(30);

/// The guest's TSC offset against the host's: vCPU 0's TSC MSR read next to
/// the host TSC (0 on PVM hosts, which give the guest the raw host TSC; KVM
/// on VT-x/AMD-V offsets it). An MSR that cannot be read counts as 0.
fn guest_tsc_offset(vcpu: &kvm_ioctls::VcpuFd) -> u64 {
    const IA32_TSC: u32 = 0x10;
    let Ok(mut msrs) = kvm_bindings::Msrs::from_entries(&[kvm_bindings::kvm_msr_entry {
        index: IA32_TSC,
        ..Default::default()
    }]) else {
        return 0;
    };
    // SAFETY: rdtsc has no memory effects; every x86-64 CPU has it.
    let host = unsafe { core::arch::x86_64::_rdtsc() };
    match vcpu.get_msrs(&mut msrs) {
        Ok(1) => msrs.as_slice()[0].data.wrapping_sub(host),
        _ => 0,
    }
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

/// What a vCPU thread hands back when it stops.
struct VcpuReport {
    vcpu: Vcpu,
    outcome: Result<(), VmmError>,
}

/// A running vCPU thread and the handle that kicks it.
struct VcpuThread {
    handle: JoinHandle<VcpuReport>,
    kicker: Kicker,
}

/// Build and run a VM until the guest writes the debug-exit port, powers off
/// or resets ([`GuestStop`]), crashes, or the timeout passes.
pub fn run_vm(config: &VmConfig) -> Result<VmRun, VmmError> {
    let wall_start = Instant::now();
    // Threads spawned from here on install their filters per the config.
    let _seccomp = crate::seccomp::SeccompScope::enter(config.seccomp);
    crate::seccomp::prepare(config.seccomp).map_err(|e| VmmError::Thread {
        name: "seccomp filters".into(),
        source: e.into_io(),
    })?;
    let BuiltVm {
        vm,
        control,
        window,
        mut devices,
        vcpus,
        vm_stats_file,
        tsc_hz,
    } = build_vm(config)?;

    // vCPU threads.
    let run_start = Instant::now();
    let (threads, spawn_error) = spawn_vcpus(config, vcpus, &control);
    let stopped = spawn_error.is_some() || control.wait_for_stop(config.timeout);
    control.request_stop();
    let run_wall = run_start.elapsed();
    let mut reports = match stop_vcpus(threads) {
        Ok(reports) => reports,
        Err(e) => {
            // A vCPU thread may still be inside KVM_RUN: keep the VM and its
            // guest memory mapped for it (leaked) rather than unmap it under it.
            std::mem::forget(vm);
            return Err(e);
        }
    };
    if let Some(chip) = &mut devices.user_irqchip {
        chip.stop_timers(); // its expiries go through the bus
    }
    let block_cpus = config
        .block
        .as_ref()
        .map(|b| b.thread_cpus.clone())
        .unwrap_or_default();
    let block = devices.block.take().map(|b| b.finish(&block_cpus));
    let io_thread = devices.bus.shutdown();
    // Quiescent now: no vCPU, timer or I/O thread touches an interrupt controller.
    let irqchip_violations = match &devices.user_irqchip {
        Some(chip) => chip.check_invariants(),
        None => crate::irqchip::invariants::read_and_check_kvm(
            vm.fd(),
            reports.iter().map(|r| (r.vcpu.index(), r.vcpu.fd())),
        ),
    };

    let windows = reports.iter_mut().map(|r| r.vcpu.take_window_counts());
    let names = devices.bus.entry_names();
    let window = window_section(&window, windows.collect(), &names, config.sync);
    let mut collector = Collector::new(config.sync, config.vcpus);
    for report in &reports {
        collector.add_vcpu(&report.vcpu);
    }
    let mut section = collector.finish(
        &devices.bus.entry_names(),
        VmMeasurements {
            io_thread,
            unclaimed_accesses: devices.bus.unclaimed_accesses(),
            vm_stats: vm_stats_file.as_ref(),
            memory: vm.memory(),
            run_wall,
            tsc_hz,
        },
    );
    section.window = window;
    section.user_irqchip = devices.user_irqchip.as_ref().map(UserIrqchip::stats);
    section.seccomp = config.seccomp;
    section.guest_values_rejected = config.irq_route.as_ref().map_or(0, IrqRoute::rejected);

    let (block, block_error) = match block {
        Some(Ok(stats)) => (Some(stats), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let first_error = first_error(config, spawn_error.or(block_error), reports, stopped);
    // Every vCPU is gone now; the VM and its memory may go too.
    drop(vm);
    if let Some(e) = first_error {
        return Err(e);
    }

    let (result, console) = guest_output(devices);
    let stop = control.guest_stop().ok_or_else(|| VmmError::VcpuThread {
        vcpu: 0,
        reason: "the VM stopped without the guest stopping it".into(),
    })?;
    let exit_code = match stop {
        GuestStop::DebugExit(code) => {
            section.exit_code = Some(code);
            code
        }
        GuestStop::PowerOff | GuestStop::Reset => 0,
    };
    Ok(VmRun {
        exit_code,
        stop,
        result,
        console,
        wall: wall_start.elapsed(),
        section,
        block,
        irqchip_violations,
    })
}

/// A VM ready to run: guest loaded, devices attached, vCPUs set up but not
/// yet started.
struct BuiltVm {
    vm: Vm,
    control: Arc<RunControl>,
    window: Arc<WindowState>,
    devices: Devices,
    vcpus: Vec<Vcpu>,
    vm_stats_file: Option<std::fs::File>,
    tsc_hz: u64,
}

/// Open KVM, load the guest, attach the devices and set up the vCPUs.
fn build_vm(config: &VmConfig) -> Result<BuiltVm, VmmError> {
    // First, so a run that fails before its guest is ready withdraws from the gate.
    let gate_ticket = config.start_gate.as_ref().map(crate::StartGate::ticket);
    let kvm = open_kvm()?;
    let max_vcpus = u32::try_from(kvm.get_max_vcpus()).unwrap_or(u32::MAX);
    validate(config, max_vcpus)?;
    let kernel = read_kernel(&config.kernel)?;
    let vm = Vm::new(kvm, config.mem_bytes, config.irqchip)?;
    // Before any vCPU exists (KVM's rule for dirty rings).
    let dirty_ring = config
        .host
        .as_ref()
        .and_then(|h| h.scheduler.prepare_vm(&vm));
    let entry = load_guest(vm.memory(), config, &kernel)?;

    let (vcpu_fds, reset_states) = create_vcpu_fds(&vm, config, entry)?;
    let tsc_hz = vcpu_fds
        .first()
        .and_then(|v| v.get_tsc_khz().ok())
        .map(|khz| u64::from(khz) * 1000)
        .filter(|&hz| hz > 0)
        .unwrap_or_else(crate::devices::pm_timer::calibrate_tsc_hz);

    let control = Arc::new(RunControl::new());
    let window = Arc::new(WindowState::default());
    let vcpu_stats = vcpu_fds
        .iter()
        .map(|fd| crate::kvm_stats::open_stats(fd).ok());
    let window_device = WindowDevice::new(
        window.clone(),
        gate_ticket,
        vcpu_stats.collect(),
        control.clone(),
    );
    let tsc = GuestTsc {
        offset: vcpu_fds.first().map_or(0, guest_tsc_offset),
        hz: tsc_hz,
    };
    let devices = attach_devices(config, &vm, control.clone(), tsc, window_device)?;
    if let Some(route) = &config.irq_route {
        route.bind(vm.memory().clone(), config.vcpus);
    }
    if let Some(host) = &config.host {
        host.scheduler.bind_vm_memory(host.vm, vm.memory());
    }
    let mut vcpus = Vec::new();
    let mut reset_states = reset_states.into_iter();
    for (index, fd) in (0..config.vcpus).zip(vcpu_fds) {
        let mut vcpu = Vcpu::new(index, fd, devices.bus.client(), config.mem_bytes)?;
        vcpu.set_window(VcpuWindow::new(window.clone()));
        if let (Some(chip), Some(reset)) = (&devices.user_irqchip, reset_states.next()) {
            vcpu.set_interrupts(Box::new(chip.vcpu_hook(index, vcpu.kicker(), reset)));
        }
        if let Some(host) = &config.host {
            let ring = dirty_ring.and_then(|n| crate::host::DirtyRing::map(vcpu.fd(), n, &vm));
            let truth = crate::host::truth::SpinTruth::new(vm.memory().clone(), index, tsc_hz);
            vcpu.set_grant(Box::new(host.scheduler.attach(
                host.vm,
                index,
                vcpu.kicker(),
                ring,
                Some(truth),
            )));
        }
        vcpus.push(vcpu);
    }
    let vm_stats_file = vm.stats_file();
    Ok(BuiltVm {
        vm,
        control,
        window,
        devices,
        vcpus,
        vm_stats_file,
        tsc_hz,
    })
}

/// One vCPU fd per vCPU, the first at the kernel's entry; with the user
/// irqchip, also each one's KVM reset state, which INIT/SIPI restores.
fn create_vcpu_fds(
    vm: &Vm,
    config: &VmConfig,
    entry: BootEntry,
) -> Result<(Vec<kvm_ioctls::VcpuFd>, Vec<ResetState>), VmmError> {
    let mut vcpu_fds = Vec::new();
    let mut reset_states = Vec::new();
    for index in 0..config.vcpus {
        let fd = vm.create_vcpu_fd(index)?;
        if config.irqchip == Irqchip::User {
            // KVM's reset state, which INIT/SIPI restores (before the entry).
            reset_states.push(ResetState::capture(&fd)?);
        }
        if index == 0 {
            entry.apply(&fd)?;
        }
        vcpu_fds.push(fd);
    }
    Ok((vcpu_fds, reset_states))
}

/// The run's error, if any: `earlier` (spawn or block device) first, then the
/// first vCPU's, then a timeout if the guest never stopped (with vCPU 0's
/// registers).
fn first_error(
    config: &VmConfig,
    earlier: Option<VmmError>,
    reports: Vec<VcpuReport>,
    stopped: bool,
) -> Option<VmmError> {
    let mut first_error = earlier;
    for report in reports {
        if let Err(e) = report.outcome {
            if first_error.is_none() {
                first_error = Some(e);
            }
        } else if !stopped && report.vcpu.index() == 0 && first_error.is_none() {
            first_error = Some(VmmError::Timeout {
                seconds: config.timeout.unwrap_or_default().as_secs_f64(),
                registers: report.vcpu.registers(),
            });
        }
    }
    first_error
}

/// What the guest wrote to the result port and, when captured, the console
/// (flushed first).
fn guest_output(devices: Devices) -> (Vec<u8>, Vec<u8>) {
    let result = devices
        .result_port
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    let _ = devices
        .uart
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .flush();
    let console = devices
        .captured
        .map(|buf| std::mem::take(&mut *buf.lock().unwrap_or_else(|e| e.into_inner())))
        .unwrap_or_default();
    (result, console)
}

/// One thread per vCPU; on a spawn failure, the threads started so far and the
/// error (a stop is requested then).
fn spawn_vcpus(
    config: &VmConfig,
    vcpus: Vec<Vcpu>,
    control: &Arc<RunControl>,
) -> (Vec<VcpuThread>, Option<VmmError>) {
    let mut threads = Vec::new();
    for vcpu in vcpus {
        let index = vcpu.index();
        let kicker = vcpu.kicker();
        let control_for_thread = control.clone();
        let cpus = config.placement.cpus_for_vcpu(index as usize);
        let name = format!("smplab-vcpu-{index}");
        let filter = crate::seccomp::ThreadFilter::for_spawn(crate::seccomp::ThreadKind::Vcpu);
        let spawned = std::thread::Builder::new()
            .name(name.clone())
            .spawn(move || vcpu_thread(vcpu, &control_for_thread, cpus, filter));
        match spawned {
            Ok(handle) => threads.push(VcpuThread { handle, kicker }),
            Err(source) => {
                control.request_stop();
                return (threads, Some(VmmError::Thread { name, source }));
            }
        }
    }
    (threads, None)
}

/// Kick every vCPU once (the stop was requested before), then join them.
fn stop_vcpus(threads: Vec<VcpuThread>) -> Result<Vec<VcpuReport>, VmmError> {
    for thread in &threads {
        thread.kicker.kick();
    }
    let give_up = Instant::now() + STOP_GIVE_UP;
    let mut reports = Vec::new();
    for (index, thread) in threads.into_iter().enumerate() {
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        // Wait without re-kicking: a thread still running after STOP_GIVE_UP is
        // stuck somewhere a kick cannot reach (a bug), not a lost kick.
        while !thread.handle.is_finished() {
            if Instant::now() > give_up {
                return Err(VmmError::VcpuThread {
                    vcpu: index,
                    reason: format!(
                        "the vCPU thread did not stop within {} s of being kicked",
                        STOP_GIVE_UP.as_secs()
                    ),
                });
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        match thread.handle.join() {
            Ok(report) => reports.push(report),
            Err(_) => {
                return Err(VmmError::VcpuThread {
                    vcpu: index,
                    reason: "the vCPU thread panicked (a bug in smplab-vmm)".into(),
                })
            }
        }
    }
    Ok(reports)
}

fn vcpu_thread(
    mut vcpu: Vcpu,
    control: &RunControl,
    cpus: Option<Vec<usize>>,
    filter: crate::seccomp::ThreadFilter,
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
    let outcome = match &cpus {
        Some(cpus) => pin_current_thread(cpus).map_err(|source| VmmError::Placement {
            thread: format!("smplab-vcpu-{}", vcpu.index()),
            cpus: cpus.clone(),
            source,
        }),
        None => Ok(()),
    }
    .and_then(|()| {
        // The thread's own set-up ends here; then its filter (crate::seccomp).
        vcpu.prepare_thread();
        filter.install(vcpu.index()).map_err(|e| VmmError::Thread {
            name: format!("smplab-vcpu-{}", vcpu.index()),
            source: e.into_io(),
        })
    })
    .and_then(|()| vcpu.run_until_stopped(control));
    VcpuReport { vcpu, outcome }
}
