//! Is the code around a vCPU's instruction pointer a spin-wait loop? The
//! instruction-level half of the software spin detector ([`super::spin`]).
//!
//! Wells et al. §3.2 call a vCPU spinning when it commits few unique stores
//! (and, in user mode, few unique loads) over 1024 instructions: a waiting
//! loop re-reads one word and writes nothing new. Software cannot count
//! committed stores, but it can read the loop the vCPU sits in and check the
//! same property statically. A loop is a spin-wait loop when:
//! - it is short and closed: a backward branch at most [`MAX_LOOP_BYTES`]
//!   after its target, reached from the instruction pointer; the loop is
//!   the instructions on a path from the target to that branch (its exit
//!   paths are not), decoded on instruction boundaries, the instruction
//!   pointer among them;
//! - it leaves only by branches (no call, return, interrupt, system call,
//!   I/O, string instruction or indirect jump: those do work or wait in the
//!   kernel, which the detector leaves to the halt sampler);
//! - it polls memory: some load reads an address that does not change in the
//!   loop (its base and index registers are not written in it) and the loaded
//!   value is compared or tested (`cmp`/`test` on the loaded register or on
//!   the memory operand, or a `cmpxchg`), or the loop PAUSEs;
//! - it writes nothing new: every store goes to a loop-invariant address, at
//!   most [`MAX_STORE_ADDRESSES`] of them (a spin counter, a test-and-set's
//!   lock word: the SDB's "few unique stores").
//!
//! A compute loop that writes nothing (the SDB's false positive) has no
//! polled load; a search or a copy loop moves its addresses. Any byte that
//! does not decode, a loop that does not close, or an instruction pointer
//! off the decoded boundaries is a doubtful sample: not spinning.

use iced_x86::{
    Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess,
    Register,
};

/// Longest loop (bytes from the branch target to the end of the branch).
pub const MAX_LOOP_BYTES: u64 = 128;
/// Most instructions explored from the instruction pointer looking for
/// the loop's backward branch.
const MAX_EXPLORED: usize = 64;
/// Most distinct loop-invariant store addresses a spin loop may have.
pub const MAX_STORE_ADDRESSES: usize = 2;

/// A spin-wait loop found around an instruction pointer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpinLoop {
    /// Its first byte (the backward branch's target).
    pub start: u64,
    /// One past its closing branch.
    pub end: u64,
    /// It executes PAUSE.
    pub pauses: bool,
}

impl SpinLoop {
    /// Whether two loops share a byte (the same loop seen from two
    /// instruction pointers may close on different branches).
    pub fn overlaps(&self, other: &SpinLoop) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Why the code around an instruction pointer is not (surely) a spin loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSpin {
    /// The bytes did not decode, or the instruction pointer is not on an
    /// instruction boundary of the loop.
    Undecodable,
    /// No short backward branch closes a loop around the instruction pointer.
    NoLoop,
    /// The loop calls, returns, traps, does I/O or jumps indirectly.
    LeavesLoop,
    /// A load or store whose address changes in the loop.
    MovingAddress,
    /// More distinct stores than a spin loop makes.
    Stores,
    /// Nothing in the loop polls memory (a compute loop).
    NoPoll,
}

/// Classify the loop around `rip`, with `code` the guest's bytes from
/// virtual address `base` (they should reach [`MAX_LOOP_BYTES`] before and
/// after `rip`).
pub fn classify(code: &[u8], base: u64, rip: u64) -> Result<SpinLoop, NotSpin> {
    let mut candidates = back_edges(code, base, rip)?;
    // The tightest loop around `rip` first.
    candidates.sort_by_key(|&(start, end)| end - start);
    let mut found = None;
    for (start, end) in candidates {
        let Some(body) = natural_loop(code, base, start, end) else {
            continue;
        };
        if body.iter().any(|i| i.ip() == rip) {
            found = Some((body, start, end));
            break;
        }
    }
    let (body, start, end) = found.ok_or(NotSpin::NoLoop)?;
    judge_body(&body, start, end)
}

fn decode_at(code: &[u8], base: u64, ip: u64) -> Option<Instruction> {
    let at = usize::try_from(ip.checked_sub(base)?).ok()?;
    let bytes = code.get(at..)?;
    let insn = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
    (!insn.is_invalid()).then_some(insn)
}

/// Backward branches `[target, branch end)` with `target <= rip` reached
/// from `rip` along both arms of every branch, within [`MAX_LOOP_BYTES`].
fn back_edges(code: &[u8], base: u64, rip: u64) -> Result<Vec<(u64, u64)>, NotSpin> {
    let first = decode_at(code, base, rip).ok_or(NotSpin::Undecodable)?;
    let lo = rip.saturating_sub(MAX_LOOP_BYTES).max(base);
    let hi = rip + MAX_LOOP_BYTES;
    let mut todo = vec![first];
    let mut seen = vec![rip];
    let mut edges = Vec::new();
    while let Some(insn) = todo.pop() {
        let mut next = Vec::new();
        match insn.flow_control() {
            // A call comes back: the loop goes on after it (and is then
            // judged to leave).
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => {
                next.push(insn.next_ip());
            }
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch => {
                let target = insn.near_branch_target();
                if target <= rip && insn.next_ip() - target <= MAX_LOOP_BYTES && target >= base {
                    edges.push((target, insn.next_ip()));
                }
                if target > rip && target < hi {
                    next.push(target);
                }
                if insn.flow_control() == FlowControl::ConditionalBranch {
                    next.push(insn.next_ip());
                }
            }
            _ => {}
        }
        for ip in next {
            if ip < lo || ip >= hi || seen.contains(&ip) || seen.len() >= MAX_EXPLORED {
                continue;
            }
            seen.push(ip);
            if let Some(i) = decode_at(code, base, ip) {
                todo.push(i);
            }
        }
    }
    if edges.is_empty() {
        Err(NotSpin::NoLoop)
    } else {
        Ok(edges)
    }
}

/// The natural loop of the back edge ending at `end` with target `start`:
/// the instructions of `[start, end)` on a path from `start` to the back
/// edge without leaving the range (exit paths are not the loop). `None`
/// if the range does not decode on boundaries.
fn natural_loop(code: &[u8], base: u64, start: u64, end: u64) -> Option<Vec<Instruction>> {
    let from = usize::try_from(start.checked_sub(base)?).ok()?;
    let to = usize::try_from(end.checked_sub(base)?).ok()?;
    let bytes = code.get(from..to)?;
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut insns = Vec::new();
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            return None;
        }
        insns.push(insn);
    }
    if insns.last()?.next_ip() != end {
        return None;
    }
    let index = |ip: u64| insns.iter().position(|i| i.ip() == ip);
    let mut succs: Vec<Vec<usize>> = Vec::with_capacity(insns.len());
    for (n, insn) in insns.iter().enumerate() {
        let mut s = Vec::new();
        let flow = insn.flow_control();
        let falls_through = matches!(
            flow,
            FlowControl::Next
                | FlowControl::ConditionalBranch
                | FlowControl::Call
                | FlowControl::IndirectCall
        );
        if falls_through && n + 1 < insns.len() {
            s.push(n + 1);
        }
        if matches!(
            flow,
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
        ) {
            let target = insn.near_branch_target();
            if (start..end).contains(&target) {
                // A branch into the middle of an instruction: doubtful.
                s.push(index(target)?);
            }
        }
        succs.push(s);
    }
    let last = insns.len() - 1;
    let mut forward = vec![false; insns.len()];
    let mut stack = vec![0];
    while let Some(n) = stack.pop() {
        if !std::mem::replace(&mut forward[n], true) {
            stack.extend(succs[n].iter().copied());
        }
    }
    // Backward from the back edge: a fixed point over the few instructions.
    let mut reaches = vec![false; insns.len()];
    reaches[last] = true;
    let mut changed = true;
    while changed {
        changed = false;
        for n in 0..insns.len() {
            if !reaches[n] && succs[n].iter().any(|&m| reaches[m]) {
                reaches[n] = true;
                changed = true;
            }
        }
    }
    Some(
        insns
            .into_iter()
            .enumerate()
            .filter(|&(n, _)| forward[n] && reaches[n])
            .map(|(_, i)| i)
            .collect(),
    )
}

fn writes(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Write | OpAccess::CondWrite | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

fn reads(access: OpAccess) -> bool {
    matches!(
        access,
        OpAccess::Read | OpAccess::CondRead | OpAccess::ReadWrite | OpAccess::ReadCondWrite
    )
}

fn leaves(insn: &Instruction) -> bool {
    !matches!(
        insn.flow_control(),
        FlowControl::Next | FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
    ) || insn.has_rep_prefix() && insn.is_string_instruction()
        || insn.has_repne_prefix() && insn.is_string_instruction()
        || matches!(
            insn.mnemonic(),
            Mnemonic::Hlt
                | Mnemonic::In
                | Mnemonic::Out
                | Mnemonic::Insb
                | Mnemonic::Insw
                | Mnemonic::Insd
                | Mnemonic::Outsb
                | Mnemonic::Outsw
                | Mnemonic::Outsd
                | Mnemonic::Cpuid
                | Mnemonic::Syscall
                | Mnemonic::Sysenter
                | Mnemonic::Mwait
                | Mnemonic::Umwait
                | Mnemonic::Tpause
        )
}

fn judge_body(body: &[Instruction], start: u64, end: u64) -> Result<SpinLoop, NotSpin> {
    let mut factory = InstructionInfoFactory::new();
    // Registers the loop writes (full width): an address built from one of
    // them moves.
    let mut written: Vec<Register> = Vec::new();
    for insn in body {
        if leaves(insn) {
            return Err(NotSpin::LeavesLoop);
        }
        let info = factory.info(insn);
        for r in info.used_registers() {
            if writes(r.access()) {
                written.push(r.register().full_register());
            }
        }
    }
    let invariant = |reg: Register| {
        reg == Register::None
            || reg == Register::RIP
            || reg == Register::EIP
            || !written.contains(&reg.full_register())
    };
    let mut stores: Vec<(Register, Register, u32, u64)> = Vec::new();
    let mut polled: Vec<Register> = Vec::new();
    let mut tests_poll = false;
    let mut pauses = false;
    for insn in body {
        pauses |= insn.mnemonic() == Mnemonic::Pause;
        let info = factory.info(insn);
        let mut loads_invariant = false;
        for m in info.used_memory() {
            if !(invariant(m.base()) && invariant(m.index())) {
                return Err(NotSpin::MovingAddress);
            }
            if writes(m.access()) {
                let key = (m.base(), m.index(), m.scale(), m.displacement());
                if !stores.contains(&key) {
                    stores.push(key);
                }
            }
            loads_invariant |= reads(m.access());
        }
        let compares = matches!(
            insn.mnemonic(),
            Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Cmpxchg | Mnemonic::Bt
        );
        let reads_polled = info
            .used_registers()
            .iter()
            .any(|r| reads(r.access()) && polled.contains(&r.register().full_register()));
        if compares && (loads_invariant || reads_polled) {
            tests_poll = true;
        }
        if loads_invariant {
            for r in info.used_registers() {
                if writes(r.access()) {
                    polled.push(r.register().full_register());
                }
            }
        }
    }
    // A value loaded before the compare in program order may be tested by
    // an instruction earlier in the loop (the loop wraps around): a second
    // pass over the compares catches that.
    if !tests_poll {
        tests_poll =
            body.iter().any(|insn| {
                matches!(insn.mnemonic(), Mnemonic::Cmp | Mnemonic::Test)
                    && factory.info(insn).used_registers().iter().any(|r| {
                        reads(r.access()) && polled.contains(&r.register().full_register())
                    })
            });
    }
    if stores.len() > MAX_STORE_ADDRESSES {
        return Err(NotSpin::Stores);
    }
    if !(tests_poll || pauses && !polled.is_empty()) {
        return Err(NotSpin::NoPoll);
    }
    Ok(SpinLoop { start, end, pauses })
}

#[cfg(test)]
#[path = "spin_loop_tests.rs"]
mod tests;
