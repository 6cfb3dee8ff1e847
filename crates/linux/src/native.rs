//! The program on the host, under the same init in its native mode
//! (`init --native DIR`): the same fork/exec, drain and clock reads as in the
//! guest, so a native run and a guest run time the same interval.

use crate::error::{io, LinuxError};
use crate::initramfs::{args_files, ARGV_FILE, ENV_FILE};
use crate::marker::{check_started, find_result};
use crate::tempdir::TempDir;
use crate::{libs, nanos, section_from, LinuxRun, Program, INIT};
use smplab_record::linux::LinuxHost;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Run `program` natively under the init; its section has no boot time.
pub fn run_native(program: &Program) -> Result<LinuxRun, LinuxError> {
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
    let out = Command::new(&init)
        .arg("--native")
        .arg(&files)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(io("starting the init natively"))?;
    let total = started.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
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
                reason: format!("the init ended ({}) without a result line", out.status),
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
