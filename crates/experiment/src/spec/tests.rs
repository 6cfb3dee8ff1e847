//! Tests of experiment specs: parsing, located errors and matrix expansion.

use super::*;
use smplab_record::config::{IdlePolicy, IrqAffinity, Irqchip, RunConfig, SyncMode};
use std::collections::BTreeSet;

#[test]
fn the_irqchip_axis_multiplies_vm_points_only() {
    let text = r#"
name = "t"
repetitions = 1
[matrix]
executor = ["vm", "qemu"]
workload = "dedup"
sync = ["global", "hybrid"]
irqchip = ["kernel", "user"]
"#;
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    let vm: Vec<_> = s
        .points
        .iter()
        .filter(|p| p.executor() == Executor::Vm)
        .collect();
    assert_eq!(vm.len(), 4);
    assert_eq!(
        vm.iter()
            .filter(|p| p.config.irqchip() == Some(Irqchip::User))
            .count(),
        2
    );
    let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
    assert_eq!(keys.len(), s.points.len(), "keys are unique");
    let bad =
        "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nirqchip = \"usr\"\n";
    let err = ExperimentSpec::from_text("t.toml", bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.toml:5:") && err.contains("unknown irqchip"),
        "{err}"
    );
}

#[test]
fn expands_matrix_and_collapses_unused_axes() {
    let text = r#"
name = "t"
repetitions = 2
[matrix]
executor = ["native", "vm", "sim"]
workload = "dedup"
vcpus = [1, 2]
sync = ["global", "hybrid"]
"#;
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    // native: 2 configs (threads follow vcpus); vm: 2 vcpus × 2 sync; sim: same.
    assert_eq!(s.points.len(), (2 + 4 + 4) * 2);
    let native: Vec<_> = s
        .points
        .iter()
        .filter(|p| p.executor() == Executor::Native)
        .collect();
    assert!(native
        .iter()
        .all(|p| p.config.sync().is_none() && p.vcpus().is_none()));
    let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
    assert_eq!(keys.len(), s.points.len(), "keys are unique");
    let sim = s
        .points
        .iter()
        .find(|p| p.executor() == Executor::Sim)
        .unwrap();
    assert_eq!(
        sim.config.platform(),
        Some(smplab_record::config::DEFAULT_PLATFORM)
    );
    // PLE follows the platform unless the spec says.
    assert!(matches!(&sim.config, RunConfig::Sim(s) if s.ple.is_none()));
}

#[test]
fn interrupt_affinity_axes_expand_where_they_apply() {
    let text = r#"
name = "t"
[matrix]
executor = ["native", "qemu", "sim"]
workload = "oltp"
vcpus = 2
irq_affinity = ["0", "balanced"]
io_thread_cpus = ["none", "1"]
"#;
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    let without = text
        .lines()
        .filter(|l| !l.starts_with("irq_affinity") && !l.starts_with("io_thread_cpus"))
        .collect::<Vec<_>>()
        .join("\n");
    let base = ExperimentSpec::from_text("t.toml", &without).unwrap();
    let count =
        |s: &ExperimentSpec, e: Executor| s.points.iter().filter(|p| p.executor() == e).count();
    // native: io threads only; qemu: irq affinity only; sim: both.
    assert_eq!(
        count(&s, Executor::Native),
        2 * count(&base, Executor::Native)
    );
    assert_eq!(count(&s, Executor::Qemu), 2 * count(&base, Executor::Qemu));
    assert_eq!(count(&s, Executor::Sim), 4 * count(&base, Executor::Sim));
    assert!(count(&base, Executor::Sim) > 0);
    assert!(s.points.iter().any(|p| matches!(&p.config,
            RunConfig::Sim(x) if x.irq_affinity == IrqAffinity::Balanced && x.io_thread_cpus.0 == [1])));
    let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
    assert_eq!(keys.len(), s.points.len(), "keys are unique");

    let bad = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"oltp\"\nirq_affinity = \"everywhere\"\n";
    let err = ExperimentSpec::from_text("t.toml", bad)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.toml:5:16:"), "{err}");
    assert!(err.contains("balanced"), "{err}");
    let out_of_range = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"oltp\"\nvcpus = 2\nirq_affinity = \"3\"\n";
    let err = ExperimentSpec::from_text("t.toml", out_of_range)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.toml:6:16:"), "{err}");
    assert!(err.contains("vCPU 3 does not exist"), "{err}");
}

#[test]
fn unknown_executor_is_located() {
    let text = "name = \"t\"\n[matrix]\nexecutor = [\"native\", \"vmm\"]\nworkload = \"dedup\"\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.toml:3:12:"), "{err}");
    assert!(err.contains("unknown executor `vmm`"), "{err}");
}

#[test]
fn unknown_key_and_bad_value_are_located() {
    let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nvcpu = 2\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.toml:5:1:"), "{err}");
    assert!(err.contains("vcpu"), "{err}");

    let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"nope\"\nvcpus = [0]\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("t.toml:4:12:") && lines[0].contains("nope"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("t.toml:5:9:") && lines[1].contains("out of range"),
        "{err}"
    );
}

#[test]
fn missing_matrix_is_reported() {
    let err = ExperimentSpec::from_text("t.toml", "name = \"t\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("matrix"), "{err}");
    assert!(err.starts_with("t.toml:"), "{err}");
}

#[test]
fn the_example_in_docs_parses() {
    let doc = include_str!("../../../../docs/lab.md");
    let start = doc
        .find("```toml\n")
        .expect("docs/lab.md has a toml example")
        + 8;
    let len = doc[start..].find("```").expect("closed block");
    let s = ExperimentSpec::from_text("docs/lab.md", &doc[start..start + len])
        .unwrap_or_else(|e| panic!("docs example: {e}"));
    assert_eq!(s.name, "overhead");
    assert!(s
        .points
        .iter()
        .any(|p| p.executor() == Executor::Qemu && p.config.sync().is_none()));
}

#[test]
fn the_shipped_specs_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let s = match ExperimentSpec::from_file(&path) {
                Ok(s) => s,
                // predict.toml needs this host's calibrated profile: its
                // absence is reported at validation, with the remedy.
                Err(e) if e.to_string().contains("smplab calibrate") => {
                    n += 1;
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            assert!(!s.points.is_empty());
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn each_executor_gets_its_own_limits_at_validation() {
    // 128 vCPUs: fine for the simulator, beyond the guest kernel: the
    // error is located at the vcpus axis, not left to fail point by point.
    let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"blackscholes\"\nvcpus = [2, 128]\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("t.toml:5:9:"), "{err}");
    assert!(err.contains("vm: vcpus: 128 is out of range"), "{err}");
    assert!(!err.contains("sim:"), "{err}");
    // Guest-side halt polling is not modelled by the simulator.
    let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"dedup\"\nidle = \"haltpoll:1000\"\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:5:8:") && err.contains("sim: idle"),
        "{err}"
    );
    // A bad setting is located at its axis with the setting's own message.
    let text =
        "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nsync = \"gobal\"\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:5:8:") && err.contains("unknown sync mode `gobal`"),
        "{err}"
    );
    let text = "name = \"t\"\n[matrix]\nexecutor = \"sim\"\nworkload = \"dedup\"\nplatform = \"nosuch.toml\"\n";
    let err = ExperimentSpec::from_text("t.toml", text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:5:12:") && err.contains("nosuch.toml"),
        "{err}"
    );
}

#[test]
fn repetitions_fixed_or_adaptive() {
    let base = "[matrix]\nexecutor = \"native\"\nworkload = \"dedup\"\n";
    let s = ExperimentSpec::from_text("t.toml", &format!("name = \"t\"\n{base}")).unwrap();
    assert_eq!(s.repetitions, Repetitions::fixed(DEFAULT_REPETITIONS));
    assert_eq!(s.points.len(), DEFAULT_REPETITIONS as usize);

    let text = format!("name = \"t\"\nrepetitions = 4\n{base}");
    let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
    assert_eq!(s.repetitions, Repetitions::fixed(4));
    assert_eq!(s.points.len(), 4);
    assert_eq!(s.points.last().map(|p| p.rep), Some(3));

    let text = format!("name = \"t\"\nrepetitions = \"auto\"\n{base}");
    let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
    assert_eq!(
        s.repetitions,
        Repetitions::adaptive(DEFAULT_MAX_REPETITIONS)
    );
    assert_eq!(s.repetitions.min, 6);
    // The points hold the minimum; the sweep repeats further as needed.
    assert_eq!(s.points.len(), 6);

    let text = format!("name = \"t\"\nrepetitions = \"auto\"\nmax_repetitions = 9\n{base}");
    let s = ExperimentSpec::from_text("t.toml", &text).unwrap();
    assert_eq!(s.repetitions, Repetitions::adaptive(9));
    assert_eq!((s.repetitions.min, s.repetitions.max), (6, 9));
}

#[test]
fn bad_repetitions_are_located() {
    let base = "[matrix]\nexecutor = \"native\"\nworkload = \"dedup\"\n";
    for (reps, col) in [("\"often\"", 15), ("0", 15), ("2.5", 15), ("1001", 15)] {
        let text = format!("name = \"t\"\nrepetitions = {reps}\n{base}");
        let err = ExperimentSpec::from_text("t.toml", &text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(&format!("t.toml:2:{col}:")), "{err}");
        assert!(err.contains("\"auto\""), "{err}");
    }
    let text = format!("name = \"t\"\nrepetitions = \"auto\"\nmax_repetitions = 0\n{base}");
    let err = ExperimentSpec::from_text("t.toml", &text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:3:19:") && err.contains("between 1 and 1000"),
        "{err}"
    );
    // A maximum without "auto" would be silently ignored: it is an error.
    let text = format!("name = \"t\"\nrepetitions = 3\nmax_repetitions = 10\n{base}");
    let err = ExperimentSpec::from_text("t.toml", &text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("t.toml:3:19:") && err.contains("only with"),
        "{err}"
    );
}

#[test]
fn settings_are_typed_with_one_default() {
    let text = "name = \"t\"\n[matrix]\nexecutor = [\"vm\", \"sim\"]\nworkload = \"dedup\"\n";
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    for p in &s.points {
        assert_eq!(p.config.sync(), Some(SyncMode::default()));
        assert_eq!(p.config.idle(), Some(IdlePolicy::default()));
        assert_eq!(p.vcpus(), Some(DEFAULT_VCPUS));
    }
}

#[test]
fn real_programs_expand_for_the_executors_that_run_them() {
    let text = r#"
name = "real"
repetitions = 1
[matrix]
executor = ["native", "linux", "linux-qemu", "vm"]
workload = "dedup"
program = [["sh", "-c", "true"], ["sh", "-c", "exit 0"]]
vcpus = [2]
sync = ["fine", "global"]
irqchip = ["kernel", "user"]
machine = ["microvm", "q35"]
"#;
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    let count = |e: Executor, program: bool| {
        s.points
            .iter()
            .filter(|p| p.executor() == e && p.is_program() == program)
            .count()
    };
    // Per program: linux 2 sync × 2 irqchip, linux-qemu 2 machines, native 1.
    assert_eq!(count(Executor::Linux, true), 2 * 4);
    assert_eq!(count(Executor::LinuxQemu, true), 2 * 2);
    assert_eq!(count(Executor::Native, true), 2);
    // The model runs where models run, and nowhere else.
    assert_eq!(count(Executor::Native, false), 1);
    assert_eq!(count(Executor::Vm, false), 4);
    assert_eq!(count(Executor::Vm, true) + count(Executor::Linux, false), 0);
    let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
    assert_eq!(keys.len(), s.points.len(), "keys are unique");
    let linux = s
        .points
        .iter()
        .find(|p| p.executor() == Executor::Linux)
        .unwrap();
    assert_eq!(linux.program, ["sh", "-c", "true"]);
    assert_eq!(linux.workload, "sh -c true");
}

#[test]
fn bad_programs_and_linux_settings_are_located() {
    let spec = |matrix: &str| {
        ExperimentSpec::from_text("t.toml", &format!("name = \"t\"\n[matrix]\n{matrix}"))
            .unwrap_err()
            .to_string()
    };
    let e = spec("executor = \"linux\"\nprogram = [\"smplab-no-such-program\", \"-x\"]\n");
    assert!(
        e.contains("t.toml:4:") && e.contains("no such program"),
        "{e}"
    );
    let e = spec("executor = \"linux\"\nprogram = [1, 2]\n");
    assert!(
        e.contains("t.toml:4:") && e.contains("takes an argv"),
        "{e}"
    );
    let e = spec("executor = \"linux\"\nworkload = \"dedup\"\n");
    assert!(
        e.contains("t.toml:3:") && e.contains("runs real programs"),
        "{e}"
    );
    let e = spec("executor = \"sim\"\nprogram = [\"sh\"]\n");
    assert!(
        e.contains("t.toml:3:") && e.contains("runs workload models"),
        "{e}"
    );
    let e = spec("executor = \"linux-qemu\"\nprogram = [\"sh\"]\nmachine = \"pc\"\n");
    assert!(
        e.contains("t.toml:5:") && e.contains("unknown machine"),
        "{e}"
    );
    let e = spec("executor = \"linux\"\nprogram = [\"sh\"]\nkernel = \"/nonexistent/vmlinuz\"\n");
    assert!(
        e.contains("t.toml:5:") && e.contains("cannot be read"),
        "{e}"
    );
    let e = spec("executor = \"linux\"\nprogram = [\"sh\"]\nvcpus = 65\n");
    assert!(e.contains("t.toml:5:") && e.contains("vcpus"), "{e}");
    let e = spec("executor = \"native\"\n");
    assert!(e.contains("give `workload`"), "{e}");
}

#[test]
fn a_scale_table_gives_each_workload_its_own_scale() {
    let text = r#"
name = "t"
repetitions = 1
[matrix]
executor = "sim"
workload = ["spinlock", "dedup"]
scale = { spinlock = 2, dedup = 0.5 }
"#;
    let s = ExperimentSpec::from_text("t.toml", text).unwrap();
    let mut scales: Vec<(String, f64)> = s
        .points
        .iter()
        .map(|p| (p.workload.clone(), p.scale))
        .collect();
    scales.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        scales,
        vec![("dedup".to_string(), 0.5), ("spinlock".to_string(), 2.0)]
    );
    let missing = text.replace(", dedup = 0.5", "");
    let err = ExperimentSpec::from_text("t.toml", &missing)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("t.toml:7:") && err.contains("names none for `dedup`"),
        "{err}"
    );
    let negative = text.replace("dedup = 0.5", "dedup = -1");
    let err = ExperimentSpec::from_text("t.toml", &negative)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("workload `dedup` takes a positive number"),
        "{err}"
    );
}
