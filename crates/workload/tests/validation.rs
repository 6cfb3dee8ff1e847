//! Every validation error path: located at file:line:col with a clear message.

use smplab_workload::{Source, WorkloadError};

fn errors(text: &str) -> Vec<String> {
    errors_n(text, 2)
}

fn errors_n(text: &str, n: u32) -> Vec<String> {
    let result = Source::from_text("w.toml", text).and_then(|s| s.instantiate(Some(n), 1.0));
    match result {
        Ok(_) => vec![],
        Err(e) => e.to_string().lines().map(str::to_string).collect(),
    }
}

const HEAD: &str = "name = \"t\"\n";

#[test]
fn valid_minimal_workload() {
    let text =
        format!("{HEAD}[[groups]]\nname = \"g\"\nthreads = 2\nops = [ {{ compute = 10 }} ]\n");
    assert!(errors(&text).is_empty());
}

#[test]
fn malformed_toml_is_located() {
    let e = errors("name = \"t\"\n[[groups]\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("w.toml:2:"), "{e:?}");
}

#[test]
fn unknown_operation() {
    let text = format!(
        "{HEAD}[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ frobnicate = 3 }},\n]\n"
    );
    let e = errors(&text);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("w.toml:6:"), "{e:?}");
    assert!(e[0].contains("unknown operation `frobnicate`"), "{e:?}");
}

#[test]
fn unknown_field_is_rejected() {
    let e = errors(&format!("{HEAD}thredas = 3\n"));
    assert!(e[0].starts_with("w.toml:2:1"), "{e:?}");
    assert!(e[0].contains("thredas"), "{e:?}");
}

#[test]
fn undefined_lock_queue_barrier_names() {
    let text = format!(
        "{HEAD}[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ spin_lock = \"l\" }},\n  {{ spin_unlock = \"l\" }},\n  {{ push = \"q\" }},\n  {{ barrier = \"b\" }},\n  {{ lock = \"m\" }},\n  {{ unlock = \"m\" }},\n]\n"
    );
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|l| l.starts_with("w.toml:6:17:") && l.contains("undefined spin lock `l`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|l| l.starts_with("w.toml:8:") && l.contains("undefined queue `q`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|l| l.starts_with("w.toml:9:") && l.contains("undefined barrier `b`")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|l| l.starts_with("w.toml:10:") && l.contains("undefined mutex `m`")),
        "{e:?}"
    );
}

#[test]
fn wrong_kind_of_name_gets_a_hint() {
    let text = format!("{HEAD}[mutexes.m]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ spin_lock = \"m\" }}, {{ spin_unlock = \"m\" }} ]\n");
    let e = errors(&text);
    assert!(e[0].contains("`m` is a mutex, not a spin lock"), "{e:?}");
}

#[test]
fn zero_threads() {
    let text =
        format!("{HEAD}[[groups]]\nname = \"g\"\nthreads = 0\nops = [ {{ compute = 1 }} ]\n");
    let e = errors(&text);
    assert!(
        e[0].starts_with("w.toml:4:11:") && e[0].contains("zero threads"),
        "{e:?}"
    );
    let text =
        format!("{HEAD}[[groups]]\nname = \"g\"\nthreads = \"n-2\"\nops = [ {{ compute = 1 }} ]\n");
    assert!(errors(&text)[0].contains("zero threads"));
}

#[test]
fn no_groups() {
    let e = errors(HEAD);
    assert!(
        e[0].starts_with("w.toml:1:1:") && e[0].contains("no thread groups"),
        "{e:?}"
    );
}

#[test]
fn barrier_party_count_never_reached() {
    let text = format!("{HEAD}[barriers.b]\nparties = 3\n[[groups]]\nname = \"g\"\nthreads = 2\nops = [ {{ barrier = \"b\" }} ]\n");
    let e = errors(&text);
    assert!(e[0].starts_with("w.toml:2:1:"), "{e:?}");
    assert!(
        e[0].contains("needs 3 parties but only 2 thread(s)"),
        "{e:?}"
    );
}

#[test]
fn barrier_last_generation_incomplete() {
    let text = format!("{HEAD}[barriers.b]\nparties = 2\n[[groups]]\nname = \"g\"\nthreads = 3\nops = [ {{ barrier = \"b\" }} ]\n");
    let e = errors(&text);
    assert!(e[0].contains("not a multiple of its 2 parties"), "{e:?}");
}

#[test]
fn queues_that_never_balance() {
    let text = format!(
        "{HEAD}[queues.q]\ncapacity = 4\n[[groups]]\nname = \"p\"\nthreads = 1\nops = [ {{ repeat = {{ count = 10, ops = [ {{ push = \"q\" }} ] }} }} ]\n[[groups]]\nname = \"c\"\nthreads = 2\nops = [ {{ repeat = {{ count = 4, ops = [ {{ pop = \"q\" }} ] }} }} ]\n"
    );
    let e = errors(&text);
    assert!(e[0].starts_with("w.toml:2:1:"), "{e:?}");
    assert!(e[0].contains("10 pushes against 8 pops"), "{e:?}");
    assert!(e[0].contains("producers will block forever"), "{e:?}");
}

#[test]
fn unbalanced_locks() {
    let base = |ops: &str| {
        format!("{HEAD}[spin_locks.l]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {ops} ]\n")
    };
    let e = errors(&base("{ spin_lock = \"l\" }"));
    assert!(e[0].contains("never releases it"), "{e:?}");
    let e = errors(&base("{ spin_unlock = \"l\" }"));
    assert!(e[0].contains("without holding it"), "{e:?}");
    let e = errors(&base(
        "{ spin_lock = \"l\" }, { spin_lock = \"l\" }, { spin_unlock = \"l\" }",
    ));
    assert!(e[0].contains("self-deadlock"), "{e:?}");
    let e = errors(&base(
        "{ repeat = { count = 2, ops = [ { spin_lock = \"l\" } ] } }, { spin_unlock = \"l\" }",
    ));
    assert!(
        e.iter().any(|l| l.contains("inside a repeat body")),
        "{e:?}"
    );
}

#[test]
fn bad_expressions_and_values() {
    let text =
        format!("{HEAD}[[groups]]\nname = \"g\"\nthreads = \"2*x\"\nops = [ {{ compute = 1 }} ]\n");
    let e = errors(&text);
    assert!(
        e[0].starts_with("w.toml:4:11:") && e[0].contains("unexpected `x`"),
        "{e:?}"
    );
    let text = format!("{HEAD}[queues.q]\ncapacity = 0\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ shootdown = 0 }} ]\n");
    let e = errors(&text);
    assert!(e.iter().any(|l| l.contains("capacity 0")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("at least 1 page")), "{e:?}");
}

#[test]
fn touch_larger_than_buffer() {
    let text = format!("{HEAD}[buffers.b]\nbytes = 64\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ touch = {{ bytes = 128, buffer = \"b\" }} }} ]\n");
    assert!(errors(&text)[0].contains("larger than buffer `b`"));
}

#[test]
fn op_table_with_two_keys() {
    let text = format!(
        "{HEAD}[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ compute = 1, yield = 1 }} ]\n"
    );
    let e = errors(&text);
    assert!(e[0].starts_with("w.toml:5:"), "{e:?}");
}

#[test]
fn unknown_builtin_and_missing_file() {
    assert!(matches!(
        Source::resolve("nosuch"),
        Err(WorkloadError::UnknownWorkload(_))
    ));
    let e = Source::resolve("/nonexistent/x.toml").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.toml: cannot read"));
}

#[test]
fn zero_thread_parameter_and_bad_scale() {
    let s = Source::resolve("blackscholes").unwrap();
    assert!(matches!(
        s.instantiate(Some(0), 1.0),
        Err(WorkloadError::ZeroThreadParameter)
    ));
    assert!(matches!(
        s.instantiate(Some(1), -1.0),
        Err(WorkloadError::BadScale(_))
    ));
}

#[test]
fn waiting_while_holding_a_lock() {
    let text = format!(
        "{HEAD}[mutexes.m]\n[barriers.b]\nparties = 2\n[[groups]]\nname = \"g\"\nthreads = 2\nops = [ {{ lock = \"m\" }}, {{ repeat = {{ count = 1, ops = [ {{ barrier = \"b\" }} ] }} }}, {{ unlock = \"m\" }} ]\n"
    );
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|l| l.contains("waits at barrier `b` while holding `m`")),
        "{e:?}"
    );
    let text = format!("{HEAD}[spin_locks.l]\n[queues.q]\ncapacity = 1\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ spin_lock = \"l\" }}, {{ push = \"q\" }}, {{ pop = \"q\" }}, {{ spin_unlock = \"l\" }} ]\n");
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|l| l.contains("waits on queue `q` while holding `l`")),
        "{e:?}"
    );
}

#[test]
fn taking_a_lock_held_by_an_enclosing_scope() {
    let text = format!("{HEAD}[mutexes.m]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ lock = \"m\" }}, {{ repeat = {{ count = 2, ops = [ {{ lock = \"m\" }}, {{ unlock = \"m\" }} ] }} }}, {{ unlock = \"m\" }} ]\n");
    let e = errors(&text);
    assert!(e.iter().any(|l| l.contains("self-deadlock")), "{e:?}");
}

#[test]
fn barrier_with_fewer_parties_than_repeat_users() {
    // 3 threads, 2 parties, each arriving twice: two threads can pass both
    // generations together and strand the third.
    let text = format!("{HEAD}[barriers.b]\nparties = 2\n[[groups]]\nname = \"g\"\nthreads = 3\nops = [ {{ repeat = {{ count = 2, ops = [ {{ barrier = \"b\" }} ] }} }} ]\n");
    let e = errors(&text);
    assert!(e[0].contains("some more than once"), "{e:?}");
    // Arriving once each, any order completes.
    let text = format!("{HEAD}[barriers.b]\nparties = 2\n[[groups]]\nname = \"g\"\nthreads = 4\nops = [ {{ barrier = \"b\" }} ]\n");
    assert!(errors(&text).is_empty());
}

#[test]
fn io_ops_resolve_devices_and_check_their_values() {
    let ok = format!(
        "{HEAD}[devices.disk]\nqueue_depth = 2\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\", service_us = 50 }} }},\n]\n"
    );
    let p = Source::from_text("w.toml", &ok)
        .and_then(|s| s.instantiate(Some(1), 1.0))
        .unwrap();
    assert_eq!(p.devices[0].queue_depth, 2);
    assert_eq!(
        p.groups[0].ops[0],
        smplab_workload::Op::Io {
            device: 0,
            service_ns: 50_000
        }
    );
    assert!(p.uses_io());

    let undeclared = format!(
        "{HEAD}[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\", service_us = 50 }} }},\n]\n"
    );
    let e = errors(&undeclared);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("w.toml:6:21:"), "{e:?}");
    assert!(
        e[0].contains("undefined device `disk`; declare it under [devices.disk]"),
        "{e:?}"
    );

    let wrong_kind = format!(
        "{HEAD}[mutexes.disk]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\", service_us = 5 }} }},\n]\n"
    );
    let e = errors(&wrong_kind);
    assert!(e[0].contains("`disk` is a mutex, not a device"), "{e:?}");

    let zero_depth = format!(
        "{HEAD}[devices.disk]\nqueue_depth = 0\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\", service_us = 5 }} }},\n]\n"
    );
    let e = errors(&zero_depth);
    assert!(e[0].starts_with("w.toml:2:"), "{e:?}");
    assert!(e[0].contains("queue_depth 0"), "{e:?}");

    let huge = format!(
        "{HEAD}[devices.disk]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\", service_us = \"1000000*1000000\" }} }},\n]\n"
    );
    let e = errors(&huge);
    assert!(e[0].starts_with("w.toml:7:42:"), "{e:?}");
    assert!(e[0].contains("over an hour"), "{e:?}");

    let missing_service = format!(
        "{HEAD}[devices.disk]\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ io = {{ device = \"disk\" }} }},\n]\n"
    );
    let e = errors(&missing_service);
    assert!(e[0].starts_with("w.toml:7:"), "{e:?}");
    assert!(e[0].contains("service_us"), "{e:?}");

    let bad_depth_key = format!("{HEAD}[devices.disk]\ndepth = 3\n");
    let e = errors(&bad_depth_key);
    assert!(e[0].starts_with("w.toml:3:1"), "{e:?}");
}

// ---- pools and drains ----

/// A pool drained by `n` workers that pass each unit on to one consumer.
fn drain_text(pool_count: &str, consumer_pops: &str) -> String {
    format!(
        "{HEAD}[pools.items]\ncount = \"{pool_count}\"\n[queues.q]\ncapacity = 4\n\
[[groups]]\nname = \"worker\"\nthreads = \"n\"\nops = [\n  {{ compute = 1 }},\n  {{ drain = {{ pool = \"items\", ops = [\n    {{ compute = 5 }},\n    {{ push = \"q\" }},\n  ] }} }},\n]\n\
[[groups]]\nname = \"sink\"\nthreads = 1\nops = [ {{ repeat = {{ count = \"{consumer_pops}\", ops = [ {{ pop = \"q\" }} ] }} }} ]\n"
    )
}

#[test]
fn drain_counts_are_totals_per_pool_not_per_thread() {
    let p = Source::from_text("w.toml", &drain_text("10*n", "10*n"))
        .unwrap()
        .instantiate(Some(3), 1.0)
        .unwrap();
    assert_eq!(p.pools.len(), 1);
    assert_eq!(p.pools[0].units, 30);
    let c = p.expected_counts();
    // 3 workers × 1 fixed compute + 30 units × 1 compute; the sink's 30 pops.
    assert_eq!(c["compute"], 33);
    assert_eq!(c["compute_iters"], 3 + 30 * 5);
    assert_eq!(c["push"], 30);
    assert_eq!(c["pop"], 30);
    // Per thread only the part outside the drain is fixed.
    let fixed = smplab_workload::program::OpCounts::fixed_per_thread(&p.groups[0].ops).to_map();
    assert_eq!((fixed["compute"], fixed["push"]), (1, 0));
    assert_eq!(p.group_counts(0).to_map()["push"], 30);
    assert!(p.uses_drain());
    let mut pushes = 0;
    p.visit_totals(|_, op, times| {
        if matches!(op, smplab_workload::Op::Push(_)) {
            pushes += times;
        }
    });
    assert_eq!(pushes, 30);
}

#[test]
fn drained_pushes_must_balance_in_total() {
    let e = errors_n(&drain_text("10*n", "10*n+1"), 2);
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].starts_with("w.toml:4:1:") && e[0].contains("20 pushes against 21 pops"),
        "{e:?}"
    );
}

#[test]
fn drain_of_an_undeclared_or_wrong_kind_of_pool() {
    let text = format!(
        "{HEAD}[queues.q]\ncapacity = 1\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [\n  {{ drain = {{ pool = \"nope\", ops = [ {{ compute = 1 }} ] }} }},\n  {{ drain = {{ pool = \"q\", ops = [] }} }},\n]\n"
    );
    let e = errors(&text);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e[0].starts_with("w.toml:8:22:")
            && e[0].contains("undefined pool `nope`; declare it under [pools.nope]"),
        "{e:?}"
    );
    assert!(
        e[1].starts_with("w.toml:9:22:") && e[1].contains("`q` is a queue, not a pool"),
        "{e:?}"
    );
}

#[test]
fn bad_pool_counts_and_tables() {
    let group =
        "[[groups]]\nname = \"g\"\nthreads = 1\nops = [ { drain = { pool = \"p\", ops = [] } } ]\n";
    let e = errors(&format!("{HEAD}[pools.p]\ncount = \"n-5\"\n{group}"));
    assert!(
        e.len() == 1
            && e[0].starts_with("w.toml:3:9:")
            && e[0].contains("pool count: expression `n-5` is -3, not a count"),
        "{e:?}"
    );
    let e = errors(&format!(
        "{HEAD}[pools.p]\ncount = \"10000000000000000000\"\n{group}"
    ));
    assert!(
        e.len() == 1
            && e[0].starts_with("w.toml:3:9:")
            && e[0].contains(
                "pool `p` has 10000000000000000000 units; at most 9223372036854775807 fit"
            ),
        "{e:?}"
    );
    let e = errors(&format!("{HEAD}[pools.p]\nunits = 3\n{group}"));
    assert!(
        e.len() == 1 && e[0].starts_with("w.toml:3:1:") && e[0].contains("unknown field `units`"),
        "{e:?}"
    );
    let e = errors(&format!("{HEAD}[pools.p]\n{group}"));
    assert!(
        e.len() == 1 && e[0].contains("missing field `count`"),
        "{e:?}"
    );
    let e = errors(&format!("{HEAD}[pools.p]\ncount = 3\n[[groups]]\nname = \"g\"\nthreads = 1\nops = [ {{ drain = {{ ops = [] }} }} ]\n"));
    assert!(
        e.len() == 1 && e[0].starts_with("w.toml:7:") && e[0].contains("missing field `pool`"),
        "{e:?}"
    );
    // A pool of zero units is valid: its drain claims nothing.
    assert!(errors(&format!("{HEAD}[pools.p]\ncount = 0\n{group}")).is_empty());
}

#[test]
fn pools_are_drained_exactly_once_at_the_top_level() {
    let text = format!(
        "{HEAD}[pools.p]\ncount = 8\n[pools.unused]\ncount = 1\n\
[[groups]]\nname = \"a\"\nthreads = 2\nops = [\n  {{ drain = {{ pool = \"p\", ops = [ {{ compute = 1 }} ] }} }},\n  {{ repeat = {{ count = 2, ops = [ {{ drain = {{ pool = \"p\", ops = [] }} }} ] }} }},\n]\n\
[[groups]]\nname = \"b\"\nthreads = 1\nops = [\n  {{ drain = {{ pool = \"p\", ops = [ {{ drain = {{ pool = \"p\", ops = [] }} }} ] }} }},\n]\n"
    );
    let e = errors(&text);
    let has = |at: &str, what: &str| e.iter().any(|l| l.starts_with(at) && l.contains(what));
    assert!(
        has("w.toml:4:1:", "pool `unused` is never drained"),
        "{e:?}"
    );
    assert!(
        has(
            "w.toml:11:35:",
            "drain of pool `p` inside a repeat: the first pass empties the pool"
        ),
        "{e:?}"
    );
    assert!(
        has(
            "w.toml:11:35:",
            "pool `p` is already drained by group `a` at line 10, column 3"
        ),
        "{e:?}"
    );
    assert!(
        has("w.toml:17:35:", "drain of pool `p` inside another drain"),
        "{e:?}"
    );
    assert!(has("w.toml:17:3:", "already drained by group `a`"), "{e:?}");
}

#[test]
fn drain_bodies_have_no_barriers_and_release_their_locks() {
    let text = format!(
        "{HEAD}[pools.p]\ncount = 8\n[barriers.b]\nparties = 2\n[mutexes.m]\n\
[[groups]]\nname = \"g\"\nthreads = 2\nops = [\n  {{ drain = {{ pool = \"p\", ops = [\n    {{ barrier = \"b\" }},\n    {{ lock = \"m\" }},\n  ] }} }},\n]\n"
    );
    let e = errors(&text);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(
        e.iter()
            .any(|l| l.starts_with("w.toml:12:17:")
                && l.contains("waits at barrier `b` inside a drain")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|l| l.starts_with("w.toml:13:14:")
            && l.contains("mutex `m` is taken inside a drain body but not released in it")),
        "{e:?}"
    );
    // A barrier in a repeat inside a drain is inside the drain too.
    let text = format!(
        "{HEAD}[pools.p]\ncount = 8\n[barriers.b]\nparties = 2\n\
[[groups]]\nname = \"g\"\nthreads = 2\nops = [ {{ drain = {{ pool = \"p\", ops = [ {{ repeat = {{ count = 1, ops = [ {{ barrier = \"b\" }} ] }} }} ] }} }} ]\n"
    );
    let e = errors(&text);
    assert!(e.len() == 1 && e[0].contains("inside a drain"), "{e:?}");
}
