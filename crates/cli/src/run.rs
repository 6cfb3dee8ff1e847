//! `smplab run`: one workload on one executor, one result record out.

use clap::{Args, ValueEnum};
use smplab_record::{exit, RunRecord, WorkloadInfo};
use smplab_workload::{Program, Source};
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum ExecutorArg {
    /// Host threads on this machine.
    Native,
    /// The smplab guest kernel in smplab-vmm.
    Vm,
    /// The smplab guest kernel in QEMU with KVM.
    Qemu,
}

#[derive(Args)]
pub struct RunArgs {
    #[arg(long, value_enum, default_value = "native")]
    pub executor: ExecutorArg,
    /// Built-in profile name (`smplab workloads`) or path to a workload .toml.
    #[arg(long)]
    pub workload: String,
    /// Thread parameter `n` (default: the workload's default_threads).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Scale factor for amounts of work (smaller runs faster).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Pin threads (native) or vCPUs (vm: vCPU i on the i-th CPU; qemu: confined
    /// to the set) to these host CPUs, e.g. `0,1` or `0-1`.
    #[arg(long)]
    pub pin: Option<String>,
    /// vCPUs of the VM (vm, qemu).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub vcpus: u32,
    /// smplab-vmm device synchronization: global, iothread, hybrid or fine (vm).
    #[arg(long, default_value = "fine")]
    pub sync: smplab_vmm::SyncMode,
    /// Guest idle policy: hlt, poll or haltpoll:NS (vm, qemu).
    #[arg(long, default_value = "hlt")]
    pub idle: smplab_guest::IdlePolicy,
    /// Give up on a VM run after this many seconds (vm, qemu).
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Show the guest console (vm, qemu).
    #[arg(long)]
    pub console: bool,
    /// Guest scheduler tick in Hz, 0 = tickless (vm, qemu). Default: tickless
    /// when threads <= vCPUs, else 250 Hz so spinning threads get time-sliced.
    #[arg(long)]
    pub timer_hz: Option<u32>,
    /// Guest memory, e.g. 256M (vm, qemu). Default: sized from the workload.
    #[arg(long, value_parser = smplab_vmm::cli::parse_size)]
    pub mem: Option<u64>,
    /// Print the full result record as JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Also write the result record (JSON) to this file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

/// Load and instantiate the workload, reporting errors the standard way.
pub fn load_program(
    workload: &str,
    threads: Option<u32>,
    scale: f64,
) -> Result<(Program, WorkloadInfo), i32> {
    let source = Source::resolve(workload).map_err(|e| {
        crate::report_error(&e);
        exit::BAD_INPUT
    })?;
    let program = source.instantiate(threads, scale).map_err(|e| {
        crate::report_error(&e);
        exit::BAD_INPUT
    })?;
    let info = source.workload_info(&program);
    Ok((program, info))
}

/// Parse a `--pin` list, reporting errors the standard way.
pub fn parse_pin(pin: &Option<String>) -> Result<Option<Vec<usize>>, i32> {
    let Some(text) = pin else { return Ok(None) };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    smplab_record::cpus::parse_cpu_list(text)
        .and_then(|cpus| smplab_record::cpus::check_cpus_exist(&cpus, cores).map(|_| cpus))
        .map(Some)
        .map_err(|e| {
            crate::report_error(format!("--pin: {e}"));
            // A well-formed list naming a CPU this host lacks is a request the
            // host cannot meet; a malformed list is bad input.
            match e {
                smplab_record::cpus::CpuListError::NoSuchCpu { .. } => exit::RESOURCE_LIMIT,
                _ => exit::BAD_INPUT,
            }
        })
}

/// Print (and optionally save) a record; returns the exit status for it.
pub fn emit(record: &RunRecord, json: bool, output: &Option<PathBuf>) -> i32 {
    if json {
        println!("{}", record.to_json_pretty());
    } else {
        print!("{}", record.summary());
    }
    if let Some(path) = output {
        if let Err(e) = std::fs::write(path, record.to_json_pretty() + "\n") {
            crate::report_error(format!("cannot write {}: {e}", path.display()));
            return exit::RUN_FAILED;
        }
    }
    if record.is_ok() {
        exit::OK
    } else {
        exit::RUN_FAILED
    }
}

pub fn run(args: &RunArgs) -> i32 {
    let (program, info) = match load_program(&args.workload, args.threads, args.scale) {
        Ok(x) => x,
        Err(status) => return status,
    };
    let pin = match parse_pin(&args.pin) {
        Ok(p) => p,
        Err(status) => return status,
    };
    let result = match args.executor {
        ExecutorArg::Native => {
            let opts = smplab_native::NativeOptions {
                pin,
                ..Default::default()
            };
            smplab_native::run(&program, info, &opts).map_err(|e| (e.exit_status(), e.to_string()))
        }
        ExecutorArg::Vm | ExecutorArg::Qemu => {
            let opts = smplab_guest::VmRunOptions {
                vcpus: args.vcpus,
                sync: args.sync,
                idle: args.idle,
                pin,
                timeout: std::time::Duration::from_secs(args.timeout.max(1)),
                show_console: args.console,
                timer_hz: args.timer_hz,
                mem_bytes: args.mem,
                ..Default::default()
            };
            let result = if matches!(args.executor, ExecutorArg::Vm) {
                smplab_guest::run_vm(&program, info, &opts)
            } else {
                smplab_guest::run_qemu(&program, info, &opts)
            };
            result.map_err(|e| (e.exit_status(), e.to_string()))
        }
    };
    match result {
        Ok(record) => emit(&record, args.json, &args.output),
        Err((status, message)) => {
            crate::report_error(message);
            status
        }
    }
}
