//! Every `smplab ...` command line README.md shows parses, and the cheap ones
//! run, so the README's examples cannot rot.
//!
//! How a README line becomes a command (the one substitution):
//! - a `# comment` is dropped, and `a && b` are two commands;
//! - an optional part `[--flag VALUE]` is included, and where VALUE lists
//!   alternatives (`global|iothread|hybrid|fine`) the first is taken;
//! - a value quoted for the shell (`'0;1;balanced'`) loses its quotes;
//! - file names (`my.toml`, `spec.toml`, `results.jsonl`, `rec.json`, ...)
//!   stay as written: the runnable lines run in a scratch directory where
//!   [`scratch`] put those files.
//!
//! Every line is parsed with the binary's own parser
//! ([`smplab_cli::Cli`]); the lines in [`RUNS`] are also run, at scale 0.01.

use clap::Parser;
use smplab_record::exit;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The commands (first words) run, not only parsed: those that are cheap
/// and need no KVM, QEMU or traced program.
const RUNS: &[&str] = &[
    "doctor",
    "workloads",
    "check",
    "run --executor native",
    "run --executor sim",
    "lab run",
    "lab status",
    "lab report",
];

/// Every command line of README.md, substituted as the module doc says.
fn readme_commands() -> Vec<Vec<String>> {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).expect("README.md");
    let mut commands = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if !in_code {
            continue;
        }
        let code = line.split(" #").next().unwrap_or("").trim();
        for part in code.split("&&") {
            let part = part.trim();
            if part.starts_with("smplab ") {
                commands.push(substitute(part));
            }
        }
    }
    commands
}

/// `[--sync global|fine]` → `--sync global`; words split on whitespace.
fn substitute(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in line.split_whitespace() {
        let word = word.trim_start_matches('[').trim_end_matches(']');
        // A value quoted for the shell (`'0;1;balanced'`) is one word.
        let word = word
            .strip_prefix('\'')
            .and_then(|w| w.strip_suffix('\''))
            .unwrap_or(word);
        if word.is_empty() {
            continue;
        }
        // Alternatives are values (`a|b|c`), never the `--` of a program
        // after `trace --`.
        let word = if word.contains('|') && !word.starts_with('-') {
            word.split('|').next().unwrap_or(word)
        } else {
            word
        };
        out.push(word.to_string());
    }
    out
}

#[test]
fn every_readme_command_line_parses() {
    let commands = readme_commands();
    assert!(
        commands.len() >= 20,
        "README.md's command lines not found: {commands:?}"
    );
    for words in &commands {
        if let Err(e) = smplab_cli::Cli::try_parse_from(words) {
            panic!("README.md: `{}` does not parse:\n{e}", words.join(" "));
        }
    }
}

/// A scratch directory holding the files README's lines name.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smplab-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let dedup = Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(["workloads", "show", "dedup"])
        .output()
        .expect("smplab runs");
    std::fs::write(dir.join("my.toml"), &dedup.stdout).expect("my.toml");
    std::fs::write(
        dir.join("spec.toml"),
        "name = \"readme\"\nrepetitions = 1\n[matrix]\nexecutor = \"sim\"\nworkload = \"dedup\"\nvcpus = 2\nscale = 0.01\n",
    )
    .expect("spec.toml");
    dir
}

#[test]
fn the_cheap_readme_command_lines_run() {
    let dir = scratch();
    let mut ran = Vec::new();
    for words in readme_commands() {
        let line = words[1..].join(" ");
        if !RUNS.iter().any(|r| line.starts_with(r)) {
            continue;
        }
        let mut args: Vec<String> = words[1..].to_vec();
        if args[0] == "run" {
            args.extend(["--scale".into(), "0.01".into()]);
        }
        // `lab report` reads the store `lab run` wrote.
        if args[0] == "lab" && args[1] == "report" {
            let store = dir.join("lab-results/readme/results.jsonl");
            std::fs::copy(&store, dir.join("results.jsonl")).expect("lab run stored results");
        }
        let o = Command::new(env!("CARGO_BIN_EXE_smplab"))
            .args(&args)
            .current_dir(&dir)
            .output()
            .expect("smplab runs");
        assert_eq!(
            o.status.code(),
            Some(exit::OK),
            "README.md: `smplab {}` failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr)
        );
        ran.push(line);
    }
    for r in RUNS {
        assert!(
            ran.iter().any(|x| x.starts_with(r)),
            "README.md no longer shows `smplab {r}`: {ran:?}"
        );
    }
    assert!(dir.join("report/index.html").exists());
    assert!(dir.join("rec.json").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
