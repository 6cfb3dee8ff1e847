//! Running the guest on smplab-vmm: the VMM configuration for a run, and
//! the record built from the guest's result and the VMM's section.

use crate::{base_record, check, check_exit, cmdline, result, GuestError, VmRunOptions, GUEST_ELF};
use smplab_record::config::IrqAffinity;
use smplab_record::{Executor, RunRecord, WorkloadInfo};
use smplab_vmm::{ConsoleSink, Irqchip, KernelImage, Placement, VmConfig};
use smplab_workload::Program;

/// Run `program` in the smplab guest on smplab-vmm.
pub fn run_vm(
    program: &Program,
    info: WorkloadInfo,
    opts: &VmRunOptions,
) -> Result<RunRecord, GuestError> {
    let mem = check(program, opts)?;
    let mut cfg = VmConfig::new(match &opts.kernel {
        None => KernelImage::Bytes(GUEST_ELF.to_vec()),
        Some(p) => KernelImage::Path(p.clone()),
    });
    cfg.cmdline = cmdline(program, opts, false);
    cfg.modules = vec![smplab_workload::encode::encode(program)];
    cfg.vcpus = opts.vcpus;
    cfg.mem_bytes = mem;
    cfg.sync = opts.sync;
    cfg.irqchip = opts.irqchip;
    cfg.vmm_halt_poll = opts.vmm_halt_poll;
    cfg.placement = match &opts.pin {
        Some(cpus) if !cpus.is_empty() => Placement::Pinned(cpus.clone()),
        _ => Placement::Floating,
    };
    cfg.io_cpu = opts.io_cpu;
    cfg.timeout = Some(opts.timeout);
    cfg.start_gate = opts.start_gate.clone();
    cfg.host = opts.host.clone();
    cfg.irq_route = opts.irq_route.clone();
    if let (Some(host), IrqAffinity::Running) = (&opts.host, &opts.irq_affinity) {
        // The guest boots with every vCPU in turn (`io_irq`); the scheduler
        // points the routing page at the running ones once memory exists.
        host.scheduler
            .set_irq_affinity(host.vm, &IrqAffinity::Running)
            .map_err(|_| GuestError::IrqAffinityUnsupported(IrqAffinity::Running))?;
    }
    cfg.block = program
        .uses_io()
        .then(|| smplab_vmm::devices::block::BlockConfig {
            queue_depths: program.devices.iter().map(|d| d.queue_depth).collect(),
            thread_cpus: opts.io_thread_cpus.clone(),
        });
    cfg.console = if opts.show_console {
        ConsoleSink::Stdout
    } else {
        ConsoleSink::Capture
    };
    let run = smplab_vmm::run_vm(&cfg)?;
    let watchdog_ms = u64::try_from(opts.timeout.as_millis()).unwrap_or(u64::MAX) * 9 / 10;
    check_exit(run.exit_code, &run.console, watchdog_ms)?;
    let parsed = result::parse(&run.result).map_err(|e| {
        GuestError::BadResult(e, String::from_utf8_lossy(&run.console).into_owned())
    })?;
    let mut rec = base_record(Executor::Vm, info, program, opts, mem);
    rec.set_config("sync", opts.sync.as_str());
    if opts.irqchip != Irqchip::Kernel {
        rec.set_config("irqchip", opts.irqchip.as_str());
        rec.set_config(
            "vmm_halt_poll_ns",
            u64::try_from(opts.vmm_halt_poll.as_nanos()).unwrap_or(u64::MAX),
        );
    }
    if let Some(io) = opts.io_cpu {
        rec.set_config("io_cpu", io);
    }
    if program.uses_io() {
        rec.set_config("irq_affinity", opts.irq_affinity.to_string());
        rec.set_config(
            "io_thread_cpus",
            smplab_record::config::IoThreadCpus(opts.io_thread_cpus.clone()).to_string(),
        );
    }
    let console = || String::from_utf8_lossy(&run.console).into_owned();
    parsed
        .fill(&mut rec, program)
        .map_err(|e| GuestError::BadResult(e, console()))?;
    rec.io = parsed.io_section(
        run.block
            .as_ref()
            .map(|b| (b.requests, b.device_latency.clone())),
    );
    if let Some(mut window) = host_window(&run.section) {
        // The guest settles its waiters before "ready", so the host's window
        // starts after it; the guest measured it.
        window.settle = parsed.settle();
        rec.timing.window = Some(window);
    }
    rec.timing.total_ns = Some(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX));
    rec.vmm = Some(run.section);
    Ok(rec)
}

/// The workload window as smplab-vmm saw it on the host clock: the guest's
/// "ready", the VMM's "go", the guest's "done" (absent if the run stopped
/// before "done").
fn host_window(section: &smplab_record::vmm::VmmSection) -> Option<smplab_record::WorkloadWindow> {
    let w = section.window.as_ref()?;
    Some(smplab_record::WorkloadWindow {
        clock: smplab_record::WindowClock::HostMonotonic,
        threads_ready_ns: w.ready_ns,
        start_ns: w.go_ns,
        end_ns: w.done_ns?,
        start_gate: w.start_gate,
        settle: None,
    })
}
