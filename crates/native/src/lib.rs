//! smplab-native (placeholder until its issue lands).
