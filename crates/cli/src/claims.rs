//! `smplab claims`: the claims ledger (docs/claims.toml), its check, its
//! docs tables and its host measurements. The ledger and the logic are
//! `smplab_analysis::claims`'s; this file holds the flags and the output.

use clap::{Args, Subcommand};
use smplab_analysis::claims::{self, audit, check, figures, measure, render, Ledger};
use smplab_record::exit::{self, report_error};
use smplab_record::outln;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Args)]
pub struct ClaimsArgs {
    #[command(subcommand)]
    pub command: ClaimsCommand,
    /// The repository root (holding README.md and docs/); default: the
    /// nearest directory at or above the current one holding docs/claims.toml.
    #[arg(long, global = true)]
    pub root: Option<PathBuf>,
    /// The ledger; default: ROOT/docs/claims.toml.
    #[arg(long, global = true)]
    pub ledger: Option<PathBuf>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClaimsCommand {
    /// Recompute every deterministic figure, compare the docs' tables and
    /// marked prose figures with the ledger, and audit the docs the ledger
    /// lists as `audited`: exit 14 on drift, 15 on a stale doc, 21 on a figure
    /// that is neither a claim nor exempt.
    Check(FilterArgs),
    /// Print one claim's recomputed figure.
    Run { id: String },
    /// The ledger as one table: claim, paper, ours, kind, status.
    List,
    /// The in-process producers a claim's `figure` may name.
    Figures,
    /// Rewrite the docs' figure tables and marked prose figures from the ledger.
    Render,
    /// List every figure in README.md and docs/*.md that is neither a claim
    /// nor exempt (`<!--not-claim KIND: why-->`), as file:line:col, and each
    /// doc's counts: exit 21 when an audited doc (the ledger's `audited`) has one.
    Audit {
        /// Fail (exit 21) on an unmarked figure in any doc, audited or not.
        #[arg(long)]
        all: bool,
        /// Only these docs (as the ledger names them: README.md, docs/lab.md).
        files: Vec<String>,
    },
    /// Re-measure the host figures here; append them to a results file.
    Measure {
        #[command(flatten)]
        filter: FilterArgs,
        /// Results file (JSON lines), appended to.
        #[arg(short = 'o', long, default_value = "lab-results/claims-measured.jsonl")]
        output: PathBuf,
    },
}

#[derive(Debug, Clone, Args)]
pub struct FilterArgs {
    /// Only claims whose id contains this.
    #[arg(long)]
    pub only: Option<String>,
}

/// The nearest directory at or above the current one holding the ledger.
fn find_root() -> Option<PathBuf> {
    let mut dir = std::env::current_dir().ok()?;
    loop {
        if dir.join(claims::LEDGER_PATH).is_file() {
            return Some(dir);
        }
        if !dir.pop() {
            return None;
        }
    }
}

fn load(args: &ClaimsArgs) -> Result<(PathBuf, Ledger), i32> {
    let root = match args.root.clone().or_else(find_root) {
        Some(r) => r,
        None => {
            report_error(format!(
                "no {} here or above: give --root (the repository) or --ledger",
                claims::LEDGER_PATH
            ));
            return Err(exit::BAD_INPUT);
        }
    };
    let path = args
        .ledger
        .clone()
        .unwrap_or_else(|| root.join(claims::LEDGER_PATH));
    let shown = path
        .strip_prefix(&root)
        .unwrap_or(&path)
        .display()
        .to_string();
    match claims::load(&path, &shown) {
        Ok(l) => Ok((root, l)),
        Err(e) => {
            report_error(&e);
            Err(exit::BAD_INPUT)
        }
    }
}

pub fn run(args: &ClaimsArgs) -> i32 {
    match &args.command {
        ClaimsCommand::Figures => {
            for f in figures::FIGURES {
                outln!("{:42} {}", f.name, f.what);
            }
            for m in measure::MEASURES {
                outln!("{:42} (measured) {}", m.name, m.what);
            }
            exit::OK
        }
        ClaimsCommand::Check(f) => {
            let (root, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            check_cmd(&root, &ledger, f.only.as_deref())
        }
        ClaimsCommand::Run { id } => {
            let (_, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            run_one(&ledger, id)
        }
        ClaimsCommand::List => {
            let (_, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            outln!("{}", list(&ledger));
            exit::OK
        }
        ClaimsCommand::Render => {
            let (root, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            match render::render(&root, &ledger) {
                Ok(paths) => {
                    for p in &paths {
                        outln!("rewrote {}", p.display());
                    }
                    if paths.is_empty() {
                        outln!("every docs table matches the ledger");
                    }
                    exit::OK
                }
                Err(e) => {
                    report_error(&e);
                    exit::BAD_INPUT
                }
            }
        }
        ClaimsCommand::Audit { all, files } => {
            let (root, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            audit_cmd(&root, &ledger, *all, files)
        }
        ClaimsCommand::Measure { filter, output } => {
            let (_, ledger) = match load(args) {
                Ok(x) => x,
                Err(s) => return s,
            };
            measure_cmd(&ledger, filter.only.as_deref(), output)
        }
    }
}

fn check_cmd(root: &Path, ledger: &Ledger, only: Option<&str>) -> i32 {
    let start = std::time::Instant::now();
    let outcomes = check::check(ledger, only);
    let drifted = outcomes.iter().filter(|o| !o.holds()).count();
    for o in &outcomes {
        let got = match &o.got {
            Ok(g) => format!("{g:.4}"),
            Err(e) => format!("error: {e}"),
        };
        outln!(
            "{:5} {:44} stated {:>10} got {:>12} ±{} ({:.2} s)",
            if o.holds() { "ok" } else { "DRIFT" },
            o.id,
            o.stated,
            got,
            o.tolerance,
            o.seconds
        );
    }
    let t = claims::tally(ledger);
    outln!(
        "{} deterministic figures recomputed in {:.1} s; {} paper figures in the ledger: {} reproduced (nothing fitted to them), {} shape only, {} calibration (fitted), {} missed; {} figures of our own, {} missing their goal",
        outcomes.len(),
        start.elapsed().as_secs_f64(),
        t.paper_figures,
        t.reproduced,
        t.shape,
        t.calibration,
        t.missed,
        t.own,
        t.own_missed
    );
    if drifted > 0 {
        report_error(format!(
            "{drifted} figure(s) drifted from docs/claims.toml:\n{}\nfix the model, or state the new value in the ledger (and `smplab claims render`)",
            check::drift_table(&outcomes)
        ));
        return exit::CLAIM_DRIFT;
    }
    if only.is_some() {
        return exit::OK;
    }
    let historic = ledger
        .claims
        .iter()
        .filter(|c| c.historic.is_some())
        .count();
    let commandless = ledger.claims.iter().filter(|c| c.has_no_command()).count();
    match render::prose_marks(root) {
        Ok(marks) => outln!(
            "{} figures marked in the docs' prose; {historic} historic measurements ({commandless} of them without a command that reproduces them)",
            marks.len()
        ),
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    }
    match render::stale_docs(root, ledger) {
        Ok(stale) if stale.is_empty() => audit_step(root, ledger),
        Ok(stale) => {
            let names: Vec<String> = stale.iter().map(|s| s.path.display().to_string()).collect();
            report_error(format!(
                "figures (tables or marked prose) differ from the ledger in {}: run `smplab claims render`",
                names.join(", ")
            ));
            exit::STALE_DOCS
        }
        Err(e) => {
            report_error(&e);
            exit::BAD_INPUT
        }
    }
}

/// `check`'s last step: the audited docs have no unmarked figure.
fn audit_step(root: &Path, ledger: &Ledger) -> i32 {
    let docs = match audit::audit(root, &ledger.audited) {
        Ok(d) => d,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    let (done, rest): (Vec<_>, Vec<_>) =
        docs.iter().partition(|d| ledger.audited.contains(&d.file));
    let unmarked: Vec<&audit::DocAudit> = done
        .iter()
        .copied()
        .filter(|d| !d.unmarked.is_empty())
        .collect();
    outln!(
        "{} of {} docs audited (every figure a claim or exempt); {} lines with unmarked figures in the other {}",
        done.len(),
        docs.len(),
        rest.iter().map(|d| d.unmarked_lines()).sum::<usize>(),
        rest.len()
    );
    if unmarked.is_empty() {
        return exit::OK;
    }
    report_error(format!(
        "figures that are neither a claim nor exempt, in docs the ledger audits:\n{}\nmark each `<!--claim ID-->…<!--/claim-->` (with a ledger entry) or `<!--not-claim KIND: why-->…<!--/not-claim-->` (`smplab claims audit`)",
        unmarked_list(&unmarked)
    ));
    exit::UNCLAIMED_FIGURE
}

fn unmarked_list(docs: &[&audit::DocAudit]) -> String {
    let mut s = String::new();
    for d in docs {
        for u in &d.unmarked {
            s.push_str(&format!("{}:{}:{}: `{}`\n", d.file, u.line, u.col, u.text));
        }
    }
    s.trim_end().to_string()
}

fn audit_cmd(root: &Path, ledger: &Ledger, all: bool, files: &[String]) -> i32 {
    let docs = match audit::audit(root, &ledger.audited) {
        Ok(d) => d,
        Err(e) => {
            report_error(&e);
            return exit::BAD_INPUT;
        }
    };
    if let Some(f) = files.iter().find(|f| !docs.iter().any(|d| &d.file == *f)) {
        report_error(format!(
            "no doc {f} (README.md or docs/NAME.md under the root)"
        ));
        return exit::BAD_INPUT;
    }
    let chosen: Vec<&audit::DocAudit> = docs
        .iter()
        .filter(|d| files.is_empty() || files.contains(&d.file))
        .collect();
    let listing = unmarked_list(&chosen);
    if !listing.is_empty() {
        outln!("{listing}");
    }
    let kinds = audit::ExemptKind::ALL;
    let mut header = String::from("| doc | audited | claims |");
    for k in kinds {
        header.push_str(&format!(" {} |", k.label()));
    }
    header.push_str(" unmarked figures | lines |");
    outln!("{header}\n|{}", " --- |".repeat(kinds.len() + 5));
    let mut failing = 0;
    for d in &chosen {
        let audited = ledger.audited.contains(&d.file);
        let mut row = format!(
            "| {} | {} | {} |",
            d.file,
            if audited { "yes" } else { "no" },
            d.claimed
        );
        for k in kinds {
            row.push_str(&format!(" {} |", d.exempt.get(&k).copied().unwrap_or(0)));
        }
        row.push_str(&format!(" {} | {} |", d.unmarked.len(), d.unmarked_lines()));
        outln!("{row}");
        if !d.unmarked.is_empty() && (all || audited) {
            failing += 1;
        }
    }
    if failing > 0 {
        report_error(format!(
            "{failing} doc(s) with figures that are neither a claim nor exempt{}",
            if all { "" } else { " (audited docs)" }
        ));
        return exit::UNCLAIMED_FIGURE;
    }
    exit::OK
}

fn run_one(ledger: &Ledger, id: &str) -> i32 {
    let Some(c) = ledger.get(id) else {
        report_error(format!(
            "no claim `{id}` in the ledger (`smplab claims list`)"
        ));
        return exit::BAD_INPUT;
    };
    if !c.kind.deterministic() {
        outln!(
            "{id} is measured on a host: `{}` (stated {} {}); `smplab claims measure --only {id}`",
            c.command,
            c.value,
            c.unit
        );
        return exit::OK;
    }
    let o = check::recompute(c);
    match o.got {
        Ok(g) => {
            outln!(
                "{id}: {g:.6} {} (stated {}, ±{})",
                c.unit,
                c.value,
                c.tolerance()
            );
            if o.holds() {
                exit::OK
            } else {
                exit::CLAIM_DRIFT
            }
        }
        Err(e) => {
            report_error(format!("{id}: {e}"));
            exit::INTERNAL
        }
    }
}

fn list(ledger: &Ledger) -> String {
    let mut s =
        String::from("| claim | paper | ours | kind | status |\n| --- | --- | --- | --- | --- |\n");
    for c in &ledger.claims {
        let paper = match (&c.paper, &c.goal) {
            (Some(p), _) => render::cell(&format!("{} ({}, {})", p.value, p.source, p.at)),
            (None, Some(g)) => render::goal_text(*g.get_ref()),
            (None, None) => "—".to_string(),
        };
        let kind = match &c.historic {
            Some(h) if c.has_no_command() => format!(
                "{}, historic ({}; no command)",
                c.kind.label(),
                render::cell(&h.get_ref().date)
            ),
            Some(h) => format!(
                "{}, historic ({})",
                c.kind.label(),
                render::cell(&h.get_ref().date)
            ),
            None => c.kind.label().to_string(),
        };
        s.push_str(&format!(
            "| `{}` {} | {} | {} | {} | {} |\n",
            c.id(),
            render::cell(&c.what),
            paper,
            render::value_text(c.value, &c.unit),
            kind,
            c.status().label()
        ));
    }
    s
}

fn measure_cmd(ledger: &Ledger, only: Option<&str>, output: &Path) -> i32 {
    use std::io::Write as _;
    let results = measure::measure(ledger, only);
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Err(e) = std::fs::create_dir_all(dir) {
            report_error(format!("cannot create {}: {e}", dir.display()));
            return exit::RUN_FAILED;
        }
    }
    let mut file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(output)
    {
        Ok(f) => f,
        Err(e) => {
            report_error(format!("cannot open {}: {e}", output.display()));
            return exit::RUN_FAILED;
        }
    };
    for m in &results {
        let got = m.got.map_or("—".to_string(), |g| format!("{g:.3}"));
        outln!(
            "{:40} stated {:>8} got {:>8} {} (load {:.2})",
            m.claim,
            m.stated,
            got,
            match m.within {
                Some(true) => "within",
                Some(false) => "OUTSIDE its tolerance",
                None => "",
            },
            m.load.unwrap_or(f64::NAN)
        );
        if m.got.is_none() {
            outln!("    {}", m.note);
        }
        let line = match serde_json::to_string(m) {
            Ok(l) => l,
            Err(e) => {
                report_error(format!("cannot encode a result: {e}"));
                return exit::INTERNAL;
            }
        };
        if let Err(e) = writeln!(file, "{line}") {
            report_error(format!("cannot write {}: {e}", output.display()));
            return exit::RUN_FAILED;
        }
    }
    outln!("appended {} line(s) to {}", results.len(), output.display());
    exit::OK
}
