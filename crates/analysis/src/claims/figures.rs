//! The in-process producers of the ledger's deterministic figures: each
//! builds the scenario its claim describes on `kvm2015` (Ding & Shan's R720
//! costs), simulates it and returns one number. The scenarios are the ones
//! of `crates/sim/tests/reproduction.rs`, which asserts their shapes; the
//! figures themselves are checked here, against docs/claims.toml.

use smplab_sim::{
    simulate, weighted_speedup, DeviceSync, Devices, Idle, Placement, Platform, Ple, Policy,
    RunRecord, Scenario, SimError, Topology, VmSpec,
};
use std::path::Path;

/// Why a figure could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Tune(#[from] crate::tune::TuneError),
    #[error("{0}")]
    Missing(String),
}

/// One producer.
pub struct Figure {
    pub name: &'static str,
    /// The scenario, for `smplab claims figures`.
    pub what: &'static str,
    pub produce: fn() -> Result<f64, FigureError>,
}

/// A producer by name.
pub fn find(name: &str) -> Option<&'static Figure> {
    FIGURES.iter().find(|f| f.name == name)
}

macro_rules! figures {
    ($( $name:literal, $what:literal => $f:expr; )*) => {
        /// Every producer.
        pub static FIGURES: &[Figure] = &[ $( Figure { name: $name, what: $what, produce: $f }, )* ];
    };
}

figures! {
    "seed000.dedup_hlt", "dedup slowdown %, 16 threads, 16 vCPUs on 16 pCPUs, HLT idle, scale 0.25" => || slowdown_16("dedup", Idle::Hlt);
    "seed000.dedup_poll", "dedup slowdown %, as above with polling idle" => || slowdown_16("dedup", Idle::Poll);
    "seed000.dedup_poll_share", "dedup's polling-idle slowdown as % of its HLT-idle slowdown, 16/16, scale 0.25" => dedup_poll_share;
    "seed000.blackscholes_hlt", "blackscholes slowdown %, 16/16, HLT idle, scale 0.25" => || slowdown_16("blackscholes", Idle::Hlt);
    "seed000.poll_over_hlt", "Σ slowdown with polling idle ÷ Σ with HLT idle over dedup, fluidanimate, ocean_ncp, vips, volrend (16/16, scale 0.25)" => poll_over_hlt;
    "seed000.ple_off_over_on_poll", "Σ slowdown with PLE off ÷ with PLE on, polling idle, over the five blocking profiles (16/16, scale 0.25)" => || ple_off_over_on(Idle::Poll);
    "seed000.ple_off_over_on_hlt", "the same with HLT idle" => || ple_off_over_on(Idle::Hlt);
    "seed000.volrend_hlt", "volrend slowdown %, 16/16, HLT idle, scale 0.25" => || slowdown_16("volrend", Idle::Hlt);
    "seed000.volrend_poll", "volrend slowdown %, 16/16, polling idle, scale 0.25" => || slowdown_16("volrend", Idle::Poll);
    "seed000.volrend_poll_removed", "% of volrend's HLT-idle slowdown that polling idle removes (16/16, scale 0.25)" => volrend_removed;
    "seed000.ocean_poll", "ocean_ncp slowdown %, 16/16, polling idle" => || slowdown_16("ocean_ncp", Idle::Poll);
    "seed000.ocean_poll_ple_off", "ocean_ncp slowdown %, 16/16, polling idle, PLE off" => ocean_ple_off;
    "seed000.apicv4_exit_cut", "% of APIC-access exits (ICR, EOI, timer) APICv removes: dedup, 4 threads, 4 vCPUs on 6 pCPUs, polling idle, PLE off" => apicv4_exit_cut;
    "seed000.apicv4_slowdown_cut", "% of dedup's slowdown APICv removes, same set-up" => apicv4_slowdown_cut;
    "seed000.apicv16_exit_cut", "% of APIC-access exits APICv removes: dedup 16/16, HLT idle, PLE off" => apicv16_exit_cut;
    "seed000.streamcluster_spin_2vms", "weighted speedup of 2 streamcluster VMs (16 vCPUs each on 16 pCPUs, spinning barrier, scale 30)" => || streamcluster_2vms(false);
    "seed000.streamcluster_block_2vms_long", "the same with the barrier blocking (spin_to_block), scale 30" => || streamcluster_2vms(true);
    "seed000.dedup_2vms", "weighted speedup of 2 dedup VMs (16 vCPUs each on 16 pCPUs, HLT idle, scale 0.25)" => || two_vms("dedup", false);
    "seed000.volrend_2vms", "weighted speedup of 2 volrend VMs (16 vCPUs each on 16 pCPUs, scale 0.25)" => || two_vms("volrend", false);
    "seed000.volrend_block_2vms", "the same with volrend's spinning turned to blocking (spin_to_block)" => || two_vms("volrend", true);
    "seed000.streamcluster_block_2vms", "weighted speedup of 2 blocking-barrier streamcluster VMs, scale 7.5" => || streamcluster_blocking(2);
    "seed000.streamcluster_block_4vms", "weighted speedup of 4 blocking-barrier streamcluster VMs, scale 7.5" => || streamcluster_blocking(4);
    "seed001.pin_over_float_streamcluster_3", "streamcluster wall pinned ÷ floating: 8 threads, 8 vCPUs on 3 pCPUs in LLC domains of 2" => || pin_over_float("streamcluster", 3);
    "seed001.pin_over_float_streamcluster_4", "the same on 4 pCPUs" => || pin_over_float("streamcluster", 4);
    "seed001.pin_over_float_streamcluster_5", "the same on 5 pCPUs" => || pin_over_float("streamcluster", 5);
    "seed001.pin_over_float_streamcluster_6", "the same on 6 pCPUs" => || pin_over_float("streamcluster", 6);
    "seed001.pin_over_float_streamcluster_7", "the same on 7 pCPUs" => || pin_over_float("streamcluster", 7);
    "seed001.pin_over_float_fluidanimate_min", "fluidanimate wall pinned ÷ floating, 8 threads, 8 vCPUs, smallest over 3-7 pCPUs in LLC domains of 2" => || fluidanimate_pin(false);
    "seed001.pin_over_float_fluidanimate_max", "the same, largest over 3-7 pCPUs" => || fluidanimate_pin(true);
    "seed002.sdb_over_slices_spin", "spin time with the SDB ÷ with 100 µs slices: spinlock, 24 vCPUs on 8 pCPUs, PLE off" => sdb_over_slices;
    "seed002.partition_over_gang", "makespan partition ÷ gang (100 µs, SDB): 2 × 8-vCPU vips VMs on 8 pCPUs" => partition_over_gang;
    "seed004.global_over_fine", "wall time global lock ÷ fine-grained: blackscholes, 16/16, 36.9 device exits/ms per vCPU, 62.98% synchronous" => global_over_fine;
    "seed004.fig37_exit_share", "Partheymüller Fig. 3.7 from Table 3.1: per-CPU exit-handling share, % (867341 exits in 470 s at 2301 cycles, 2.67 GHz)" => || Ok(100.0 * fig37().exit_handling_per_cpu);
    "seed004.fig37_sync", "the same: synchronous share of exits, %" => || Ok(100.0 * fig37().sync_share);
    "seed004.fig37_p16", "the same: parallel fraction left on 16 CPUs, %" => || Ok(100.0 * fig37_rounded().p_at(16.0));
    "seed004.fig37_projected16", "the same: I/O-thread speedup S(16), eq. 5.1" => || Ok(fig37_rounded().projected(16.0));
    "seed004.fig37_native16", "the same: native speedup S(16)" => || Ok(fig37_rounded().native(16.0));
    "seed004.fig37_loss", "the same: loss 1 - S(16)/native S(16), %, unrounded" => || { let i = fig37_rounded(); Ok(100.0 * (1.0 - i.projected(16.0) / i.native(16.0))) };
    "seed004.ordering", "1 when fine < hybrid < I/O thread < global lock (wall time), else 0" => device_ordering;
    "tune.phases_vs_best", "`smplab tune --seeds 8`: tuner ÷ best static, median over seeds (phases)" => || tune_ratio("phases", false);
    "tune.phases_vs_default", "`smplab tune --seeds 8`: tuner ÷ default, median over seeds (phases)" => || tune_ratio("phases", true);
    "tune.oltp_vs_best", "`smplab tune --workload oltp --seeds 8`: tuner ÷ best static, median" => || tune_ratio("oltp", false);
    "tune.oltp_vs_default", "`smplab tune --workload oltp --seeds 8`: tuner ÷ default, median" => || tune_ratio("oltp", true);
    "tune.phases_default_runs_s", "`smplab tune --seeds 8` on phases: the default setting's throughput, runs/s, median over seeds" => || phases_static_runs_s(false);
    "tune.phases_best_runs_s", "`smplab tune --seeds 8` on phases: the best static setting's throughput, runs/s, median over seeds" => || phases_static_runs_s(true);
    "tune.oltp_best_vs_default", "`smplab tune --workload oltp --seeds 8`: best static ÷ default, median over seeds" => oltp_best_vs_default;
    "tune.oltp_250us_vs_best", "`smplab tune --workload oltp --seeds 8 --window 250us`: tuner ÷ best static, median" => || tune_ratio_window("oltp", 250_000, false);
    "tune.oltp_250us_vs_default", "the same: tuner ÷ default" => || tune_ratio_window("oltp", 250_000, true);
    "tune.phases_seed_spread", "`smplab tune --seeds 8` on phases: how many of the 25 rows (24 static settings and the tuner) vary over the seeds" => tune_rows_that_vary;
}

fn kvm() -> Result<Platform, FigureError> {
    Ok(Platform::builtin("kvm2015")?)
}

fn vm(name: &str, n: u32, scale: f64, vcpus: u32) -> Result<VmSpec, FigureError> {
    Ok(VmSpec::from_workload(name, Some(n), scale, vcpus)?)
}

fn run(s: &Scenario) -> Result<Vec<RunRecord>, FigureError> {
    let records = simulate(s)?;
    if let Some(bad) = records.iter().find(|r| !r.is_ok()) {
        return Err(FigureError::Missing(format!(
            "a simulated run failed: {:?}",
            bad.outcome
        )));
    }
    Ok(records)
}

fn first(s: &Scenario) -> Result<RunRecord, FigureError> {
    run(s)?
        .into_iter()
        .next()
        .ok_or_else(|| FigureError::Missing("no record".into()))
}

/// Slowdown versus the same model without virtualization, in percent.
fn slowdown(r: &RunRecord) -> Result<f64, FigureError> {
    let native = r
        .sim
        .as_ref()
        .and_then(|s| s.native_wall_ns)
        .ok_or_else(|| FigureError::Missing("no native reference".into()))?;
    Ok((r.timing.wall_ns as f64 / native as f64 - 1.0) * 100.0)
}

fn slowdown_16(name: &str, idle: Idle) -> Result<f64, FigureError> {
    let mut v = vm(name, 16, 0.25, 16)?;
    v.idle = idle;
    slowdown(&first(&Scenario::new(kvm()?, 16, vec![v]))?)
}

const BLOCKING: [&str; 5] = ["dedup", "fluidanimate", "ocean_ncp", "vips", "volrend"];

fn dedup_poll_share() -> Result<f64, FigureError> {
    Ok(100.0 * slowdown_16("dedup", Idle::Poll)? / slowdown_16("dedup", Idle::Hlt)?)
}

fn poll_over_hlt() -> Result<f64, FigureError> {
    let (mut hlt, mut poll) = (0.0, 0.0);
    for name in BLOCKING {
        hlt += slowdown_16(name, Idle::Hlt)?;
        poll += slowdown_16(name, Idle::Poll)?;
    }
    Ok(poll / hlt)
}

fn ple_off_over_on(idle: Idle) -> Result<f64, FigureError> {
    let (mut on, mut off) = (0.0, 0.0);
    for name in BLOCKING {
        on += slowdown_16(name, idle)?;
        let mut v = vm(name, 16, 0.25, 16)?;
        v.idle = idle;
        v.ple = Ple::Off;
        off += slowdown(&first(&Scenario::new(kvm()?, 16, vec![v]))?)?;
    }
    Ok(off / on)
}

fn volrend_removed() -> Result<f64, FigureError> {
    let hlt = slowdown_16("volrend", Idle::Hlt)?;
    let poll = slowdown_16("volrend", Idle::Poll)?;
    Ok(100.0 * (1.0 - poll / hlt))
}

fn ocean_ple_off() -> Result<f64, FigureError> {
    let mut v = vm("ocean_ncp", 16, 0.25, 16)?;
    v.idle = Idle::Poll;
    v.ple = Ple::Off;
    slowdown(&first(&Scenario::new(kvm()?, 16, vec![v]))?)
}

/// APIC-access exits: ICR writes, EOI writes and timer programming.
pub fn apic_exits(r: &RunRecord) -> u64 {
    r.sim.as_ref().map_or(0, |s| {
        ["apic_icr", "apic_eoi", "timer"]
            .iter()
            .map(|k| s.exits.get(*k).copied().unwrap_or(0))
            .sum()
    })
}

/// Fig. 4's set-up (Ding & Shan §IV.C): the R420 (one 6-core Ivy Bridge-EN,
/// the only host with APICv), PLE off, polling idle, dedup with 4 threads in
/// a 4-vCPU VM; kvm2015's costs stand in for the R420's.
fn dedup4(apicv: bool) -> Result<RunRecord, FigureError> {
    let mut v = vm("dedup", 4, 0.25, 4)?;
    v.apicv = apicv;
    v.idle = Idle::Poll;
    v.ple = Ple::Off;
    let mut s = Scenario::new(kvm()?, 6, vec![v]);
    s.topology = Topology {
        pcpus_per_llc: Some(6),
    };
    first(&s)
}

fn cut(off: f64, on: f64) -> f64 {
    100.0 * (1.0 - on / off)
}

fn apicv4_exit_cut() -> Result<f64, FigureError> {
    Ok(cut(
        apic_exits(&dedup4(false)?) as f64,
        apic_exits(&dedup4(true)?) as f64,
    ))
}

fn apicv4_slowdown_cut() -> Result<f64, FigureError> {
    Ok(cut(slowdown(&dedup4(false)?)?, slowdown(&dedup4(true)?)?))
}

fn apicv16_exit_cut() -> Result<f64, FigureError> {
    let mk = |apicv: bool| -> Result<RunRecord, FigureError> {
        let mut v = vm("dedup", 16, 0.25, 16)?;
        v.apicv = apicv;
        v.ple = Ple::Off;
        first(&Scenario::new(kvm()?, 16, vec![v]))
    };
    Ok(cut(
        apic_exits(&mk(false)?) as f64,
        apic_exits(&mk(true)?) as f64,
    ))
}

/// Weighted speedup of `vms` copies of `v` relative to one alone (Ding & Shan §III).
fn ws(v: &VmSpec, vms: usize) -> Result<f64, FigureError> {
    let base = first(&Scenario::new(kvm()?, 16, vec![v.clone()]))?
        .timing
        .wall_ns;
    let mut s = Scenario::new(kvm()?, 16, vec![v.clone(); vms]);
    s.native_reference = false;
    Ok(weighted_speedup(base, &run(&s)?))
}

fn two_vms(name: &str, block: bool) -> Result<f64, FigureError> {
    let mut v = vm(name, 16, 0.25, 16)?;
    if block {
        v.program = v.program.spin_to_block();
    }
    ws(&v, 2)
}

fn streamcluster_2vms(block: bool) -> Result<f64, FigureError> {
    let mut v = vm("streamcluster", 16, 30.0, 16)?;
    if block {
        v.program = v.program.spin_to_block();
    }
    ws(&v, 2)
}

fn streamcluster_blocking(vms: usize) -> Result<f64, FigureError> {
    let mut v = vm("streamcluster", 16, 7.5, 16)?;
    v.program = v.program.spin_to_block();
    ws(&v, vms)
}

/// Pinned ÷ floating wall time of 8 vCPUs (8 threads) on `pcpus` pCPUs in
/// LLC domains of 2 (Kulkarni & Kulkarni Fig. 5, 6).
fn pin_over_float(name: &str, pcpus: u32) -> Result<f64, FigureError> {
    let mut wall = [0u64; 2];
    for (i, placement) in [Placement::Float, Placement::Spread]
        .into_iter()
        .enumerate()
    {
        let mut v = vm(name, 8, 1.0, 8)?;
        v.placement = placement;
        let mut s = Scenario::new(kvm()?, pcpus, vec![v]);
        s.topology = Topology {
            pcpus_per_llc: Some(2),
        };
        s.native_reference = false;
        wall[i] = first(&s)?.timing.wall_ns;
    }
    Ok(wall[1] as f64 / wall[0] as f64)
}

fn fluidanimate_pin(largest: bool) -> Result<f64, FigureError> {
    let mut ratios = Vec::new();
    for pcpus in 3..=7 {
        ratios.push(pin_over_float("fluidanimate", pcpus)?);
    }
    let pick = if largest { f64::max } else { f64::min };
    Ok(ratios.into_iter().fold(ratios_start(largest), pick))
}

fn ratios_start(largest: bool) -> f64 {
    if largest {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    }
}

fn sdb_over_slices() -> Result<f64, FigureError> {
    let mk = |sdb: bool| -> Result<u64, FigureError> {
        let mut v = vm("spinlock", 24, 0.05, 24)?;
        v.ple = Ple::Off;
        if sdb {
            v.sdb = Some(Default::default());
        }
        let mut s = Scenario::new(kvm()?, 8, vec![v]);
        s.policy = Policy::fair().with_slice(100_000);
        s.native_reference = false;
        Ok(first(&s)?.sim.map_or(0, |s| s.spin_ns))
    };
    Ok(mk(true)? as f64 / mk(false)? as f64)
}

fn partition_over_gang() -> Result<f64, FigureError> {
    let mk = |policy: &str| -> Result<u64, FigureError> {
        let mut v = vm("vips", 8, 1.0, 8)?;
        v.sdb = Some(Default::default());
        let mut s = Scenario::new(kvm()?, 8, vec![v.clone(), v]);
        s.policy = Policy::parse(policy).map_err(|e| FigureError::Missing(e.to_string()))?;
        s.native_reference = false;
        Ok(run(&s)?.iter().map(|r| r.timing.wall_ns).max().unwrap_or(0))
    };
    Ok(mk("partition:100us")? as f64 / mk("gang:100us")? as f64)
}

fn device_wall(sync: DeviceSync) -> Result<u64, FigureError> {
    let mut v = vm("blackscholes", 16, 0.25, 16)?;
    // Partheymüller's 1845 exits/s per CPU amplified 20x so the serialized
    // device work is a visible share at 16 vCPUs.
    v.devices = Some(Devices {
        exits_per_ms: 36.9,
        sync,
        synchronous: 0.6298,
    });
    let mut s = Scenario::new(kvm()?, 16, vec![v]);
    s.native_reference = false;
    Ok(first(&s)?.timing.wall_ns)
}

/// Partheymüller's Table 3.1 (kernel compile, 16 CPUs): exits, seconds,
/// cycles per exit and clock give the per-CPU handling share; synchronous and
/// asynchronous exit counts give the serialized share; p = 0.975 natively.
fn fig37() -> smplab_record::amdahl::AmdahlInputs {
    use smplab_record::amdahl::{exit_share, AmdahlInputs};
    AmdahlInputs {
        p_native: 0.975,
        exit_handling_per_cpu: exit_share(867_341.0, 470.0, 2301.0, 2.67e9),
        sync_share: 759_141.0 / (759_141.0 + 446_213.0),
    }
}

/// As the figure computes it: the per-CPU share rounded to 0.159% first.
fn fig37_rounded() -> smplab_record::amdahl::AmdahlInputs {
    smplab_record::amdahl::AmdahlInputs {
        exit_handling_per_cpu: 0.00159,
        ..fig37()
    }
}

fn global_over_fine() -> Result<f64, FigureError> {
    Ok(device_wall(DeviceSync::Global)? as f64 / device_wall(DeviceSync::Fine)? as f64)
}

fn device_ordering() -> Result<f64, FigureError> {
    let fine = device_wall(DeviceSync::Fine)?;
    let hybrid = device_wall(DeviceSync::Hybrid { bypass: 0.6 })?;
    let io = device_wall(DeviceSync::IoThread)?;
    let global = device_wall(DeviceSync::Global)?;
    Ok(f64::from(u8::from(
        fine < hybrid && hybrid < io && io < global,
    )))
}

fn tune_study(workload: &str) -> Result<crate::tune::TuneStudy, FigureError> {
    tune_study_window(
        workload,
        smplab_policy::tune::TunerConfig::default().window_ns,
    )
}

fn tune_study_window(
    workload: &str,
    window_ns: u64,
) -> Result<crate::tune::TuneStudy, FigureError> {
    let spec = crate::tune::load_spec(Path::new("seed001-matrix"))
        .map_err(crate::tune::TuneError::from)?;
    let seeds: Vec<u64> = (1..=8).collect();
    Ok(crate::tune::study(
        &spec,
        workload,
        &seeds,
        &smplab_policy::tune::TunerConfig {
            window_ns,
            ..smplab_policy::tune::TunerConfig::default()
        },
    )?)
}

fn tune_ratio(workload: &str, vs_default: bool) -> Result<f64, FigureError> {
    let window = smplab_policy::tune::TunerConfig::default().window_ns;
    tune_ratio_window(workload, window, vs_default)
}

fn tune_ratio_window(workload: &str, window_ns: u64, vs_default: bool) -> Result<f64, FigureError> {
    let study = tune_study_window(workload, window_ns)?;
    let v = if vs_default {
        &study.vs_default
    } else {
        &study.vs_best
    };
    smplab_stats::median(v).ok_or_else(|| FigureError::Missing("no seeds".into()))
}

fn phases_static_runs_s(best: bool) -> Result<f64, FigureError> {
    let study = tune_study("phases")?;
    let i = if best {
        study.best_index
    } else {
        study.default_index
    };
    study
        .statics
        .get(i)
        .and_then(|s| smplab_stats::median(&s.throughput))
        .ok_or_else(|| FigureError::Missing("no static setting".into()))
}

/// Per seed, the tuner's two ratios divide out to best static ÷ default.
fn oltp_best_vs_default() -> Result<f64, FigureError> {
    let study = tune_study("oltp")?;
    let per_seed: Vec<f64> = study
        .vs_default
        .iter()
        .zip(&study.vs_best)
        .map(|(d, b)| d / b)
        .collect();
    smplab_stats::median(&per_seed).ok_or_else(|| FigureError::Missing("no seeds".into()))
}

fn tune_rows_that_vary() -> Result<f64, FigureError> {
    let study = tune_study("phases")?;
    let varies = |v: &[f64]| v.iter().any(|x| (x - v[0]).abs() > 1e-9 * v[0].abs());
    let n = study
        .statics
        .iter()
        .filter(|s| varies(&s.throughput))
        .count()
        + usize::from(varies(&study.tuned));
    // At most 25 rows: exact in an f64.
    #[allow(clippy::cast_precision_loss)]
    Ok(n as f64)
}
