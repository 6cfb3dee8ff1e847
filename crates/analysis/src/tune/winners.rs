//! The winners table of a stored parameter matrix: per executor and
//! workload, the best static setting, the runner-up, the default and the
//! worst, by median throughput.

use super::{median, spread, throughput};
use serde::{Deserialize, Serialize};
use smplab_experiment::store::Store;
use smplab_record::config::RunConfig;
use std::collections::BTreeMap;

/// One configuration of a stored matrix.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cell {
    pub executor: String,
    pub workload: String,
    pub setting: String,
    pub throughput: Vec<f64>,
}

/// The three parameters of a stored run configuration.
pub fn config_setting(c: &RunConfig) -> String {
    match c {
        RunConfig::Sim(s) => super::setting_label(s),
        other => other.to_string(),
    }
}

/// Group a store's finished runs by executor, workload and setting.
pub fn cells(stores: &[Store]) -> Vec<Cell> {
    let mut map: BTreeMap<(String, String, String), Vec<f64>> = BTreeMap::new();
    for store in stores {
        for e in store.latest().into_iter().filter(|e| e.is_ok()) {
            let key = (
                e.point.config.executor().to_string(),
                e.point.workload.clone(),
                config_setting(&e.point.config),
            );
            map.entry(key).or_default().push(throughput(&e.records));
        }
    }
    map.into_iter()
        .map(|((executor, workload, setting), throughput)| Cell {
            executor,
            workload,
            setting,
            throughput,
        })
        .collect()
}

/// The default setting of each executor's matrix: the simulator's platform
/// slice with floating vCPUs, and `smplab host`'s stock `linux` pinning;
/// interrupts to vCPU 0.
pub const DEFAULT_SETTINGS: &[&str] = &[
    "slice default, floating, irq 0",
    "slice linux, pinned, irq 0",
];

/// Settings within this fraction of the winner's median count as tied.
const TIE: f64 = 0.01;

/// The winners table: per executor and workload, the best setting, the
/// runner-up, the default and the worst, by median throughput.
pub fn winners_table(cells: &[Cell]) -> String {
    use std::fmt::Write as _;
    let mut groups: BTreeMap<(&str, &str), Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        groups
            .entry((c.workload.as_str(), c.executor.as_str()))
            .or_default()
            .push(c);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:<5} {:<46} {:>9} {:>9}",
        "workload", "exec", "setting (winner first)", "runs/s", "vs dflt"
    );
    for ((workload, executor), mut list) in groups {
        list.sort_by(|a, b| median(&b.throughput).total_cmp(&median(&a.throughput)));
        let default = list
            .iter()
            .find(|c| DEFAULT_SETTINGS.contains(&c.setting.as_str()))
            .map(|c| median(&c.throughput));
        let best = list.first().map_or(f64::NAN, |c| median(&c.throughput));
        let ties = list
            .iter()
            .filter(|c| median(&c.throughput) >= best * (1.0 - TIE))
            .count();
        let mut shown: Vec<(&str, &Cell)> = Vec::new();
        if let Some(first) = list.first() {
            shown.push(("win", first));
        }
        if let Some(second) = list.get(1) {
            shown.push(("2nd", second));
        }
        if let Some(last) = list.last().filter(|_| list.len() > 2) {
            shown.push(("worst", last));
        }
        for (tag, c) in shown {
            let m = median(&c.throughput);
            let rel = default.map_or("-".to_string(), |d| format!("{:.2}x", m / d));
            let _ = writeln!(
                out,
                "{workload:<14} {executor:<5} {:<46} {:>9.1} {rel:>9}",
                format!("{tag}: {}", c.setting),
                m
            );
        }
        let _ = writeln!(
            out,
            "{:<20} {} settings, {ties} within {:.0}% of the winner; winner's runs/s median [min..max] {}",
            "",
            list.len(),
            TIE * 100.0,
            list.first().map_or("-".into(), |c| spread(&c.throughput, 2))
        );
    }
    out
}
