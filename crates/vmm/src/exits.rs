//! The one table of exit reasons: every return of KVM_RUN is counted under
//! exactly one [`ExitReason`], and [`ExitReason::name`] is the only place the
//! names in the record (`vmm.exits_per_vcpu`) come from.

use std::collections::BTreeMap;

/// Why KVM_RUN returned to user space, as smplab-vmm counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExitReason {
    IoIn,
    IoOut,
    MmioRead,
    MmioWrite,
    Hlt,
    IrqWindowOpen,
    /// KVM_RUN returned EINTR: a kick (signal or `immediate_exit`).
    Intr,
    /// PVM: an AP not yet started by INIT/SIPI returns EAGAIN.
    Eagain,
    Shutdown,
    InternalError,
    FailEntry,
    SystemEvent,
    MemoryFault,
    /// Any exit smplab-vmm does not handle by name.
    Other,
}

impl ExitReason {
    /// Every reason, in counter order (the index of a reason is its position here).
    pub const ALL: [ExitReason; 14] = [
        ExitReason::IoIn,
        ExitReason::IoOut,
        ExitReason::MmioRead,
        ExitReason::MmioWrite,
        ExitReason::Hlt,
        ExitReason::IrqWindowOpen,
        ExitReason::Intr,
        ExitReason::Eagain,
        ExitReason::Shutdown,
        ExitReason::InternalError,
        ExitReason::FailEntry,
        ExitReason::SystemEvent,
        ExitReason::MemoryFault,
        ExitReason::Other,
    ];

    /// The number of reasons.
    pub const COUNT: usize = Self::ALL.len();

    /// The name used in the record.
    pub fn name(self) -> &'static str {
        match self {
            ExitReason::IoIn => "io_in",
            ExitReason::IoOut => "io_out",
            ExitReason::MmioRead => "mmio_read",
            ExitReason::MmioWrite => "mmio_write",
            ExitReason::Hlt => "hlt",
            ExitReason::IrqWindowOpen => "irq_window_open",
            ExitReason::Intr => "intr",
            ExitReason::Eagain => "eagain",
            ExitReason::Shutdown => "shutdown",
            ExitReason::InternalError => "internal_error",
            ExitReason::FailEntry => "fail_entry",
            ExitReason::SystemEvent => "system_event",
            ExitReason::MemoryFault => "memory_fault",
            ExitReason::Other => "other",
        }
    }

    /// The reason a record name stands for.
    pub fn from_name(name: &str) -> Option<ExitReason> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Position in [`ExitReason::ALL`] (the discriminant, declared in that order).
    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Exits of one vCPU, one counter per [`ExitReason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitCounts([u64; ExitReason::COUNT]);

impl ExitCounts {
    pub fn count(&mut self, reason: ExitReason) {
        let counter = &mut self.0[reason.index()];
        *counter = counter.saturating_add(1);
    }

    pub fn get(&self, reason: ExitReason) -> u64 {
        self.0[reason.index()]
    }

    /// All exits of this vCPU.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |sum, n| sum.saturating_add(*n))
    }

    /// The record form: reason name -> count, leaving out reasons never seen.
    pub fn to_record(&self) -> BTreeMap<String, u64> {
        ExitReason::ALL
            .iter()
            .zip(self.0)
            .filter(|(_, n)| *n > 0)
            .map(|(reason, n)| (reason.name().to_string(), n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn every_reason_has_one_distinct_name_and_its_own_counter() {
        let names: BTreeSet<&str> = ExitReason::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), ExitReason::COUNT, "names must be distinct");
        for (i, reason) in ExitReason::ALL.into_iter().enumerate() {
            assert_eq!(reason.index(), i, "{reason} is out of table order");
            assert_eq!(ExitReason::from_name(reason.name()), Some(reason));
            let mut counts = ExitCounts::default();
            counts.count(reason);
            assert_eq!(counts.get(reason), 1);
            assert_eq!(counts.total(), 1);
            assert_eq!(
                counts.to_record().keys().collect::<Vec<_>>(),
                [reason.name()]
            );
        }
        assert_eq!(ExitReason::from_name("vmcall"), None);
    }

    #[test]
    fn record_counts_sum_to_the_total() {
        let mut counts = ExitCounts::default();
        for (i, reason) in ExitReason::ALL.into_iter().enumerate() {
            for _ in 0..(i * 7 % 5) {
                counts.count(reason);
            }
        }
        let record = counts.to_record();
        assert_eq!(record.values().sum::<u64>(), counts.total());
        assert!(record.values().all(|&n| n > 0), "zero counts are left out");
        assert!(counts.total() > 0);
    }
}
