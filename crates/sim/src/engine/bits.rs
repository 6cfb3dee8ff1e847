//! A two-level bitmap over the host's pCPUs: one bit per pCPU, plus one
//! summary bit per 64-bit word that is not zero. Searching for the next set
//! bit skips 64 empty words per summary word, so on a host where almost no
//! pCPU is idle (or almost no run queue holds a vCPU) a search costs a few
//! word reads instead of one per 64 pCPUs: the search stays cheap as the
//! host grows from hundreds to tens of thousands of pCPUs. Same answers as
//! a linear scan of the flat bitmap (`host::next_bit`).

/// One bit per pCPU, with a summary of the non-zero words.
#[derive(Debug, Clone, Default)]
pub(crate) struct HostBits {
    words: Vec<u64>,
    /// Bit `w` set: `words[w]` is not zero.
    summary: Vec<u64>,
}

impl HostBits {
    /// `n` bits, all clear.
    pub fn new(n: usize) -> HostBits {
        let words = n.div_ceil(64);
        HostBits {
            words: vec![0; words],
            summary: vec![0; words.div_ceil(64)],
        }
    }

    /// Set (`on`) or clear bit `i`.
    #[inline]
    pub fn assign(&mut self, i: u32, on: bool) {
        let (w, b) = ((i / 64) as usize, i % 64);
        let word = &mut self.words[w];
        if on {
            *word |= 1 << b;
        } else {
            *word &= !(1 << b);
        }
        let (s, sb) = (w / 64, w % 64);
        if *word == 0 {
            self.summary[s] &= !(1 << sb);
        } else {
            self.summary[s] |= 1 << sb;
        }
    }

    /// Any bit set.
    #[inline]
    pub fn any(&self) -> bool {
        self.summary.iter().any(|&s| s != 0)
    }

    /// The first set bit in `a..b`.
    #[inline]
    pub fn next(&self, a: u32, b: u32) -> Option<u32> {
        if a >= b {
            return None;
        }
        // The rest of `a`'s own word.
        let w = (a / 64) as usize;
        let rest = self.words[w] >> (a % 64);
        if rest != 0 {
            let c = a + rest.trailing_zeros();
            return (c < b).then_some(c);
        }
        // The next non-zero word after `w`, through the summary.
        let next = w + 1;
        let mut s = next / 64;
        if s >= self.summary.len() {
            return None;
        }
        let mut sw = self.summary[s] & (u64::MAX << (next % 64));
        loop {
            if sw != 0 {
                let word = s * 64 + sw.trailing_zeros() as usize;
                // A word index of a u32 bit index fits in u32.
                let c = u32::try_from(word * 64).unwrap_or(u32::MAX)
                    + self.words[word].trailing_zeros();
                return (c < b).then_some(c);
            }
            s += 1;
            if s >= self.summary.len() || s * 64 * 64 >= b as usize {
                return None;
            }
            sw = self.summary[s];
        }
    }

    /// First set bit in `lo..hi`, searching from `from` and wrapping.
    #[inline]
    pub fn find(&self, lo: u32, hi: u32, from: u32) -> Option<u32> {
        let from = from.clamp(lo, hi.saturating_sub(1));
        self.next(from, hi).or_else(|| self.next(lo, from))
    }
}

#[cfg(test)]
mod tests {
    use super::HostBits;

    /// The flat scan `HostBits` replaces.
    fn linear(bits: &[bool], a: u32, b: u32) -> Option<u32> {
        (a..b).find(|&i| bits[i as usize])
    }

    #[test]
    fn searches_match_a_linear_scan() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for n in [1usize, 63, 64, 65, 4095, 4096, 4097, 16_384, 70_000] {
            let mut hb = HostBits::new(n);
            let mut flat = vec![false; n];
            for step in 0..3_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = u32::try_from(x % n as u64).unwrap();
                // Mostly clear (the busy host), sometimes dense.
                let on = if step < 1_500 {
                    x.is_multiple_of(7)
                } else {
                    x.is_multiple_of(2)
                };
                hb.assign(i, on);
                flat[i as usize] = on;
                let a = u32::try_from((x >> 20) % n as u64).unwrap();
                let b = u32::try_from((x >> 40) % (n as u64 + 1)).unwrap();
                let nn = u32::try_from(n).unwrap();
                assert_eq!(hb.next(a, b), linear(&flat, a, b), "n {n} a {a} b {b}");
                assert_eq!(hb.next(a, nn), linear(&flat, a, nn));
                let (lo, hi) = (a.min(b), a.max(b));
                if lo < hi {
                    let from = u32::try_from((x >> 8) % n as u64).unwrap();
                    let f = from.clamp(lo, hi - 1);
                    let expect = linear(&flat, f, hi).or_else(|| linear(&flat, lo, f));
                    assert_eq!(hb.find(lo, hi, from), expect);
                }
                assert_eq!(hb.any(), flat.iter().any(|&f| f));
            }
        }
    }
}
