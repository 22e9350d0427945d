//! What goodput policies that learn (Pollux, Sia with learned throughputs) take from a round: each
//! running job's measurement of the configuration it ran, as its workers would report it.

use super::{JobView, RoundInput};
use crate::cluster::{Cluster, GpuTypeId};
use crate::job::{IdMap, JobId};
use crate::throughput::RunShape;
use crate::throughput::goodput::{Elastic, Learned};

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

/// Records in `learned` what every running job past its restart has measured ([`Elastic::observe`]):
/// its step and synchronization times (under the key `key(gpu_type)`) and its gradient statistics.
/// A job still restarting has measured nothing.
pub fn learn(
    learned: &mut IdMap<JobId, Learned>,
    input: &RoundInput<'_>,
    elastic: &dyn Elastic,
    key: impl Fn(GpuTypeId) -> u16,
) {
    for view in input.jobs {
        let Some(run) = view.running.filter(|r| !r.restarting) else {
            continue;
        };
        let placement = placement(input.cluster, view);
        let shape = RunShape {
            gpu_type: run.gpu_type,
            placement: &placement,
            batch: run.batch,
            allotment: None,
        };
        let Some(observed) = elastic.observe(view.job, &shape, view.steps_done) else {
            continue;
        };
        let job = learned.entry(view.id()).or_default();
        if observed.grad.is_some() {
            job.grad = observed.grad;
        }
        for (gpu_type, observation) in observed.observations {
            job.observe(key(gpu_type), observation);
        }
    }
}
