//! What interpreting one op did with the thread: the answer every op of the
//! guest model (the interpreter, sync ops, device requests) gives the
//! resume loop.

/// What the interpreter (or a sync op) did with the thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// The op completed; keep interpreting.
    Continue,
    /// An activity (segment, spin) was started; the vCPU waits for its Step.
    Started,
    /// The vCPU's situation changed (thread blocked, overhead added): go
    /// around the resume loop.
    Again,
    /// The vCPU lost its pCPU: stop touching it.
    Stop,
}
