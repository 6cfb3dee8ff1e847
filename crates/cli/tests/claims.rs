//! `smplab claims check` on the repository's ledger (so `cargo test` in CI
//! recomputes every deterministic figure the docs state), and on modified
//! copies: a drifted figure, a stale docs table and a malformed entry are
//! each caught with their own exit status.

use smplab_record::exit;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn claims(root: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smplab"))
        .arg("claims")
        .args(args)
        .arg("--root")
        .arg(root)
        .output()
        .expect("run smplab")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A scratch copy of README.md, docs/*.md and the ledger.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smplab-claims-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs")).expect("scratch dir");
    std::fs::copy(root().join("README.md"), dir.join("README.md")).expect("copy README");
    for e in std::fs::read_dir(root().join("docs")).expect("docs") {
        let p = e.expect("entry").path();
        if p.is_file() {
            std::fs::copy(&p, dir.join("docs").join(p.file_name().expect("name"))).expect("copy");
        }
    }
    dir
}

#[test]
fn every_deterministic_figure_in_the_docs_reproduces() {
    let o = claims(&root(), &["check"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(
        text(&o).contains("paper figures in the ledger"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("docs audited"), "{}", text(&o));
}

#[test]
fn a_drifted_figure_is_caught_with_its_table_row() {
    let dir = scratch("drift");
    let ledger = dir.join("docs/claims.toml");
    let t = std::fs::read_to_string(&ledger).expect("ledger");
    let drifted = t.replacen("value = 164.9\n", "value = 173.0\n", 1);
    assert_ne!(
        t, drifted,
        "the ledger states dedup's HLT slowdown as 164.9"
    );
    std::fs::write(&ledger, drifted).expect("write");
    let o = claims(&dir, &["check", "--only", "seed000.dedup-hlt"]);
    assert_eq!(o.status.code(), Some(exit::CLAIM_DRIFT), "{}", text(&o));
    assert!(
        text(&o).contains("| seed000.dedup-hlt | 173% | 164.912556 | ±0.05 |"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_docs_table_is_caught_and_render_fixes_it() {
    let dir = scratch("stale");
    let doc = dir.join("docs/sim-reproduction.md");
    let t = std::fs::read_to_string(&doc).expect("doc");
    let stale = t.replacen("| 164.9% |", "| 170.5% |", 1);
    assert_ne!(t, stale, "the Ding & Shan table shows 164.9%");
    std::fs::write(&doc, stale).expect("write");
    let o = claims(&dir, &["check", "--only", "seed004.ordering"]);
    assert_eq!(
        o.status.code(),
        Some(exit::OK),
        "a filtered check skips the tables: {}",
        text(&o)
    );
    let o = claims(&dir, &["render"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&doc).expect("doc"), t);
    std::fs::write(&doc, t.replacen("| 164.9% |", "| 170.5% |", 1)).expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_smplab"))
        .args(["claims", "check", "--root"])
        .arg(&dir)
        .output()
        .expect("run");
    assert_eq!(o.status.code(), Some(exit::STALE_DOCS), "{}", text(&o));
    assert!(text(&o).contains("sim-reproduction.md"), "{}", text(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_malformed_entry_is_located() {
    let dir = scratch("malformed");
    let ledger = dir.join("docs/claims.toml");
    let t = std::fs::read_to_string(&ledger).expect("ledger");
    let bad = t.replacen(
        "figure = \"seed000.dedup_hlt\"",
        "figure = \"seed000.no_such\"",
        1,
    );
    std::fs::write(&ledger, &bad).expect("write");
    let o = claims(&dir, &["check"]);
    assert_eq!(o.status.code(), Some(exit::BAD_INPUT), "{}", text(&o));
    let line = bad
        .lines()
        .position(|l| l.contains("seed000.no_such"))
        .expect("line")
        + 1;
    assert!(
        text(&o).contains(&format!("docs/claims.toml:{line}:10: claim `seed000.dedup-hlt`: no figure named `seed000.no_such`")),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_prose_figure_edited_away_from_the_ledger_is_caught_and_render_fixes_it() {
    let dir = scratch("prose");
    let readme = dir.join("README.md");
    let t = std::fs::read_to_string(&readme).expect("README");
    let marked = "<!--claim host.port-exit-->10–30 µs<!--/claim-->";
    assert!(
        t.contains(marked),
        "the README states PVM's exit cost from the ledger"
    );
    std::fs::write(
        &readme,
        t.replacen(marked, "<!--claim host.port-exit-->5–30 µs<!--/claim-->", 1),
    )
    .expect("write");
    let o = claims(&dir, &["check"]);
    assert_eq!(o.status.code(), Some(exit::STALE_DOCS), "{}", text(&o));
    assert!(text(&o).contains("README.md"), "{}", text(&o));
    let o = claims(&dir, &["render"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&readme).expect("README"), t);
    // The ledger decides: a new value there reaches the prose through render.
    let ledger = dir.join("docs/claims.toml");
    let l = std::fs::read_to_string(&ledger).expect("ledger");
    let moved = l.replacen("prose = \"10–30 µs\"", "prose = \"12–30 µs\"", 1);
    assert_ne!(l, moved, "host.port-exit has its prose form in the ledger");
    std::fs::write(&ledger, moved).expect("write");
    let o = claims(&dir, &["check"]);
    assert_eq!(o.status.code(), Some(exit::STALE_DOCS), "{}", text(&o));
    let o = claims(&dir, &["render"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(
        std::fs::read_to_string(&readme)
            .expect("README")
            .contains("<!--claim host.port-exit-->12–30 µs<!--/claim-->"),
        "render fills the prose from the ledger"
    );
    // A marker naming no claim is bad input, located.
    std::fs::write(
        &readme,
        t.replacen(marked, "<!--claim no.such-->1<!--/claim-->", 1),
    )
    .expect("write");
    let o = claims(&dir, &["check"]);
    assert_eq!(o.status.code(), Some(exit::BAD_INPUT), "{}", text(&o));
    assert!(
        text(&o).contains("README.md:") && text(&o).contains("no claim `no.such`"),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_audited_doc_that_gains_an_unmarked_figure_fails_the_audit() {
    let dir = scratch("audit");
    let o = claims(&dir, &["audit"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    assert!(text(&o).contains("| README.md | yes |"), "{}", text(&o));
    let readme = dir.join("README.md");
    let t = std::fs::read_to_string(&readme).expect("README");
    let line = t.lines().count() + 2;
    std::fs::write(&readme, format!("{t}\nThe guest boots in 12.5 ms.\n")).expect("write");
    let o = claims(&dir, &["audit", "README.md"]);
    assert_eq!(
        o.status.code(),
        Some(exit::UNCLAIMED_FIGURE),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains(&format!("README.md:{line}:20: `12.5 ms`")),
        "{}",
        text(&o)
    );
    // An exemption with its reason honours it; one without a reason is bad input.
    let exempt = format!("{t}\nThe guest boots in <!--not-claim example: an illustration-->12.5 ms<!--/not-claim-->.\n");
    std::fs::write(&readme, exempt).expect("write");
    let o = claims(&dir, &["audit", "README.md"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    std::fs::write(
        &readme,
        format!("{t}\n<!--not-claim example-->12.5 ms<!--/not-claim-->\n"),
    )
    .expect("write");
    let o = claims(&dir, &["audit"]);
    assert_eq!(o.status.code(), Some(exit::BAD_INPUT), "{}", text(&o));
    assert!(
        text(&o).contains(&format!("README.md:{line}:1: ")),
        "{}",
        text(&o)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_audited_doc_has_only_claimed_or_exempt_figures() {
    let o = claims(&root(), &["audit"]);
    assert_eq!(o.status.code(), Some(exit::OK), "{}", text(&o));
    for doc in ["README.md", "docs/sim-reproduction.md", "docs/vmm.md"] {
        assert!(
            text(&o).contains(&format!("| {doc} | yes |")),
            "{doc} is audited: {}",
            text(&o)
        );
    }
}
