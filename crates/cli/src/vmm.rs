//! `smplab vmm`: the flags, parsed into smplab-vmm's typed
//! [`VmmOptions`] (the command itself is `smplab_vmm::command`).

use smplab_record::config::{IoThreadCpus, Timeout, DEFAULT_TIMEOUT};
use smplab_vmm::command::{parse_size, ConsoleOutput, VcpuCpus, VmmOptions};
use smplab_vmm::placement::CpuList;
use smplab_vmm::{Irqchip, SyncMode};
use std::path::PathBuf;

/// Options of `smplab vmm`.
#[derive(Debug, Clone, clap::Args)]
pub struct VmmArgs {
    /// Guest kernel: an ELF64 with a PVH entry note, or a Linux bzImage.
    #[arg(long, value_name = "FILE")]
    pub kernel: PathBuf,
    /// Number of vCPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub vcpus: u32,
    /// Guest memory, e.g. 256M or 1G.
    #[arg(long, default_value = "256M", value_name = "SIZE", value_parser = parse_size)]
    pub mem: u64,
    /// Device synchronization: global, iothread, hybrid or fine.
    #[arg(long, default_value = "fine", value_name = "MODE")]
    pub sync: SyncMode,
    /// Pin vCPU i to the i-th CPU of this list (e.g. 0,1 or 0-3).
    #[arg(long, value_name = "LIST", conflicts_with = "confine")]
    pub pin: Option<CpuList>,
    /// Let every vCPU run on any CPU of this list.
    #[arg(long, value_name = "LIST")]
    pub confine: Option<CpuList>,
    /// Host CPU of the I/O thread (iothread, hybrid): one CPU, or none.
    #[arg(long, default_value = "none", value_name = "LIST")]
    pub io_thread_cpus: IoThreadCpus,
    /// Guest command line; `cpus=N` is added when it has no `cpus=` word.
    #[arg(long, value_name = "STR", default_value = "")]
    pub cmdline: String,
    /// PVH module files in order (module 0 is the encoded workload).
    #[arg(long = "module", value_name = "FILE")]
    pub modules: Vec<PathBuf>,
    /// A Linux initrd (initramfs): where the boot protocol puts it for a
    /// bzImage kernel, module 0 for a PVH kernel (then give no --module).
    #[arg(long, value_name = "FILE")]
    pub initrd: Option<PathBuf>,
    /// Stop the guest after this long, e.g. 30s or 500ms; a bare number is
    /// seconds (exit status 7).
    #[arg(long, default_value_t = DEFAULT_TIMEOUT, value_name = "DURATION")]
    pub timeout: Timeout,
    /// Busy time of the work device (port 0x530) per access, in nanoseconds.
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub work_ns: u64,
    /// Make the work device a not-thread-safe device (it then cannot bypass).
    #[arg(long)]
    pub work_exclusive: bool,
    /// Interrupt controllers: `kernel` (KVM's in-kernel LAPIC/IOAPIC/PIC) or
    /// `user` (smplab-vmm's models on the bus, under --sync; HLT in the VMM).
    #[arg(long, default_value = "kernel", value_name = "WHERE")]
    pub irqchip: Irqchip,
    /// With --irqchip user: how long a halted vCPU thread polls before it
    /// sleeps, in ns (0 = no polling).
    #[arg(long, default_value_t = 0, value_name = "NS")]
    pub vmm_halt_poll_ns: u64,
    /// Copy the guest console to stderr while it runs.
    #[arg(long, conflicts_with = "console_file")]
    pub console: bool,
    /// Write the guest console to this file.
    #[arg(long, value_name = "FILE")]
    pub console_file: Option<PathBuf>,
    /// Print the result record as one JSON line on stdout.
    #[arg(long)]
    pub json: bool,
}

impl From<&VmmArgs> for VmmOptions {
    fn from(args: &VmmArgs) -> VmmOptions {
        VmmOptions {
            kernel: args.kernel.clone(),
            vcpus: args.vcpus,
            mem_bytes: args.mem,
            sync: args.sync,
            vcpu_cpus: match (&args.pin, &args.confine) {
                (Some(cpus), _) => VcpuCpus::Pin(cpus.clone()),
                (None, Some(cpus)) => VcpuCpus::Confine(cpus.clone()),
                (None, None) => VcpuCpus::Float,
            },
            io_thread_cpus: args.io_thread_cpus.clone(),
            cmdline: args.cmdline.clone(),
            modules: args.modules.clone(),
            initrd: args.initrd.clone(),
            timeout: args.timeout,
            work_ns: args.work_ns,
            work_exclusive: args.work_exclusive,
            irqchip: args.irqchip,
            vmm_halt_poll_ns: args.vmm_halt_poll_ns,
            console: match (&args.console_file, args.console) {
                (Some(path), _) => ConsoleOutput::File(path.clone()),
                (None, true) => ConsoleOutput::Stderr,
                (None, false) => ConsoleOutput::Hidden,
            },
            json: args.json,
        }
    }
}

/// Run `smplab vmm`; returns the process exit status.
pub fn run(args: &VmmArgs) -> i32 {
    smplab_vmm::command::run_command(&VmmOptions::from(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::time::Duration;

    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: VmmArgs,
    }

    fn options(flags: &[&str]) -> Result<VmmOptions, clap::Error> {
        let argv = ["smplab-vmm", "--kernel", "k.elf"].iter().chain(flags);
        Wrapper::try_parse_from(argv).map(|w| VmmOptions::from(&w.args))
    }

    #[test]
    fn the_vocabulary_flags_reach_the_options() {
        let o = options(&[
            "--vcpus",
            "2",
            "--sync",
            "hybrid",
            "--pin",
            "0-1",
            "--io-thread-cpus",
            "1",
            "--cmdline",
            "idle=poll",
            "--timeout",
            "5",
            "--console",
        ])
        .expect("parses");
        assert_eq!(o.vcpus, 2);
        assert_eq!(o.sync, SyncMode::Hybrid);
        assert_eq!(o.vcpu_cpus, VcpuCpus::Pin(CpuList(vec![0, 1])));
        assert_eq!(o.io_thread_cpus, IoThreadCpus(vec![1]));
        assert_eq!(o.timeout.duration(), Duration::from_secs(5));
        assert_eq!(o.console, ConsoleOutput::Stderr);
        let o = options(&["--console-file", "c.txt", "--timeout", "500ms"]).expect("parses");
        assert_eq!(o.console, ConsoleOutput::File("c.txt".into()));
        assert_eq!(o.timeout.duration(), Duration::from_millis(500));
    }

    #[test]
    fn defaults_are_the_shared_ones() {
        let o = options(&[]).expect("parses");
        assert_eq!(o, VmmOptions::new("k.elf".into()));
        assert_eq!(o.timeout, DEFAULT_TIMEOUT);
    }

    #[test]
    fn old_names_bad_values_and_conflicts_are_refused() {
        for flags in [
            &["--cpus", "2"][..],
            &["--io-cpu", "1"],
            &["--timeout", "0"],
            &["--timeout", "soon"],
            &["--sync", "bogus"],
            &["--irqchip", "usr"],
            &["--console", "--console-file", "c.txt"],
            &["--pin", "0", "--confine", "1"],
        ] {
            assert!(options(flags).is_err(), "{flags:?} accepted");
        }
    }
}
