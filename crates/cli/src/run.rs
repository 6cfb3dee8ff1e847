//! `smplab run`: one workload on one executor, one result record out. The
//! flags become one typed `RunConfig` (smplab_record::config), which goes
//! through the lab's one execute path like every lab point.

use clap::Args;
use smplab_experiment::execute::linux::resolve_kernel;
use smplab_experiment::execute::{execute, execute_program, ExecuteError, RealProgram, RunLimits};
use smplab_record::config::{
    HostPolicy, IdlePolicy, IoThreadCpus, IrqAffinity, Irqchip, LinuxGuestSettings, Placement, Ple,
    QemuMachine, RunConfig, SimSettings, SyncMode, Timeout, VmSettings, DEFAULT_PLATFORM,
    DEFAULT_TIMEOUT,
};
use smplab_record::{exit, Executor, RunRecord, WorkloadInfo};
use smplab_workload::{Program, Source};
use std::path::PathBuf;

#[derive(Args)]
#[command(
    after_help = "A real program instead of a workload model (after `--`):\n\
  smplab run --executor linux [--kernel PATH] --vcpus 2 -- pigz -p 2 -k big.file\n\
  smplab run --executor linux-qemu --machine microvm -- pigz -p 2 -k big.file\n\
  smplab run --executor native -- pigz -p 2 -k big.file"
)]
pub struct RunArgs {
    /// native (host threads, or a real program on the host), vm (the smplab
    /// guest in smplab-vmm), qemu (the smplab guest in QEMU with KVM), sim
    /// (the discrete-event simulator), linux (a real program in a Linux
    /// guest on smplab-vmm) or linux-qemu (the same on QEMU).
    #[arg(long, default_value = "native")]
    pub executor: Executor,
    /// Built-in profile name (`smplab workloads`) or path to a workload .toml
    /// (or a real program after `--`).
    #[arg(long)]
    pub workload: Option<String>,
    /// Thread parameter `n` (default: the workload's default_threads).
    #[arg(long)]
    pub threads: Option<u32>,
    /// Scale factor for amounts of work (smaller runs faster). Default 1.
    #[arg(long)]
    pub scale: Option<f64>,
    /// The Linux guest's kernel, a bzImage or PVH ELF (linux, linux-qemu).
    /// Default: $SMPLAB_LINUX_KERNEL.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Boot this initramfs instead of one built from the program (linux,
    /// linux-qemu).
    #[arg(long)]
    pub initrd: Option<PathBuf>,
    /// Put this host file into the built initramfs at the same path, e.g.
    /// the program's input; repeatable (linux, linux-qemu).
    #[arg(long)]
    pub include: Vec<PathBuf>,
    /// The machine QEMU emulates: microvm or q35 (linux-qemu). Default microvm.
    #[arg(long)]
    pub machine: Option<QemuMachine>,
    /// Placement: `none` (default), `pinned` (one per host CPU) or a CPU list
    /// such as `0,1` or `0-1` (native: thread i on the i-th CPU; vm: vCPU i;
    /// qemu: confined to the set; sim: a contiguous pCPU range).
    #[arg(long)]
    pub pin: Option<Placement>,
    /// vCPUs of each VM (vm, qemu, sim). Default 2.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub vcpus: Option<u32>,
    /// VMs running the workload at once, each its own instance (vm, qemu, sim).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub vms: Option<u32>,
    /// Device synchronization: global, iothread, hybrid or fine (vm, sim). Default fine.
    #[arg(long)]
    pub sync: Option<SyncMode>,
    /// Interrupt controllers: kernel (KVM's in-kernel LAPIC/IOAPIC/PIC) or user
    /// (smplab-vmm's own models under --sync, HLT handled by the VMM) (vm).
    /// Default kernel.
    #[arg(long)]
    pub irqchip: Option<Irqchip>,
    /// With --irqchip user: how long a halted vCPU thread polls before it
    /// sleeps, in ns (vm). Default 0 (no polling).
    #[arg(long)]
    pub vmm_halt_poll_ns: Option<u64>,
    /// Run smplab-vmm's threads without their seccomp-bpf filters, for
    /// debugging (vm; docs/vmm.md, "Security"). The record's `vmm.seccomp`
    /// says which.
    #[arg(long)]
    pub no_seccomp: bool,
    /// Guest idle policy: hlt, poll or haltpoll:NS (vm, qemu, sim). Default hlt.
    #[arg(long)]
    pub idle: Option<IdlePolicy>,
    /// Guest scheduler tick in Hz, 0 = tickless (vm, qemu). Default: tickless
    /// when threads <= vCPUs, else 250 Hz so spinning threads get time-sliced.
    #[arg(long)]
    pub timer_hz: Option<u32>,
    /// Guest memory, e.g. 256M (vm, qemu). Default: sized from the workload.
    #[arg(long, value_parser = smplab_vmm::command::parse_size)]
    pub mem: Option<u64>,
    /// Simulator platform profile: built-in name or profile file (sim).
    #[arg(long)]
    pub platform: Option<String>,
    /// Simulated host pCPUs (sim). Default: as many as one VM has vCPUs.
    #[arg(long)]
    pub pcpus: Option<u32>,
    /// Pause-loop exiting: intel, amd or off (sim). Default: the platform's.
    #[arg(long)]
    pub ple: Option<Ple>,
    /// APIC virtualization (sim).
    #[arg(long)]
    pub apicv: bool,
    /// The Spin Detection Buffer with spin-triggered preemption (sim).
    #[arg(long)]
    pub sdb: bool,
    /// The host's halt-poll window for HLT idle, ns (sim). Default none.
    #[arg(long)]
    pub host_halt_poll_ns: Option<u64>,
    /// Host vCPU scheduling: fair, gang or partition, with :SLICE and
    /// +safepoint[:GRACE] (sim). Default fair.
    #[arg(long)]
    pub policy: Option<HostPolicy>,
    /// Guest routing of device (`io` op) interrupts: a vCPU such as 0, a
    /// set taken in turn such as 0,2-3, balanced (every vCPU in turn), or
    /// running (vBalance: a vCPU the host runs at that moment; sim only)
    /// (vm, qemu, sim). Default 0.
    #[arg(long)]
    pub irq_affinity: Option<IrqAffinity>,
    /// Host CPUs of the thread that completes device requests: none or a
    /// CPU list (native, vm, sim: modelled pCPUs). Default none.
    #[arg(long)]
    pub io_thread_cpus: Option<IoThreadCpus>,
    /// Random seed (sim). Default 1.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Give up on the run after this long: 30s, 500ms, or a number of
    /// seconds (0 is refused).
    #[arg(long, default_value_t = DEFAULT_TIMEOUT)]
    pub timeout: Timeout,
    /// Show the guest console (vm, qemu).
    #[arg(long)]
    pub console: bool,
    /// Print the full result record(s) as JSON instead of a summary.
    #[arg(long)]
    pub json: bool,
    /// Also write the result record (JSON) to this file.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// A real program and its arguments, run as they are (linux, linux-qemu,
    /// native), instead of --workload.
    #[arg(last = true)]
    pub program: Vec<String>,
}

/// What a run runs: a workload model or a real program.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Model { workload: String, scale: f64 },
    Program(Vec<String>),
}

/// Load and instantiate the workload, reporting errors the standard way.
pub fn load_program(
    workload: &str,
    threads: Option<u32>,
    scale: f64,
) -> Result<(Program, WorkloadInfo), i32> {
    let source = Source::resolve(workload).map_err(|e| {
        smplab_record::exit::report_error(&e);
        exit::BAD_INPUT
    })?;
    if let Err(why) = threads_taken(&source, workload, threads) {
        smplab_record::exit::report_error(why);
        return Err(exit::BAD_INPUT);
    }
    let program = source.instantiate(threads, scale).map_err(|e| {
        smplab_record::exit::report_error(&e);
        exit::BAD_INPUT
    })?;
    let info = source.workload_info(&program);
    Ok((program, info))
}

/// `Err` when `--threads` is given for a workload whose threads do not
/// depend on `n`: the flag would change nothing, so it is refused.
pub fn threads_taken(source: &Source, workload: &str, threads: Option<u32>) -> Result<(), String> {
    match threads {
        Some(n) if n != source.default_threads() && !source.uses_n() => Err(format!(
            "--threads {n}: {workload}'s thread counts do not depend on n (a traced model keeps the traced program's threads), so it would change nothing; drop --threads or edit the file's [[group]] threads"
        )),
        _ => Ok(()),
    }
}

/// A flag given to an executor that has no such setting.
fn not_taken(flag: &str, executor: Executor, takes: &str) -> String {
    format!("--{flag} does not apply to --executor {executor} (it applies to {takes})")
}

/// Where a flag's value goes in a configuration: `None` when the
/// configuration's executor has no such setting.
type Slot<T> = fn(&mut RunConfig) -> Option<&mut T>;

/// Sets flags on a configuration, collecting the flags its executor lacks.
struct Setter {
    config: RunConfig,
    bad: Vec<String>,
}

impl Setter {
    /// Put `value` (when the flag was given) into `slot`, or note the flag
    /// as not taken, with the executors that take it.
    fn set<T>(&mut self, flag: &str, value: Option<T>, slot: Slot<T>) {
        let Some(value) = value else { return };
        match slot(&mut self.config) {
            Some(setting) => *setting = value,
            None => self.refuse(flag, |c| slot(c).is_some()),
        }
    }

    /// Note `flag` as not taken by this executor; `takes` tells which
    /// executors' default configurations take it.
    fn refuse(&mut self, flag: &str, takes: impl Fn(&mut RunConfig) -> bool) {
        let takers: Vec<&str> = Executor::ALL
            .into_iter()
            .filter(|&e| takes(&mut RunConfig::defaults(e, 1, DEFAULT_PLATFORM)))
            .map(Executor::as_str)
            .collect();
        let e = self.config.executor();
        self.bad.push(not_taken(flag, e, &takers.join(", ")));
    }
}

/// The simulator's own settings.
fn sim(c: &mut RunConfig) -> Option<&mut SimSettings> {
    match c {
        RunConfig::Sim(s) => Some(s),
        _ => None,
    }
}

/// smplab-vmm's own settings.
fn vmm(c: &mut RunConfig) -> Option<&mut VmSettings> {
    match c {
        RunConfig::Vm(s) => Some(s),
        _ => None,
    }
}

/// The interrupt controllers, where smplab-vmm emulates them (vm, linux).
fn irqchip(c: &mut RunConfig) -> Option<&mut Irqchip> {
    match c {
        RunConfig::Vm(s) => Some(&mut s.irqchip),
        RunConfig::Linux(s) => Some(&mut s.irqchip),
        _ => None,
    }
}

/// Guest memory: the smplab guest's or the Linux guest's.
fn mem(c: &mut RunConfig) -> Option<&mut Option<u64>> {
    match c {
        RunConfig::Linux(s) => Some(&mut s.guest.mem_bytes),
        RunConfig::LinuxQemu(s) => Some(&mut s.guest.mem_bytes),
        other => other.settings_mut().guest_mut().map(|g| &mut g.mem_bytes),
    }
}

/// The Linux guest's settings (linux, linux-qemu).
fn linux(c: &mut RunConfig) -> Option<&mut LinuxGuestSettings> {
    c.settings_mut().linux_guest_mut()
}

impl RunArgs {
    /// The run configuration the flags describe. A flag the executor does
    /// not take is an error: a setting is never silently dropped.
    pub fn config(&self) -> Result<RunConfig, Vec<String>> {
        let mut c = Setter {
            config: RunConfig::defaults(self.executor, 2, DEFAULT_PLATFORM),
            bad: Vec::new(),
        };
        c.set("pin", self.pin.clone(), |c| {
            Some(c.settings_mut().placement_mut())
        });
        c.set("vcpus", self.vcpus, |c| c.settings_mut().vcpus_mut());
        c.set("vms", self.vms, |c| c.settings_mut().vms_mut());
        c.set("sync", self.sync, |c| c.settings_mut().sync_mut());
        c.set("irqchip", self.irqchip, irqchip);
        c.set("vmm-halt-poll-ns", self.vmm_halt_poll_ns, |c| {
            vmm(c).map(|v| &mut v.vmm_halt_poll_ns)
        });
        c.set("idle", self.idle, |c| c.settings_mut().idle_mut());
        c.set("timer-hz", self.timer_hz.map(Some), |c| {
            c.settings_mut().guest_mut().map(|g| &mut g.timer_hz)
        });
        c.set("mem", self.mem.map(Some), mem);
        c.set("kernel", self.kernel.clone().map(Some), |c| {
            linux(c).map(|g| &mut g.kernel)
        });
        c.set("initrd", self.initrd.clone().map(Some), |c| {
            linux(c).map(|g| &mut g.initrd)
        });
        c.set(
            "include",
            (!self.include.is_empty()).then(|| self.include.clone()),
            |c| linux(c).map(|g| &mut g.include),
        );
        c.set("machine", self.machine, |c| match c {
            RunConfig::LinuxQemu(s) => Some(&mut s.machine),
            _ => None,
        });
        // The console is the booted guest's (a run limit, not a setting).
        if self.console && c.config.guest().is_none() && c.config.linux_guest().is_none() {
            c.refuse("console", |c| {
                c.guest().is_some() || c.linux_guest().is_some()
            });
        }
        // smplab-vmm's filters: a process setting (smplab_vmm::seccomp), not
        // part of the configuration the store keys by; the record says it.
        // smplab-vmm runs both the smplab guest (vm) and Linux guests (linux).
        let on_smplab_vmm = |c: &RunConfig| matches!(c, RunConfig::Vm(_) | RunConfig::Linux(_));
        if self.no_seccomp && !on_smplab_vmm(&c.config) {
            c.refuse("no-seccomp", |c| on_smplab_vmm(c));
        }
        c.set("irq-affinity", self.irq_affinity.clone(), |c| {
            c.settings_mut().irq_affinity_mut()
        });
        c.set("io-thread-cpus", self.io_thread_cpus.clone(), |c| {
            c.settings_mut().io_thread_cpus_mut()
        });
        c.set("platform", self.platform.clone(), |c| {
            sim(c).map(|s| &mut s.platform)
        });
        c.set("pcpus", self.pcpus.map(Some), |c| {
            sim(c).map(|s| &mut s.pcpus)
        });
        c.set("ple", self.ple.map(Some), |c| sim(c).map(|s| &mut s.ple));
        c.set("apicv", self.apicv.then_some(true), |c| {
            sim(c).map(|s| &mut s.apicv)
        });
        c.set("sdb", self.sdb.then_some(true), |c| {
            sim(c).map(|s| &mut s.sdb)
        });
        c.set("host-halt-poll-ns", self.host_halt_poll_ns.map(Some), |c| {
            sim(c).map(|s| &mut s.host_halt_poll_ns)
        });
        c.set("policy", self.policy, |c| sim(c).map(|s| &mut s.policy));
        c.set("seed", self.seed, |c| sim(c).map(|s| &mut s.seed));
        if c.bad.is_empty() {
            Ok(c.config)
        } else {
            Err(c.bad)
        }
    }

    /// What runs: `--workload` (a model) or the program after `--`, each
    /// only where the executor runs it; a model's flags refused for a program.
    pub fn work(&self, config: &RunConfig) -> Result<Work, Vec<String>> {
        let e = config.executor();
        let mut bad = Vec::new();
        let work = match (&self.workload, self.program.is_empty()) {
            (Some(_), false) => {
                bad.push(
                    "give --workload (a workload model) or a program after `--`, not both"
                        .to_string(),
                );
                None
            }
            (None, true) => {
                bad.push(if config.runs_models() {
                    format!("--executor {e}: give --workload NAME (`smplab workloads`) or, for native, a program after `--`")
                } else {
                    format!("--executor {e} runs a real program: give it after `--`, e.g. `smplab run --executor {e} -- pigz -p 2 -k FILE`")
                });
                None
            }
            (Some(w), true) => {
                if !config.runs_models() {
                    bad.push(format!("--executor {e} runs a real program, not a workload model: give the program after `--` (or run the model with --executor vm, qemu or sim)"));
                }
                Some(Work::Model {
                    workload: w.clone(),
                    scale: self.scale.unwrap_or(1.0),
                })
            }
            (None, false) => {
                if !config.runs_real_programs() {
                    bad.push(format!("--executor {e} runs workload models, not real programs: use --executor linux, linux-qemu or native (or model the program: smplab trace, then smplab trace model)"));
                }
                for (flag, given) in [
                    ("threads", self.threads.is_some()),
                    ("scale", self.scale.is_some()),
                ] {
                    if given {
                        bad.push(format!("--{flag} sizes a workload model; a real program takes its own arguments after `--`"));
                    }
                }
                Some(Work::Program(self.program.clone()))
            }
        };
        match work {
            Some(w) if bad.is_empty() => Ok(w),
            _ => Err(bad),
        }
    }
}

/// Print (and optionally save) records; returns the exit status for them.
/// JSON is JSON lines, one record per line (one object for one record), in
/// print and file alike.
pub fn emit(records: &[RunRecord], json: bool, output: &Option<PathBuf>) -> i32 {
    let text: String = records.iter().map(|r| r.to_json_line() + "\n").collect();
    if json {
        smplab_record::out!("{text}");
    } else {
        for r in records {
            print!("{}", r.summary());
        }
    }
    if let Some(path) = output {
        if let Err(e) = std::fs::write(path, text) {
            smplab_record::exit::report_error(format!("cannot write {}: {e}", path.display()));
            return exit::RUN_FAILED;
        }
    }
    if records.iter().all(RunRecord::is_ok) {
        exit::OK
    } else {
        exit::RUN_FAILED
    }
}

pub fn run(args: &RunArgs) -> i32 {
    if let Some(scale) = args.scale.filter(|s| !(s.is_finite() && *s > 0.0)) {
        smplab_record::exit::report_error(format!("--scale {scale}: give a positive number"));
        return exit::BAD_INPUT;
    }
    let (config, work) = match args.config().and_then(|c| Ok((args.work(&c)?, c))) {
        Ok((w, c)) => (c, w),
        Err(problems) => {
            for p in problems {
                smplab_record::exit::report_error(p);
            }
            return exit::BAD_INPUT;
        }
    };
    if args.no_seccomp {
        smplab_vmm::seccomp::set_process_default(false);
    }
    let limits = RunLimits {
        timeout: args.timeout.duration(),
        show_console: args.console,
        qemu_binary: None,
    };
    let result = match work {
        Work::Model { workload, scale } => {
            let (program, info) = match load_program(&workload, args.threads, scale) {
                Ok(x) => x,
                Err(status) => return status,
            };
            execute(&program, &info, &config, &limits)
        }
        Work::Program(argv) => {
            // A missing kernel is bad input on any host: said before the
            // host's KVM is looked at.
            let kernel = config
                .linux_guest()
                .map(|g| resolve_kernel(g.kernel.as_deref()))
                .transpose();
            RealProgram::new(argv)
                .map_err(ExecuteError::from)
                .and_then(|p| {
                    p.resolve()?;
                    kernel?;
                    execute_program(&p, &config, &limits)
                })
        }
    };
    match result {
        Ok(records) => emit(&records, args.json, &args.output),
        Err(e) => {
            smplab_record::exit::report_error(&e);
            e.exit_status()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        run: RunArgs,
    }

    fn args(a: &[&str]) -> RunArgs {
        let mut v = vec!["smplab", "--workload", "dedup"];
        v.extend_from_slice(a);
        Cmd::try_parse_from(v).expect("flags parse").run
    }

    #[test]
    fn flags_become_one_typed_config() {
        let c = args(&["--executor", "vm", "--sync", "global", "--idle", "poll"])
            .config()
            .unwrap();
        match c {
            RunConfig::Vm(v) => {
                assert_eq!(v.sync, SyncMode::Global);
                assert_eq!(v.guest.idle, IdlePolicy::Poll);
                assert_eq!(v.guest.vcpus, 2);
            }
            other => panic!("{other:?}"),
        }
        let c = args(&["--executor", "sim", "--vcpus", "16"])
            .config()
            .unwrap();
        assert_eq!(c.platform(), Some(DEFAULT_PLATFORM));
        assert_eq!(c.sync(), Some(SyncMode::default()));
    }

    #[test]
    fn a_flag_the_executor_lacks_is_an_error() {
        let e = args(&["--executor", "native", "--sync", "global"])
            .config()
            .unwrap_err();
        assert!(
            e[0].contains("--sync does not apply to --executor native"),
            "{e:?}"
        );
        let e = args(&["--executor", "qemu", "--sync", "fine", "--apicv"])
            .config()
            .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        for executor in ["qemu", "native", "sim"] {
            let e = args(&["--executor", executor, "--no-seccomp"])
                .config()
                .unwrap_err();
            assert!(
                e[0].contains(&format!(
                    "--no-seccomp does not apply to --executor {executor} (it applies to vm, linux)"
                )),
                "{e:?}"
            );
        }
        assert!(args(&["--executor", "vm", "--no-seccomp"]).config().is_ok());
        for executor in ["qemu", "native", "sim"] {
            let e = args(&["--executor", executor, "--irqchip", "user"])
                .config()
                .unwrap_err();
            assert!(
                e[0].contains(&format!(
                    "--irqchip does not apply to --executor {executor}"
                )),
                "{e:?}"
            );
        }
        let c = args(&[
            "--executor",
            "vm",
            "--irqchip",
            "user",
            "--vmm-halt-poll-ns",
            "20000",
        ])
        .config()
        .unwrap();
        assert_eq!(c.irqchip(), Some(Irqchip::User));
        assert!(
            Cmd::try_parse_from(["smplab", "--workload", "dedup", "--irqchip", "usr"]).is_err()
        );
        let mut v = vec!["smplab", "--workload", "dedup", "--idle", "mwait"];
        assert!(Cmd::try_parse_from(v.clone()).is_err());
        v.truncate(3);
        v.extend_from_slice(&["--pin", "compact"]);
        assert!(Cmd::try_parse_from(v).is_err());
    }

    fn program_args(a: &[&str]) -> RunArgs {
        let mut v = vec!["smplab"];
        v.extend_from_slice(a);
        Cmd::try_parse_from(v).expect("flags parse").run
    }

    #[test]
    fn linux_flags_become_one_typed_config() {
        let a = program_args(&[
            "--executor",
            "linux",
            "--kernel",
            "/k/vmlinuz",
            "--include",
            "/tmp/a",
            "--include",
            "/tmp/b",
            "--vcpus",
            "4",
            "--sync",
            "global",
            "--irqchip",
            "user",
            "--pin",
            "0,1",
            "--mem",
            "256M",
            "--",
            "pigz",
            "-p",
            "2",
            "-k",
            "f",
        ]);
        let c = a.config().unwrap();
        let RunConfig::Linux(l) = &c else {
            panic!("{c:?}")
        };
        assert_eq!(l.guest.vcpus, 4);
        assert_eq!(l.sync, SyncMode::Global);
        assert_eq!(l.irqchip, Irqchip::User);
        assert_eq!(
            l.guest.kernel.as_deref(),
            Some(std::path::Path::new("/k/vmlinuz"))
        );
        assert_eq!(l.guest.include.len(), 2);
        assert_eq!(l.guest.mem_bytes, Some(256 << 20));
        assert_eq!(
            a.work(&c).unwrap(),
            Work::Program(["pigz", "-p", "2", "-k", "f"].map(String::from).into())
        );
        let q = program_args(&["--executor", "linux-qemu", "--machine", "q35", "--", "xz"]);
        let c = q.config().unwrap();
        assert!(matches!(&c, RunConfig::LinuxQemu(s) if s.machine == QemuMachine::Q35));
        let n = program_args(&["--executor", "native", "--", "zstd", "-T2"]);
        let c = n.config().unwrap();
        assert_eq!(
            n.work(&c).unwrap(),
            Work::Program(vec!["zstd".into(), "-T2".into()])
        );
    }

    #[test]
    fn flags_an_executor_does_not_honour_are_refused() {
        let e = program_args(&[
            "--executor",
            "linux-qemu",
            "--sync",
            "global",
            "--irqchip",
            "user",
            "--",
            "xz",
        ])
        .config()
        .unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].contains("--sync does not apply to --executor linux-qemu"),
            "{e:?}"
        );
        assert!(e[1].contains("(it applies to vm, linux)"), "{e:?}");
        for flag in [["--kernel", "/k"], ["--initrd", "/i"], ["--include", "/f"]] {
            let e = program_args(&["--executor", "vm", flag[0], flag[1], "--workload", "dedup"])
                .config()
                .unwrap_err();
            assert!(
                e[0].contains(&format!(
                    "{} does not apply to --executor vm (it applies to linux, linux-qemu)",
                    flag[0]
                )),
                "{e:?}"
            );
        }
        let e = program_args(&["--executor", "linux", "--machine", "q35", "--", "xz"])
            .config()
            .unwrap_err();
        assert!(e[0].contains("(it applies to linux-qemu)"), "{e:?}");
        for flag in [
            "--vms",
            "--idle",
            "--timer-hz",
            "--irq-affinity",
            "--io-thread-cpus",
        ] {
            let value = if flag == "--idle" { "poll" } else { "1" };
            let e = program_args(&["--executor", "linux", flag, value, "--", "xz"])
                .config()
                .unwrap_err();
            assert!(
                e[0].contains("does not apply to --executor linux"),
                "{flag}: {e:?}"
            );
        }
        assert!(
            Cmd::try_parse_from(["smplab", "--executor", "linux-qemu", "--machine", "pc"]).is_err()
        );
    }

    #[test]
    fn a_program_goes_only_where_programs_run() {
        let check = |a: &[&str]| {
            let a = program_args(a);
            let c = a.config().unwrap();
            a.work(&c).unwrap_err().join("\n")
        };
        let e = check(&["--executor", "vm", "--", "pigz"]);
        assert!(e.contains("runs workload models, not real programs"), "{e}");
        let e = check(&["--executor", "linux", "--workload", "dedup"]);
        assert!(
            e.contains("runs a real program, not a workload model"),
            "{e}"
        );
        let e = check(&["--executor", "linux"]);
        assert!(e.contains("give it after `--`"), "{e}");
        let e = check(&["--executor", "native", "--workload", "dedup", "--", "pigz"]);
        assert!(e.contains("not both"), "{e}");
        let e = check(&[
            "--executor",
            "native",
            "--threads",
            "2",
            "--scale",
            "0.5",
            "--",
            "pigz",
        ]);
        assert!(
            e.contains("--threads sizes a workload model") && e.contains("--scale"),
            "{e}"
        );
    }
}
