//! Run a program natively, on smplab-vmm and on QEMU, and print each run's
//! `linux` section as JSON (until `smplab run --executor linux` exists):
//!
//! `linux_run KERNEL VCPUS WHERE[,WHERE...] [--include FILE]... [--timeout SECS]
//! [--cmdline LINE] -- PROGRAM ARGS...`
//! with WHERE one of `native`, `vmm`, `qemu`, `qemu-tcg`.

use smplab_linux::{
    run_native, run_on_qemu, run_on_smplab_vmm, LinuxGuestConfig, Program, QemuAccel,
};
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(split) = args.iter().position(|a| a == "--") else {
        eprintln!(
            "usage: linux_run KERNEL VCPUS WHERE[,WHERE...] [--include FILE]... -- PROGRAM ARGS..."
        );
        std::process::exit(2);
    };
    let (head, argv) = (&args[..split], &args[split + 1..]);
    let [kernel, vcpus, wheres, rest @ ..] = head else {
        eprintln!("linux_run: KERNEL VCPUS WHERE come first");
        std::process::exit(2);
    };
    let mut program = Program::new(argv.iter().cloned());
    let mut cfg = LinuxGuestConfig::new(PathBuf::from(kernel));
    cfg.vcpus = vcpus.parse().unwrap_or(1);
    cfg.timeout = Duration::from_secs(600);
    for pair in rest.chunks(2) {
        match pair {
            [flag, file] if flag == "--include" => program.include.push(PathBuf::from(file)),
            [flag, secs] if flag == "--timeout" => {
                cfg.timeout = Duration::from_secs(secs.parse().unwrap_or(600))
            }
            [flag, line] if flag == "--cmdline" => cfg.cmdline = line.clone(),
            other => {
                eprintln!("linux_run: unknown option {other:?}");
                std::process::exit(2);
            }
        }
    }
    for place in wheres.split(',') {
        let run = match place {
            "native" => run_native(&program, cfg.timeout),
            "vmm" => run_on_smplab_vmm(&cfg, &program),
            "qemu" => run_on_qemu(&cfg, &program),
            "qemu-tcg" => {
                let mut tcg = cfg.clone();
                tcg.qemu.accel = QemuAccel::Tcg;
                run_on_qemu(&tcg, &program)
            }
            other => {
                eprintln!("linux_run: unknown WHERE `{other}`");
                std::process::exit(2);
            }
        };
        match run {
            Ok(run) => println!(
                "{place}: {}",
                serde_json::to_string(&run.section).unwrap_or_default()
            ),
            Err(e) => {
                eprintln!("{place}: error (status {}): {e}", e.exit_status());
                std::process::exit(e.exit_status());
            }
        }
    }
}
