//! The program on the host, under the same init in its native mode
//! (`init --native DIR`): the same fork/exec, drain and clock reads as in the
//! guest, so a native run and a guest run time the same interval.

use crate::error::{io, LinuxError};
use crate::initramfs::{args_files, ARGV_FILE, ENV_FILE};
use crate::marker::{check_started, find_result};
use crate::tempdir::TempDir;
use crate::{libs, nanos, section_from, LinuxRun, Program, INIT};
use smplab_record::linux::LinuxHost;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Run `program` natively under the init; its section has no boot time.
/// A run still going after `timeout` (the same limit a guest run gets, boot
/// included there) is killed, the init and everything it started, and is a
/// [`LinuxError::NativeTimeout`] (status 7, as a guest's timeout).
pub fn run_native(program: &Program, timeout: Duration) -> Result<LinuxRun, LinuxError> {
    let name = program.argv.first().ok_or(LinuxError::NoProgram)?;
    let path = libs::resolve_program(name)?;
    let exec_path = path.display().to_string();
    let dir = TempDir::new("native")?;
    let (argv, env) = args_files(program, &exec_path);
    let files = dir.path().join("smplab");
    std::fs::create_dir_all(&files).map_err(io("creating the init's directory"))?;
    dir.write(ARGV_FILE, &argv)?;
    dir.write(ENV_FILE, &env)?;
    let init = dir.write("init", INIT)?;
    std::fs::set_permissions(&init, std::fs::Permissions::from_mode(0o755))
        .map_err(io("making the init executable"))?;
    let started = Instant::now();
    let child = spawn_init(&init, &files)?;
    let (status, stdout) = wait_with_timeout(child, timeout)?;
    let total = started.elapsed();
    let text = String::from_utf8_lossy(&stdout);
    let Some(status) = status else {
        return Err(LinuxError::NativeTimeout {
            seconds: timeout.as_secs_f64(),
            output: text.into_owned(),
        });
    };
    let result = match find_result(&text) {
        Some(Ok(r)) => r,
        Some(Err(reason)) => {
            return Err(LinuxError::NoResult {
                reason,
                console: text.into_owned(),
            })
        }
        None => {
            return Err(LinuxError::NoResult {
                reason: format!("the init ended ({status}) without a result line"),
                console: text.into_owned(),
            })
        }
    };
    check_started(&result, name, String::new)?;
    let mut section = section_from(LinuxHost::Native, program, &exec_path, &result);
    section.total_ns = Some(nanos(total));
    Ok(LinuxRun {
        section,
        vmm: None,
        console: String::new(),
    })
}

/// Starts the init written at `init`, in its own process group, so a timeout
/// kills the program the init forked (and whatever that started) with it.
///
/// Retries while exec says the file is busy (ETXTBSY): another thread of this
/// process (a lab worker, a test) that forks while the init's file is still
/// open for writing here gives its child a copy of that descriptor until the
/// child's own exec closes it; the window is that child's fork-to-exec time.
fn spawn_init(init: &std::path::Path, files: &std::path::Path) -> Result<Child, LinuxError> {
    const ATTEMPTS: u32 = 100;
    let mut attempt = 1;
    loop {
        match Command::new(init)
            .arg("--native")
            .arg(files)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
        {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && attempt < ATTEMPTS => {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other.map_err(io("starting the init natively")),
        }
    }
}

/// Waits for `child` (a process group leader) at most `timeout`, reading its
/// stdout meanwhile. `None` as the status: the time ran out and the whole
/// group was killed (SIGKILL) and reaped.
fn wait_with_timeout(
    mut child: Child,
    timeout: Duration,
) -> Result<(Option<ExitStatus>, Vec<u8>), LinuxError> {
    let mut stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(s) = stdout.as_mut() {
            // A read error ends the output early; the missing result line
            // then says so.
            let _ = s.read_to_end(&mut out);
        }
        out
    });
    let pid = child.id();
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = done_tx.send(());
        status
    });
    let timed_out = matches!(
        done_rx.recv_timeout(timeout),
        Err(mpsc::RecvTimeoutError::Timeout)
    );
    if timed_out {
        kill_group(pid);
    }
    let status = waiter
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the waiting thread panicked")))
        .map_err(io("waiting for the init"))?;
    // The pipe closes once every process of the group has gone.
    let out = reader.join().unwrap_or_default();
    Ok(((!timed_out).then_some(status), out))
}

/// SIGKILL to the process group `pgid` (the init's own, [`run_native`]).
fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    // The group is the init's own; its leader was still running when the
    // time ran out, so the id names that group (only a leader reaped in the
    // same instant with its whole group gone could free it for reuse).
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}
