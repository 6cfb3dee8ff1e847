//! The host section of `smplab host` lives in the record crate (a record of
//! a host run carries it: `RunRecord::host_run`); re-exported here for the
//! scheduler that fills it.

pub use smplab_record::hostsched::*;
