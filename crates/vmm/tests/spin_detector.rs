//! The software spin detector end to end on this machine's /dev/kvm: a
//! hand-assembled guest at CPL3 runs a PAUSE loop polling a word nobody
//! writes (a waiter whose lock holder never comes) or a compute loop that
//! writes nothing; the detector samples each vCPU the way `smplab host`
//! does (kick it out of KVM_RUN, then read its registers, translate RIP
//! through the guest's page tables and classify the code there). Needs KVM
//! (fails instead of skipping with SMPLAB_REQUIRE_KVM=1).

mod kvm_check;

use kvm_check::kvm_usable;

use smplab_vmm::boot::{load_kernel, set_pvh_entry, write_boot_data};
use smplab_vmm::control::RunControl;
use smplab_vmm::host::spin::{SpinDetector, SpinSettings};
use smplab_vmm::host::truth::vcpu_tsc_offset;
use smplab_vmm::test_guest::{pvh_elf, GuestProgram, Misbehave, BSP_LOAD_ADDR, SPIN_USER_CS};
use smplab_vmm::vm::{open_kvm, Irqchip, Vm};
use smplab_vmm::{BusBuilder, KernelImage, SyncMode, Vcpu, VmConfig};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// `1: pause; cmpl $0, 0x3000; je 1b`: waits for a word that stays 0.
const SPIN_LOOP: &[u8] = &[
    0xf3, 0x90, 0x83, 0x3c, 0x25, 0x00, 0x30, 0x00, 0x00, 0x00, 0x74, 0xf4,
];
/// `mov $-1, %rcx; 1: imul %rdx,%rax; add %rsi,%rax; dec %rcx; jnz 1b`:
/// the guest's compute kernel, registers only.
const COMPUTE_LOOP: &[u8] = &[
    0x48, 0xc7, 0xc1, 0xff, 0xff, 0xff, 0xff, 0x48, 0x0f, 0xaf, 0xc2, 0x48, 0x01, 0xf0, 0x48, 0xff,
    0xc9, 0x75, 0xf4,
];

/// The test guest's way to CPL3 (`Misbehave::SpinAtCpl3`), with `user`
/// in place of its final `jmp $`.
fn guest_running(user: &[u8]) -> Vec<u8> {
    let mut code = GuestProgram {
        misbehave: Some(Misbehave::SpinAtCpl3),
        ..GuestProgram::default()
    }
    .bsp_code();
    assert_eq!(
        code.split_off(code.len() - 2),
        [0xeb, 0xfe],
        "ends in jmp $"
    );
    code.extend(user);
    pvh_elf(BSP_LOAD_ADDR, &[(BSP_LOAD_ADDR, code)])
}

/// Run `vcpu` for `time`, then kick it out of KVM_RUN (as the host's
/// sampler does) and get it back.
fn run_for(vcpu: Vcpu, time: Duration) -> Vcpu {
    let control = Arc::new(RunControl::new());
    let kicker = vcpu.kicker();
    let (done, finished) = mpsc::channel();
    let thread_control = control.clone();
    std::thread::spawn(move || {
        let mut vcpu = vcpu;
        let outcome = vcpu.run_until_stopped(&thread_control);
        let _ = done.send((vcpu, outcome));
    });
    std::thread::sleep(time);
    control.request_stop();
    kicker.kick();
    let (vcpu, outcome) = finished
        .recv_timeout(Duration::from_secs(20))
        .expect("a kick was lost: the vCPU never left KVM_RUN");
    outcome.expect("the test guest does not fail");
    vcpu
}

/// The detector's verdicts on 8 samples 2 ms apart of a guest running `user`.
fn verdicts(user: &[u8]) -> Vec<bool> {
    verdicts_with(user, SpinSettings::default())
}

fn verdicts_with(user: &[u8], settings: SpinSettings) -> Vec<bool> {
    let mem_bytes = 16 << 20;
    let vm = Vm::new(open_kvm().expect("kvm"), mem_bytes, Irqchip::Kernel).expect("vm");
    let loaded = load_kernel(vm.memory(), &guest_running(user)).expect("kernel");
    let mut config = VmConfig::new(KernelImage::Bytes(Vec::new()));
    config.mem_bytes = mem_bytes;
    write_boot_data(vm.memory(), &config, loaded.kernel_end).expect("boot data");
    let fd = vm.create_vcpu_fd(0).expect("vcpu");
    set_pvh_entry(&fd, loaded.entry).expect("entry");
    let bus = BusBuilder::new().build(SyncMode::Fine, None).expect("bus");
    let mut vcpu = Vcpu::new(0, fd, bus.client(), mem_bytes).expect("vcpu");
    // The CPL0 set-up is emulated on PVM: give it time to reach CPL3.
    vcpu = run_for(vcpu, Duration::from_millis(500));
    let sregs = vcpu.fd().get_sregs().expect("sregs");
    assert_eq!(
        (sregs.cs.selector, sregs.cs.dpl),
        (SPIN_USER_CS, 3),
        "at CPL3"
    );
    let settings = SpinSettings {
        use_dirty_ring: false,
        ..settings
    };
    let mut detector = SpinDetector::new(settings, None, Some(vm.memory().clone()));
    let mut verdicts = Vec::new();
    for _ in 0..8 {
        vcpu = run_for(vcpu, Duration::from_millis(2));
        let sample = detector.observe(vcpu.fd());
        assert!(!sample.in_kernel);
        verdicts.push(sample.spinning);
    }
    verdicts
}

#[test]
fn a_waiting_vcpu_is_spinning_at_every_sample() {
    if !kvm_usable() {
        return;
    }
    let v = verdicts(SPIN_LOOP);
    assert!(v.iter().all(|&s| s), "{v:?}");
}

/// Asked for two samples in the loop, the first sample alone is not enough.
#[test]
fn a_waiting_vcpu_needs_the_samples_it_is_asked_for() {
    if !kvm_usable() {
        return;
    }
    let v = verdicts_with(
        SPIN_LOOP,
        SpinSettings {
            pause_samples: 2,
            ..SpinSettings::default()
        },
    );
    assert!(!v[0], "one sample is not enough: {v:?}");
    assert!(v[1..].iter().all(|&s| s), "{v:?}");
}

#[test]
fn a_computing_vcpu_that_writes_nothing_is_never_spinning() {
    if !kvm_usable() {
        return;
    }
    let v = verdicts(COMPUTE_LOOP);
    assert!(v.iter().all(|&s| !s), "{v:?}");
}

/// KVM's TSC offset of a fresh vCPU agrees with its IA32_TSC read next to
/// the host's TSC (within a second of cycles: the reads are µs apart).
#[test]
fn the_tsc_offset_matches_the_vcpus_tsc_msr() {
    if !kvm_usable() {
        return;
    }
    let vm = Vm::new(open_kvm().expect("kvm"), 1 << 20, Irqchip::Kernel).expect("vm");
    let fd = vm.create_vcpu_fd(0).expect("vcpu");
    let offset = vcpu_tsc_offset(&fd);
    let mut msrs = kvm_bindings::Msrs::from_entries(&[kvm_bindings::kvm_msr_entry {
        index: 0x10,
        ..Default::default()
    }])
    .expect("one MSR");
    // SAFETY: rdtsc has no memory effects.
    let host = unsafe { core::arch::x86_64::_rdtsc() };
    assert_eq!(fd.get_msrs(&mut msrs).expect("IA32_TSC"), 1);
    let by_msr = msrs.as_slice()[0].data.wrapping_sub(host);
    let gap = offset.wrapping_sub(by_msr).wrapping_add(1 << 40);
    assert!(
        gap.abs_diff(1 << 40) < 5_000_000_000,
        "offset {offset:#x}, by the MSR {by_msr:#x}"
    );
}
