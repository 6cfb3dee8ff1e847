//! The wall-time check, as a bench command (not a timed test):
//! `cargo bench -p smplab-trace --bench programs`.
//!
//! For pigz -p 2, pigz -p 4 and xz -T 2 compressing a generated 64 MiB text
//! file in /dev/shm: the real program's wall time (median of 5), the traced
//! program's (same, runs alternated with the real ones so drift hits both
//! alike), and the wall time of the model made from the trace, run natively
//! (median of 5). Prints the ratios model/real (target within ±15%) and
//! traced/real (target ≤ 1.10 on pigz), with the spread (min–max).
//!
//! Also the CPU time (user + system, from getrusage of the children; for
//! the model, the threads' CPU clocks): on a loaded machine wall time mostly
//! measures the other load, CPU time measures the program.
//!
//! Environment: SMPLAB_TRACE_BENCH_MB (default 64), SMPLAB_TRACE_BENCH_RUNS
//! (default 5), SMPLAB_TRACE_BENCH_ONLY (substring of a program label).

#[path = "../tests/common/mod.rs"]
mod common;

use std::process::{Command, Stdio};
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    format!("{:.3}–{:.3} s", lo, hi)
}

/// CPU time (user + system) of all waited-for children so far, in seconds.
fn children_cpu() -> f64 {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills one rusage struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn real_run(argv: &[String]) -> f64 {
    let t0 = Instant::now();
    let st = Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .status()
        .expect("run the program");
    assert!(st.success(), "{argv:?} failed");
    t0.elapsed().as_secs_f64()
}

fn main() {
    let mb: usize = std::env::var("SMPLAB_TRACE_BENCH_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let runs: usize = std::env::var("SMPLAB_TRACE_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let only = std::env::var("SMPLAB_TRACE_BENCH_ONLY").unwrap_or_default();
    // `cargo bench` passes --bench; `cargo test --benches` runs us too: be quick then.
    if !std::env::args().any(|a| a == "--bench") {
        println!("programs bench: run with `cargo bench -p smplab-trace --bench programs`");
        return;
    }
    let dir = common::scratch("bench");
    let input = dir.join("input.txt");
    common::text_file(&input, mb << 20);
    let inp = input.display().to_string();
    let configs: Vec<(&str, Vec<String>)> = vec![
        (
            "pigz -p 2",
            vec![
                "pigz".into(),
                "-p".into(),
                "2".into(),
                "-k".into(),
                "-f".into(),
                inp.clone(),
            ],
        ),
        (
            "pigz -p 4",
            vec![
                "pigz".into(),
                "-p".into(),
                "4".into(),
                "-k".into(),
                "-f".into(),
                inp.clone(),
            ],
        ),
        (
            "xz -T 2",
            vec![
                "xz".into(),
                "-T".into(),
                "2".into(),
                "-k".into(),
                "-f".into(),
                inp.clone(),
            ],
        ),
    ];
    println!(
        "input: {mb} MiB of generated text in {}; {runs} runs each",
        dir.display()
    );
    println!(
        "{:<10} {:>8} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "program", "threads", "real s", "traced s", "model s", "model/real", "traced/real"
    );
    for (label, argv) in configs {
        if !label.contains(only.as_str()) {
            continue;
        }
        common::need(&argv[0]);
        let trace_path = dir.join("bench.trace");
        let (mut real, mut traced) = (Vec::new(), Vec::new());
        let (mut real_cpu, mut traced_cpu, mut model_cpu) = (Vec::new(), Vec::new(), Vec::new());
        let mut last = None;
        for i in 0..runs {
            // Alternate which goes first so drift does not favour one.
            let mut once = |which: bool| {
                let c0 = children_cpu();
                if which {
                    real.push(real_run(&argv));
                    real_cpu.push(children_cpu() - c0);
                } else {
                    let t0 = Instant::now();
                    let t =
                        smplab_trace::run::trace_program(&argv, &trace_path, None).expect("trace");
                    traced.push(t0.elapsed().as_secs_f64());
                    traced_cpu.push(children_cpu() - c0);
                    last = Some(t);
                }
            };
            once(i % 2 == 0);
            once(i % 2 == 1);
        }
        let t = common::trace_and_model(
            &argv.iter().map(String::as_str).collect::<Vec<_>>(),
            &trace_path,
            None,
        );
        let mut model = Vec::new();
        for _ in 0..runs {
            let rec = common::run_native(&t.program);
            common::check_counts(&t, &rec);
            model.push(rec.timing.wall_ns as f64 / 1e9);
            model_cpu.push(rec.timing.threads.iter().map(|t| t.cpu_ns).sum::<u64>() as f64 / 1e9);
        }
        let _ = last;
        let (r, tr, m) = (median(&mut real), median(&mut traced), median(&mut model));
        println!(
            "{:<10} {:>8} {:>10.3} {:>10.3} {:>10.3} {:>12.3} {:>12.3}",
            label,
            t.trace.threads.len(),
            r,
            tr,
            m,
            m / r,
            tr / r
        );
        let (rc, tc, mc) = (
            median(&mut real_cpu),
            median(&mut traced_cpu),
            median(&mut model_cpu),
        );
        println!(
            "           CPU (user+sys, median): real {rc:.3} s, traced {tc:.3} s, model {mc:.3} s; \
             traced/real {:.3}, model/real {:.3}",
            tc / rc,
            mc / rc
        );
        println!(
            "           spread: real {}, traced {}, model {}; {} events, model {} ops ({} flat), {:.3} it/ns",
            spread(&real),
            spread(&traced),
            spread(&model),
            t.trace.event_count(),
            t.model.compressed_ops,
            t.model.flat_ops,
            t.model.iters_per_ns
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
