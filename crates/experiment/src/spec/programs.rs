//! Real programs in a spec (docs/lab.md, "Real programs"): the `program`
//! axis (one argv, or a list of them) and the Linux guest's own settings
//! (`kernel`, `initrd`, `include`, `machine`), expanded into points of the
//! executors that run real programs (`linux`, `linux-qemu`, `native`).

use super::axes::Axes;
use super::MatrixFile;
use crate::execute::RealProgram;
use crate::point::Point;
use serde_spanned::Spanned;
use smplab_record::config::{QemuMachine, RunConfig, DEFAULT_PLATFORM};
use smplab_record::diag::{Diagnostics, SourceText};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The spec's real programs and the Linux guest's settings.
pub(super) struct ProgramAxes {
    pub(super) programs: Vec<Vec<String>>,
    /// `[None]`: the kernel `SMPLAB_LINUX_KERNEL` names when the point runs.
    pub(super) kernels: Vec<Option<PathBuf>>,
    pub(super) initrd: Option<PathBuf>,
    pub(super) include: Vec<PathBuf>,
    pub(super) machines: Vec<QemuMachine>,
}

fn strings(v: &toml::Value) -> Option<Vec<String>> {
    v.as_array()?
        .iter()
        .map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// `program = ["pigz", "-p", "2"]` is one program; `program = [["pigz",
/// ...], ["xz", ...]]` several.
fn program_axis(
    loc: &SourceText,
    v: &Spanned<toml::Value>,
    diags: &mut Diagnostics,
) -> Vec<Vec<String>> {
    let shape = "`program` takes an argv (an array of strings, e.g. [\"pigz\", \"-p\", \"2\"]) or an array of them";
    let list: Vec<Vec<String>> = match v.get_ref() {
        toml::Value::Array(a) if a.iter().all(toml::Value::is_array) && !a.is_empty() => {
            match a.iter().map(strings).collect::<Option<Vec<_>>>() {
                Some(l) => l,
                None => {
                    diags.push(loc.span(v.span(), shape));
                    return Vec::new();
                }
            }
        }
        other => match strings(other) {
            Some(argv) => vec![argv],
            None => {
                diags.push(loc.span(v.span(), shape));
                return Vec::new();
            }
        },
    };
    let mut out = Vec::new();
    for argv in list {
        let checked = RealProgram::new(argv.clone()).and_then(|p| p.resolve());
        match checked {
            Ok(_) => out.push(argv),
            Err(e) => diags.push(loc.span(v.span(), format!("`program`: {e}"))),
        }
    }
    out
}

fn path_axis(
    loc: &SourceText,
    name: &str,
    v: &Spanned<toml::Value>,
    diags: &mut Diagnostics,
) -> Vec<PathBuf> {
    let list = match v.get_ref() {
        toml::Value::String(s) => vec![s.clone()],
        other => strings(other).unwrap_or_else(|| {
            diags.push(loc.span(
                v.span(),
                format!("`{name}` takes a path or an array of paths"),
            ));
            Vec::new()
        }),
    };
    let mut out = Vec::new();
    for p in list {
        let path = PathBuf::from(&p);
        if std::fs::metadata(&path).is_err() {
            diags.push(loc.span(v.span(), format!("`{name}`: {p} cannot be read")));
        }
        out.push(path);
    }
    out
}

pub(super) fn parse(loc: &SourceText, m: &MatrixFile, diags: &mut Diagnostics) -> ProgramAxes {
    let programs = m
        .program
        .as_ref()
        .map(|v| program_axis(loc, v, diags))
        .unwrap_or_default();
    let kernels = match &m.kernel {
        None => vec![None],
        Some(v) => path_axis(loc, "kernel", v, diags)
            .into_iter()
            .map(Some)
            .collect(),
    };
    let initrd = m.initrd.as_ref().and_then(|v| {
        let mut l = path_axis(loc, "initrd", v, diags);
        if l.len() > 1 {
            diags.push(loc.span(v.span(), "`initrd` takes one path"));
        }
        l.pop()
    });
    let include = m
        .include
        .as_ref()
        .map(|v| path_axis(loc, "include", v, diags))
        .unwrap_or_default();
    let machines = match &m.machine {
        None => vec![QemuMachine::default()],
        Some(v) => super::axes::parsed(loc, "machine", v, diags),
    };
    ProgramAxes {
        programs,
        kernels,
        initrd,
        include,
        machines,
    }
}

/// The points of every executor that runs real programs, for every
/// program: the model axes collapse, the Linux guest's multiply.
pub(super) fn program_configs(
    ax: &Axes,
    pa: &ProgramAxes,
    matrix: &Spanned<MatrixFile>,
    timeout_s: u64,
) -> (Vec<Point>, BTreeSet<(usize, String)>) {
    let mut configs = Vec::new();
    let mut seen = BTreeSet::new();
    let mut problems = BTreeSet::new();
    for &executor in &ax.executors {
        for argv in &pa.programs {
            for &vc in &ax.vcpus {
                for placement in &ax.placement {
                    let mut base = RunConfig::defaults(executor, vc, DEFAULT_PLATFORM);
                    if !base.runs_real_programs() {
                        continue;
                    }
                    base.set_placement(placement.clone());
                    let mut out = vec![base];
                    super::configs::cross(&mut out, &ax.sync, |c| c.settings_mut().sync_mut());
                    super::configs::cross(&mut out, &ax.irqchip, |c| match c {
                        RunConfig::Linux(s) => Some(&mut s.irqchip),
                        _ => None,
                    });
                    super::configs::cross(&mut out, &pa.kernels, |c| {
                        linux_guest(c).map(|g| &mut g.kernel)
                    });
                    super::configs::cross(&mut out, &pa.machines, |c| match c {
                        RunConfig::LinuxQemu(s) => Some(&mut s.machine),
                        _ => None,
                    });
                    for mut config in out {
                        if let Some(g) = linux_guest(&mut config) {
                            g.initrd.clone_from(&pa.initrd);
                            g.include.clone_from(&pa.include);
                        }
                        if let Err(errs) = config.validate(None) {
                            for e in errs {
                                let span = super::configs::setting_span(matrix, e.setting);
                                problems.insert((span.start, format!("{executor}: {e}")));
                            }
                            continue;
                        }
                        let mut p = Point::for_program(argv.clone(), config);
                        p.timeout_s = timeout_s;
                        if seen.insert(p.config_key()) {
                            configs.push(p);
                        }
                    }
                }
            }
        }
    }
    (configs, problems)
}

fn linux_guest(c: &mut RunConfig) -> Option<&mut smplab_record::config::LinuxGuestSettings> {
    c.settings_mut().linux_guest_mut()
}
