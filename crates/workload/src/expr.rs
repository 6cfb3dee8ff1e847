//! Counts in workload files: a plain integer, or an arithmetic expression over
//! `n` (the `--threads` parameter) and `s` (the `--scale` factor), so one file
//! describes a program at every size: `threads = "3*n+2"`, `count = "400*s/n"`.
//!
//! Grammar: `expr := term (('+'|'-') term)*`, `term := factor (('*'|'/') factor)*`,
//! `factor := NUMBER | 'n' | 's' | '(' expr ')'`. Evaluated in f64 and rounded to
//! the nearest integer; a negative or non-finite result is an error.

use serde::{Deserialize, Serialize};

/// A count as written in a workload file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Count {
    Int(u64),
    Expr(String),
}

impl From<u64> for Count {
    fn from(v: u64) -> Self {
        Count::Int(v)
    }
}

/// The values expressions are evaluated with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Env {
    /// Thread parameter.
    pub n: u32,
    /// Scale factor for amounts of work.
    pub s: f64,
}

/// Why a count expression cannot be evaluated; the message has no location
/// (the caller adds file:line:col).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("unexpected `{found}` in expression `{text}`")]
    Trailing { found: char, text: String },
    #[error("expression `{text}` is {value}, not a count")]
    NotACount { text: String, value: String },
    #[error("division by zero in expression")]
    DivisionByZero,
    #[error("missing `)` in expression")]
    MissingParen,
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("unexpected `{0}` in expression (use numbers, n, s, + - * / and parentheses)")]
    Unexpected(char),
    #[error("expression ends too early")]
    EndsEarly,
}

impl Count {
    /// Evaluate with thread parameter and scale `env`.
    pub fn eval(&self, env: Env) -> Result<u64, ExprError> {
        match self {
            Count::Int(v) => Ok(*v),
            Count::Expr(text) => {
                let mut p = Parser {
                    chars: text.as_bytes(),
                    pos: 0,
                    env,
                };
                let v = p.expr()?;
                p.skip_ws();
                if p.pos != p.chars.len() {
                    return Err(ExprError::Trailing {
                        found: p.chars[p.pos] as char,
                        text: text.clone(),
                    });
                }
                if !v.is_finite() || v < -0.5 {
                    return Err(ExprError::NotACount {
                        text: text.clone(),
                        value: v.to_string(),
                    });
                }
                // Checked finite and not negative just above; f64 `as` u64
                // saturates at the top.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let count = v.round() as u64;
                Ok(count)
            }
        }
    }
}

struct Parser<'a> {
    chars: &'a [u8],
    pos: usize,
    env: Env,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.chars.len() && self.chars[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.chars.get(self.pos).copied()
    }

    fn expr(&mut self) -> Result<f64, ExprError> {
        let mut v = self.term()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.pos += 1;
            let r = self.term()?;
            v = if c == b'+' { v + r } else { v - r };
        }
        Ok(v)
    }

    fn term(&mut self) -> Result<f64, ExprError> {
        let mut v = self.factor()?;
        while let Some(c @ (b'*' | b'/')) = self.peek() {
            self.pos += 1;
            let r = self.factor()?;
            if c == b'/' && r == 0.0 {
                return Err(ExprError::DivisionByZero);
            }
            v = if c == b'*' { v * r } else { v / r };
        }
        Ok(v)
    }

    fn factor(&mut self) -> Result<f64, ExprError> {
        match self.peek() {
            Some(b'n') => {
                self.pos += 1;
                Ok(self.env.n as f64)
            }
            Some(b's') => {
                self.pos += 1;
                Ok(self.env.s)
            }
            Some(b'(') => {
                self.pos += 1;
                let v = self.expr()?;
                if self.peek() != Some(b')') {
                    return Err(ExprError::MissingParen);
                }
                self.pos += 1;
                Ok(v)
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.pos;
                while self.pos < self.chars.len()
                    && (self.chars[self.pos].is_ascii_digit()
                        || matches!(self.chars[self.pos], b'.' | b'_'))
                {
                    self.pos += 1;
                }
                let text: String = String::from_utf8_lossy(&self.chars[start..self.pos])
                    .chars()
                    .filter(|&c| c != '_')
                    .collect();
                text.parse::<f64>().map_err(|_| ExprError::NotANumber(text))
            }
            Some(c) => Err(ExprError::Unexpected(c as char)),
            None => Err(ExprError::EndsEarly),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(s: &str, n: u32) -> Result<u64, String> {
        Count::Expr(s.into())
            .eval(Env { n, s: 1.0 })
            .map_err(|e| e.to_string())
    }

    #[test]
    fn evaluates_thread_formulas() {
        assert_eq!(ev("3*n+2", 4), Ok(14));
        assert_eq!(ev("n", 7), Ok(7));
        assert_eq!(ev("(n+1)*2", 3), Ok(8));
        assert_eq!(ev("1_000_000/n", 4), Ok(250_000));
        assert_eq!(ev("10*s", 1), Ok(10));
        assert_eq!(
            Count::Expr("100*s".into()).eval(Env { n: 1, s: 0.25 }),
            Ok(25)
        );
    }

    #[test]
    fn rejects_bad_expressions() {
        assert!(ev("3*x", 1).unwrap_err().contains("unexpected `x`"));
        assert!(ev("(n", 1).unwrap_err().contains("missing `)`"));
        assert!(ev("n/0", 1).unwrap_err().contains("division by zero"));
        assert!(ev("1-5", 1).unwrap_err().contains("not a count"));
        assert!(ev("", 1).unwrap_err().contains("ends too early"));
        assert!(ev("2 2", 1).unwrap_err().contains("unexpected `2`"));
    }
}
