//! Best-fit placement without a topology.

use super::{FreeGpus, Locality, PlaceRequest, Placed, Placer, Unplaced, no_capacity};
use crate::cluster::{Cluster, GpuSet};

/// Best-fit consolidation: the whole gang on the fullest node that can hold it; otherwise the fewest nodes,
/// taking the emptiest first. This keeps large free blocks for large gangs. It knows no topology, so
/// every set scores 100; `TopologyPlacer` scores sets on the hardware graph.
#[derive(Clone, Debug, Default)]
pub struct PackingPlacer;

impl Placer for PackingPlacer {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        let (gpu_type, gpus, previous) = (request.gpu_type, request.gpus, request.previous);
        let placed = |gpus: GpuSet| {
            Ok(Placed {
                gpus,
                locality: Locality::IDEAL,
            })
        };
        if let Some(why) = no_capacity(free, request) {
            return Err(why);
        }
        // A job that keeps its size and type goes back to its old GPUs when they are all free.
        if previous.len() == gpus as usize
            && previous
                .iter()
                .all(|&g| free.is_free(g) && cluster.gpu_type_of(g) == gpu_type)
        {
            return placed(GpuSet::from_slice(previous));
        }
        // Best fit: the node with the fewest free GPUs that still holds the whole gang.
        for count in gpus..=free.widest(gpu_type) {
            if let Some(&node) = free.nodes_with_exactly(gpu_type, count).first() {
                return placed(
                    free.free_gpus_of(cluster, node)
                        .take(gpus as usize)
                        .collect(),
                );
            }
        }
        // A gang that must stay on one server waits if any server of the type could hold it.
        if request.consolidate && free.widest(gpu_type) >= gpus {
            return Err(Unplaced::Consolidation {
                gpu_type,
                wanted: gpus,
                free: free.free_of_type(gpu_type),
            });
        }
        // Otherwise spread over the fewest nodes: emptiest first.
        let mut chosen = GpuSet::new();
        for count in (1..=free.widest(gpu_type)).rev() {
            for &node in free.nodes_with_exactly(gpu_type, count) {
                let want = gpus as usize - chosen.len();
                chosen.extend(free.free_gpus_of(cluster, node).take(want));
                if chosen.len() == gpus as usize {
                    return placed(chosen);
                }
            }
        }
        // Unreachable while the free counts add up: spreading covers any gang that many free GPUs hold.
        Err(Unplaced::Fragmented {
            gpu_type,
            wanted: gpus,
            free: free.free_of_type(gpu_type),
        })
    }

    fn fork(&self) -> Option<Box<dyn Placer>> {
        Some(Box::new(PackingPlacer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GpuId, GpuTypeId, NodeId};
    use crate::job::Job;
    use crate::job::JobId;

    fn job(gpus: u32) -> Job {
        Job::new(JobId(0), 0.0, gpus, 1.0)
    }

    fn place(
        p: &mut PackingPlacer,
        c: &Cluster,
        f: &FreeGpus,
        job: &Job,
        gpus: u32,
        prev: &[GpuId],
    ) -> Option<GpuSet> {
        let request = PlaceRequest {
            job,
            gpu_type: GpuTypeId(0),
            gpus,
            previous: prev,
            waited: 0.0,
            sensitivity: 0.0,
            consolidate: false,
        };
        p.place(c, f, &request).ok().map(|placed| placed.gpus)
    }

    #[test]
    fn best_fit_keeps_large_blocks_free() {
        let cluster = Cluster::from_nodes([("v100", 4, 12, 100.0), ("v100", 8, 24, 200.0)]);
        let mut free = FreeGpus::new(&cluster);
        let mut p = PackingPlacer;
        // A 2-GPU gang goes to the 4-GPU node, keeping the 8-GPU node whole.
        let a = place(&mut p, &cluster, &free, &job(2), 2, &[]).unwrap();
        assert!(a.iter().all(|g| cluster.node_of(*g) == NodeId(0)));
        free.take(&cluster, &a);
        // An 8-GPU gang still fits on one node.
        let b = place(&mut p, &cluster, &free, &job(8), 8, &[]).unwrap();
        assert!(b.iter().all(|g| cluster.node_of(*g) == NodeId(1)));
        free.take(&cluster, &b);
        // 3 GPUs do not fit: 2 are free.
        assert_eq!(place(&mut p, &cluster, &free, &job(3), 3, &[]), None);
        free.release(&cluster, &a);
        // A job returns to its previous GPUs when they are free.
        let again = place(&mut p, &cluster, &free, &job(2), 2, &a).unwrap();
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
        let got = place(&mut PackingPlacer, &cluster, &free, &job(5), 5, &[]).unwrap();
        let mut sorted = got.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 5);
    }
}
