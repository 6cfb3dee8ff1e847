//! Property tests: arbitrary guest accesses (any address, width, value, order)
//! through the bus in every sync mode never panic, unclaimed reads are all-ones,
//! and device state stays consistent.

use proptest::prelude::*;
use smplab_vmm::devices::{ConsoleWriter, PmTimer, ResultPort, Uart, WorkDevice};
use smplab_vmm::{AddressSpace, BusBuilder, SyncMode};
use std::sync::Arc;

#[derive(Debug, Clone)]
enum Access {
    Read { port: u16, len: usize },
    Write { port: u16, data: Vec<u8> },
}

fn access() -> impl Strategy<Value = Access> {
    // Mostly the smplab ports and their neighbours, sometimes anywhere.
    let port = prop_oneof![
        0x3f0u16..0x400,
        0x500u16..0x540,
        0x600u16..0x610,
        any::<u16>(),
    ];
    prop_oneof![
        (port.clone(), 0usize..16).prop_map(|(port, len)| Access::Read { port, len }),
        (port, proptest::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(port, data)| Access::Write { port, data }),
    ]
}

fn mode() -> impl Strategy<Value = SyncMode> {
    prop_oneof![
        Just(SyncMode::Global),
        Just(SyncMode::IoThread),
        Just(SyncMode::Hybrid),
        Just(SyncMode::Fine),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_accesses_are_handled(mode in mode(), accesses in proptest::collection::vec(access(), 1..200)) {
        let mut builder = BusBuilder::new();
        builder.add_exclusive(AddressSpace::Pio, 0x3f8, 8, "uart", Uart::new(ConsoleWriter::Discard)).unwrap();
        let result = builder.add_exclusive(AddressSpace::Pio, 0x520, 1, "result", ResultPort::new()).unwrap();
        let work = Arc::new(WorkDevice::new(0));
        builder.add_concurrent(AddressSpace::Pio, 0x530, 4, "work", work.clone()).unwrap();
        builder.add_concurrent(AddressSpace::Pio, 0x608, 4, "pm_timer", Arc::new(PmTimer::new(2_000_000_000))).unwrap();
        let bus = builder.build(mode, None).unwrap();
        let mut client = bus.client();
        let claimed = |p: u16| (0x3f8..0x400).contains(&p) || p == 0x520 || (0x530..0x534).contains(&p) || (0x608..0x60c).contains(&p);
        let mut expected_result = Vec::new();
        let mut work_accesses = 0u64;
        for a in &accesses {
            match a {
                Access::Read { port, len } => {
                    let mut data = vec![0u8; *len];
                    let hit = client.read(AddressSpace::Pio, u64::from(*port), &mut data);
                    prop_assert_eq!(hit, claimed(*port));
                    if !hit {
                        prop_assert!(data.iter().all(|&b| b == 0xff));
                    }
                    if (0x530..0x534).contains(port) { work_accesses += 1; }
                }
                Access::Write { port, data } => {
                    let hit = client.write(AddressSpace::Pio, u64::from(*port), data);
                    prop_assert_eq!(hit, claimed(*port));
                    if *port == 0x520 && !data.is_empty() { expected_result.push(data[0]); }
                    if (0x530..0x534).contains(port) { work_accesses += 1; }
                }
            }
        }
        drop(client);
        bus.shutdown();
        let stored = result.lock().unwrap().bytes().to_vec();
        prop_assert_eq!(stored, expected_result);
        prop_assert_eq!(work.accesses(), work_accesses);
    }
}
