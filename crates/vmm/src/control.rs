//! Run control shared by the vCPU threads, the devices and the thread that waits
//! for the VM: who asked the VM to stop, and how the guest stopped it.

use crate::GuestStop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct ControlState {
    guest_stop: Option<GuestStop>,
    stop_requested: bool,
}

#[derive(Default)]
pub struct RunControl {
    /// Checked by vCPU threads before each KVM_RUN; a lock-free mirror of
    /// `state.stop_requested`.
    stop: AtomicBool,
    state: Mutex<ControlState>,
    changed: Condvar,
}

impl RunControl {
    pub fn new() -> Self {
        Self::default()
    }

    /// The guest wrote `code` to the debug-exit port. The first stop wins.
    pub fn guest_exited(&self, code: u32) {
        self.guest_stopped(GuestStop::DebugExit(code));
    }

    /// The guest stopped the VM (debug exit, power-off, reset). The first
    /// stop wins.
    pub fn guest_stopped(&self, stop: GuestStop) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.guest_stop.get_or_insert(stop);
        state.stop_requested = true;
        self.stop.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    /// Ask every vCPU to stop (a crash, a timeout, or the last vCPU finished).
    pub fn request_stop(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.stop_requested = true;
        self.stop.store(true, Ordering::Release);
        self.changed.notify_all();
    }

    pub fn should_stop(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The debug-exit code, if the guest stopped through the debug-exit port.
    pub fn exit_code(&self) -> Option<u32> {
        match self.guest_stop() {
            Some(GuestStop::DebugExit(code)) => Some(code),
            _ => None,
        }
    }

    /// How the guest stopped the VM, if it did.
    pub fn guest_stop(&self) -> Option<GuestStop> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .guest_stop
    }

    /// Wait until a stop is requested or `timeout` passes; true when stopped.
    pub fn wait_for_stop(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while !state.stop_requested {
            match deadline {
                None => {
                    state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return false;
                    }
                    state = self
                        .changed
                        .wait_timeout(state, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn exit_wakes_waiter_and_first_code_wins() {
        let control = Arc::new(RunControl::new());
        assert!(!control.wait_for_stop(Some(Duration::from_millis(1))));
        let c = control.clone();
        let t = std::thread::spawn(move || c.wait_for_stop(None));
        control.guest_exited(3);
        control.guest_exited(4);
        assert!(t.join().unwrap());
        assert!(control.should_stop());
        assert_eq!(control.exit_code(), Some(3));
    }

    #[test]
    fn a_power_off_stops_without_an_exit_code_and_the_first_stop_wins() {
        let control = RunControl::new();
        control.guest_stopped(GuestStop::PowerOff);
        control.guest_exited(9);
        assert!(control.should_stop());
        assert_eq!(control.guest_stop(), Some(GuestStop::PowerOff));
        assert_eq!(control.exit_code(), None);
    }
}
