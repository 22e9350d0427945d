//! Placers turn "n GPUs of type t" into concrete GPUs. Any policy runs with any placer.

use super::free::FreeGpus;
use crate::cluster::{Cluster, GpuId, GpuSet, GpuTypeId};
use crate::job::Job;

/// Chooses concrete GPUs for a gang.
pub trait Placer: Send {
    /// Picks `gpus` free GPUs of type `gpu_type` for `job`, or `None` if they cannot be found.
    /// `previous` is where the job last ran, for placers that prefer to return it there.
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        job: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
        previous: &[GpuId],
    ) -> Option<GpuSet>;
}

/// Best-fit consolidation: the whole gang on the fullest node that can hold it; otherwise the fewest nodes,
/// taking the emptiest first. This keeps large free blocks for large gangs. Topology-aware scoring
/// comes with the topology crate.
#[derive(Clone, Debug, Default)]
pub struct PackingPlacer;

impl Placer for PackingPlacer {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        _job: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
        previous: &[GpuId],
    ) -> Option<GpuSet> {
        if free.free_of_type(gpu_type) < gpus {
            return None;
        }
        // A job that keeps its size and type goes back to its old GPUs when they are all free.
        if previous.len() == gpus as usize
            && previous
                .iter()
                .all(|&g| free.is_free(g) && cluster.gpu_type_of(g) == gpu_type)
        {
            return Some(GpuSet::from_slice(previous));
        }
        // Best fit: the node with the fewest free GPUs that still holds the whole gang.
        for count in gpus..=free.widest(gpu_type) {
            if let Some(&node) = free.nodes_with_exactly(gpu_type, count).first() {
                return Some(
                    free.free_gpus_of(cluster, node)
                        .take(gpus as usize)
                        .collect(),
                );
            }
        }
        // Otherwise spread over the fewest nodes: emptiest first.
        let mut chosen = GpuSet::new();
        for count in (1..=free.widest(gpu_type)).rev() {
            for &node in free.nodes_with_exactly(gpu_type, count) {
                let want = gpus as usize - chosen.len();
                chosen.extend(free.free_gpus_of(cluster, node).take(want));
                if chosen.len() == gpus as usize {
                    return Some(chosen);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeId;
    use crate::job::{JobId, JobTypeId, TenantId};

    fn job(gpus: u32) -> Job {
        Job {
            id: JobId(0),
            arrival: 0.0,
            job_type: JobTypeId(0),
            gpus,
            total_steps: 1.0,
            weight: 1.0,
            tenant: TenantId(0),
        }
    }

    #[test]
    fn best_fit_keeps_large_blocks_free() {
        let cluster = Cluster::from_nodes([("v100", 4, 12, 100.0), ("v100", 8, 24, 200.0)]);
        let mut free = FreeGpus::new(&cluster);
        let mut p = PackingPlacer;
        // A 2-GPU gang goes to the 4-GPU node, keeping the 8-GPU node whole.
        let a = p
            .place(&cluster, &free, &job(2), GpuTypeId(0), 2, &[])
            .unwrap();
        assert!(a.iter().all(|g| cluster.node_of(*g) == NodeId(0)));
        free.take(&cluster, &a);
        // An 8-GPU gang still fits on one node.
        let b = p
            .place(&cluster, &free, &job(8), GpuTypeId(0), 8, &[])
            .unwrap();
        assert!(b.iter().all(|g| cluster.node_of(*g) == NodeId(1)));
        free.take(&cluster, &b);
        // 3 GPUs do not fit: 2 are free.
        assert_eq!(
            p.place(&cluster, &free, &job(3), GpuTypeId(0), 3, &[]),
            None
        );
        free.release(&cluster, &a);
        // A job returns to its previous GPUs when they are free.
        let again = p
            .place(&cluster, &free, &job(2), GpuTypeId(0), 2, &a)
            .unwrap();
        assert_eq!(again, a);
    }

    #[test]
    fn spreads_across_nodes_when_no_node_fits() {
        let cluster = Cluster::from_nodes([
            ("v100", 2, 6, 100.0),
            ("v100", 2, 6, 100.0),
            ("v100", 2, 6, 100.0),
        ]);
        let free = FreeGpus::new(&cluster);
        let got = PackingPlacer
            .place(&cluster, &free, &job(5), GpuTypeId(0), 5, &[])
            .unwrap();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 5);
    }
}
