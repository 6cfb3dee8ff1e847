//! Recording: run a program under the interposer and write the trace file.
//!
//! smplab writes the header block, starts the program with `LD_PRELOAD` set to
//! the embedded interposer and `SMPLAB_TRACE_FILE` naming the trace, lets its
//! stdin, stdout and stderr through untouched, and after it ends appends the
//! exit block (how it ended, wall time). The interposer appends the events and,
//! when the program leaves through `exit()`, its end block.

use crate::format::{self, Ending};
use crate::TraceError;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The interposer library, built by build.rs.
pub static INTERPOSER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libsmplab-trace.so"));

/// What happened to a traced program.
#[derive(Debug, Clone, Copy)]
pub struct Traced {
    pub ending: Ending,
    pub wall_ns: u64,
    /// The interposer flushed at a normal exit (no events lost).
    pub complete: bool,
    pub events: usize,
}

impl Traced {
    /// The exit status `smplab trace` passes on: the program's own, or
    /// 128 + signal as a shell reports a killed program.
    pub fn exit_status(&self) -> i32 {
        match self.ending {
            Ending::Exited(c) => c,
            Ending::Signaled(s) => smplab_record::exit::SIGNAL_BASE + s,
        }
    }
}

pub use smplab_record::window::monotonic_ns;

/// Find `program` as the shell would: a name with a `/` is a path, anything
/// else is looked up in PATH.
pub fn resolve_program(program: &str) -> Result<PathBuf, TraceError> {
    let executable = |p: &Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        if !p.exists() {
            return Err(TraceError::NotFound {
                program: program.into(),
            });
        }
        if !executable(&p) {
            return Err(TraceError::NotExecutable {
                path: program.into(),
                why: "not a regular file with execute permission".into(),
            });
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| executable(p))
        .ok_or_else(|| TraceError::NotFound {
            program: program.into(),
        })
}

/// Refuse what LD_PRELOAD cannot reach: an ELF without an interpreter
/// (PT_INTERP) is statically linked. `#!` scripts are accepted (their
/// interpreter is traced).
pub fn check_dynamic(path: &Path) -> Result<(), TraceError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| TraceError::NotExecutable {
        path: shown.clone(),
        why: e.to_string(),
    })?;
    if bytes.starts_with(b"#!") {
        return Ok(());
    }
    if !bytes.starts_with(b"\x7fELF") {
        return Err(TraceError::NotElf { path: shown });
    }
    match has_interp(&bytes) {
        Some(true) => Ok(()),
        Some(false) => Err(TraceError::StaticBinary { path: shown }),
        None => Err(TraceError::NotElf { path: shown }),
    }
}

/// Whether an ELF64 little-endian image has a PT_INTERP program header
/// (None: not a readable ELF64 LE image).
fn has_interp(b: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return None; // not ELFCLASS64 / ELFDATA2LSB
    }
    let u16_at = |i: usize| Some(u16::from_le_bytes(b.get(i..i + 2)?.try_into().ok()?));
    let u32_at = |i: usize| Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?));
    let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    for i in 0..phnum {
        let off = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(off)? == PT_INTERP {
            return Some(true);
        }
    }
    Some(false)
}

/// The interposer written to a temporary file for the run, removed on drop.
struct TempLib(PathBuf);

impl TempLib {
    fn create() -> Result<Self, TraceError> {
        let path = std::env::temp_dir().join(format!(
            "smplab-trace-{}-{}.so",
            std::process::id(),
            monotonic_ns()
        ));
        let io = |source| TraceError::Io {
            path: path.display().to_string(),
            source,
        };
        std::fs::write(&path, INTERPOSER).map_err(io)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(io)?;
        Ok(TempLib(path))
    }
}

impl Drop for TempLib {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Run `argv` under the interposer, writing the trace to `output`.
pub fn trace_program(
    argv: &[String],
    output: &Path,
    threads_hint: Option<u32>,
) -> Result<Traced, TraceError> {
    let Some(program) = argv.first() else {
        return Err(TraceError::NotFound {
            program: String::new(),
        });
    };
    let exe = resolve_program(program)?;
    check_dynamic(&exe)?;
    let lib = TempLib::create()?;
    let io = |source| TraceError::Io {
        path: output.display().to_string(),
        source,
    };
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let start = monotonic_ns();
    std::fs::write(
        output,
        format::header_block(argv, threads_hint, start, start_unix),
    )
    .map_err(io)?;
    // Any LD_PRELOAD the user set stays, after ours.
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(old) if !old.is_empty() => format!("{} {old}", lib.0.display()),
        _ => lib.0.display().to_string(),
    };
    let trace_file = std::path::absolute(output).map_err(io)?;
    let mut child = Command::new(&exe)
        .arg0(program)
        .args(&argv[1..])
        .env("LD_PRELOAD", preload)
        .env("SMPLAB_TRACE_FILE", &trace_file)
        .spawn()
        .map_err(|source| TraceError::Spawn {
            program: program.clone(),
            source,
        })?;
    // Like a shell waiting for a foreground job: a ^C reaches the program
    // (same process group) and smplab survives it to finish the trace file.
    let old = ignore_interrupts();
    let waited = child.wait();
    restore_interrupts(old);
    let status = waited.map_err(|source| TraceError::Spawn {
        program: program.clone(),
        source,
    })?;
    let end = monotonic_ns();
    let ending = match (status.code(), status.signal()) {
        (Some(c), _) => Ending::Exited(c),
        (None, Some(s)) => Ending::Signaled(s),
        (None, None) => Ending::Exited(-1),
    };
    let wall_ns = end.saturating_sub(start);
    format::append(output, &format::exit_block(ending, end, wall_ns)).map_err(io)?;
    let trace = format::read(output)?;
    Ok(Traced {
        ending,
        wall_ns,
        complete: trace.complete(),
        events: trace.event_count(),
    })
}

use std::os::unix::process::CommandExt;

type Disposition = [libc::sighandler_t; 2];

fn ignore_interrupts() -> Disposition {
    // SAFETY: setting SIG_IGN installs no handler code; the previous
    // dispositions are restored by `restore_interrupts`.
    unsafe {
        [
            libc::signal(libc::SIGINT, libc::SIG_IGN),
            libc::signal(libc::SIGQUIT, libc::SIG_IGN),
        ]
    }
}

fn restore_interrupts(old: Disposition) {
    // SAFETY: puts back the dispositions `ignore_interrupts` returned.
    unsafe {
        libc::signal(libc::SIGINT, old[0]);
        libc::signal(libc::SIGQUIT, old[1]);
    }
}
