//! Placers turn "n GPUs of type t" into concrete GPUs. Any policy runs with any placer.

use super::free::FreeGpus;
use crate::cluster::{Cluster, GpuId, GpuSet, GpuTypeId};
use crate::job::Job;

/// What a placer is asked: `gpus` GPUs of type `gpu_type` for `job`.
#[derive(Clone, Copy, Debug)]
pub struct PlaceRequest<'a> {
    pub job: &'a Job,
    pub gpu_type: GpuTypeId,
    pub gpus: u32,
    /// Where the job last ran, for placers that prefer to return it there.
    pub previous: &'a [GpuId],
    /// Seconds the job has waited since it was last queued (for time-based relaxation of locality).
    pub waited: f64,
    /// How much the job slows down on a poorly placed set (0..1, see `throughput::locality`).
    pub sensitivity: f64,
    /// The policy asks for one server where one could hold the gang.
    pub consolidate: bool,
}

/// A placer's answer: the GPUs, and how good they are together.
#[derive(Clone, Debug, PartialEq)]
pub struct Placed {
    pub gpus: GpuSet,
    /// Locality score 0..100 (100 = as good as the best set of this size). Placers that know no
    /// topology answer 100, and then placement never slows a job.
    pub score: f64,
}

/// Chooses concrete GPUs for a gang.
pub trait Placer: Send {
    /// Picks free GPUs for `request`, or `None` if they cannot (or, by policy, should not) be found.
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Option<Placed>;
}

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
    ) -> Option<Placed> {
        let (gpu_type, gpus, previous) = (request.gpu_type, request.gpus, request.previous);
        let placed = |gpus: GpuSet| Some(Placed { gpus, score: 100.0 });
        if free.free_of_type(gpu_type) < gpus {
            return None;
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
            return None;
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
        p.place(c, f, &request).map(|placed| placed.gpus)
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
