use smplab_sim::*;
fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (prof, pcpus, oc, vcpus, plat) = (a[0].as_str(), a[1].parse::<u32>().unwrap(), a[2].parse::<u32>().unwrap(), a[3].parse::<u32>().unwrap(), a.get(4).map(|s| s.as_str()).unwrap_or("kvm2015"));
    let vms = (pcpus * oc / vcpus).max(2) as usize;
    let v = VmSpec::from_workload(prof, Some(vcpus), 1000.0, vcpus).unwrap();
    let mut s = Scenario::new(Platform::builtin(plat).unwrap(), pcpus, vec![v; vms]);
    s.horizon_ns = Some(a.get(5).map_or(200, |h| h.parse::<u64>().unwrap()) * 1_000_000);
    s.native_reference = false;
    for r in simulate(&s).unwrap() {
        let sim = r.sim.as_ref().unwrap();
        let ops: u64 = r.counters.ops.iter().filter(|(k, _)| !k.ends_with("_iters") && !k.ends_with("_bytes")).map(|(_, v)| *v).sum();
        let g = |k: &str| *sim.vcpu_time_ns.get(k).unwrap_or(&0) as f64 / 1e6;
        let tot: f64 = sim.vcpu_time_ns.values().sum::<u64>() as f64 / 1e6;
        let off = g("steal") + g("spin_yield") + g("idle_halted") + g("wake_latency");
        println!("ops {ops:>8} oncpu {:>7.1} steal {:>7.1} yield {:>7.1} halted {:>7.1} user {:>7.1} spin_sd {:>6.1} ple {:>6.1}", tot - off, g("steal"), g("spin_yield"), g("idle_halted"), g("user"), g("spin_shootdown"), g("exit_ple"));
    }
}
