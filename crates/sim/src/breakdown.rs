//! Exact time accounting: every simulated nanosecond of every vCPU (and of
//! every pCPU) is charged to exactly one cause. The engine keeps the charge in
//! arrays indexed by the constants here; the record carries them by name
//! (`sim.vcpu_time_ns`, `sim.native_time_ns`, `sim.pcpu_time_ns`), and
//! [`format_breakdown`] turns a record into the table `diagnose --executor sim`
//! prints beside its remove-one-factor table.
//!
//! Because the parts of a VM sum to `wall × vCPUs` and the parts of its
//! bare-metal reference to `native wall × cores`, the per-cause differences
//! (each divided by its vCPU or core count) sum to the slowdown exactly: the
//! remainder of a factor analysis is always named by cause here.

use smplab_record::RunRecord;
use std::collections::BTreeMap;
use std::fmt::Write as _;

// Causes that can be carried as a pending cost (folded into the next segment
// or paid as overhead) come first: indices below `CARRIED`.
pub const USER_SYNC: usize = 0;
pub const KERNEL_SCHED: usize = 1;
pub const KERNEL_FUTEX: usize = 2;
pub const KERNEL_IPI_SEND: usize = 3;
pub const KERNEL_IPI_HANDLER: usize = 4;
pub const KERNEL_SHOOTDOWN_HANDLER: usize = 5;
pub const EXIT_HLT: usize = 6;
pub const EXIT_APIC_ICR: usize = 7;
pub const EXIT_APIC_EOI: usize = 8;
pub const EXIT_PLE: usize = 9;
pub const EXIT_SDB: usize = 10;
pub const EXIT_IO: usize = 11;
pub const WAKE_LATENCY: usize = 12;
pub const DEVICE_WAIT: usize = 13;
pub const CACHE_REFILL: usize = 14;
pub const CACHE_LINE_TRANSFER: usize = 15;
pub const HOST_SWITCH: usize = 16;
/// Number of causes that can be carried as pending costs.
pub const CARRIED: usize = 17;
pub const USER: usize = 17;
pub const SPIN_LOCK: usize = 18;
pub const SPIN_MUTEX: usize = 19;
pub const SPIN_BARRIER: usize = 20;
pub const SPIN_SHOOTDOWN: usize = 21;
pub const IDLE_POLL: usize = 22;
pub const IDLE_HALTED: usize = 23;
pub const HALT_POLL: usize = 24;
pub const SPIN_YIELD: usize = 25;
pub const STEAL: usize = 26;
/// Guest kernel: device (`io`) interrupt handlers.
pub const KERNEL_IO_HANDLER: usize = 27;
/// Time the engine could not attribute; a test asserts it stays zero.
pub const UNATTRIBUTED: usize = 28;
pub const N: usize = 29;

/// Record keys, in index order.
pub const NAMES: [&str; N] = [
    "user_sync",
    "kernel_sched",
    "kernel_futex",
    "kernel_ipi_send",
    "kernel_ipi_handler",
    "kernel_shootdown_handler",
    "exit_hlt",
    "exit_apic_icr",
    "exit_apic_eoi",
    "exit_ple",
    "exit_sdb",
    "exit_io",
    "wake_latency",
    "device_wait",
    "cache_refill",
    "cache_line_transfer",
    "host_switch",
    "user",
    "spin_lock",
    "spin_mutex",
    "spin_barrier",
    "spin_shootdown",
    "idle_poll",
    "idle_halted",
    "halt_poll",
    "spin_yield",
    "steal",
    "kernel_io_handler",
    "unattributed",
];

/// What each cause means, for a reader of the table.
pub const DESCRIPTIONS: [&str; N] = [
    "guest user: atomics and uncontended lock/queue operations",
    "guest kernel: scheduler (context switches, yields)",
    "guest kernel: futex wakeups",
    "guest kernel: IPI sends (bare metal)",
    "guest kernel: IPI receipt and handler (bare metal, or with APICv)",
    "guest kernel: TLB-shootdown handlers (local flush included)",
    "exit: HLT",
    "exit: APIC ICR write (IPI send)",
    "exit: APIC EOI / interrupt injection (IPI receipt)",
    "exit: pause-loop exiting",
    "exit: spin detection buffer",
    "exit: device emulation (user-space round trip and service)",
    "block-to-wake latency of an idle (halted or polling) vCPU or core",
    "waiting for serialized device emulation",
    "cache refill after a placement change",
    "cache-line transfer on a lock or barrier hand-off, or of lines a co-writer wrote",
    "host: vCPU switch on the pCPU",
    "guest user work",
    "spin waste: user spin locks",
    "spin waste: adaptive mutexes' spin phase",
    "spin waste: user barriers",
    "spin waste: kernel, waiting for shootdown acks",
    "guest kernel: idle loop polling",
    "idle: halted with nothing to run",
    "idle: host halt-polling (bare metal: the idle governor's poll)",
    "runnable after a PLE/SDB yield (directed-yield steal)",
    "steal: runnable but not running",
    "guest kernel: device interrupt handlers (wake the I/O waiter)",
    "unattributed (a bug if non-zero)",
];

/// Index of a cause by its record key.
pub fn index(name: &str) -> Option<usize> {
    NAMES.iter().position(|n| *n == name)
}

/// Convert an engine array to the record's map (zero entries left out).
pub(crate) fn to_map(a: &[u64; N]) -> BTreeMap<String, u64> {
    NAMES
        .iter()
        .zip(a)
        .filter(|(_, &v)| v > 0)
        .map(|(k, &v)| (k.to_string(), v))
        .collect()
}

/// One row of the slowdown breakdown.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub cause: &'static str,
    /// Mean per-vCPU time of the VM in this cause, ns.
    pub vm_ns: f64,
    /// Mean per-core time of the bare-metal reference in this cause, ns.
    pub native_ns: f64,
}

impl Row {
    /// Contribution to the wall-time difference (VM minus bare metal), ns.
    pub fn delta_ns(&self) -> f64 {
        self.vm_ns - self.native_ns
    }
}

/// The breakdown of a sim record: per cause, the mean per-vCPU time in the VM
/// and the mean per-core time of its bare-metal reference. The deltas sum to
/// `wall_ns - native_wall_ns` (exactly, up to rounding of the means). None if
/// the record is not a sim record with accounting.
pub fn rows(r: &RunRecord) -> Option<Vec<Row>> {
    let s = r.sim.as_ref()?;
    if s.vcpu_time_ns.is_empty() {
        return None;
    }
    let vcpus = f64::from(s.vcpus.max(1));
    let cores = f64::from(s.native_cores.max(1));
    let mut out: Vec<Row> = NAMES
        .iter()
        .map(|&name| Row {
            cause: name,
            vm_ns: s.vcpu_time_ns.get(name).copied().unwrap_or(0) as f64 / vcpus,
            native_ns: s.native_time_ns.get(name).copied().unwrap_or(0) as f64 / cores,
        })
        .filter(|row| row.vm_ns > 0.0 || row.native_ns > 0.0)
        .collect();
    out.sort_by(|a, b| b.delta_ns().abs().total_cmp(&a.delta_ns().abs()));
    Some(out)
}

/// The table `diagnose --executor sim` prints: where the VM's wall time went,
/// per cause, against bare metal, and each cause's share of the slowdown.
/// `None` if the record carries no accounting (not a sim record, or the
/// bare-metal reference was not run).
pub fn format_breakdown(r: &RunRecord) -> Option<String> {
    let s = r.sim.as_ref()?;
    let native = s.native_wall_ns?;
    let rows = rows(r)?;
    let wall = r.timing.wall_ns as f64;
    let diff = wall - native as f64;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "where the time went (sim accounting, per vCPU; bare metal per core): wall {:.3} ms vs {:.3} ms bare metal, {:+.1}%",
        wall / 1e6,
        native as f64 / 1e6,
        if native > 0 { 100.0 * diff / native as f64 } else { 0.0 }
    );
    let _ = writeln!(
        t,
        "{:<26} {:>12} {:>12} {:>12} {:>9}  meaning",
        "cause", "VM ms", "native ms", "delta ms", "of diff"
    );
    for row in &rows {
        let share = if diff.abs() > 0.0 {
            format!("{:+.1}%", 100.0 * row.delta_ns() / diff)
        } else {
            "-".into()
        };
        let desc = index(row.cause).map(|i| DESCRIPTIONS[i]).unwrap_or("");
        let _ = writeln!(
            t,
            "{:<26} {:>12.3} {:>12.3} {:>+12.3} {:>9}  {}",
            row.cause,
            row.vm_ns / 1e6,
            row.native_ns / 1e6,
            row.delta_ns() / 1e6,
            share,
            desc
        );
    }
    let sum: f64 = rows.iter().map(Row::delta_ns).sum();
    let _ = writeln!(
        t,
        "{:<26} {:>12} {:>12} {:>+12.3} {:>9}",
        "total",
        "",
        "",
        sum / 1e6,
        if diff.abs() > 0.0 {
            format!("{:+.1}%", 100.0 * sum / diff)
        } else {
            "-".into()
        }
    );
    Some(t)
}

/// A cause id as the byte the engine's accounting state stores.
///
/// Every id above is a small constant, so the assert (evaluated at compile
/// time for constants) proves the cast below never truncates.
pub(crate) const fn id8(cause: usize) -> u8 {
    assert!(cause <= u8::MAX as usize, "cause ids fit in a byte");
    #[allow(clippy::cast_possible_truncation)]
    let id = cause as u8;
    id
}
