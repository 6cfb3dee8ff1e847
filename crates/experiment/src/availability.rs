//! Whether this host can run an executor at all: KVM usable, QEMU on PATH.
//! One check, used by the execute path and by host runs alike.

use smplab_record::host::KvmFacts;

/// Whether `binary` (a path, or a name looked up on PATH) exists.
pub fn on_path(binary: &str) -> bool {
    if binary.contains('/') {
        return std::path::Path::new(binary).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(binary).is_file()))
}

/// Why KVM cannot be used here, if it cannot. Honours smplab-vmm's
/// `SMPLAB_KVM_DEVICE` override, so tests can point it at a missing device.
pub fn kvm_unavailable() -> Option<String> {
    if let Some(dev) = std::env::var_os(smplab_vmm::vm::KVM_DEVICE_ENV) {
        let path = std::path::PathBuf::from(dev);
        return match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(_) => None,
            Err(e) => Some(format!(
                "{} (from {}) cannot be opened read-write: {e}",
                path.display(),
                smplab_vmm::vm::KVM_DEVICE_ENV
            )),
        };
    }
    let k = KvmFacts::detect();
    if !k.device_present {
        Some("/dev/kvm does not exist (load kvm_intel/kvm_amd, or run on a host with KVM)".into())
    } else if !k.device_usable {
        Some(
            "/dev/kvm exists but cannot be opened read-write (add yourself to the kvm group)"
                .into(),
        )
    } else {
        None
    }
}
