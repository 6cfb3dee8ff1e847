//! Everything that can stop a VM run, each with a message a user can act on and a
//! distinct process exit status (`smplab_record::exit`).

use smplab_record::exit;
use std::path::PathBuf;

/// Why a VM could not be built or did not finish.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    #[error("/dev/kvm is missing or unusable ({source}); load the kvm module and make sure this user can open /dev/kvm read-write")]
    KvmUnavailable {
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("KVM lacks a capability smplab-vmm needs: {0}")]
    KvmCapabilityMissing(&'static str),
    #[error("KVM call {call} failed: {source}")]
    Kvm {
        call: &'static str,
        #[source]
        source: kvm_ioctls::Error,
    },
    #[error("cannot read kernel image {path}: {source}")]
    KernelRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the kernel image is neither a bootable PVH ELF64 x86-64 file nor a Linux bzImage: {0}"
    )]
    BadKernel(String),
    #[error("the kernel image has no PVH entry point (Xen ELF note type 18, XEN_ELFNOTE_PHYS32_ENTRY); build it with a PVH note as docs/guest-abi.md describes")]
    NoPvhEntry,
    #[error("{requested} vCPUs requested but KVM on this host allows at most {max}; ask for fewer with --cpus")]
    TooManyVcpus { requested: u32, max: u32 },
    #[error("invalid VM configuration: {0}")]
    BadConfig(String),
    #[error("guest memory of {bytes} bytes cannot be set up: {reason}; try a smaller --mem")]
    Memory { bytes: u64, reason: String },
    #[error("the boot data (command line, modules, start info) does not fit in guest memory: {0}; give the VM more --mem or pass smaller modules")]
    BootDataTooLarge(String),
    #[error("cannot place thread {thread} on host CPU(s) {cpus:?}: {source}; check --pin/--io-thread-cpus against the CPUs this process may use")]
    Placement {
        thread: String,
        cpus: Vec<usize>,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start host thread {name}: {source}")]
    Thread {
        name: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the console to {path}: {source}")]
    Console {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("guest crashed on vCPU {vcpu}: {reason}\n{registers}")]
    GuestCrash {
        vcpu: u32,
        reason: String,
        registers: RegisterDump,
    },
    #[error("guest accessed guest-physical address {addr:#x} outside its {mem_bytes}-byte memory on vCPU {vcpu}\n{registers}")]
    GuestMemoryFault {
        vcpu: u32,
        addr: u64,
        mem_bytes: u64,
        registers: RegisterDump,
    },
    #[error("guest still running after the {seconds:.1} s timeout; raise --timeout or check the guest console\n{registers}")]
    Timeout {
        seconds: f64,
        registers: RegisterDump,
    },
    #[error("vCPU {vcpu} thread failed: {reason}")]
    VcpuThread { vcpu: u32, reason: String },
}

impl VmmError {
    /// The process exit status for this error (see `smplab_record::exit`).
    pub fn exit_status(&self) -> i32 {
        match self {
            VmmError::KvmUnavailable { .. } | VmmError::KvmCapabilityMissing(_) => {
                exit::KVM_UNAVAILABLE
            }
            // A file the user named that cannot be read is bad input, like a
            // missing workload file; BAD_KERNEL means the image is there but
            // cannot boot.
            VmmError::KernelRead { .. } => exit::BAD_INPUT,
            VmmError::BadKernel(_) | VmmError::NoPvhEntry => exit::BAD_KERNEL,
            VmmError::TooManyVcpus { .. }
            | VmmError::Memory { .. }
            | VmmError::BootDataTooLarge(_) => exit::RESOURCE_LIMIT,
            VmmError::BadConfig(_) => exit::BAD_INPUT,
            VmmError::GuestCrash { .. } | VmmError::GuestMemoryFault { .. } => exit::GUEST_CRASH,
            VmmError::Timeout { .. } => exit::TIMEOUT,
            VmmError::Placement { .. } | VmmError::Thread { .. } | VmmError::Console { .. } => {
                exit::RUN_FAILED
            }
            VmmError::Kvm { .. } | VmmError::VcpuThread { .. } => exit::INTERNAL,
        }
    }

    pub(crate) fn kvm(call: &'static str) -> impl FnOnce(kvm_ioctls::Error) -> VmmError {
        move |source| VmmError::Kvm { call, source }
    }
}

/// The registers of one vCPU, captured when the guest crashed or timed out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegisterDump {
    pub vcpu: u32,
    /// `(name, value)` in display order; empty when they could not be read.
    pub registers: Vec<(&'static str, u64)>,
}

impl RegisterDump {
    pub(crate) fn capture(vcpu_index: u32, vcpu: &kvm_ioctls::VcpuFd) -> Self {
        let mut registers = Vec::new();
        if let Ok(r) = vcpu.get_regs() {
            registers.extend([
                ("rip", r.rip),
                ("rflags", r.rflags),
                ("rax", r.rax),
                ("rbx", r.rbx),
                ("rcx", r.rcx),
                ("rdx", r.rdx),
                ("rsi", r.rsi),
                ("rdi", r.rdi),
                ("rsp", r.rsp),
                ("rbp", r.rbp),
                ("r8", r.r8),
                ("r9", r.r9),
                ("r10", r.r10),
                ("r11", r.r11),
                ("r12", r.r12),
                ("r13", r.r13),
                ("r14", r.r14),
                ("r15", r.r15),
            ]);
        }
        if let Ok(s) = vcpu.get_sregs() {
            registers.extend([
                ("cs", u64::from(s.cs.selector)),
                ("cs.base", s.cs.base),
                ("ss", u64::from(s.ss.selector)),
                ("ds", u64::from(s.ds.selector)),
                ("cr0", s.cr0),
                ("cr2", s.cr2),
                ("cr3", s.cr3),
                ("cr4", s.cr4),
                ("efer", s.efer),
                ("gdt.base", s.gdt.base),
                ("idt.base", s.idt.base),
                ("idt.limit", u64::from(s.idt.limit)),
            ]);
        }
        RegisterDump {
            vcpu: vcpu_index,
            registers,
        }
    }
}

impl std::fmt::Display for RegisterDump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.registers.is_empty() {
            return write!(f, "vCPU {} registers: (unavailable)", self.vcpu);
        }
        writeln!(f, "vCPU {} registers:", self.vcpu)?;
        for (i, (name, value)) in self.registers.iter().enumerate() {
            write!(f, "  {name:>9}={value:#018x}")?;
            if i % 3 == 2 {
                writeln!(f)?;
            }
        }
        Ok(())
    }
}
