//! `tune`: Synergy's greedy (Mohan et al., OSDI'22). In the policy's order, each job asks for its best
//! case; if no server can feed it, its proportional share; if none can, peers holding more than their
//! share give back on the server it takes (see `shadow::Shadow::cut_peers`).

use super::{RoundInput, best, pack};
use crate::policy::Grant;
use crate::throughput::resources::ResourceAware;

pub(super) fn size(input: &RoundInput<'_>, model: &dyn ResourceAware, grants: &mut [Grant]) {
    let wanted: Vec<_> = grants.iter().map(|g| best(input, model, g)).collect();
    // Whether everyone got their best case changes nothing here.
    let _ = pack(input, grants, |k| wanted[k]);
}
