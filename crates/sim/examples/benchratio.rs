//! The events bench's ratio (the model's processed events/s over the bare
//! binary-heap loop's, target >= 0.5; docs/sim-performance.md) by thread
//! CPU time instead of criterion's wall clock, which swings 2x on a shared machine. The same
//! model and baseline loop as the bench (`benches/shared`), timed in
//! interleaved pairs (the order alternates from pair to pair), so both
//! members of a pair see the same load; prints the median of the paired
//! ratios with its interquartile range.
//!
//! `cargo run --release -p smplab-sim --example benchratio -- [pairs] [runs per member]`
//! (defaults 40 and 2); `SMPLAB_BENCHRATIO_RAW=1` prints every pair.

#[path = "../benches/shared/mod.rs"]
mod shared;

use shared::model;
use smplab_sim::bare_heap;
use smplab_sim::simulate_raw;
use std::hint::black_box;

/// CPU time of the calling thread in ns: what it ran, not what other
/// tenants of the machine took.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the
    // call, and CLOCK_THREAD_CPUTIME_ID is supported by Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Thread CPU ns of `runs` calls of `f`.
fn timed(runs: u32, mut f: impl FnMut()) -> u64 {
    let t0 = thread_cpu_ns();
    for _ in 0..runs {
        f();
    }
    thread_cpu_ns() - t0
}

/// The `num/den` quantile of sorted `xs`, interpolated linearly.
fn quantile(xs: &[f64], num: usize, den: usize) -> f64 {
    let scaled = num * (xs.len() - 1);
    let (i, rem) = (scaled / den, scaled % den);
    match xs.get(i + 1) {
        Some(next) => xs[i] + (next - xs[i]) * rem as f64 / den as f64,
        None => xs[i],
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pairs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(40);
    let runs: u32 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(2);
    if pairs == 0 || runs == 0 {
        return Err("pairs and runs must be positive".into());
    }
    let raw = std::env::var_os("SMPLAB_BENCHRATIO_RAW").is_some();
    let s = model()?;
    let events = simulate_raw(&s)?.events;
    let mut sim = || {
        let r = simulate_raw(black_box(&s)).map(|r| black_box(r.events));
        assert_eq!(r.ok(), Some(events), "the model's run changed");
    };
    let mut bare = || {
        black_box(bare_heap(32, black_box(events)));
    };
    // Warm both (caches, branch predictors, page faults of the first run).
    timed(1, &mut sim);
    timed(1, &mut bare);
    let (mut ratios, mut sim_rates, mut bare_rates) = (vec![], vec![], vec![]);
    for i in 0..pairs {
        let (sim_ns, bare_ns) = if i % 2 == 0 {
            let a = timed(runs, &mut sim);
            (a, timed(runs, &mut bare))
        } else {
            let b = timed(runs, &mut bare);
            (timed(runs, &mut sim), b)
        };
        let per_s = |ns: u64| (events * u64::from(runs)) as f64 / ns.max(1) as f64 * 1e3;
        ratios.push(bare_ns as f64 / sim_ns.max(1) as f64);
        sim_rates.push(per_s(sim_ns));
        bare_rates.push(per_s(bare_ns));
        if raw {
            println!(
                "pair {i}: sim {sim_ns} ns, bare_heap {bare_ns} ns, ratio {:.4}",
                ratios[i]
            );
        }
    }
    for xs in [&mut ratios, &mut sim_rates, &mut bare_rates] {
        xs.sort_by(f64::total_cmp);
    }
    let iqr = |xs: &[f64]| (quantile(xs, 2, 4), quantile(xs, 1, 4), quantile(xs, 3, 4));
    let (r, r1, r3) = iqr(&ratios);
    let (m, m1, m3) = iqr(&sim_rates);
    let (b, b1, b3) = iqr(&bare_rates);
    println!(
        "{events} processed events per run, {pairs} pairs of {runs} runs each, thread CPU time"
    );
    println!("ratio sim/bare_heap: median {r:.4} [{r1:.4}, {r3:.4}] (interquartile)");
    println!("sim_model: {m:.2} M processed events/s [{m1:.2}, {m3:.2}]");
    println!("bare_heap: {b:.2} M events/s [{b1:.2}, {b3:.2}]");
    Ok(())
}
