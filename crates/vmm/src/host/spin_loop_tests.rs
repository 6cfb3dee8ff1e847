//! The classifier's verdict on real machine code: loops assembled with GNU
//! as from their source (glibc's x86-64 `pthread_spin_lock`, a ticket lock,
//! a barrier wait, a test-and-test-and-set lock, compute loops) and the
//! smplab guest's own spin ops as gcc compiled them (crates/guest/kernel/
//! exec.c, `objdump -d exec.o`, at their addresses there).

use super::*;

/// Bytes laid out from `base`, instruction by instruction as listed.
fn code(base: u64, listing: &[&[u8]]) -> (Vec<u8>, u64) {
    (listing.concat(), base)
}

fn every_ip(bytes: &[u8], base: u64) -> Vec<u64> {
    let mut d = Decoder::with_ip(64, bytes, base, DecoderOptions::NONE);
    let mut ips = Vec::new();
    while d.can_decode() {
        ips.push(d.decode().ip());
    }
    ips
}

fn spins_at(bytes: &[u8], base: u64, rip: u64) -> SpinLoop {
    classify(bytes, base, rip).unwrap_or_else(|e| panic!("{rip:#x}: {e:?}, expected a spin loop"))
}

/// glibc's `pthread_spin_lock` (sysdeps/x86_64/nptl/pthread_spin_lock.S):
/// `1: lock decl (%rdi); jne 2f; xor %eax,%eax; ret; 2: rep nop;
/// cmpl $0,(%rdi); jg 1b; jmp 2b`.
#[test]
fn glibc_pthread_spin_lock_spins() {
    let (c, base) = code(
        0x1000,
        &[
            &[0xf0, 0xff, 0x0f],
            &[0x75, 0x03],
            &[0x31, 0xc0],
            &[0xc3],
            &[0xf3, 0x90],
            &[0x83, 0x3f, 0x00],
            &[0x7f, 0xf1],
            &[0xeb, 0xf7],
        ],
    );
    for rip in [0x1008, 0x100a, 0x100d, 0x100f] {
        let l = spins_at(&c, base, rip);
        assert!(l.pauses);
        assert_eq!((l.start, l.end), (0x1008, 0x1011), "the inner wait loop");
    }
}

/// A ticket lock: `lock xadd` once, then `1: cmp 4(%rdi),%eax; je 2f;
/// pause; jmp 1b`.
#[test]
fn ticket_lock_spins() {
    let (c, base) = code(
        0x11,
        &[
            &[0xb8, 1, 0, 0, 0],
            &[0xf0, 0x0f, 0xc1, 0x07],
            &[0x3b, 0x47, 0x04],
            &[0x74, 0x04],
            &[0xf3, 0x90],
            &[0xeb, 0xf7],
            &[0xc3],
        ],
    );
    for rip in [0x1a, 0x1d, 0x1f, 0x21] {
        assert_eq!(spins_at(&c, base, rip).start, 0x1a);
    }
    assert_eq!(
        classify(&c, base, 0x23),
        Err(NotSpin::NoLoop),
        "the ret after it"
    );
}

/// A barrier's wait for the generation to change: `1: pause; mov (%rdi),
/// %eax; cmp %esi,%eax; je 1b`.
#[test]
fn barrier_spin_spins() {
    let (c, base) = code(
        0x24,
        &[
            &[0xf3, 0x90],
            &[0x8b, 0x07],
            &[0x39, 0xf0],
            &[0x74, 0xf8],
            &[0xc3],
        ],
    );
    for rip in [0x24, 0x26, 0x28, 0x2a] {
        spins_at(&c, base, rip);
    }
}

/// Test-and-test-and-set without PAUSE: the poll is the compare of the
/// loaded word; the `xchg` stores to the lock word only.
#[test]
fn ttas_without_pause_spins() {
    let (c, base) = code(
        0x2d,
        &[
            &[0x8b, 0x07],
            &[0x85, 0xc0],
            &[0x75, 0xfa],
            &[0xb8, 1, 0, 0, 0],
            &[0x87, 0x07],
            &[0x85, 0xc0],
            &[0x75, 0xef],
            &[0xc3],
        ],
    );
    for rip in every_ip(&c, base).into_iter().filter(|&ip| ip < 0x3e) {
        let l = spins_at(&c, base, rip);
        assert!(!l.pauses);
    }
}

/// The smplab guest's barrier wait (exec.c `barrier_wait`): it counts its
/// iterations in the worker (`addq $1,0xb0(%rbp)`, one store address) and
/// polls the generation.
#[test]
fn smplab_guest_barrier_spins() {
    let (c, base) = code(
        0x2b0,
        &[
            &[0x48, 0x83, 0x85, 0xb0, 0, 0, 0, 0x01],
            &[0x41, 0x80, 0x7e, 0x15, 0x00],
            &[0x74, 0x02],
            &[0xf3, 0x90],
            &[0x48, 0x83, 0xc0, 0x01],
            &[0x48, 0x39, 0xc8],
            &[0x0f, 0x83, 0xdf, 0x04, 0, 0],
            &[0x41, 0x8b, 0x56, 0x04],
            &[0x41, 0x39, 0xd7],
            &[0x74, 0xd9],
        ],
    );
    for rip in every_ip(&c, base) {
        let l = spins_at(&c, base, rip);
        assert_eq!((l.start, l.end), (0x2b0, 0x2d7));
    }
}

/// The guest's ticket lock (exec.c `spin_acquire`, kind 2).
#[test]
fn smplab_guest_ticket_lock_spins() {
    let (c, base) = code(
        0x4b0,
        &[
            &[0x80, 0x79, 0x09, 0x00],
            &[0x74, 0x02],
            &[0xf3, 0x90],
            &[0x8b, 0x41, 0x04],
            &[0x39, 0xc7],
            &[0x0f, 0x84, 0xb5, 0x02, 0, 0],
            &[0x48, 0x89, 0xf0],
            &[0x48, 0x83, 0xc6, 0x01],
            &[0x48, 0x85, 0xc0],
            &[0x75, 0xe1],
        ],
    );
    for rip in every_ip(&c, base) {
        spins_at(&c, base, rip);
    }
}

/// The guest's test-and-set lock (kind 0): `xchg` on the lock word, PAUSE.
#[test]
fn smplab_guest_tas_lock_spins() {
    let (c, base) = code(
        0x838,
        &[
            &[0x80, 0x79, 0x09, 0x00],
            &[0x74, 0x02],
            &[0xf3, 0x90],
            &[0x48, 0x83, 0xc6, 0x01],
            &[0x89, 0xf8],
            &[0x87, 0x01],
            &[0x85, 0xc0],
            &[0x0f, 0x84, 0x28, 0xff, 0xff, 0xff],
            &[0x48, 0x85, 0xf6],
            &[0x75, 0xe3],
        ],
    );
    for rip in every_ip(&c, base) {
        spins_at(&c, base, rip);
    }
}

/// The guest's test-and-test-and-set lock (kind 1): the inner read loop
/// closes on `jmp`, the outer on the `xchg`'s retry.
#[test]
fn smplab_guest_ttas_lock_spins() {
    let (c, base) = code(
        0x6a0,
        &[
            &[0x89, 0xf8],
            &[0x87, 0x01],
            &[0x85, 0xc0],
            &[0x0f, 0x84, 0xcc, 0, 0, 0],
            &[0x8b, 0x01],
            &[0x48, 0x83, 0xc6, 0x01],
            &[0x85, 0xc0],
            &[0x74, 0xea],
            &[0x48, 0x85, 0xf6],
            &[0x0f, 0x84, 0x89, 0, 0, 0],
            &[0x80, 0x79, 0x09, 0x00],
            &[0x74, 0xe7],
            &[0xf3, 0x90],
            &[0xeb, 0xe3],
        ],
    );
    for rip in every_ip(&c, base) {
        spins_at(&c, base, rip);
    }
}

/// The guest's adaptive mutex spin (exec.c `mutex_lock`): its exit paths
/// (clearing the spin word through a moving address, jumping out) are not
/// part of the loop.
#[test]
fn smplab_guest_mutex_spin_spins() {
    let (c, base) = code(
        0x927,
        &[
            &[0x8b, 0x47, 0x04],
            &[0x39, 0xc1],
            &[0x73, 0x34],
            &[0x48, 0x83, 0x85, 0xb0, 0, 0, 0, 0x01],
            &[0xf3, 0x90],
            &[0x8b, 0x07],
            &[0x85, 0xc0],
            &[0x75, 0x4a],
            &[0xf0, 0x0f, 0xb1, 0x17],
            &[0x75, 0x44],
            &[0x48, 0x63, 0x45, 0x0c],
            &[0x3d, 0x3f, 0x01, 0, 0],
            &[0x0f, 0x87, 0x31, 0xfc, 0xff, 0xff],
            &[0x31, 0xc9],
            &[0x48, 0x89, 0x0c, 0xc5, 0x00, 0x92, 0, 0],
            &[0xe9, 0x22, 0xfc, 0xff, 0xff],
            &[0x85, 0xc0],
            &[0x0f, 0x84, 0x60, 0xff, 0xff, 0xff],
            &[0x48, 0x63, 0x45, 0x0c],
            &[0x3d, 0x3f, 0x01, 0, 0],
            &[0x0f, 0x87, 0x51, 0xff, 0xff, 0xff],
            &[0x31, 0xd2],
            &[0x48, 0x89, 0x14, 0xc5, 0x00, 0x92, 0, 0],
            &[0xe9, 0x42, 0xff, 0xff, 0xff],
            &[0x83, 0xc1, 0x01],
            &[0xeb, 0x9a],
        ],
    );
    for rip in [0x927, 0x92e, 0x936, 0x938, 0x93e, 0x988, 0x98b] {
        let l = spins_at(&c, base, rip);
        assert_eq!((l.start, l.end), (0x927, 0x98d));
    }
    // On its way out (clearing the spin word) it no longer spins.
    assert!(classify(&c, base, 0x955).is_err());
}

/// The guest's compute kernel (the LCG: `imul; add; dec; jnz`) writes
/// nothing and reads nothing: the SDB would call it spinning, this must not.
#[test]
fn register_only_compute_loop_does_not_spin() {
    let (c, base) = code(
        0x613,
        &[
            &[0x48, 0x0f, 0xaf, 0xc2],
            &[0x48, 0x01, 0xf0],
            &[0x48, 0xff, 0xc9],
            &[0x75, 0xf4],
        ],
    );
    for rip in every_ip(&c, base) {
        assert_eq!(classify(&c, base, rip), Err(NotSpin::NoPoll));
    }
}

/// A compute loop reading one loop-invariant word without testing it
/// (`add (%rdi),%rax; imul; dec; jnz`) is no poll either.
#[test]
fn compute_loop_reading_a_constant_does_not_spin() {
    let (c, base) = code(
        0x3f,
        &[
            &[0x48, 0x03, 0x07],
            &[0x48, 0x0f, 0xaf, 0xc2],
            &[0x48, 0xff, 0xc9],
            &[0x75, 0xf4],
            &[0xc3],
        ],
    );
    for rip in [0x3f, 0x42, 0x46, 0x49] {
        assert_eq!(classify(&c, base, rip), Err(NotSpin::NoPoll));
    }
}

/// Loops whose addresses move: a search (`cmp (%rdi,%rcx,4),%eax`), the
/// guest's memory-touch read and write loops.
#[test]
fn loops_over_moving_addresses_do_not_spin() {
    let search = code(
        0x4c,
        &[
            &[0x3b, 0x04, 0x8f],
            &[0x74, 0x08],
            &[0x48, 0xff, 0xc1],
            &[0x48, 0x39, 0xf1],
            &[0x72, 0xf3],
            &[0xc3],
        ],
    );
    let touch_read = code(
        0x6d8,
        &[
            &[0x49, 0x8d, 0x0c, 0x00],
            &[0x48, 0x01, 0xf0],
            &[0x0f, 0xb6, 0x09],
            &[0x01, 0xca],
            &[0x48, 0x39, 0xf8],
            &[0x72, 0xef],
        ],
    );
    let touch_write = code(
        0x538,
        &[
            &[0x49, 0x8d, 0x0c, 0x00],
            &[0x48, 0x01, 0xf0],
            &[0x0f, 0xb6, 0x11],
            &[0x83, 0xc2, 0x01],
            &[0x88, 0x11],
            &[0x48, 0x39, 0xf8],
            &[0x72, 0xec],
        ],
    );
    for (c, base) in [search, touch_read, touch_write] {
        for rip in every_ip(&c, base) {
            let v = classify(&c, base, rip);
            assert!(
                matches!(v, Err(NotSpin::MovingAddress | NotSpin::NoLoop)),
                "{rip:#x}: {v:?}"
            );
        }
    }
}

/// Doubtful samples: an instruction pointer inside an instruction, bytes
/// that do not decode, a call in the loop.
#[test]
fn doubtful_code_is_not_spinning() {
    let (c, base) = code(
        0x24,
        &[
            &[0xf3, 0x90],
            &[0x8b, 0x07],
            &[0x39, 0xf0],
            &[0x74, 0xf8],
            &[0xc3],
        ],
    );
    assert!(classify(&c, base, 0x25).is_err(), "mid-instruction");
    assert!(classify(&[0x0f, 0xff, 0xff], 0x10, 0x10).is_err());
    assert!(classify(&c, base, 0x20).is_err(), "before the bytes");
    // `1: call *%rax; cmpl $0,(%rdi); je 1b`
    let (c, base) = code(0x100, &[&[0xff, 0xd0], &[0x83, 0x3f, 0x00], &[0x74, 0xf9]]);
    assert_eq!(classify(&c, base, 0x102), Err(NotSpin::LeavesLoop));
}
