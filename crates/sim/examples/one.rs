//! Run one scenario given as a spec file and print a summary per VM (debugging aid).
//! `cargo run -p smplab-sim --example one -- FILE.toml`
fn main() {
    let path = std::env::args().nth(1).expect("usage: one FILE.toml");
    let s = smplab_sim::spec::load(std::path::Path::new(&path)).unwrap_or_else(|e| panic!("{e}"));
    let recs = smplab_sim::simulate(&s).unwrap_or_else(|e| panic!("{e}"));
    for r in &recs {
        print!("{}", r.summary());
    }
}
