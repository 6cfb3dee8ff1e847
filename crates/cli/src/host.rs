//! The `smplab host` command.

mod bench;

use bench::{bench, BenchArgs};
use clap::{Args, Subcommand};
use smplab_experiment::host::run_host;
use smplab_record::exit;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct HostArgs {
    /// The host spec (docs/host.md): host CPUs, policy, [[vm]] tables.
    #[arg(long)]
    pub spec: Option<PathBuf>,
    /// Print every VM's full record and the host section as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON to this file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Copy the guests' consoles to stderr.
    #[arg(long)]
    pub console: bool,
    /// Run smplab-vmm's threads without their seccomp-bpf filters, for
    /// debugging (docs/vmm.md, "Security"); each VM's record says which.
    #[arg(long)]
    pub no_seccomp: bool,
    #[command(subcommand)]
    pub cmd: Option<HostCmd>,
}

#[derive(Subcommand, Debug)]
pub enum HostCmd {
    /// Weighted speedup of every policy against `linux`: 2 VMs x 2 vCPUs.
    Bench(BenchArgs),
}

/// Run `smplab host`; the process exit status.
pub fn run(args: &HostArgs) -> i32 {
    if let Some(HostCmd::Bench(b)) = &args.cmd {
        return bench(b);
    }
    let Some(path) = &args.spec else {
        exit::report_error("give --spec host.toml (docs/host.md) or `smplab host bench`");
        return exit::BAD_INPUT;
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            exit::report_error(format!("cannot read {}: {e}", path.display()));
            return exit::BAD_INPUT;
        }
    };
    let spec = match smplab_experiment::host::parse(&path.display().to_string(), &text) {
        Ok(s) => s,
        Err(d) => {
            exit::report_error(&d);
            return exit::BAD_INPUT;
        }
    };
    if args.no_seccomp {
        smplab_vmm::seccomp::set_process_default(false);
    }
    let run = match run_host(&spec, None, args.console) {
        Ok(r) => r,
        Err(e) => {
            exit::report_error(&e);
            return e.exit_status();
        }
    };
    // One JSON object (every VM's record and the host section) on one line.
    let json = serde_json::to_string(&run).unwrap_or_default();
    if let Some(out) = &args.output {
        if let Err(e) = std::fs::write(out, &json) {
            exit::report_error(format!("cannot write {}: {e}", out.display()));
            return exit::INTERNAL;
        }
    }
    if args.json {
        println!("{json}");
    } else {
        print_summary(&run);
    }
    if run.all_ok() {
        exit::OK
    } else {
        exit::PARTIAL
    }
}

fn print_summary(run: &smplab_experiment::host::HostRun) {
    let h = &run.host;
    println!(
        "host: policy {} on CPUs {:?}, sampling every {} us",
        h.policy,
        h.host_cpus,
        h.sample_interval_ns / 1000
    );
    for (outcome, vm) in run.records.iter().zip(&h.vms) {
        #[allow(clippy::cast_precision_loss)] // seconds
        let ms = |ns: u64| ns as f64 / 1e6;
        match outcome {
            smplab_experiment::host::VmOutcome::Ok(r) => println!(
                "  VM {}: {} workload {:.1} ms, run {:.1} ms, steal {:.1} ms, preemptions {}, spins detected {}, yields {}, halts {}",
                vm.vm,
                r.workload.name,
                ms(r.timing.wall_ns),
                ms(vm.run_ns),
                ms(vm.steal_ns),
                vm.preemptions,
                vm.spins_detected,
                vm.yields,
                vm.halts_detected
            ),
            smplab_experiment::host::VmOutcome::Failed { vm, error } => println!("  VM {vm}: failed: {error}"),
        }
    }
    for p in &h.pcpus {
        println!("  CPU {}: {:.0}% busy", p.cpu, p.utilisation * 100.0);
    }
    let s = &h.spin_detection;
    if s.enabled {
        println!(
            "  spin detection: {} samples, {} spinning, {:.1} us per sample",
            s.samples,
            s.spins_detected,
            s.mean_sample_ns / 1000.0
        );
        if s.truth.samples > 0 {
            println!(
                "  against the guest's spin word: {} true / {} false positives, {} missed; {}/{} spin episodes caught, {:.0} us mean latency",
                s.truth.true_positives,
                s.truth.false_positives,
                s.truth.false_negatives,
                s.truth.episodes_detected,
                s.truth.episodes_sampled,
                s.truth.mean_detect_latency_ns() / 1000.0
            );
            let run_ns: u64 = h.vms.iter().map(|v| v.run_ns).sum();
            println!(
                "  detector: {}",
                smplab_analysis::bench::host::detector_summary(s, run_ns)
            );
        }
    }
    for d in &run.decisions {
        println!("  tuner: {d}");
    }
}
