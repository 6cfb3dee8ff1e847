//! Event throughput of the simulator against a bare binary-heap event loop in
//! the same run (the targets, docs/sim-performance.md: >= 10 million processed
//! events/s on one core for a representative model and >= 0.5x this baseline). The model's
//! throughput counts processed events only (`RawRun::events`: stale events
//! that lazy deletion discards are excluded). Wall clock: on a loaded machine
//! compare CPU time with `--example benchratio` (the same loop and model
//! by thread CPU time, in interleaved pairs) as well.
//!
//! `cargo bench -p smplab-sim --bench events`

mod shared;

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use shared::model;
use smplab_sim::bare_heap;
use smplab_sim::simulate_raw;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The same loop with events the size of the simulator's (24 bytes: time,
/// sequence number, a 12-byte payload), ordered by (time, sequence) as the
/// simulator's queue orders them. Not the baseline (that is
/// `bare_heap`, whose 16-byte entries make it the faster of the two): it
/// shows how much of the gap is the event size.
fn bare_heap_24(entities: u32, events: u64) -> u64 {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    struct Ev {
        time: u64,
        seq: u32,
        payload: [u32; 3],
    }
    let mut heap = BinaryHeap::with_capacity(entities as usize);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut seq = 0u32;
    for e in 0..entities {
        seq += 1;
        heap.push(Reverse(Ev {
            time: u64::from(e),
            seq,
            payload: [e, 0, 0],
        }));
    }
    let mut sum = 0u64;
    for _ in 0..events {
        let Some(Reverse(ev)) = heap.pop() else {
            break;
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum = sum.wrapping_add(ev.time);
        seq = seq.wrapping_add(1);
        heap.push(Reverse(Ev {
            time: ev.time + 1 + (x % 10_000),
            seq,
            payload: ev.payload,
        }));
    }
    sum
}

fn bench(c: &mut Criterion) {
    let s = model().unwrap();
    let events = simulate_raw(&s).unwrap().events;
    let mut g = c.benchmark_group("events");
    g.sample_size(10);
    g.throughput(Throughput::Elements(events));
    g.bench_with_input(BenchmarkId::new("bare_heap", events), &events, |b, &n| {
        b.iter(|| black_box(bare_heap(32, n)))
    });
    g.bench_with_input(
        BenchmarkId::new("bare_heap_24b", events),
        &events,
        |b, &n| b.iter(|| black_box(bare_heap_24(32, n))),
    );
    g.bench_with_input(BenchmarkId::new("sim_model", events), &s, |b, s| {
        b.iter(|| black_box(simulate_raw(s).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
