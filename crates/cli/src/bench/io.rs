//! `smplab bench io`: the interrupt-affinity question of Kulkarni &
//! Kulkarni, "Benchmarking Multiprocessing Parameters in a Virtualized
//! Multi-Core Environment", on real KVM. An I/O-heavy profile (`oltp` by
//! default) runs on smplab-vmm at 2 and 3 vCPUs (3 is overcommitted on a
//! 2-CPU host: the pCPU contention), vCPU i pinned to host CPU i mod the
//! host's CPUs, under each interrupt affinity (`0`, `1`, `balanced`, ...).
//!
//! The points (built-in spec `bench-io` at the default flags) run through
//! the one execute path into a results store, repeated adaptively: at least
//! `--reps`, until every configuration's 95% interval of its median wall
//! time is within `--target` or `--max-reps` is reached. The table is the
//! view `smplab_analysis::bench::io::table` of the store.

use smplab_experiment::point::Point;
use smplab_experiment::runner::Runner;
use smplab_experiment::sweep::Repetitions;
use smplab_record::config::{
    GuestSettings, IoThreadCpus, IrqAffinity, Irqchip, Placement, RunConfig, SyncMode, Timeout,
    VmSettings,
};
use smplab_record::{exit, out, outln};
use std::path::PathBuf;

/// Options of `smplab bench io`.
#[derive(Debug, Clone, clap::Args)]
pub struct IoBenchArgs {
    /// Workload (a built-in name or a file) with `io` ops.
    #[arg(long, default_value = "oltp")]
    pub workload: String,
    /// Workload threads (`n`).
    #[arg(long, default_value_t = 4)]
    pub threads: u32,
    /// Scale of the workload's work.
    #[arg(long, default_value_t = 0.3)]
    pub scale: f64,
    /// vCPU counts.
    #[arg(long, value_delimiter = ',', default_value = "2,3")]
    pub vcpus: Vec<u32>,
    /// Interrupt affinities, `;`-separated (`0` is the baseline and always run).
    #[arg(long, value_delimiter = ';', default_value = "0;1;balanced")]
    pub irq_affinity: Vec<IrqAffinity>,
    /// Interrupt controllers: KVM's (`kernel`) or smplab-vmm's (`user`).
    #[arg(long, default_value = "kernel")]
    pub irqchip: Irqchip,
    /// Host CPUs of the block device's completion thread (`none`: floating).
    #[arg(long, default_value = "none")]
    pub io_thread_cpus: IoThreadCpus,
    /// Repetitions before the intervals are looked at (at least).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// Most repetitions.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub max_reps: u32,
    /// Stop repeating a configuration once the 95% interval of its median
    /// wall time is within ± this fraction of the median; the table says
    /// whether each ratio's interval is within it too.
    #[arg(long, default_value_t = smplab_stats::TARGET_REL_HALF_WIDTH)]
    pub target: f64,
    /// Time limit of one run (`120s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "120s")]
    pub timeout: Timeout,
    /// Results store (resumed when it exists).
    #[arg(long, default_value = "lab-results/bench-io/results.jsonl")]
    pub store: PathBuf,
}

/// The configuration of one vCPU count and interrupt affinity: smplab-vmm,
/// vCPUs pinned (vCPU i on host CPU i mod the host's CPUs), fine-grained sync.
fn config(args: &IoBenchArgs, vcpus: u32, affinity: &IrqAffinity) -> RunConfig {
    let guest = GuestSettings {
        placement: Placement::Spread,
        irq_affinity: affinity.clone(),
        io_thread_cpus: args.io_thread_cpus.clone(),
        ..GuestSettings::new(vcpus)
    };
    RunConfig::Vm(VmSettings {
        irqchip: args.irqchip,
        ..VmSettings::new(guest, SyncMode::Fine)
    })
}

/// The bench's configurations (repetition 0): per vCPU count, the baseline
/// affinity (vCPU 0) first, then the others.
pub fn configs(args: &IoBenchArgs) -> Vec<Point> {
    let baseline = IrqAffinity::default();
    let mut affinities = vec![baseline.clone()];
    affinities.extend(
        args.irq_affinity
            .iter()
            .filter(|a| **a != baseline)
            .cloned(),
    );
    let mut out = Vec::new();
    for &vcpus in &args.vcpus {
        for affinity in &affinities {
            let mut p = Point::new(
                args.workload.clone(),
                args.threads,
                args.scale,
                config(args, vcpus, affinity),
            );
            p.timeout_s = args.timeout.duration().as_secs().max(1);
            out.push(p);
        }
    }
    out
}

/// `smplab bench io`: runs what the store lacks, prints the table; an exit
/// status from `smplab_record::exit`.
pub fn bench_io(args: &IoBenchArgs, runner: &dyn Runner) -> i32 {
    let program = smplab_workload::Source::resolve(&args.workload)
        .map_err(|e| e.to_string())
        .and_then(|s| {
            s.instantiate(Some(args.threads), args.scale)
                .map_err(|e| e.to_string())
        });
    match program {
        Ok(p) if p.uses_io() => {}
        Ok(_) => {
            exit::report_error(format!(
                "{} has no io ops: nothing to measure",
                args.workload
            ));
            return exit::BAD_INPUT;
        }
        Err(e) => {
            exit::report_error(e);
            return exit::BAD_INPUT;
        }
    }
    if args.max_reps < args.reps {
        exit::report_error("--max-reps must be at least --reps");
        return exit::BAD_INPUT;
    }
    if !(args.target.is_finite() && args.target > 0.0) {
        exit::report_error("--target: give a positive fraction, e.g. 0.05");
        return exit::BAD_INPUT;
    }
    let reps = Repetitions {
        min: args.reps,
        max: args.max_reps,
        rel_half_width: args.target,
    };
    let configs = configs(args);
    let (store, summary) =
        match crate::bench::run_into_store(&configs, &args.store, runner, Some(&reps)) {
            Ok(s) => s,
            Err(status) => return status,
        };
    outln!(
        "{} points: {} already done, {} ok, {} failed, {} skipped (store {})",
        summary.total,
        summary.already_done,
        summary.ok,
        summary.failed,
        summary.skipped,
        args.store.display()
    );
    let entries = crate::bench::entries_of(&store, &configs);
    out!(
        "{}",
        smplab_analysis::bench::io::table(&entries, args.target)
    );
    if summary.failed + summary.skipped > 0 {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cmd {
        #[command(subcommand)]
        bench: crate::bench::irqchip::BenchCmd,
    }

    #[test]
    fn flags_parse_into_typed_settings() {
        let c = Cmd::try_parse_from([
            "bench",
            "io",
            "--irq-affinity",
            "1;0,2;balanced",
            "--vcpus",
            "3",
            "--irqchip",
            "user",
            "--io-thread-cpus",
            "1",
            "--timeout",
            "30",
        ])
        .expect("parses");
        let crate::bench::irqchip::BenchCmd::Io(a) = c.bench else {
            panic!("parsed as another bench: {:?}", c.bench)
        };
        assert_eq!(
            a.irq_affinity,
            vec![
                IrqAffinity::Vcpus(vec![1]),
                IrqAffinity::Vcpus(vec![0, 2]),
                IrqAffinity::Balanced
            ]
        );
        assert_eq!((&a.vcpus, a.irqchip), (&vec![3], Irqchip::User));
        assert_eq!(a.io_thread_cpus, IoThreadCpus(vec![1]));
        assert_eq!(a.timeout.duration().as_secs(), 30);
        assert!(Cmd::try_parse_from(["bench", "io", "--irq-affinity", "everywhere"]).is_err());
        assert!(Cmd::try_parse_from(["bench", "io", "--affinity", "1"]).is_err());
        assert!(Cmd::try_parse_from(["bench", "io", "--timeout", "0"]).is_err());
        let cfg = config(&a, 3, &IrqAffinity::Balanced);
        assert_eq!(cfg.irq_affinity(), Some(&IrqAffinity::Balanced));
        assert!(cfg.validate(Some(4)).is_ok(), "{cfg}");
        // The baseline runs first at every vCPU count, even when not asked for.
        let ps = configs(&a);
        assert_eq!(ps.len(), 4);
        assert_eq!(ps[0].config.irq_affinity(), Some(&IrqAffinity::default()));
    }
}
