//! What goodput policies that learn (Pollux, Sia with learned throughputs) take from a round: each
//! running job's measurement of the configuration it ran, as its workers would report it.

use rustc_hash::FxHashMap;

use super::{JobView, RoundInput};
use crate::cluster::{Cluster, GpuTypeId};
use crate::job::JobId;
use crate::throughput::goodput::{Elastic, Learned, Observation};

/// GPUs per node of each node a job holds GPUs on, in the order of its GPUs.
pub fn placement(cluster: &Cluster, view: &JobView<'_>) -> Vec<u32> {
    let mut per_node: Vec<(u32, u32)> = Vec::new();
    for &gpu in view.running.map_or(&[][..], |r| r.gpus) {
        let node = cluster.node_of(gpu).0;
        match per_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, count)) => *count += 1,
            None => per_node.push((node, 1)),
        }
    }
    per_node.into_iter().map(|(_, count)| count).collect()
}

/// Records in `learned` what every running job past its restart measured this round: its step and
/// synchronization time on its placement and per-replica batch (under the key `key(gpu_type)`), and
/// its gradient statistics at its global batch and epoch. A job still restarting has measured nothing.
pub fn learn(
    learned: &mut FxHashMap<JobId, Learned>,
    input: &RoundInput<'_>,
    elastic: &dyn Elastic,
    key: impl Fn(GpuTypeId) -> u16,
) {
    for view in input.jobs {
        let Some(run) = view.running.filter(|r| !r.restarting) else {
            continue;
        };
        let (Some(app), Some(plan)) = (elastic.application(view.job), run.batch) else {
            continue;
        };
        let placement = placement(input.cluster, view);
        let local = f64::from(plan.local);
        let Some((step, sync)) = elastic.measure(view.job, run.gpu_type, &placement, local) else {
            continue;
        };
        let job = learned.entry(view.id()).or_default();
        let replicas = run.gpus.len() as u32;
        let (epoch, _) = app.epoch_at(view.steps_done);
        job.grad = Some(app.grad_stats(f64::from(plan.global(replicas)), epoch));
        job.observe(
            key(run.gpu_type),
            Observation {
                nodes: placement.len() as u32,
                replicas,
                local,
                step_time: step,
                sync_time: sync,
            },
        );
    }
}
