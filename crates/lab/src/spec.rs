//! Experiment specs: a TOML file naming a matrix over executors × workloads ×
//! parameters, expanded into [`Point`]s. The format is documented in
//! docs/lab.md. Every error names file:line:col, like workload files do.

use crate::point::{Point, Variant};
use serde::Deserialize;
use serde_spanned::Spanned;
use smplab_record::Executor;
use std::collections::BTreeSet;
use std::ops::Range;
use std::path::Path;

/// A located problem in a spec file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecDiagnostic {
    pub file: String,
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl std::fmt::Display for SpecDiagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.col, self.message
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{path}: cannot read experiment spec: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// One or more located problems, one per line.
    #[error("{}", .0.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<SpecDiagnostic>),
}

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpecFile {
    name: Spanned<String>,
    #[serde(default)]
    description: String,
    repetitions: Option<Spanned<i64>>,
    timeout_s: Option<Spanned<i64>>,
    matrix: Spanned<MatrixFile>,
}

/// Every axis takes one value or an array of values.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MatrixFile {
    executor: Spanned<toml::Value>,
    workload: Spanned<toml::Value>,
    threads: Option<Spanned<toml::Value>>,
    vcpus: Option<Spanned<toml::Value>>,
    vms: Option<Spanned<toml::Value>>,
    sync: Option<Spanned<toml::Value>>,
    idle: Option<Spanned<toml::Value>>,
    pin: Option<Spanned<toml::Value>>,
    platform: Option<Spanned<toml::Value>>,
    variant: Option<Spanned<toml::Value>>,
    ple: Option<Spanned<toml::Value>>,
    apicv: Option<Spanned<toml::Value>>,
    scale: Option<Spanned<toml::Value>>,
}

/// An expanded, validated experiment.
#[derive(Debug, Clone)]
pub struct ExperimentSpec {
    pub name: String,
    pub description: String,
    pub repetitions: u32,
    pub timeout_s: u64,
    /// Every point, repetitions included, in run order (repetitions of one
    /// configuration are spread out so a slow drift of the host does not land
    /// on one configuration only).
    pub points: Vec<Point>,
}

pub const SYNC_MODES: &[&str] = &["global", "iothread", "hybrid", "fine"];
pub const DEFAULT_SCALE: f64 = 0.1;
pub const DEFAULT_REPETITIONS: u32 = 3;
pub const DEFAULT_TIMEOUT_S: u64 = 300;

struct Locator<'a> {
    file: &'a str,
    text: &'a str,
}

impl Locator<'_> {
    fn at(&self, span: Range<usize>, message: impl Into<String>) -> SpecDiagnostic {
        let mut offset = span.start.min(self.text.len());
        while offset > 0 && !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        SpecDiagnostic {
            file: self.file.to_string(),
            line: before.matches('\n').count() + 1,
            col: before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1,
            message: message.into(),
        }
    }
}

/// Check an idle policy: `hlt`, `poll`, or `haltpoll:NS`.
pub fn valid_idle(s: &str) -> Result<(), String> {
    s.parse::<smplab_guest::IdlePolicy>()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Check a pinning value: `none`, `pinned`, or a CPU list like `0,1` / `0-1`.
pub fn valid_pin(s: &str) -> Result<(), String> {
    if s == "none" || s == "pinned" {
        return Ok(());
    }
    smplab_record::cpus::parse_cpu_list(s)
        .map(|_| ())
        .map_err(|e| format!("bad pinning `{s}` ({e}); use none, pinned or a CPU list like 0,1"))
}

impl ExperimentSpec {
    pub fn from_file(path: &Path) -> Result<Self, SpecError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Io {
            path: shown.clone(),
            source,
        })?;
        Self::from_text(&shown, &text)
    }

    /// Parse and expand spec text; `file` is used only in messages.
    pub fn from_text(file: &str, text: &str) -> Result<Self, SpecError> {
        let loc = Locator { file, text };
        let raw: SpecFile = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let msg = e.message().trim().replace('\n', "; ");
            SpecError::Invalid(vec![loc.at(span, msg)])
        })?;
        let mut diags = Vec::new();
        let spec = expand(&loc, &raw, &mut diags);
        if diags.is_empty() {
            Ok(spec)
        } else {
            diags.sort_by_key(|d| (d.line, d.col));
            Err(SpecError::Invalid(diags))
        }
    }
}

/// Items of an axis (a scalar is a one-item axis).
fn items(v: &toml::Value) -> Vec<toml::Value> {
    match v {
        toml::Value::Array(a) => a.clone(),
        other => vec![other.clone()],
    }
}

fn strings(
    loc: &Locator,
    axis: &str,
    v: &Spanned<toml::Value>,
    check: impl Fn(&str) -> Result<(), String>,
    diags: &mut Vec<SpecDiagnostic>,
) -> Vec<String> {
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        diags.push(loc.at(
            v.span(),
            format!("`{axis}` is an empty list; give at least one value"),
        ));
    }
    for item in list {
        match item.as_str() {
            Some(s) => match check(s) {
                Ok(()) => out.push(s.to_string()),
                Err(m) => diags.push(loc.at(v.span(), format!("`{axis}`: {m}"))),
            },
            None => diags.push(loc.at(
                v.span(),
                format!("`{axis}` takes strings, got {}", item.type_str()),
            )),
        }
    }
    out
}

fn numbers(
    loc: &Locator,
    axis: &str,
    v: &Spanned<toml::Value>,
    min: i64,
    max: i64,
    diags: &mut Vec<SpecDiagnostic>,
) -> Vec<u32> {
    let mut out = Vec::new();
    let list = items(v.get_ref());
    if list.is_empty() {
        diags.push(loc.at(
            v.span(),
            format!("`{axis}` is an empty list; give at least one value"),
        ));
    }
    for item in list {
        match item.as_integer() {
            Some(n) if (min..=max).contains(&n) => out.push(n as u32),
            Some(n) => diags.push(loc.at(
                v.span(),
                format!("`{axis}` = {n} is out of range; use {min}..={max}"),
            )),
            None => diags.push(loc.at(
                v.span(),
                format!("`{axis}` takes whole numbers, got {}", item.type_str()),
            )),
        }
    }
    out
}

fn bools(
    loc: &Locator,
    axis: &str,
    v: &Spanned<toml::Value>,
    diags: &mut Vec<SpecDiagnostic>,
) -> Vec<bool> {
    let mut out = Vec::new();
    for item in items(v.get_ref()) {
        match item.as_bool() {
            Some(b) => out.push(b),
            None => diags.push(loc.at(
                v.span(),
                format!("`{axis}` takes true/false, got {}", item.type_str()),
            )),
        }
    }
    out
}

fn expand(loc: &Locator, raw: &SpecFile, diags: &mut Vec<SpecDiagnostic>) -> ExperimentSpec {
    let m = raw.matrix.get_ref();
    let name = raw.name.get_ref().trim().to_string();
    if name.is_empty() || name.contains(['/', '\\']) {
        diags.push(loc.at(
            raw.name.span(),
            "`name` must be non-empty and contain no path separator (it names the results store)",
        ));
    }
    let repetitions = match &raw.repetitions {
        None => DEFAULT_REPETITIONS,
        Some(r) if (1..=1000).contains(r.get_ref()) => *r.get_ref() as u32,
        Some(r) => {
            diags.push(loc.at(r.span(), "`repetitions` must be between 1 and 1000"));
            1
        }
    };
    let timeout_s = match &raw.timeout_s {
        None => DEFAULT_TIMEOUT_S,
        Some(t) if (1..=86_400).contains(t.get_ref()) => *t.get_ref() as u64,
        Some(t) => {
            diags.push(loc.at(t.span(), "`timeout_s` must be between 1 and 86400 seconds"));
            DEFAULT_TIMEOUT_S
        }
    };

    let executors: Vec<Executor> = strings(
        loc,
        "executor",
        &m.executor,
        |s| match s {
            "native" | "vm" | "qemu" | "sim" => Ok(()),
            _ => Err(format!(
                "unknown executor `{s}`; use native, vm, qemu or sim"
            )),
        },
        diags,
    )
    .iter()
    .filter_map(|s| match s.as_str() {
        "native" => Some(Executor::Native),
        "vm" => Some(Executor::Vm),
        "qemu" => Some(Executor::Qemu),
        "sim" => Some(Executor::Sim),
        _ => None,
    })
    .collect();
    let workloads = strings(
        loc,
        "workload",
        &m.workload,
        |s| {
            smplab_workload::Source::resolve(s)
                .map(|_| ())
                .map_err(|e| e.to_string().replace('\n', "; "))
        },
        diags,
    );
    let opt_nums = |v: &Option<Spanned<toml::Value>>, axis: &str, min, max, d: &mut Vec<_>| {
        v.as_ref().map(|v| numbers(loc, axis, v, min, max, d))
    };
    let threads = opt_nums(&m.threads, "threads", 1, 1024, diags);
    let vcpus = opt_nums(&m.vcpus, "vcpus", 1, 256, diags).unwrap_or_else(|| vec![2]);
    let vms = opt_nums(&m.vms, "vms", 1, 64, diags).unwrap_or_else(|| vec![1]);
    let sync = m
        .sync
        .as_ref()
        .map(|v| {
            strings(
                loc,
                "sync",
                v,
                |s| {
                    if SYNC_MODES.contains(&s) {
                        Ok(())
                    } else {
                        Err(format!(
                            "unknown sync mode `{s}`; use {}",
                            SYNC_MODES.join(", ")
                        ))
                    }
                },
                diags,
            )
        })
        .unwrap_or_else(|| vec!["global".into()]);
    let idle = m
        .idle
        .as_ref()
        .map(|v| strings(loc, "idle", v, valid_idle, diags))
        .unwrap_or_else(|| vec!["hlt".into()]);
    let pin = m
        .pin
        .as_ref()
        .map(|v| strings(loc, "pin", v, valid_pin, diags))
        .unwrap_or_else(|| vec!["none".into()]);
    let platform = m
        .platform
        .as_ref()
        .map(|v| {
            strings(
                loc,
                "platform",
                v,
                |s| {
                    if s.is_empty() {
                        Err("empty platform name".into())
                    } else {
                        Ok(())
                    }
                },
                diags,
            )
        })
        .unwrap_or_else(|| vec!["pvm-here".into()]);
    let variants: Vec<Variant> = m
        .variant
        .as_ref()
        .map(|v| {
            strings(
                loc,
                "variant",
                v,
                |s| match Variant::parse(s) {
                    Some(_) => Ok(()),
                    None => Err(format!("unknown variant `{s}`; use as-is or spin-to-block")),
                },
                diags,
            )
        })
        .unwrap_or_else(|| vec!["as-is".into()])
        .iter()
        .filter_map(|s| Variant::parse(s))
        .collect();
    let ple = m
        .ple
        .as_ref()
        .map(|v| bools(loc, "ple", v, diags))
        .unwrap_or_else(|| vec![true]);
    let apicv = m
        .apicv
        .as_ref()
        .map(|v| bools(loc, "apicv", v, diags))
        .unwrap_or_else(|| vec![false]);
    let scales: Vec<f64> = match &m.scale {
        None => vec![DEFAULT_SCALE],
        Some(v) => items(v.get_ref())
            .iter()
            .filter_map(|item| {
                let x = item
                    .as_float()
                    .or_else(|| item.as_integer().map(|i| i as f64));
                match x {
                    Some(x) if x.is_finite() && x > 0.0 => Some(x),
                    _ => {
                        diags.push(loc.at(v.span(), "`scale` takes positive numbers"));
                        None
                    }
                }
            })
            .collect(),
    };

    // Configurations first, then repetitions round-robin over them.
    let mut configs: Vec<Point> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut push = |p: Point| {
        if seen.insert(p.config_key()) {
            configs.push(p);
        }
    };
    for &executor in &executors {
        for workload in &workloads {
            for &variant in &variants {
                for &scale in &scales {
                    for &vc in &vcpus {
                        // Seed 000 runs as many threads as vCPUs unless told otherwise.
                        let ns = threads.clone().unwrap_or_else(|| vec![vc]);
                        for &n in &ns {
                            for p in &pin {
                                let base = Point {
                                    executor,
                                    workload: workload.clone(),
                                    variant,
                                    threads: n,
                                    scale,
                                    pin: p.clone(),
                                    vcpus: None,
                                    vms: 1,
                                    sync: None,
                                    idle: None,
                                    platform: None,
                                    ple: None,
                                    apicv: None,
                                    timeout_s,
                                    rep: 0,
                                    study: None,
                                };
                                if executor == Executor::Native {
                                    push(base);
                                    continue;
                                }
                                for &k in &vms {
                                    for i in &idle {
                                        let syncs: Vec<Option<String>> = match executor {
                                            // QEMU has its own device model locking.
                                            Executor::Qemu => vec![None],
                                            _ => sync.iter().cloned().map(Some).collect(),
                                        };
                                        for s in &syncs {
                                            let mut q = base.clone();
                                            q.vcpus = Some(vc);
                                            q.vms = k;
                                            q.idle = Some(i.clone());
                                            q.sync = s.clone();
                                            if executor != Executor::Sim {
                                                push(q);
                                                continue;
                                            }
                                            for pl in &platform {
                                                for &e in &ple {
                                                    for &a in &apicv {
                                                        let mut r = q.clone();
                                                        r.platform = Some(pl.clone());
                                                        r.ple = Some(e);
                                                        r.apicv = Some(a);
                                                        push(r);
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let mut points = Vec::with_capacity(configs.len() * repetitions as usize);
    for rep in 0..repetitions {
        for c in &configs {
            let mut p = c.clone();
            p.rep = rep;
            points.push(p);
        }
    }
    ExperimentSpec {
        name,
        description: raw.description.clone(),
        repetitions,
        timeout_s,
        points,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_matrix_and_collapses_unused_axes() {
        let text = r#"
name = "t"
repetitions = 2
[matrix]
executor = ["native", "vm", "sim"]
workload = "dedup"
vcpus = [1, 2]
sync = ["global", "hybrid"]
"#;
        let s = ExperimentSpec::from_text("t.toml", text).unwrap();
        // native: 2 configs (threads follow vcpus); vm: 2 vcpus × 2 sync; sim: same.
        assert_eq!(s.points.len(), (2 + 4 + 4) * 2);
        let native: Vec<_> = s
            .points
            .iter()
            .filter(|p| p.executor == Executor::Native)
            .collect();
        assert!(native.iter().all(|p| p.sync.is_none() && p.vcpus.is_none()));
        let keys: BTreeSet<_> = s.points.iter().map(|p| p.key()).collect();
        assert_eq!(keys.len(), s.points.len(), "keys are unique");
        let sim = s
            .points
            .iter()
            .find(|p| p.executor == Executor::Sim)
            .unwrap();
        assert_eq!(sim.platform.as_deref(), Some("pvm-here"));
        assert_eq!(sim.ple, Some(true));
    }

    #[test]
    fn unknown_executor_is_located() {
        let text =
            "name = \"t\"\n[matrix]\nexecutor = [\"native\", \"vmm\"]\nworkload = \"dedup\"\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:3:12:"), "{err}");
        assert!(err.contains("unknown executor `vmm`"), "{err}");
    }

    #[test]
    fn unknown_key_and_bad_value_are_located() {
        let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"dedup\"\nvcpu = 2\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("t.toml:5:1:"), "{err}");
        assert!(err.contains("vcpu"), "{err}");

        let text = "name = \"t\"\n[matrix]\nexecutor = \"vm\"\nworkload = \"nope\"\nvcpus = [0]\n";
        let err = ExperimentSpec::from_text("t.toml", text)
            .unwrap_err()
            .to_string();
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(
            lines[0].starts_with("t.toml:4:12:") && lines[0].contains("nope"),
            "{err}"
        );
        assert!(
            lines[1].starts_with("t.toml:5:9:") && lines[1].contains("out of range"),
            "{err}"
        );
    }

    #[test]
    fn missing_matrix_is_reported() {
        let err = ExperimentSpec::from_text("t.toml", "name = \"t\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("matrix"), "{err}");
        assert!(err.starts_with("t.toml:"), "{err}");
    }

    #[test]
    fn the_example_in_docs_parses() {
        let doc = include_str!("../../../docs/lab.md");
        let start = doc
            .find("```toml\n")
            .expect("docs/lab.md has a toml example")
            + 8;
        let len = doc[start..].find("```").expect("closed block");
        let s = ExperimentSpec::from_text("docs/lab.md", &doc[start..start + len])
            .unwrap_or_else(|e| panic!("docs example: {e}"));
        assert_eq!(s.name, "overhead");
        assert!(s
            .points
            .iter()
            .any(|p| p.executor == Executor::Qemu && p.sync.is_none()));
    }

    #[test]
    fn the_shipped_specs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("specs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "toml") {
                let s = ExperimentSpec::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
                assert!(!s.points.is_empty());
                n += 1;
            }
        }
        assert!(n >= 3);
    }

    #[test]
    fn validators() {
        assert!(valid_idle("haltpoll:200000").is_ok());
        assert!(valid_idle("haltpoll:x").is_err());
        assert!(valid_idle("haltpoll:0").is_err());
        assert!(
            valid_pin("0,1").is_ok() && valid_pin("0-1").is_ok() && valid_pin("pinned").is_ok()
        );
        assert!(valid_pin("compact").is_err());
    }
}
