//! Model check (loom) of the thread-safe LAPIC and PIC's raise / prioritize /
//! acknowledge / EOI paths: every interleaving of a raising thread and the
//! owning vCPU (within the preemption bound) must deliver each interrupt exactly
//! once, and the pull model must never lose a wake-up (see [`run_until_halt`]).
//!
//! RUSTFLAGS="--cfg loom" cargo test --release -p smplab-vmm --lib irqchip::loom_tests
//! (use a separate `--target-dir`, e.g. target/loom, to keep the normal build).

use super::sync::{AtomicU32, Ordering};
use super::{
    lapic_ctl, HybridLapics, HybridPic, IrqchipConfig, IrqchipCounters, IrqchipEvent, IrqchipSink,
    ManualClock, LAPIC_STRIDE, NO_VECTOR, PAGE,
};
use crate::devices::ConcurrentDevice;
use loom::thread;
use std::sync::Arc;

/// The VMM's kick: one flag (the receiver is vCPU 0 / the ExtINT taker). A
/// word with `fetch_or`/`fetch_and` rather than an `AtomicBool` with `swap`:
/// under loom 0.7.3 the latter let a load after `join` miss the joined thread's
/// store in our runs, a false alarm this formulation does not raise.
struct Kick(AtomicU32);

impl IrqchipSink for Kick {
    fn event(&self, event: IrqchipEvent) {
        if matches!(event, IrqchipEvent::Kick { vcpu: 0 } | IrqchipEvent::ExtInt) {
            self.0.fetch_or(1, Ordering::SeqCst);
        }
    }
}

/// Exhaustive (no preemption bound unless `LOOM_MAX_PREEMPTIONS` is set): the
/// five models take under 5 s in a release build.
fn model(f: impl Fn() + Sync + Send + 'static) {
    loom::model::Builder::new().check(f);
}

fn lapics(vcpus: u32) -> (Arc<HybridLapics>, Arc<Kick>) {
    let kick = Arc::new(Kick(AtomicU32::new(0)));
    let config = IrqchipConfig {
        vcpus,
        sink: kick.clone(),
        clock: Arc::new(ManualClock::default()),
    };
    let set = Arc::new(HybridLapics::new(
        &config,
        Arc::new(IrqchipCounters::default()),
    ));
    for vcpu in 0..vcpus {
        set.write(
            u64::from(vcpu) * LAPIC_STRIDE + 0xf0,
            &0x1ffu32.to_le_bytes(),
        );
    }
    (set, kick)
}

/// The pull-model receiver, as a vCPU runs it: pull (INTA + EOI until nothing
/// is deliverable), then consume the kick; with no kick it halts. Loom cannot
/// explore a blocking wait, so the halt ends the concurrent part: the caller
/// joins the raising thread and lets the receiver run again only for kicks that
/// arrived after it halted ([`wake_ups`]). A lost wake-up (an interrupt made
/// pending without a kick after the receiver's last pull) leaves it undelivered.
fn run_until_halt(pull: &mut dyn FnMut(), kick: &Kick) {
    for _ in 0..4 {
        pull();
        if kick.0.fetch_and(0, Ordering::SeqCst) == 0 {
            return; // halted
        }
    }
}

/// After the raising threads are done: the halted receiver wakes once per kick.
fn wake_ups(pull: &mut dyn FnMut(), kick: &Kick) {
    while kick.0.fetch_and(0, Ordering::SeqCst) != 0 {
        pull();
    }
}

fn pull_lapic<'a>(set: &'a HybridLapics, got: &'a mut Vec<u8>) -> impl FnMut() + 'a {
    move || {
        while let Some(v) = set.acknowledge(0) {
            got.push(v);
            set.eoi(0);
        }
    }
}

#[test]
fn lapic_raise_against_acknowledge_and_eoi() {
    model(|| {
        let (set, kick) = lapics(1);
        let trigger = {
            let set = set.clone();
            thread::spawn(move || {
                set.accept(0, 0x40, false);
                set.accept(0, 0x80, false);
            })
        };
        let mut got = Vec::new();
        {
            let mut pull = pull_lapic(&set, &mut got);
            run_until_halt(&mut pull, &kick);
            trigger.join().expect("trigger");
            wake_ups(&mut pull, &kick);
        }
        got.sort_unstable();
        assert_eq!(got, vec![0x40, 0x80], "each exactly once");
        let (irr, isr, _) = set.vectors(0).expect("vCPU 0");
        assert_eq!((irr, isr), ([0; 8], [0; 8]));
    });
}

#[test]
fn lapic_ipi_through_icr_against_owner_tpr_and_eoi() {
    model(|| {
        let (set, kick) = lapics(2);
        let sender = {
            let set = set.clone();
            thread::spawn(move || {
                // vCPU 1 sends vector 0x61 to vCPU 0 (ICR_HI, then ICR_LO).
                let base = LAPIC_STRIDE;
                set.write(base + 0x310, &0u32.to_le_bytes());
                set.write(base + 0x300, &0x4061u32.to_le_bytes());
            })
        };
        // The owner changes its TPR while the IPI is in flight: it may hold
        // the vector back, but never lose it.
        set.write(0x80, &0x70u32.to_le_bytes());
        let mut b = [0u8; 8];
        set.read(PAGE + lapic_ctl::INTA, &mut b);
        assert_eq!(u64::from_le_bytes(b), NO_VECTOR, "TPR 0x70 blocks class 6");
        set.write(0x80, &0u32.to_le_bytes());
        let mut got = Vec::new();
        {
            let mut pull = pull_lapic(&set, &mut got);
            run_until_halt(&mut pull, &kick);
            sender.join().expect("sender");
            wake_ups(&mut pull, &kick);
        }
        assert_eq!(got, vec![0x61]);
    });
}

#[test]
fn lapic_timer_expiry_against_owner_rearm() {
    model(|| {
        let (set, _kick) = lapics(1);
        // One-shot, vector 0x20, count 100 at time 0: deadline 200 (divide 2).
        set.write(0x320, &0x20u32.to_le_bytes());
        set.write(0x380, &100u32.to_le_bytes());
        let timer = {
            let set = set.clone();
            thread::spawn(move || set.timer_expired(0, 200))
        };
        // The guest re-arms concurrently: the old expiry is either taken before
        // (one interrupt) or stale (none), never two, never a panic.
        set.write(0x380, &0u32.to_le_bytes());
        timer.join().expect("timer");
        let first = set.acknowledge(0);
        assert!(matches!(first, None | Some(0x20)));
        if first.is_some() {
            set.eoi(0);
        }
        assert_eq!(set.acknowledge(0), None, "at most one timer interrupt");
    });
}

fn pic() -> (Arc<HybridPic>, Arc<Kick>) {
    let kick = Arc::new(Kick(AtomicU32::new(0)));
    let pic = Arc::new(HybridPic::new(
        kick.clone(),
        Arc::new(IrqchipCounters::default()),
    ));
    // ICW1-4 for the master (vectors 0x20), unmask all.
    for (port, value) in [(0, 0x11u8), (1, 0x20), (1, 0x04), (1, 0x01), (1, 0x00)] {
        pic.write(port, &[value]);
    }
    (pic, kick)
}

#[test]
fn pic_raise_against_inta_and_eoi() {
    model(|| {
        let (pic, kick) = pic();
        let trigger = {
            let pic = pic.clone();
            thread::spawn(move || {
                pic.set_irq(3, true);
                pic.set_irq(3, false);
                pic.set_irq(4, true);
            })
        };
        let mut got = Vec::new();
        {
            let mut pull = || {
                while let Some(v) = pic.acknowledge() {
                    got.push(v);
                    pic.write(0, &[0x20]); // non-specific EOI
                }
            };
            run_until_halt(&mut pull, &kick);
            trigger.join().expect("trigger");
            wake_ups(&mut pull, &kick);
        }
        got.sort_unstable();
        assert_eq!(got, vec![0x23, 0x24], "each exactly once");
        assert_eq!(pic.registers().1, 0, "nothing left in service");
    });
}

#[test]
fn pic_level_line_dropped_during_inta() {
    model(|| {
        let (pic, _kick) = pic();
        pic.write(4, &[1 << 5]); // ELCR: IRQ 5 level-triggered
        pic.set_irq(5, true);
        let device = {
            let pic = pic.clone();
            thread::spawn(move || pic.set_irq(5, false))
        };
        // INTA either takes IRQ 5 (and it is in service) or finds nothing.
        let got = pic.acknowledge();
        device.join().expect("device");
        let (irr, isr, _) = pic.registers();
        match got {
            Some(v) => {
                assert_eq!(v, 0x25);
                assert_eq!(isr, 1 << 5);
            }
            None => assert_eq!(isr, 0),
        }
        assert_eq!(irr, 0, "a low level line leaves no request");
    });
}
