//! `smplab trace`: record a program, `trace model`, `trace show`.

use clap::{Args, Subcommand};
use smplab_record::exit;
use smplab_trace::{analyze, format, model, run, show, TraceError};
use std::path::PathBuf;

#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "Record: smplab trace -o prog.trace -- pigz -p 4 -k big.file\n\
                  Then:   smplab trace show prog.trace --html prog.html\n\
                  \x20       smplab trace model prog.trace -o prog.toml && smplab run --workload prog.toml"
)]
pub struct TraceArgs {
    #[command(subcommand)]
    pub cmd: Option<TraceCmd>,
    /// Write the trace here.
    #[arg(short, long, required = true)]
    pub output: Option<PathBuf>,
    /// How many threads the program was asked to use (kept in the trace; the
    /// model's default_threads).
    #[arg(long)]
    pub threads_hint: Option<u32>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required = true)]
    pub program: Vec<String>,
}

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Turn a trace into a workload model (TOML) every executor runs.
    Model(ModelArgs),
    /// Summarise a trace: threads, objects, contention, time blocked.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct ModelArgs {
    pub trace: PathBuf,
    /// Write the workload here (default: stdout).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// The workload's name (default: the program's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Compute-kernel iterations per ns of CPU time (default: measured now).
    #[arg(long)]
    pub iters_per_ns: Option<f64>,
}

#[derive(Args)]
pub struct ShowArgs {
    pub trace: PathBuf,
    /// Also write an HTML page with a per-thread timeline here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Print the analysis as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

fn report(e: &impl std::fmt::Display) {
    smplab_record::exit::report_error(e);
}

fn fail(e: TraceError) -> i32 {
    report(&e);
    e.exit_status()
}

pub fn run(a: &TraceArgs) -> i32 {
    match &a.cmd {
        Some(TraceCmd::Model(m)) => model_cmd(m),
        Some(TraceCmd::Show(s)) => show_cmd(s),
        None => record_cmd(a),
    }
}

fn record_cmd(a: &TraceArgs) -> i32 {
    let Some(out) = &a.output else {
        report(&"trace: -o FILE is required");
        return exit::BAD_INPUT;
    };
    match run::trace_program(&a.program, out, a.threads_hint) {
        Ok(t) => {
            match t.ending {
                format::Ending::Exited(_) if t.complete => eprintln!(
                    "smplab: traced {} events in {} to {}",
                    t.events,
                    show::fmt_ns(t.wall_ns),
                    out.display()
                ),
                format::Ending::Exited(c) => eprintln!(
                    "smplab: `{}` exited ({c}) without running its exit handlers (_exit or \
                     exec); {} events kept in {}, marked incomplete",
                    a.program[0],
                    t.events,
                    out.display()
                ),
                format::Ending::Signaled(s) => eprintln!(
                    "smplab: `{}` was killed by signal {s}; the trace so far ({} events) is kept \
                     in {}, marked incomplete",
                    a.program[0],
                    t.events,
                    out.display()
                ),
            }
            t.exit_status()
        }
        Err(e) => fail(e),
    }
}

fn load(path: &std::path::Path) -> Result<(format::Trace, analyze::Analysis), TraceError> {
    let trace = format::read(path)?;
    if trace.event_count() == 0 {
        let path = path.display().to_string();
        return Err(if trace.complete() {
            TraceError::Empty { path }
        } else {
            TraceError::IncompleteEmpty { path }
        });
    }
    let analysis = analyze::analyze(&trace);
    Ok((trace, analysis))
}

fn model_cmd(m: &ModelArgs) -> i32 {
    let (trace, analysis) = match load(&m.trace) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if !trace.complete() {
        eprintln!(
            "smplab: warning: {} is an incomplete trace; the model covers what was recorded",
            m.trace.display()
        );
    }
    let name = m.name.clone().unwrap_or_else(|| {
        trace
            .argv
            .first()
            .map(|p| {
                std::path::Path::new(p)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| p.clone())
            })
            .unwrap_or_else(|| "traced".into())
    });
    let opts = model::ModelOptions {
        name,
        iters_per_ns: m.iters_per_ns,
    };
    let built = match model::build(&trace, &analysis, &opts) {
        Ok(b) => b,
        Err(e) => return fail(e),
    };
    match &m.output {
        Some(p) => {
            if let Err(source) = std::fs::write(p, &built.toml) {
                return fail(TraceError::Io {
                    path: p.display().to_string(),
                    source,
                });
            }
            eprintln!(
                "smplab: wrote {} ({} threads, {} ops from {} flat; {:.3} iterations/ns)",
                p.display(),
                built.tokens.threads.len(),
                built.compressed_ops,
                built.flat_ops,
                built.iters_per_ns
            );
        }
        None => print!("{}", built.toml),
    }
    exit::OK
}

fn show_cmd(s: &ShowArgs) -> i32 {
    let (trace, analysis) = match load(&s.trace) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    if s.json {
        let v = serde_json::json!({
            "argv": trace.argv,
            "complete": trace.complete(),
            "ending": trace.ending,
            "wall_ns": trace.end_ns().saturating_sub(trace.start_ns),
            "events": trace.event_count(),
            "kinds": analysis.kinds.iter().map(|(k, c)| (k.name(), c)).collect::<std::collections::BTreeMap<_, _>>(),
            "threads": analysis.threads,
            "unmatched_waits": analysis.unmatched_waits,
        });
        // One JSON object on one line (JSON lines, as every --json).
        println!("{v}");
    } else {
        print!("{}", show::summary(&trace, &analysis));
    }
    if let Some(p) = &s.html {
        if let Err(source) = std::fs::write(p, show::html(&trace, &analysis)) {
            return fail(TraceError::Io {
                path: p.display().to_string(),
                source,
            });
        }
        eprintln!("smplab: wrote {}", p.display());
    }
    if trace.complete() {
        exit::OK
    } else {
        // Shown as far as it was recorded: a partial result, said so.
        eprintln!(
            "smplab: {} is an incomplete trace: shown as far as it was recorded",
            s.trace.display()
        );
        exit::PARTIAL
    }
}
