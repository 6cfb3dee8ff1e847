//! Partheymüller's scalability model (eq. 5.1, Figure 3.7). It is written once, in
//! `smplab_record::amdahl`, for every crate; re-exported here because the
//! simulator's docs and users look for it under `smplab_sim::amdahl`.

pub use smplab_record::amdahl::{amdahl, exit_share, parallel_fraction, AmdahlInputs};
