//! The compute kernel: the exact instruction sequence a `compute` op runs, in
//! every executor. One iteration is a 64-bit multiply-add on a register (an LCG
//! step) plus the loop branch:
//!
//! ```text
//! 1:  imul %rdx, %rax      # rax = rax * 6364136223846793005
//!     add  %rsi, %rax      # rax += 1442695040888963407
//!     dec  %rcx
//!     jnz  1b
//! ```
//! The guest kernel runs the same four instructions at CPL3 (docs/program-encoding.md),
//! and the simulator charges `ns_per_compute_iter` from its platform profile.

/// Multiplier and increment of the LCG step (Knuth's MMIX constants).
pub const LCG_MUL: u64 = 6364136223846793005;
pub const LCG_ADD: u64 = 1442695040888963407;

/// Run `iters` iterations of the kernel on `state` and return the new state.
/// Callers keep the result observable (e.g. `std::hint::black_box`).
#[inline]
pub fn compute(iters: u64, state: u64) -> u64 {
    if iters == 0 {
        return state;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let mut rax = state;
        // SAFETY: pure register arithmetic on rax/rcx/rdx/rsi; no memory access,
        // no stack use; every clobbered register is declared.
        unsafe {
            std::arch::asm!(
                "2:",
                "imul rax, rdx",
                "add rax, rsi",
                "dec rcx",
                "jnz 2b",
                inout("rax") rax,
                inout("rcx") iters => _,
                in("rdx") LCG_MUL,
                in("rsi") LCG_ADD,
                options(nomem, nostack),
            );
        }
        rax
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut x = state;
        for _ in 0..iters {
            x = x.wrapping_mul(LCG_MUL).wrapping_add(LCG_ADD);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_matches_its_definition() {
        let mut x = 7u64;
        for _ in 0..1000 {
            x = x.wrapping_mul(LCG_MUL).wrapping_add(LCG_ADD);
        }
        assert_eq!(compute(1000, 7), x);
        assert_eq!(compute(0, 7), 7);
    }
}
