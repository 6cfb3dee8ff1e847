//! Built-in workload profiles: TOML files in `crates/workload/profiles/`,
//! embedded at build time, loaded through the same parser and validator as user
//! files. Each documents in `imitates` which real program it models and how.

/// `(name, TOML text)` of every built-in profile, in the order `smplab workloads` lists them.
pub const PROFILES: &[(&str, &str)] = &[
    (
        "blackscholes",
        include_str!("../profiles/blackscholes.toml"),
    ),
    ("canneal", include_str!("../profiles/canneal.toml")),
    ("dedup", include_str!("../profiles/dedup.toml")),
    (
        "fluidanimate",
        include_str!("../profiles/fluidanimate.toml"),
    ),
    ("ocean_ncp", include_str!("../profiles/ocean_ncp.toml")),
    (
        "streamcluster",
        include_str!("../profiles/streamcluster.toml"),
    ),
    ("vips", include_str!("../profiles/vips.toml")),
    ("volrend", include_str!("../profiles/volrend.toml")),
    ("spinlock", include_str!("../profiles/spinlock.toml")),
    ("shootdown", include_str!("../profiles/shootdown.toml")),
    ("oltp", include_str!("../profiles/oltp.toml")),
    ("phases", include_str!("../profiles/phases.toml")),
];

/// Names of all built-in profiles.
pub fn names() -> impl Iterator<Item = &'static str> {
    PROFILES.iter().map(|(n, _)| *n)
}

/// The TOML text of a built-in profile.
pub fn text(name: &str) -> Option<&'static str> {
    PROFILES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use crate::Source;

    #[test]
    fn every_profile_validates_at_several_sizes() {
        for name in super::names() {
            let src = Source::resolve(name).expect("built-in parses");
            assert_eq!(src.spec.name, name, "file name and `name` agree");
            assert!(
                !src.spec.imitates.trim().is_empty(),
                "{name} documents what it imitates"
            );
            for n in [1, 2, 3, 4, 16] {
                for scale in [0.01, 0.1, 1.0] {
                    let p = src
                        .instantiate(Some(n), scale)
                        .unwrap_or_else(|e| panic!("{name} n={n} s={scale}: {e}"));
                    assert!(p.total_threads() >= n);
                }
            }
        }
    }

    #[test]
    fn dedup_has_3n_plus_2_threads() {
        let p = Source::resolve("dedup")
            .unwrap()
            .instantiate(Some(4), 1.0)
            .unwrap();
        assert_eq!(p.total_threads(), 14);
        assert_eq!(p.groups.len(), 5);
    }

    #[test]
    fn streamcluster_barrier_spins_35000_without_pause() {
        let p = Source::resolve("streamcluster")
            .unwrap()
            .instantiate(Some(4), 1.0)
            .unwrap();
        let b = &p.barriers[0];
        assert_eq!(b.spin_limit, 35000);
        assert!(!b.pause);
        assert_eq!(b.wait, crate::BarrierWait::SpinThenBlock);
        let blocked = p.spin_to_block();
        assert_eq!(blocked.barriers[0].wait, crate::BarrierWait::Block);
    }
}

#[cfg(test)]
mod io_profile_tests {
    use crate::program::counter_names;
    use crate::Source;

    #[test]
    fn oltp_reads_two_pages_and_commits_once_per_transaction() {
        let p = Source::resolve("oltp")
            .unwrap()
            .instantiate(Some(4), 1.0)
            .unwrap();
        assert!(p.uses_io());
        let c = p.expected_counts();
        // 256 transactions in all: two disk reads and one log write each.
        assert_eq!(c[counter_names::IO], 256 * 3);
        assert_eq!(c[counter_names::MUTEX_LOCK], 256 * 5);
        assert_eq!(p.devices.len(), 2);
    }

    #[test]
    fn phases_does_io_first_then_synchronizes() {
        let p = Source::resolve("phases")
            .unwrap()
            .instantiate(Some(2), 1.0)
            .unwrap();
        let c = p.expected_counts();
        assert_eq!(c[counter_names::IO], 512);
        assert_eq!(c[counter_names::BARRIER], 2 * (1 + 100));
        assert!(matches!(
            p.groups[0].ops[0],
            crate::Op::Repeat { ref body, .. } if matches!(body[1], crate::Op::Io { .. })
        ));
    }
}
