//! The guest's result record: a text stream, one `key value...` item per line,
//! written by `kernel/user.c` (`emit_result`) to port 0x520 (smplab-vmm) or
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
//! thread GROUP INDEX START_TSC END_TSC CPU_TSC SPINS BLOCKS WAKEUPS CSW_VOL CSW_INVOL
//! ops C0 ... C12                    # in smplab_workload::program::counter_names::ALL order
//! cpu ID IPIS_SENT IPIS_RECEIVED HALTS WAKEUPS CONTEXT_SWITCHES IDLE_TSC TICKS SYSCALLS
//! end
//! ```

use smplab_record::guest::{GuestSection, GuestVcpuCounters};
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
    pub threads: Vec<GuestThread>,
    pub ops: [u64; 13],
    pub vcpus: Vec<GuestCpu>,
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
        match key {
            "tsc_hz" => r.tsc_hz = nums::<1>(n, &rest)?[0],
            "cpus" => r.cpus = narrow(n, nums::<1>(n, &rest)?[0])?,
            "idle" => r.idle = rest.join(" "),
            "timer_hz" => r.timer_hz = narrow(n, nums::<1>(n, &rest)?[0])?,
            "lapic_hz" => r.lapic_hz = nums::<1>(n, &rest)?[0],
            "boot_tsc" => r.boot_tsc = nums::<1>(n, &rest)?[0],
            "thread" => {
                let v = nums::<10>(n, &rest)?;
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
            "ops" => r.ops = nums::<13>(n, &rest)?,
            "cpu" => {
                let v = nums::<9>(n, &rest)?;
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
            "end" => {
                ended = true;
                break;
            }
            // Unknown keys are skipped so a newer guest can add lines.
            _ => {}
        }
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

impl GuestResult {
    /// TSC cycles to nanoseconds with this run's TSC frequency.
    pub fn ns(&self, cycles: u64) -> u64 {
        let hz = self.tsc_hz.max(1) as u128;
        (cycles as u128 * 1_000_000_000u128 / hz).min(u64::MAX as u128) as u64
    }

    /// Workload wall time: first thread start to last thread end.
    pub fn wall_ns(&self) -> u64 {
        let start = self.threads.iter().map(|t| t.start_tsc).min().unwrap_or(0);
        let end = self.threads.iter().map(|t| t.end_tsc).max().unwrap_or(0);
        self.ns(end.saturating_sub(start))
    }

    /// Per-operation counts keyed like `RunRecord::counters.ops`.
    pub fn ops_map(&self) -> std::collections::BTreeMap<String, u64> {
        counter_names::ALL
            .iter()
            .zip(self.ops)
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    }

    /// The guest section of the record.
    pub fn section(&self) -> GuestSection {
        let first_start = self
            .threads
            .iter()
            .map(|t| t.start_tsc)
            .min()
            .unwrap_or(self.boot_tsc);
        GuestSection {
            vcpus: self.cpus,
            idle: self.idle.clone(),
            ipis_sent: self.vcpus.iter().map(|c| c.ipis_sent).sum(),
            ipis_received: self.vcpus.iter().map(|c| c.ipis_received).sum(),
            halts: self.vcpus.iter().map(|c| c.halts).sum(),
            wakeups: self.vcpus.iter().map(|c| c.wakeups).sum(),
            context_switches: self.vcpus.iter().map(|c| c.context_switches).sum(),
            boot_ns: self.ns(first_start.saturating_sub(self.boot_tsc)),
            idle_ns_per_vcpu: self.vcpus.iter().map(|c| self.ns(c.idle_tsc)).collect(),
            tsc_hz: self.tsc_hz,
            timer_hz: self.timer_hz,
            lapic_hz: self.lapic_hz,
            per_vcpu: self
                .vcpus
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
        }
    }

    /// Fill the common record fields and the guest section.
    pub fn fill(&self, rec: &mut RunRecord, program: &Program) {
        rec.timing.wall_ns = self.wall_ns();
        rec.timing.threads = self
            .threads
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
        rec.counters.spin_iterations = self.threads.iter().map(|t| t.spins).sum();
        rec.counters.blocks = self.threads.iter().map(|t| t.blocks).sum();
        rec.counters.wakeups = self.threads.iter().map(|t| t.wakeups).sum();
        rec.counters.context_switches_voluntary =
            self.threads.iter().map(|t| t.csw_voluntary).sum();
        rec.counters.context_switches_involuntary =
            self.threads.iter().map(|t| t.csw_involuntary).sum();
        rec.guest = Some(self.section());
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
        let s = r.section();
        assert_eq!(s.ipis_sent, 3);
        assert_eq!(s.halts, 3);
        assert_eq!(s.idle_ns_per_vcpu, vec![1000, 0]);
        assert_eq!(s.boot_ns, 1000);
        assert_eq!(r.ops_map()["compute_iters"], 2000);
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
