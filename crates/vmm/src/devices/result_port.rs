//! Result port (0x520): the guest streams its result record as bytes. The stream
//! must keep its order, and the device uses plain `&mut` state, so it is an
//! exclusive (not thread-safe) device: it never bypasses the lock or I/O thread.

use super::ExclusiveDevice;

/// Upper bound on the stored result, so a runaway guest cannot exhaust host memory.
pub const RESULT_LIMIT_BYTES: usize = 64 << 20;

#[derive(Default)]
pub struct ResultPort {
    bytes: Vec<u8>,
    dropped: u64,
}

impl ResultPort {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes the guest wrote past [`RESULT_LIMIT_BYTES`].
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }
}

impl ExclusiveDevice for ResultPort {
    fn read(&mut self, _offset: u64, data: &mut [u8]) {
        data.fill(0xff);
    }

    fn write(&mut self, _offset: u64, data: &[u8]) {
        // The port is 8 bits wide: a wider write contributes its low byte only.
        let Some(&byte) = data.first() else { return };
        if self.bytes.len() < RESULT_LIMIT_BYTES {
            self.bytes.push(byte);
        } else {
            self.dropped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_low_bytes_in_order_and_ignores_empty_writes() {
        let mut port = ResultPort::new();
        port.write(0, b"o");
        port.write(0, &[]);
        port.write(3, &[b'k', 0xee, 0xee, 0xee]);
        let mut buf = [0u8; 4];
        port.read(0, &mut buf);
        assert_eq!(buf, [0xff; 4]);
        assert_eq!(port.bytes(), b"ok");
        assert_eq!(port.take(), b"ok".to_vec());
        assert_eq!(port.dropped(), 0);
    }
}
