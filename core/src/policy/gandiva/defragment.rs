//! Gandiva's defragmenting migration, its placement step: a gang that had to start spread over servers
//! moves onto one server as soon as one of its type has room.

use crate::cluster::GpuId;
use crate::placement::{PlaceRequest, Placed, PlacementStep, StepContext};

/// The step Gandiva's grants of more than one GPU name.
#[derive(Debug)]
pub struct Defragment;

/// Its one value, which grants name.
pub static DEFRAGMENT: Defragment = Defragment;

impl PlacementStep for Defragment {
    fn name(&self) -> &'static str {
        "defragment"
    }

    fn revisits(&self) -> bool {
        true
    }

    fn revisit(
        &self,
        cx: &mut StepContext<'_>,
        request: &PlaceRequest<'_>,
        current: &[GpuId],
    ) -> Option<Placed> {
        target(cx, request, current)
    }
}

/// Where a gang running on `current` should move: the placer's set on one server, when the gang spans
/// servers and a server now holds it whole; `None` to stay. `request` asks for the gang's type and size.
fn target(
    cx: &mut StepContext<'_>,
    request: &PlaceRequest<'_>,
    current: &[GpuId],
) -> Option<Placed> {
    let cluster = cx.cluster();
    let first = cluster.node_of(*current.first()?);
    if current.iter().all(|&g| cluster.node_of(g) == first)
        || cx.free().widest(request.gpu_type) < request.gpus
    {
        return None;
    }
    let request = PlaceRequest {
        previous: current,
        waited: 0.0,
        consolidate: true,
        ..*request
    };
    let placed = cx.place(&request).ok()?;
    let server = cluster.node_of(placed.gpus[0]);
    let one_server = placed.gpus.iter().all(|&g| cluster.node_of(g) == server);
    (placed.gpus.len() == request.gpus as usize && one_server).then_some(placed)
}
