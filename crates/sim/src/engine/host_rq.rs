//! A pCPU's host run queue: the queued vCPUs in arrival order, the first
//! few inline in `Pcpu`. With 2-8 vCPUs per pCPU the queue is short, and a
//! `VecDeque` kept it in a heap block of its own: on hosts of thousands of
//! pCPUs every pick or enqueue there was a cache miss beside the `Pcpu`
//! line. Only the operations the host scheduler uses: push at the back,
//! remove at a position, and the slice's iteration order (front to back).

use smallvec::SmallVec;

/// vCPUs held inline before the queue spills to the heap (4 vCPUs per pCPU
/// is the common overcommit; longer queues still work, from the heap).
const INLINE: usize = 6;

#[derive(Debug, Clone, Default)]
pub(crate) struct HostRq(SmallVec<[u32; INLINE]>);

impl HostRq {
    #[inline]
    pub fn push_back(&mut self, v: u32) {
        self.0.push(v);
    }

    /// Remove and return the vCPU at `pos` (None past the end), keeping
    /// the order of the others.
    #[inline]
    pub fn remove(&mut self, pos: usize) -> Option<u32> {
        (pos < self.0.len()).then(|| self.0.remove(pos))
    }
}

impl std::ops::Deref for HostRq {
    type Target = [u32];
    #[inline]
    fn deref(&self) -> &[u32] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::HostRq;
    use std::collections::VecDeque;

    /// Same contents and order as the `VecDeque` it replaced, across the
    /// inline capacity and back, for pushes and removals anywhere.
    #[test]
    fn host_run_queue_keeps_vecdeque_order() {
        let mut rq = HostRq::default();
        let mut model: VecDeque<u32> = VecDeque::new();
        let mut x = 0x2545_F491u32;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if x % 5 < 3 && model.len() < 20 {
                rq.push_back(i);
                model.push_back(i);
            } else {
                let pos = (x >> 8) as usize % (model.len() + 2);
                assert_eq!(rq.remove(pos), model.remove(pos));
            }
            assert!(rq.iter().eq(model.iter()));
            assert_eq!(rq.is_empty(), model.is_empty());
        }
    }
}
