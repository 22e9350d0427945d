//! Most free first, Optimus' placement step: the gang takes the free GPUs of the server with the most free,
//! then of the next, until it has them all, as Pollux's simulator places its Optimus and Tiresias
//! baselines. It spreads gangs that best fit would keep on one server, and a spread gang runs slower: a
//! rule to reproduce those baselines with, not to schedule by.

use crate::cluster::{Cluster, GpuSet, NodeId};
use crate::placement::{
    FreeGpus, Locality, PlaceRequest, Placed, PlacementStep, StepContext, Unplaced, no_capacity,
};

/// The step Optimus' grants name.
#[derive(Debug)]
pub struct MostFree;

/// Its one value, which grants name.
pub static MOST_FREE: MostFree = MostFree;

impl PlacementStep for MostFree {
    fn name(&self) -> &'static str {
        "most_free"
    }

    /// The servers with the most free GPUs first, whatever the placer would choose.
    fn place(
        &self,
        cx: &mut StepContext<'_>,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        place(cx.cluster(), cx.free(), request)
    }
}

/// Places `request` on the servers of its type with the most free GPUs first (the lower id first on
/// ties), each server's free GPUs lowest index first.
pub fn place(
    cluster: &Cluster,
    free: &FreeGpus,
    request: &PlaceRequest<'_>,
) -> Result<Placed, Unplaced> {
    if let Some(why) = no_capacity(free, request) {
        return Err(why);
    }
    let mut servers: Vec<NodeId> = (0..cluster.nodes().len() as u32)
        .map(NodeId)
        .filter(|&n| cluster.node(n).gpu_type == request.gpu_type && free.node_free(n) > 0)
        .collect();
    servers.sort_by_key(|&n| (std::cmp::Reverse(free.node_free(n)), n));
    let mut gpus = GpuSet::new();
    for node in servers {
        let want = request.gpus as usize - gpus.len();
        gpus.extend(free.free_gpus_of(cluster, node).take(want));
        if gpus.len() == request.gpus as usize {
            break;
        }
    }
    Ok(Placed {
        gpus,
        locality: Locality::IDEAL,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{GpuId, GpuTypeId};
    use crate::job::{Job, JobId};

    #[test]
    fn the_most_free_servers_go_first_and_spread_the_gang() {
        // Three servers of 4: the first has 3 free, the second 4, the third 2.
        let cluster = Cluster::from_nodes([("t4", 4, 8, 32.0); 3]);
        let mut free = FreeGpus::new(&cluster);
        free.take(&cluster, &[GpuId(0), GpuId(8), GpuId(9)]);
        let job = Job::new(JobId(0), 0.0, 6, 1.0);
        let request = PlaceRequest {
            job: &job,
            gpu_type: GpuTypeId(0),
            gpus: 6,
            previous: &[],
            waited: 0.0,
            sensitivity: 0.0,
            consolidate: false,
        };
        let placed = place(&cluster, &free, &request).unwrap();
        // All of the second server, then two of the first (its lowest free GPUs).
        let ids: Vec<u32> = placed.gpus.iter().map(|g| g.0).collect();
        assert_eq!(ids, [4, 5, 6, 7, 1, 2]);
        // More than the 9 free: no capacity.
        let request = PlaceRequest {
            gpus: 10,
            ..request
        };
        assert!(matches!(
            place(&cluster, &free, &request),
            Err(Unplaced::NoCapacity { .. })
        ));
    }
}
