//! The guest encoding keeps everything an executor needs.

use smplab_workload::encode::{decode_groups, encode, DecodeError};
use smplab_workload::{builtin, Source};

#[test]
fn every_builtin_round_trips() {
    for name in builtin::names() {
        let p = Source::resolve(name)
            .unwrap()
            .instantiate(Some(3), 0.5)
            .unwrap();
        let bytes = encode(&p);
        let groups = decode_groups(&bytes).unwrap();
        assert_eq!(groups.len(), p.groups.len(), "{name}");
        for (gi, (g, (threads, private, ops))) in p.groups.iter().zip(groups).enumerate() {
            assert_eq!(g.threads, threads, "{name}");
            assert_eq!(p.private_bytes(gi), private, "{name}");
            assert_eq!(g.ops, ops, "{name}");
        }
    }
}

#[test]
fn corrupt_encodings_are_errors_not_panics() {
    let p = Source::resolve("dedup")
        .unwrap()
        .instantiate(Some(2), 0.1)
        .unwrap();
    let bytes = encode(&p);
    for cut in 0..bytes.len() {
        let _ = decode_groups(&bytes[..cut]);
    }
    assert_eq!(decode_groups(b"XXXX\x01\x00"), Err(DecodeError::BadHeader));
    // blackscholes: 44-byte header, one 10-byte barrier, then the group's
    // 16-byte preamble; its first opcode is at byte 70.
    let p = Source::resolve("blackscholes")
        .unwrap()
        .instantiate(Some(1), 0.1)
        .unwrap();
    let mut bad = encode(&p);
    assert_eq!(bad[70], smplab_workload::encode::opcode::REPEAT);
    bad[70] = 0xff;
    assert_eq!(decode_groups(&bad), Err(DecodeError::BadOpcode(0xff, 0)));
}

#[test]
fn devices_and_io_ops_round_trip() {
    let p = Source::resolve("oltp")
        .unwrap()
        .instantiate(Some(2), 0.5)
        .unwrap();
    let (groups, devices) =
        smplab_workload::encode::decode_groups_and_devices(&encode(&p)).unwrap();
    assert_eq!(groups[0].2, p.groups[0].ops);
    assert_eq!(devices, vec![4, 1], "disk then log, in name order");
}

#[test]
fn pools_and_drain_ops_round_trip() {
    let text = "name = \"t\"\n[pools.a]\ncount = \"3*n\"\n[pools.b]\ncount = 7\n[[groups]]\nname = \"g\"\nthreads = \"n\"\nops = [\n  { drain = { pool = \"b\", ops = [ { compute = 2 }, { repeat = { count = 2, ops = [ { yield = 1 } ] } } ] } },\n  { drain = { pool = \"a\", ops = [] } },\n]\n";
    let p = Source::from_text("t.toml", text)
        .unwrap()
        .instantiate(Some(2), 1.0)
        .unwrap();
    let bytes = encode(&p);
    let d = smplab_workload::encode::decode_tables(&bytes).unwrap();
    assert_eq!(d.pools, vec![6, 7], "a then b, in name order");
    assert_eq!(d.groups[0].2, p.groups[0].ops);
    assert!(matches!(
        d.groups[0].2[0],
        smplab_workload::Op::Drain { pool: 1, .. }
    ));
    for cut in 0..bytes.len() {
        assert!(
            smplab_workload::encode::decode_tables(&bytes[..cut]).is_err(),
            "a cut at {cut} is an error"
        );
    }
}
