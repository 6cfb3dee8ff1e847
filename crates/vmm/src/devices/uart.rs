//! 16550 UART (COM1, 0x3f8..0x3ff) on vm-superio. The model keeps `&mut` state
//! (FIFOs, divisor latch), so it is an exclusive device. The guest polls the line
//! status register; Linux's 8250 driver waits for its interrupt (IRQ 4,
//! pulsed on the IOAPIC's pin 4) to send more than the kernel console prints.

use super::{ExclusiveDevice, IrqLine};
use std::io::Write;
use std::sync::{Arc, Mutex};
use vm_superio::{Serial, Trigger};

/// Upper bound on captured console bytes, so a chatty guest cannot exhaust memory.
pub const CAPTURE_LIMIT_BYTES: usize = 64 << 20;

/// Where the guest console goes.
pub enum ConsoleWriter {
    Stdout(std::io::Stdout),
    Stderr(std::io::Stderr),
    File(std::io::BufWriter<std::fs::File>),
    Capture(Arc<Mutex<Vec<u8>>>),
    Discard,
}

impl Write for ConsoleWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            ConsoleWriter::Stdout(out) => {
                let n = out.write(buf)?;
                // Flush per write so console lines show up while the guest runs.
                out.flush()?;
                Ok(n)
            }
            // Unbuffered: each write reaches the terminal at once.
            ConsoleWriter::Stderr(out) => out.write(buf),
            ConsoleWriter::File(file) => file.write(buf),
            ConsoleWriter::Capture(bytes) => {
                let mut bytes = bytes.lock().unwrap_or_else(|e| e.into_inner());
                let room = CAPTURE_LIMIT_BYTES.saturating_sub(bytes.len());
                bytes.extend_from_slice(&buf[..buf.len().min(room)]);
                Ok(buf.len())
            }
            ConsoleWriter::Discard => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            ConsoleWriter::Stdout(out) => out.flush(),
            ConsoleWriter::Stderr(out) => out.flush(),
            ConsoleWriter::File(file) => file.flush(),
            ConsoleWriter::Capture(_) | ConsoleWriter::Discard => Ok(()),
        }
    }
}

/// The UART's interrupt line: an edge (assert, deassert) on an interrupt
/// controller pin each time the model raises its interrupt, or none. The
/// smplab guest never enables the UART's interrupts, so it never fires there.
pub struct UartIrq(Option<Arc<dyn IrqLine>>);

impl Trigger for UartIrq {
    type E = std::convert::Infallible;

    fn trigger(&self) -> Result<(), Self::E> {
        if let Some(line) = &self.0 {
            line.set_level(true);
            line.set_level(false);
        }
        Ok(())
    }
}

pub struct Uart {
    serial: Serial<UartIrq, vm_superio::serial::NoEvents, ConsoleWriter>,
    /// Console writes that failed (e.g. stdout closed); the guest never sees them.
    write_errors: u64,
}

impl Uart {
    /// A UART whose interrupt goes nowhere.
    pub fn new(out: ConsoleWriter) -> Self {
        Uart {
            serial: Serial::new(UartIrq(None), out),
            write_errors: 0,
        }
    }

    /// A UART that pulses `line` when it raises its interrupt.
    pub fn with_irq(out: ConsoleWriter, line: Arc<dyn IrqLine>) -> Self {
        Uart {
            serial: Serial::new(UartIrq(Some(line)), out),
            write_errors: 0,
        }
    }

    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.serial.writer_mut().flush()
    }
}

impl ExclusiveDevice for Uart {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        // The UART has 8 one-byte registers; anything outside reads as all-ones.
        match (u8::try_from(offset), data.first_mut()) {
            (Ok(reg @ 0..=7), Some(first)) => {
                *first = self.serial.read(reg);
                data[1..].fill(0);
            }
            _ => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let (Ok(reg @ 0..=7), Some(&value)) = (u8::try_from(offset), data.first()) {
            if self.serial.write(reg, value).is_err() {
                self.write_errors += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmits_to_capture_and_survives_garbage() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut uart = Uart::new(ConsoleWriter::Capture(buf.clone()));
        for &b in b"hi\n" {
            uart.write(0, &[b]);
        }
        // Line status: transmitter empty bits set.
        let mut lsr = [0u8; 1];
        uart.read(5, &mut lsr);
        assert_ne!(lsr[0] & 0x20, 0);
        // Adversarial: every register, every value, odd widths and offsets.
        for reg in 0..12u64 {
            for value in [0u8, 0x80, 0xff, 0x1b] {
                uart.write(reg, &[value, 1, 2, 3]);
                let mut out = [0u8; 4];
                uart.read(reg, &mut out);
            }
            uart.write(reg, &[]);
            uart.read(reg, &mut []);
        }
        uart.write(u64::MAX, &[1]);
        let mut far = [0u8; 2];
        uart.read(u64::MAX, &mut far);
        assert_eq!(far, [0xff, 0xff]);
        assert!(buf.lock().unwrap().starts_with(b"hi\n"));
    }

    #[test]
    fn an_enabled_transmit_interrupt_pulses_the_line() {
        #[derive(Default)]
        struct Edges(Mutex<Vec<bool>>);
        impl IrqLine for Edges {
            fn set_level(&self, level: bool) {
                self.0.lock().unwrap().push(level);
            }
        }
        let line = Arc::new(Edges::default());
        let mut uart = Uart::with_irq(ConsoleWriter::Discard, line.clone());
        uart.write(0, b"x");
        assert!(line.0.lock().unwrap().is_empty(), "interrupts disabled");
        uart.write(1, &[0x02]); // IER: transmitter holding register empty
        uart.write(0, b"y");
        let edges = line.0.lock().unwrap().clone();
        assert!(
            edges.len() >= 2 && edges.chunks(2).all(|e| e == [true, false]),
            "{edges:?}"
        );
    }
}
