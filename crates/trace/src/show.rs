//! `smplab trace show`: a text summary of a trace and an HTML page with the
//! same tables and a per-thread timeline (SVG, no scripts; colours as in the
//! lab report, Okabe–Ito).

use crate::analyze::{Analysis, ObjKind};
use crate::format::{Ending, Kind, Trace};
use std::fmt::Write;

const PALETTE: &[&str] = &[
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];

fn colour(k: ObjKind) -> &'static str {
    PALETTE[k as usize % PALETTE.len()]
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub fn fmt_ns(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000_000 => format!("{:.2} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} ms", n as f64 / 1e6),
        n if n >= 1_000 => format!("{:.1} µs", n as f64 / 1e3),
        n => format!("{n} ns"),
    }
}

fn status_line(trace: &Trace) -> String {
    let how = match trace.ending {
        Some(Ending::Exited(c)) => format!("exited with status {c}"),
        Some(Ending::Signaled(s)) => format!("killed by signal {s}"),
        None => "end not recorded (smplab itself was stopped)".into(),
    };
    format!(
        "{}; trace {}",
        how,
        if trace.complete() {
            "complete"
        } else {
            "INCOMPLETE (events after the last flush are lost)"
        }
    )
}

/// The text summary.
pub fn summary(trace: &Trace, a: &Analysis) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "program: {}", trace.argv.join(" "));
    let _ = writeln!(o, "status:  {}", status_line(trace));
    let wall = trace.end_ns().saturating_sub(trace.start_ns);
    let _ = writeln!(
        o,
        "wall:    {}   threads: {}   events: {}",
        fmt_ns(wall),
        a.threads.len(),
        trace.event_count()
    );
    let _ = writeln!(o, "\nobjects          count      calls   acquired  contended      waits   wake-ups     failed   blocked");
    for (k, c) in &a.kinds {
        let _ = writeln!(
            o,
            "{:<12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}   {}",
            k.name(),
            c.objects,
            c.calls,
            c.acquisitions,
            c.contended,
            c.waits,
            c.wakeups,
            c.failed,
            fmt_ns(c.blocked_ns)
        );
    }
    if a.unmatched_waits > 0 {
        let _ = writeln!(
            o,
            "({} condition waits returned with no signal to match: spurious or unseen)",
            a.unmatched_waits
        );
    }
    let _ = writeln!(
        o,
        "\nthread  role        events        cpu    blocked   lifetime"
    );
    for t in &a.threads {
        let _ = writeln!(
            o,
            "{:>6}  {:<10} {:>7} {:>10} {:>10} {:>10}{}",
            t.index,
            t.role,
            t.events,
            fmt_ns(t.cpu_ns),
            fmt_ns(t.blocked_ns),
            fmt_ns(t.end_ns.saturating_sub(t.start_ns)),
            if t.exited { "" } else { "  (no exit seen)" }
        );
    }
    o
}

/// The per-thread timeline: a lane per thread from its first to its last
/// event, with the spans it spent blocked coloured by object kind. Spans
/// shorter than a pixel are merged so big traces stay small.
// Casts: the span is a finite, non-negative plot coordinate; f64 `as` u64 saturates.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn timeline_svg(trace: &Trace, a: &Analysis) -> String {
    let (w, lane, left, top) = (960.0, 18.0, 110.0, 30.0);
    let t0 = trace.start_ns;
    let span = trace.end_ns().saturating_sub(t0).max(1) as f64;
    let pw = w - left - 20.0;
    let x = |t: u64| left + (t.saturating_sub(t0) as f64 / span) * pw;
    let h = top + lane * a.threads.len() as f64 + 50.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\
         <text x=\"{left}\" y=\"16\" font-size=\"13\">Per-thread timeline: grey = running or runnable, colour = blocked</text>"
    );
    for (i, t) in a.threads.iter().enumerate() {
        let y = top + lane * i as f64;
        let _ = write!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#ddd\"/>",
            left - 6.0,
            y + lane * 0.7,
            esc(&format!("t{} {}", t.index, t.role)),
            x(t.start_ns),
            y + 2.0,
            (x(t.end_ns) - x(t.start_ns)).max(1.0),
            lane - 4.0
        );
        let mut last: Option<(f64, f64, ObjKind)> = None;
        let flush = |s: &mut String, r: (f64, f64, ObjKind)| {
            let _ = write!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"/>",
                r.0,
                y + 2.0,
                (r.1 - r.0).max(0.5),
                lane - 4.0,
                colour(r.2)
            );
        };
        for e in trace.threads.get(t.index).into_iter().flatten() {
            if e.wait_ns == 0 || matches!(e.kind, Kind::ThreadStart | Kind::ThreadExit) {
                continue;
            }
            let k = ObjKind::of(e.kind);
            let (a0, a1) = (x(e.t_ns), x(e.end_ns()));
            match last {
                Some((b0, b1, bk)) if bk == k && a0 - b1 < 1.0 => last = Some((b0, a1.max(b1), k)),
                Some(r) => {
                    flush(&mut s, r);
                    last = Some((a0, a1, k));
                }
                None => last = Some((a0, a1, k)),
            }
        }
        if let Some(r) = last {
            flush(&mut s, r);
        }
    }
    // Legend and time axis.
    let y = top + lane * a.threads.len() as f64 + 18.0;
    let _ = write!(
        s,
        "<text x=\"{left}\" y=\"{y}\">0</text><text x=\"{}\" y=\"{y}\" text-anchor=\"end\">{}</text>",
        left + pw,
        esc(&fmt_ns(span as u64))
    );
    let mut lx = left + 60.0;
    for k in [
        ObjKind::Mutex,
        ObjKind::Cond,
        ObjKind::RwLock,
        ObjKind::Barrier,
        ObjKind::Spin,
        ObjKind::Sem,
        ObjKind::Thread,
    ] {
        let _ = write!(
            s,
            "<rect x=\"{lx}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"{y}\">{}</text>",
            y - 9.0,
            colour(k),
            lx + 14.0,
            if k == ObjKind::Thread { "join" } else { k.name() }
        );
        lx += 90.0;
    }
    s.push_str("</svg>");
    s
}

/// A self-contained HTML page: summary and timeline.
pub fn html(trace: &Trace, a: &Analysis) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>smplab trace: {}</title>\
         <style>body{{font-family:sans-serif;margin:2em;max-width:1000px}}\
         table{{border-collapse:collapse}}td,th{{padding:2px 8px;border-bottom:1px solid #ddd;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}</style></head><body>\
         <h1>smplab trace</h1><p><code>{}</code><br>{}</p>",
        esc(&trace.argv.join(" ")),
        esc(&trace.argv.join(" ")),
        esc(&status_line(trace))
    );
    o.push_str("<h2>Objects</h2><table><tr><th>kind</th><th>objects</th><th>calls</th><th>acquired</th><th>contended</th><th>waits</th><th>wake-ups</th><th>failed</th><th>blocked</th></tr>");
    for (k, c) in &a.kinds {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            k.name(),
            c.objects,
            c.calls,
            c.acquisitions,
            c.contended,
            c.waits,
            c.wakeups,
            c.failed,
            esc(&fmt_ns(c.blocked_ns))
        );
    }
    o.push_str("</table><h2>Threads</h2><table><tr><th>thread</th><th>role</th><th>events</th><th>CPU</th><th>blocked</th><th>lifetime</th></tr>");
    for t in &a.threads {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            t.index,
            esc(&t.role),
            t.events,
            esc(&fmt_ns(t.cpu_ns)),
            esc(&fmt_ns(t.blocked_ns)),
            esc(&fmt_ns(t.end_ns.saturating_sub(t.start_ns)))
        );
    }
    o.push_str("</table><h2>Timeline</h2>");
    o.push_str(&timeline_svg(trace, a));
    o.push_str("</body></html>\n");
    o
}
