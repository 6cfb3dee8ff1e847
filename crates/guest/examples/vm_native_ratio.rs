//! VM wall time / native wall time for every built-in workload and idle policy:
//! the project's table of real virtualization overhead.
//!
//! ```text
//! cargo run --release -p smplab-guest --example vm_native_ratio -- \
//!     [--vcpus 2] [--scale 1] [--reps 1] [--pin 0,1] \
//!     [--idle hlt,poll,haltpoll:200000] [--workloads spinlock,blackscholes] [--qemu]
//! ```
//! `--qemu` adds a column for the same guest under QEMU/KVM (first idle policy).
//! Each workload is instantiated with n = vCPUs. Native and VM runs alternate,
//! so slow drift of a shared machine hits both; with `--reps R` the minimum of
//! R runs of each is used. Wall time is the workload's own (first thread start
//! to last thread end) in both executors; VM boot is reported separately.

use smplab_guest::{run_qemu, run_vm, IdlePolicy, VmRunOptions};
use smplab_record::WorkloadInfo;
use smplab_workload::{builtin, Program, Source};
use std::time::Duration;

struct Args {
    vcpus: u32,
    scale: f64,
    reps: u32,
    pin: Option<Vec<usize>>,
    idle: Vec<IdlePolicy>,
    workloads: Vec<String>,
    qemu: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        vcpus: 2,
        scale: 1.0,
        reps: 1,
        pin: None,
        idle: vec![
            IdlePolicy::Hlt,
            IdlePolicy::Poll,
            IdlePolicy::HaltPoll { ns: 200_000 },
        ],
        workloads: builtin::names().map(str::to_string).collect(),
        qemu: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--vcpus" => a.vcpus = val()?.parse().map_err(|e| format!("--vcpus: {e}"))?,
            "--scale" => a.scale = val()?.parse().map_err(|e| format!("--scale: {e}"))?,
            "--reps" => {
                a.reps = val()?
                    .parse::<u32>()
                    .map_err(|e| format!("--reps: {e}"))?
                    .max(1)
            }
            "--pin" => {
                let cpus: Result<Vec<usize>, _> = val()?.split(',').map(str::parse).collect();
                a.pin = Some(cpus.map_err(|e| format!("--pin: {e}"))?);
            }
            "--idle" => {
                let list: Result<Vec<IdlePolicy>, _> = val()?.split(',').map(str::parse).collect();
                a.idle = list.map_err(|e| e.to_string())?;
            }
            "--workloads" => a.workloads = val()?.split(',').map(str::to_string).collect(),
            "--qemu" => a.qemu = true,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

fn info(p: &Program) -> WorkloadInfo {
    WorkloadInfo {
        name: p.name.clone(),
        source: "builtin".into(),
        n: p.n,
        threads: p.total_threads(),
        params: Default::default(),
    }
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("vm_native_ratio: {e}");
            std::process::exit(2);
        }
    };
    print_header(&args);
    for name in &args.workloads {
        let program =
            match Source::resolve(name).and_then(|s| s.instantiate(Some(args.vcpus), args.scale)) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    continue;
                }
            };
        let best = measure(&args, &program);
        if let Some(e) = &best.failed {
            eprintln!("{name}: {e}");
        }
        print_row(name, &program, best, args.qemu);
    }
}

fn print_header(args: &Args) {
    print!("| workload | threads | native ms |");
    for p in &args.idle {
        print!(" vm/native {p} |");
    }
    if args.qemu {
        print!(
            " qemu/native {} |",
            args.idle.first().copied().unwrap_or_default()
        );
    }
    println!(" guest boot ms | vm run total ms |");
    print!("| --- | --- | --- |");
    for _ in 0..args.idle.len() + usize::from(args.qemu) {
        print!(" --- |");
    }
    println!(" --- | --- |");
}

/// One workload's best (minimum) wall times over the repetitions, ns
/// (`u64::MAX`: every run failed), with the last VM run's boot and total time.
struct Best {
    native: u64,
    /// One per idle policy, then QEMU's if asked for.
    vm: Vec<u64>,
    qemu: u64,
    boot_ns: u64,
    total_ns: u64,
    failed: Option<String>,
}

/// Native and VM runs alternate, so slow drift of a shared machine hits both.
fn measure(args: &Args, program: &Program) -> Best {
    let mut best = Best {
        native: u64::MAX,
        vm: vec![u64::MAX; args.idle.len()],
        qemu: u64::MAX,
        boot_ns: 0,
        total_ns: 0,
        failed: None,
    };
    for _ in 0..args.reps {
        let nopts = smplab_native::NativeOptions {
            pin: args.pin.clone(),
            timeout: Some(Duration::from_secs(600)),
            ..Default::default()
        };
        match smplab_native::run(program, info(program), &nopts) {
            Ok(r) => best.native = best.native.min(r.timing.wall_ns),
            Err(e) => best.failed = Some(format!("native: {e}")),
        }
        for (i, idle) in args.idle.iter().enumerate() {
            let opts = VmRunOptions {
                vcpus: args.vcpus,
                idle: *idle,
                pin: args.pin.clone(),
                timeout: Duration::from_secs(600),
                ..VmRunOptions::default()
            };
            match run_vm(program, info(program), &opts) {
                Ok(r) => {
                    best.vm[i] = best.vm[i].min(r.timing.wall_ns);
                    best.boot_ns = r.guest.map(|g| g.boot_ns).unwrap_or(0);
                    best.total_ns = r.timing.total_ns.unwrap_or(0);
                }
                Err(e) => best.failed = Some(format!("vm {idle}: {e}")),
            }
        }
        if args.qemu {
            let opts = VmRunOptions {
                vcpus: args.vcpus,
                idle: args.idle.first().copied().unwrap_or_default(),
                pin: args.pin.clone(),
                timeout: Duration::from_secs(600),
                ..VmRunOptions::default()
            };
            match run_qemu(program, info(program), &opts) {
                Ok(r) => best.qemu = best.qemu.min(r.timing.wall_ns),
                Err(e) => best.failed = Some(format!("qemu: {e}")),
            }
        }
    }
    best
}

fn print_row(name: &str, program: &Program, mut best: Best, qemu: bool) {
    print!(
        "| {name} | {} | {:.1} |",
        program.total_threads(),
        best.native as f64 / 1e6
    );
    if qemu {
        best.vm.push(best.qemu);
    }
    for v in &best.vm {
        if *v == u64::MAX || best.native == u64::MAX {
            print!(" failed |");
        } else {
            print!(" {:.3} |", *v as f64 / best.native as f64);
        }
    }
    println!(
        " {:.1} | {:.1} |",
        best.boot_ns as f64 / 1e6,
        best.total_ns as f64 / 1e6
    );
}
