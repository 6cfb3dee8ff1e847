//! Real guests on this machine's /dev/kvm: tiny hand-assembled PVH ELFs, for each
//! sync mode at 1 and 2 vCPUs, plus crash, fault, timeout and bad-kernel cases.
//!
//! Without /dev/kvm these tests print a note and pass; with SMPLAB_REQUIRE_KVM=1
//! (set by CI) they fail instead.

mod kvm_check;

use kvm_check::kvm_usable;

use smplab_record::exit;
use smplab_vmm::test_guest::{GuestProgram, Misbehave};
use smplab_vmm::{run_vm, ConsoleSink, KernelImage, SyncMode, VmConfig, VmmError};
use std::time::Duration;

fn config(program: &GuestProgram, vcpus: u32, sync: SyncMode) -> VmConfig {
    let mut config = VmConfig::new(KernelImage::Bytes(program.elf()));
    config.vcpus = vcpus;
    config.mem_bytes = 16 << 20;
    config.sync = sync;
    config.console = ConsoleSink::Capture;
    config.timeout = Some(Duration::from_secs(60));
    config.cmdline = format!("cpus={vcpus}");
    config
}

fn boots_and_exits(vcpus: u32, sync: SyncMode) {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        aps: u16::try_from(vcpus - 1).expect("a test's few vCPUs"),
        bsp_loops: 50,
        ap_loops: 50,
        exit_code: 5,
        ..GuestProgram::default()
    };
    let run =
        run_vm(&config(&program, vcpus, sync)).unwrap_or_else(|e| panic!("{sync} x{vcpus}: {e}"));
    assert_eq!(run.exit_code, 5);
    assert_eq!(run.result, b"ok");
    assert_eq!(run.console, b"smplab test guest\n");
    let s = &run.section;
    assert_eq!(s.sync, sync.as_str());
    assert_eq!(s.exits_per_vcpu.len(), vcpus as usize);
    // Every vCPU did its 50 work-device reads; counted by the VMM itself.
    for (i, exits) in s.exits_per_vcpu.iter().enumerate() {
        let io_in = exits.get("io_in").copied().unwrap_or(0);
        assert!(io_in >= 50, "vCPU {i} had {io_in} io_in exits: {exits:?}");
    }
    let work = s
        .exit_latency
        .get(&format!("work/{sync}"))
        .unwrap_or_else(|| panic!("no work latency in {:?}", s.exit_latency.keys()));
    assert_eq!(work.count, 50 * u64::from(vcpus));
    assert_eq!(s.global_lock_wait.is_some(), sync == SyncMode::Global);
    assert_eq!(s.io_thread.is_some(), sync.has_io_thread());
    assert_eq!(s.kvm_vcpu_stats.len(), vcpus as usize);
    assert_eq!(s.exit_code, Some(5));
}

/// `--irqchip user`: the same guests, the AP started by the LAPIC model's
/// INIT/SIPI (no in-kernel LAPIC), in every sync mode.
#[test]
fn user_irqchip_boots_2_vcpus_in_every_mode() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 50,
        ap_loops: 50,
        exit_code: 5,
        ..GuestProgram::default()
    };
    for sync in SyncMode::ALL {
        let mut config = config(&program, 2, sync);
        config.irqchip = smplab_vmm::Irqchip::User;
        let run = run_vm(&config).unwrap_or_else(|e| panic!("{sync} irqchip user: {e}"));
        assert_eq!(run.exit_code, 5, "{sync}");
        assert_eq!(run.result, b"ok", "{sync}");
        let s = &run.section;
        for (i, exits) in s.exits_per_vcpu.iter().enumerate() {
            let io_in = exits.get("io_in").copied().unwrap_or(0);
            assert!(io_in >= 50, "{sync}: vCPU {i} had {io_in} io_in exits");
        }
        assert!(
            s.exit_latency.contains_key(&format!("lapic/{sync}")),
            "{sync}: the ICR writes go through the bus: {:?}",
            s.exit_latency.keys()
        );
        assert!(s.user_irqchip.is_some(), "{sync}");
    }
}

#[test]
fn global_1_vcpu() {
    boots_and_exits(1, SyncMode::Global);
}
#[test]
fn global_2_vcpus() {
    boots_and_exits(2, SyncMode::Global);
}
#[test]
fn iothread_1_vcpu() {
    boots_and_exits(1, SyncMode::IoThread);
}
#[test]
fn iothread_2_vcpus() {
    boots_and_exits(2, SyncMode::IoThread);
}
#[test]
fn hybrid_1_vcpu() {
    boots_and_exits(1, SyncMode::Hybrid);
}
#[test]
fn hybrid_2_vcpus() {
    boots_and_exits(2, SyncMode::Hybrid);
}
#[test]
fn fine_1_vcpu() {
    boots_and_exits(1, SyncMode::Fine);
}
#[test]
fn fine_2_vcpus() {
    boots_and_exits(2, SyncMode::Fine);
}

#[test]
fn unknown_port_reads_all_ones_and_is_counted() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        probe_port: Some(0x1234),
        ..GuestProgram::default()
    };
    let run = run_vm(&config(&program, 1, SyncMode::Hybrid)).expect("probe guest runs");
    assert_eq!(run.result, b"ok\xff");
    assert_eq!(run.section.unclaimed_accesses, 1);
}

#[test]
fn crash_is_a_guest_crash_with_registers() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        misbehave: Some(Misbehave::Crash),
        ..GuestProgram::default()
    };
    let err = run_vm(&config(&program, 1, SyncMode::Fine)).expect_err("ud2 without IDT crashes");
    assert!(matches!(err, VmmError::GuestCrash { .. }), "{err}");
    assert_eq!(err.exit_status(), exit::GUEST_CRASH);
    let text = err.to_string();
    assert!(text.contains("rip="), "{text}");
}

#[test]
fn read_outside_ram_is_an_open_bus_not_a_stop() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        misbehave: Some(Misbehave::ReadOutsideRam),
        ..GuestProgram::default()
    };
    // Unclaimed MMIO is an open bus, as unclaimed ports are: the read sees
    // all-ones (which the guest then writes to the debug-exit port), is
    // counted, and the guest goes on.
    let run = run_vm(&config(&program, 1, SyncMode::Global)).expect("the guest goes on");
    assert_eq!(run.exit_code, 0xffff_ffff);
    assert!(
        run.section.unclaimed_accesses >= 1,
        "{:?}",
        run.section.unclaimed_accesses
    );
}

#[test]
fn hanging_guest_times_out_with_registers() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        misbehave: Some(Misbehave::Hang),
        ..GuestProgram::default()
    };
    let mut cfg = config(&program, 2, SyncMode::IoThread);
    cfg.timeout = Some(Duration::from_millis(300));
    let err = run_vm(&cfg).expect_err("hangs");
    assert!(matches!(err, VmmError::Timeout { .. }), "{err}");
    assert_eq!(err.exit_status(), exit::TIMEOUT);
    assert!(err.to_string().contains("rip="));
}

#[test]
fn bad_kernels_and_limits_have_distinct_statuses() {
    if !kvm_usable() {
        return;
    }
    let mut cfg = config(&GuestProgram::default(), 1, SyncMode::Fine);
    cfg.kernel = KernelImage::Bytes(b"#!/bin/sh\necho not an ELF\n".to_vec());
    let err = run_vm(&cfg).expect_err("not an ELF");
    assert_eq!(err.exit_status(), exit::BAD_KERNEL, "{err}");

    // A valid ELF without the PVH note.
    let mut elf = GuestProgram::default().elf();
    let note_type = elf
        .windows(12)
        .position(|w| w == [4, 0, 0, 0, 4, 0, 0, 0, 18, 0, 0, 0])
        .expect("test ELF has its PVH note");
    elf[note_type + 8] = 17;
    cfg.kernel = KernelImage::Bytes(elf);
    let err = run_vm(&cfg).expect_err("no PVH note");
    assert!(matches!(err, VmmError::NoPvhEntry), "{err}");
    assert_eq!(err.exit_status(), exit::BAD_KERNEL);

    let mut cfg = config(&GuestProgram::default(), 100_000, SyncMode::Fine);
    cfg.kernel = KernelImage::Bytes(GuestProgram::default().elf());
    let err = run_vm(&cfg).expect_err("too many vCPUs");
    assert!(matches!(err, VmmError::TooManyVcpus { .. }), "{err}");
    assert_eq!(err.exit_status(), exit::RESOURCE_LIMIT);

    cfg.vcpus = 1;
    cfg.kernel = KernelImage::Path("/nonexistent/kernel.elf".into());
    assert_eq!(
        run_vm(&cfg).expect_err("missing").exit_status(),
        exit::BAD_INPUT,
        "a missing file is bad input, not an unbootable image"
    );
}

#[test]
fn threads_are_named_and_placement_and_stats_work() {
    if !kvm_usable() {
        return;
    }
    // A guest that hangs, so its threads can be looked at while it runs.
    let program = GuestProgram {
        misbehave: Some(Misbehave::Hang),
        ..GuestProgram::default()
    };
    let mut cfg = config(&program, 2, SyncMode::Hybrid);
    let cpu = smplab_vmm::placement::allowed_cpus()[0];
    cfg.placement = smplab_vmm::Placement::Pinned(vec![cpu]);
    cfg.io_cpu = Some(cpu);
    // Long enough for a loaded CI host to have started every thread; the watcher
    // stops as soon as it has seen them all.
    cfg.timeout = Some(Duration::from_millis(1500));
    let watcher = std::thread::spawn(|| {
        let mut names = std::collections::BTreeSet::new();
        let start = std::time::Instant::now();
        let wanted = ["smplab-vcpu-0", "smplab-vcpu-1", "smplab-io"];
        while start.elapsed() < Duration::from_millis(1400)
            && !wanted.iter().all(|w| names.contains(*w))
        {
            if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
                for task in tasks.flatten() {
                    if let Ok(name) = std::fs::read_to_string(task.path().join("comm")) {
                        names.insert(name.trim().to_string());
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        names
    });
    let err = run_vm(&cfg).expect_err("hang guest times out");
    assert!(matches!(err, VmmError::Timeout { .. }), "{err}");
    let names = watcher.join().expect("watcher");
    for expected in ["smplab-vcpu-0", "smplab-vcpu-1", "smplab-io"] {
        assert!(names.contains(expected), "{expected} not in {names:?}");
    }

    // KVM binary stats are collected per vCPU and per VM where the host has them.
    let run = run_vm(&config(&GuestProgram::default(), 1, SyncMode::Fine)).expect("runs");
    let has_stats_fd = smplab_vmm::kvm_capabilities()
        .expect("caps")
        .iter()
        .any(|(name, present)| name == "KVM_CAP_BINARY_STATS_FD" && *present);
    if has_stats_fd {
        assert!(run.section.kvm_vcpu_stats[0].contains_key("exits"));
        assert!(!run.section.kvm_vm_stats.is_empty());
    }
    assert!(run.section.vmm_overhead_bytes.is_some());
}

#[test]
fn capabilities_name_the_irqchip_and_max_vcpus() {
    if !kvm_usable() {
        return;
    }
    let caps = smplab_vmm::kvm_capabilities().expect("caps");
    assert!(caps.iter().any(|(n, p)| n == "KVM_CAP_IRQCHIP" && *p));
    assert!(smplab_vmm::max_vcpus().expect("max") >= 2);
}

#[test]
fn cli_record_round_trips_as_json() {
    if !kvm_usable() {
        return;
    }
    use smplab_vmm::command::{ConsoleOutput, VmmOptions};
    let dir = std::env::temp_dir().join(format!("smplab-vmm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kernel = dir.join("guest.elf");
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 10,
        ap_loops: 10,
        ..GuestProgram::default()
    };
    std::fs::write(&kernel, program.elf()).expect("write guest");
    let console = dir.join("console.txt");
    let options = VmmOptions {
        vcpus: 2,
        sync: SyncMode::IoThread,
        console: ConsoleOutput::File(console.clone()),
        timeout: "60".parse().expect("a timeout"),
        ..VmmOptions::new(kernel.clone())
    };
    assert_eq!(smplab_vmm::command::run_command(&options), exit::OK);
    assert_eq!(
        std::fs::read(&console).expect("console file"),
        b"smplab test guest\n"
    );
    let cfg = VmConfig {
        console: ConsoleSink::Discard,
        ..config(&program, 2, SyncMode::IoThread)
    };
    let outcome = run_vm(&cfg);
    let record = smplab_vmm::command::record_for(&options, &outcome);
    let parsed = smplab_record::RunRecord::from_json(&record.to_json_pretty()).expect("parses");
    assert_eq!(parsed.executor, smplab_record::Executor::Vm);
    assert_eq!(parsed.workload.name, "kernel:guest.elf");
    let vmm = parsed.vmm.expect("vmm section");
    assert_eq!(vmm.vcpus, 2);
    let io = vmm.io_thread.expect("io thread stats");
    assert!(io.requests > 0);
    assert_eq!(
        io.queue_wait.expect("queue wait histogram").count,
        io.requests
    );
    assert_eq!(io.handling.expect("handling histogram").count, io.requests);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn more_vcpus_than_host_cores_all_finish() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        aps: 3,
        bsp_loops: 20,
        ap_loops: 20,
        ..GuestProgram::default()
    };
    for sync in [SyncMode::Global, SyncMode::Hybrid] {
        let mut cfg = config(&program, 4, sync);
        // All four vCPUs confined to the host CPUs this process may use.
        cfg.placement = smplab_vmm::Placement::Confined(smplab_vmm::placement::allowed_cpus());
        let run = run_vm(&cfg).unwrap_or_else(|e| panic!("{sync}: {e}"));
        assert_eq!(run.exit_code, 0);
        let work = &run.section.exit_latency[&format!("work/{sync}")];
        assert_eq!(work.count, 80);
    }
}

#[test]
fn a_not_thread_safe_work_device_never_bypasses() {
    if !kvm_usable() {
        return;
    }
    let program = GuestProgram {
        aps: 1,
        bsp_loops: 30,
        ap_loops: 30,
        ..GuestProgram::default()
    };
    let mut cfg = config(&program, 2, SyncMode::Hybrid);
    cfg.work_exclusive = true;
    let run = run_vm(&cfg).expect("runs");
    // All 60 work reads went through the I/O thread (plus console/result writes).
    let io = run.section.io_thread.expect("io thread stats");
    assert!(io.requests - io.posted_writes >= 60, "{io:?}");
    cfg.work_exclusive = false;
    let run = run_vm(&cfg).expect("runs");
    let io = run.section.io_thread.expect("io thread stats");
    assert_eq!(
        io.requests, io.posted_writes,
        "thread-safe work device bypasses"
    );
}

#[test]
fn string_io_is_split_into_the_guests_accesses() {
    if !kvm_usable() {
        return;
    }
    // `rep outsb` of 2 and 18 bytes and a 4-byte `rep insb`: KVM reports
    // size 1 x count n, which must become n one-byte accesses in every mode.
    let program = GuestProgram {
        string_io: true,
        probe_port: Some(0x1234),
        ..GuestProgram::default()
    };
    for sync in SyncMode::ALL {
        let run = run_vm(&config(&program, 1, sync)).unwrap_or_else(|e| panic!("{sync}: {e}"));
        assert_eq!(run.console, b"smplab test guest\n", "{sync}");
        assert_eq!(run.result, b"ok\xff\xff\xff\xff", "{sync}");
        assert_eq!(run.section.unclaimed_accesses, 4, "{sync}");
    }
}
