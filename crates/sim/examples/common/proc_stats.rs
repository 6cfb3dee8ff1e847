//! What this process has used, read from /proc: shared by the scale
//! examples (`scale`, `hostsize`), which each run one simulation in-process.

/// Peak resident memory of this process, KiB (0 when /proc is unreadable).
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// User plus system CPU seconds of this process (0 when unreadable).
pub fn cpu_seconds() -> f64 {
    // utime + stime of this process from /proc/self/stat (clock ticks).
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks / 100.0)
        })
        .unwrap_or(0.0)
}
