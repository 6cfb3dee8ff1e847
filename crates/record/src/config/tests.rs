use super::*;

#[test]
fn every_setting_reads_back_what_it_prints() {
    for s in SyncMode::ALL {
        assert_eq!(s.to_string().parse::<SyncMode>(), Ok(s));
    }
    for i in [
        IdlePolicy::Hlt,
        IdlePolicy::Poll,
        IdlePolicy::HaltPoll { ns: 200_000 },
    ] {
        assert_eq!(i.to_string().parse::<IdlePolicy>(), Ok(i));
    }
    for p in [
        Placement::Float,
        Placement::Spread,
        Placement::Cpus(vec![0, 1]),
    ] {
        assert_eq!(p.to_string().parse::<Placement>().as_ref(), Ok(&p));
    }
    for p in [
        "fair",
        "gang:10ms",
        "rr:100us+safepoint:1ms",
        "partition:1s",
    ] {
        let policy: HostPolicy = p.parse().unwrap();
        assert_eq!(policy.to_string(), p);
    }
    assert_eq!(
        "fair+safepoint"
            .parse::<HostPolicy>()
            .unwrap()
            .safe_point_grace_ns,
        Some(host_policy::DEFAULT_SAFE_POINT_GRACE_NS)
    );
}

#[test]
fn bad_values_say_what_to_write() {
    assert!("mwait"
        .parse::<IdlePolicy>()
        .unwrap_err()
        .to_string()
        .contains("hlt, poll or haltpoll:NS"));
    assert!("haltpoll:0".parse::<IdlePolicy>().is_err());
    assert!("haltpoll:x".parse::<IdlePolicy>().is_err());
    assert!("compact".parse::<Placement>().is_err());
    assert!("lottery".parse::<HostPolicy>().is_err());
    assert!("fair+nap".parse::<HostPolicy>().is_err());
    assert!("fair:-1ms".parse::<HostPolicy>().is_err());
    assert!(parse_duration("1e30s").is_err());
    assert_eq!(parse_duration("1.5ms"), Ok(1_500_000));
    assert!("gobal".parse::<SyncMode>().is_err());
}

#[test]
fn serde_form_is_tagged_by_executor_and_omits_defaults() {
    let vm = RunConfig::Vm(VmSettings::new(GuestSettings::new(2), SyncMode::Global));
    let json = serde_json::to_string(&vm).unwrap();
    assert_eq!(json, r#"{"executor":"vm","vcpus":2,"sync":"global"}"#);
    let back: RunConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(back, vm);
    // A user-space irqchip is part of the key; the default is left out.
    let mut user = VmSettings::new(GuestSettings::new(2), SyncMode::Hybrid);
    user.irqchip = Irqchip::User;
    user.vmm_halt_poll_ns = 50_000;
    let user = RunConfig::Vm(user);
    let json = serde_json::to_string(&user).unwrap();
    assert_eq!(
        json,
        r#"{"executor":"vm","vcpus":2,"sync":"hybrid","irqchip":"user","vmm_halt_poll_ns":50000}"#
    );
    assert_eq!(serde_json::from_str::<RunConfig>(&json).unwrap(), user);
    assert!(
        serde_json::from_str::<RunConfig>(r#"{"executor":"vm","vcpus":1,"irqchip":"usr"}"#)
            .is_err()
    );
    let sim = RunConfig::Sim(SimSettings::new(4, "kvm2015"));
    let json = serde_json::to_string(&sim).unwrap();
    assert_eq!(
        json,
        r#"{"executor":"sim","vcpus":4,"sync":"fine","platform":"kvm2015"}"#
    );
    assert_eq!(serde_json::from_str::<RunConfig>(&json).unwrap(), sim);
    // An unknown setting is an error, never dropped.
    assert!(serde_json::from_str::<RunConfig>(r#"{"executor":"native","sync":"global"}"#).is_err());
}

#[test]
fn limits_are_the_executors_own() {
    let mut g = GuestSettings::new(128);
    let vm = RunConfig::Qemu(QemuSettings { guest: g.clone() });
    let errs = vm.validate(None).unwrap_err();
    assert_eq!(errs[0].setting, "vcpus");
    g.vcpus = 64;
    let vm = RunConfig::Qemu(QemuSettings { guest: g });
    assert!(vm.validate(Some(511)).is_ok());
    assert_eq!(vm.validate(Some(512)).unwrap_err()[0].setting, "threads");
    // The simulator models far more vCPUs than the guest kernel runs.
    assert!(RunConfig::Sim(SimSettings::new(128, "kvm2015"))
        .validate(None)
        .is_ok());
    let mut s = SimSettings::new(4, "kvm2015");
    s.placement = Placement::Cpus(vec![0, 2]);
    assert_eq!(
        RunConfig::Sim(s).validate(None).unwrap_err()[0].setting,
        "pin"
    );
    let n = RunConfig::Native(NativeSettings {
        placement: Placement::Cpus(vec![100_000]),
        ..NativeSettings::default()
    });
    assert!(n.validate(None).is_ok());
    assert!(n.check_host_cpus(2).is_err());
}

#[test]
fn irqchip_parses_prints_and_validates() {
    for i in Irqchip::ALL {
        assert_eq!(i.to_string().parse::<Irqchip>(), Ok(i));
    }
    assert_eq!(Irqchip::default(), Irqchip::Kernel);
    let err = "usr".parse::<Irqchip>().unwrap_err();
    assert!(err.to_string().contains("use kernel"), "{err}");
    // A VMM halt-poll window without the user irqchip would be silently unused.
    let mut v = VmSettings::new(GuestSettings::new(1), SyncMode::Fine);
    v.vmm_halt_poll_ns = 1000;
    let errs = RunConfig::Vm(v.clone()).validate(None).unwrap_err();
    assert_eq!(errs[0].setting, "vmm_halt_poll_ns");
    v.irqchip = Irqchip::User;
    assert!(RunConfig::Vm(v.clone()).validate(None).is_ok());
    v.vmm_halt_poll_ns = MAX_VMM_HALT_POLL_NS + 1;
    assert!(RunConfig::Vm(v.clone()).validate(None).is_err());
    v.vmm_halt_poll_ns = 0;
    assert_eq!(RunConfig::Vm(v).label(), "1vcpu fine irqchip=user hlt");
}

#[test]
fn a_host_policy_makes_a_vm_run_a_host_run() {
    let mut guest = GuestSettings::new(2);
    guest.vms = 2;
    let mut v = VmSettings::new(guest, SyncMode::Fine);
    v.host_policy = Some("spin:2ms".parse().unwrap());
    let c = RunConfig::Vm(v.clone());
    assert!(c.validate(None).is_ok());
    assert!(c.label().contains("host=spin:2ms"), "{}", c.label());
    // Stored and read back like any configuration (the results store keys by it).
    let back: RunConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    // Without a host policy the serde form is unchanged (old keys stay valid).
    let plain = RunConfig::Vm(VmSettings::new(GuestSettings::new(2), SyncMode::Fine));
    assert!(!serde_json::to_string(&plain)
        .unwrap()
        .contains("host_policy"));
    v.irqchip = Irqchip::User;
    let errs = RunConfig::Vm(v).validate(None).unwrap_err();
    assert_eq!(errs[0].setting, "host_policy");
}

#[test]
fn running_affinity_is_kept_by_a_user_level_host_run_only() {
    let mut guest = GuestSettings::new(2);
    guest.irq_affinity = IrqAffinity::Running;
    let mut v = VmSettings::new(guest, SyncMode::Fine);
    let errs = RunConfig::Vm(v.clone()).validate(None).unwrap_err();
    assert_eq!(errs[0].setting, "irq_affinity");
    v.host_policy = Some("linux".parse().unwrap());
    assert!(RunConfig::Vm(v.clone()).validate(None).is_err());
    v.host_policy = Some("rr".parse().unwrap());
    assert!(RunConfig::Vm(v).validate(None).is_ok());
}

#[test]
fn defaults_and_the_settings_trait_agree_with_each_executor() {
    for e in crate::Executor::ALL {
        let mut c = RunConfig::defaults(e, 3, DEFAULT_PLATFORM);
        assert_eq!(c.executor(), e);
        assert!(c.validate(None).is_ok(), "{e}: {:?}", c.validate(None));
        // A setting the executor lacks reads as None and cannot be set.
        use crate::Executor::{Linux, LinuxQemu, Native, Qemu, Sim};
        let has_vms = c.settings().vms().is_some();
        assert_eq!(has_vms, !matches!(e, Native | Linux | LinuxQemu), "{e}");
        c.set_vms(2);
        assert_eq!(c.vms(), if has_vms { 2 } else { 1 }, "{e}");
        assert_eq!(c.vcpus(), (e != Native).then_some(3), "{e}");
        assert_eq!(c.platform().is_some(), e == Sim, "{e}");
        assert_eq!(
            c.settings_mut().io_thread_cpus_mut().is_some(),
            !matches!(e, Qemu | Linux | LinuxQemu),
            "{e}"
        );
        // A Linux guest runs real programs only; native runs both.
        assert_eq!(c.runs_models(), !matches!(e, Linux | LinuxQemu), "{e}");
        assert_eq!(
            c.runs_real_programs(),
            matches!(e, Native | Linux | LinuxQemu),
            "{e}"
        );
        assert_eq!(c.linux_guest().is_some(), matches!(e, Linux | LinuxQemu));
    }
}
