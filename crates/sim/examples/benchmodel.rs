//! The events bench's model, run repeatedly (for profiling).
use smplab_sim::{simulate_raw, Platform, Scenario, VmSpec};
fn main() {
    let k = Platform::builtin("kvm2015").expect("builtin");
    let a = VmSpec::from_workload("dedup", Some(16), 0.5, 16).expect("builtin");
    let b = VmSpec::from_workload("streamcluster", Some(16), 2.0, 16).expect("builtin");
    let mut s = Scenario::new(k, 16, vec![a, b]);
    s.native_reference = false;
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let t = std::time::Instant::now();
    let mut ev = 0;
    for _ in 0..n {
        let r = simulate_raw(&s).expect("simulate");
        ev += r.events;
        if n == 1 {
            println!("{r:?}");
        }
    }
    println!("{ev} events in {:.3} s", t.elapsed().as_secs_f64());
}
