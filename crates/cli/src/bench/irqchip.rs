//! `smplab bench irqchip`: Seoul thesis Figure 5.x on real workloads. The
//! IPI-heavy shootdown-like and dedup-like profiles and the HLT/wake-heavy
//! ocean_ncp-like one run at 1, 2 and 3 vCPUs (3 is overcommitted on a 2-CPU
//! host) with threads = vCPUs, natively and on smplab-vmm in every sync mode,
//! with KVM's in-kernel irqchip and with smplab-vmm's own (`--irqchip user`).
//!
//! The points (built-in spec `bench-irqchip` at the default flags) run
//! through the one execute path into a results store, so a rerun resumes and
//! `smplab lab report` reads it; the table is the view
//! `smplab_analysis::bench::irqchip::table` of that store. Repetitions are
//! interleaved (every configuration's repetition 0 first) so host load
//! drifts hit all alike.

use smplab_experiment::point::Point;
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::runner::Runner;
use smplab_record::config::{
    GuestSettings, Irqchip, NativeSettings, Placement, RunConfig, SyncMode, Timeout, VmSettings,
};
use smplab_record::{exit, outln};
use std::path::PathBuf;

/// `smplab bench ...`
#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// User-space vs in-kernel interrupt controllers under the four sync modes.
    Irqchip(IrqchipBenchArgs),
    /// Interrupt delivery latency by interrupt affinity under pCPU contention.
    Io(crate::bench::io::IoBenchArgs),
    /// The simulator's cost per event from 512 to 16,384 host CPUs
    /// (one child process per size; docs/sim-performance.md).
    SimScale(crate::bench::sim_scale::SimScaleArgs),
}

/// Options of `smplab bench irqchip`.
#[derive(Debug, Clone, clap::Args)]
pub struct IrqchipBenchArgs {
    /// Workloads (built-in names or files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "shootdown,dedup,ocean_ncp"
    )]
    pub workloads: Vec<String>,
    /// Scale of the workloads' work (small: this host's guest kernel mode is slow).
    #[arg(long, default_value_t = 0.05)]
    pub scale: f64,
    /// vCPU counts (threads = vCPUs); counts above the host's CPUs are marked
    /// overcommitted.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub vcpus: Vec<u32>,
    /// Sync modes.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "global,iothread,hybrid,fine"
    )]
    pub sync: Vec<SyncMode>,
    /// Interrupt controllers to compare (`kernel` is the baseline).
    #[arg(long, value_delimiter = ',', default_value = "kernel,user")]
    pub irqchip: Vec<Irqchip>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// With --irqchip user: the VMM's halt-poll window in ns.
    #[arg(long, default_value_t = 0)]
    pub vmm_halt_poll_ns: u64,
    /// Time limit of one run (`30s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value_t = smplab_record::config::DEFAULT_TIMEOUT)]
    pub timeout: Timeout,
    /// Results store (resumed when it exists).
    #[arg(long, default_value = "lab-results/bench-irqchip/results.jsonl")]
    pub store: PathBuf,
}

/// `smplab bench <what>`: an exit status from `smplab_record::exit`.
pub fn bench(cmd: &BenchCmd) -> i32 {
    match cmd {
        BenchCmd::Irqchip(args) => run_irqchip_bench(args, &RealRunner::default()),
        BenchCmd::Io(args) => crate::bench::io::bench_io(args, &RealRunner::default()),
        BenchCmd::SimScale(args) => crate::bench::sim_scale::bench_sim_scale(args),
    }
}

/// The bench's configurations, workload by workload: per vCPU count a native
/// run (threads = vCPUs, floating) and one smplab-vmm run per interrupt
/// controller and sync mode.
pub fn configs(args: &IrqchipBenchArgs) -> Vec<Point> {
    let timeout_s = args.timeout.duration().as_secs().max(1);
    let mut out = Vec::new();
    for name in &args.workloads {
        for &vcpus in &args.vcpus {
            let mut push = |config: RunConfig| {
                let mut p = Point::new(name.clone(), vcpus, args.scale, config);
                p.timeout_s = timeout_s;
                out.push(p);
            };
            push(RunConfig::Native(NativeSettings {
                placement: Placement::Float,
                ..NativeSettings::default()
            }));
            for &irqchip in &args.irqchip {
                for &sync in &args.sync {
                    push(RunConfig::Vm(VmSettings {
                        irqchip,
                        vmm_halt_poll_ns: if irqchip == Irqchip::User {
                            args.vmm_halt_poll_ns
                        } else {
                            0
                        },
                        ..VmSettings::new(GuestSettings::new(vcpus), sync)
                    }));
                }
            }
        }
    }
    out
}

fn host_cpus() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Run the bench's points not yet in the store with `runner`, then print
/// the view of the store.
pub fn run_irqchip_bench(args: &IrqchipBenchArgs, runner: &dyn Runner) -> i32 {
    for w in &args.workloads {
        if let Err(e) = smplab_workload::Source::resolve(w) {
            exit::report_error(&e);
            return exit::BAD_INPUT;
        }
    }
    let configs = configs(args);
    let points = crate::bench::repeat(&configs, args.reps);
    let (store, summary) = match crate::bench::run_into_store(&points, &args.store, runner, None) {
        Ok(s) => s,
        Err(status) => return status,
    };
    let cpus = host_cpus();
    outln!(
        "smplab bench irqchip: scale {}, {} repetitions, host CPUs {cpus}, load average {}, store {}",
        args.scale,
        args.reps,
        load_average(),
        args.store.display()
    );
    outln!(
        "{} points: {} already done, {} ok, {} failed, {} skipped",
        summary.total,
        summary.already_done,
        summary.ok,
        summary.failed,
        summary.skipped
    );
    let entries = crate::bench::entries_of(&store, &configs);
    smplab_record::out!("{}", smplab_analysis::bench::irqchip::table(&entries, cpus));
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

    #[derive(Parser)]
    struct Cmd {
        #[command(subcommand)]
        bench: BenchCmd,
    }

    #[test]
    fn flags_parse_into_typed_axes() {
        let c = Cmd::try_parse_from([
            "bench",
            "irqchip",
            "--sync",
            "global,hybrid",
            "--irqchip",
            "user",
            "--vcpus",
            "1,2",
        ])
        .expect("parses");
        let BenchCmd::Irqchip(a) = c.bench else {
            panic!("parsed as another bench: {:?}", c.bench)
        };
        assert_eq!(a.sync, vec![SyncMode::Global, SyncMode::Hybrid]);
        assert_eq!(a.irqchip, vec![Irqchip::User]);
        assert_eq!(a.vcpus, vec![1, 2]);
        assert_eq!(a.workloads, vec!["shootdown", "dedup", "ocean_ncp"]);
        assert!(Cmd::try_parse_from(["bench", "irqchip", "--irqchip", "usr"]).is_err());
    }

    fn parse(args: &[&str]) -> IrqchipBenchArgs {
        let mut argv = vec!["bench", "irqchip"];
        argv.extend_from_slice(args);
        match Cmd::try_parse_from(argv).expect("parses").bench {
            BenchCmd::Irqchip(a) => a,
            other => panic!("parsed as another bench: {other:?}"),
        }
    }

    fn keys(points: &[Point]) -> std::collections::BTreeSet<String> {
        points.iter().map(Point::key).collect()
    }

    #[test]
    fn default_flags_are_the_built_in_spec() {
        let a = parse(&[]);
        let spec = smplab_analysis::tune::load_spec(std::path::Path::new("bench-irqchip"))
            .expect("built-in spec");
        let points = crate::bench::repeat(&configs(&a), a.reps);
        assert_eq!(points.len(), spec.points.len());
        assert_eq!(keys(&points), keys(&spec.points));
        assert_eq!(spec.timeout_s, a.timeout.duration().as_secs());
        assert_eq!(
            a.store,
            crate::bench::default_store(&spec.name),
            "`lab run bench-irqchip` and the bench share a store"
        );
    }

    #[test]
    fn a_rerun_resumes_and_the_view_reads_the_store() {
        let dir = smplab_experiment::testutil::temp_dir("bench-irqchip");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "dedup",
            "--vcpus",
            "1,2",
            "--sync",
            "global",
            "--reps",
            "2",
            "--scale",
            "0.01",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = smplab_experiment::runner::fake::FakeRunner::new();
        assert_eq!(run_irqchip_bench(&a, &runner), exit::OK);
        let stored = smplab_experiment::store::Store::read(&store).expect("store");
        // 2 repetitions x 2 vCPU counts x (native + kernel + user).
        assert_eq!(stored.entries().len(), 12);
        assert_eq!(run_irqchip_bench(&a, &runner), exit::OK);
        let again = smplab_experiment::store::Store::read(&store).expect("store");
        assert_eq!(again.entries().len(), 12, "a rerun runs nothing new");
        let entries = crate::bench::entries_of(&again, &configs(&a));
        let table = smplab_analysis::bench::irqchip::table(&entries, 1);
        assert!(table.contains("== dedup (native P = "), "{table}");
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("kernel") || l.starts_with("user"))
            .collect();
        assert_eq!(rows.len(), 4, "{table}");
        // The fake runner's user and kernel times are equal: ratio 1.
        assert!(
            rows.iter()
                .any(|r| r.starts_with("user") && r.contains("1.00x [1.00-1.00]")),
            "{table}"
        );
        // 2 vCPUs on a 1-CPU host: marked overcommitted.
        assert!(rows.iter().any(|r| r.contains("2*")), "{table}");
        // `smplab lab report --store` reads the bench's store.
        let files = smplab_report::write_report(
            &again,
            &dir.join("report"),
            &smplab_report::ReportOptions {
                title: "bench irqchip".into(),
                ..Default::default()
            },
        )
        .expect("report");
        let html = std::fs::read_to_string(&files.html).expect("report page");
        assert!(html.contains("dedup"), "the report names the workload");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_real_run_goes_into_the_store() {
        if !smplab_experiment::testutil::have_kvm() {
            return;
        }
        let dir = smplab_experiment::testutil::temp_dir("bench-irqchip-real");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "dedup",
            "--vcpus",
            "1",
            "--sync",
            "fine",
            "--irqchip",
            "kernel",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--timeout",
            "60",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = RealRunner::default();
        assert_eq!(run_irqchip_bench(&a, &runner), exit::OK);
        let stored = smplab_experiment::store::Store::read(&store).expect("store");
        assert_eq!(stored.entries().len(), 2);
        assert!(stored.entries().iter().all(|e| e.is_ok()));
        let entries = crate::bench::entries_of(&stored, &configs(&a));
        let table = smplab_analysis::bench::irqchip::table(&entries, 2);
        let row = table
            .lines()
            .find(|l| l.starts_with("kernel   fine"))
            .unwrap_or_else(|| panic!("no kernel/fine row: {table}"));
        // One vCPU count: its own speedup base.
        assert!(row.contains("1.00x"), "{row}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
