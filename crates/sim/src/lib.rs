//! smplab-sim (placeholder until its issue lands).
