//! A human-readable summary of a record, the default output of every `smplab`
//! command that runs something (`--json` prints the record itself).

use crate::{Outcome, RunRecord};
use std::fmt::Write;

/// Format nanoseconds with a unit a person reads at a glance.
pub fn fmt_ns(ns: u64) -> String {
    let ns_f = ns as f64;
    if ns < 10_000 {
        format!("{ns} ns")
    } else if ns < 10_000_000 {
        format!("{:.1} µs", ns_f / 1e3)
    } else if ns < 10_000_000_000 {
        format!("{:.1} ms", ns_f / 1e6)
    } else {
        format!("{:.2} s", ns_f / 1e9)
    }
}

/// A real program's run: its exit, output, CPUs and the guest's boot.
fn write_program(s: &mut String, l: &crate::linux::LinuxSection) {
    let _ = write!(
        s,
        "  program: exit status {}, {} bytes of output",
        l.exit.shell_status(),
        l.output_bytes
    );
    if let Some(c) = l.cpus_online {
        let _ = write!(s, ", {c} CPUs online");
    }
    if let Some(b) = l.boot_to_init_ns {
        let _ = write!(s, ", boot to init {}", fmt_ns(b));
    }
    let _ = writeln!(s);
}

impl RunRecord {
    /// Multi-line summary: what ran, how long, what it did.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        self.write_what_ran(&mut s);
        self.write_timing(&mut s);
        match &self.linux {
            // A real program: no model ops or counters, its run instead.
            Some(l) => write_program(&mut s, l),
            None => self.write_counters(&mut s),
        }
        self.write_executor_details(&mut s);
        s
    }

    /// The workload, the executor, the config and a failure if there was one.
    fn write_what_ran(&self, s: &mut String) {
        let w = &self.workload;
        match w.program_argv() {
            Some(argv) => {
                let _ = writeln!(s, "{} on {}: a real program", argv.join(" "), self.executor);
            }
            None => {
                let _ = writeln!(
                    s,
                    "{} on {}: n={}, {} threads",
                    w.name, self.executor, w.n, w.threads
                );
            }
        }
        if !self.config.is_empty() {
            let cfg: Vec<String> = self
                .config
                .iter()
                .map(|(k, v)| match v {
                    serde_json::Value::String(t) => format!("{k}={t}"),
                    other => format!("{k}={other}"),
                })
                .collect();
            let _ = writeln!(s, "  config: {}", cfg.join(" "));
        }
        if let Outcome::Failed { reason } = &self.outcome {
            let _ = writeln!(s, "  FAILED: {reason}");
        }
    }

    /// Wall and CPU time, and a note when the start gate did not settle.
    fn write_timing(&self, s: &mut String) {
        // A stored record is user input: saturate rather than overflow.
        let cpu = (self.timing.threads.iter().map(|t| t.cpu_ns)).fold(0u64, u64::saturating_add);
        let _ = write!(s, "  wall {}", fmt_ns(self.timing.wall_ns));
        if let Some(total) = self.timing.total_ns {
            let _ = write!(s, " (whole run {})", fmt_ns(total));
        }
        let _ = writeln!(s, ", thread CPU {}", fmt_ns(cpu));
        if let Some(warning) = self.host.platform.timing_warning() {
            let _ = writeln!(s, "  warning: {warning}");
        }
        let settle = self.timing.window.as_ref().and_then(|w| w.settle);
        if let Some(crate::window::Settle {
            outcome: crate::window::SettleOutcome::Unsettled,
            ns,
        }) = settle
        {
            let _ = writeln!(
                s,
                "  note: the threads were not all running on their own CPUs after {} at the start gate (a busy host?); they started anyway",
                fmt_ns(ns)
            );
        }
    }

    /// The op counts and the scheduling counters every executor fills in.
    fn write_counters(&self, s: &mut String) {
        let c = &self.counters;
        let ops: Vec<String> = c
            .ops
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let _ = writeln!(s, "  ops: {}", ops.join(" "));
        let _ = writeln!(
            s,
            "  spin iterations {}, blocks {}, wakeups {}, context switches {} voluntary / {} involuntary",
            c.spin_iterations,
            c.blocks,
            c.wakeups,
            c.context_switches_voluntary,
            c.context_switches_involuntary
        );
    }

    /// What only some executors record: I/O, the guest kernel, the VMM, the
    /// simulator.
    fn write_executor_details(&self, s: &mut String) {
        if let Some(io) = &self.io {
            let us = |ns: u64| ns as f64 / 1e3;
            let _ = writeln!(
                s,
                "  io: {} requests; completion → handler p50 {:.1} µs p99 {:.1} µs; → waiter running p50 {:.1} µs p99 {:.1} µs; interrupts per CPU {:?}",
                io.requests,
                us(io.irq_latency.p50_ns),
                us(io.irq_latency.p99_ns),
                us(io.wake_latency.p50_ns),
                us(io.wake_latency.p99_ns),
                io.irqs_per_cpu
            );
        }
        if let Some(g) = &self.guest {
            let _ = writeln!(
                s,
                "  guest: {} vCPUs, idle={}, IPIs sent {} received {}, halts {}, wakeups {}",
                g.vcpus, g.idle, g.ipis_sent, g.ipis_received, g.halts, g.wakeups
            );
        }
        if let Some(v) = &self.vmm {
            let mut total = std::collections::BTreeMap::<&str, u64>::new();
            for per in &v.exits_per_vcpu {
                for (k, n) in per {
                    *total.entry(k).or_default() += n;
                }
            }
            let exits: Vec<String> = total.iter().map(|(k, n)| format!("{k}={n}")).collect();
            let _ = writeln!(
                s,
                "  vmm: sync={}, {} vCPUs, exits {}",
                v.sync,
                v.vcpus,
                exits.join(" ")
            );
        }
        if let Some(m) = &self.sim {
            let _ = write!(
                s,
                "  sim: {} {} pcpus={} vm {}/{}, spin {}, idle {}, steal {}",
                m.platform,
                m.policy,
                m.pcpus,
                m.vm_index + 1,
                m.vms,
                fmt_ns(m.spin_ns),
                fmt_ns(m.idle_ns),
                fmt_ns(m.steal_ns)
            );
            if let Some(nat) = m.native_wall_ns {
                if nat > 0 {
                    let _ = write!(
                        s,
                        ", slowdown vs native {:.2}x",
                        self.timing.wall_ns as f64 / nat as f64
                    );
                }
            }
            let _ = writeln!(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(fmt_ns(999), "999 ns");
        assert_eq!(fmt_ns(12_345), "12.3 µs");
        assert_eq!(fmt_ns(12_345_678), "12.3 ms");
        assert_eq!(fmt_ns(12_345_678_901), "12.35 s");
    }
}
