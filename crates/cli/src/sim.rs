//! `smplab sim`: the simulator's front door. Without `--spec` the flags
//! become the same typed `RunConfig::Sim` as `smplab run --executor sim`, with
//! the same defaults, and go through the same execute path: the same settings
//! give the same record. `--spec FILE.toml` simulates a whole scenario (several
//! VMs with their own workloads and settings); a flag that the spec sets is
//! then an error, never dropped.

use clap::Args;
use smplab_experiment::execute::{execute, RunLimits};
use smplab_experiment::point::Variant;
use smplab_record::config::{
    HostPolicy, IdlePolicy, IoThreadCpus, IrqAffinity, Placement, Ple, RunConfig, SimSettings,
    SyncMode, Timeout, DEFAULT_PLATFORM, DEFAULT_TIMEOUT,
};
use smplab_record::{exit, RunRecord};
use std::path::{Path, PathBuf};

/// vCPUs of the simulated VM when `--vcpus` is not given: the same as
/// `smplab run` and a lab spec.
const DEFAULT_VCPUS: u32 = smplab_experiment::spec::DEFAULT_VCPUS;

/// Flags of `smplab sim`. Every setting flag is a field of the run
/// configuration (`SimSettings`); a horizon, bare metal or an LLC size are
/// spec-file keys (docs/sim.md, "Spec files").
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    /// A scenario spec file (several VMs with their own workloads and
    /// settings); the spec sets the host and the VMs, so the setting flags
    /// below are refused with it.
    #[arg(long, value_name = "FILE.toml")]
    pub spec: Option<PathBuf>,
    /// Built-in workload profile name or workload TOML file.
    #[arg(long, required_unless_present = "spec", conflicts_with = "spec")]
    pub workload: Option<String>,
    /// Thread parameter n of the workload (default: the workload's).
    #[arg(long, conflicts_with = "spec")]
    pub threads: Option<u32>,
    /// Workload scale factor (smaller runs faster). Default 1.
    #[arg(long, conflicts_with = "spec")]
    pub scale: Option<f64>,
    /// Run the workload's spin → block variant (every spin wait a blocking one).
    #[arg(long, conflicts_with = "spec")]
    pub spin_to_block: bool,
    /// Platform profile: a built-in name (pvm-here, this machine; kvm2015, the
    /// 2015 KVM host of Ding & Shan) or a profile TOML file (e.g. written by
    /// `smplab calibrate`). Default: pvm-here.
    #[arg(long, conflicts_with = "spec")]
    pub platform: Option<String>,
    /// Simulated host pCPUs. Default: as many as one VM has vCPUs.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "spec")]
    pub pcpus: Option<u32>,
    /// VMs running the workload at once, each its own instance. Default 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "spec")]
    pub vms: Option<u32>,
    /// vCPUs of each VM. Default 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "spec")]
    pub vcpus: Option<u32>,
    /// vCPU placement: none (default), pinned (vCPU i on its own pCPU, spread
    /// evenly) or a contiguous pCPU range such as 0-3.
    #[arg(long, conflicts_with = "spec")]
    pub pin: Option<Placement>,
    /// Host vCPU scheduling: fair, gang or partition, optionally `:SLICE`
    /// (fair:100us) and `+safepoint[:GRACE]`. Default fair.
    #[arg(long, conflicts_with = "spec")]
    pub policy: Option<HostPolicy>,
    /// Guest idle: hlt or poll (the simulator does not model guest-side
    /// haltpoll:NS). Default hlt.
    #[arg(long, conflicts_with = "spec")]
    pub idle: Option<IdlePolicy>,
    /// The host's halt-poll window for HLT idle in ns (KVM halt_poll_ns; 0 =
    /// none). Default: the platform's.
    #[arg(long, conflicts_with = "spec")]
    pub host_halt_poll_ns: Option<u64>,
    /// Device synchronization: global, iothread, hybrid or fine. Default fine.
    #[arg(long, conflicts_with = "spec")]
    pub sync: Option<SyncMode>,
    /// Pause-loop exiting: intel (kernel-mode PAUSE loops only), amd, off.
    /// Default: what the platform has.
    #[arg(long, conflicts_with = "spec")]
    pub ple: Option<Ple>,
    /// APIC virtualization (cheaper IPIs).
    #[arg(long, conflicts_with = "spec")]
    pub apicv: bool,
    /// Spin Detection Buffer with spin-triggered preemption (Wells et al.,
    /// "Hardware Support for Spin Management in Overcommitted Virtual Machines").
    #[arg(long, conflicts_with = "spec")]
    pub sdb: bool,
    /// Guest routing of device (`io` op) interrupts: a vCPU such as 0, a set
    /// such as 0,2-3, balanced, or running. Default 0.
    #[arg(long, conflicts_with = "spec")]
    pub irq_affinity: Option<IrqAffinity>,
    /// Modelled pCPUs of the thread that completes device requests: none or
    /// a CPU list. Default none.
    #[arg(long, conflicts_with = "spec")]
    pub io_thread_cpus: Option<IoThreadCpus>,
    /// Random seed (the simulation is deterministic for a seed). Default 1.
    #[arg(long, conflicts_with = "spec")]
    pub seed: Option<u64>,
    /// Give up after this much host time (30s, 500ms; a bare number is seconds).
    #[arg(long, default_value_t = DEFAULT_TIMEOUT)]
    pub timeout: Timeout,
    /// Print the result records as JSON lines (one record per line).
    #[arg(long)]
    pub json: bool,
    /// Also write the result records to this file (JSON lines).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
}

impl SimArgs {
    /// The run configuration the flags describe (without `--spec`): the same
    /// `SimSettings` `smplab run --executor sim` builds from the same flags.
    pub fn config(&self) -> RunConfig {
        let vcpus = self.vcpus.unwrap_or(DEFAULT_VCPUS);
        let mut s = SimSettings::new(vcpus, self.platform.as_deref().unwrap_or(DEFAULT_PLATFORM));
        s.idle = self.idle.unwrap_or_default();
        s.placement = self.pin.clone().unwrap_or_default();
        s.vms = self.vms.unwrap_or(1);
        s.sync = self.sync.unwrap_or_default();
        s.pcpus = self.pcpus;
        s.ple = self.ple;
        s.apicv = self.apicv;
        s.sdb = self.sdb;
        s.host_halt_poll_ns = self.host_halt_poll_ns;
        s.policy = self.policy.unwrap_or_default();
        s.seed = self.seed.unwrap_or(1);
        s.irq_affinity = self.irq_affinity.clone().unwrap_or_default();
        s.io_thread_cpus = self.io_thread_cpus.clone().unwrap_or_default();
        RunConfig::Sim(s)
    }
}

/// `smplab sim`: returns the process exit status (`smplab_record::exit`).
pub fn run(args: &SimArgs) -> i32 {
    let records = match &args.spec {
        Some(path) => simulate_spec(path, args.timeout),
        None => simulate_flags(args),
    };
    match records {
        Ok(records) => crate::run::emit(&records, args.json, &args.output),
        Err(status) => status,
    }
}

/// The flags' run configuration through the one execute path.
fn simulate_flags(args: &SimArgs) -> Result<Vec<RunRecord>, i32> {
    let scale = args.scale.unwrap_or(1.0);
    if !(scale.is_finite() && scale > 0.0) {
        smplab_record::exit::report_error(format!("--scale {scale}: give a positive number"));
        return Err(exit::BAD_INPUT);
    }
    let workload = args.workload.as_deref().unwrap_or_default();
    let (mut program, mut info) = crate::run::load_program(workload, args.threads, scale)?;
    if args.spin_to_block {
        // As a lab point's variant: the workload keeps its name, the
        // variant is a parameter.
        program = program.spin_to_block();
        let variant = Variant::SpinToBlock.as_str();
        info.params
            .insert("variant".into(), serde_json::json!(variant));
    }
    let limits = RunLimits {
        timeout: args.timeout.duration(),
        show_console: false,
        qemu_binary: None,
    };
    execute(&program, &info, &args.config(), &limits).map_err(|e| {
        smplab_record::exit::report_error(&e);
        e.exit_status()
    })
}

/// A spec file's scenario, under the same host-time limit.
fn simulate_spec(path: &Path, timeout: Timeout) -> Result<Vec<RunRecord>, i32> {
    let path = path.to_path_buf();
    smplab_experiment::execute::sim::with_timeout(timeout.duration(), move || {
        smplab_sim::simulate_spec(&path).map_err(smplab_experiment::execute::sim::SimRunError::from)
    })
    .map_err(|e| {
        smplab_record::exit::report_error(&e);
        e.exit_status()
    })
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

    fn parse(a: &[&str]) -> Result<SimArgs, clap::Error> {
        let mut v = vec!["smplab-sim"];
        v.extend_from_slice(a);
        Cmd::try_parse_from(v).map(|c| c.sim)
    }

    #[test]
    fn defaults_are_the_run_configurations() {
        let a = parse(&["--workload", "dedup"]).unwrap();
        let RunConfig::Sim(s) = a.config() else {
            panic!("not a sim config")
        };
        assert_eq!(s, SimSettings::new(DEFAULT_VCPUS, DEFAULT_PLATFORM));
        assert_eq!(a.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn flags_are_typed_and_named_as_everywhere() {
        let a = parse(&[
            "--workload",
            "spinlock",
            "--pin",
            "pinned",
            "--policy",
            "fair:100us",
            "--sync",
            "global",
            "--host-halt-poll-ns",
            "0",
            "--timeout",
            "30s",
        ])
        .unwrap();
        let RunConfig::Sim(s) = a.config() else {
            panic!("not a sim config")
        };
        assert_eq!(s.placement, Placement::Spread);
        assert_eq!(s.policy.time_slice_ns, Some(100_000));
        assert_eq!(s.sync, SyncMode::Global);
        assert_eq!(s.host_halt_poll_ns, Some(0));
        for bad in [
            &["--policy", "lottery"][..],
            &["--idle", "mwait"],
            &["--ple", "sometimes"],
            &["--pin", "compact"],
            &["--affinity", "pin"],
            &["--timeout", "0"],
            &["--vcpus", "0"],
        ] {
            let mut v = vec!["--workload", "spinlock"];
            v.extend_from_slice(bad);
            assert!(parse(&v).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_flag_the_spec_sets_is_an_error_with_it() {
        assert!(parse(&["--spec", "s.toml", "--json", "--timeout", "5s"]).is_ok());
        for flag in [
            &["--pcpus", "8"][..],
            &["--workload", "dedup"],
            &["--platform", "kvm2015"],
            &["--pin", "pinned"],
            &["--seed", "3"],
            &["--apicv"],
        ] {
            let mut v = vec!["--spec", "s.toml"];
            v.extend_from_slice(flag);
            let e = parse(&v).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{flag:?}"
            );
        }
        assert!(parse(&[]).is_err(), "neither --workload nor --spec");
    }
}
