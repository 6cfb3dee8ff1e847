//! smplab-guest (placeholder until its issue lands).
