//! smplab-lab (placeholder until its issue lands).
