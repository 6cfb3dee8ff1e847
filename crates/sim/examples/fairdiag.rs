//! Per-VM progress and where each VM's vCPU time went, for one fairness case
//! (debugging aid for tests/fairness.rs).
//! `cargo run --release -p smplab-sim --example fairdiag -- PLATFORM PROFILE PCPUS OVERCOMMIT VCPUS SEED [MS]`

use smplab_sim::*;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 6 {
        eprintln!("usage: fairdiag PLATFORM PROFILE PCPUS OVERCOMMIT VCPUS SEED [MS]");
        std::process::exit(2);
    }
    let num = |i: usize| {
        a[i].parse::<u64>()
            .unwrap_or_else(|_| panic!("{} is not a number", a[i]))
    };
    let small = |i: usize| {
        a[i].parse::<u32>()
            .unwrap_or_else(|_| panic!("{} is not a small number", a[i]))
    };
    let (pcpus, over, vcpus, seed) = (small(2), small(3), small(4), num(5));
    let ms = if a.len() > 6 { num(6) } else { 1000 };
    let vms = (pcpus * over / vcpus).max(2) as usize;
    let v = VmSpec::from_workload(&a[1], Some(vcpus), 1000.0, vcpus).expect("profile");
    let mut s = Scenario::new(
        Platform::builtin(&a[0]).expect("platform"),
        pcpus,
        vec![v; vms],
    );
    s.seed = seed;
    s.horizon_ns = Some(ms * 1_000_000);
    s.native_reference = false;
    let recs = simulate(&s).expect("simulate");
    let prog: Vec<f64> = recs
        .iter()
        .map(|r| {
            r.counters
                .ops
                .iter()
                .filter(|(k, _)| !k.ends_with("_iters") && !k.ends_with("_bytes"))
                .map(|(_, &v)| v as f64)
                .sum()
        })
        .collect();
    let s1: f64 = prog.iter().sum();
    let s2: f64 = prog.iter().map(|x| x * x).sum();
    println!("Jain {:.4}", s1 * s1 / (prog.len() as f64 * s2));
    for (r, p) in recs.iter().zip(&prog) {
        let sim = r.sim.as_ref().expect("sim");
        let t = &sim.vcpu_time_ns;
        let ms = |k: &str| t.get(k).copied().unwrap_or(0) as f64 / 1e6;
        let mut top: Vec<(&String, &u64)> = t.iter().collect();
        top.sort_by(|x, y| y.1.cmp(x.1));
        let top: Vec<String> = top
            .iter()
            .take(6)
            .map(|(k, v)| format!("{k} {:.0}", **v as f64 / 1e6))
            .collect();
        println!(
            "vm {:2} progress {:9.0} steal {:7.1} ms idle {:7.1} ms migr {:5} refill {:6.1} ms | {}",
            sim.vm_index,
            p,
            ms("steal"),
            ms("idle_halted") + ms("idle_poll") + ms("halt_poll"),
            sim.migrations,
            sim.warmup_ns as f64 / 1e6,
            top.join(", ")
        );
    }
}
