//! `smplab tune host-matrix`: the Kulkarni & Kulkarni matrix on the real multi-VM host
//! (`smplab host`, docs/host.md) at this machine's scale: 2 VMs of 2 vCPUs
//! on 2 host CPUs (overcommit 2), per profile:
//!
//! - vCPU affinity × time slice: `linux` with the vCPU threads pinned
//!   (vCPU i on host CPU i) or floating, the host kernel's own slice; and the
//!   user-level `rr:SLICE` scheduler at 1, 4 and 16 ms, floating (it grants
//!   any free CPU) or, at 1 and 4 ms, pinned (the scheduler's per-vCPU
//!   affinity: vCPU i of both VMs on host CPU i).
//! - interrupt affinity (profiles with `io` ops only): vCPU 0, vCPU 1,
//!   balanced, and under `rr` `running` (the scheduler keeps the guest's
//!   routing page pointed at the VM's running vCPUs: vBalance).
//!
//! Every configuration is a host run (`VmSettings::host_policy`,
//! `host_pinned`, `host_tuner`) run through the one execute path into a
//! results store, so a rerun resumes and `smplab lab report` and `smplab
//! tune winners STORE` read it. Repetitions are interleaved (all
//! configurations of rep 0, then rep 1...). A configuration the host refuses
//! is listed as failed with the reason.

use clap::Args;
use smplab_analysis::tune::winners::{cells_of, winners_table, HostSetting, Setting};
use smplab_experiment::point::Point;
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::runner::Runner;
use smplab_experiment::store::Status;
use smplab_record::config::{HostPolicy, IrqAffinity, PolicyKind, Timeout};
use smplab_record::cpus::CpuList;
use smplab_record::exit::{self, report_error};
use smplab_record::outln;
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct HostMatrixArgs {
    /// Workloads: cache-sensitive, resched-IPI-heavy, I/O-heavy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "streamcluster,dedup,oltp"
    )]
    pub workloads: Vec<String>,
    /// Repetitions of every configuration.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Workload scale.
    #[arg(long, default_value_t = 0.5)]
    pub scale: f64,
    /// Host CPUs the VMs share.
    #[arg(long, default_value = "0-1")]
    pub host_cpus: CpuList,
    /// Time limit of one run (`120s`, `500ms`; a bare number is seconds).
    #[arg(long, default_value = "120s")]
    pub timeout: Timeout,
    /// Write the cells (every run's throughput) as JSON here, for `smplab
    /// tune winners --host FILE` (`tune winners` also reads the store).
    #[arg(short = 'o', long)]
    pub output: Option<PathBuf>,
    /// Results store (resumed when it exists).
    #[arg(long, default_value = "lab-results/tune-host-matrix/results.jsonl")]
    pub store: PathBuf,
}

const MS: u64 = 1_000_000;

fn linux() -> HostPolicy {
    HostPolicy {
        kind: PolicyKind::Linux,
        ..HostPolicy::default()
    }
}

/// The user-level round robin at a slice of `slice_ms`.
fn rr(slice_ms: u64) -> HostPolicy {
    HostPolicy {
        kind: PolicyKind::RoundRobin,
        time_slice_ns: Some(slice_ms * MS),
        safe_point_grace_ns: None,
    }
}

/// The matrix's settings for a workload with (`io`) or without device
/// interrupts.
fn configs(io: bool) -> Vec<HostSetting> {
    // (policy, vCPU i on host CPU i)
    let policies = [
        (linux(), true),
        (linux(), false),
        (rr(1), false),
        (rr(4), false),
        (rr(16), false),
        (rr(1), true),
        (rr(4), true),
    ];
    let irqs = |user_level: bool| -> Vec<IrqAffinity> {
        if !io {
            return vec![IrqAffinity::default()];
        }
        let mut list = vec![
            IrqAffinity::Vcpus(vec![0]),
            IrqAffinity::Vcpus(vec![1]),
            IrqAffinity::Balanced,
        ];
        if user_level {
            list.push(IrqAffinity::Running);
        }
        list
    };
    let mut out = Vec::new();
    for (policy, pinned) in policies {
        for irq in irqs(policy.is_user_level()) {
            out.push(HostSetting {
                policy,
                pinned,
                irq,
                tuner: false,
            });
        }
    }
    // The tuner from the default user-level slice and from the longest.
    for policy in [rr(4), rr(16)] {
        out.push(HostSetting {
            policy,
            pinned: false,
            irq: IrqAffinity::default(),
            tuner: true,
        });
    }
    out
}

/// The matrix's points (repetition 0): per workload, every setting as a
/// host run of 2 VMs x 2 vCPUs (2 threads each) on the host CPUs.
pub fn matrix_points(a: &HostMatrixArgs) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    for w in &a.workloads {
        let io = smplab_workload::Source::resolve(w)
            .map_err(|e| e.to_string())
            .and_then(|s| s.instantiate(Some(2), a.scale).map_err(|e| e.to_string()))
            .map_err(|e| format!("workload {w}: {e}"))?
            .uses_io();
        for c in configs(io) {
            let mut p = Point::new(w.clone(), 2, a.scale, c.run_config(&a.host_cpus.0));
            p.timeout_s = a.timeout.duration().as_secs().max(1);
            out.push(p);
        }
    }
    Ok(out)
}

pub fn host_matrix(a: &HostMatrixArgs) -> i32 {
    host_matrix_with(a, &RealRunner::default())
}

/// Run the matrix's points the store lacks with `runner`; print the winners
/// table of the store's runs of these points.
pub fn host_matrix_with(a: &HostMatrixArgs, runner: &dyn Runner) -> i32 {
    if !(a.scale.is_finite() && a.scale > 0.0) {
        report_error("--scale: give a positive scale");
        return exit::BAD_INPUT;
    }
    let configs = match matrix_points(a) {
        Ok(p) => p,
        Err(e) => {
            report_error(e);
            return exit::BAD_INPUT;
        }
    };
    for p in &configs {
        if let Err(errs) = p.config.validate(Some(4)) {
            for e in errs {
                report_error(format!("{}: {e}", p.label()));
            }
            return exit::BAD_INPUT;
        }
    }
    let points = crate::bench::repeat(&configs, a.reps);
    let (store, summary) = match crate::bench::run_into_store(&points, &a.store, runner, None) {
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
        a.store.display()
    );
    let entries = crate::bench::entries_of(&store, &configs);
    let cells = cells_of(&entries);
    outln!("{}", winners_table(&cells));
    let failures: Vec<String> = entries
        .iter()
        .filter_map(|e| {
            let why = match &e.status {
                Status::Ok => return None,
                Status::Failed { reason } | Status::Skipped { reason } => reason,
            };
            Some(format!(
                "{} {} (rep {}): {}",
                e.point.workload,
                Setting::of(&e.point.config),
                e.point.rep,
                why.lines().next().unwrap_or("")
            ))
        })
        .collect();
    if !failures.is_empty() {
        outln!("{} runs failed:", failures.len());
        for f in failures.iter().take(12) {
            outln!("  {f}");
        }
    }
    if let Some(path) = &a.output {
        match serde_json::to_string_pretty(&cells) {
            Ok(text) => {
                if let Err(e) = std::fs::write(path, text) {
                    report_error(format!("cannot write {}: {e}", path.display()));
                    return exit::RUN_FAILED;
                }
            }
            Err(e) => {
                report_error(format!("cannot encode the cells: {e}"));
                return exit::INTERNAL;
            }
        }
    }
    if failures.is_empty() && summary.failed + summary.skipped == 0 {
        exit::OK
    } else {
        exit::PARTIAL
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use smplab_experiment::store::Store;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        matrix: HostMatrixArgs,
    }

    fn parse(args: &[&str]) -> HostMatrixArgs {
        let mut argv = vec!["host-matrix"];
        argv.extend_from_slice(args);
        Cmd::try_parse_from(argv).expect("parses").matrix
    }

    #[test]
    fn the_settings_are_typed_and_every_one_is_a_valid_host_run() {
        // 7 policy/pinning pairs, then the tuner from 4 and 16 ms.
        assert_eq!(configs(false).len(), 9);
        // I/O: 3 affinities each, `running` under the 5 user-level ones.
        assert_eq!(configs(true).len(), 7 * 3 + 5 + 2);
        let a = parse(&[]);
        assert_eq!(a.host_cpus, CpuList(vec![0, 1]));
        let points = matrix_points(&a).expect("points");
        assert_eq!(points.len(), 9 + 9 + 28);
        for p in &points {
            p.config
                .validate(Some(4))
                .unwrap_or_else(|e| panic!("{}: {e:?}", p.label()));
            // The stored configuration reads back as the setting it was built from.
            let s = Setting::of(&p.config).to_string();
            assert!(s.contains("irq "), "{s}");
        }
        let labels: std::collections::BTreeSet<String> = points
            .iter()
            .filter(|p| p.workload == "dedup")
            .map(|p| Setting::of(&p.config).to_string())
            .collect();
        assert!(labels.contains("slice linux, pinned, irq 0"), "{labels:?}");
        assert!(
            labels.contains("slice linux, floating, irq 0"),
            "{labels:?}"
        );
        assert!(
            labels.contains("slice 1000 us, pinned, irq 0"),
            "{labels:?}"
        );
        assert!(
            labels.contains("tuner from 16000 us, floating, irq 0"),
            "{labels:?}"
        );
        assert_eq!(labels.len(), 9);
        for bad in [
            &["--cpus", "0-1"][..],
            &["--timeout-s", "9"],
            &["--out", "x"],
        ] {
            assert!(
                Cmd::try_parse_from([&["m"][..], bad].concat()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_rerun_resumes_and_the_winners_come_from_the_store() {
        let dir = smplab_experiment::testutil::temp_dir("host-matrix");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "dedup",
            "--reps",
            "2",
            "--scale",
            "0.01",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let runner = smplab_experiment::runner::fake::FakeRunner::new();
        assert_eq!(host_matrix_with(&a, &runner), exit::OK);
        assert_eq!(Store::read(&store).expect("store").entries().len(), 18);
        assert_eq!(host_matrix_with(&a, &runner), exit::OK);
        let again = Store::read(&store).expect("store");
        assert_eq!(again.entries().len(), 18, "a rerun runs nothing new");
        let cells = cells_of(&crate::bench::entries_of(
            &again,
            &matrix_points(&a).expect("points"),
        ));
        assert_eq!(cells.len(), 9);
        assert!(cells.iter().all(|c| c.throughput.len() == 2));
        // `tune winners STORE` groups the same cells.
        assert_eq!(smplab_analysis::tune::winners::cells(&[again]).len(), 9);
        let table = winners_table(&cells);
        assert!(table.contains("dedup          host  win: "), "{table}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_real_run_goes_into_the_store() {
        if !smplab_experiment::testutil::have_kvm() {
            return;
        }
        let dir = smplab_experiment::testutil::temp_dir("host-matrix-real");
        let store = dir.join("results.jsonl");
        let a = parse(&[
            "--workloads",
            "oltp",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--timeout",
            "60",
            "--store",
            store.to_str().expect("utf-8 temp path"),
        ]);
        let status = host_matrix_with(&a, &RealRunner::default());
        let stored = Store::read(&store).expect("store");
        // A run the host's steal disturbed is stored flagged and run again
        // (smplab_experiment::sweep): every point has one current entry, and
        // every line beyond those is a disturbed run that was superseded.
        let latest = stored.latest();
        assert_eq!(latest.len(), 28);
        let superseded = stored.superseded();
        assert!(superseded.iter().all(|e| e.disturbed), "{superseded:?}");
        let failed: Vec<String> = stored
            .entries()
            .iter()
            .filter(|e| !e.is_ok())
            .map(|e| format!("{}: {:?}", e.point.label(), e.status))
            .collect();
        assert!(failed.is_empty(), "{failed:#?}");
        assert_eq!(status, exit::OK);
        let _ = std::fs::remove_dir_all(dir);
    }
}
