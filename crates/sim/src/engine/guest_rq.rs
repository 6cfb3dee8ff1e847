//! The guest run queues: one FIFO of ready threads per vCPU, kept as a
//! doubly linked list through `Sim::rq_links` (one entry per thread)
//! instead of a `VecDeque` per vCPU. The list's ends and length live in
//! `Vcpu`, whose hot lines the event loop reads anyway, and a VM's threads
//! are contiguous, so its links share a cache line or two. A `VecDeque`
//! kept its buffer in its own heap block: on hosts of thousands of pCPUs a
//! push or pop there was a cache miss of its own. Same order as the
//! `VecDeque` (push at the back, pop at either end).

use super::{Sim, NONE};

/// A vCPU's guest run queue: its first and last thread (NONE: empty).
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestRq {
    pub head: u32,
    pub tail: u32,
    pub len: u32,
}

impl GuestRq {
    pub const EMPTY: GuestRq = GuestRq {
        head: NONE,
        tail: NONE,
        len: 0,
    };

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }

    /// The thread at the front, if any.
    #[inline]
    pub fn front(&self) -> Option<u32> {
        (self.head != NONE).then_some(self.head)
    }
}

/// A queued thread's neighbours in its vCPU's run queue (NONE at the ends).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RqLink {
    pub prev: u32,
    pub next: u32,
}

impl RqLink {
    pub const UNLINKED: RqLink = RqLink {
        prev: NONE,
        next: NONE,
    };
}

impl GuestRq {
    /// Queue thread `t` (in no run queue) at the back.
    #[inline]
    fn push_back(&mut self, links: &mut [RqLink], t: u32) {
        let tail = self.tail;
        self.tail = t;
        self.len += 1;
        if tail == NONE {
            self.head = t;
        } else {
            links[tail as usize].next = t;
        }
        links[t as usize] = RqLink {
            prev: tail,
            next: NONE,
        };
    }

    /// Take the thread at the front.
    #[inline]
    fn pop_front(&mut self, links: &mut [RqLink]) -> Option<u32> {
        let t = self.head;
        if t == NONE {
            return None;
        }
        let next = links[t as usize].next;
        self.head = next;
        self.len -= 1;
        if next == NONE {
            self.tail = NONE;
        } else {
            links[next as usize].prev = NONE;
        }
        links[t as usize] = RqLink::UNLINKED;
        Some(t)
    }

    /// Take the thread at the back.
    #[inline]
    fn pop_back(&mut self, links: &mut [RqLink]) -> Option<u32> {
        let t = self.tail;
        if t == NONE {
            return None;
        }
        let prev = links[t as usize].prev;
        self.tail = prev;
        self.len -= 1;
        if prev == NONE {
            self.head = NONE;
        } else {
            links[prev as usize].next = NONE;
        }
        links[t as usize] = RqLink::UNLINKED;
        Some(t)
    }
}

impl Sim {
    /// Queue thread `t` (in no run queue) at the back of vCPU `v`'s.
    #[inline]
    pub(super) fn rq_push_back(&mut self, v: u32, t: u32) {
        self.vcpus[v as usize].rq.push_back(&mut self.rq_links, t);
    }

    /// Take the thread at the front of vCPU `v`'s run queue.
    #[inline]
    pub(super) fn rq_pop_front(&mut self, v: u32) -> Option<u32> {
        self.vcpus[v as usize].rq.pop_front(&mut self.rq_links)
    }

    /// Take the thread at the back of vCPU `v`'s run queue (stealing).
    #[inline]
    pub(super) fn rq_pop_back(&mut self, v: u32) -> Option<u32> {
        self.vcpus[v as usize].rq.pop_back(&mut self.rq_links)
    }

    /// vCPU `v`'s queued threads, front to back (diagnostics).
    pub(super) fn rq_threads(&self, v: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut t = self.vcpus[v as usize].rq.head;
        while t != NONE {
            out.push(t);
            t = self.rq_links[t as usize].next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{GuestRq, RqLink};
    use std::collections::VecDeque;

    /// The list against a `VecDeque` over a fixed pseudo-random sequence of
    /// pushes and pops at both ends, two queues sharing one link array.
    #[test]
    fn linked_run_queue_keeps_vecdeque_order() {
        let n = 64u32;
        let mut links = vec![RqLink::UNLINKED; n as usize];
        let mut rqs = [GuestRq::EMPTY; 2];
        let mut models: [VecDeque<u32>; 2] = [VecDeque::new(), VecDeque::new()];
        let mut free: Vec<u32> = (0..n).rev().collect();
        let mut x = 0x9E37_79B9u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let q = (x >> 8) as usize % 2;
            let (rq, model) = (&mut rqs[q], &mut models[q]);
            match x % 3 {
                0 => {
                    if let Some(t) = free.pop() {
                        rq.push_back(&mut links, t);
                        model.push_back(t);
                    }
                }
                1 => {
                    let got = rq.pop_front(&mut links);
                    assert_eq!(got, model.pop_front());
                    free.extend(got);
                }
                _ => {
                    let got = rq.pop_back(&mut links);
                    assert_eq!(got, model.pop_back());
                    free.extend(got);
                }
            }
            assert_eq!(rq.len() as usize, model.len());
            assert_eq!(rq.front(), model.front().copied());
            assert_eq!(rq.is_empty(), model.is_empty());
        }
    }
}
