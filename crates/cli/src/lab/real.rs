//! `smplab lab real`: the seeds' method on real programs. For each program
//! (pigz, xz, zstd and GNU sort, each on an input it writes once), the
//! program runs natively, in a Linux guest on smplab-vmm (`linux`) and on
//! QEMU (`linux-qemu`); beside them its traced model (`smplab trace` →
//! `trace model`, made once and kept) runs natively, in the smplab guest
//! (`vm`) and in the simulator (`sim`). All points go into one store (a rerun
//! resumes) and the report's table (smplab_report::real) puts the real
//! slowdown beside the model's.

use clap::Args;
use smplab_experiment::point::Point;
use smplab_experiment::repetitions::Repetitions;
use smplab_experiment::runner::real::RealRunner;
use smplab_experiment::store::Store;
use smplab_experiment::sweep::{print_summary, run_repeated_with, SweepOptions};
use smplab_record::config::{
    LinuxGuestSettings, LinuxQemuSettings, LinuxSettings, NativeSettings, QemuMachine, RunConfig,
    SimSettings, SyncMode, Timeout, DEFAULT_PLATFORM, DEFAULT_TIMEOUT,
};
use smplab_record::exit::{self, report_error};
use smplab_record::interference::StealThreshold;
use smplab_record::{outln, Executor};
use std::path::{Path, PathBuf};

/// The programs `lab real` runs, by name.
pub const PROGRAMS: [&str; 4] = ["pigz", "xz", "zstd", "sort"];

#[derive(Debug, Clone, Args)]
pub struct LabRealArgs {
    /// Repetitions of every configuration (6 or more give 95% intervals).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub reps: u32,
    /// vCPUs of the guests, and the programs' thread count.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub vcpus: u32,
    /// The Linux guests' kernel (bzImage or PVH ELF). Default: $SMPLAB_LINUX_KERNEL.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Which programs (comma-separated): pigz, xz, zstd, sort. Default: all.
    #[arg(long, value_delimiter = ',')]
    pub programs: Vec<String>,
    /// Size of the input the programs compress and sort, e.g. 2M.
    #[arg(long, default_value = "2M", value_parser = smplab_vmm::command::parse_size)]
    pub input_size: u64,
    /// Simulator platform profile for the model's `sim` points.
    #[arg(long, default_value = DEFAULT_PLATFORM)]
    pub platform: String,
    /// Results store. Default: lab-results/real/results.jsonl.
    #[arg(long)]
    pub store: Option<PathBuf>,
    /// Give up on one run after this long.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT)]
    pub timeout: Timeout,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// One program of the study: its argv, and its model's file.
struct Case {
    name: &'static str,
    argv: Vec<String>,
    model: PathBuf,
}

/// The argv of `name` on `input` with `threads` threads. Each writes its
/// result to a file (`-k -f`, `-o`), not to stdout: tracing inherits the
/// terminal. Block sizes are set so a 2 MB input gives every thread work
/// (xz and zstd otherwise make one block of a small file).
fn argv(name: &str, input: &Path, threads: u32) -> Vec<String> {
    let input = input.display().to_string();
    let t = threads.to_string();
    let zstd_threads = format!("-T{t}");
    let args: Vec<String> = match name {
        "pigz" => vec!["pigz", "-p", &t, "-k", "-f", &input],
        "xz" => vec![
            "xz",
            "-T",
            &t,
            "--block-size=256KiB",
            "-k",
            "-f",
            "-3",
            &input,
        ],
        "zstd" => vec![
            "zstd",
            "-q",
            &zstd_threads,
            "-B1MiB",
            "-k",
            "-f",
            "-6",
            &input,
        ],
        "sort" => {
            return [
                program_path("sort"),
                format!("--parallel={t}"),
                "-S".into(),
                "64M".into(),
                "-o".into(),
                format!("{input}.sorted"),
                input,
            ]
            .into()
        }
        _ => Vec::new(),
    }
    .into_iter()
    .map(String::from)
    .collect();
    let mut args = args;
    if let Some(first) = args.first_mut() {
        *first = program_path(first);
    }
    args
}

/// The distribution's program, `/usr/bin/NAME`, where it is: a minimal
/// host (the nested host's busybox) may put a static applet of the same
/// name first on PATH, which cannot be traced.
fn program_path(name: &str) -> String {
    let usr = Path::new("/usr/bin").join(name);
    if usr.is_file() {
        usr.display().to_string()
    } else {
        name.to_string()
    }
}

/// A text input, the same for a given size: lines of words from a fixed
/// pseudo-random sequence (compressible, and with something to sort).
fn write_input(path: &Path, size: u64) -> std::io::Result<()> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() == size) {
        return Ok(());
    }
    const WORDS: [&str; 16] = [
        "virtual",
        "smp",
        "vcpu",
        "lock",
        "holder",
        "preemption",
        "spin",
        "barrier",
        "halt",
        "exit",
        "ipi",
        "cache",
        "guest",
        "host",
        "kernel",
        "thread",
    ];
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while (out.len() as u64) < size {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let word = WORDS[usize::try_from(x >> 60).unwrap_or(0)];
        out.extend_from_slice(word.as_bytes());
        out.push(if (x >> 20).is_multiple_of(8) {
            b'\n'
        } else {
            b' '
        });
        out.extend_from_slice(format!("{}", (x >> 32) % 1000).as_bytes());
        out.push(b' ');
    }
    out.truncate(usize::try_from(size).unwrap_or(out.len()));
    std::fs::write(path, out)
}

/// Trace `argv` and write its model to `model`, unless it is there.
fn ensure_model(name: &str, argv: &[String], model: &Path, threads: u32) -> Result<(), String> {
    if model.exists() {
        return Ok(());
    }
    let trace_path = model.with_extension("trace");
    let traced = smplab_trace::run::trace_program(argv, &trace_path, Some(threads))
        .map_err(|e| format!("tracing {name}: {e}"))?;
    if traced.exit_status() != exit::OK {
        return Err(format!(
            "tracing {name}: the program ended with status {}",
            traced.exit_status()
        ));
    }
    let trace = smplab_trace::format::read(&trace_path).map_err(|e| e.to_string())?;
    let analysis = smplab_trace::analyze::analyze(&trace);
    let opts = smplab_trace::model::ModelOptions {
        name: name.to_string(),
        iters_per_ns: None,
    };
    let built = smplab_trace::model::build(&trace, &analysis, &opts).map_err(|e| e.to_string())?;
    std::fs::write(model, built.toml).map_err(|e| format!("{}: {e}", model.display()))
}

fn linux_guest(args: &LabRealArgs) -> LinuxGuestSettings {
    let mut g = LinuxGuestSettings::new(args.vcpus);
    g.kernel.clone_from(&args.kernel);
    g
}

/// Every point of one case: the program three ways, its model three ways.
fn points(args: &LabRealArgs, case: &Case, input: &Path) -> Result<Vec<Point>, String> {
    let timeout_s = args.timeout.duration().as_secs().max(1);
    let mut guest = linux_guest(args);
    guest.include = vec![input.to_path_buf()];
    let program_configs = [
        RunConfig::Native(NativeSettings::default()),
        RunConfig::Linux(LinuxSettings {
            guest: guest.clone(),
            sync: SyncMode::default(),
            irqchip: Default::default(),
        }),
        RunConfig::LinuxQemu(LinuxQemuSettings {
            guest,
            machine: QemuMachine::default(),
        }),
    ];
    let workload = case.model.display().to_string();
    let source = smplab_workload::Source::resolve(&workload).map_err(|e| e.to_string())?;
    let n = source.default_threads();
    let model_configs = [
        RunConfig::Native(NativeSettings::default()),
        RunConfig::defaults(Executor::Vm, args.vcpus, DEFAULT_PLATFORM),
        RunConfig::Sim(SimSettings::new(args.vcpus, args.platform.clone())),
    ];
    let mut out = Vec::new();
    for c in program_configs {
        out.push(Point::for_program(case.argv.clone(), c));
    }
    for c in model_configs {
        out.push(Point::new(workload.clone(), n, 1.0, c));
    }
    for p in &mut out {
        p.timeout_s = timeout_s;
    }
    Ok(out)
}

pub fn run(args: &LabRealArgs) -> i32 {
    let names: Vec<&str> = if args.programs.is_empty() {
        PROGRAMS.to_vec()
    } else {
        let mut v = Vec::new();
        for p in &args.programs {
            match PROGRAMS.iter().find(|n| **n == p.as_str()) {
                Some(n) => v.push(*n),
                None => {
                    report_error(format!(
                        "--programs {p}: unknown; use {}",
                        PROGRAMS.join(", ")
                    ));
                    return exit::BAD_INPUT;
                }
            }
        }
        v
    };
    let store_path = args
        .store
        .clone()
        .unwrap_or_else(|| PathBuf::from("lab-results/real/results.jsonl"));
    let dir = store_path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let models = dir.join("models");
    if let Err(e) = std::fs::create_dir_all(&models) {
        report_error(format!("cannot create {}: {e}", models.display()));
        return exit::BAD_INPUT;
    }
    // Absolute: the same path inside the guests' initramfs.
    let input = match std::path::absolute(dir.join("input.txt")) {
        Ok(p) => p,
        Err(e) => {
            report_error(format!("{}: {e}", dir.display()));
            return exit::BAD_INPUT;
        }
    };
    if let Err(e) = write_input(&input, args.input_size) {
        report_error(format!("cannot write the input {}: {e}", input.display()));
        return exit::BAD_INPUT;
    }
    // Where the Linux guests can boot, they need a kernel: say so now.
    let runner = RealRunner::default();
    if smplab_experiment::Runner::availability(&runner, Executor::Linux).is_ok() {
        let given = linux_guest(args).kernel;
        if let Err(e) = smplab_experiment::execute::linux::resolve_kernel(given.as_deref()) {
            report_error(e);
            return exit::BAD_INPUT;
        }
    }
    let mut all = Vec::new();
    for name in names {
        let case = Case {
            name,
            argv: argv(name, &input, args.vcpus),
            model: models.join(format!("{name}.toml")),
        };
        let made = ensure_model(case.name, &case.argv, &case.model, args.vcpus)
            .and_then(|()| points(args, &case, &input));
        match made {
            Ok(p) => all.extend(p),
            Err(e) => {
                report_error(e);
                return exit::RUN_FAILED;
            }
        }
    }
    let mut store = match Store::open(&store_path) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let opts = SweepOptions {
        retry_failed: false,
        progress: !args.quiet,
    };
    let summary = match run_repeated_with(
        &all,
        &mut store,
        &runner,
        &opts,
        &Repetitions::fixed(args.reps),
        StealThreshold::default(),
    ) {
        Ok(s) => s,
        Err(e) => {
            report_error(&e);
            return exit::INTERNAL;
        }
    };
    print_summary(&summary);
    let results = smplab_analysis::metrics::Results::new(&store);
    outln!(
        "{}",
        smplab_report::real::table_text(&smplab_report::real::rows(&results))
    );
    if summary.failed > 0 || summary.skipped > 0 {
        exit::PARTIAL
    } else {
        exit::OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_program_has_an_argv_writing_to_a_file() {
        let input = Path::new("/tmp/in.txt");
        for name in PROGRAMS {
            let a = argv(name, input, 2);
            assert!(a[0] == name || a[0] == format!("/usr/bin/{name}"), "{a:?}");
            assert!(a.iter().any(|x| x.contains('2')), "{a:?}");
            assert!(
                a.iter().any(|x| x == "-k" || x == "-o"),
                "{a:?}: not to stdout"
            );
            assert!(a.last().is_some_and(|x| x == "/tmp/in.txt"), "{a:?}");
        }
    }

    #[test]
    fn the_input_is_the_same_for_a_size() {
        let dir = std::env::temp_dir().join(format!("smplab-lab-real-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a"), dir.join("b"));
        write_input(&a, 100_000).unwrap();
        write_input(&b, 100_000).unwrap();
        let text = std::fs::read(&a).unwrap();
        assert_eq!(text.len(), 100_000);
        assert_eq!(text, std::fs::read(&b).unwrap());
        assert!(text.contains(&b'\n'));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
