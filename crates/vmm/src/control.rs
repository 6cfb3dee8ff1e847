//! Run control shared by the vCPU threads, the devices and the thread that waits
//! for the VM: who asked the VM to stop, and the guest's exit code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

#[derive(Default)]
struct ControlState {
    exit_code: Option<u32>,
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

    /// The guest wrote `code` to the debug-exit port. The first code wins.
    pub fn guest_exited(&self, code: u32) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.exit_code.get_or_insert(code);
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

    pub fn exit_code(&self) -> Option<u32> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exit_code
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
}
