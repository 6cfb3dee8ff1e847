//! `smplab vmm`: run a kernel under smplab-vmm from the command line. The CLI crate
//! wires the subcommand to [`VmmArgs`] and [`run`].

use crate::placement::CpuList;
use crate::{
    run_vm, ConsoleSink, Irqchip, KernelImage, Placement, SyncMode, VmConfig, VmRun, VmmError,
};
use smplab_record::{exit, Executor, Outcome, RunRecord, WorkloadInfo};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Options of `smplab vmm`.
#[derive(Debug, Clone, clap::Args)]
pub struct VmmArgs {
    /// Guest kernel: an ELF64 with a PVH entry note.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub cpus: u32,
    /// Guest memory, e.g. 256M or 1G.
    #[arg(long, default_value = "256M", value_name = "SIZE", value_parser = parse_size)]
    pub mem: u64,
    /// Device synchronization: global, iothread, hybrid or fine.
    #[arg(long, default_value = "fine", value_name = "MODE")]
    pub sync: SyncMode,
    /// Pin vCPU i to the i-th CPU of this list (e.g. 0,1 or 0-3).
    #[arg(long, value_name = "CPUS", conflicts_with = "confine")]
    pub pin: Option<CpuList>,
    /// Let every vCPU run on any CPU of this list.
    #[arg(long, value_name = "CPUS")]
    pub confine: Option<CpuList>,
    /// Host CPU for the I/O thread.
    #[arg(long, value_name = "CPU")]
    pub io_cpu: Option<usize>,
    /// Guest command line; `cpus=N` is added when it has no `cpus=` word.
    #[arg(long, value_name = "STR", default_value = "")]
    pub cmdline: String,
    /// PVH module files in order (module 0 is the encoded workload).
    #[arg(long = "module", value_name = "FILE")]
    pub modules: Vec<PathBuf>,
    /// Stop the guest after this many seconds (exit status 7).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Busy time of the work device (port 0x530) per access, in nanoseconds.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub work_ns: u64,
    /// Make the work device a not-thread-safe device (it then cannot bypass).
    #[arg(long)]
    pub work_exclusive: bool,
    /// Interrupt controllers: `kernel` (KVM's in-kernel LAPIC/IOAPIC/PIC) or
    /// `user` (smplab-vmm's models on the bus, under --sync; HLT in the VMM).
    #[arg(long, default_value = "kernel", value_name = "WHERE")]
    pub irqchip: Irqchip,
    /// With --irqchip user: how long a halted vCPU thread polls before it
    /// sleeps, in ns (0 = no polling).
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub vmm_halt_poll_ns: u64,
    /// Write the guest console to this file instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub console: Option<PathBuf>,
    /// Print the full result record as JSON (the console then goes to stderr).
    #[arg(long)]
    pub json: bool,
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

fn config_from_args(args: &VmmArgs) -> Result<VmConfig, VmmError> {
    let modules = args
        .modules
        .iter()
        .map(|path| {
            std::fs::read(path).map_err(|e| {
                VmmError::BadConfig(format!("cannot read module {}: {e}", path.display()))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let placement = match (&args.pin, &args.confine) {
        (Some(cpus), _) => Placement::Pinned(cpus.0.clone()),
        (None, Some(cpus)) => Placement::Confined(cpus.0.clone()),
        (None, None) => Placement::Floating,
    };
    let timeout = match args.timeout {
        None => None,
        Some(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => {
            Some(Duration::from_secs_f64(secs))
        }
        Some(secs) => {
            return Err(VmmError::BadConfig(format!(
                "--timeout {secs} is not a positive number of seconds"
            )))
        }
    };
    if args.vmm_halt_poll_ns > 0 && args.irqchip != Irqchip::User {
        return Err(VmmError::BadConfig(
            "--vmm-halt-poll-ns applies only to --irqchip user (KVM's in-kernel irqchip halts vCPUs in the kernel)".into(),
        ));
    }
    if args.vmm_halt_poll_ns > smplab_record::config::settings::MAX_VMM_HALT_POLL_NS {
        return Err(VmmError::BadConfig(format!(
            "--vmm-halt-poll-ns {} is longer than {} ns",
            args.vmm_halt_poll_ns,
            smplab_record::config::settings::MAX_VMM_HALT_POLL_NS
        )));
    }
    let console = match (&args.console, args.json) {
        (Some(path), _) => ConsoleSink::File(path.clone()),
        (None, true) => ConsoleSink::Capture,
        (None, false) => ConsoleSink::Stdout,
    };
    Ok(VmConfig {
        kernel: KernelImage::Path(args.kernel.clone()),
        cmdline: cmdline_with_cpus(&args.cmdline, args.cpus),
        modules,
        vcpus: args.cpus,
        mem_bytes: args.mem,
        sync: args.sync,
        placement,
        io_cpu: args.io_cpu,
        timeout,
        console,
        work_ns: args.work_ns,
        work_exclusive: args.work_exclusive,
        start_gate: None,
        host: None,
        irqchip: args.irqchip,
        vmm_halt_poll: Duration::from_nanos(args.vmm_halt_poll_ns),
        block: None,
        irq_route: None,
    })
}

/// The result record of a run (or of a failed attempt).
pub fn record_for(args: &VmmArgs, outcome: &Result<VmRun, VmmError>) -> RunRecord {
    let file = args
        .kernel
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| args.kernel.display().to_string());
    let mut record = RunRecord::new(
        Executor::Vm,
        WorkloadInfo {
            name: format!("kernel:{file}"),
            source: args.kernel.display().to_string(),
            n: args.cpus,
            threads: args.cpus,
            params: Default::default(),
        },
    );
    record.set_config("vcpus", args.cpus);
    record.set_config("sync", args.sync.as_str());
    record.set_config("mem_bytes", args.mem);
    record.set_config("cmdline", cmdline_with_cpus(&args.cmdline, args.cpus));
    record.set_config("work_ns", args.work_ns);
    record.set_config("work_exclusive", args.work_exclusive);
    record.set_config("irqchip", args.irqchip.as_str());
    if args.vmm_halt_poll_ns > 0 {
        record.set_config("vmm_halt_poll_ns", args.vmm_halt_poll_ns);
    }
    if let Some(pin) = &args.pin {
        record.set_config("pin", pin.0.clone());
    }
    if let Some(confine) = &args.confine {
        record.set_config("confine", confine.0.clone());
    }
    if let Some(cpu) = args.io_cpu {
        record.set_config("io_cpu", cpu);
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
        out.push_str(&format!("  unclaimed reads: {}\n", s.unclaimed_accesses));
    }
    if let Some(overhead) = s.vmm_overhead_bytes {
        out.push_str(&format!(
            "  VMM memory overhead (RSS - resident guest RAM): {:.1} MiB\n",
            overhead as f64 / (1 << 20) as f64
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
pub fn run(args: &VmmArgs) -> i32 {
    let outcome = config_from_args(args).and_then(|config| run_vm(&config));
    if args.json {
        if let Ok(run) = &outcome {
            let _ = std::io::stderr().write_all(&run.console);
        }
        println!("{}", record_for(args, &outcome).to_json_pretty());
    }
    match outcome {
        Ok(run) => {
            if !args.json {
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
    use clap::Parser;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: VmmArgs,
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn args_parse_and_cmdline_gets_cpus() {
        let w = Wrapper::parse_from([
            "x",
            "--kernel",
            "k.elf",
            "--cpus",
            "2",
            "--sync",
            "hybrid",
            "--pin",
            "0-1",
            "--cmdline",
            "idle=poll",
            "--timeout",
            "5",
        ]);
        assert_eq!(w.args.sync, SyncMode::Hybrid);
        assert_eq!(w.args.pin, Some(CpuList(vec![0, 1])));
        assert_eq!(cmdline_with_cpus(&w.args.cmdline, 2), "cpus=2 idle=poll");
        assert_eq!(cmdline_with_cpus("cpus=4", 2), "cpus=4");
        assert!(Wrapper::try_parse_from(["x", "--kernel", "k", "--sync", "bogus"]).is_err());
    }

    #[test]
    fn irqchip_user_and_its_halt_poll_window_reach_the_config() {
        let w = Wrapper::parse_from(["x", "--kernel", "k"]);
        assert_eq!(w.args.irqchip, Irqchip::Kernel);
        let w = Wrapper::parse_from([
            "x",
            "--kernel",
            "k",
            "--irqchip",
            "user",
            "--vmm-halt-poll-ns",
            "20000",
        ]);
        let config = config_from_args(&w.args).expect("valid");
        assert_eq!(config.irqchip, Irqchip::User);
        assert_eq!(config.vmm_halt_poll, Duration::from_micros(20));
        // A halt-poll window the in-kernel irqchip would never use is refused.
        let w = Wrapper::parse_from(["x", "--kernel", "k", "--vmm-halt-poll-ns", "1"]);
        let err = config_from_args(&w.args).expect_err("refused");
        assert_eq!(err.exit_status(), exit::BAD_INPUT);
        assert!(err.to_string().contains("--irqchip user"), "{err}");
        assert!(Wrapper::try_parse_from(["x", "--kernel", "k", "--irqchip", "usr"]).is_err());
    }

    #[test]
    fn missing_kernel_is_a_bad_kernel_status_and_record_says_why() {
        let w = Wrapper::parse_from(["x", "--kernel", "/nonexistent/k.elf", "--json"]);
        let outcome = config_from_args(&w.args).and_then(|c| run_vm(&c));
        let Err(e) = &outcome else {
            panic!("ran a missing kernel")
        };
        // Without KVM the first failure is KVM_UNAVAILABLE; with it, BAD_KERNEL.
        assert!([exit::BAD_KERNEL, exit::KVM_UNAVAILABLE].contains(&e.exit_status()));
        let record = record_for(&w.args, &outcome);
        assert_eq!(record.workload.name, "kernel:k.elf");
        assert!(matches!(record.outcome, Outcome::Failed { .. }));
    }
}
