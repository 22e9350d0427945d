//! Gangs across GPU types, Hadar's placement step (task-level heterogeneity): the gang takes GPUs of
//! several types, fastest first, and runs at the pace of the slowest type it may use (its grant's
//! type).

use crate::cluster::{GpuSet, GpuTypeId};
use crate::placement::{Locality, PlaceRequest, Placed, PlacementStep, StepContext, Unplaced};

/// The step Hadar's grants name.
#[derive(Debug)]
pub struct MixedTypes;

/// Its one value, which grants name.
pub static MIXED_TYPES: MixedTypes = MixedTypes;

impl PlacementStep for MixedTypes {
    fn name(&self) -> &'static str {
        "mixed_types"
    }

    /// Over the types on which the job runs at least as fast as on the grant's, fastest first.
    fn place(
        &self,
        cx: &mut StepContext<'_>,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        let types = types_at_least_as_fast(cx, request.gpu_type, request.gpus);
        place(cx, request, &types)
    }

    fn spans_types(&self) -> bool {
        true
    }
}

/// The GPU types on which the job runs `gpus` GPUs at least as fast as on `pace`, fastest first (ties
/// in type order).
fn types_at_least_as_fast(cx: &StepContext<'_>, pace: GpuTypeId, gpus: u32) -> Vec<GpuTypeId> {
    let floor = cx.rate(pace, gpus);
    let mut types: Vec<(f64, GpuTypeId)> = (0..cx.gpu_types() as u16)
        .map(|t| (cx.rate(GpuTypeId(t), gpus), GpuTypeId(t)))
        .filter(|&(rate, _)| rate >= floor && rate > 0.0)
        .collect();
    types.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    types.into_iter().map(|(_, t)| t).collect()
}

/// Places `request.gpus` GPUs over `types` (fastest first; each at least as fast for the job as the
/// type that sets its pace), asking the placer for each type's part. The set's locality is its worst
/// part's. Fails unless the whole gang is covered.
fn place(
    cx: &mut StepContext<'_>,
    request: &PlaceRequest<'_>,
    types: &[GpuTypeId],
) -> Result<Placed, Unplaced> {
    let mut gpus = GpuSet::new();
    let mut locality = Locality::IDEAL;
    for &t in types {
        let n = (request.gpus - gpus.len() as u32).min(cx.free().free_of_type(t));
        if n == 0 {
            continue;
        }
        let part = PlaceRequest {
            gpu_type: t,
            gpus: n,
            consolidate: false,
            ..*request
        };
        let placed = cx.place(&part)?;
        locality = Locality::new(locality.score().min(placed.locality.score()));
        gpus.extend(placed.gpus);
        if gpus.len() as u32 == request.gpus {
            return Ok(Placed { gpus, locality });
        }
    }
    Err(Unplaced::NoCapacity {
        gpu_type: request.gpu_type,
        wanted: request.gpus,
        free: types.iter().map(|&t| cx.free().free_of_type(t)).sum(),
    })
}
