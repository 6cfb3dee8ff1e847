//! `smplab lab report`: one self-contained HTML page (inline SVG, one small
//! inline script for sorting and filtering the raw data, no external
//! resources) plus CSV exports, from a results store.
//!
//! The page answers the user's question first: a findings table written from
//! the data (per workload: slowdown with its 95% interval, the factors that
//! explain it, the remedy that helped most, whether the simulator agreed),
//! then one section per idea, each its own module, raw data last.

mod calibration;
mod csv;
pub(crate) mod data;
mod diagnosis;
pub mod diagnosis_charts;
mod exits;
mod findings;
mod overcommit;
mod precision;
mod raw;
pub mod real;
mod scaling;
mod simcheck;
mod summary;
mod workloads;

pub use precision::precision_line;
pub use summary::summary_table;

#[cfg(test)]
pub(crate) mod tests;

pub use csv::{exits_csv, metrics_csv, predictions_csv, results_csv};
pub use raw::text_summary;

use smplab_analysis::calibrate::Calibration;
use smplab_analysis::diagnose::{self, Attribution, Plan};
use smplab_analysis::metrics::{Prediction, Results};
use smplab_chart::esc;
use smplab_experiment::store::{Status, Store};
use std::fmt::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{path}: cannot write report: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    pub title: String,
    /// Free-text notes shown at the top (what was skipped and why, ...).
    pub notes: Vec<String>,
    /// Extra preformatted sections `(heading, text)`, shown before the raw data.
    pub sections: Vec<(String, String)>,
    /// A calibration measured with this run, shown as a table.
    pub calibration: Option<Calibration>,
}

/// Files a report wrote.
#[derive(Debug, Clone)]
pub struct ReportFiles {
    pub html: PathBuf,
    pub csv: Vec<PathBuf>,
}

/// What every section reads, computed once.
pub(crate) struct Ctx<'a> {
    pub results: &'a Results<'a>,
    pub store: &'a Store,
    pub workloads: Vec<String>,
    /// The diagnoses found in the store.
    pub diagnoses: Vec<(Plan, Attribution)>,
    pub predictions: Vec<Prediction>,
    pub opts: &'a ReportOptions,
}

/// The page under construction: sections in order, and the table of contents.
#[derive(Default)]
pub(crate) struct Page {
    toc: Vec<(String, String)>,
    body: String,
}

impl Page {
    /// Append a section with an `<h2 id>` heading, listed in the contents.
    pub fn section(&mut self, id: &str, title: &str, html: &str) {
        self.toc.push((id.to_string(), title.to_string()));
        let _ = write!(
            self.body,
            "<section id=\"{id}\"><h2>{}</h2>{html}</section>",
            esc(title)
        );
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;padding:16px 24px;max-width:1240px;color:#222;font-size:15px;line-height:1.4}\
h1{margin:4px 0 6px;font-size:24px}h2{border-bottom:1px solid #aaa;margin-top:36px}h3{margin:18px 0 6px}\
nav.toc{position:sticky;top:0;background:#fff;border-bottom:1px solid #ddd;padding:6px 0;z-index:1;font-size:14px}\
nav.toc a{margin-right:14px;white-space:nowrap}\
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right;vertical-align:top}\
td:first-child,th:first-child,td.l,th.l{text-align:left}th{background:#f0f0f0}\
table.findings{font-size:14px;width:100%}table.findings td,table.findings th{text-align:left}table.findings td:first-child{font-weight:bold;white-space:nowrap}\
.ci{color:#666;font-size:12px;white-space:nowrap}.sig{color:#0a6b36;font-size:12px;white-space:nowrap}.noise{color:#a05a00;font-size:12px;white-space:nowrap}\
.lead{font-size:16px}.muted{color:#666;font-size:13px}\
.note{background:#fff8dc;padding:6px 10px;border-left:4px solid #e6b800;margin:6px 0}\
.grid{display:flex;flex-wrap:wrap;gap:8px;align-items:flex-start}figure{margin:8px 0}\
details>summary{cursor:pointer;font-weight:bold;margin:6px 0}.scroll{overflow-x:auto}\
th[data-sort]{cursor:pointer}th[data-sort]:after{content:' ⇅';color:#999}pre{white-space:pre-wrap}";

/// Sorting and filtering of the raw-data tables, links that open them
/// filtered, and the page's own load time (read by the browser test).
const SCRIPT: &str = "function smplabFilter(){var f=document.getElementById('raw-filter');if(!f)return;var q=f.value.toLowerCase().split(/\\s+/).filter(Boolean);\
document.querySelectorAll('#raw-table tbody tr').forEach(function(r){var t=r.textContent.toLowerCase();r.hidden=!q.every(function(w){return t.indexOf(w)>=0;});});}\
function smplabSort(th){var tb=th.closest('table').tBodies[0];var i=Array.prototype.indexOf.call(th.parentNode.children,th);var d=th.dataset.dir==='a'?'d':'a';th.dataset.dir=d;\
var key=function(r){var c=r.cells[i];if(!c)return '';var v=c.dataset.v;if(v===undefined)return c.textContent;return v===''?-Infinity:parseFloat(v);};\
var rows=Array.prototype.slice.call(tb.rows);rows.sort(function(x,y){var a=key(x),b=key(y);var c=(typeof a==='number'&&typeof b==='number')?a-b:String(a).localeCompare(String(b));return d==='a'?c:-c;});\
rows.forEach(function(r){tb.appendChild(r);});}\
document.addEventListener('click',function(e){var a=e.target.closest('a[data-filter]');if(a){var d=document.getElementById('raw');if(d)d.open=true;var f=document.getElementById('raw-filter');if(f){f.value=a.dataset.filter;smplabFilter();}}\
var th=e.target.closest('th[data-sort]');if(th)smplabSort(th);});\
document.addEventListener('input',function(e){if(e.target.id==='raw-filter')smplabFilter();});\
window.addEventListener('load',function(){void document.body.offsetHeight;document.documentElement.setAttribute('data-load-ms',String(Math.round(performance.now())));});";

/// Render the page.
pub fn render_html(store: &Store, opts: &ReportOptions) -> String {
    let results = Results::new(store);
    let diagnoses: Vec<(Plan, Attribution)> = diagnose::detect(&results)
        .into_iter()
        .filter_map(|plan| {
            let a = diagnose::attribute(&results, &plan)?;
            Some((plan, a))
        })
        .collect();
    let mut diagnoses: Vec<(Plan, Attribution)> = diagnoses;
    // Measured diagnoses first: they are what the user's machine does.
    diagnoses.sort_by_key(|(_, a)| a.executor == smplab_record::Executor::Sim);
    let mut workloads = data::workloads(&results);
    for (_, a) in &diagnoses {
        if !workloads.contains(&a.workload) {
            workloads.push(a.workload.clone());
        }
    }
    let ctx = Ctx {
        results: &results,
        store,
        workloads,
        diagnoses,
        predictions: results.predictions(None),
        opts,
    };
    let mut page = Page::default();
    findings::render(&ctx, &mut page);
    workloads::render(&ctx, &mut page);
    diagnosis::render(&ctx, &mut page);
    scaling::render(&ctx, &mut page);
    overcommit::render(&ctx, &mut page);
    exits::render(&ctx, &mut page);
    simcheck::render(&ctx, &mut page);
    calibration::render(&ctx, &mut page);
    real::render(&ctx, &mut page);
    for (i, (title, text)) in opts.sections.iter().enumerate() {
        page.section(
            &format!("extra-{i}"),
            title,
            &format!("<pre>{}</pre>", esc(text)),
        );
    }
    raw::render(&ctx, &mut page);

    let title = if opts.title.is_empty() {
        "smplab lab report".to_string()
    } else {
        opts.title.clone()
    };
    let mut h = String::with_capacity(page.body.len() + 8192);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{t}</title><style>{STYLE}</style></head><body><h1>{t}</h1>",
        t = esc(&title)
    );
    h.push_str(&header(&ctx));
    h.push_str("<nav class=\"toc\" aria-label=\"contents\">");
    for (id, t) in &page.toc {
        let _ = write!(h, "<a href=\"#{id}\">{}</a>", esc(t));
    }
    h.push_str("</nav>");
    h.push_str(&page.body);
    let _ = writeln!(h, "<script>{SCRIPT}</script></body></html>");
    h
}

/// One line on what ran where, and the notes (what was skipped and why).
fn header(ctx: &Ctx) -> String {
    let latest = ctx.store.latest();
    let ok = latest.iter().filter(|e| e.is_ok()).count();
    let failed = latest
        .iter()
        .filter(|e| matches!(e.status, Status::Failed { .. }))
        .count();
    let skipped = latest
        .iter()
        .filter(|e| matches!(e.status, Status::Skipped { .. }))
        .count();
    let mut h = String::new();
    let host = latest
        .iter()
        .flat_map(|e| e.records.iter())
        .next()
        .map(|r| {
            format!(
                " Host: {} · {} cores · kernel {} · KVM {:?}{} · {}.",
                esc(&r.host.cpu_model),
                r.host.cores,
                esc(&r.host.kernel),
                r.host.kvm.backing,
                if r.host.nested { " (nested)" } else { "" },
                r.host.platform.describe()
            )
        })
        .unwrap_or_default();
    // Any record from an emulated CPU: its timings measure the emulator.
    let emulated = latest
        .iter()
        .flat_map(|e| e.records.iter())
        .find_map(|r| r.host.platform.timing_warning());
    let _ = write!(
        h,
        "<p class=\"muted\">{} runs: {ok} ok, {failed} failed, {skipped} skipped ({} configurations).{host} Store: <code>{}</code>.</p>",
        latest.len(),
        ctx.results.configs.len(),
        esc(&ctx.store.path().display().to_string())
    );
    if let Some(warning) = emulated {
        let _ = write!(h, "<p class=\"note\">Warning: {}.</p>", esc(warning));
    }
    for n in &ctx.opts.notes {
        let _ = write!(h, "<p class=\"note\">{}</p>", esc(n));
    }
    if let Some(line) = precision_line(ctx.results, ctx.store) {
        let _ = write!(h, "<p class=\"note\">{}</p>", esc(&line));
    }
    h
}

/// Write `index.html` and the CSV files into `dir`.
pub fn write_report(
    store: &Store,
    dir: &Path,
    opts: &ReportOptions,
) -> Result<ReportFiles, ReportError> {
    let werr = |path: &Path, source| ReportError::Write {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(|e| werr(dir, e))?;
    let results = Results::new(store);
    let mut files = ReportFiles {
        html: dir.join("index.html"),
        csv: vec![],
    };
    let write = |path: &Path, text: &str| -> Result<(), ReportError> {
        // Write to a temporary name and rename, so a reader never sees half a report.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(|e| werr(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| werr(path, e))
    };
    for (name, text) in [
        ("results.csv", results_csv(store)),
        ("metrics.csv", metrics_csv(&results)),
        ("exits.csv", exits_csv(&results)),
        ("predictions.csv", predictions_csv(&results)),
    ] {
        let p = dir.join(name);
        write(&p, &text)?;
        files.csv.push(p);
    }
    write(&files.html, &render_html(store, opts))?;
    Ok(files)
}
