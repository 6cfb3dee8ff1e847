//! Software spin detection: Wells et al.'s Spin Detection Buffer in software.
//!
//! The SDB calls a vCPU spinning when it commits fewer than 8 unique stores
//! (and, in user mode, loads) in 1024 instructions (Wells et al. §3.2).
//! Software cannot count stores; it can look at where a vCPU is and what
//! code it runs there. At every sample the vCPU's own thread (outside
//! KVM_RUN, after the sampling kick) reads its registers and calls it
//! spinning only when every signal agrees:
//! - user mode (CPL 3, with `user_only`): the guest kernel's idle HLT is
//!   the halt sampler's, and its short run-queue locks are not what the
//!   policies are for;
//! - the code around RIP, read through the guest's page tables
//!   (`KVM_TRANSLATE`, then guest memory), is a spin-wait loop
//!   ([`super::spin_loop::classify`]: a short loop that polls a fixed word
//!   and writes nothing new);
//! - RIP stayed in that loop for `samples` samples in a row, or
//!   `pause_samples` for a loop that PAUSEs (a user-mode PAUSE loop that
//!   polls a word is a spin-wait by construction: PAUSE is the spin-loop
//!   hint and nothing else), or, with a dirty ring, the vCPU wrote at most
//!   `quiet_pages` pages over the whole interval since its previous sample
//!   (the first sample in the loop then suffices: a vCPU that was working
//!   has its output to write, one that arrives at a wait from a compute
//!   stretch that wrote nothing is caught one interval earlier, and the
//!   loop's shape, not the streak, is what tells a wait from work);
//! - with a dirty ring ([`DirtyRing`]), the vCPU wrote at most `max_pages`
//!   pages since the previous sample, when that sample found it in the same
//!   loop already; at the first sample in a PAUSE loop the count covers the
//!   work before the wait (a lock's critical section writes 3–40 pages:
//!   `smplab host` traces on spinlock, docs/host.md) and says nothing about
//!   the loop, so it does not veto.
//!
//! Anything doubtful — a register read, a translation or a memory read that
//! fails, bytes that do not decode, a loop that does not close — counts as
//! "not spinning": a policy preempts only on a sure sample.

use super::spin_loop::{classify, SpinLoop, MAX_LOOP_BYTES};
use super::DirtyRing;
use smplab_policy::Sample;
use std::collections::HashMap;
use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// The classifier's thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinSettings {
    /// Consecutive samples in one spin loop before "spinning".
    pub samples: usize,
    /// The same for a loop that executes PAUSE.
    pub pause_samples: usize,
    /// A sample in a spin loop counts at once when the vCPU wrote at most
    /// this many pages since its previous sample (a whole interval: not
    /// the first sample after a gap), with a dirty ring; `None`: never.
    pub quiet_pages: Option<u64>,
    /// Most pages a spinning vCPU may write between two samples.
    pub max_pages: u64,
    /// Count written pages with per-vCPU dirty rings (when KVM offers them).
    pub use_dirty_ring: bool,
    /// Only user mode (CPL 3) can spin: the guest kernel's idle HLT and its
    /// short run-queue locks are not what the policies are for (and PLE
    /// covers kernel PAUSE loops on hardware).
    pub user_only: bool,
}

impl Default for SpinSettings {
    fn default() -> Self {
        // Two samples in one loop without PAUSE: a vCPU caught once in a
        // polling loop on its way through is not preempted. One with PAUSE:
        // it only ever runs while waiting, and the latency stays under an
        // interval. A spin loop writes at most a counter and its lock word
        // (`spin_loop::MAX_STORE_ADDRESSES`): two pages of slack. At once
        // after an interval of at most one written page: the smplab guest's
        // spin waits write one (their iteration counter and spin word,
        // docs/guest-abi.md), its compute phases between barriers none, its
        // other phases tens to hundreds (`smplab host` traces, docs/host.md).
        SpinSettings {
            samples: 2,
            pause_samples: 1,
            quiet_pages: Some(1),
            max_pages: 2,
            use_dirty_ring: true,
            user_only: true,
        }
    }
}

/// Classified code addresses kept per vCPU before the cache starts over.
const CACHE_ENTRIES: usize = 4096;
const PAGE: u64 = 4096;

/// The verdict of one sample, before the streak and the dirty ring.
type Loop = Option<SpinLoop>;

/// One vCPU's detector: its streak of samples in one spin loop, its dirty
/// ring, and the guest memory its code is read from.
pub struct SpinDetector {
    settings: SpinSettings,
    ring: Option<DirtyRing>,
    memory: Option<GuestMemoryMmap>,
    last_pages: Option<u64>,
    /// The ring's last harvest was a sample's (not a reset's): the next
    /// count covers a whole sampling interval.
    sampled: bool,
    /// The loop of the last sample and how many samples in a row found it.
    current: Loop,
    streak: usize,
    /// (CR3, RIP) -> the loop there (code does not change under a running
    /// guest; the smplab guest has one address space).
    cache: HashMap<(u64, u64), Loop>,
}

impl SpinDetector {
    /// A detector reading code from `memory` (without it every sample is
    /// doubtful: never spinning).
    pub fn new(
        settings: SpinSettings,
        ring: Option<DirtyRing>,
        memory: Option<GuestMemoryMmap>,
    ) -> Self {
        SpinDetector {
            settings: SpinSettings {
                samples: settings.samples.max(1),
                pause_samples: settings.pause_samples.max(1),
                ..settings
            },
            ring,
            memory,
            last_pages: None,
            sampled: false,
            current: None,
            streak: 0,
            cache: HashMap::new(),
        }
    }

    /// Pages the vCPU wrote between its last two samples (with a ring).
    pub fn last_pages(&self) -> Option<u64> {
        self.last_pages
    }

    /// Add one sample's loop (`None`: not in a spin loop, or doubtful); true
    /// once the last `samples` (`pause_samples` for a PAUSE loop) samples
    /// all found the same loop.
    pub fn push(&mut self, found: Loop) -> bool {
        match (found, self.current) {
            (Some(now), Some(before)) if now.overlaps(&before) => self.streak += 1,
            (Some(_), _) => self.streak = 1,
            (None, _) => self.streak = 0,
        }
        self.current = found;
        let needed = match found {
            Some(l) if l.pauses => self.settings.pause_samples,
            _ => self.settings.samples,
        };
        self.streak >= needed
    }

    /// Whether a sample in loop `found` counts at once, before its streak:
    /// the vCPU wrote at most `quiet_pages` pages over a whole interval
    /// (`whole_interval`: the ring's count started at the previous sample).
    fn at_once(&self, found: Loop, pages: Option<u64>, whole_interval: bool) -> bool {
        found.is_some()
            && whole_interval
            && pages
                .zip(self.settings.quiet_pages)
                .is_some_and(|(p, most)| p <= most)
    }

    /// Whether the pages written since the previous sample (`pages`) allow a
    /// verdict in loop `found`: few enough, or written before the wait began
    /// (the first sample in a PAUSE loop: the previous one was elsewhere).
    fn quiet(&self, found: Loop, pages: Option<u64>) -> bool {
        pages.is_none_or(|p| p <= self.settings.max_pages)
            || (self.streak == 1 && found.is_some_and(|l| l.pauses))
    }

    /// Restart the streak after samples were skipped (the vCPU kept
    /// running): the ring keeps counting from the last sample, so the next
    /// one's count covers more than a whole interval.
    pub fn restart_streak(&mut self) {
        self.current = None;
        self.streak = 0;
    }

    /// Forget the history (the vCPU was descheduled: its next sample starts
    /// a new run).
    pub fn reset(&mut self) {
        self.current = None;
        self.streak = 0;
        self.sampled = false;
        if let Some(ring) = &mut self.ring {
            ring.harvest();
        }
    }

    /// The spin loop around `rip` in the address space of `cr3`, if the code
    /// there is one (`None` when it is not, or cannot be read).
    fn loop_at(&mut self, fd: &kvm_ioctls::VcpuFd, cr3: u64, rip: u64) -> Loop {
        if let Some(&known) = self.cache.get(&(cr3, rip)) {
            return known;
        }
        let memory = self.memory.as_ref()?;
        let (code, base) = read_code(fd, memory, rip)?;
        let found = classify(&code, base, rip).ok();
        if self.cache.len() >= CACHE_ENTRIES {
            self.cache.clear();
        }
        self.cache.insert((cr3, rip), found);
        found
    }

    /// Sample the vCPU of `fd` (on its own thread, outside KVM_RUN).
    pub fn observe(&mut self, fd: &kvm_ioctls::VcpuFd) -> Sample {
        let sregs = fd.get_sregs().ok();
        let in_kernel = sregs.is_some_and(|s| s.cs.dpl == 0);
        let found = match (fd.get_regs(), sregs) {
            (Ok(regs), Some(s)) if !(self.settings.user_only && s.cs.dpl != 3) => {
                self.loop_at(fd, s.cr3, regs.rip)
            }
            _ => None,
        };
        let confirmed = self.push(found);
        self.last_pages = self.ring.as_mut().map(DirtyRing::harvest);
        let whole_interval = std::mem::replace(&mut self.sampled, true);
        let in_loop = confirmed || self.at_once(found, self.last_pages, whole_interval);
        let quiet = self.quiet(found, self.last_pages);
        Sample {
            spinning: in_loop && quiet,
            halted: false,
            in_kernel,
        }
    }
}

/// The guest's code from `rip - MAX_LOOP_BYTES` to `rip + MAX_LOOP_BYTES`
/// (as much of it as is mapped, RIP's own page at least) and the virtual
/// address of its first byte.
fn read_code(
    fd: &kvm_ioctls::VcpuFd,
    memory: &GuestMemoryMmap,
    rip: u64,
) -> Option<(Vec<u8>, u64)> {
    let lo = rip.saturating_sub(MAX_LOOP_BYTES);
    let hi = rip.checked_add(MAX_LOOP_BYTES)?;
    let read_page = |gva: u64, from: u64, to: u64| -> Option<Vec<u8>> {
        let t = fd.translate_gva(gva).ok()?;
        if t.valid == 0 {
            return None;
        }
        let mut buf = vec![0u8; usize::try_from(to - from).ok()?];
        memory
            .read_slice(&mut buf, GuestAddress(t.physical_address + (from - gva)))
            .ok()?;
        Some(buf)
    };
    let rip_page = rip & !(PAGE - 1);
    let mut code = read_page(rip_page, lo.max(rip_page), hi.min(rip_page + PAGE))?;
    let mut base = lo.max(rip_page);
    if lo < rip_page {
        if let Some(mut before) = read_page(lo & !(PAGE - 1), lo, rip_page) {
            before.extend(code);
            code = before;
            base = lo;
        }
    }
    if hi > rip_page + PAGE {
        if let Some(after) = read_page(rip_page + PAGE, rip_page + PAGE, hi) {
            code.extend(after);
        }
    }
    Some((code, base))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(start: u64, end: u64) -> Loop {
        Some(SpinLoop {
            start,
            end,
            pauses: false,
        })
    }

    #[test]
    fn spinning_takes_enough_samples_in_one_loop() {
        let mut d = SpinDetector::new(
            SpinSettings {
                samples: 3,
                ..SpinSettings::default()
            },
            None,
            None,
        );
        assert!(!d.push(at(0x1000, 0x1020)));
        assert!(
            !d.push(at(0x1010, 0x1030)),
            "the same loop, closed elsewhere"
        );
        assert!(d.push(at(0x1000, 0x1020)));
        assert!(d.push(at(0x1000, 0x1020)));
        assert!(!d.push(at(0x5000, 0x5010)), "another loop starts over");
        assert!(!d.push(None), "a doubtful sample breaks the streak");
        assert!(!d.push(at(0x5000, 0x5010)));
        assert!(!d.push(at(0x5000, 0x5010)));
        assert!(d.push(at(0x5000, 0x5010)));
        d.reset();
        assert!(!d.push(at(0x5000, 0x5010)));
        d.reset();
        let pausing = Some(SpinLoop {
            start: 0x5000,
            end: 0x5010,
            pauses: true,
        });
        assert!(
            d.push(pausing),
            "a PAUSE loop: one sample (pause_samples 1)"
        );
        assert!(!d.push(None));
    }

    /// Pages written before a PAUSE loop's first sample do not veto it; in
    /// a loop seen before, or one without PAUSE, they do.
    #[test]
    fn pages_before_a_pause_loop_do_not_veto_its_first_sample() {
        let mut d = SpinDetector::new(SpinSettings::default(), None, None);
        let pausing = Some(SpinLoop {
            start: 0x5000,
            end: 0x5010,
            pauses: true,
        });
        assert!(d.push(pausing));
        assert!(d.quiet(pausing, Some(40)), "written before the wait");
        assert!(d.push(pausing));
        assert!(!d.quiet(pausing, Some(40)), "written in the loop");
        assert!(d.quiet(pausing, Some(2)));
        d.reset();
        let plain = at(0x1000, 0x1020);
        assert!(!d.push(plain));
        assert!(!d.quiet(plain, Some(3)), "no PAUSE: pages veto");
    }

    /// The first sample in a loop counts after a whole interval with at
    /// most `quiet_pages` pages written; not after a gap, not without a
    /// ring, not with more pages, not outside a loop.
    #[test]
    fn a_quiet_interval_makes_the_first_sample_enough() {
        let d = SpinDetector::new(SpinSettings::default(), None, None);
        let l = at(0x1000, 0x1020);
        assert!(d.at_once(l, Some(1), true));
        assert!(d.at_once(l, Some(0), true));
        assert!(!d.at_once(l, Some(2), true), "it wrote");
        assert!(!d.at_once(l, Some(0), false), "first sample after a gap");
        assert!(!d.at_once(l, None, true), "no dirty ring");
        assert!(!d.at_once(None, Some(0), true), "not in a loop");
        let off = SpinDetector::new(
            SpinSettings {
                quiet_pages: None,
                ..SpinSettings::default()
            },
            None,
            None,
        );
        assert!(!off.at_once(l, Some(0), true));
    }
}
