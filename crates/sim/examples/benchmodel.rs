//! The events bench's model, run repeatedly (for profiling).

// Only the model is used here (the baseline loop is the bench's and
// benchratio's).
#[allow(dead_code)]
#[path = "../benches/shared/mod.rs"]
mod shared;

use smplab_sim::simulate_raw;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let s = shared::model()?;
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let t = std::time::Instant::now();
    let mut ev = 0;
    for _ in 0..n {
        let r = simulate_raw(&s)?;
        ev += r.events;
        if n == 1 {
            println!("{r:?}");
        }
    }
    println!("{ev} events in {:.3} s", t.elapsed().as_secs_f64());
    Ok(())
}
