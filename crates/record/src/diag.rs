//! `file:line:col: message` diagnostics, shared by every file smplab parses
//! (workload files, lab experiment specs, simulator scenario and platform
//! files) so they locate problems the same way and report all of them at once.
//!
//! Parsers hold a [`SourceText`] (the file name and its text), turn byte
//! offsets or spans (from `serde_spanned::Spanned` or a TOML error's span) into
//! [`Diagnostic`]s, collect them, and return [`Diagnostics`] as their error:
//!
//! ```
//! use smplab_record::diag::{Diagnostics, SourceText};
//! let src = SourceText::new("spec.toml", "a = 1\nb = \"x\"\n");
//! let mut problems = Diagnostics::default();
//! problems.push(src.span(10..13, "b must be a number"));
//! let err = problems.into_result(()).unwrap_err();
//! assert_eq!(err.to_string(), "spec.toml:2:5: b must be a number");
//! ```

use std::ops::Range;

/// A 1-based line and column; the column counts characters, not bytes, so it
/// matches what an editor shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub line: usize,
    pub col: usize,
}

impl Position {
    /// The position of byte `offset` in `text`. An offset past the end is the
    /// end; one inside a multi-byte character is that character.
    pub fn of(text: &str, offset: usize) -> Position {
        let mut offset = offset.min(text.len());
        while offset > 0 && !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        Position {
            line: before.matches('\n').count() + 1,
            col: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
        }
    }
}

/// One located problem: prints as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{}:{}: {message}", .at.line, .at.col)]
pub struct Diagnostic {
    pub file: String,
    pub at: Position,
    pub message: String,
}

impl Diagnostic {
    pub fn line(&self) -> usize {
        self.at.line
    }
    pub fn col(&self) -> usize {
        self.at.col
    }
}

/// A file's name (as it appears in messages) and its text: turns byte offsets
/// into located diagnostics.
#[derive(Debug, Clone, Copy)]
pub struct SourceText<'a> {
    pub file: &'a str,
    pub text: &'a str,
}

impl<'a> SourceText<'a> {
    pub fn new(file: &'a str, text: &'a str) -> Self {
        SourceText { file, text }
    }

    /// A diagnostic at byte `offset`.
    pub fn at(&self, offset: usize, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            file: self.file.to_string(),
            at: Position::of(self.text, offset),
            message: message.into(),
        }
    }

    /// A diagnostic at the start of `span` (as `Spanned::span()` gives it).
    pub fn span(&self, span: Range<usize>, message: impl Into<String>) -> Diagnostic {
        self.at(span.start, message)
    }

    /// A diagnostic for a deserializer's error: its span if it has one, else
    /// the start of the file. The message is flattened to one line.
    pub fn parse_error(&self, span: Option<Range<usize>>, message: &str) -> Diagnostic {
        self.at(
            span.map_or(0, |s| s.start),
            message.trim().replace('\n', "; "),
        )
    }
}

/// Every problem found in one or more files, in file order: prints one
/// diagnostic per line. Parsers collect into it and report all at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }
    pub fn as_slice(&self) -> &[Diagnostic] {
        &self.0
    }
    /// `Ok(value)` when nothing was found, else every problem sorted by file,
    /// line and column (the order a reader fixes them in).
    pub fn into_result<T>(mut self, value: T) -> Result<T, Diagnostics> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            self.0.sort_by(|a, b| (&a.file, a.at).cmp(&(&b.file, b.at)));
            Err(self)
        }
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl From<Vec<Diagnostic>> for Diagnostics {
    fn from(v: Vec<Diagnostic>) -> Self {
        Diagnostics(v)
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_lines_and_characters() {
        let t = "ab\nçd = 1\n";
        assert_eq!(Position::of(t, 0), Position { line: 1, col: 1 });
        assert_eq!(Position::of(t, 3), Position { line: 2, col: 1 });
        // `d` follows a two-byte character: byte 5, column 2.
        assert_eq!(Position::of(t, 5), Position { line: 2, col: 2 });
        // Inside the two-byte character: that character.
        assert_eq!(Position::of(t, 4), Position { line: 2, col: 1 });
        // Past the end: the end.
        assert_eq!(Position::of(t, 999), Position { line: 3, col: 1 });
    }

    #[test]
    fn all_problems_sorted_one_per_line() {
        let src = SourceText::new("f.toml", "x = 1\ny = 2\n");
        let mut d = Diagnostics::default();
        d.push(src.at(6, "second"));
        d.push(src.span(0..1, "first"));
        d.push(src.parse_error(None, "third\nline"));
        let e = d.into_result(()).unwrap_err();
        assert_eq!(e.len(), 3);
        assert_eq!(
            e.to_string(),
            "f.toml:1:1: first\nf.toml:1:1: third; line\nf.toml:2:1: second"
        );
        assert_eq!(e.as_slice()[2].line(), 2);
        assert_eq!(Diagnostics::default().into_result(7), Ok(7));
    }
}
