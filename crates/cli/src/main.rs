//! `smplab`: the command-line front end. The commands and their arguments
//! are the `smplab_cli` library's ([`smplab_cli::Cli`]); this file only sets
//! up the process. Exit statuses: `smplab_record::exit` (documented in
//! README.md).

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Behave like other Unix tools when stdout is a pipe that closes early
    // (`smplab run --json | head`): die quietly on SIGPIPE instead of letting
    // Rust turn the EPIPE into a panic.
    // SAFETY: restoring the default disposition of SIGPIPE before any thread
    // exists; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = smplab_cli::Cli::parse();
    let status = smplab_cli::run_command(&cli);
    ExitCode::from(u8::try_from(status.clamp(0, 255)).unwrap_or(u8::MAX))
}
