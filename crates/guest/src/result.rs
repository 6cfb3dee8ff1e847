//! The guest's result record: a text stream, one `key value...` item per line,
//! written by `kernel/result.c` (`emit_result`) to port 0x520 (smplab-vmm) or
//! framed on the UART between `SMPLAB-RESULT-BEGIN` and `SMPLAB-RESULT-END`
//! lines (QEMU). This module is its only parser. Format (version 1):
//!
//! ```text
//! smplab-guest-result 1
//! tsc_hz HZ
//! cpus N
//! idle POLICY
//! timer_hz HZ
//! lapic_hz HZ
//! boot_tsc TSC                      # TSC when the kernel was entered
//! gate SPAWNED ARRIVED RELEASE RELEASE_TICKS DONE DONE_TICKS REPLY
//!                                   # start gate: TSC of the last spawn, of the last
//!                                   # arrival, of the release; ticks (all vCPUs) at
//!                                   # release; TSC and ticks when the last worker
//!                                   # ended; the window port's answer (0x21204f47
//!                                   # "GO !" from smplab-vmm, 4294967295 = no such port)
//! settle TSC OUTCOME                # the releaser watching the waiters settle on their own
//!                                   # vCPUs before "ready": cycles, 0 skipped (more workers
//!                                   # than vCPUs), 1 settled, 2 gave up (absent from older
//!                                   # guests)
//! thread GROUP INDEX START_TSC END_TSC CPU_TSC SPINS BLOCKS WAKEUPS CSW_VOL CSW_INVOL
//! ops C0 ... C13                    # in smplab_workload::program::counter_names::ALL order
//!                                   # (13 numbers from guests before `io`: io = 0)
//! cpu ID IPIS_SENT IPIS_RECEIVED HALTS WAKEUPS CONTEXT_SWITCHES IDLE_TSC TICKS SYSCALLS
//! window_idle T0 T1 ...             # per vCPU, TSC cycles idle inside the workload window
//!                                   # (release to the last worker's end): halted under
//!                                   # `hlt`, in the CPL3 idle thread under poll/haltpoll
//!                                   # (absent from older guests)
//! io_irqs N0 N1 ...                 # block-device interrupts that found a completion, per
//!                                   # vCPU (io programs only)
//! io_spurious N0 N1 ...             # block-device interrupts that found none, per vCPU
//! io_samples TOTAL                  # io ops that reported latencies
//! io_lat IRQ WAKE                   # one per sample, the last 16384: TSC cycles from the
//!                                   # request's completion to the handler's entry, and to
//!                                   # the thread running again
//! end
//! ```

use smplab_record::guest::{GuestSection, GuestVcpuCounters};
use smplab_record::io::IoSection;
use smplab_record::window::{Settle, SettleOutcome};
use smplab_record::LatencyHistogram;
use smplab_record::{RunRecord, ThreadTiming};
use smplab_workload::program::counter_names;
use smplab_workload::Program;

/// Marker lines around the record on the serial console.
pub const SERIAL_BEGIN: &str = "SMPLAB-RESULT-BEGIN";
pub const SERIAL_END: &str = "SMPLAB-RESULT-END";

/// Why a result stream could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResultError {
    #[error("the guest wrote no result record (is the guest kernel the one embedded in this smplab build?)")]
    Empty,
    #[error("the guest result record is not UTF-8 text")]
    NotText,
    #[error("the guest result record has an unknown header {0:?}; the guest kernel and smplab versions differ, rebuild smplab")]
    BadHeader(String),
    #[error("the guest result record is malformed at line {line}: {reason}")]
    Malformed { line: usize, reason: String },
    #[error(
        "the guest result record is truncated (no `end` line); the guest stopped while writing it"
    )]
    Truncated,
    #[error("the serial console holds no framed result record ({SERIAL_BEGIN} ... {SERIAL_END})")]
    NoSerialFrame,
    #[error("the guest's result record is corrupt: {0}; the guest kernel misbehaved or its memory was overwritten, so this run's numbers cannot be trusted")]
    Corrupt(String),
}

/// The guest's start gate and workload window, in guest TSC cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestGate {
    /// Just before the last workload thread became runnable.
    pub last_spawn_tsc: u64,
    /// The last worker arrived at the gate.
    pub all_arrived_tsc: u64,
    /// The gate released the workers.
    pub release_tsc: u64,
    /// Timer ticks of all vCPUs at the release.
    pub release_ticks: u64,
    /// The last worker ended (kernel side).
    pub done_tsc: u64,
    pub done_ticks: u64,
    /// What the window port answered (`0x21204f47`, "GO !" from smplab-vmm;
    /// all-ones = no such port, as under QEMU).
    pub vmm_reply: u64,
}

/// One workload thread as the guest measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestThread {
    pub group: u32,
    pub index: u32,
    pub start_tsc: u64,
    pub end_tsc: u64,
    pub cpu_tsc: u64,
    pub spins: u64,
    pub blocks: u64,
    pub wakeups: u64,
    pub csw_voluntary: u64,
    pub csw_involuntary: u64,
}

/// One vCPU's kernel counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GuestCpu {
    pub id: u32,
    pub ipis_sent: u64,
    pub ipis_received: u64,
    pub halts: u64,
    pub wakeups: u64,
    pub context_switches: u64,
    pub idle_tsc: u64,
    pub ticks: u64,
    pub syscalls: u64,
}

/// A parsed guest result record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GuestResult {
    pub tsc_hz: u64,
    pub cpus: u32,
    pub idle: String,
    pub timer_hz: u32,
    pub lapic_hz: u64,
    pub boot_tsc: u64,
    /// Absent from guests older than the start gate.
    pub gate: Option<GuestGate>,
    pub threads: Vec<GuestThread>,
    pub ops: [u64; counter_names::COUNT],
    pub vcpus: Vec<GuestCpu>,
    /// Block-device interrupts per vCPU that found a completion (empty: the
    /// program has no `io` ops).
    pub io_irqs: Vec<u64>,
    /// Block-device interrupts per vCPU that found none.
    pub io_spurious: Vec<u64>,
    /// The settling before the gate opened (`None`: an older guest).
    pub settle: Option<(u64, SettleOutcome)>,
    /// Per vCPU, TSC cycles idle inside the workload window (`None`: a
    /// guest from before the `window_idle` line).
    pub window_idle_tsc: Option<Vec<u64>>,
    /// `io` ops that reported latencies (may exceed `io_latency.len()`).
    pub io_samples: u64,
    /// (completion → handler entry, completion → thread running), TSC cycles.
    pub io_latency: Vec<(u64, u64)>,
}

/// Extract the framed record from serial console bytes; returns the record and
/// the console text with the frame removed.
pub fn split_serial(console: &[u8]) -> Result<(Vec<u8>, Vec<u8>), ResultError> {
    let text = String::from_utf8_lossy(console);
    let begin = text.find(SERIAL_BEGIN).ok_or(ResultError::NoSerialFrame)?;
    let body_start = begin + SERIAL_BEGIN.len();
    let end_rel = text[body_start..]
        .find(SERIAL_END)
        .ok_or(ResultError::Truncated)?;
    let body = text[body_start..body_start + end_rel].trim_start_matches(['\r', '\n']);
    let body: String = body.chars().filter(|&c| c != '\r').collect();
    let mut rest = text[..begin].to_string();
    rest.push_str(&text[body_start + end_rel + SERIAL_END.len()..]);
    Ok((body.into_bytes(), rest.into_bytes()))
}

fn nums<const N: usize>(line: usize, fields: &[&str]) -> Result<[u64; N], ResultError> {
    if fields.len() != N {
        return Err(ResultError::Malformed {
            line,
            reason: format!("expected {N} numbers, found {}", fields.len()),
        });
    }
    let mut out = [0u64; N];
    for (o, f) in out.iter_mut().zip(fields) {
        *o = f.parse().map_err(|_| ResultError::Malformed {
            line,
            reason: format!("{f:?} is not a number"),
        })?;
    }
    Ok(out)
}

fn num_list(line: usize, fields: &[&str]) -> Result<Vec<u64>, ResultError> {
    fields
        .iter()
        .map(|w| nums::<1>(line, &[*w]).map(|v| v[0]))
        .collect()
}

fn narrow(line: usize, v: u64) -> Result<u32, ResultError> {
    u32::try_from(v).map_err(|_| ResultError::Malformed {
        line,
        reason: format!("{v} does not fit in 32 bits"),
    })
}

/// Parse the bytes the guest wrote.
pub fn parse(bytes: &[u8]) -> Result<GuestResult, ResultError> {
    if bytes.is_empty() {
        return Err(ResultError::Empty);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| ResultError::NotText)?;
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, "smplab-guest-result 1")) => {}
        Some((_, other)) => return Err(ResultError::BadHeader(other.to_string())),
        None => return Err(ResultError::Empty),
    }
    let mut r = GuestResult::default();
    let mut ended = false;
    for (i, line) in lines {
        let n = i + 1;
        let mut words = line.split_whitespace();
        let Some(key) = words.next() else { continue };
        let rest: Vec<&str> = words.collect();
        if key == "end" {
            ended = true;
            break;
        }
        read_line(&mut r, n, key, &rest)?;
    }
    if !ended {
        return Err(ResultError::Truncated);
    }
    if r.tsc_hz == 0 {
        return Err(ResultError::Malformed {
            line: 2,
            reason: "tsc_hz is missing or zero".into(),
        });
    }
    Ok(r)
}

/// Read one line of the record, `key` and its words `rest`, into `r`; `n`
/// is its line number for messages.
fn read_line(r: &mut GuestResult, n: usize, key: &str, rest: &[&str]) -> Result<(), ResultError> {
    match key {
        "tsc_hz" => r.tsc_hz = nums::<1>(n, rest)?[0],
        "cpus" => r.cpus = narrow(n, nums::<1>(n, rest)?[0])?,
        "idle" => r.idle = rest.join(" "),
        "timer_hz" => r.timer_hz = narrow(n, nums::<1>(n, rest)?[0])?,
        "lapic_hz" => r.lapic_hz = nums::<1>(n, rest)?[0],
        "boot_tsc" => r.boot_tsc = nums::<1>(n, rest)?[0],
        "gate" => {
            let v = nums::<7>(n, rest)?;
            r.gate = Some(GuestGate {
                last_spawn_tsc: v[0],
                all_arrived_tsc: v[1],
                release_tsc: v[2],
                release_ticks: v[3],
                done_tsc: v[4],
                done_ticks: v[5],
                vmm_reply: v[6],
            });
        }
        "thread" => {
            let v = nums::<10>(n, rest)?;
            r.threads.push(GuestThread {
                group: narrow(n, v[0])?,
                index: narrow(n, v[1])?,
                start_tsc: v[2],
                end_tsc: v[3],
                cpu_tsc: v[4],
                spins: v[5],
                blocks: v[6],
                wakeups: v[7],
                csw_voluntary: v[8],
                csw_involuntary: v[9],
            });
        }
        "ops" if rest.len() == 13 => {
            // A guest from before `io`: the 14th counter is 0.
            r.ops[..13].copy_from_slice(&nums::<13>(n, rest)?);
        }
        "ops" => r.ops = nums::<{ counter_names::COUNT }>(n, rest)?,
        "io_irqs" => r.io_irqs = num_list(n, rest)?,
        "io_spurious" => r.io_spurious = num_list(n, rest)?,
        "window_idle" => r.window_idle_tsc = Some(num_list(n, rest)?),
        "settle" => {
            let v = nums::<2>(n, rest)?;
            let outcome = match v[1] {
                0 => SettleOutcome::Skipped,
                1 => SettleOutcome::Settled,
                2 => SettleOutcome::Unsettled,
                o => {
                    return Err(ResultError::Malformed {
                        line: n,
                        reason: format!("settle outcome {o} (want 0, 1 or 2)"),
                    })
                }
            };
            r.settle = Some((v[0], outcome));
        }
        "io_samples" => r.io_samples = nums::<1>(n, rest)?[0],
        "io_lat" => {
            let v = nums::<2>(n, rest)?;
            r.io_latency.push((v[0], v[1]));
        }
        "cpu" => {
            let v = nums::<9>(n, rest)?;
            r.vcpus.push(GuestCpu {
                id: narrow(n, v[0])?,
                ipis_sent: v[1],
                ipis_received: v[2],
                halts: v[3],
                wakeups: v[4],
                context_switches: v[5],
                idle_tsc: v[6],
                ticks: v[7],
                syscalls: v[8],
            });
        }
        // Unknown keys are skipped so a newer guest can add lines.
        _ => {}
    }
    Ok(())
}

/// Sum guest-supplied numbers, refusing a total that overflows: no real run
/// comes near 2^64 events, so an overflow means the record is corrupt.
fn checked_sum(what: &str, values: impl IntoIterator<Item = u64>) -> Result<u64, ResultError> {
    values
        .into_iter()
        .try_fold(0u64, |acc, v| acc.checked_add(v))
        .ok_or_else(|| ResultError::Corrupt(format!("the {what} overflow 64 bits when summed")))
}

impl GuestResult {
    /// TSC cycles to nanoseconds with this run's TSC frequency.
    pub fn ns(&self, cycles: u64) -> u64 {
        let hz = self.tsc_hz.max(1) as u128;
        u64::try_from(u128::from(cycles) * 1_000_000_000u128 / hz).unwrap_or(u64::MAX)
    }

    /// Check what cannot be true of a real run: a thread ending before it
    /// started, counters whose totals overflow.
    pub fn validate(&self) -> Result<(), ResultError> {
        for t in &self.threads {
            if t.end_tsc < t.start_tsc {
                return Err(ResultError::Corrupt(format!(
                    "thread {}/{} ends (TSC {}) before it starts (TSC {})",
                    t.group, t.index, t.end_tsc, t.start_tsc
                )));
            }
        }
        let threads = &self.threads;
        let cpus = &self.vcpus;
        checked_sum("thread spin counts", threads.iter().map(|t| t.spins))?;
        checked_sum("thread block counts", threads.iter().map(|t| t.blocks))?;
        checked_sum("thread wakeup counts", threads.iter().map(|t| t.wakeups))?;
        checked_sum(
            "voluntary switches",
            threads.iter().map(|t| t.csw_voluntary),
        )?;
        checked_sum(
            "involuntary switches",
            threads.iter().map(|t| t.csw_involuntary),
        )?;
        checked_sum("IPIs sent", cpus.iter().map(|c| c.ipis_sent))?;
        checked_sum("IPIs received", cpus.iter().map(|c| c.ipis_received))?;
        checked_sum("halts", cpus.iter().map(|c| c.halts))?;
        checked_sum("vCPU wakeups", cpus.iter().map(|c| c.wakeups))?;
        checked_sum("context switches", cpus.iter().map(|c| c.context_switches))?;
        checked_sum("timer ticks", cpus.iter().map(|c| c.ticks))?;
        checked_sum("io interrupts", self.io_irqs.iter().copied())?;
        if let Some(g) = &self.gate {
            if g.done_ticks < g.release_ticks {
                return Err(ResultError::Corrupt(format!(
                    "timer ticks went down over the workload ({} at release, {} at the end)",
                    g.release_ticks, g.done_ticks
                )));
            }
        }
        Ok(())
    }

    /// Workload wall time: the first worker's start (its first TSC read after
    /// the start gate released it) to the last worker's end.
    pub fn wall_ns(&self) -> u64 {
        let start = self.threads.iter().map(|t| t.start_tsc).min().unwrap_or(0);
        let end = self.threads.iter().map(|t| t.end_tsc).max().unwrap_or(0);
        self.ns(end.saturating_sub(start))
    }

    /// The settling before the gate opened, in ns.
    pub fn settle(&self) -> Option<Settle> {
        self.settle.map(|(tsc, outcome)| Settle {
            outcome,
            ns: self.ns(tsc),
        })
    }

    /// The workload window on the guest's TSC clock (ns since the TSC was 0):
    /// all workers existed, the gate released them, the last one ended.
    pub fn tsc_window(&self) -> Option<smplab_record::WorkloadWindow> {
        let g = self.gate?;
        let end = self.threads.iter().map(|t| t.end_tsc).max()?;
        Some(smplab_record::WorkloadWindow {
            clock: smplab_record::WindowClock::GuestTsc,
            threads_ready_ns: self.ns(g.all_arrived_tsc),
            start_ns: self.ns(g.release_tsc),
            end_ns: self.ns(end),
            start_gate: None,
            settle: self.settle(),
        })
    }

    /// The record's `io` section: interrupt and wake latencies and the
    /// per-vCPU interrupt counts as the guest measured them; requests and
    /// device latencies come from the VMM's device (`None` under QEMU).
    /// `None` when the guest ran no `io` program.
    pub fn io_section(&self, device: Option<(u64, LatencyHistogram)>) -> Option<IoSection> {
        if self.io_irqs.is_empty() {
            return None;
        }
        let irq: Vec<u64> = self.io_latency.iter().map(|l| self.ns(l.0)).collect();
        let wake: Vec<u64> = self.io_latency.iter().map(|l| self.ns(l.1)).collect();
        let (requests, device_latency) = device.unwrap_or((self.io_samples, Default::default()));
        Some(IoSection {
            requests,
            irq_latency: LatencyHistogram::from_samples(&irq),
            wake_latency: LatencyHistogram::from_samples(&wake),
            device_latency,
            irqs_per_cpu: self.io_irqs.clone(),
        })
    }

    /// Per-operation counts keyed like `RunRecord::counters.ops`.
    pub fn ops_map(&self) -> std::collections::BTreeMap<String, u64> {
        counter_names::ALL
            .iter()
            .enumerate()
            .map(|(i, k)| (k.to_string(), self.ops.get(i).copied().unwrap_or(0)))
            .collect()
    }

    /// The guest section of the record.
    pub fn section(&self) -> Result<GuestSection, ResultError> {
        self.validate()?;
        let first_start = self
            .threads
            .iter()
            .map(|t| t.start_tsc)
            .min()
            .unwrap_or(self.boot_tsc);
        let since_boot = |tsc: u64| self.ns(tsc.saturating_sub(self.boot_tsc));
        let cpus = &self.vcpus;
        Ok(GuestSection {
            vcpus: self.cpus,
            idle: self.idle.clone(),
            ipis_sent: checked_sum("IPIs sent", cpus.iter().map(|c| c.ipis_sent))?,
            ipis_received: checked_sum("IPIs received", cpus.iter().map(|c| c.ipis_received))?,
            halts: checked_sum("halts", cpus.iter().map(|c| c.halts))?,
            wakeups: checked_sum("vCPU wakeups", cpus.iter().map(|c| c.wakeups))?,
            context_switches: checked_sum(
                "context switches",
                cpus.iter().map(|c| c.context_switches),
            )?,
            boot_ns: since_boot(first_start),
            idle_ns_per_vcpu: cpus.iter().map(|c| self.ns(c.idle_tsc)).collect(),
            window_idle_ns_per_vcpu: self
                .window_idle_tsc
                .iter()
                .flatten()
                .map(|&t| self.ns(t))
                .collect(),
            tsc_hz: self.tsc_hz,
            timer_hz: self.timer_hz,
            lapic_hz: self.lapic_hz,
            timer_ticks: checked_sum("timer ticks", cpus.iter().map(|c| c.ticks))?,
            window_timer_ticks: self
                .gate
                .map(|g| g.done_ticks.saturating_sub(g.release_ticks))
                .unwrap_or(0),
            threads_created_ns: self.gate.map(|g| since_boot(g.last_spawn_tsc)).unwrap_or(0),
            release_ns: self.gate.map(|g| since_boot(g.release_tsc)).unwrap_or(0),
            per_vcpu: cpus
                .iter()
                .map(|c| GuestVcpuCounters {
                    ipis_sent: c.ipis_sent,
                    ipis_received: c.ipis_received,
                    halts: c.halts,
                    wakeups: c.wakeups,
                    context_switches: c.context_switches,
                    idle_ns: self.ns(c.idle_tsc),
                    timer_ticks: c.ticks,
                    syscalls: c.syscalls,
                })
                .collect(),
        })
    }

    /// Fill the common record fields and the guest section. The workload
    /// window is the guest's own (guest TSC); a VMM that saw the window on the
    /// host clock replaces it.
    pub fn fill(&self, rec: &mut RunRecord, program: &Program) -> Result<(), ResultError> {
        let section = self.section()?;
        let threads = &self.threads;
        rec.timing.wall_ns = self.wall_ns();
        rec.timing.window = self.tsc_window();
        rec.timing.threads = threads
            .iter()
            .map(|t| ThreadTiming {
                group: program
                    .groups
                    .get(t.group as usize)
                    .map(|g| g.name.clone())
                    .unwrap_or_else(|| format!("group{}", t.group)),
                index: t.index,
                wall_ns: self.ns(t.end_tsc.saturating_sub(t.start_tsc)),
                cpu_ns: self.ns(t.cpu_tsc),
            })
            .collect();
        rec.counters.ops = self.ops_map();
        let c = &mut rec.counters;
        c.spin_iterations = checked_sum("thread spin counts", threads.iter().map(|t| t.spins))?;
        c.blocks = checked_sum("thread block counts", threads.iter().map(|t| t.blocks))?;
        c.wakeups = checked_sum("thread wakeup counts", threads.iter().map(|t| t.wakeups))?;
        c.context_switches_voluntary = checked_sum(
            "voluntary switches",
            threads.iter().map(|t| t.csw_voluntary),
        )?;
        c.context_switches_involuntary = checked_sum(
            "involuntary switches",
            threads.iter().map(|t| t.csw_involuntary),
        )?;
        rec.guest = Some(section);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "smplab-guest-result 1\ntsc_hz 2000000000\ncpus 2\nidle haltpoll:5000\n\
timer_hz 0\nlapic_hz 1000000000\nboot_tsc 1000\n\
thread 0 0 3000 5000 1500 7 1 2 3 0\nthread 0 1 4000 9000 4000 0 0 0 1 1\n\
ops 2 2000 0 0 1 0 1 0 0 0 0 0 0\ncpu 0 1 2 3 4 5 2000 6 7\ncpu 1 2 1 0 1 1 0 0 0\nend\n";

    #[test]
    fn parses_a_record() {
        let r = parse(SAMPLE.as_bytes()).expect("sample parses");
        assert_eq!(r.cpus, 2);
        assert_eq!(r.idle, "haltpoll:5000");
        assert_eq!(r.threads.len(), 2);
        assert_eq!(r.ops[1], 2000);
        assert_eq!(r.vcpus[0].syscalls, 7);
        // 6000 cycles at 2 GHz.
        assert_eq!(r.wall_ns(), 3000);
        let s = r.section().expect("valid");
        assert_eq!(s.ipis_sent, 3);
        assert_eq!(s.halts, 3);
        assert_eq!(s.idle_ns_per_vcpu, vec![1000, 0]);
        assert_eq!(s.boot_ns, 1000);
        assert_eq!(r.ops_map()["compute_iters"], 2000);
    }

    #[test]
    fn the_settle_line_is_read_and_absent_from_older_guests() {
        let with = SAMPLE.replace("end\n", "settle 2000000 1\nend\n");
        let r = parse(with.as_bytes()).expect("parses");
        // 2 GHz.
        assert_eq!(
            r.settle(),
            Some(Settle {
                outcome: SettleOutcome::Settled,
                ns: 1_000_000
            })
        );
        assert_eq!(parse(SAMPLE.as_bytes()).expect("parses").settle(), None);
        for bad in ["settle 5 3", "settle 5", "settle x 1"] {
            let text = SAMPLE.replace("end\n", &format!("{bad}\nend\n"));
            assert!(
                matches!(parse(text.as_bytes()), Err(ResultError::Malformed { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn window_idle_is_read_per_vcpu_and_absent_from_older_guests() {
        let with = SAMPLE.replace("end\n", "window_idle 1000 6000\nend\n");
        let s = parse(with.as_bytes())
            .expect("parses")
            .section()
            .expect("valid");
        // 2 GHz.
        assert_eq!(s.window_idle_ns_per_vcpu, vec![500, 3000]);
        assert_eq!(
            s.idle_ns_per_vcpu,
            vec![1000, 0],
            "whole-run idle unchanged"
        );
        let s = parse(SAMPLE.as_bytes())
            .expect("parses")
            .section()
            .expect("valid");
        assert!(s.window_idle_ns_per_vcpu.is_empty());
        let bad = SAMPLE.replace("end\n", "window_idle 1000 x\nend\n");
        assert!(matches!(
            parse(bad.as_bytes()),
            Err(ResultError::Malformed { .. })
        ));
    }

    #[test]
    fn rejects_bad_input_with_reasons() {
        assert_eq!(parse(b""), Err(ResultError::Empty));
        assert!(matches!(parse(b"hello\n"), Err(ResultError::BadHeader(_))));
        let cut = &SAMPLE[..SAMPLE.len() - 4];
        assert_eq!(parse(cut.as_bytes()), Err(ResultError::Truncated));
        let bad = SAMPLE.replace("cpus 2", "cpus two");
        assert!(matches!(
            parse(bad.as_bytes()),
            Err(ResultError::Malformed { line: 3, .. })
        ));
        let short = SAMPLE.replace("thread 0 1 4000 9000 4000 0 0 0 1 1", "thread 0 1");
        assert!(matches!(
            parse(short.as_bytes()),
            Err(ResultError::Malformed { .. })
        ));
        assert!(matches!(parse(&[0xff, 0xfe]), Err(ResultError::NotText)));
    }

    #[test]
    fn the_gate_line_places_creation_before_the_window() {
        let with_gate = SAMPLE.replace(
            "boot_tsc 1000\n",
            "boot_tsc 1000\ngate 2000 2500 2900 4 9500 10 4294967295\n",
        );
        let r = parse(with_gate.as_bytes()).expect("parses");
        let g = r.gate.expect("gate line");
        assert_eq!((g.release_tsc, g.vmm_reply), (2900, u64::from(u32::MAX)));
        let s = r.section().expect("valid");
        // 2 GHz: creation at 500 ns, release at 950 ns, first start at 1000 ns.
        assert_eq!(
            (s.threads_created_ns, s.release_ns, s.boot_ns),
            (500, 950, 1000)
        );
        assert_eq!((s.timer_ticks, s.window_timer_ticks), (6, 6));
        let w = r.tsc_window().expect("window");
        assert_eq!(w.clock, smplab_record::WindowClock::GuestTsc);
        assert_eq!(
            (w.threads_ready_ns, w.start_ns, w.end_ns),
            (1250, 1450, 4500)
        );
        assert!(parse(SAMPLE.as_bytes())
            .expect("old")
            .tsc_window()
            .is_none());
    }

    #[test]
    fn nonsense_counters_are_a_corrupt_record_not_a_panic() {
        let huge = u64::MAX;
        let overflow = SAMPLE.replace(
            "cpu 0 1 2 3 4 5 2000 6 7\ncpu 1 2 1 0",
            &format!("cpu 0 {huge} 2 3 4 5 2000 6 7\ncpu 1 2 1 0"),
        );
        let r = parse(overflow.as_bytes()).expect("parses: each number fits");
        let e = r.section().unwrap_err();
        assert!(matches!(e, ResultError::Corrupt(_)), "{e}");
        assert!(e.to_string().contains("IPIs sent"), "{e}");
        let spins = SAMPLE.replace(
            "thread 0 1 4000 9000 4000 0 0",
            &format!("thread 0 1 4000 9000 4000 {huge} 0"),
        );
        let r = parse(spins.as_bytes()).expect("parses");
        let program = smplab_workload::Source::resolve("spinlock")
            .and_then(|s| s.instantiate(Some(2), 0.01))
            .expect("builtin");
        let mut rec = RunRecord::new(smplab_record::Executor::Vm, Default::default());
        assert!(matches!(
            r.fill(&mut rec, &program),
            Err(ResultError::Corrupt(_))
        ));
        let backwards = SAMPLE.replace("thread 0 0 3000 5000", "thread 0 0 3000 2000");
        let e = parse(backwards.as_bytes())
            .expect("parses")
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("before it starts"), "{e}");
    }

    #[test]
    fn unknown_keys_are_skipped() {
        let more = SAMPLE.replace("end\n", "future 1 2 3\nend\n");
        assert!(parse(more.as_bytes()).is_ok());
    }

    #[test]
    fn serial_frame_is_split_from_the_console() {
        let console = format!("boot msg\r\n{SERIAL_BEGIN}\r\n{SAMPLE}{SERIAL_END}\r\ntail\n");
        let (rec, rest) = split_serial(console.as_bytes()).expect("framed");
        assert!(parse(&rec).is_ok());
        let rest = String::from_utf8(rest).expect("utf8");
        assert!(rest.contains("boot msg") && rest.contains("tail"));
        assert!(!rest.contains("thread 0 0"));
        assert_eq!(split_serial(b"no frame"), Err(ResultError::NoSerialFrame));
        assert_eq!(
            split_serial(format!("{SERIAL_BEGIN}\nx").as_bytes()),
            Err(ResultError::Truncated)
        );
    }
}
