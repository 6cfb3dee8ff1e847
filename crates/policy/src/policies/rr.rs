//! `rr[:SLICE]`: one FIFO of runnable vCPUs; a vCPU runs a slice, then goes
//! to the back if someone waits for its pCPU. Every hook is the default.

use crate::{Policy, PolicyError};

#[derive(Debug, Clone, Copy)]
pub struct RoundRobin;

impl RoundRobin {
    pub fn new(_vcpus_per_vm: &[u32], _pcpus: usize) -> Result<RoundRobin, PolicyError> {
        Ok(RoundRobin)
    }
}

impl Policy for RoundRobin {}
