//! Gandiva's defragmenting migration (`Intent::Defragmented`): a gang that had to start spread over
//! servers moves onto one server as soon as one of its type has room.

use super::{FreeGpus, PlaceRequest, Placed, Placer};
use crate::cluster::{Cluster, GpuId};

/// Where a gang running on `current` should move: the placer's set on one server, when the gang spans
/// servers and a server now holds it whole; `None` to stay. `request` asks for the gang's type and size.
pub fn target(
    placer: &mut dyn Placer,
    cluster: &Cluster,
    free: &FreeGpus,
    request: &PlaceRequest<'_>,
    current: &[GpuId],
) -> Option<Placed> {
    let first = cluster.node_of(*current.first()?);
    if current.iter().all(|&g| cluster.node_of(g) == first)
        || free.widest(request.gpu_type) < request.gpus
    {
        return None;
    }
    let request = PlaceRequest {
        previous: current,
        waited: 0.0,
        consolidate: true,
        ..*request
    };
    let placed = placer.place(cluster, free, &request).ok()?;
    let server = cluster.node_of(placed.gpus[0]);
    let one_server = placed.gpus.iter().all(|&g| cluster.node_of(g) == server);
    (placed.gpus.len() == request.gpus as usize && one_server).then_some(placed)
}
