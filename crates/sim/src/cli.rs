//! `smplab sim`: the command-line front end (wired in by the smplab CLI crate).
//!
//! `smplab sim --platform PROFILE --pcpus P --vms K --vcpus V --workload NAME
//! --threads T --policy POLICY [--seed S] [--json]` simulates K identical VMs;
//! `smplab sim --spec FILE.toml` simulates a full scenario.

use crate::scenario::{
    parse_duration, Affinity, Idle, IdlePolicy, Ple, Policy, Scenario, Sdb, Topology, VmSpec,
};
use crate::{simulate, Platform, SimError};
use smplab_record::{exit, RunRecord};
use std::path::PathBuf;

/// Flags of `smplab sim`.
#[derive(clap::Args, Debug, Clone)]
pub struct SimArgs {
    /// A scenario spec file (several VMs with their own workloads and settings);
    /// the host and VM flags below are then not used.
    #[arg(long, value_name = "FILE.toml")]
    pub spec: Option<PathBuf>,
    /// Platform profile: kvm2015 (the seeds' 2015 KVM host), pvm-here (this
    /// machine), or a profile TOML file (e.g. written by `smplab calibrate`).
    #[arg(long, default_value = "kvm2015")]
    pub platform: String,
    /// Physical CPUs of the host.
    #[arg(long, default_value_t = 16)]
    pub pcpus: u32,
    /// pCPUs per last-level-cache domain (default: the platform's).
    #[arg(long)]
    pub pcpus_per_llc: Option<u32>,
    /// Number of identical VMs, each running one instance of the workload.
    #[arg(long, default_value_t = 1)]
    pub vms: u32,
    /// vCPUs per VM.
    #[arg(long, default_value_t = 16)]
    pub vcpus: u32,
    /// Built-in workload profile name or workload TOML file.
    #[arg(long, required_unless_present = "spec")]
    pub workload: Option<String>,
    /// Thread parameter n of the workload (default: the workload's).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Workload scale factor.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Host scheduling: fair, gang or partition, optionally `:SLICE` (fair:100us)
    /// and `+safepoint[:GRACE]`.
    #[arg(long, default_value_t)]
    pub policy: Policy,
    /// Random seed (the simulation is deterministic for a seed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Guest idle: hlt or poll (the simulator does not model guest-side
    /// haltpoll:NS).
    #[arg(long, default_value_t)]
    pub idle: IdlePolicy,
    /// The host's halt-poll window for HLT idle in ns (KVM halt_poll_ns; 0 = none).
    #[arg(long, default_value_t = 0)]
    pub host_halt_poll_ns: u64,
    /// vCPU affinity: float, pin or range:A-B.
    #[arg(long, default_value = "float")]
    pub affinity: String,
    /// Pause-loop exiting: intel (kernel-mode PAUSE loops only), amd, off.
    /// Default: what the platform has.
    #[arg(long)]
    pub ple: Option<Ple>,
    /// APIC virtualization (cheaper IPIs).
    #[arg(long)]
    pub apicv: bool,
    /// Spin Detection Buffer with spin-triggered preemption (seed 002).
    #[arg(long)]
    pub sdb: bool,
    /// Run the workload's spin → block variant (seed 000's diagnosis).
    #[arg(long)]
    pub spin_to_block: bool,
    /// Simulate bare metal instead of VMs (one core per vCPU).
    #[arg(long)]
    pub native: bool,
    /// Stop at this simulated time (e.g. 1s, 100ms) even if unfinished.
    #[arg(long)]
    pub horizon: Option<String>,
    /// Print the result records as JSON (one per VM) instead of a summary.
    #[arg(long)]
    pub json: bool,
}

/// Build the scenario the flags describe.
pub fn scenario_from_args(a: &SimArgs) -> Result<Scenario, SimError> {
    if let Some(path) = &a.spec {
        return crate::spec::load(path);
    }
    let bad = |m: String| SimError::Scenario(m);
    let platform = Platform::resolve(&a.platform)?;
    let name = a
        .workload
        .as_deref()
        .ok_or_else(|| bad("give --workload NAME or --spec FILE.toml".into()))?;
    if !(a.scale > 0.0 && a.scale.is_finite()) {
        return Err(bad(format!(
            "--scale {} must be a positive number",
            a.scale
        )));
    }
    if a.vms == 0 {
        return Err(bad("--vms must be at least 1".into()));
    }
    let source = smplab_workload::Source::resolve(name)?;
    let mut program = source.instantiate(a.threads, a.scale)?;
    if a.spin_to_block {
        program = program.spin_to_block();
    }
    let info = source.workload_info(&program);
    let mut vm = VmSpec::new(program, info, a.vcpus);
    vm.idle = Idle::from_setting(a.idle, a.host_halt_poll_ns)?;
    vm.affinity = Affinity::parse(&a.affinity).map_err(|m| bad(format!("--affinity: {m}")))?;
    vm.ple = a.ple.unwrap_or(platform.defaults.ple);
    vm.apicv = a.apicv;
    vm.sdb = a.sdb.then(Sdb::default);
    let policy = a.policy;
    let horizon_ns = a
        .horizon
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(|m| bad(format!("--horizon: {m}")))?;
    let s = Scenario {
        platform,
        pcpus: a.pcpus,
        topology: Topology {
            pcpus_per_llc: a.pcpus_per_llc,
        },
        policy,
        seed: a.seed,
        vms: vec![vm; a.vms as usize],
        virtualized: !a.native,
        horizon_ns,
        native_reference: true,
    };
    s.check()?;
    Ok(s)
}

/// `smplab sim`: returns the process exit status (`smplab_record::exit`).
pub fn run(args: &SimArgs) -> i32 {
    let s = match scenario_from_args(args) {
        Ok(s) => s,
        Err(e) => {
            smplab_record::exit::report_error(&e);
            return e.exit_status();
        }
    };
    let records = match simulate(&s) {
        Ok(r) => r,
        Err(e) => {
            smplab_record::exit::report_error(&e);
            return e.exit_status();
        }
    };
    if args.json {
        for r in &records {
            println!("{}", r.to_json_line());
        }
    } else {
        print!("{}", summary(&s, &records));
    }
    exit::OK
}

fn ms(ns: u64) -> String {
    format!("{:.3} ms", ns as f64 / 1e6)
}

/// One line per VM.
pub fn summary_line(r: &RunRecord) -> String {
    let Some(sim) = &r.sim else {
        return format!("{}: no sim section", r.workload.name);
    };
    let slowdown = sim
        .native_wall_ns
        .filter(|&n| n > 0)
        .map(|n| {
            format!(
                ", native {}, slowdown {:+.1}%",
                ms(n),
                (r.timing.wall_ns as f64 / n as f64 - 1.0) * 100.0
            )
        })
        .unwrap_or_default();
    let exits: Vec<String> = sim
        .exits
        .iter()
        .filter(|(_, &v)| v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let status = if r.is_ok() { "" } else { " [unfinished]" };
    format!(
        "vm {} {} (n={}, {} threads, {} vCPUs): wall {}{slowdown}; spin {}, idle {}, steal {}; exits {}{status}",
        sim.vm_index,
        r.workload.name,
        r.workload.n,
        r.workload.threads,
        sim.vcpus,
        ms(r.timing.wall_ns),
        ms(sim.spin_ns),
        ms(sim.idle_ns),
        ms(sim.steal_ns),
        if exits.is_empty() { "none".to_string() } else { exits.join(" ") },
    )
}

/// The human summary of a run.
pub fn summary(s: &Scenario, records: &[RunRecord]) -> String {
    let mut out = format!(
        "{} pCPUs ({} platform), policy {}, {} VM(s), seed {}{}\n",
        s.pcpus,
        s.platform.name,
        s.policy.label(),
        s.vms.len(),
        s.seed,
        if s.virtualized { "" } else { ", bare metal" }
    );
    for r in records {
        out.push_str(&summary_line(r));
        out.push('\n');
    }
    let tput: f64 = records
        .iter()
        .filter_map(|r| {
            let n = r.sim.as_ref()?.native_wall_ns? as f64;
            (r.timing.wall_ns > 0).then(|| n / r.timing.wall_ns as f64)
        })
        .sum();
    if let Some(sim) = records.first().and_then(|r| r.sim.as_ref()) {
        out.push_str(&format!(
            "throughput vs native (sum of native/wall): {tput:.2}; {} events in {:.3} s\n",
            sim.events, sim.sim_host_seconds
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn args(a: &[&str]) -> SimArgs {
        let mut v = vec!["smplab-sim"];
        v.extend_from_slice(a);
        Cmd::try_parse_from(v).expect("flags parse").sim
    }

    #[test]
    fn flags_build_a_scenario() {
        let a = args(&[
            "--platform",
            "kvm2015",
            "--pcpus",
            "8",
            "--vms",
            "2",
            "--vcpus",
            "4",
            "--workload",
            "spinlock",
            "--threads",
            "4",
            "--scale",
            "0.01",
            "--policy",
            "fair:100us",
            "--idle",
            "hlt",
            "--host-halt-poll-ns",
            "200000",
            "--sdb",
        ]);
        let s = scenario_from_args(&a).unwrap();
        assert_eq!(s.vms.len(), 2);
        assert_eq!(s.policy.time_slice_ns, Some(100_000));
        assert_eq!(s.vms[0].idle, Idle::HaltPoll(200_000));
        assert_eq!(run(&a), exit::OK);
        let records = simulate(&s).unwrap();
        let text = summary(&s, &records);
        assert!(text.contains("vm 1 spinlock"), "{text}");
        assert!(text.contains("slowdown"), "{text}");
    }

    #[test]
    fn bad_input_exits_with_bad_input() {
        assert_eq!(run(&args(&["--workload", "nosuch"])), exit::BAD_INPUT);
        // Settings are typed at the flag: a bad one never reaches the model.
        for bad in [
            ["--policy", "lottery"],
            ["--idle", "mwait"],
            ["--ple", "sometimes"],
        ] {
            let mut v = vec!["smplab-sim", "--workload", "spinlock"];
            v.extend_from_slice(&bad);
            assert!(Cmd::try_parse_from(v).is_err(), "{bad:?}");
        }
        let guest_haltpoll = args(&["--workload", "spinlock", "--idle", "haltpoll:1000"]);
        assert_eq!(run(&guest_haltpoll), exit::BAD_INPUT);
        let dir = std::env::temp_dir().join(format!("smplab-sim-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = dir.join("bad.toml");
        std::fs::write(&spec, "platform = \"kvm2015\"\npcpus = 0\n").unwrap();
        let a = args(&["--spec", spec.to_str().unwrap()]);
        let e = scenario_from_args(&a).unwrap_err().to_string();
        assert!(e.contains("bad.toml:2:9"), "{e}");
        assert_eq!(run(&a), exit::BAD_INPUT);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
