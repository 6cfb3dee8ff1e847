//! `smplab vmm`: run a kernel under smplab-vmm, as a command. The CLI crate
//! parses its flags into [`VmmOptions`] and calls [`run_command`]; everything
//! else (validation, the run, the record, the summary, the exit status) is here.

use crate::placement::CpuList;
use crate::{
    run_vm, ConsoleSink, Irqchip, KernelImage, Placement, SyncMode, VmConfig, VmRun, VmmError,
};
use smplab_record::config::{IoThreadCpus, Timeout};
use smplab_record::{exit, Executor, Outcome, RunRecord, WorkloadInfo};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Where the guest console goes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConsoleOutput {
    /// Kept in memory, not shown (the summary says how much there was).
    #[default]
    Hidden,
    /// Copied to stderr while the guest runs (`--console`).
    Stderr,
    /// Written to this file (`--console-file FILE`).
    File(PathBuf),
}

/// Where the vCPU threads run (`--pin` or `--confine`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum VcpuCpus {
    /// The host scheduler places them.
    #[default]
    Float,
    /// vCPU i on the i-th CPU of the list.
    Pin(CpuList),
    /// Every vCPU on any CPU of the list.
    Confine(CpuList),
}

/// The options of `smplab vmm`, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct VmmOptions {
    /// Guest kernel: an ELF64 with a PVH entry note, or a Linux bzImage.
    pub kernel: PathBuf,
    pub vcpus: u32,
    pub mem_bytes: u64,
    pub sync: SyncMode,
    pub vcpu_cpus: VcpuCpus,
    /// The CPUs of the bus's I/O thread (`iothread`, `hybrid`): none or one.
    pub io_thread_cpus: IoThreadCpus,
    /// Guest command line; `cpus=N` is added when it has no `cpus=` word.
    pub cmdline: String,
    /// PVH module files in order (module 0 is the encoded workload).
    pub modules: Vec<PathBuf>,
    /// A Linux initrd: placed per the boot protocol for a bzImage, module 0
    /// for a PVH kernel.
    pub initrd: Option<PathBuf>,
    /// Stop the guest after this long (exit status 7).
    pub timeout: Timeout,
    /// Busy time of the work device (port 0x530) per access, in nanoseconds.
    pub work_ns: u64,
    /// Make the work device a not-thread-safe device (it then cannot bypass).
    pub work_exclusive: bool,
    pub irqchip: Irqchip,
    /// With `Irqchip::User`: how long a halted vCPU thread polls before it
    /// sleeps, in ns (0 = no polling).
    pub vmm_halt_poll_ns: u64,
    pub console: ConsoleOutput,
    /// Print the result record as JSON on stdout instead of the summary.
    pub json: bool,
}

impl VmmOptions {
    /// The defaults of every option but the kernel.
    pub fn new(kernel: PathBuf) -> Self {
        VmmOptions {
            kernel,
            vcpus: 1,
            mem_bytes: 256 << 20,
            sync: SyncMode::Fine,
            vcpu_cpus: VcpuCpus::Float,
            io_thread_cpus: IoThreadCpus::default(),
            cmdline: String::new(),
            modules: Vec::new(),
            initrd: None,
            timeout: Timeout::default(),
            work_ns: 0,
            work_exclusive: false,
            irqchip: Irqchip::Kernel,
            vmm_halt_poll_ns: 0,
            console: ConsoleOutput::Hidden,
            json: false,
        }
    }
}

/// A memory size that is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadSize {
    #[error("'{0}' is not a size like 256M or 1G")]
    NotASize(String),
    #[error("size '{0}' is too large")]
    TooLarge(String),
}

/// Parse a memory size: a number of bytes with an optional K, M, G or T suffix
/// (powers of 1024, optional trailing `i`/`B`).
pub fn parse_size(text: &str) -> Result<u64, BadSize> {
    let t = text.trim();
    let t = t.strip_suffix(['B', 'b']).unwrap_or(t);
    let t = t.strip_suffix(['i']).unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let value: u64 = digits
        .trim()
        .parse()
        .map_err(|_| BadSize::NotASize(text.to_string()))?;
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| BadSize::TooLarge(text.to_string()))
}

/// Add `cpus=N` to a command line that does not name a vCPU count.
pub fn cmdline_with_cpus(cmdline: &str, cpus: u32) -> String {
    if cmdline.split_whitespace().any(|w| w.starts_with("cpus=")) {
        cmdline.to_string()
    } else if cmdline.trim().is_empty() {
        format!("cpus={cpus}")
    } else {
        format!("cpus={cpus} {}", cmdline.trim())
    }
}

/// Exit status for a guest that finished with `code` on the debug-exit port
/// (docs/guest-abi.md: 0 done, 1 bad command line/program, 2 exception, 3 watchdog).
pub fn status_for_guest_code(code: u32) -> i32 {
    match code {
        0 => exit::OK,
        1 => exit::BAD_INPUT,
        2 => exit::GUEST_CRASH,
        3 => exit::TIMEOUT,
        _ => exit::RUN_FAILED,
    }
}

fn config_from_options(options: &VmmOptions) -> Result<VmConfig, VmmError> {
    let modules = options
        .modules
        .iter()
        .map(|path| {
            std::fs::read(path).map_err(|e| {
                VmmError::BadConfig(format!("cannot read module {}: {e}", path.display()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let initrd = options
        .initrd
        .as_ref()
        .map(|path| {
            std::fs::read(path).map_err(|e| {
                VmmError::BadConfig(format!("cannot read initrd {}: {e}", path.display()))
            })
        })
        .transpose()?;
    let placement = match &options.vcpu_cpus {
        VcpuCpus::Pin(cpus) => Placement::Pinned(cpus.0.clone()),
        VcpuCpus::Confine(cpus) => Placement::Confined(cpus.0.clone()),
        VcpuCpus::Float => Placement::Floating,
    };
    // The bus has one I/O thread: a list names its one CPU or none.
    let io_cpu = match options.io_thread_cpus.0.as_slice() {
        [] => None,
        [cpu] => Some(*cpu),
        _ => {
            let message = format!(
                "--io-thread-cpus {}: smplab vmm's I/O thread is one thread; give one CPU (or none)",
                options.io_thread_cpus
            );
            return Err(VmmError::BadConfig(message));
        }
    };
    if options.vmm_halt_poll_ns > 0 && options.irqchip != Irqchip::User {
        return Err(VmmError::BadConfig(
            "--vmm-halt-poll-ns applies only to --irqchip user (KVM's in-kernel irqchip halts vCPUs in the kernel)".into(),
        ));
    }
    if options.vmm_halt_poll_ns > smplab_record::config::settings::MAX_VMM_HALT_POLL_NS {
        return Err(VmmError::BadConfig(format!(
            "--vmm-halt-poll-ns {} is longer than {} ns",
            options.vmm_halt_poll_ns,
            smplab_record::config::settings::MAX_VMM_HALT_POLL_NS
        )));
    }
    let console = match &options.console {
        ConsoleOutput::Hidden => ConsoleSink::Capture,
        ConsoleOutput::Stderr => ConsoleSink::Stderr,
        ConsoleOutput::File(path) => ConsoleSink::File(path.clone()),
    };
    Ok(VmConfig {
        kernel: KernelImage::Path(options.kernel.clone()),
        cmdline: cmdline_with_cpus(&options.cmdline, options.vcpus),
        modules,
        initrd,
        vcpus: options.vcpus,
        mem_bytes: options.mem_bytes,
        sync: options.sync,
        placement,
        io_cpu,
        timeout: Some(options.timeout.duration()),
        console,
        work_ns: options.work_ns,
        work_exclusive: options.work_exclusive,
        start_gate: None,
        host: None,
        irqchip: options.irqchip,
        vmm_halt_poll: Duration::from_nanos(options.vmm_halt_poll_ns),
        block: None,
        irq_route: None,
    })
}

/// The result record of a run (or of a failed attempt).
pub fn record_for(options: &VmmOptions, outcome: &Result<VmRun, VmmError>) -> RunRecord {
    let kernel = &options.kernel;
    let file = kernel
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| kernel.display().to_string());
    let mut record = RunRecord::new(
        Executor::Vm,
        WorkloadInfo {
            name: format!("kernel:{file}"),
            source: kernel.display().to_string(),
            n: options.vcpus,
            threads: options.vcpus,
            params: Default::default(),
        },
    );
    record.set_config("vcpus", options.vcpus);
    record.set_config("sync", options.sync.as_str());
    record.set_config("mem_bytes", options.mem_bytes);
    record.set_config(
        "cmdline",
        cmdline_with_cpus(&options.cmdline, options.vcpus),
    );
    record.set_config("work_ns", options.work_ns);
    record.set_config("work_exclusive", options.work_exclusive);
    record.set_config("irqchip", options.irqchip.as_str());
    if options.vmm_halt_poll_ns > 0 {
        record.set_config("vmm_halt_poll_ns", options.vmm_halt_poll_ns);
    }
    match &options.vcpu_cpus {
        VcpuCpus::Float => {}
        VcpuCpus::Pin(cpus) => record.set_config("pin", cpus.0.clone()),
        VcpuCpus::Confine(cpus) => record.set_config("confine", cpus.0.clone()),
    }
    if !options.io_thread_cpus.is_float() {
        record.set_config("io_thread_cpus", options.io_thread_cpus.to_string());
    }
    match outcome {
        Ok(run) => {
            record.timing.wall_ns = run
                .section
                .run_wall_ns
                .unwrap_or(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX));
            record.timing.total_ns = Some(u64::try_from(run.wall.as_nanos()).unwrap_or(u64::MAX));
            if run.exit_code != 0 {
                record.outcome = Outcome::Failed {
                    reason: format!("the guest exited with code {}", run.exit_code),
                };
            }
            record.vmm = Some(run.section.clone());
        }
        Err(e) => {
            record.outcome = Outcome::Failed {
                reason: e.to_string(),
            };
        }
    }
    record
}

fn human_summary(run: &VmRun) -> String {
    let s = &run.section;
    let mut out = String::new();
    let total_exits =
        (s.exits_per_vcpu.iter().flat_map(|m| m.values().copied())).fold(0u64, u64::saturating_add);
    out.push_str(&format!(
        "guest exit code {} after {:.3} s ({} vCPUs, sync {}), {} exits counted\n",
        run.exit_code,
        run.wall.as_secs_f64(),
        s.vcpus,
        s.sync,
        total_exits
    ));
    for (i, exits) in s.exits_per_vcpu.iter().enumerate() {
        let list: Vec<String> = exits.iter().map(|(k, v)| format!("{k}={v}")).collect();
        out.push_str(&format!("  vcpu {i}: {}\n", list.join(" ")));
    }
    for (key, h) in &s.exit_latency {
        out.push_str(&format!(
            "  {key}: {} accesses, p50 {} ns, p99 {} ns\n",
            h.count, h.p50_ns, h.p99_ns
        ));
    }
    if let Some(h) = &s.global_lock_wait {
        out.push_str(&format!(
            "  global lock wait: p50 {} ns, p99 {} ns, max {} ns\n",
            h.p50_ns, h.p99_ns, h.max_ns
        ));
    }
    if let Some(io) = &s.io_thread {
        out.push_str(&format!(
            "  I/O thread: {} requests ({} posted writes), queue depth mean {:.2} max {}, utilization {:.1}%\n",
            io.requests, io.posted_writes, io.mean_queue_depth, io.max_queue_depth, io.utilization * 100.0
        ));
        if let (Some(wait), Some(work)) = (&io.queue_wait, &io.handling) {
            out.push_str(&format!(
                "  I/O thread: queue wait p50 {} ns p99 {} ns, handling p50 {} ns p99 {} ns\n",
                wait.p50_ns, wait.p99_ns, work.p50_ns, work.p99_ns
            ));
        }
    }
    if let Some(u) = &s.user_irqchip {
        out.push_str(&format!(
            "  user irqchip: {} injected, {} NMIs, HLT {} polled / {} slept (poll {} ns)\n",
            u.injected, u.nmis, u.halts_polled, u.halts_slept, u.halt_poll_ns
        ));
        if let Some(w) = &u.wake_latency {
            out.push_str(&format!(
                "  halt wake-up: p50 {} ns, p99 {} ns, max {} ns\n",
                w.p50_ns, w.p99_ns, w.max_ns
            ));
        }
    }
    if s.unclaimed_accesses > 0 {
        out.push_str(&format!("  unclaimed accesses: {}\n", s.unclaimed_accesses));
    }
    if let Some(overhead) = s.vmm_overhead_bytes {
        out.push_str(&format!(
            "  VMM memory overhead (RSS - resident guest RAM): {:.1} MiB\n",
            overhead as f64 / (1 << 20) as f64
        ));
    }
    if !run.console.is_empty() {
        out.push_str(&format!(
            "  console: {} bytes (--console shows it, --console-file FILE keeps it)\n",
            run.console.len()
        ));
    }
    if !run.result.is_empty() {
        out.push_str(&format!(
            "  result: {} bytes on port 0x520\n",
            run.result.len()
        ));
    }
    out
}

/// Run `smplab vmm`; returns the process exit status.
pub fn run_command(options: &VmmOptions) -> i32 {
    let outcome = config_from_options(options).and_then(|config| run_vm(&config));
    if options.json {
        let mut out = std::io::stdout().lock();
        // A closed stdout (`| head`) must not turn a finished run into a failure.
        let _ = writeln!(out, "{}", record_for(options, &outcome).to_json_line());
    }
    match outcome {
        Ok(run) => {
            if !options.json {
                eprint!("{}", human_summary(&run));
            }
            status_for_guest_code(run.exit_code)
        }
        Err(e) => {
            // The one error printer of the binary: `smplab: <message>`.
            exit::report_error(&e);
            e.exit_status()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn cmdline_gets_cpus_unless_it_names_them() {
        assert_eq!(cmdline_with_cpus("idle=poll", 2), "cpus=2 idle=poll");
        assert_eq!(cmdline_with_cpus("", 3), "cpus=3");
        assert_eq!(cmdline_with_cpus("cpus=4", 2), "cpus=4");
    }

    #[test]
    fn options_reach_the_config() {
        let options = VmmOptions {
            vcpus: 2,
            sync: SyncMode::Hybrid,
            vcpu_cpus: VcpuCpus::Pin(CpuList(vec![0, 1])),
            io_thread_cpus: IoThreadCpus(vec![1]),
            timeout: "5".parse().expect("a timeout"),
            console: ConsoleOutput::Stderr,
            ..VmmOptions::new("k.elf".into())
        };
        let config = config_from_options(&options).expect("valid");
        assert_eq!(config.vcpus, 2);
        assert_eq!(config.sync, SyncMode::Hybrid);
        assert_eq!(config.placement, Placement::Pinned(vec![0, 1]));
        assert_eq!(config.io_cpu, Some(1));
        assert_eq!(config.timeout, Some(Duration::from_secs(5)));
        assert_eq!(config.console, ConsoleSink::Stderr);
        assert_eq!(config.cmdline, "cpus=2");
        // Without flags: the one default timeout, the console kept from view.
        let config = config_from_options(&VmmOptions::new("k".into())).expect("valid");
        assert_eq!(
            config.timeout,
            Some(smplab_record::config::DEFAULT_TIMEOUT.duration())
        );
        assert_eq!(config.console, ConsoleSink::Capture);
    }

    #[test]
    fn an_io_thread_on_several_cpus_is_refused_not_narrowed() {
        let options = VmmOptions {
            io_thread_cpus: IoThreadCpus(vec![0, 1]),
            ..VmmOptions::new("k".into())
        };
        let err = config_from_options(&options).expect_err("refused");
        assert_eq!(err.exit_status(), exit::BAD_INPUT);
        assert!(err.to_string().contains("--io-thread-cpus 0,1"), "{err}");
    }

    #[test]
    fn irqchip_user_and_its_halt_poll_window_reach_the_config() {
        let options = VmmOptions {
            irqchip: Irqchip::User,
            vmm_halt_poll_ns: 20_000,
            ..VmmOptions::new("k".into())
        };
        let config = config_from_options(&options).expect("valid");
        assert_eq!(config.irqchip, Irqchip::User);
        assert_eq!(config.vmm_halt_poll, Duration::from_micros(20));
        // A halt-poll window the in-kernel irqchip would never use is refused.
        let options = VmmOptions {
            vmm_halt_poll_ns: 1,
            ..VmmOptions::new("k".into())
        };
        let err = config_from_options(&options).expect_err("refused");
        assert_eq!(err.exit_status(), exit::BAD_INPUT);
        assert!(err.to_string().contains("--irqchip user"), "{err}");
    }

    #[test]
    fn missing_kernel_is_bad_input_and_record_says_why() {
        let options = VmmOptions {
            json: true,
            ..VmmOptions::new("/nonexistent/k.elf".into())
        };
        let outcome = config_from_options(&options).and_then(|c| run_vm(&c));
        let Err(e) = &outcome else {
            panic!("ran a missing kernel")
        };
        // Without KVM the first failure is KVM_UNAVAILABLE; with it, the
        // file that is not there (bad input, not an unbootable image).
        assert!([exit::BAD_INPUT, exit::KVM_UNAVAILABLE].contains(&e.exit_status()));
        let record = record_for(&options, &outcome);
        assert_eq!(record.workload.name, "kernel:k.elf");
        assert!(matches!(record.outcome, Outcome::Failed { .. }));
    }
}
