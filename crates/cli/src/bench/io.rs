//! `smplab bench io`: the interrupt-affinity question of Kulkarni &
//! Kulkarni, "Benchmarking Multiprocessing Parameters in a Virtualized
//! Multi-Core Environment", on real KVM. An I/O-heavy profile (`oltp` by
//! default) runs on smplab-vmm at 2 and 3 vCPUs (3 is overcommitted on a
//! 2-CPU host), vCPU i pinned to host CPU i mod the host's CPUs, with busy
//! host threads for pCPU contention (`--busy-host-threads`, a setting of
//! each point), under each interrupt affinity (`0`, `1`, `balanced`, ...).
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
    /// Busy host threads (floating) competing with the vCPUs for the pCPUs
    /// while each run runs.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=64))]
    pub busy_host_threads: u32,
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
            p.busy_host_threads = args.busy_host_threads;
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
        assert!(Cmd::try_parse_from(["bench", "io", "--hogs", "1"]).is_err());
        assert_eq!(a.busy_host_threads, 1);
        assert!(Cmd::try_parse_from(["bench", "io", "--timeout", "0"]).is_err());
        let cfg = config(&a, 3, &IrqAffinity::Balanced);
        assert_eq!(cfg.irq_affinity(), Some(&IrqAffinity::Balanced));
        assert!(cfg.validate(Some(4)).is_ok(), "{cfg}");
        // The baseline runs first at every vCPU count, even when not asked for.
        let ps = configs(&a);
        assert_eq!(ps.len(), 4);
        assert!(ps.iter().all(|p| p.busy_host_threads == 1));
        assert_eq!(ps[0].config.irq_affinity(), Some(&IrqAffinity::default()));
    }

    fn parse(args: &[&str]) -> IoBenchArgs {
        let mut argv = vec!["bench", "io"];
        argv.extend_from_slice(args);
        match Cmd::try_parse_from(argv).expect("parses").bench {
            crate::bench::irqchip::BenchCmd::Io(a) => a,
            other => panic!("parsed as another bench: {other:?}"),
        }
    }

    fn config_keys(points: &[Point]) -> std::collections::BTreeSet<String> {
        points.iter().map(Point::config_key).collect()
    }

    #[test]
    fn default_flags_are_the_built_in_spec() {
        let a = parse(&[]);
        let spec = smplab_analysis::tune::load_spec(std::path::Path::new("bench-io"))
            .expect("built-in spec");
        assert_eq!(config_keys(&configs(&a)), config_keys(&spec.points));
        assert_eq!(spec.repetitions.min, a.reps);
        assert_eq!(spec.repetitions.max, a.max_reps);
        assert_eq!(spec.repetitions.rel_half_width, a.target);
        assert_eq!(spec.timeout_s, a.timeout.duration().as_secs());
        assert_eq!(a.store, crate::bench::default_store(&spec.name));
    }

    #[test]
    fn a_rerun_resumes_and_the_view_reads_the_store() {
        let dir = smplab_experiment::testutil::temp_dir("bench-io");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--vcpus",
            "2",
            "--irq-affinity",
            "1",
            "--reps",
            "2",
            "--max-reps",
            "4",
            "--scale",
            "0.01",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = smplab_experiment::runner::fake::FakeRunner::new();
        assert_eq!(bench_io(&a, &runner), exit::OK);
        let stored = smplab_experiment::store::Store::read(&store).expect("store");
        // Two configurations; the fake runner's walls are steady, but fewer
        // than 6 repetitions never make a 95% interval: up to the maximum.
        assert_eq!(stored.entries().len(), 8);
        assert_eq!(bench_io(&a, &runner), exit::OK);
        let again = smplab_experiment::store::Store::read(&store).expect("store");
        assert_eq!(again.entries().len(), 8, "a rerun runs nothing new");
        let entries = crate::bench::entries_of(&again, &configs(&a));
        let table = smplab_analysis::bench::io::table(&entries, a.target);
        assert!(table.contains("oltp n=4 scale 0.01"), "{table}");
        assert!(table.contains("4 repetitions"), "{table}");
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.trim_start().starts_with("2 "))
            .collect();
        assert_eq!(rows.len(), 2, "{table}");
        // Fake records carry no interrupt latencies: no figures, not narrow.
        assert!(rows[1].contains(" no "), "{table}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_real_run_goes_into_the_store() {
        if !smplab_experiment::testutil::have_kvm() {
            return;
        }
        let dir = smplab_experiment::testutil::temp_dir("bench-io-real");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--vcpus",
            "2",
            "--threads",
            "2",
            "--irq-affinity",
            "1",
            "--reps",
            "1",
            "--max-reps",
            "1",
            "--scale",
            "0.02",
            "--timeout",
            "60",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = smplab_experiment::runner::real::RealRunner::default();
        assert_eq!(bench_io(&a, &runner), exit::OK);
        let stored = smplab_experiment::store::Store::read(&store).expect("store");
        assert_eq!(stored.entries().len(), 2);
        let entries = crate::bench::entries_of(&stored, &configs(&a));
        let table = smplab_analysis::bench::io::table(&entries, a.target);
        let base = table
            .lines()
            .find(|l| l.trim_start().starts_with("2         0"))
            .unwrap_or_else(|| panic!("no baseline row: {table}"));
        // Measured interrupt latencies, not `-`.
        assert!(!base.contains("   - "), "{table}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn slurm_tasks_of_the_built_in_spec_are_points_the_bench_resumes_from() {
        let dir = smplab_experiment::testutil::temp_dir("bench-io-slurm");
        let store = dir.join("results.jsonl");
        // What an array task of `smplab lab run bench-io --slurm` runs: points
        // of the built-in spec by index, into per-point files.
        let task = smplab_experiment::slurm::RunPointOptions {
            spec: "bench-io".into(),
            index: vec![0, 1, 2],
            store: Some(store.clone()),
            spec_digest: None,
            retry_failed: false,
            qemu: None,
        };
        let runner = smplab_experiment::runner::fake::FakeRunner::new();
        assert_eq!(
            smplab_experiment::slurm::run_point(&task, &store, &runner),
            exit::OK
        );
        // The bench at its default flags finds them done (the same keys).
        let a = parse(&[
            "--max-reps",
            "6",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let (_, summary) = crate::bench::run_into_store(
            &configs(&a),
            &a.store,
            &runner,
            Some(&Repetitions {
                min: a.reps,
                max: a.max_reps,
                rel_half_width: a.target,
            }),
        )
        .expect("store");
        assert_eq!(summary.already_done, 3);
        assert_eq!(summary.ok, 6 * 6 - 3);
        let _ = std::fs::remove_dir_all(dir);
    }
}
