//! What the init says on the console (docs/linux.md, "The init's contract"):
//! its first line `@@SMPLAB-LINUX-INIT` and its result line
//! `@@SMPLAB-LINUX-RESULT {json}`, and what a console says when it has no
//! result (a kernel panic).

use crate::error::{LinuxError, PanicEnd, CONSOLE_TAIL_LINES};
use serde::Deserialize;
use smplab_record::linux::ProgramExit;

/// The init's first console line.
pub const INIT_MARKER: &str = "@@SMPLAB-LINUX-INIT";
/// The start of the init's result line; a JSON object follows.
pub const RESULT_MARKER: &str = "@@SMPLAB-LINUX-RESULT ";
/// What the kernel prints when it panics.
pub const PANIC_MARKER: &str = "Kernel panic";

/// The init's result line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitResult {
    /// `CLOCK_MONOTONIC` before `fork` to after `waitpid`, ns.
    pub wall_ns: u64,
    /// The exit status, if the program exited.
    #[serde(default)]
    pub status: Option<i32>,
    /// The signal that killed it, if one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The errno of a failed `execve` (0: it started).
    pub exec_errno: i32,
    pub output_bytes: u64,
    /// CPUs online when the init started (`sysconf(_SC_NPROCESSORS_ONLN)`).
    pub cpus_online: i64,
    /// The init's `CLOCK_MONOTONIC` when it started, ns.
    pub init_clock_ns: u64,
    /// The output's last bytes, one char U+0000..U+00FF per byte.
    pub tail: String,
}

impl InitResult {
    /// How the program ended.
    pub fn exit(&self) -> ProgramExit {
        match (self.signal, self.status) {
            (Some(sig), _) => ProgramExit::Signal(sig),
            (None, status) => ProgramExit::Status(status.unwrap_or(0)),
        }
    }

    /// The output tail's bytes (the init escapes every byte on its own).
    pub fn tail_bytes(&self) -> Vec<u8> {
        self.tail
            .chars()
            .map(|c| u8::try_from(u32::from(c)).unwrap_or(b'?'))
            .collect()
    }

    /// The output tail as text (bytes that are not UTF-8 replaced).
    pub fn tail_text(&self) -> String {
        String::from_utf8_lossy(&self.tail_bytes()).into_owned()
    }

    /// CPUs online, as a count (0 if the init could not tell).
    pub fn cpus(&self) -> u32 {
        u32::try_from(self.cpus_online).unwrap_or(0)
    }
}

/// Parse one result line (the marker and the JSON after it).
pub fn parse_result_line(line: &str) -> Result<InitResult, String> {
    let json = line
        .trim_end_matches(['\r', '\n'])
        .split_once(RESULT_MARKER)
        .map(|(_, json)| json)
        .ok_or_else(|| "no result marker".to_string())?;
    let r: InitResult =
        serde_json::from_str(json).map_err(|e| format!("malformed result line: {e}"))?;
    if r.status.is_some() == r.signal.is_some() {
        return Err("malformed result line: exactly one of status and signal must be given".into());
    }
    Ok(r)
}

/// The last result line on a console, parsed (`None`: there is none).
pub fn find_result(console: &str) -> Option<Result<InitResult, String>> {
    console
        .lines()
        .rev()
        .find(|l| l.contains(RESULT_MARKER))
        .map(parse_result_line)
}

/// Whether the console shows a kernel panic.
pub fn panicked(console: &str) -> bool {
    console.contains(PANIC_MARKER)
}

/// The last `n` lines of a console.
pub fn console_tail(console: &str, n: usize) -> String {
    let lines: Vec<&str> = console.lines().map(|l| l.trim_end_matches('\r')).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The init's result from a finished guest's console, checked: a result
/// line, a program that started, and every requested vCPU online. Else the
/// error that says why not.
pub fn guest_outcome(console: &str, program: &str, vcpus: u32) -> Result<InitResult, LinuxError> {
    let tail = || console_tail(console, CONSOLE_TAIL_LINES);
    let result = match find_result(console) {
        Some(Ok(r)) => r,
        Some(Err(reason)) => {
            return Err(LinuxError::NoResult {
                reason,
                console: tail(),
            })
        }
        // The VM ended on its own: after a panic, by the kernel's restart.
        None if panicked(console) => {
            return Err(LinuxError::GuestPanic {
                end: PanicEnd::Restarted,
                console: tail(),
            })
        }
        None => {
            let reason = if console.contains(INIT_MARKER) {
                "the init started but wrote no result line".to_string()
            } else {
                "the init never started (no @@SMPLAB-LINUX-INIT line)".to_string()
            };
            return Err(LinuxError::NoResult {
                reason,
                console: tail(),
            });
        }
    };
    check_started(&result, program, tail)?;
    if result.cpus() < vcpus {
        return Err(LinuxError::VcpusOffline {
            requested: vcpus,
            online: result.cpus(),
            console: tail(),
        });
    }
    Ok(result)
}

/// A result whose program never started is an error (status 11).
pub fn check_started(
    result: &InitResult,
    program: &str,
    console: impl FnOnce() -> String,
) -> Result<(), LinuxError> {
    if result.exec_errno != 0 {
        return Err(LinuxError::ProgramFailedToStart {
            program: program.to_string(),
            reason: std::io::Error::from_raw_os_error(result.exec_errno).to_string(),
            console: console(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use smplab_record::exit;

    const LINE: &str = r#"@@SMPLAB-LINUX-RESULT {"wall_ns":40002500,"status":5,"exec_errno":0,"output_bytes":19,"cpus_online":2,"init_clock_ns":1164354708,"tail":"hello \u00e9\u00ff\u000a\"q\\"}"#;

    #[test]
    fn parses_the_result_line() {
        let r = parse_result_line(&format!("{LINE}\r\n")).unwrap();
        assert_eq!(r.wall_ns, 40_002_500);
        assert_eq!(r.exit(), ProgramExit::Status(5));
        assert_eq!(r.output_bytes, 19);
        assert_eq!(r.cpus(), 2);
        assert_eq!(r.tail_bytes(), b"hello \xe9\xff\n\"q\\".to_vec());
        assert_eq!(r.tail_text(), "hello \u{fffd}\u{fffd}\n\"q\\");
        let sig = parse_result_line(&LINE.replace("\"status\":5", "\"signal\":9")).unwrap();
        assert_eq!(sig.exit(), ProgramExit::Signal(9));
    }

    #[test]
    fn refuses_malformed_result_lines() {
        for bad in [
            "@@SMPLAB-LINUX-RESULT {",
            "@@SMPLAB-LINUX-RESULT {\"wall_ns\":1}",
            &LINE.replace("\"status\":5", "\"status\":5,\"signal\":1"),
            &LINE.replace("\"status\":5,", ""),
            "no marker at all",
        ] {
            assert!(parse_result_line(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn finds_the_result_among_kernel_lines() {
        let console =
            format!("[ 0.1] booting\r\n{INIT_MARKER}\r\n{LINE}\r\n[ 0.5] reboot: Power down\r\n");
        let r = guest_outcome(&console, "x", 2).unwrap();
        assert_eq!(r.output_bytes, 19);
    }

    #[test]
    fn a_panic_is_guest_crash_with_the_console_tail() {
        let mut console = String::new();
        for i in 0..40 {
            console.push_str(&format!("[ {i}.0] line {i}\n"));
        }
        console.push_str("Kernel panic - not syncing: VFS: Unable to mount root fs\n");
        let e = guest_outcome(&console, "x", 1).unwrap_err();
        assert_eq!(e.exit_status(), exit::GUEST_CRASH);
        let text = e.to_string();
        assert!(text.contains("Unable to mount root fs"), "{text}");
        assert!(
            text.contains("line 39") && !text.contains("line 5\n"),
            "{text}"
        );
        assert_eq!(text.lines().count(), CONSOLE_TAIL_LINES + 1, "{text}");
    }

    #[test]
    fn too_few_cpus_online_is_its_own_status() {
        let console = format!("{INIT_MARKER}\n{LINE}\n");
        let e = guest_outcome(&console, "x", 4).unwrap_err();
        assert!(
            matches!(
                e,
                LinuxError::VcpusOffline {
                    requested: 4,
                    online: 2,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.exit_status(), exit::VCPUS_OFFLINE);
        assert!(e
            .to_string()
            .contains("4 vCPUs requested but the guest kernel brought 2 online"));
    }

    #[test]
    fn no_result_and_a_program_that_did_not_start_are_errors() {
        let e = guest_outcome("[ 1.0] booting\n", "x", 1).unwrap_err();
        assert_eq!(e.exit_status(), exit::NO_RESULT);
        assert!(e.to_string().contains("never started"), "{e}");
        let e = guest_outcome(&format!("{INIT_MARKER}\n"), "x", 1).unwrap_err();
        assert!(e.to_string().contains("wrote no result"), "{e}");
        let not_started = LINE.replace("\"exec_errno\":0", "\"exec_errno\":2");
        let e = guest_outcome(&format!("{INIT_MARKER}\n{not_started}\n"), "pigz", 1).unwrap_err();
        assert_eq!(e.exit_status(), exit::PROGRAM_NOT_FOUND);
        assert!(e.to_string().contains("`pigz` could not be started"), "{e}");
        let e = guest_outcome(
            &format!("{INIT_MARKER}\n@@SMPLAB-LINUX-RESULT {{]\n"),
            "x",
            1,
        )
        .unwrap_err();
        assert_eq!(e.exit_status(), exit::NO_RESULT);
    }
}
