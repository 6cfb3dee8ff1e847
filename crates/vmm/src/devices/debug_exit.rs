//! Debug-exit port (0x501): the guest writes its exit status; the first write ends
//! the VM. Thread-safe (atomics), so it may bypass the I/O thread.

use super::{le_value, ConcurrentDevice};
use crate::control::RunControl;
use std::sync::Arc;

pub struct DebugExit {
    control: Arc<RunControl>,
}

impl DebugExit {
    pub fn new(control: Arc<RunControl>) -> Self {
        DebugExit { control }
    }
}

impl ConcurrentDevice for DebugExit {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&self, _offset: u64, data: &[u8]) {
        // Any width is accepted; wider than 32 bits is clipped, as the port is 32-bit.
        let [b0, b1, b2, b3, ..] = le_value(data).to_le_bytes();
        let code = u32::from_le_bytes([b0, b1, b2, b3]);
        self.control.guest_exited(code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_write_wins_and_any_width_is_accepted() {
        let control = Arc::new(RunControl::new());
        let dev = DebugExit::new(control.clone());
        dev.write(0, &[7, 0, 0, 0, 0, 0, 0, 0, 9]);
        dev.write(1, &[3]);
        dev.write(0, &[]);
        assert_eq!(control.exit_code(), Some(7));
        let mut buf = [0u8; 2];
        dev.read(0, &mut buf);
        assert_eq!(buf, [0xff, 0xff]);
    }
}
