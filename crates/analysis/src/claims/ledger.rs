//! The ledger's types and its parser: `docs/claims.toml` holds one
//! `[[claim]]` table per figure the README and docs state. Every problem is
//! reported as `file:line:col` (the TOML spans), all at once.

use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_record::diag::{Diagnostics, SourceText};
use std::collections::HashSet;

/// Where a figure comes from, which decides how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A deterministic simulator figure: `claims check` recomputes it exactly.
    Simulated,
    /// Measured on a host: `claims measure` re-measures it; never checked in CI.
    Measured,
    /// A deterministic figure something in the model was fitted to (a
    /// calibration, not evidence): checked for drift, never counted as reproduced.
    Fitted,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Simulated => "simulated",
            Kind::Measured => "measured",
            Kind::Fitted => "fitted",
        }
    }

    /// Recomputed by `claims check` (deterministic).
    pub fn deterministic(self) -> bool {
        matches!(self, Kind::Simulated | Kind::Fitted)
    }
}

/// How the figure stands against the paper it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Within the paper's band, and nothing was fitted to it.
    Reproduced,
    /// The paper's direction or ordering holds; its magnitude is outside the
    /// band or the paper gives none.
    Shape,
    /// Outside the paper's band (or against its direction): checked for drift
    /// at our value, so a change that moves it shows.
    Missed,
    /// Matches the paper's band but the model was fitted to it.
    Calibration,
    /// Our own figure, no paper value (speed, costs, the tuner's goals).
    Stated,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Reproduced => "reproduced",
            Status::Shape => "shape only",
            Status::Missed => "missed",
            Status::Calibration => "calibration",
            Status::Stated => "stated",
        }
    }
}

/// The paper's figure a claim reproduces (or misses).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paper {
    /// Authors, as the docs cite them: "Ding & Shan".
    pub source: String,
    /// The value as the paper states it ("173%", "about 2x", "no gain").
    pub value: String,
    /// Where: section, figure or table ("§IV.A, Fig. 3").
    #[serde(rename = "where")]
    pub at: String,
    /// The band a figure must fall in to count as reproduced, in the claim's
    /// unit: the paper's value with the stated tolerance. None when the paper
    /// gives a direction, not a number.
    pub band: Option<Spanned<[f64; 2]>>,
}

/// One figure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    /// Unique; the key `claims run ID` takes.
    pub id: Spanned<String>,
    /// What the figure is, for the tables.
    pub what: String,
    pub kind: Kind,
    pub status: Spanned<Status>,
    /// The command a user runs to get the figure.
    pub command: String,
    /// The in-process producer of a deterministic figure (`claims::figures`).
    pub figure: Option<Spanned<String>>,
    /// The value the docs state.
    pub value: f64,
    /// "%", "x", "runs/s", "ms", "" ...
    #[serde(default)]
    pub unit: String,
    /// Absolute, in the claim's unit: a recomputed value further from `value`
    /// than this has drifted. Deterministic figures: the stated value's rounding.
    pub tolerance: Spanned<f64>,
    /// The docs table (`<!-- claims:begin TABLE -->`) the claim appears in.
    pub table: Option<String>,
    pub paper: Option<Paper>,
    /// For a figure no paper gives (the tuner's ratios, held-out errors):
    /// the band the project set as its goal, in the claim's unit; `status`
    /// says whether the stated value is in it (`stated`) or not (`missed`).
    pub goal: Option<Spanned<[f64; 2]>>,
    /// Why the figure stands where it does (fitted to what, missed by how much).
    #[serde(default)]
    pub note: String,
    /// The claim's row, cell by cell, when its table has its own columns
    /// (`[[table]]`): the cell in the table's `value_column` must start with
    /// `value`, so the row cannot state another figure than the ledger.
    pub row: Option<Spanned<Vec<String>>>,
    /// The figure as the docs' prose states it, filled into
    /// `<!--claim ID-->…<!--/claim-->` by `claims render` (default: the value
    /// and its unit): it must start with `value` (or, for a range, a number
    /// within `tolerance` of it), so prose cannot state another figure than
    /// the ledger ("10–30 µs" for 20 ± 10, "1.24×").
    pub prose: Option<Spanned<String>>,
    /// A measurement no command reproduces today (an earlier code state, a
    /// one-off set-up): when and where it was taken, and where it came from.
    /// A claim whose `command` is "none…" must have one.
    pub historic: Option<Spanned<Historic>>,
}

/// When and where a historic measurement was taken.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Historic {
    /// The day (or days) it was measured: "2026-11-23".
    pub date: String,
    /// The machine and its state: "2-core PVM development host, load 6–7".
    pub host: String,
    /// How it was produced, since no command reproduces it.
    pub source: String,
}

/// A docs table with its own columns (a results table of a doc, not the
/// claim / paper / ours table): each of its claims gives its `row`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableShape {
    pub name: String,
    pub columns: Vec<String>,
    /// The column (from 0) whose cell starts with each claim's value.
    pub value_column: usize,
}

impl Claim {
    pub fn id(&self) -> &str {
        self.id.get_ref()
    }
    pub fn status(&self) -> Status {
        *self.status.get_ref()
    }
    pub fn tolerance(&self) -> f64 {
        *self.tolerance.get_ref()
    }
    /// No command reproduces the figure: its `command` says "none…".
    pub fn has_no_command(&self) -> bool {
        self.command.trim_start().starts_with("none")
    }
    /// The text `<!--claim ID-->` markers in prose hold.
    pub fn prose_text(&self) -> String {
        match &self.prose {
            Some(p) => p.get_ref().clone(),
            None => value_text(self.value, &self.unit),
        }
    }
    /// The paper's band, if it gives one.
    pub fn band(&self) -> Option<[f64; 2]> {
        self.paper
            .as_ref()
            .and_then(|p| p.band.as_ref().map(|b| *b.get_ref()))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LedgerFile {
    #[serde(default)]
    claim: Vec<Claim>,
    #[serde(default)]
    table: Vec<TableShape>,
    #[serde(default)]
    audited: Vec<Spanned<String>>,
}

/// The parsed ledger.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The file name used in messages.
    pub file: String,
    pub claims: Vec<Claim>,
    /// Tables with their own columns.
    pub tables: Vec<TableShape>,
    /// The docs (README.md, docs/NAME.md) whose every figure is a claim or
    /// exempt with its reason: `claims check` fails on one that is neither
    /// (`claims::audit`).
    pub audited: Vec<String>,
}

impl Ledger {
    /// Parse and validate `text` (named `file` in messages). `known_figure`
    /// says whether a producer name exists.
    pub fn parse(
        file: &str,
        text: &str,
        known_figure: impl Fn(&str) -> bool,
    ) -> Result<Ledger, Diagnostics> {
        let src = SourceText::new(file, text);
        let parsed: LedgerFile = toml::from_str(text)
            .map_err(|e| Diagnostics::from(src.parse_error(e.span(), e.message())))?;
        let mut problems = Diagnostics::default();
        let mut ids = HashSet::new();
        for c in &parsed.claim {
            validate(&src, c, &known_figure, &mut ids, &mut problems);
            validate_row(&src, c, &parsed.table, &mut problems);
            validate_provenance(&src, c, &mut problems);
        }
        let mut audited: Vec<String> = Vec::new();
        for a in &parsed.audited {
            let name = a.get_ref();
            let doc = name == "README.md"
                || name
                    .strip_prefix("docs/")
                    .is_some_and(|n| n.ends_with(".md") && !n.contains('/'));
            if !doc {
                problems.push(src.span(
                    a.span(),
                    format!(
                        "`audited` names `{name}`: only README.md and docs/NAME.md are audited"
                    ),
                ));
            } else if audited.contains(name) {
                problems.push(src.span(a.span(), format!("`audited` names `{name}` twice")));
            } else {
                audited.push(name.clone());
            }
        }
        problems.into_result(Ledger {
            file: file.to_string(),
            claims: parsed.claim,
            tables: parsed.table,
            audited,
        })
    }

    pub fn get(&self, id: &str) -> Option<&Claim> {
        self.claims.iter().find(|c| c.id() == id)
    }

    /// The columns of table `name`, if it has its own.
    pub fn shape(&self, name: &str) -> Option<&TableShape> {
        self.tables.iter().find(|t| t.name == name)
    }
}

/// A value as the tables and prose print it: the stated digits, then the unit.
pub fn value_text(value: f64, unit: &str) -> String {
    match unit {
        "" => format!("{value}"),
        "%" => format!("{value}%"),
        u => format!("{value} {u}"),
    }
}

/// The number a cell starts with ("2,749" is 2749; "4.04 [3.00..4.11]" is
/// 4.04; a range "10.7-12.0 M" its low end 10.7).
pub fn leading_number(cell: &str) -> Option<f64> {
    let text = cell.trim_start_matches(|ch: char| ch == '*' || ch.is_whitespace());
    let (sign, rest) = match text.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", text),
    };
    let digits: String = rest
        .chars()
        .take_while(|ch| ch.is_ascii_digit() || matches!(ch, '.' | ','))
        .filter(|ch| *ch != ',')
        .collect();
    format!("{sign}{}", digits.trim_end_matches('.'))
        .parse()
        .ok()
}

/// A claim's `prose` must state its value; a figure without a command must
/// be a historic measurement with its date and host.
fn validate_provenance(src: &SourceText<'_>, c: &Claim, problems: &mut Diagnostics) {
    let id = c.id.get_ref();
    if let Some(p) = &c.prose {
        // A range ("10–30 µs" for 20 ± 10) starts at most a tolerance away.
        let off = leading_number(p.get_ref()).map(|v| (v - c.value).abs());
        if off.is_none_or(|d| d > c.tolerance() + 1e-9) {
            problems.push(src.span(
                p.span(),
                format!(
                    "claim `{id}`: prose `{}` must start with the claim's value {} (± its tolerance {})",
                    p.get_ref(),
                    c.value,
                    c.tolerance()
                ),
            ));
        }
    }
    match &c.historic {
        None if c.has_no_command() => problems.push(src.span(
            c.id.span(),
            format!(
                "claim `{id}`: no command produces it (`{}`), so it needs `historic = {{ date, host, source }}`: when, where and how it was measured",
                c.command
            ),
        )),
        Some(h) if c.kind != Kind::Measured => problems.push(src.span(
            h.span(),
            format!(
                "claim `{id}`: only a `measured` figure can be historic; a {} figure has a producer",
                c.kind.label()
            ),
        )),
        Some(h) if [&h.get_ref().date, &h.get_ref().host, &h.get_ref().source]
            .iter()
            .any(|f| f.trim().is_empty()) =>
        {
            problems.push(src.span(
                h.span(),
                format!("claim `{id}`: `historic` needs a date, a host and a source, none empty"),
            ));
        }
        _ => {}
    }
}

/// A claim's `row` against its table's columns.
fn validate_row(
    src: &SourceText<'_>,
    c: &Claim,
    shapes: &[TableShape],
    problems: &mut Diagnostics,
) {
    let id = c.id.get_ref();
    let shape = c
        .table
        .as_deref()
        .and_then(|t| shapes.iter().find(|s| s.name == t));
    match (shape, &c.row) {
        (None, None) => {}
        (Some(s), None) => problems.push(src.span(
            c.id.span(),
            format!("claim `{id}`: table `{}` has its own columns, so the claim needs a `row`", s.name),
        )),
        (None, Some(r)) => problems.push(src.span(
            r.span(),
            format!("claim `{id}`: a `row` needs a `[[table]]` with its columns for the claim's `table`"),
        )),
        (Some(s), Some(r)) => {
            let cells = r.get_ref();
            if cells.len() != s.columns.len() {
                problems.push(src.span(
                    r.span(),
                    format!(
                        "claim `{id}`: {} cells, but table `{}` has {} columns",
                        cells.len(),
                        s.name,
                        s.columns.len()
                    ),
                ));
                return;
            }
            let stated = cells.get(s.value_column).and_then(|v| leading_number(v));
            if stated.is_none_or(|v| (v - c.value).abs() > 1e-9) {
                problems.push(src.span(
                    r.span(),
                    format!(
                        "claim `{id}`: the row's column {} (`{}`) must start with the claim's value {}",
                        s.value_column,
                        cells.get(s.value_column).map_or("", String::as_str),
                        c.value
                    ),
                ));
            }
        }
    }
}

fn validate(
    src: &SourceText<'_>,
    c: &Claim,
    known_figure: &impl Fn(&str) -> bool,
    ids: &mut HashSet<String>,
    problems: &mut Diagnostics,
) {
    let id = c.id.get_ref();
    if id.is_empty()
        || !id
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '.' | '_'))
    {
        problems.push(src.span(
            c.id.span(),
            format!("claim id `{id}`: use letters, digits, `-`, `_` and `.` only"),
        ));
    }
    if !ids.insert(id.clone()) {
        problems.push(src.span(c.id.span(), format!("claim id `{id}` appears twice")));
    }
    let tol = c.tolerance();
    if !(tol.is_finite() && tol >= 0.0) {
        problems.push(src.span(
            c.tolerance.span(),
            format!("claim `{id}`: tolerance must be a finite number ≥ 0, not {tol}"),
        ));
    }
    match (&c.figure, c.kind.deterministic()) {
        (None, true) => problems.push(src.span(
            c.id.span(),
            format!(
                "claim `{id}` is {} (deterministic) but names no `figure` to recompute it with",
                c.kind.label()
            ),
        )),
        (Some(f), _) if !known_figure(f.get_ref()) => problems.push(src.span(
            f.span(),
            format!(
                "claim `{id}`: no figure named `{}` (`smplab claims figures` lists them)",
                f.get_ref()
            ),
        )),
        _ => {}
    }
    if c.kind == Kind::Fitted && c.status() == Status::Reproduced {
        problems.push(src.span(
            c.status.span(),
            format!("claim `{id}` is fitted: it counts as `calibration`, never as `reproduced`"),
        ));
    }
    if c.kind != Kind::Fitted && c.status() == Status::Calibration {
        problems.push(src.span(
            c.status.span(),
            format!("claim `{id}`: status `calibration` is for kind `fitted` only"),
        ));
    }
    let band = match (&c.paper, &c.goal) {
        (Some(p), None) => p.band.as_ref(),
        (None, Some(g)) => Some(g),
        (Some(_), Some(g)) => {
            problems.push(src.span(
                g.span(),
                format!("claim `{id}`: a paper figure's band is paper.band, not goal"),
            ));
            return;
        }
        (None, None) => {
            if c.status() != Status::Stated {
                problems.push(src.span(
                    c.status.span(),
                    format!(
                        "claim `{id}`: status `{}` needs a paper (paper.band) or a goal to compare with",
                        c.status().label()
                    ),
                ));
            }
            return;
        }
    };
    if c.paper.is_none()
        && matches!(
            c.status(),
            Status::Reproduced | Status::Shape | Status::Calibration
        )
    {
        problems.push(src.span(
            c.status.span(),
            format!("claim `{id}`: status `{}` is for a paper's figure; against a goal say `stated` (met) or `missed`", c.status().label()),
        ));
    }
    if let Some(b) = band {
        let [lo, hi] = *b.get_ref();
        if lo.is_nan() || hi.is_nan() || lo > hi {
            problems.push(src.span(
                b.span(),
                format!("claim `{id}`: band [{lo}, {hi}] is not an interval"),
            ));
            return;
        }
        // The status must say what the band says about the stated value.
        let inside = (lo..=hi).contains(&c.value);
        let ok = match c.status() {
            Status::Reproduced | Status::Calibration => inside,
            Status::Missed => !inside,
            Status::Stated => c.paper.is_some() || inside,
            Status::Shape => true,
        };
        if !ok {
            problems.push(src.span(
                c.status.span(),
                format!(
                    "claim `{id}`: status `{}` but the stated value {} is {} the paper's band [{lo}, {hi}]",
                    c.status().label(),
                    c.value,
                    if inside { "inside" } else { "outside" }
                ),
            ));
        }
    } else if matches!(c.status(), Status::Reproduced | Status::Calibration) {
        problems.push(src.span(
            c.status.span(),
            format!(
                "claim `{id}`: `{}` needs the paper's band (paper.band)",
                c.status().label()
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[claim]]
id = "a"
what = "x"
kind = "simulated"
status = "reproduced"
command = "smplab claims run a"
figure = "f"
value = 1.5
tolerance = 0.05
paper = { source = "Ding & Shan", value = "1.4", where = "Fig. 1", band = [1.0, 2.0] }
"#;

    #[test]
    fn a_valid_claim_parses() {
        let l = Ledger::parse("c.toml", ONE, |f| f == "f").expect("parses");
        assert_eq!(l.claims.len(), 1);
        assert_eq!(l.get("a").map(Claim::tolerance), Some(0.05));
    }

    #[test]
    fn problems_are_located() {
        let e = Ledger::parse("c.toml", ONE, |_| false).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e.to_string().starts_with("c.toml:8:10: "), "{e}");
        let bad = ONE.replace("value = 1.5", "value = 2.5");
        let e = Ledger::parse("c.toml", &bad, |_| true).unwrap_err();
        assert!(e.to_string().contains("outside the paper's band"), "{e}");
        assert!(e.to_string().starts_with("c.toml:6:10: "), "{e}");
        let twice = format!("{ONE}{ONE}");
        let e = Ledger::parse("c.toml", &twice, |_| true).unwrap_err();
        assert!(e.to_string().contains("appears twice"), "{e}");
        let fitted = ONE.replace("\"simulated\"", "\"fitted\"");
        let e = Ledger::parse("c.toml", &fitted, |_| true).unwrap_err();
        assert!(e.to_string().contains("never as `reproduced`"), "{e}");
        let e = Ledger::parse("c.toml", "[[claim]]\nid = 3\n", |_| true).unwrap_err();
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
    }

    #[test]
    fn rows_must_state_the_claims_value() {
        let shape = "[[table]]\nname = \"t\"\ncolumns = [\"a\", \"b\"]\nvalue_column = 1\n";
        let row = ONE.replace(
            "value = 1.5\n",
            "value = 1.5\ntable = \"t\"\nrow = [\"x\", \"1.5 [1.2..1.9]\"]\n",
        );
        let l = Ledger::parse("c.toml", &format!("{row}{shape}"), |_| true).expect("parses");
        assert_eq!(l.shape("t").map(|s| s.value_column), Some(1));
        let wrong = row.replace("\"1.5 [", "\"1.6 [");
        let e = Ledger::parse("c.toml", &format!("{wrong}{shape}"), |_| true).unwrap_err();
        assert!(
            e.to_string()
                .contains("must start with the claim's value 1.5"),
            "{e}"
        );
        let short = row.replace("\"x\", ", "");
        let e = Ledger::parse("c.toml", &format!("{short}{shape}"), |_| true).unwrap_err();
        assert!(
            e.to_string()
                .contains("1 cells, but table `t` has 2 columns"),
            "{e}"
        );
        let e = Ledger::parse("c.toml", &row, |_| true).unwrap_err();
        assert!(e.to_string().contains("needs a `[[table]]`"), "{e}");
        assert_eq!(leading_number("2,749"), Some(2749.0));
        assert_eq!(leading_number("**0.92** (per rep)"), Some(0.92));
        assert_eq!(leading_number("10.7-12.0 M"), Some(10.7));
        assert_eq!(leading_number("-3.5%"), Some(-3.5));
        assert_eq!(leading_number("— (none)"), None);
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
    }

    #[test]
    fn prose_states_the_value_and_figures_without_a_command_are_historic() {
        let prose = ONE.replace("value = 1.5\n", "value = 1.5\nprose = \"1.5–2×\"\n");
        let l = Ledger::parse("c.toml", &prose, |_| true).expect("parses");
        assert_eq!(l.get("a").map(Claim::prose_text).as_deref(), Some("1.5–2×"));
        let wrong = prose.replace("\"1.5–2×\"", "\"2–3×\"");
        let e = Ledger::parse("c.toml", &wrong, |_| true).unwrap_err();
        assert!(
            e.to_string().contains(
                "prose `2–3×` must start with the claim's value 1.5 (± its tolerance 0.05)"
            ),
            "{e}"
        );
        let measured = ONE
            .replace("\"simulated\"", "\"measured\"")
            .replace("status = \"reproduced\"", "status = \"shape\"")
            .replace(
                "command = \"smplab claims run a\"",
                "command = \"none: see note\"",
            );
        let e = Ledger::parse("c.toml", &measured, |_| true).unwrap_err();
        assert!(
            e.to_string()
                .contains("needs `historic = { date, host, source }`"),
            "{e}"
        );
        let historic = measured.replace(
            "value = 1.5\n",
            "value = 1.5\nhistoric = { date = \"2026-11-23\", host = \"2-core PVM\", source = \"docs/host.md\" }\n",
        );
        let l = Ledger::parse("c.toml", &historic, |_| true).expect("parses");
        assert!(l.get("a").is_some_and(Claim::has_no_command));
        let e = Ledger::parse(
            "c.toml",
            &historic.replace("\"2-core PVM\"", "\" \""),
            |_| true,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("needs a date, a host and a source"),
            "{e}"
        );
        let simulated = historic.replace("\"measured\"", "\"simulated\"");
        let e = Ledger::parse("c.toml", &simulated, |_| true).unwrap_err();
        assert!(
            e.to_string()
                .contains("only a `measured` figure can be historic"),
            "{e}"
        );
    }
}
