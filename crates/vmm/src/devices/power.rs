//! Power-off and reset: the ways a Linux guest ends the VM besides the
//! debug-exit port.
//!
//! * [`SleepControl`]: the hardware-reduced FADT's sleep control/status
//!   register (`crate::boot::acpi`). Writing SLP_TYP 5 (S5, soft-off) with
//!   SLP_EN powers off; reads are 0 (no wake status).
//! * [`ResetControl`]: the FADT's reset register at 0xcf9 (the PCI reset
//!   control port): a write with the reset-CPU bit resets.
//! * [`I8042`]: the keyboard controller's ports 0x60..0x64, only as far as a
//!   reboot uses them: status reads 0 (input buffer empty, so the guest's
//!   wait-for-ready loop ends), command 0xfe (pulse the reset line) resets.
//!
//! Each only records the stop in [`RunControl`], which ends `run_vm`; all
//! are thread-safe (the control takes its own lock), so they may bypass.

use super::ConcurrentDevice;
use crate::boot::acpi::S5_SLEEP_TYPE;
use crate::control::RunControl;
use crate::GuestStop;
use std::sync::Arc;

/// SLP_EN and the SLP_TYP field of the sleep control register.
const SLP_EN: u8 = 1 << 5;
const SLP_TYP_SHIFT: u8 = 2;
const SLP_TYP_MASK: u8 = 0x7;
/// 0xcf9's reset-CPU bit.
const RESET_CPU: u8 = 1 << 2;
/// The i8042 command port's offset from 0x60, and its reset-pulse command.
const I8042_COMMAND_OFFSET: u64 = 4;
const I8042_PULSE_RESET: u8 = 0xfe;

/// The sleep control/status register (one byte).
pub struct SleepControl {
    control: Arc<RunControl>,
}

impl SleepControl {
    pub fn new(control: Arc<RunControl>) -> Self {
        SleepControl { control }
    }
}

impl ConcurrentDevice for SleepControl {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&self, _offset: u64, data: &[u8]) {
        let Some(&value) = data.first() else { return };
        let sleep_type = (value >> SLP_TYP_SHIFT) & SLP_TYP_MASK;
        if value & SLP_EN != 0 && sleep_type == S5_SLEEP_TYPE {
            self.control.guest_stopped(GuestStop::PowerOff);
        }
        // Other sleep states are not offered (no _S1_.._S4_): ignored.
    }
}

/// The reset control port 0xcf9 (one byte).
pub struct ResetControl {
    control: Arc<RunControl>,
}

impl ResetControl {
    pub fn new(control: Arc<RunControl>) -> Self {
        ResetControl { control }
    }
}

impl ConcurrentDevice for ResetControl {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        data.fill(0);
    }

    fn write(&self, _offset: u64, data: &[u8]) {
        if data.first().is_some_and(|&value| value & RESET_CPU != 0) {
            self.control.guest_stopped(GuestStop::Reset);
        }
    }
}

/// The i8042's reset path (ports 0x60..=0x64).
pub struct I8042 {
    control: Arc<RunControl>,
}

impl I8042 {
    pub fn new(control: Arc<RunControl>) -> Self {
        I8042 { control }
    }
}

impl ConcurrentDevice for I8042 {
    fn read(&self, _offset: u64, data: &mut [u8]) {
        // Status: no output, input buffer empty. Data: nothing.
        data.fill(0);
    }

    fn write(&self, offset: u64, data: &[u8]) {
        if offset == I8042_COMMAND_OFFSET && data.first() == Some(&I8042_PULSE_RESET) {
            self.control.guest_stopped(GuestStop::Reset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s5_with_slp_en_powers_off_and_nothing_else_does() {
        let control = Arc::new(RunControl::new());
        let dev = SleepControl::new(control.clone());
        dev.write(0, &[S5_SLEEP_TYPE << SLP_TYP_SHIFT]); // no SLP_EN
        dev.write(0, &[(3 << SLP_TYP_SHIFT) | SLP_EN]); // S3
        dev.write(0, &[]);
        assert!(!control.should_stop());
        let mut status = [0xaa];
        dev.read(0, &mut status);
        assert_eq!(status, [0]);
        dev.write(0, &[(S5_SLEEP_TYPE << SLP_TYP_SHIFT) | SLP_EN]);
        assert_eq!(control.guest_stop(), Some(GuestStop::PowerOff));
    }

    #[test]
    fn cf9_and_the_i8042_pulse_reset() {
        let control = Arc::new(RunControl::new());
        ResetControl::new(control.clone()).write(0, &[0x2]); // system reset bit only
        let kbd = I8042::new(control.clone());
        kbd.write(0, &[I8042_PULSE_RESET]); // the data port
        kbd.write(I8042_COMMAND_OFFSET, &[0xaa]); // self-test
        let mut status = [0xff];
        kbd.read(I8042_COMMAND_OFFSET, &mut status);
        assert_eq!(status, [0], "input buffer empty");
        assert!(!control.should_stop());
        kbd.write(I8042_COMMAND_OFFSET, &[I8042_PULSE_RESET]);
        assert_eq!(control.guest_stop(), Some(GuestStop::Reset));

        let control = Arc::new(RunControl::new());
        ResetControl::new(control.clone()).write(0, &[crate::boot::acpi::RESET_VALUE]);
        assert_eq!(control.guest_stop(), Some(GuestStop::Reset));
    }
}
