//! Real programs no one here wrote: pigz -p 2, pigz -p 4 and xz -T 2. The
//! model's native run has the traced thread count and, per object kind, the
//! traced acquisitions, waits and wake-ups. Small inputs keep the default
//! test time modest; the 64 MiB figures and wall times are in the bench
//! (`cargo bench -p smplab-trace --bench programs`).

mod common;

use common::*;

fn check(tag: &str, argv_of: impl Fn(&str) -> Vec<String>, bytes: usize, threads: usize) {
    let dir = scratch(tag);
    let input = dir.join("input.txt");
    text_file(&input, bytes);
    let argv = argv_of(input.to_str().unwrap());
    need(&argv[0]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let t = trace_and_model(&argv, &dir.join("p.trace"), None);
    assert_eq!(
        t.trace.threads.len(),
        threads,
        "threads traced for {argv:?}"
    );
    let rec = run_native(&t.program);
    check_counts(&t, &rec);
    let _ = std::fs::remove_dir_all(&dir);
}

fn pigz(p: u32) -> impl Fn(&str) -> Vec<String> {
    move |input| {
        ["pigz", "-p", &p.to_string(), "-k", "-f", input]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

// pigz: main reads, `p` compress threads, one writer thread.
#[test]
fn pigz_p2() {
    check("pigz2", pigz(2), 4 << 20, 4);
}

#[test]
fn pigz_p4() {
    check("pigz4", pigz(4), 4 << 20, 6);
}

// xz -T 2 at -1 (1 MiB dictionary, 3 MiB blocks) so 8 MiB make several
// blocks: main plus two worker threads.
#[test]
fn xz_t2() {
    check(
        "xz2",
        |input| {
            ["xz", "-T", "2", "-1", "-k", "-f", input]
                .iter()
                .map(|s| s.to_string())
                .collect()
        },
        8 << 20,
        3,
    );
}
