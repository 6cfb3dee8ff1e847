//! `smplab bench sim-scale`: how the simulator's cost per event grows with
//! the simulated host. One row per host size P: P pCPUs running P/4 VMs of
//! the streamcluster profile (16 threads on 16 vCPUs, scale 100, fair host
//! scheduling), so 4 vCPUs per pCPU, each VM confined to the LLC domain of
//! its pCPUs (`--placement llc`, as VMs are placed on a socket) or floating
//! over the host (`float`), for a simulated horizon; each size with the
//! sequential and the partitioned engine (`smplab_sim::Engine`), which
//! must process the same events. Every engine and size runs in a fresh
//! child process (this binary again, with the hidden
//! `--one-size`), so its peak resident memory is its own and no size warms
//! the caches or the allocator for the next. The child also times the bare
//! binary-heap loop (`smplab_sim::bare_heap`) with one entity per vCPU right
//! after the model: the ratio of the two rates is measured under the same
//! load, where absolute times on a shared host are not comparable from one
//! run to the next.

use smplab_record::config::parse_duration;
use smplab_record::{exit, outln};
use smplab_sim::{simulate_raw_with, Engine, Placement, Platform, Scenario, VmSpec};
use std::process::Command;
use std::str::FromStr;
use std::time::Instant;

/// Options of `smplab bench sim-scale`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimScaleArgs {
    /// Host sizes in pCPUs (each runs P/4 VMs of 16 vCPUs: 4 vCPUs per pCPU).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "512,1024,2048,4096,8192,16384",
        value_parser = clap::value_parser!(u32).range(4..=1_048_576)
    )]
    pub sizes: Vec<u32>,
    /// Simulated time per size (`1s` for one simulated second; `100ms`).
    #[arg(long, default_value = "100ms")]
    pub horizon: Horizon,
    /// Platform profile: a built-in name or a profile TOML file.
    #[arg(long, default_value = "kvm2015")]
    pub platform: String,
    /// Where the VMs' vCPUs may run.
    #[arg(long, value_enum, default_value_t = ScalePlacement::Llc)]
    pub placement: ScalePlacement,
    /// The engines to time, each size with each.
    #[arg(long, value_enum, default_value_t = ScaleEngines::Both)]
    pub engine: ScaleEngines,
    /// Run one size in this process and print its figures as one line
    /// (what the parent runs in each child, with one engine).
    #[arg(long, hide = true)]
    pub one_size: Option<u32>,
}

/// `--placement` of `smplab bench sim-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScalePlacement {
    /// VM k confined to the LLC domain(s) of pCPUs 4k..4k+4: with 4 or
    /// more pCPUs per LLC domain, every VM stays in one, and the
    /// partitioned engine splits the host by domain.
    Llc,
    /// Every vCPU may run on every pCPU (the partitioned engine then runs
    /// sequentially).
    Float,
}

/// `--engine` of `smplab bench sim-scale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScaleEngines {
    Sequential,
    Partitioned,
    /// Both, one child each, alternating size by size.
    Both,
}

impl ScaleEngines {
    fn engines(self) -> &'static [Engine] {
        match self {
            ScaleEngines::Sequential => &[Engine::Sequential],
            ScaleEngines::Partitioned => &[Engine::Partitioned],
            ScaleEngines::Both => &[Engine::Sequential, Engine::Partitioned],
        }
    }

    fn name(engine: Engine) -> &'static str {
        match engine {
            Engine::Sequential => "sequential",
            Engine::Partitioned => "partitioned",
        }
    }
}

/// A positive simulated time span, written `1s`, `200ms`, `500us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Horizon(u64);

/// A malformed or zero horizon.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadHorizon {
    #[error("bad horizon `{0}`: write a simulated time such as 1s, 200ms or 500us")]
    Syntax(String),
    #[error("a horizon of `{0}` simulates nothing: give a positive time, e.g. 100ms")]
    Zero(String),
}

impl FromStr for Horizon {
    type Err = BadHorizon;
    fn from_str(s: &str) -> Result<Horizon, BadHorizon> {
        let ns = parse_duration(s.trim()).map_err(|_| BadHorizon::Syntax(s.to_string()))?;
        if ns == 0 {
            return Err(BadHorizon::Zero(s.to_string()));
        }
        Ok(Horizon(ns))
    }
}

impl std::fmt::Display for Horizon {
    /// The largest unit that divides the span: `1s`, `200ms`, `1500us`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self.0;
        match [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")]
            .into_iter()
            .find(|&(unit, _)| ns.is_multiple_of(unit))
        {
            Some((unit, name)) => write!(f, "{}{name}", ns / unit),
            None => write!(f, "{ns}ns"),
        }
    }
}

/// Why a size could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum SimScaleError {
    #[error("simulating {pcpus} pCPUs: {source}")]
    Sim {
        pcpus: u32,
        source: smplab_sim::SimError,
    },
    #[error("starting the child process for {pcpus} pCPUs: {source}")]
    Spawn { pcpus: u32, source: std::io::Error },
    #[error("the child process for {pcpus} pCPUs failed ({status}): {stderr}")]
    Child {
        pcpus: u32,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the child process for {pcpus} pCPUs printed `{line}`, not its figures")]
    Output { pcpus: u32, line: String },
    #[error("at {pcpus} pCPUs the sequential engine processed {sequential} events and the partitioned {partitioned}: the engines disagree (a bug in engine/partition.rs)")]
    EnginesDisagree {
        pcpus: u32,
        sequential: u64,
        partitioned: u64,
    },
}

/// One size's figures, as the child prints them (space-separated, in this
/// order) and the parent reads them back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeFigures {
    pub pcpus: u32,
    /// Processed events (stale ones apart).
    pub events: u64,
    pub wall_s: f64,
    /// CPU time of the simulating thread.
    pub cpu_s: f64,
    /// The bare heap loop's events per second of thread CPU, same process.
    pub bare_rate: f64,
    /// Peak resident memory of the child (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
}

impl SizeFigures {
    fn line(&self) -> String {
        format!(
            "sim-scale {} {} {:.6} {:.6} {:.1} {}",
            self.pcpus, self.events, self.wall_s, self.cpu_s, self.bare_rate, self.peak_rss_kib
        )
    }

    fn parse(line: &str) -> Option<SizeFigures> {
        let mut f = line.split_whitespace();
        (f.next()? == "sim-scale").then_some(())?;
        let fig = SizeFigures {
            pcpus: f.next()?.parse().ok()?,
            events: f.next()?.parse().ok()?,
            wall_s: f.next()?.parse().ok()?,
            cpu_s: f.next()?.parse().ok()?,
            bare_rate: f.next()?.parse().ok()?,
            peak_rss_kib: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(fig)
    }

    /// The model's processed events per second of thread CPU.
    pub fn rate(&self) -> f64 {
        self.events as f64 / self.cpu_s.max(1e-9)
    }

    /// Thread CPU ns per processed event.
    pub fn ns_per_event(&self) -> f64 {
        self.cpu_s * 1e9 / (self.events.max(1) as f64)
    }
}

/// The scenario of one size: `pcpus` pCPUs, `pcpus / 4` VMs.
pub fn scenario(
    pcpus: u32,
    horizon: Horizon,
    platform: &str,
    placement: ScalePlacement,
) -> Result<Scenario, smplab_sim::SimError> {
    let vm = VmSpec::from_workload("streamcluster", Some(16), 100.0, 16)?;
    let platform = Platform::resolve(platform)?;
    let per_llc = platform.cache.pcpus_per_llc.max(1) as usize;
    let vms = (0..(pcpus / 4) as usize)
        .map(|k| {
            let mut v = vm.clone();
            if placement == ScalePlacement::Llc {
                // pCPUs 4k..4k+4, widened to whole LLC domains.
                let lo = 4 * k / per_llc * per_llc;
                let hi = (4 * k + 4).div_ceil(per_llc) * per_llc;
                v.placement = Placement::Cpus((lo..hi.min(pcpus as usize)).collect());
            }
            v
        })
        .collect();
    let mut s = Scenario::new(platform, pcpus, vms);
    s.horizon_ns = Some(horizon.0);
    s.native_reference = false;
    Ok(s)
}

/// CPU time of the calling thread in seconds: what it ran, not what other
/// tenants of the machine took.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_THREAD_CPUTIME_ID is supported by Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// Peak resident memory of this process, KiB (0 when /proc is unreadable).
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Measure one size in this process with one engine.
pub fn measure(
    pcpus: u32,
    args: &SimScaleArgs,
    engine: Engine,
) -> Result<SizeFigures, SimScaleError> {
    let sim_err = |source| SimScaleError::Sim { pcpus, source };
    let s = scenario(pcpus, args.horizon, &args.platform, args.placement).map_err(sim_err)?;
    let (c0, t0) = (thread_cpu_s(), Instant::now());
    let run = simulate_raw_with(&s, engine).map_err(sim_err)?;
    let (cpu_s, wall_s) = (thread_cpu_s() - c0, t0.elapsed().as_secs_f64());
    // The baseline with one pending event per vCPU, as many events as the
    // model processed (capped: its rate is steady after a few million).
    let bare_events = run.events.clamp(1, 20_000_000);
    let c1 = thread_cpu_s();
    std::hint::black_box(smplab_sim::bare_heap(pcpus * 4, bare_events));
    let bare_rate = bare_events as f64 / (thread_cpu_s() - c1).max(1e-9);
    Ok(SizeFigures {
        pcpus,
        events: run.events,
        wall_s,
        cpu_s,
        bare_rate,
        peak_rss_kib: peak_rss_kib(),
    })
}

/// Measure one size in a fresh child process (this binary, `--one-size`).
fn measure_in_child(
    pcpus: u32,
    args: &SimScaleArgs,
    engine: Engine,
) -> Result<SizeFigures, SimScaleError> {
    let exe = std::env::current_exe().map_err(|source| SimScaleError::Spawn { pcpus, source })?;
    let placement = match args.placement {
        ScalePlacement::Llc => "llc",
        ScalePlacement::Float => "float",
    };
    let out = Command::new(exe)
        .args(["bench", "sim-scale", "--one-size", &pcpus.to_string()])
        .args(["--horizon", &args.horizon.to_string()])
        .args(["--platform", &args.platform])
        .args(["--placement", placement])
        .args(["--engine", ScaleEngines::name(engine)])
        .output()
        .map_err(|source| SimScaleError::Spawn { pcpus, source })?;
    if !out.status.success() {
        return Err(SimScaleError::Child {
            pcpus,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    SizeFigures::parse(line).ok_or_else(|| SimScaleError::Output {
        pcpus,
        line: line.to_string(),
    })
}

/// One size's figures with each engine timed.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleRow {
    pub pcpus: u32,
    pub by_engine: Vec<(Engine, SizeFigures)>,
}

/// The table of `rows` (markdown): per size the events, then per engine
/// the CPU time, ns per event, that relative to the first size, peak RSS
/// and the ratio to the bare heap loop (same child); with both engines,
/// the partitioned engine's CPU time per event over the sequential one's.
pub fn table(rows: &[ScaleRow]) -> String {
    let engines: Vec<Engine> = rows
        .first()
        .map(|r| r.by_engine.iter().map(|(e, _)| *e).collect())
        .unwrap_or_default();
    let mut head = String::from("| host CPUs | vCPUs | events |");
    for &e in &engines {
        let n = ScaleEngines::name(e);
        head.push_str(&format!(
            " {n}: CPU s | ns/event | vs first | peak RSS MiB | ratio to bare heap |"
        ));
    }
    let both = engines.len() == 2;
    if both {
        head.push_str(" partitioned ÷ sequential |");
    }
    let cols = head.matches('|').count() - 1;
    let mut t = format!("{head}\n|{}\n", "---|".repeat(cols));
    let first: Vec<f64> = rows
        .first()
        .map(|r| r.by_engine.iter().map(|(_, f)| f.ns_per_event()).collect())
        .unwrap_or_default();
    for r in rows {
        let events = r.by_engine.first().map_or(0, |(_, f)| f.events);
        t.push_str(&format!(
            "| {} | {} | {:.1} M |",
            r.pcpus,
            u64::from(r.pcpus) * 4,
            events as f64 / 1e6
        ));
        for (i, (_, f)) in r.by_engine.iter().enumerate() {
            let rel = f.ns_per_event() / first.get(i).copied().unwrap_or(1.0).max(1e-9);
            t.push_str(&format!(
                " {:.2} | {:.1} | {:.2}x | {:.1} | {:.3} |",
                f.cpu_s,
                f.ns_per_event(),
                rel,
                f.peak_rss_kib as f64 / 1024.0,
                f.rate() / f.bare_rate.max(1e-9),
            ));
        }
        if both {
            let ns: Vec<f64> = r.by_engine.iter().map(|(_, f)| f.ns_per_event()).collect();
            t.push_str(&format!(" {:.2}x |", ns[1] / ns[0].max(1e-9)));
        }
        t.push('\n');
    }
    t
}

/// The load average (1, 5, 15 minutes) as /proc/loadavg gives it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// `smplab bench sim-scale`: returns the process exit status.
pub fn bench_sim_scale(args: &SimScaleArgs) -> i32 {
    if let Some(pcpus) = args.one_size {
        let engine = match args.engine {
            ScaleEngines::Sequential => Engine::Sequential,
            ScaleEngines::Partitioned => Engine::Partitioned,
            ScaleEngines::Both => {
                eprintln!(
                    "error: --one-size runs one engine: give --engine sequential or partitioned"
                );
                return exit::BAD_INPUT;
            }
        };
        return match measure(pcpus, args, engine) {
            Ok(f) => {
                outln!("{}", f.line());
                exit::OK
            }
            Err(e) => {
                exit::report_error(&e);
                exit::RUN_FAILED
            }
        };
    }
    if let Err(e) = Platform::resolve(&args.platform) {
        exit::report_error(&e);
        return exit::BAD_INPUT;
    }
    let load_before = load_average();
    let mut rows = Vec::with_capacity(args.sizes.len());
    for &pcpus in &args.sizes {
        let mut row = ScaleRow {
            pcpus,
            by_engine: Vec::new(),
        };
        for &engine in args.engine.engines() {
            eprintln!(
                "sim-scale: {pcpus} pCPUs, {} VMs x 16 vCPUs, {} simulated, {} engine ...",
                pcpus / 4,
                args.horizon,
                ScaleEngines::name(engine)
            );
            match measure_in_child(pcpus, args, engine) {
                Ok(f) => {
                    eprintln!(
                        "sim-scale: {pcpus} pCPUs: {} events in {:.2} s CPU ({:.1} ns/event); load average {}",
                        f.events,
                        f.cpu_s,
                        f.ns_per_event(),
                        load_average()
                    );
                    row.by_engine.push((engine, f));
                }
                Err(e) => {
                    exit::report_error(&e);
                    return exit::RUN_FAILED;
                }
            }
        }
        if let [(_, a), (_, b)] = row.by_engine[..] {
            if a.events != b.events {
                exit::report_error(&SimScaleError::EnginesDisagree {
                    pcpus,
                    sequential: a.events,
                    partitioned: b.events,
                });
                return exit::RUN_FAILED;
            }
        }
        rows.push(row);
    }
    outln!(
        "streamcluster (16 threads, scale 100), 16-vCPU VMs at 4 vCPUs per host CPU, placement {:?}, platform {}, {} simulated per size; one child process per size and engine; load average {load_before} before, {} after",
        args.placement,
        args.platform,
        args.horizon,
        load_average()
    );
    outln!("{}", table(&rows));
    exit::OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn horizons_parse_and_refuse_zero() {
        assert_eq!("1s".parse::<Horizon>(), Ok(Horizon(1_000_000_000)));
        assert_eq!("200ms".parse::<Horizon>(), Ok(Horizon(200_000_000)));
        assert!(matches!("0ms".parse::<Horizon>(), Err(BadHorizon::Zero(_))));
        assert!(matches!(
            "soon".parse::<Horizon>(),
            Err(BadHorizon::Syntax(_))
        ));
    }

    #[test]
    fn a_childs_line_reads_back() {
        let f = SizeFigures {
            pcpus: 512,
            events: 1234,
            wall_s: 1.5,
            cpu_s: 1.25,
            bare_rate: 3.0e7,
            peak_rss_kib: 4096,
        };
        assert_eq!(SizeFigures::parse(&f.line()), Some(f));
        assert_eq!(SizeFigures::parse("sim-scale 1 2"), None);
        assert_eq!(SizeFigures::parse(&format!("{} extra", f.line())), None);
    }

    #[test]
    fn a_small_host_runs_both_engines_and_tabulates() {
        let args = SimScaleArgs {
            sizes: vec![32],
            horizon: Horizon(2_000_000),
            platform: "kvm2015".into(),
            placement: ScalePlacement::Llc,
            engine: ScaleEngines::Both,
            one_size: None,
        };
        let seq = measure(32, &args, Engine::Sequential).unwrap();
        let par = measure(32, &args, Engine::Partitioned).unwrap();
        assert_eq!(seq.pcpus, 32);
        assert!(seq.events > 0);
        assert_eq!(seq.events, par.events, "the engines disagree");
        let s = scenario(32, args.horizon, "kvm2015", ScalePlacement::Llc).unwrap();
        assert_eq!(smplab_sim::partitions(&s).unwrap(), Some(4));
        let row = ScaleRow {
            pcpus: 32,
            by_engine: vec![(Engine::Sequential, seq), (Engine::Partitioned, par)],
        };
        let t = table(&[row.clone(), row]);
        assert!(t.contains("| 32 | 128 |"), "{t}");
        assert!(t.contains("1.00x"), "{t}");
        assert!(t.contains("partitioned ÷ sequential"), "{t}");
    }
}
