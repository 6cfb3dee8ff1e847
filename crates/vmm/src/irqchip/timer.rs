//! The LAPIC timers' host side: one thread per VM keeps each
//! vCPU's armed deadline and, when it passes, calls `fire(vcpu, deadline)`,
//! which the VMM makes a posted write of the deadline to that vCPU's
//! `lapic_ctl::TIMER_EXPIRED` register. As in the Seoul thesis §4.4.2, timer interrupts
//! come only from this thread, never from reading the current count. The sink
//! arms it on `IrqchipEvent::TimerDeadline` through a [`TimerHandle`] (one short
//! leaf lock, no bus access), so arming is safe inside a device handler.
//! A deadline that fires after the guest re-armed is reported anyway: the model
//! recognizes it as stale.

use super::{IrqClock, MonotonicClock};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

struct State {
    deadlines: Vec<Option<u64>>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    signal: Condvar,
}

/// Arms and disarms deadlines (cheap to clone, callable from any thread).
#[derive(Clone)]
pub struct TimerHandle(Arc<Shared>);

impl TimerHandle {
    /// Set `vcpu`'s deadline (ns on the VM's [`MonotonicClock`]); `None` disarms.
    pub fn arm(&self, vcpu: u32, deadline_ns: Option<u64>) {
        let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(slot) = state.deadlines.get_mut(vcpu as usize) {
            *slot = deadline_ns;
            self.0.signal.notify_one();
        }
    }
}

/// The timer thread; stopped and joined on drop.
pub struct TimerThread {
    handle: TimerHandle,
    thread: Option<JoinHandle<()>>,
}

impl TimerThread {
    /// Start the thread `smplab-timer` for `vcpus` timers on `clock`.
    pub fn start(
        vcpus: u32,
        clock: Arc<MonotonicClock>,
        mut fire: impl FnMut(u32, u64) + Send + 'static,
    ) -> std::io::Result<TimerThread> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                deadlines: vec![None; vcpus as usize],
                stop: false,
            }),
            signal: Condvar::new(),
        });
        let thread = {
            let shared = shared.clone();
            let filter = crate::seccomp::ThreadFilter::for_spawn(crate::seccomp::ThreadKind::Timer);
            std::thread::Builder::new()
                .name("smplab-timer".into())
                .spawn(move || {
                    filter.install_or_exit(0);
                    run(&shared, &*clock, &mut fire)
                })?
        };
        Ok(TimerThread {
            handle: TimerHandle(shared),
            thread: Some(thread),
        })
    }

    pub fn handle(&self) -> TimerHandle {
        self.handle.clone()
    }
}

impl Drop for TimerThread {
    fn drop(&mut self) {
        self.handle
            .0
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop = true;
        self.handle.0.signal.notify_one();
        if let Some(thread) = self.thread.take() {
            // A panicking `fire` already reported itself; nothing to add here.
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared, clock: &dyn IrqClock, fire: &mut dyn FnMut(u32, u64)) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    while !state.stop {
        let next = state
            .deadlines
            .iter()
            .enumerate()
            .filter_map(|(vcpu, d)| d.map(|d| (d, vcpu)))
            .min();
        let Some((deadline, vcpu)) = next else {
            state = shared.signal.wait(state).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        let now = clock.now_ns();
        if deadline > now {
            let wait = Duration::from_nanos(deadline - now);
            state = shared
                .signal
                .wait_timeout(state, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            continue;
        }
        state.deadlines[vcpu] = None;
        // Fire without the lock: `fire` reaches the model, whose periodic
        // re-arm comes back through `TimerHandle::arm`.
        drop(state);
        fire(u32::try_from(vcpu).unwrap_or(u32::MAX), deadline);
        state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use crate::bus::{BusClient, SyncMode};
    use std::sync::OnceLock;
    use std::time::Instant;

    #[test]
    fn each_armed_deadline_fires_once_and_a_disarmed_one_never() {
        let clock = Arc::new(MonotonicClock::new());
        let fired = Arc::new(Mutex::new(Vec::new()));
        let timers = {
            let fired = fired.clone();
            TimerThread::start(3, clock.clone(), move |vcpu, deadline| {
                fired
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((vcpu, deadline));
            })
            .expect("thread")
        };
        let now = clock.now_ns();
        let handle = timers.handle();
        handle.arm(0, Some(now + 2_000_000));
        handle.arm(1, Some(now + 1_000_000));
        handle.arm(2, Some(now + 3_000_000));
        handle.arm(2, None);
        handle.arm(7, Some(now)); // no such vCPU: ignored
        let start = Instant::now();
        while fired.lock().unwrap_or_else(|e| e.into_inner()).len() < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "timers did not fire"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        drop(timers);
        let fired = fired.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(fired, vec![(1, now + 1_000_000), (0, now + 2_000_000)]);
    }

    /// Forwards timer deadlines to the timer thread, counts kicks.
    #[derive(Default)]
    struct TimerSink {
        timers: OnceLock<TimerHandle>,
        kicks: std::sync::atomic::AtomicU64,
    }

    impl IrqchipSink for TimerSink {
        fn event(&self, event: IrqchipEvent) {
            match event {
                IrqchipEvent::TimerDeadline { vcpu, deadline_ns } => {
                    if let Some(timers) = self.timers.get() {
                        timers.arm(vcpu, deadline_ns);
                    }
                }
                IrqchipEvent::Kick { .. } => {
                    self.kicks.fetch_add(1, Ordering::Relaxed);
                }
                _ => {}
            }
        }
    }

    fn write32(client: &mut BusClient, vcpu: u32, reg: u64, value: u32) {
        let addr = lapic_bus_address(vcpu, LAPIC_GPA + reg).unwrap_or(0);
        client.write(AddressSpace::Mmio, addr, &value.to_le_bytes());
    }

    #[test]
    fn a_periodic_lapic_timer_ticks_through_the_bus_in_every_mode() {
        for mode in SyncMode::ALL {
            let clock = Arc::new(MonotonicClock::new());
            let sink = Arc::new(TimerSink::default());
            let config = IrqchipConfig {
                vcpus: 1,
                sink: sink.clone(),
                clock: clock.clone(),
            };
            let mut builder = BusBuilder::new();
            register(&mut builder, Flavor::for_mode(mode), &config).expect("fresh bus");
            let bus = builder.build(mode, None).expect("bus");
            let timers = {
                let mut client = bus.client();
                TimerThread::start(1, clock, move |vcpu, deadline| {
                    let addr = lapic_control_address(vcpu, lapic_ctl::TIMER_EXPIRED);
                    client.write(AddressSpace::Mmio, addr, &deadline.to_le_bytes());
                })
                .expect("thread")
            };
            let _ = sink.timers.set(timers.handle());
            let mut vcpu = bus.client();
            // The guest's timer_setup with a 200 µs period (divide 16).
            write32(&mut vcpu, 0, 0xf0, 0x1ff);
            write32(&mut vcpu, 0, 0x3e0, 0x3);
            write32(&mut vcpu, 0, 0x320, 0x20 | (1 << 17));
            write32(&mut vcpu, 0, 0x380, 12_500);
            let inta = lapic_control_address(0, lapic_ctl::INTA);
            let start = Instant::now();
            let mut ticks = 0;
            while ticks < 20 {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{mode}: {ticks} ticks"
                );
                let mut b = [0u8; 8];
                vcpu.read(AddressSpace::Mmio, inta, &mut b);
                match u64::from_le_bytes(b) {
                    NO_VECTOR => std::thread::sleep(Duration::from_micros(100)),
                    v => {
                        assert_eq!(v, 0x20, "{mode}");
                        ticks += 1;
                        write32(&mut vcpu, 0, 0xb0, 0);
                    }
                }
            }
            // Stopping the timer: count 0, then no more ticks are armed.
            write32(&mut vcpu, 0, 0x380, 0);
            drop(timers);
            bus.shutdown();
        }
    }
}
