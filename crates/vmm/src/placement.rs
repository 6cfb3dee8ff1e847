//! Where vCPU threads and the I/O thread run on the host.

/// Placement of the vCPU threads on host CPUs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Placement {
    /// Let the host scheduler move threads freely.
    #[default]
    Floating,
    /// vCPU `i` is pinned to host CPU `cpus[i % cpus.len()]`.
    Pinned(Vec<usize>),
    /// Every vCPU may run on any CPU of the set.
    Confined(Vec<usize>),
}

impl Placement {
    /// The CPU set vCPU `index` may run on, or `None` for floating.
    pub fn cpus_for_vcpu(&self, index: usize) -> Option<Vec<usize>> {
        match self {
            Placement::Floating => None,
            Placement::Pinned(cpus) if cpus.is_empty() => None,
            Placement::Pinned(cpus) => Some(vec![cpus[index % cpus.len()]]),
            Placement::Confined(cpus) if cpus.is_empty() => None,
            Placement::Confined(cpus) => Some(cpus.clone()),
        }
    }

    /// Every CPU this placement names.
    pub fn all_cpus(&self) -> &[usize] {
        match self {
            Placement::Floating => &[],
            Placement::Pinned(cpus) | Placement::Confined(cpus) => cpus,
        }
    }
}

/// The one CPU-list parser (`0,2-3`) and its type, shared by every crate.
pub use smplab_record::cpus::{parse_cpu_list, CpuList, CpuListError};

/// Restrict the calling thread to `cpus`.
pub fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    pin_thread(0, cpus)
}

/// Restrict thread `tid` of this process (0: the calling thread) to `cpus`.
pub fn pin_thread(tid: libc::pid_t, cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is a plain bit array; all-zero is the valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    for &cpu in cpus {
        if cpu >= max {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("CPU {cpu} is beyond the largest CPU number {max} this build supports"),
            ));
        }
        // SAFETY: cpu < CPU_SETSIZE was checked above, so the bit is inside `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `tid` is a thread id (0: the calling thread; a stale id makes
    // the call fail with ESRCH, nothing worse); `set` is a valid, initialized
    // cpu_set_t and the size passed is its size.
    let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The host CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: as in pin_current_thread, an all-zero cpu_set_t is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is this thread; `set` is valid for writes of its own size.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..8 * std::mem::size_of::<libc::cpu_set_t>())
        // SAFETY: every index is below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_reject_garbage() {
        assert_eq!(parse_cpu_list("0,2-3").unwrap(), vec![0, 2, 3]);
        assert_eq!(parse_cpu_list(" 1 ").unwrap(), vec![1]);
        for bad in ["", "x", "3-1", "1-", "-", "0-99999", "1,,a"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pinned_placement_wraps_around() {
        let p = Placement::Pinned(vec![0, 1]);
        assert_eq!(p.cpus_for_vcpu(2), Some(vec![0]));
        assert_eq!(Placement::Floating.cpus_for_vcpu(0), None);
        assert_eq!(Placement::Confined(vec![1]).cpus_for_vcpu(5), Some(vec![1]));
    }

    #[test]
    fn pinning_to_an_allowed_cpu_works_and_absurd_cpu_fails() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let t = std::thread::spawn(move || {
            pin_current_thread(&allowed[..1]).unwrap();
            assert!(pin_current_thread(&[1 << 20]).is_err());
        });
        t.join().unwrap();
    }
}
