//! `smplab host bench`: the weighted speedup of two 2-vCPU VMs sharing the
//! host CPUs, for every policy against `linux`, on the spinlock-like,
//! streamcluster-like and dedup-like profiles (docs/host.md), beside the
//! simulator's figure for the same configuration.
//!
//! The points (built-in spec `bench-host` at the default flags: per
//! workload and policy, one VM alone and both VMs together, on smplab-vmm
//! under the policy and in the simulator) run through the one execute path
//! into a results store, so a rerun resumes and `smplab lab report` reads
//! it; the table is the view `smplab_analysis::bench::host` of the store.

use clap::Args;
use smplab_analysis::bench::host::{cells, sim_policy, table};
use smplab_experiment::host::bench_scale::{bench_scale, expected_alone_ms, MIN_ALONE_MS};
use smplab_experiment::point::Point;
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::runner::Runner;
use smplab_experiment::sweep::SweepSummary;
use smplab_record::config::{
    GuestSettings, HostPolicy, Placement, RunConfig, SimSettings, SyncMode, Timeout, VmSettings,
};
use smplab_record::cpus::CpuList;
use smplab_record::interference::StealThreshold;
use smplab_record::{exit, out, outln};
use smplab_vmm::host::Sampling;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Workloads (built-in names or files).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "spinlock,streamcluster,dedup"
    )]
    pub workloads: Vec<String>,
    /// Policies besides `linux` (always measured: the baseline).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "rr:4ms,gang:4ms,partition,spin:4ms,rr:4ms+safepoint:1ms"
    )]
    pub policies: Vec<HostPolicy>,
    /// Workload scale for every workload; by default each profile's own
    /// (`smplab_experiment::host::bench_scale`: one VM alone runs at least
    /// 100 ms here). A scale that makes a run shorter is warned about.
    #[arg(long, value_parser = parse_scale)]
    pub scale: Option<f64>,
    /// Workload threads per VM (default: 2, one per vCPU).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Repetitions (the spread is their min..max).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// Host CPUs the VMs share (the simulator's VMs are confined to the same).
    #[arg(long, default_value = "0-1")]
    pub host_cpus: CpuList,
    /// The host scheduler's sampling interval (`1ms`, `500us`).
    #[arg(long, default_value = "1ms", value_parser = parse_sample)]
    pub sample: Duration,
    /// Simulator platform profile for the `sim` column: a built-in name or a
    /// profile file (e.g. the one `smplab calibrate` wrote for this host).
    #[arg(long, default_value = smplab_record::config::DEFAULT_PLATFORM)]
    pub platform: String,
    /// Time limit of one run (`240s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "240s")]
    pub timeout: Timeout,
    /// Write every figure as JSON here.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Steal threshold: a repetition whose hypervisor steal exceeds this
    /// share of its CPU time is flagged, left out and run again (a budget of
    /// one rerun per point); 1 keeps every repetition.
    #[arg(long, default_value_t = StealThreshold::default())]
    pub steal_threshold: StealThreshold,
    /// Results store (resumed when it exists).
    #[arg(long, default_value = "lab-results/bench-host/results.jsonl")]
    pub store: PathBuf,
}

/// vCPUs of each VM.
const VCPUS: u32 = 2;

/// A workload scale: a positive number.
fn parse_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{s}`: give a positive number, e.g. 2")),
    }
}

/// The scale `workload` runs at: `--scale`, else its profile's own.
fn scale_of(args: &BenchArgs, workload: &str) -> f64 {
    args.scale.unwrap_or_else(|| bench_scale(workload))
}

/// A warning for each workload whose scale makes one VM alone run shorter
/// than [`MIN_ALONE_MS`] on this machine (by the profile's measured length).
fn short_scale_warnings(args: &BenchArgs) -> Vec<String> {
    args.workloads
        .iter()
        .filter_map(|w| {
            let scale = scale_of(args, w);
            let ms = expected_alone_ms(w, scale).filter(|&ms| ms < MIN_ALONE_MS)?;
            Some(format!(
                "warning: at scale {scale} one VM of {w} alone runs about {ms:.0} ms here, under the {MIN_ALONE_MS:.0} ms a host bench needs to mean much (its default scale is {})",
                bench_scale(w)
            ))
        })
        .collect()
}

/// A sampling interval: a duration of at least 100 us.
fn parse_sample(s: &str) -> Result<Duration, String> {
    let ns = smplab_record::config::parse_duration(s).map_err(|e| e.to_string())?;
    if ns < smplab_record::config::MIN_HOST_SAMPLE_NS {
        return Err("a sampling interval below 100us costs more in exits than it can save".into());
    }
    Ok(Duration::from_nanos(ns))
}

/// The run configuration's sampling interval: unset at smplab-vmm's
/// default, so the default bench's points are the built-in spec's.
fn host_sample_ns(args: &BenchArgs) -> Option<u64> {
    (args.sample != Sampling::default().interval)
        .then(|| u64::try_from(args.sample.as_nanos()).unwrap_or(u64::MAX))
}

/// `linux` (the baseline) first, then the others, each once.
fn policies(args: &BenchArgs) -> Vec<HostPolicy> {
    let mut out = vec![HostPolicy::parse("linux").unwrap_or_default()];
    for p in &args.policies {
        if !out.contains(p) {
            out.push(*p);
        }
    }
    out
}

/// The simulator's settings for a policy's column: two-vCPU VMs confined
/// to the host CPUs, on a host with as many pCPUs as vCPUs of one VM unless
/// the list names higher CPUs.
fn sim_config(args: &BenchArgs, policy: HostPolicy, vms: u32) -> RunConfig {
    let max_cpu = args.host_cpus.0.iter().copied().max().unwrap_or(0);
    let mut s = SimSettings::new(VCPUS, args.platform.clone());
    s.vms = vms;
    s.placement = Placement::Cpus(args.host_cpus.0.clone());
    s.pcpus = u32::try_from(max_cpu + 1).ok().filter(|&n| n > VCPUS);
    s.policy = sim_policy(policy);
    RunConfig::Sim(s)
}

/// Policies the simulator does not run as given, with its reason: their
/// cells have no simulator figure.
fn sim_refusals(args: &BenchArgs) -> Vec<(HostPolicy, String)> {
    policies(args)
        .into_iter()
        .filter_map(|p| {
            let errs = sim_config(args, p, 2).validate(None).err()?;
            let why: Vec<String> = errs.iter().map(ToString::to_string).collect();
            Some((p, why.join("; ")))
        })
        .collect()
}

/// The bench's configurations, workload by workload and policy by policy:
/// one VM alone and two together on smplab-vmm under the policy, then the
/// same in the simulator (its `fair` for `linux`) where it runs the policy.
pub fn configs(args: &BenchArgs) -> Vec<Point> {
    let refused = sim_refusals(args);
    let mut out: Vec<Point> = Vec::new();
    for w in &args.workloads {
        for policy in policies(args) {
            let mut configs = Vec::new();
            for vms in [1, 2] {
                let guest = GuestSettings {
                    placement: Placement::Cpus(args.host_cpus.0.clone()),
                    vms,
                    ..GuestSettings::new(VCPUS)
                };
                configs.push(RunConfig::Vm(VmSettings {
                    host_policy: Some(policy),
                    host_sample_ns: host_sample_ns(args),
                    ..VmSettings::new(guest, SyncMode::default())
                }));
            }
            if !refused.iter().any(|(p, _)| *p == policy) {
                configs.extend([1, 2].map(|vms| sim_config(args, policy, vms)));
            }
            for config in configs {
                let mut p = Point::new(w.clone(), args.threads, scale_of(args, w), config);
                p.timeout_s = args.timeout.duration().as_secs().max(1);
                if !out.iter().any(|q| q.key() == p.key()) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// Run the bench; the process exit status.
pub fn bench(args: &BenchArgs) -> i32 {
    bench_with(args, &RealRunner::default())
}

/// Run the bench's points the store lacks with `runner`, print the view.
pub fn bench_with(args: &BenchArgs, runner: &dyn Runner) -> i32 {
    for w in &args.workloads {
        if let Err(e) = smplab_workload::Source::resolve(w) {
            exit::report_error(&e);
            return exit::BAD_INPUT;
        }
    }
    if let Err(e) = smplab_sim::Platform::resolve(&args.platform) {
        exit::report_error(format!("--platform: {e}"));
        return exit::BAD_INPUT;
    }
    let configs = configs(args);
    for p in &configs {
        if let Err(errs) = p.config.validate(None) {
            // A bad flag value (e.g. a CPU list the VMs cannot use).
            for e in errs {
                exit::report_error(format!("{}: {e}", p.label()));
            }
            return exit::BAD_INPUT;
        }
    }
    for w in short_scale_warnings(args) {
        exit::report_error(w);
    }
    let points = crate::bench::repeat(&configs, args.reps);
    let (store, summary) = match crate::bench::run_into_store_with(
        &points,
        &args.store,
        runner,
        None,
        args.steal_threshold,
    ) {
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
    outln!("{}", steal_line(args.steal_threshold, &summary));
    let mut cells = cells(&crate::bench::entries_of(&store, &configs));
    for (policy, why) in sim_refusals(args) {
        for c in cells.iter_mut().filter(|c| c.policy == policy.to_string()) {
            c.sim_error = Some(why.clone());
        }
    }
    out!("{}", table(&cells));
    if let Some(path) = &args.output {
        let json = match serde_json::to_string_pretty(&cells) {
            Ok(j) => j,
            Err(e) => {
                exit::report_error(format!("cannot encode the cells: {e}"));
                return exit::INTERNAL;
            }
        };
        if let Err(e) = std::fs::write(path, json) {
            exit::report_error(format!("cannot write {}: {e}", path.display()));
            return exit::RUN_FAILED;
        }
    }
    if summary.failed + summary.skipped > 0 || cells.iter().any(|c| !c.failures.is_empty()) {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

/// What the steal filter did in this run (the table says, per cell, which
/// repetitions it left out and how much was stolen).
fn steal_line(steal: StealThreshold, summary: &SweepSummary) -> String {
    if !steal.is_on() {
        return "steal filter off (--steal-threshold 1): every repetition counts".into();
    }
    format!(
        "steal filter (--steal-threshold {}): {} runs disturbed (the hypervisor stole more than {:.0}% of their CPU time), {} of them rerun; a repetition whose latest run is disturbed is left out",
        steal.fraction(),
        summary.disturbed,
        steal.fraction() * 100.0,
        summary.reruns
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use smplab_experiment::store::Store;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> BenchArgs {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(args);
        Cmd::try_parse_from(argv).expect("parses").bench
    }

    fn keys(points: &[Point]) -> std::collections::BTreeSet<String> {
        points.iter().map(Point::key).collect()
    }

    #[test]
    fn flags_are_typed_and_the_defaults_are_the_built_in_spec() {
        let a = parse(&[]);
        assert_eq!(a.host_cpus, CpuList(vec![0, 1]));
        assert_eq!(a.platform, smplab_record::config::DEFAULT_PLATFORM);
        assert_eq!(a.policies.len(), 5);
        assert_eq!(host_sample_ns(&a), None);
        assert_eq!(
            host_sample_ns(&parse(&["--sample", "500us"])),
            Some(500_000)
        );
        let spec = smplab_analysis::tune::load_spec(std::path::Path::new("bench-host"))
            .expect("built-in spec");
        let points = crate::bench::repeat(&configs(&a), a.reps);
        assert_eq!(keys(&points), keys(&spec.points));
        assert_eq!(spec.timeout_s, a.timeout.duration().as_secs());
        assert_eq!(a.store, crate::bench::default_store(&spec.name));
        for bad in [
            &["--profiles", "dedup"][..],
            &["--cpus", "0-1"],
            &["--host-cpus", "1-0"],
            &["--policies", "fastest"],
            &["--timeout", "0"],
            &["--sample", "10us"],
            &["--sample", "often"],
        ] {
            assert!(
                Cmd::try_parse_from([&["bench"][..], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn each_profile_runs_at_its_own_scale_unless_told_and_short_ones_are_warned() {
        let a = parse(&[]);
        assert_eq!(a.scale, None);
        assert_eq!(a.steal_threshold, StealThreshold::default());
        let scales: Vec<(String, f64)> = configs(&a)
            .iter()
            .map(|p| (p.workload.clone(), p.scale))
            .collect();
        for (w, scale) in &scales {
            assert_eq!(*scale, bench_scale(w), "{w}");
        }
        assert!(short_scale_warnings(&a).is_empty());
        let small = parse(&["--scale", "0.05"]);
        assert!(configs(&small).iter().all(|p| p.scale == 0.05));
        let warned = short_scale_warnings(&small);
        assert_eq!(warned.len(), 3, "{warned:?}");
        assert!(
            warned[0].contains("spinlock alone runs about 6 ms"),
            "{warned:?}"
        );
        for bad in [
            &["--scale", "0"][..],
            &["--scale", "-1"],
            &["--scale", "big"],
            &["--steal-threshold", "0"],
            &["--steal-threshold", "1.5"],
        ] {
            assert!(
                Cmd::try_parse_from([&["bench"][..], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
    }

    /// Fake runs whose every shared `spin:4ms` run of repetition 1 is 20%
    /// stolen: it is flagged, rerun within the budget and, disturbed each
    /// time, left out of the table with its reason.
    struct StolenSpin(smplab_experiment::runner::fake::FakeRunner);
    impl Runner for StolenSpin {
        fn run(
            &self,
            p: &Point,
        ) -> Result<Vec<smplab_record::RunRecord>, smplab_experiment::runner::RunError> {
            let mut rs = self.0.run(p)?;
            let stolen = p.rep == 1
                && p.config.vms() == 2
                && matches!(&p.config, RunConfig::Vm(v) if v.host_policy.map(|h| h.to_string()).as_deref() == Some("spin:4ms"));
            for r in &mut rs {
                r.interference = Some(smplab_record::interference::Interference {
                    steal_fraction: if stolen { 0.2 } else { 0.0 },
                    ..Default::default()
                });
            }
            Ok(rs)
        }
        fn availability(
            &self,
            e: smplab_record::Executor,
        ) -> Result<(), smplab_experiment::execute::ExecuteError> {
            self.0.availability(e)
        }
    }

    #[test]
    fn the_steal_filter_reruns_and_leaves_out_disturbed_repetitions() {
        let dir = smplab_experiment::testutil::temp_dir("bench-host-steal");
        let store = dir.join("results.jsonl");
        let args = |threshold: &str| {
            parse(&[
                "--workloads",
                "spinlock",
                "--policies",
                "spin:4ms",
                "--reps",
                "3",
                "--steal-threshold",
                threshold,
                "--store",
                store.to_str().expect("utf-8 temp path"),
            ])
        };
        let a = args("0.05");
        let runner = StolenSpin(smplab_experiment::runner::fake::FakeRunner::new());
        assert_eq!(bench_with(&a, &runner), exit::OK);
        let stored = Store::read(&store).expect("store");
        let disturbed = stored.entries().iter().filter(|e| e.disturbed).count();
        // The first run and its reruns, at most RERUNS_IN_A_ROW of them.
        assert_eq!(
            disturbed,
            1 + smplab_experiment::sweep::RERUNS_IN_A_ROW as usize
        );
        let c = cells(&crate::bench::entries_of(&stored, &configs(&a)));
        assert_eq!(c[1].policy, "spin:4ms");
        assert_eq!(c[1].disturbed.len(), 1, "{:?}", c[1].disturbed);
        assert!(
            c[1].disturbed[0].contains("stole 20.0%"),
            "{:?}",
            c[1].disturbed
        );
        assert_eq!(c[1].weighted_speedup.len(), 2);
        assert_eq!(c[0].weighted_speedup.len(), 3, "linux keeps its three");
        let mut summary = SweepSummary {
            disturbed: 4,
            reruns: 3,
            ..SweepSummary::default()
        };
        let line = steal_line(a.steal_threshold, &summary);
        assert!(
            line.contains("4 runs disturbed") && line.contains("3 of them rerun"),
            "{line}"
        );
        summary.disturbed = 0;
        assert!(steal_line(StealThreshold::OFF, &summary).contains("filter off"));
        // Threshold 1 keeps every repetition: a fresh store, nothing left out.
        let _ = std::fs::remove_file(&store);
        let off = args("1");
        assert_eq!(bench_with(&off, &runner), exit::OK);
        let stored = Store::read(&store).expect("store");
        assert!(stored.entries().iter().all(|e| !e.disturbed));
        let c = cells(&crate::bench::entries_of(&stored, &configs(&off)));
        assert!(c[1].disturbed.is_empty());
        assert_eq!(c[1].weighted_speedup.len(), 3);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_rerun_resumes_and_the_view_reads_the_store() {
        let dir = smplab_experiment::testutil::temp_dir("bench-host");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "spinlock",
            "--policies",
            "gang:4ms,spin:4ms",
            "--reps",
            "2",
            "--scale",
            "0.01",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = smplab_experiment::runner::fake::FakeRunner::new();
        assert_eq!(bench_with(&a, &runner), exit::OK);
        // 2 repetitions x (alone, shared) x 3 policies on vm and in the
        // simulator (its `spin` samples a model of smplab-vmm's detector).
        let n = Store::read(&store).expect("store").entries().len();
        assert_eq!(n, 24);
        assert_eq!(bench_with(&a, &runner), exit::OK);
        let again = Store::read(&store).expect("store");
        assert_eq!(again.entries().len(), n, "a rerun runs nothing new");
        let cells = cells(&crate::bench::entries_of(&again, &configs(&a)));
        assert_eq!(cells.len(), 3);
        assert_eq!(cells[0].policy, "linux");
        assert_eq!(cells[2].policy, "spin:4ms");
        assert!(sim_refusals(&a).is_empty());
        // The fake runner: a shared VM takes 1.5 times its alone wall, the
        // same under every policy, so weighted speedup 2/1.5 and 1x linux.
        for c in &cells {
            assert_eq!(c.weighted_speedup.len(), 2, "{c:?}");
            assert!((c.weighted_speedup[0] - 2.0 / 1.5).abs() < 1e-9, "{c:?}");
            assert!((c.vs_linux[0] - 1.0).abs() < 1e-9, "{c:?}");
            assert!(c.sim_weighted_speedup.is_some(), "{c:?}");
        }
        let t = table(&cells);
        let header: Vec<&str> = t.lines().next().unwrap_or("").split("  ").collect();
        assert!(t.lines().next().unwrap_or("").ends_with(" sim"), "{t}");
        assert!(!header.is_empty());
        let row = t.lines().nth(1).unwrap_or("");
        assert!(row.starts_with("spinlock       linux"), "{t}");
        assert!(row.contains("1.33 [1.33..1.33]"), "{t}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_real_run_goes_into_the_store() {
        if !smplab_experiment::testutil::have_kvm() {
            return;
        }
        let dir = smplab_experiment::testutil::temp_dir("bench-host-real");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "spinlock",
            "--policies",
            "rr:4ms",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--timeout",
            "60",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let status = bench_with(&a, &RealRunner::default());
        let stored = Store::read(&store).expect("store");
        // A run the host's steal disturbed is stored flagged and run again
        // (smplab_experiment::sweep): every point has one current entry, and
        // every line beyond those is a disturbed run that was superseded.
        let latest = stored.latest();
        assert_eq!(latest.len(), 8);
        let superseded = stored.superseded();
        assert!(superseded.iter().all(|e| e.disturbed), "{superseded:?}");
        let failed: Vec<_> = stored.entries().iter().filter(|e| !e.is_ok()).collect();
        assert!(failed.is_empty(), "{failed:?}");
        assert_eq!(status, exit::OK);
        let cells = cells(&crate::bench::entries_of(&stored, &configs(&a)));
        assert_eq!(cells.len(), 2);
        // At this tiny scale the two VMs may not overlap for 90% of their
        // windows: then the run is left out, as the lab metrics do.
        for c in &cells {
            assert_eq!(c.weighted_speedup.len() + c.overlap_excluded, 1, "{c:?}");
            assert!(c.weighted_speedup.iter().all(|&w| w > 0.0), "{c:?}");
            assert_eq!(c.samples.len(), c.weighted_speedup.len(), "{c:?}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
