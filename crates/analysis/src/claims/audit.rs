//! The completeness audit: every figure in README.md and docs/*.md is
//! either a claim (`<!--claim ID-->…<!--/claim-->`, filled from the ledger)
//! or exempt with its kind and reason, `<!--not-claim KIND: reason-->…<!--/not-claim-->`
//! (the two comments may be on one line or enclose whole lines). The files
//! the ledger lists as `audited` must have no other figure: `claims check`
//! (CI) and `claims audit` fail with exit 21 and file:line:col for each.
//!
//! What counts as a figure (the pattern, [`figure_pattern`]): a number
//! (digits, optional thousands commas and decimals, an optional sign or
//! `~ ≈ < > ≤ ≥ ± +`, and optionally a range `A–B`, `A-B`, `A..B`, `A to B`)
//! not glued to a word before it (so `x86`, `seed000`, `v2.1` are not), then a
//! unit or ratio sign: `%`, `pp`, `percentage point(s)`, `x` or `×` glued to
//! the number (`1.5x`, but not `0x501`), a time (`ns µs us ms s sec second(s)
//! min minute(s) hour(s)`), a size (`KiB MiB GiB TiB kB KB MB GB TB`), a
//! frequency (`Hz kHz MHz GHz`), `cycles`, or a rate (`/s`, `events/s`,
//! `runs/s`, any `word/s`); a unit spelled with letters must follow a space
//! (`12 ms`, not `8259s`: glued ones are in code spans: `--timeout 30s`),
//! while `%`, `/s`, `x` and `×` may be glued. A percentage followed by `interval`,
//! `confidence`, `CI` or `whisker(s)` is a confidence level, not a figure;
//! `A×B` with a digit after the sign (`1366×768`) is a dimension, and `0x`
//! a hex prefix (`0x..._c035`).
//!
//! Skipped: fenced code blocks (``` and ~~~), the generated tables between
//! `<!-- claims:begin -->` and `<!-- claims:end -->`, inline code spans
//! (commands and flags: `--timeout 30s`), HTML comments, and link targets
//! (`](…)`). Everything else counts, headings and hand-written tables too.
//!
//! Exemption kinds: `parameter` (a configuration value or default, a
//! threshold the code applies), `goal` (a target the project set), `paper`
//! (a paper's own figure, quoted with its citation: the reason names it),
//! `history` (a figure kept for the record: the reason gives its date,
//! YYYY-MM-DD), `example` (usage or illustration text).

use regex::Regex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const CLAIM_OPEN: &str = "<!--claim ";
const CLAIM_CLOSE: &str = "<!--/claim-->";
const EXEMPT_OPEN: &str = "<!--not-claim ";
const EXEMPT_CLOSE: &str = "<!--/not-claim-->";
const TABLE_BEGIN: &str = "<!-- claims:begin ";
const TABLE_END: &str = "<!-- claims:end -->";

/// Why a figure is not a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExemptKind {
    /// A configuration value or default, a threshold the code applies.
    Parameter,
    /// A target the project set (a goal, not a result).
    Goal,
    /// A paper's own figure, quoted with its citation.
    Paper,
    /// A figure kept for the record, with its date.
    History,
    /// Usage or illustration text.
    Example,
}

impl ExemptKind {
    pub const ALL: [ExemptKind; 5] = [
        ExemptKind::Parameter,
        ExemptKind::Goal,
        ExemptKind::Paper,
        ExemptKind::History,
        ExemptKind::Example,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ExemptKind::Parameter => "parameter",
            ExemptKind::Goal => "goal",
            ExemptKind::Paper => "paper",
            ExemptKind::History => "history",
            ExemptKind::Example => "example",
        }
    }

    fn parse(word: &str) -> Option<ExemptKind> {
        ExemptKind::ALL.into_iter().find(|k| k.label() == word)
    }
}

/// A malformed exemption or marker: the audit cannot classify the file.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("{file}:{line}:{col}: unknown exemption kind `{kind}` (parameter, goal, paper, history, example)")]
    UnknownKind {
        file: String,
        line: usize,
        col: usize,
        kind: String,
    },
    #[error(
        "{file}:{line}:{col}: `{EXEMPT_OPEN}{kind}` needs a reason: `{EXEMPT_OPEN}{kind}: why-->`"
    )]
    NoReason {
        file: String,
        line: usize,
        col: usize,
        kind: String,
    },
    #[error(
        "{file}:{line}:{col}: a `history` exemption's reason needs the figure's date (YYYY-MM-DD)"
    )]
    HistoryWithoutDate {
        file: String,
        line: usize,
        col: usize,
    },
    #[error("{file}:{line}:{col}: `{EXEMPT_OPEN}…-->` has no `{EXEMPT_CLOSE}` after it")]
    Unclosed {
        file: String,
        line: usize,
        col: usize,
    },
    #[error("{file}:{line}:{col}: an exemption inside the one opened on line {outer}")]
    Nested {
        file: String,
        line: usize,
        col: usize,
        outer: usize,
    },
    #[error("{file}:{line}:{col}: `{EXEMPT_OPEN}…-->` starts a line inside a paragraph, which makes it an HTML block that splits the paragraph: put it at the end of the line before")]
    SplitsParagraph {
        file: String,
        line: usize,
        col: usize,
    },
    #[error("{file}:{line}:{col}: `{EXEMPT_CLOSE}` closes no exemption")]
    StrayClose {
        file: String,
        line: usize,
        col: usize,
    },
    #[error(
        "{file}:{line}:{col}: `{CLAIM_OPEN}…-->` has no `{CLAIM_CLOSE}` after it on the same line"
    )]
    UnclosedClaim {
        file: String,
        line: usize,
        col: usize,
    },
    #[error("the ledger's `audited` names {file}, which is not there")]
    Missing { file: String },
    #[error("cannot read {file}: {message}")]
    Io { file: String, message: String },
}

/// A figure no marker covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmarked {
    pub line: usize,
    /// In characters, from 1.
    pub col: usize,
    pub text: String,
}

/// One doc's figures, by standing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DocAudit {
    pub file: String,
    /// Figures inside claim markers.
    pub claimed: usize,
    /// Figures inside exemptions, by kind.
    pub exempt: BTreeMap<ExemptKind, usize>,
    pub unmarked: Vec<Unmarked>,
}

impl DocAudit {
    /// Lines with at least one unmarked figure.
    pub fn unmarked_lines(&self) -> usize {
        let mut lines: Vec<usize> = self.unmarked.iter().map(|u| u.line).collect();
        lines.dedup();
        lines.len()
    }
}

/// The figure pattern (see the module's comment).
pub fn figure_pattern() -> &'static Regex {
    static PATTERN: OnceLock<Regex> = OnceLock::new();
    PATTERN.get_or_init(|| {
        let num = r"\d+(?:,\d{3})*(?:\.\d+)?";
        let sp = r"[ \u{a0}\u{202f}]?";
        // A unit spelled with letters follows a space (`8259s` is a chip).
        let space = r"[ \u{a0}\u{202f}]";
        let pattern = format!(
            r"(?:[~≈<>≤≥±+\-−]{sp})?{num}(?:{sp}(?:–|-|\.\.|to ){sp}{num})?(?:{sp}%|{sp}/s\b|{space}(?:pp\b|percentage points?\b|(?:ns|µs|us|ms|s|sec|seconds?|min|minutes?|hours?)\b|(?:[KMGT]iB|[kKMGT]B)\b|[kMG]?Hz\b|cycles\b|[A-Za-z][A-Za-z\-]*/s\b)|x\b|×)"
        );
        #[allow(clippy::expect_used)] // a constant pattern, covered by the tests
        Regex::new(&pattern).expect("the figure pattern compiles")
    })
}

/// Where a byte of a line stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zone {
    /// Not prose (code, comment, link target, a marker itself).
    Skip,
    Prose,
    Claimed,
    Exempt(ExemptKind),
}

/// The audit's state across lines.
#[derive(Default)]
struct Scan {
    fence: Option<String>,
    generated: bool,
    comment: bool,
    exempt: Option<(ExemptKind, usize)>,
    /// Inside a code span opened on an earlier line: its backtick run.
    code: Option<String>,
}

fn col_of(line: &str, byte: usize) -> usize {
    line[..byte].chars().count() + 1
}

/// Audit one doc's text (named `file` in messages).
pub fn audit_text(file: &str, text: &str) -> Result<DocAudit, AuditError> {
    let mut doc = DocAudit {
        file: file.to_string(),
        ..DocAudit::default()
    };
    let mut scan = Scan::default();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().copied().enumerate() {
        let line_no = i + 1;
        let trimmed = line.trim_start();
        if let Some(fence) = &scan.fence {
            if trimmed.starts_with(fence.as_str()) {
                scan.fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            let ch = trimmed.chars().next().unwrap_or('`');
            let n = trimmed.chars().take_while(|c| *c == ch).count();
            scan.fence = Some(ch.to_string().repeat(n));
            continue;
        }
        if scan.generated {
            scan.generated = trimmed.trim_end() != TABLE_END;
            continue;
        }
        if trimmed.starts_with(TABLE_BEGIN) {
            scan.generated = true;
            continue;
        }
        if line.trim().is_empty() {
            // A code span ends with its paragraph.
            scan.code = None;
        }
        let inside_paragraph = i > 0 && !lines[i - 1].trim().is_empty();
        if inside_paragraph && trimmed.starts_with(EXEMPT_OPEN) && scan.code.is_none() {
            return Err(AuditError::SplitsParagraph {
                file: file.into(),
                line: line_no,
                col: col_of(line, line.len() - trimmed.len()),
            });
        }
        let zones = zones(file, line_no, line, &lines[i + 1..], &mut scan)?;
        classify(line_no, line, &zones, &mut doc);
    }
    if let Some((_, opened)) = scan.exempt {
        let col = text
            .lines()
            .nth(opened - 1)
            .and_then(|l| l.find(EXEMPT_OPEN).map(|b| col_of(l, b)))
            .unwrap_or(1);
        return Err(AuditError::Unclosed {
            file: file.into(),
            line: opened,
            col,
        });
    }
    Ok(doc)
}

/// Each figure in `line`, counted by the zone it starts in.
fn classify(line_no: usize, line: &str, zones: &[Zone], doc: &mut DocAudit) {
    let mut masked = String::with_capacity(line.len());
    for (b, ch) in line.char_indices() {
        if zones[b] == Zone::Skip {
            // As many spaces as bytes, so offsets match `line`'s.
            masked.extend(std::iter::repeat_n(' ', ch.len_utf8()));
        } else {
            masked.push(ch);
        }
    }
    for m in figure_pattern().find_iter(&masked) {
        let before = masked[..m.start()].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        let after = masked[m.end()..].trim_start();
        if m.as_str().ends_with('%') && is_confidence_level(after) {
            continue;
        }
        // `0x…`: a hex prefix, not a ratio of zero.
        if m.as_str() == "0x" {
            continue;
        }
        // `1366×768`, `16×16`: a dimension, not a ratio.
        if m.as_str().ends_with('×') && masked[m.end()..].starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        match zones[m.start()] {
            Zone::Skip => {}
            Zone::Prose => doc.unmarked.push(Unmarked {
                line: line_no,
                col: col_of(line, m.start()),
                text: m.as_str().to_string(),
            }),
            Zone::Claimed => doc.claimed += 1,
            Zone::Exempt(k) => *doc.exempt.entry(k).or_default() += 1,
        }
    }
}

/// "95% interval", "95% confidence", "95% CI", "95% whiskers": a level.
fn is_confidence_level(after: &str) -> bool {
    ["interval", "confidence", "CI", "whisker"]
        .iter()
        .any(|w| after.starts_with(w))
}

/// The zone of every byte of `line`, updating the exemption and comment state.
fn zones(
    file: &str,
    line_no: usize,
    line: &str,
    following: &[&str],
    scan: &mut Scan,
) -> Result<Vec<Zone>, AuditError> {
    let mut zones = vec![Zone::Skip; line.len()];
    let mut at = 0;
    if let Some(fence) = &scan.code {
        match line.find(fence.as_str()) {
            Some(end) => {
                at = end + fence.len();
                scan.code = None;
            }
            None => return Ok(zones),
        }
    }
    let mut claim = false;
    while at < line.len() {
        let rest = &line[at..];
        if scan.comment {
            match rest.find("-->") {
                Some(end) => {
                    scan.comment = false;
                    at += end + 3;
                }
                None => at = line.len(),
            }
        } else if rest.starts_with(EXEMPT_OPEN) {
            at += open_exemption(file, line_no, line, at, scan)?;
        } else if rest.starts_with(EXEMPT_CLOSE) {
            if scan.exempt.take().is_none() {
                return Err(AuditError::StrayClose {
                    file: file.into(),
                    line: line_no,
                    col: col_of(line, at),
                });
            }
            at += EXEMPT_CLOSE.len();
        } else if rest.starts_with(CLAIM_OPEN) {
            at += claim_marker_len(file, line_no, line, at)?;
            claim = true;
        } else if rest.starts_with(CLAIM_CLOSE) {
            claim = false;
            at += CLAIM_CLOSE.len();
        } else if let Some(skip) = markup_len(rest, following, scan) {
            at += skip;
        } else {
            let ch_len = rest.chars().next().map_or(1, char::len_utf8);
            zones[at..at + ch_len].fill(scan.zone(claim));
            at += ch_len;
        }
    }
    Ok(zones)
}

impl Scan {
    /// The zone of prose here: inside a claim marker, an exemption, or neither.
    fn zone(&self, claim: bool) -> Zone {
        if claim {
            Zone::Claimed
        } else if let Some((k, _)) = self.exempt {
            Zone::Exempt(k)
        } else {
            Zone::Prose
        }
    }
}

/// The length of the `<!--claim ID-->` at byte `at` of `line`, which must
/// be closed on the same line.
fn claim_marker_len(
    file: &str,
    line_no: usize,
    line: &str,
    at: usize,
) -> Result<usize, AuditError> {
    let rest = &line[at..];
    match rest.find("-->") {
        Some(end) if rest[end..].contains(CLAIM_CLOSE) => Ok(end + 3),
        _ => Err(AuditError::UnclosedClaim {
            file: file.into(),
            line: line_no,
            col: col_of(line, at),
        }),
    }
}

/// How many bytes of not-prose markup `rest` starts with: an HTML comment
/// (one that runs on sets `scan.comment`), a code span (one that closes on a
/// later line of the paragraph sets `scan.code`), a link target. None for
/// prose, and for a backtick run that closes nowhere (a literal backtick).
fn markup_len(rest: &str, following: &[&str], scan: &mut Scan) -> Option<usize> {
    if let Some(inside) = rest.strip_prefix("<!--") {
        return Some(match inside.find("-->") {
            Some(end) => 4 + end + 3,
            None => {
                scan.comment = true;
                rest.len()
            }
        });
    }
    if rest.starts_with('`') {
        let ticks = rest.chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(ticks);
        return match rest[ticks..].find(fence.as_str()) {
            Some(end) => Some(ticks + end + ticks),
            // A span may run over lines of its paragraph.
            None if closes_later(&fence, following) => {
                scan.code = Some(fence);
                Some(rest.len())
            }
            None => None,
        };
    }
    if rest.starts_with("](") {
        return Some(rest.find(')').map_or(rest.len(), |e| e + 1));
    }
    None
}

/// A later line of the paragraph holds the backtick run `fence`.
fn closes_later(fence: &str, following: &[&str]) -> bool {
    following
        .iter()
        .take_while(|l| !l.trim().is_empty())
        .any(|l| l.contains(fence))
}

/// Open the exemption at byte `at` of `line`; returns the comment's length.
fn open_exemption(
    file: &str,
    line_no: usize,
    line: &str,
    at: usize,
    scan: &mut Scan,
) -> Result<usize, AuditError> {
    let col = col_of(line, at);
    let body_start = at + EXEMPT_OPEN.len();
    let Some(end) = line[body_start..].find("-->") else {
        return Err(AuditError::Unclosed {
            file: file.into(),
            line: line_no,
            col,
        });
    };
    let body = &line[body_start..body_start + end];
    let (word, reason) = body.split_once(':').unwrap_or((body, ""));
    let word = word.trim();
    let Some(kind) = ExemptKind::parse(word) else {
        return Err(AuditError::UnknownKind {
            file: file.into(),
            line: line_no,
            col,
            kind: word.to_string(),
        });
    };
    if reason.trim().is_empty() {
        return Err(AuditError::NoReason {
            file: file.into(),
            line: line_no,
            col,
            kind: word.to_string(),
        });
    }
    if kind == ExemptKind::History && !has_date(reason) {
        return Err(AuditError::HistoryWithoutDate {
            file: file.into(),
            line: line_no,
            col,
        });
    }
    if let Some((_, outer)) = scan.exempt {
        return Err(AuditError::Nested {
            file: file.into(),
            line: line_no,
            col,
            outer,
        });
    }
    scan.exempt = Some((kind, line_no));
    Ok(EXEMPT_OPEN.len() + end + 3)
}

/// A YYYY-MM-DD date somewhere in `text`.
fn has_date(text: &str) -> bool {
    let b = text.as_bytes();
    b.windows(10).any(|w| {
        w.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
    })
}

/// Audit every doc under `root` (README.md, docs/*.md), and check that each
/// file `audited` names exists.
pub fn audit(root: &Path, audited: &[String]) -> Result<Vec<DocAudit>, AuditError> {
    let files = super::render::doc_files(root).map_err(|e| AuditError::Io {
        file: root.display().to_string(),
        message: e.to_string(),
    })?;
    let mut docs = Vec::new();
    for path in files {
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        let text = std::fs::read_to_string(&path).map_err(|e| AuditError::Io {
            file: shown.clone(),
            message: e.to_string(),
        })?;
        docs.push(audit_text(&shown, &text)?);
    }
    if let Some(missing) = audited.iter().find(|a| !docs.iter().any(|d| &d.file == *a)) {
        return Err(AuditError::Missing {
            file: missing.clone(),
        });
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(text: &str) -> Vec<String> {
        audit_text("d.md", text)
            .expect("audits")
            .unmarked
            .into_iter()
            .map(|u| u.text)
            .collect()
    }

    #[test]
    fn figures_with_a_unit_or_ratio_are_caught() {
        assert_eq!(
            figures("It costs 12.5 ms, 3 µs, 40%, 2.1× and 1.5x, 4 MiB, 7,000 exits/s, 3 pp.\n"),
            [
                "12.5 ms",
                "3 µs",
                "40%",
                "2.1×",
                "1.5x",
                "4 MiB",
                "7,000 exits/s",
                "3 pp"
            ]
        );
        assert_eq!(
            figures("from 2–6 ms and 0.93..4.40 runs/s, −15.7 %\n"),
            ["2–6 ms", "0.93..4.40 runs/s", "−15.7 %"]
        );
        let a = audit_text("d.md", "a\nthe VM is 1.2× slower\n").expect("audits");
        assert_eq!(
            a.unmarked,
            [Unmarked {
                line: 2,
                col: 11,
                text: "1.2×".into()
            }]
        );
    }

    #[test]
    fn numbers_without_a_unit_and_identifiers_are_not_figures() {
        assert!(
            figures("a 1366×768 screen, 16×16\n").is_empty(),
            "dimensions"
        );
        assert!(
            figures("seed000 on x86 with 16 vCPUs at 0x501, 4 VMs, v2.1, ratio 0.95\n").is_empty()
        );
        assert!(figures("a 95% interval, the 95% confidence, 95% CI, 95% whiskers\n").is_empty());
        assert!(
            figures("2 sockets, 5 minutesx\n").is_empty(),
            "units end at a word boundary"
        );
    }

    #[test]
    fn code_comments_links_and_generated_tables_are_skipped() {
        let text = "```\nrun 12 ms\n```\n~~~sh\n5%\n~~~\nuse `--timeout 30s` and ``a 5% b``\n\
                    <!-- 4 ms --> [x](f.md#a-5%-b) `a\n6 ms` b\n<!--\n3 ms\n-->\n\
                    <!-- claims:begin t -->\n| 4 ms |\n<!-- claims:end -->\nafter 9 ms\n";
        let a = audit_text("d.md", text).expect("audits");
        assert_eq!(a.unmarked.len(), 1, "{a:?}");
        assert_eq!(
            (a.unmarked[0].line, a.unmarked[0].text.as_str()),
            (16, "9 ms")
        );
    }

    #[test]
    fn claim_markers_cover_their_figure() {
        let a = audit_text(
            "d.md",
            "reaches <!--claim t.x-->101.5 runs/s<!--/claim--> vs 3 ms\n",
        )
        .expect("audits");
        assert_eq!(a.claimed, 1);
        assert_eq!(
            figures("reaches <!--claim t.x-->101.5 runs/s<!--/claim--> vs 3 ms\n"),
            ["3 ms"]
        );
    }

    #[test]
    fn each_exemption_kind_is_honoured_inline_and_over_lines() {
        for kind in ExemptKind::ALL {
            let reason = if kind == ExemptKind::History {
                "2026-11-23, this host"
            } else {
                "why"
            };
            let inline = format!(
                "x <!--not-claim {}: {reason}-->6 ms<!--/not-claim--> y 7 ms\n",
                kind.label()
            );
            let a = audit_text("d.md", &inline).expect("audits");
            assert_eq!(a.exempt.get(&kind), Some(&1), "{inline}");
            assert_eq!(a.unmarked.len(), 1);
            let block = format!(
                "<!--not-claim {}: {reason}-->\n5 ms and 3%\n\n2x\n<!--/not-claim-->\n8 s\n",
                kind.label()
            );
            let a = audit_text("d.md", &block).expect("audits");
            assert_eq!(a.exempt.get(&kind), Some(&3), "{block}");
            assert_eq!(a.unmarked[0].text, "8 s");
        }
    }

    #[test]
    fn malformed_exemptions_are_located() {
        let e = |t: &str| audit_text("d.md", t).unwrap_err().to_string();
        assert_eq!(
            e("a\nb <!--not-claim guess: x-->1 ms<!--/not-claim-->\n"),
            "d.md:2:3: unknown exemption kind `guess` (parameter, goal, paper, history, example)"
        );
        assert!(e("<!--not-claim parameter-->1 ms<!--/not-claim-->\n")
            .starts_with("d.md:1:1: `<!--not-claim parameter` needs a reason"));
        assert!(
            e("<!--not-claim history: long ago-->1 ms<!--/not-claim-->\n")
                .contains("needs the figure's date")
        );
        assert!(e("x\n\n<!--not-claim goal: g-->\n1 ms\n")
            .starts_with("d.md:3:1: `<!--not-claim …-->` has no"));
        assert!(
            e("a paragraph\n<!--not-claim goal: g-->1 ms<!--/not-claim-->\n")
                .starts_with("d.md:2:1: `<!--not-claim …-->` starts a line inside a paragraph")
        );
        assert!(e("1 ms<!--/not-claim-->\n").starts_with("d.md:1:5: "));
        assert!(e("<!--not-claim goal: g--><!--not-claim goal: h-->\n")
            .contains("inside the one opened on line 1"));
    }
}
