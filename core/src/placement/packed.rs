//! Packed pairs (space sharing, `Intent::PackedWith`): two jobs granted each other run together on the
//! same GPUs, each at its rate from the throughput model's pair entries. The pair is placed as one gang,
//! and its GPUs are free again only when both have stopped.

use crate::job::Job;
use crate::policy::Grant;
use crate::throughput::ThroughputModel;

/// Whether `a`, granted `grant`, can start packed with `b`, whose own grant is `b_grant`: the grants
/// name each other on the same type and gang size, and the model runs both packed there.
pub fn pair_runs(
    model: &dyn ThroughputModel,
    a: &Job,
    b: &Job,
    grant: &Grant,
    b_grant: Option<&Grant>,
) -> bool {
    let reciprocal = b_grant.is_some_and(|bg| {
        bg.partner() == Some(a.id) && bg.gpu_type == grant.gpu_type && bg.gpus == grant.gpus
    });
    reciprocal
        && b.gpus == grant.gpus
        && model
            .packed_steps_per_second(a, b, grant.gpu_type, grant.gpus)
            .is_some_and(|(ra, rb)| ra > 0.0 && rb > 0.0)
}
