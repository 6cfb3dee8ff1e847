//! `smplab doctor`: what this host offers and what will and will not work here.

use clap::Args;
use serde::Serialize;
use smplab_record::host::KvmBacking;
use smplab_record::platform::Platform;
use smplab_record::{exit, HostFacts};
use std::process::Command;

#[derive(Args)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Check {
    what: String,
    ok: bool,
    detail: String,
}

#[derive(Serialize)]
struct Report {
    host: HostFacts,
    checks: Vec<Check>,
    /// Per executor: whether it can run here, and how faithfully.
    executors: Vec<Check>,
}

fn tool_version(cmd: &str, arg: &str) -> Option<String> {
    let out = Command::new(cmd).arg(arg).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

/// Slurm, for `smplab lab run --slurm` (docs/slurm.md): the client tools, and
/// whether the controller answers.
fn slurm_check() -> Check {
    let what = "Slurm".to_string();
    let Some(version) = tool_version("sbatch", "--version") else {
        return Check {
            what,
            ok: false,
            detail: "sbatch not found: only needed for `smplab lab run --slurm` (a cluster's login node, or `.ci/slurm-up` for a one-node cluster here)".into(),
        };
    };
    let missing: Vec<&str> = ["squeue", "sacct", "scontrol"]
        .into_iter()
        .filter(|t| tool_version(t, "--version").is_none())
        .collect();
    let ping = Command::new("scontrol")
        .arg("ping")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let up = ping.contains("is UP");
    let nodes = Command::new("sinfo")
        .args(["-h", "-o", "%D %T"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().replacen(' ', " node(s) ", 1))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let accounting = Command::new("sacct")
        .args(["-n", "-X", "-S", "now"])
        .output()
        .is_ok_and(|o| o.status.success());
    let mut detail = format!("{version}; ");
    if !missing.is_empty() {
        detail.push_str(&format!("missing {}; ", missing.join(", ")));
    }
    if up {
        detail.push_str(&format!("controller reachable ({ping})"));
        if !nodes.is_empty() {
            detail.push_str(&format!("; {nodes}"));
        }
        detail.push_str(if accounting {
            "; accounting on (lab status uses sacct too)"
        } else {
            "; accounting off (lab status sees ended tasks through squeue only, for MinJobAge)"
        });
    } else {
        detail.push_str(
            "controller not reachable (`scontrol ping`): `lab run --slurm` cannot submit from here",
        );
    }
    Check {
        what,
        ok: up && missing.is_empty(),
        detail,
    }
}

fn build_report() -> Report {
    let host = HostFacts::detect();
    let mut checks = host_checks(&host);
    if host.kvm.device_usable {
        checks.push(kvm_caps_check());
    }
    let qemu = tool_version("qemu-system-x86_64", "--version");
    checks.extend(tool_checks(qemu.clone()));
    let executors = executor_checks(host.kvm.device_usable, qemu.is_some());
    Report {
        host,
        checks,
        executors,
    }
}

/// The host's own facts: cores, the KVM device, what backs it, halt polling.
fn host_checks(host: &HostFacts) -> Vec<Check> {
    let kvm = &host.kvm;
    let mut checks = vec![Check {
        what: "cores".into(),
        ok: host.cores >= 2,
        detail: format!(
            "{} logical CPUs ({}){}",
            host.cores,
            host.cpu_model,
            if host.cores < 2 {
                "; SMP runs need at least 2 to mean anything"
            } else {
                ""
            }
        ),
    }];
    checks.push(Check {
        what: "/dev/kvm".into(),
        ok: kvm.device_usable,
        detail: match (kvm.device_present, kvm.device_usable) {
            (false, _) => "missing: load kvm_intel/kvm_amd (or run on a host with KVM)".into(),
            (true, false) => "present but cannot be opened read-write: add yourself to the `kvm` group or run as root".into(),
            (true, true) => "present and usable".into(),
        },
    });
    checks.push(Check {
        what: "KVM backing".into(),
        ok: kvm.backing == KvmBacking::Hardware || kvm.backing == KvmBacking::Pvm,
        detail: match kvm.backing {
            KvmBacking::Hardware => "hardware (VT-x/AMD-V): guest kernel code runs at full speed".into(),
            KvmBacking::Pvm => "kvm_pvm, software-assisted and nested: guest user mode (CPL3) runs natively, guest kernel mode runs in KVM's instruction emulator (~1000x slower); exits and IPIs cost 5-20x bare metal. smplab's guest keeps kernel work tiny, so workloads still run at native speed, but absolute exit costs are this host's, not real hardware's".into(),
            KvmBacking::Unknown => "unknown KVM module: results may not be comparable".into(),
            KvmBacking::Absent => "no KVM module loaded".into(),
        },
    });
    checks.push(platform_check(host.platform));
    if let Some(ns) = kvm.halt_poll_ns {
        checks.push(Check {
            what: "halt polling".into(),
            ok: true,
            detail: format!(
                "kvm.halt_poll_ns = {ns} (halted vCPUs poll this long before sleeping)"
            ),
        });
    }
    checks
}

/// Which platform the figures measured here come from: timings on a CPU
/// QEMU's TCG emulates measure the emulator, not a machine.
fn platform_check(platform: Platform) -> Check {
    let detail = match platform {
        Platform::HardwareKvmOnEmulatedCpu | Platform::NoKvmOnEmulatedCpu => format!(
            "{} (seen in the CPUID hypervisor leaf \"TCGTCGTCGTCG\" or a \"QEMU TCG\" model name); records and summaries carry a warning",
            platform.describe()
        ),
        other => other.describe().to_string(),
    };
    Check {
        what: "platform".into(),
        ok: matches!(platform, Platform::HardwareKvm | Platform::Pvm),
        detail,
    }
}

/// The KVM capabilities smplab-vmm uses, and the vCPU limit; only asked when
/// /dev/kvm is usable.
fn kvm_caps_check() -> Check {
    match smplab_vmm::kvm_capabilities() {
        Ok(caps) => {
            let missing: Vec<&str> = caps
                .iter()
                .filter(|(_, ok)| !ok)
                .map(|(n, _)| n.as_str())
                .collect();
            let max = smplab_vmm::max_vcpus()
                .map(|m| format!("; up to {m} vCPUs per VM"))
                .unwrap_or_default();
            Check {
                what: "KVM caps".into(),
                ok: missing.is_empty(),
                detail: if missing.is_empty() {
                    format!(
                        "all {} capabilities smplab-vmm uses are present{max}",
                        caps.len()
                    )
                } else {
                    format!("missing: {}{max}", missing.join(", "))
                },
            }
        }
        Err(e) => Check {
            what: "KVM caps".into(),
            ok: false,
            detail: format!("cannot query: {e}"),
        },
    }
}

/// The outside tools: QEMU (for `--executor qemu`), Chromium (report
/// rendering tests) and Slurm.
fn tool_checks(qemu: Option<String>) -> Vec<Check> {
    let mut checks = vec![Check {
        what: "QEMU".into(),
        ok: qemu.is_some(),
        detail: qemu.unwrap_or_else(|| {
            "qemu-system-x86_64 not found: `apt-get install qemu-system-x86` enables `--executor qemu`".into()
        }),
    }];
    let chromium = tool_version("chromium", "--version");
    checks.push(Check {
        what: "Chromium".into(),
        ok: chromium.is_some(),
        detail: chromium.unwrap_or_else(|| {
            "not found: only needed to test report rendering (`apt-get install chromium`)".into()
        }),
    });
    checks.push(slurm_check());
    checks
}

/// Per executor, whether it can run here.
fn executor_checks(kvm_usable: bool, qemu_present: bool) -> Vec<Check> {
    vec![
        Check {
            what: "native".into(),
            ok: true,
            detail: "host threads, real spinning and futex blocking".into(),
        },
        Check {
            what: "vm".into(),
            ok: kvm_usable,
            detail: if kvm_usable {
                "smplab-vmm with the smplab guest kernel".into()
            } else {
                "needs a usable /dev/kvm".into()
            },
        },
        Check {
            what: "qemu".into(),
            ok: kvm_usable && qemu_present,
            detail: "the smplab guest under QEMU with -accel kvm (~5 s firmware start-up here)"
                .into(),
        },
        Check {
            what: "sim".into(),
            ok: true,
            detail: "discrete-event simulator: any scale, any modeled hardware".into(),
        },
    ]
}

pub fn run(args: &DoctorArgs) -> i32 {
    let report = build_report();
    if args.json {
        // One JSON object, on one line (JSON lines, as every --json).
        match serde_json::to_string(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                smplab_record::exit::report_error(e);
                return exit::INTERNAL;
            }
        }
        return exit::OK;
    }
    let h = &report.host;
    println!(
        "smplab doctor: {} (kernel {}{})",
        h.hostname,
        h.kernel,
        if h.nested { ", itself a VM" } else { "" }
    );
    for c in &report.checks {
        println!(
            "  [{}] {:<14} {}",
            if c.ok { " ok " } else { "warn" },
            c.what,
            c.detail
        );
    }
    println!("executors:");
    for c in &report.executors {
        println!(
            "  [{}] {:<14} {}",
            if c.ok { " ok " } else { " no " },
            c.what,
            c.detail
        );
    }
    exit::OK
}
