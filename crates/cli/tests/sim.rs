//! `smplab sim` as a user meets it: one front door to the simulator with
//! `smplab run --executor sim`, JSON lines, and no flag dropped beside a spec.

use smplab_record::{exit, RunRecord};
use std::process::{Command, Output};

fn smplab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(args)
        .output()
        .expect("run smplab")
}

fn status(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Records of `--json` output: one JSON record per line.
fn json_lines(o: &Output) -> Vec<RunRecord> {
    stdout(o)
        .lines()
        .map(|l| RunRecord::from_json(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The parts of a record a simulation determines (the host facts and the
/// times of the host it ran on vary).
fn simulated(r: &RunRecord) -> serde_json::Value {
    let mut sim = serde_json::to_value(&r.sim).unwrap();
    if let Some(m) = sim.as_object_mut() {
        m.remove("sim_host_seconds");
    }
    serde_json::json!({
        "workload": r.workload,
        "run": r.run,
        "config": r.config,
        "outcome": r.outcome,
        "timing": r.timing,
        "counters": r.counters,
        "sim": sim,
    })
}

#[test]
fn sim_and_run_executor_sim_give_the_same_records() {
    let settings = [
        "--workload",
        "spinlock",
        "--threads",
        "4",
        "--scale",
        "0.05",
        "--vcpus",
        "4",
        "--vms",
        "2",
    ];
    let mut sim = vec!["sim", "--json"];
    sim.extend_from_slice(&settings);
    let mut run = vec!["run", "--executor", "sim", "--json"];
    run.extend_from_slice(&settings);
    let (a, b) = (smplab(&sim), smplab(&run));
    assert_eq!(status(&a), exit::OK, "{}", stderr(&a));
    assert_eq!(status(&b), exit::OK, "{}", stderr(&b));
    let from_sim = json_lines(&a);
    assert_eq!(from_sim.len(), 2, "one JSON line per VM");
    let text = stdout(&b);
    let from_run: Vec<RunRecord> = match RunRecord::from_json(&text) {
        Ok(one) => vec![one],
        Err(_) => match serde_json::from_str(&text) {
            Ok(all) => all,
            Err(_) => json_lines(&b),
        },
    };
    assert_eq!(from_sim.len(), from_run.len());
    for (x, y) in from_sim.iter().zip(&from_run) {
        assert_eq!(simulated(x), simulated(y));
    }
    // The defaults are the run configuration's: the default platform, the
    // platform's halt-poll window, fine device sync.
    let r = &from_sim[0];
    assert_eq!(r.config["platform"], "pvm-here");
    assert_eq!(r.config["sync"], "fine");
    assert_eq!(r.config["placement"], "none");
    // The summary gives the slowdown as a ratio, as every command does.
    let plain: Vec<&str> = std::iter::once("sim").chain(settings).collect();
    let o = smplab(&plain);
    assert_eq!(status(&o), exit::OK, "{}", stderr(&o));
    assert!(stdout(&o).contains("slowdown vs native"), "{}", stdout(&o));
    assert!(stdout(&o).contains("x\n"), "{}", stdout(&o));
}

#[test]
fn a_flag_given_with_a_spec_is_an_error_not_dropped() {
    let spec = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../sim/examples/specs/seed002-partition.toml"
    );
    let o = smplab(&["sim", "--spec", spec, "--pcpus", "8", "--workload", "dedup"]);
    assert_eq!(status(&o), exit::BAD_INPUT, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
    assert!(stderr(&o).contains("--pcpus"), "{}", stderr(&o));
    let o = smplab(&["sim", "--spec", spec, "--json", "--timeout", "60s"]);
    assert_eq!(status(&o), exit::OK, "{}", stderr(&o));
    assert_eq!(json_lines(&o).len(), 2, "one JSON line per VM of the spec");
}

#[test]
fn old_flag_names_are_refused() {
    for old in [
        &["--affinity", "pin"][..],
        &["--horizon", "1ms"],
        &["--native"],
    ] {
        let mut v = vec!["sim", "--workload", "dedup"];
        v.extend_from_slice(old);
        let o = smplab(&v);
        assert_eq!(status(&o), exit::BAD_INPUT, "{old:?}: {}", stderr(&o));
    }
}

#[test]
fn a_bad_spec_value_is_located_and_bad_input() {
    let dir = std::env::temp_dir().join(format!("smplab-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let spec = dir.join("bad.toml");
    std::fs::write(
        &spec,
        "pcpus = 4\n[[vm]]\nworkload = \"dedup\"\nvcpus = 2\nplacement = \"0,2\"\n",
    )
    .unwrap();
    let o = smplab(&["sim", "--spec", spec.to_str().unwrap()]);
    assert_eq!(status(&o), exit::BAD_INPUT, "{}", stderr(&o));
    assert!(stderr(&o).contains("bad.toml:5:13"), "{}", stderr(&o));
    assert!(stderr(&o).contains("contiguous"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}
