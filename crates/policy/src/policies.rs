//! The policies, one file each, and the registry that builds them: the list
//! is `smplab_record::for_each_host_policy!`, so every user-level kind
//! there has its module here (`policies/NAME.rs`, type `Variant`), and the
//! match below is exhaustive by construction.

use crate::{Policy, PolicyError, PolicyKind};

pub mod safepoint;

macro_rules! user_level_policies {
    (
        kernel { $($(#[$kdoc:meta])* $kv:ident $kn:ident $kd:ident,)* }
        user { $($(#[$udoc:meta])* $uv:ident $un:ident,)* }
    ) => {
        $($(#[$udoc])* pub mod $un;)*

        /// The user-level policy of `kind` for VMs of `vcpus_per_vm` vCPUs on
        /// `pcpus` pCPUs (refused if it cannot serve them); `None` for a
        /// kind a kernel decides.
        pub(crate) fn build(
            kind: PolicyKind,
            vcpus_per_vm: &[u32],
            pcpus: usize,
        ) -> Result<Option<Box<dyn Policy>>, PolicyError> {
            Ok(match kind {
                $(PolicyKind::$kv => None,)*
                $(PolicyKind::$uv => Some(Box::new($un::$uv::new(vcpus_per_vm, pcpus)?)),)*
            })
        }
    };
}

smplab_record::for_each_host_policy!(user_level_policies);
