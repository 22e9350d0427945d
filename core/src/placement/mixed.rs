//! Gangs across GPU types (Hadar's task-level heterogeneity, `Intent::MixedTypes`): the gang takes GPUs
//! of several types, fastest first, and runs at the pace of the slowest type it may use.

use super::{FreeGpus, Locality, PlaceRequest, Placed, Placer, Unplaced};
use crate::cluster::{Cluster, GpuSet, GpuTypeId};

/// Places `request.gpus` GPUs over `types` (fastest first; each at least as fast for the job as the
/// type that sets its pace), asking the placer for each type's part. The set's locality is its worst
/// part's. Fails unless the whole gang is covered.
pub fn place(
    placer: &mut dyn Placer,
    cluster: &Cluster,
    free: &FreeGpus,
    request: &PlaceRequest<'_>,
    types: &[GpuTypeId],
) -> Result<Placed, Unplaced> {
    let mut gpus = GpuSet::new();
    let mut locality = Locality::IDEAL;
    for &t in types {
        let n = (request.gpus - gpus.len() as u32).min(free.free_of_type(t));
        if n == 0 {
            continue;
        }
        let part = PlaceRequest {
            gpu_type: t,
            gpus: n,
            consolidate: false,
            ..*request
        };
        let placed = placer.place(cluster, free, &part)?;
        locality = Locality::new(locality.score().min(placed.locality.score()));
        gpus.extend(placed.gpus);
        if gpus.len() as u32 == request.gpus {
            return Ok(Placed { gpus, locality });
        }
    }
    Err(Unplaced::NoCapacity {
        gpu_type: request.gpu_type,
        wanted: request.gpus,
        free: types.iter().map(|&t| free.free_of_type(t)).sum(),
    })
}
