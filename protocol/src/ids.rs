//! Ids shared by every crate: jobs, GPU types and GPUs.

use serde::{Deserialize, Serialize};

/// A job's id. Traces that carry ids keep them; others number jobs in arrival order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobId(pub u32);

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Index of a GPU type in a cluster's list of types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuTypeId(pub u16);

/// A GPU, numbered densely across a cluster, node by node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct GpuId(pub u32);

/// The GPUs of one gang. Gangs are small, so they are kept inline without a heap allocation.
pub type GpuSet = smallvec::SmallVec<[GpuId; 8]>;
