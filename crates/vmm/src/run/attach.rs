//! Attaching the guest's devices to the bus: the port devices every VM has,
//! the interrupt controllers with `--irqchip user`, the block device and its
//! completion thread. Which lock each takes is in the lock order in `run.rs`.

use super::{
    DEBUG_EXIT_PORT, I8042_PORT, PM_TIMER_PORT, RESULT_PORT, UART_IRQ_PIN, UART_PORT, WINDOW_PORT,
    WORK_PORT,
};
use crate::boot::acpi::{RESET_PORT, SLEEP_CONTROL_PORT};
use crate::bus::{AddressSpace, BusBuilder};
use crate::control::RunControl;
use crate::devices::block::{GuestTsc, BLOCK_IRQ_PIN, BLOCK_MMIO_GPA, BLOCK_MMIO_LEN};
use crate::devices::{
    BlockDevice, ConsoleWriter, DebugExit, ExclusiveWorkDevice, IrqLine, KvmIrqLine, PmTimer,
    ResetControl, ResultPort, SleepControl, Uart, WindowDevice, WorkDevice, I8042,
};
use crate::error::VmmError;
use crate::user_irqchip::UserIrqchip;
use crate::vm::{Irqchip, Vm};
use crate::{ConsoleSink, VmConfig};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The buffer of a [`ConsoleSink::Capture`] console.
pub(super) type CapturedConsole = Option<Arc<Mutex<Vec<u8>>>>;

fn console_writer(sink: &ConsoleSink) -> Result<(ConsoleWriter, CapturedConsole), VmmError> {
    Ok(match sink {
        ConsoleSink::Stdout => (ConsoleWriter::Stdout(std::io::stdout()), None),
        ConsoleSink::Stderr => (ConsoleWriter::Stderr(std::io::stderr()), None),
        ConsoleSink::File(path) => {
            let file = std::fs::File::create(path).map_err(|source| VmmError::Console {
                path: path.clone(),
                source,
            })?;
            (ConsoleWriter::File(std::io::BufWriter::new(file)), None)
        }
        ConsoleSink::Capture => {
            let buf = Arc::new(Mutex::new(Vec::new()));
            (ConsoleWriter::Capture(buf.clone()), Some(buf))
        }
        ConsoleSink::Discard => (ConsoleWriter::Discard, None),
    })
}

/// The guest's devices on a bus in the configured sync mode.
pub(super) struct Devices {
    pub(super) bus: Arc<crate::bus::Bus>,
    pub(super) uart: Arc<Mutex<Uart>>,
    pub(super) result_port: Arc<Mutex<ResultPort>>,
    pub(super) captured: CapturedConsole,
    /// The interrupt controllers, with `--irqchip user`.
    pub(super) user_irqchip: Option<UserIrqchip>,
    /// The block device and its completion thread, when configured.
    pub(super) block: Option<BlockThread>,
}

/// A running block device.
pub(super) struct BlockThread {
    pub(super) device: Arc<BlockDevice>,
    pub(super) handle: JoinHandle<Option<std::io::Error>>,
}

impl BlockThread {
    /// Stop the completion thread; its counts, or the pinning error.
    pub(super) fn finish(self, cpus: &[usize]) -> Result<crate::devices::BlockStats, VmmError> {
        self.device.stop();
        match self.handle.join() {
            Ok(None) => Ok(self.device.stats()),
            Ok(Some(source)) => Err(VmmError::Placement {
                thread: "smplab-blk".into(),
                cpus: cpus.to_vec(),
                source,
            }),
            Err(_) => Err(VmmError::BadConfig(
                "the block device thread panicked (a bug in smplab-vmm)".into(),
            )),
        }
    }
}

/// A device's interrupt line on IOAPIC pin `pin`: the in-kernel IOAPIC's
/// through KVM_IRQ_LINE, or the IOAPIC model's.
fn irq_line(
    vm: &Vm,
    user_irqchip: Option<&UserIrqchip>,
    pin: u32,
    device: &str,
) -> Result<Arc<dyn IrqLine>, VmmError> {
    Ok(match user_irqchip {
        Some(chip) => chip.irq_line(pin),
        None => Arc::new(KvmIrqLine::new(vm.kvm(), vm.fd(), pin).map_err(|source| {
            VmmError::Thread {
                name: format!("{device} (dup of the VM fd)"),
                source,
            }
        })?),
    })
}

pub(super) fn attach_devices(
    config: &VmConfig,
    vm: &Vm,
    control: Arc<RunControl>,
    tsc: GuestTsc,
    window: WindowDevice,
) -> Result<Devices, VmmError> {
    let tsc_hz = tsc.hz;
    let (console, captured) = console_writer(&config.console)?;
    let mut builder = BusBuilder::new();
    let bus_err = |e: crate::bus::BusError| VmmError::BadConfig(e.to_string());
    let mut user_irqchip = match config.irqchip {
        Irqchip::Kernel => None,
        Irqchip::User => Some(UserIrqchip::attach(
            &mut builder,
            config.sync,
            config.vcpus,
            config.vmm_halt_poll,
        )?),
    };
    let uart_line = irq_line(vm, user_irqchip.as_ref(), UART_IRQ_PIN, "uart")?;
    let PortHandles { uart, result_port } = add_port_devices(
        &mut builder,
        config,
        Uart::with_irq(console, uart_line),
        control,
        tsc_hz,
        window,
    )?;
    let block = match &config.block {
        Some(block) => {
            let line = irq_line(vm, user_irqchip.as_ref(), BLOCK_IRQ_PIN, "smplab-blk")?;
            let device = BlockDevice::new(&block.queue_depths, line, tsc);
            builder
                .add_concurrent(
                    AddressSpace::Mmio,
                    BLOCK_MMIO_GPA,
                    BLOCK_MMIO_LEN,
                    "block",
                    device.clone(),
                )
                .map_err(bus_err)?;
            Some(device)
        }
        None => None,
    };
    let bus = builder
        .build(config.sync, config.io_cpu)
        .map_err(|source| VmmError::Thread {
            name: "smplab-io".into(),
            source,
        })?;
    if let Some(chip) = &mut user_irqchip {
        chip.start_timers(bus.client())?;
    }
    let block = block
        .map(|device| start_block_thread(config, device))
        .transpose()?;
    Ok(Devices {
        bus,
        uart,
        result_port,
        captured,
        user_irqchip,
        block,
    })
}

/// The port devices the run reads back from when the guest has stopped.
struct PortHandles {
    uart: Arc<Mutex<Uart>>,
    result_port: Arc<Mutex<ResultPort>>,
}

/// The port-I/O devices every VM has: the UART, debug exit, result port,
/// work device, PM timer, measurement window, and the power-off and reset
/// ports.
fn add_port_devices(
    builder: &mut BusBuilder,
    config: &VmConfig,
    uart: Uart,
    control: Arc<RunControl>,
    tsc_hz: u64,
    window: WindowDevice,
) -> Result<PortHandles, VmmError> {
    let bus_err = |e: crate::bus::BusError| VmmError::BadConfig(e.to_string());
    let uart = builder
        .add_exclusive(AddressSpace::Pio, UART_PORT, 8, "uart", uart)
        .map_err(bus_err)?;
    builder
        .add_concurrent(
            AddressSpace::Pio,
            DEBUG_EXIT_PORT,
            2,
            "debug_exit",
            Arc::new(DebugExit::new(control.clone())),
        )
        .map_err(bus_err)?;
    add_power_devices(builder, &control)?;
    let result_port = builder
        .add_exclusive(
            AddressSpace::Pio,
            RESULT_PORT,
            1,
            "result",
            ResultPort::new(),
        )
        .map_err(bus_err)?;
    if config.work_exclusive {
        builder
            .add_exclusive(
                AddressSpace::Pio,
                WORK_PORT,
                4,
                "work",
                ExclusiveWorkDevice::new(config.work_ns),
            )
            .map_err(bus_err)?;
    } else {
        builder
            .add_concurrent(
                AddressSpace::Pio,
                WORK_PORT,
                4,
                "work",
                Arc::new(WorkDevice::new(config.work_ns)),
            )
            .map_err(bus_err)?;
    }
    builder
        .add_concurrent(
            AddressSpace::Pio,
            PM_TIMER_PORT,
            4,
            "pm_timer",
            Arc::new(PmTimer::new(tsc_hz)),
        )
        .map_err(bus_err)?;
    builder
        .add_concurrent(
            AddressSpace::Pio,
            WINDOW_PORT,
            4,
            "window",
            Arc::new(window),
        )
        .map_err(bus_err)?;
    Ok(PortHandles { uart, result_port })
}

/// ACPI sleep control (power-off), the reset port 0xcf9 and the i8042's
/// reset pulse: each ends the run with a [`GuestStop`].
fn add_power_devices(builder: &mut BusBuilder, control: &Arc<RunControl>) -> Result<(), VmmError> {
    let bus_err = |e: crate::bus::BusError| VmmError::BadConfig(e.to_string());
    builder
        .add_concurrent(
            AddressSpace::Pio,
            u64::from(SLEEP_CONTROL_PORT),
            1,
            "acpi_sleep",
            Arc::new(SleepControl::new(control.clone())),
        )
        .map_err(bus_err)?;
    builder
        .add_concurrent(
            AddressSpace::Pio,
            u64::from(RESET_PORT),
            1,
            "reset",
            Arc::new(ResetControl::new(control.clone())),
        )
        .map_err(bus_err)?;
    builder
        .add_concurrent(
            AddressSpace::Pio,
            I8042_PORT,
            5,
            "i8042",
            Arc::new(I8042::new(control.clone())),
        )
        .map_err(bus_err)?;
    Ok(())
}

/// Start the block device's completion thread on the configured CPUs.
fn start_block_thread(
    config: &VmConfig,
    device: Arc<BlockDevice>,
) -> Result<BlockThread, VmmError> {
    let cpus = config
        .block
        .as_ref()
        .map(|b| b.thread_cpus.clone())
        .unwrap_or_default();
    let handle = device.spawn(cpus).map_err(|source| VmmError::Thread {
        name: "smplab-blk".into(),
        source,
    })?;
    Ok(BlockThread { device, handle })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::SyncMode;
    use crate::GuestStop;

    #[test]
    fn the_power_ports_stop_the_run_in_every_mode() {
        for mode in [
            SyncMode::Global,
            SyncMode::IoThread,
            SyncMode::Hybrid,
            SyncMode::Fine,
        ] {
            for (port, value, stop) in [
                (u64::from(RESET_PORT), 0x6u8, GuestStop::Reset),
                (I8042_PORT + 4, 0xfe, GuestStop::Reset),
                (u64::from(SLEEP_CONTROL_PORT), 0x34, GuestStop::PowerOff),
                (DEBUG_EXIT_PORT, 3, GuestStop::DebugExit(3)),
            ] {
                let control = Arc::new(RunControl::new());
                let mut builder = BusBuilder::new();
                add_power_devices(&mut builder, &control).unwrap();
                builder
                    .add_concurrent(
                        AddressSpace::Pio,
                        DEBUG_EXIT_PORT,
                        2,
                        "debug_exit",
                        Arc::new(DebugExit::new(control.clone())),
                    )
                    .unwrap();
                let bus = builder.build(mode, None).unwrap();
                let mut client = bus.client();
                assert!(
                    client.write(AddressSpace::Pio, port, &[value]),
                    "{mode} {port:#x}"
                );
                // A posted write reaches the device before a later read returns.
                let mut status = [0xff];
                client.read(AddressSpace::Pio, I8042_PORT + 4, &mut status);
                assert_eq!(control.guest_stop(), Some(stop), "{mode} {port:#x}");
                bus.shutdown();
            }
        }
    }
}
