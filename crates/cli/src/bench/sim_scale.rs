//! `smplab bench sim-scale`: how the simulator's cost per event grows with
//! the simulated host. One row per host size P: P pCPUs running P/4 VMs of
//! the streamcluster profile (16 threads on 16 vCPUs, scale 100, fair host
//! scheduling), so 4 vCPUs per pCPU, for a simulated horizon. Every size
//! runs in a fresh child process (this binary again, with the hidden
//! `--one-size`), so its peak resident memory is its own and no size warms
//! the caches or the allocator for the next. The child also times the bare
//! binary-heap loop (`smplab_sim::bare_heap`) with one entity per vCPU right
//! after the model: the ratio of the two rates is measured under the same
//! load, where absolute times on a shared host are not comparable from one
//! run to the next.

use smplab_record::config::parse_duration;
use smplab_record::{exit, outln};
use smplab_sim::{simulate_raw, Platform, Scenario, VmSpec};
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
    /// Run one size in this process and print its figures as one line
    /// (what the parent runs in each child).
    #[arg(long, hide = true)]
    pub one_size: Option<u32>,
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
) -> Result<Scenario, smplab_sim::SimError> {
    let vm = VmSpec::from_workload("streamcluster", Some(16), 100.0, 16)?;
    let mut s = Scenario::new(
        Platform::resolve(platform)?,
        pcpus,
        vec![vm; (pcpus / 4) as usize],
    );
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

/// Measure one size in this process.
pub fn measure(pcpus: u32, horizon: Horizon, platform: &str) -> Result<SizeFigures, SimScaleError> {
    let sim_err = |source| SimScaleError::Sim { pcpus, source };
    let s = scenario(pcpus, horizon, platform).map_err(sim_err)?;
    let (c0, t0) = (thread_cpu_s(), Instant::now());
    let run = simulate_raw(&s).map_err(sim_err)?;
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
fn measure_in_child(pcpus: u32, args: &SimScaleArgs) -> Result<SizeFigures, SimScaleError> {
    let exe = std::env::current_exe().map_err(|source| SimScaleError::Spawn { pcpus, source })?;
    let out = Command::new(exe)
        .args(["bench", "sim-scale", "--one-size", &pcpus.to_string()])
        .args(["--horizon", &args.horizon.to_string()])
        .args(["--platform", &args.platform])
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

/// The table of `rows` (markdown): per size the events, wall and CPU time,
/// events/s, peak RSS, the ratio to the bare heap loop and the CPU time per
/// event relative to the first size.
pub fn table(rows: &[SizeFigures]) -> String {
    let mut t = String::from(
        "| host CPUs | vCPUs | events | wall s | CPU s | events/s (CPU) | ns/event | per event vs first | peak RSS MiB | bare heap events/s | ratio to bare heap |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let first = rows.first().map(SizeFigures::ns_per_event);
    for r in rows {
        let rel = first.map_or(1.0, |f| r.ns_per_event() / f.max(1e-9));
        t.push_str(&format!(
            "| {} | {} | {:.1} M | {:.2} | {:.2} | {:.2} M | {:.1} | {:.2}x | {:.1} | {:.2} M | {:.3} |\n",
            r.pcpus,
            u64::from(r.pcpus) * 4,
            r.events as f64 / 1e6,
            r.wall_s,
            r.cpu_s,
            r.rate() / 1e6,
            r.ns_per_event(),
            rel,
            r.peak_rss_kib as f64 / 1024.0,
            r.bare_rate / 1e6,
            r.rate() / r.bare_rate.max(1e-9),
        ));
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
        return match measure(pcpus, args.horizon, &args.platform) {
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
        eprintln!(
            "sim-scale: {pcpus} pCPUs, {} VMs x 16 vCPUs, {} simulated ...",
            pcpus / 4,
            args.horizon
        );
        match measure_in_child(pcpus, args) {
            Ok(f) => {
                eprintln!(
                    "sim-scale: {pcpus} pCPUs: {} events in {:.2} s CPU ({:.1} ns/event)",
                    f.events,
                    f.cpu_s,
                    f.ns_per_event()
                );
                rows.push(f);
            }
            Err(e) => {
                exit::report_error(&e);
                return exit::RUN_FAILED;
            }
        }
    }
    outln!(
        "streamcluster (16 threads, scale 100), 16-vCPU VMs at 4 vCPUs per host CPU, platform {}, {} simulated per size; one child process per size; load average {load_before} before, {} after",
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
    fn a_small_host_runs_and_tabulates() {
        let f = measure(8, Horizon(2_000_000), "kvm2015").unwrap();
        assert_eq!(f.pcpus, 8);
        assert!(f.events > 0);
        let t = table(&[f, f]);
        assert!(t.contains("| 8 | 32 |"), "{t}");
        assert!(t.contains("1.00x"), "{t}");
    }
}
