//! A host without KVM: every entry point reports KVM_UNAVAILABLE (exit status 3).
//! Its own test binary, because it points SMPLAB_KVM_DEVICE at a missing node for
//! the whole process.

use smplab_record::exit;
use smplab_vmm::test_guest::GuestProgram;
use smplab_vmm::{run_vm, KernelImage, VmConfig, VmmError};

#[test]
fn missing_kvm_device_is_kvm_unavailable() {
    std::env::set_var(smplab_vmm::vm::KVM_DEVICE_ENV, "/nonexistent/kvm");
    let config = VmConfig::new(KernelImage::Bytes(GuestProgram::default().elf()));
    let err = run_vm(&config).expect_err("no KVM");
    assert!(matches!(err, VmmError::KvmUnavailable { .. }), "{err}");
    assert_eq!(err.exit_status(), exit::KVM_UNAVAILABLE);
    assert!(err.to_string().contains("/dev/kvm"));
    assert_eq!(
        smplab_vmm::kvm_capabilities()
            .expect_err("no KVM")
            .exit_status(),
        exit::KVM_UNAVAILABLE
    );
    assert!(smplab_vmm::max_vcpus().is_err());
}
