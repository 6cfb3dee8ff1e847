//! `smplab workloads [show NAME]`.

use clap::{Args, Subcommand};
use smplab_record::exit;
use smplab_workload::{builtin, Source};

#[derive(Args)]
pub struct WorkloadsArgs {
    #[command(subcommand)]
    action: Option<Action>,
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Action {
    /// Print a built-in profile's TOML (copy it to start your own workload).
    Show {
        /// Profile name (see `smplab workloads`).
        name: String,
    },
}

pub fn run(args: &WorkloadsArgs) -> i32 {
    match &args.action {
        Some(Action::Show { name }) => match builtin::text(name) {
            Some(text) => {
                print!("{text}");
                exit::OK
            }
            None => {
                smplab_record::exit::report_error(smplab_workload::WorkloadError::UnknownWorkload(
                    name.clone(),
                ));
                exit::BAD_INPUT
            }
        },
        None => list(args.json),
    }
}

fn list(json: bool) -> i32 {
    let mut rows = Vec::new();
    for name in builtin::names() {
        let src = match Source::resolve(name) {
            Ok(s) => s,
            Err(e) => {
                smplab_record::exit::report_error(format!(
                    "built-in profile {name} is broken: {e}"
                ));
                return exit::INTERNAL;
            }
        };
        let threads: Vec<String> = src
            .spec
            .groups
            .iter()
            .map(|g| match g.get_ref().threads.get_ref() {
                smplab_workload::expr::Count::Int(v) => v.to_string(),
                smplab_workload::expr::Count::Expr(e) => e.clone(),
            })
            .collect();
        rows.push((name, threads.join(" + "), src.spec.description.clone()));
    }
    if json {
        // JSON lines: one object per workload.
        for (n, t, d) in &rows {
            println!(
                "{}",
                serde_json::json!({"name": n, "threads": t, "description": d})
            );
        }
        return exit::OK;
    }
    let width = rows.iter().map(|r| r.1.len()).max().unwrap_or(7).max(7);
    println!("{:<14} {:<width$}  description", "name", "threads");
    for (name, threads, desc) in rows {
        println!("{name:<14} {threads:<width$}  {desc}");
    }
    println!("\n`smplab workloads show NAME` prints a profile's TOML, including what real program it imitates.");
    exit::OK
}
