//! smplab-vmm (placeholder until its issue lands).
