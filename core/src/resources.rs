//! CPUs and memory beside GPUs (Synergy, Mohan et al., OSDI'22): what a job is allotted per GPU.
//!
//! A grant may carry an [`Allotment`]; without one a job gets its server's GPU-proportional share
//! ([`Allotment::share`]), which is how every policy ran before Synergy's mechanisms. The engine
//! charges allotments to servers (`placement::resources`) and never lets one exceed its CPUs or
//! memory; the throughput model `throughput::resources` says how fast a job runs on one.

use serde::{Deserialize, Serialize};

use crate::cluster::{Node, NodeId};

/// Slack in capacity comparisons, so that shares summed in floating point (100 GB over 3 GPUs) still
/// fit the server they were cut from.
pub const EPSILON: f64 = 1e-6;

/// CPUs and memory per GPU of a gang, and where the mechanism that chose them packed it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Allotment {
    /// CPUs per GPU.
    pub cpus: f64,
    /// GB of memory per GPU.
    pub memory_gb: f64,
    /// The one server the gang was packed on, when a mechanism packed it whole on one: the engine
    /// places it there, so that what was packed is what runs.
    #[serde(default)]
    pub server: Option<NodeId>,
}

impl Allotment {
    /// `cpus` CPUs and `memory_gb` GB of memory per GPU, on whichever servers the gang is placed.
    pub fn new(cpus: f64, memory_gb: f64) -> Self {
        Allotment {
            cpus,
            memory_gb,
            server: None,
        }
    }

    /// A node's GPU-proportional share per GPU.
    pub fn share(node: &Node) -> Self {
        let gpus = f64::from(node.gpus.max(1));
        Allotment::new(f64::from(node.cpus) / gpus, node.memory_gb / gpus)
    }

    /// The same allotment, packed on `server`.
    pub fn on(self, server: NodeId) -> Self {
        Allotment {
            server: Some(server),
            ..self
        }
    }

    /// How many GPUs at this allotment `cpus` CPUs and `memory_gb` GB left on a server can feed
    /// (`u32::MAX` where it asks for none of either; none where what is left is negative).
    pub fn gpus_fed(&self, cpus: f64, memory_gb: f64) -> u32 {
        let fit = |left: f64, each: f64| {
            if each <= EPSILON {
                u32::MAX
            } else {
                ((left + EPSILON) / each)
                    .floor()
                    .clamp(0.0, f64::from(u32::MAX)) as u32
            }
        };
        fit(cpus, self.cpus).min(fit(memory_gb, self.memory_gb))
    }

    /// Whether it asks for more than `other` of either resource.
    pub fn exceeds(&self, other: &Allotment) -> bool {
        self.cpus > other.cpus + EPSILON || self.memory_gb > other.memory_gb + EPSILON
    }

    /// The smaller of each resource.
    pub fn min(&self, other: &Allotment) -> Allotment {
        Allotment::new(
            self.cpus.min(other.cpus),
            self.memory_gb.min(other.memory_gb),
        )
    }

    /// Same CPUs and memory (the server it was packed on aside).
    pub fn same_amounts(&self, other: &Allotment) -> bool {
        (self.cpus - other.cpus).abs() <= EPSILON
            && (self.memory_gb - other.memory_gb).abs() <= EPSILON
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::GpuTypeId;

    #[test]
    fn share_divides_the_server() {
        let node = Node {
            gpu_type: GpuTypeId(0),
            gpus: 8,
            cpus: 24,
            memory_gb: 500.0,
        };
        let share = Allotment::share(&node);
        assert_eq!((share.cpus, share.memory_gb), (3.0, 62.5));
        assert!(Allotment::new(4.0, 62.5).exceeds(&share));
        assert!(!Allotment::new(1.0, 20.0).exceeds(&share));
        assert_eq!(
            Allotment::new(12.0, 20.0).min(&share),
            Allotment::new(3.0, 20.0)
        );
    }
}
