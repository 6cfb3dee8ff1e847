//! The one check every KVM test file of smplab-vmm makes first: can this
//! host create a VM? With SMPLAB_REQUIRE_KVM=1 (CI) an unusable /dev/kvm is a
//! failure, not a skip.

/// Whether KVM can create a VM here; prints why not when it cannot.
pub fn kvm_usable() -> bool {
    let err = match kvm_ioctls::Kvm::new() {
        Ok(kvm) => match kvm.create_vm() {
            Ok(_) => return true,
            Err(e) => format!("KVM_CREATE_VM failed: {e}"),
        },
        Err(e) => format!("/dev/kvm cannot be opened: {e}"),
    };
    if std::env::var("SMPLAB_REQUIRE_KVM").as_deref() == Ok("1") {
        panic!("SMPLAB_REQUIRE_KVM=1 but KVM is unusable: {err}");
    }
    eprintln!("note: skipping KVM test: {err}");
    false
}
