//! Optimus (Peng et al., EuroSys'18) as Pollux's comparison runs it ("Optimus+Oracle+TunedJobs", Qiao et
//! al., OSDI'21): every job keeps the batch size its workload tuned it to and Optimus picks how many GPUs
//! it gets. Each round every active job gets one GPU, in arrival order, while GPUs last; then GPUs go one
//! at a time to the job whose remaining time would shrink most from one more:
//! `(T(r) - T(r + 1)) * remaining iterations`, with `T(r)` the step time on `r` GPUs packed onto whole
//! servers (an oracle: the profiles' own step times) and the job's batch split over them. A job stops
//! growing when its step time stops improving or its batch cannot be split further. Grants are placed as
//! Pollux places them, fewest GPUs first, each on the servers with the most free GPUs
//! (its [`most_free`] placement step): with best fit and arrival order instead, runs at load 0.5 were 7-12% slower than
//! Pollux's (wide grants placed first split smaller gangs over servers).
//!
//! The oracle is a goodput model's (a Pollux or Sia workload). Each job runs on the GPU type where one GPU
//! trains it fastest among those with GPUs left; Pollux's comparison has one type. With any other model
//! there is nothing to size jobs by: they get the GPUs they asked for, first come first served.

pub mod most_free;

use super::{Grant, Needs, Policy, PolicyEntry, Registry, RegistryError, RoundInput};
use crate::cluster::GpuTypeId;
use crate::job::Job;
use crate::throughput::goodput::{BatchPlan, Elastic, packed_placement};

/// Greedy marginal-gain GPU counts over oracle step times.
#[derive(Debug, Default)]
pub struct Optimus {
    /// Whether it said that the model has no goodput to allocate by.
    unmet_said: bool,
}

/// One job's standing in the greedy search.
struct Candidate<'a> {
    job: &'a Job,
    gpu_type: GpuTypeId,
    gpus: u32,
    /// Iterations still to do at the job's batch.
    remaining: f64,
    /// The most GPUs its batch can be split over.
    max_gpus: u32,
}

/// Seconds per optimizer step of `job` on `gpus` GPUs of `gpu_type`, packed onto whole servers, with
/// its batch split over them; `None` where the profiles have no such run.
fn step_seconds(elastic: &dyn Elastic, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
    let app = elastic.application(job)?;
    let profile = elastic.profile(job, gpu_type)?;
    let placement = packed_placement(elastic.node_size(gpu_type), gpus);
    let batch = job.batch.unwrap_or(app.init_batch);
    let plan = BatchPlan::split(batch, gpus, app, profile.max_local);
    let (step, sync) = elastic.measure(job, gpu_type, &placement, f64::from(plan.local))?;
    let seconds = step + (step - sync).max(0.0) * f64::from(plan.accum);
    (seconds.is_finite() && seconds > 0.0).then_some(seconds)
}

impl Candidate<'_> {
    /// Seconds of training saved by one more GPU (0 when none would help or fit).
    fn gain(&self, elastic: &dyn Elastic, free: &[u32]) -> f64 {
        if self.gpus >= self.max_gpus || free[self.gpu_type.0 as usize] == 0 {
            return 0.0;
        }
        let now = step_seconds(elastic, self.job, self.gpu_type, self.gpus);
        let more = step_seconds(elastic, self.job, self.gpu_type, self.gpus + 1);
        match (now, more) {
            (Some(now), Some(more)) => ((now - more) * self.remaining).max(0.0),
            _ => 0.0,
        }
    }
}

impl Policy for Optimus {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let Some(elastic) = input.model.elastic() else {
            return super::unmet("optimus", Needs::GOODPUT, &mut self.unmet_said, input);
        };
        let mut free = input.capacity.to_vec();
        let mut candidates: Vec<Candidate<'_>> = Vec::new();
        for view in input.jobs {
            let Some(app) = elastic.application(view.job) else {
                continue;
            };
            // The type where one GPU trains the job fastest, among those with a GPU left.
            let best = (0..free.len())
                .filter(|&t| free[t] > 0)
                .filter_map(|t| {
                    let gpu_type = GpuTypeId(t as u16);
                    step_seconds(elastic, view.job, gpu_type, 1).map(|s| (s, gpu_type))
                })
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let Some((_, gpu_type)) = best else { continue };
            let Some(profile) = elastic.profile(view.job, gpu_type) else {
                continue;
            };
            free[gpu_type.0 as usize] -= 1;
            let batch = view.job.batch.unwrap_or(app.init_batch);
            let (epoch, _) = app.epoch_at(view.steps_done);
            candidates.push(Candidate {
                job: view.job,
                gpu_type,
                gpus: 1,
                remaining: app.remaining_iterations(f64::from(batch), epoch),
                // ncf's batch is fixed: Pollux gives it one replica.
                max_gpus: if app.fixed_batch.is_some() {
                    1
                } else {
                    (batch / profile.min_local.max(1)).max(1)
                },
            });
        }
        let mut gains: Vec<f64> = candidates.iter().map(|c| c.gain(elastic, &free)).collect();
        loop {
            // The largest gain; the first job on ties.
            let best = gains.iter().enumerate().fold(
                None,
                |best: Option<(usize, f64)>, (k, &g)| match best {
                    Some((_, b)) if b >= g => best,
                    _ if g > 0.0 => Some((k, g)),
                    _ => best,
                },
            );
            let Some((k, _)) = best else { break };
            let t = candidates[k].gpu_type.0 as usize;
            free[t] -= 1;
            candidates[k].gpus += 1;
            // Only this job's gain changed, and those of jobs whose type just ran out.
            for (c, gain) in candidates.iter().zip(gains.iter_mut()) {
                if c.job.id == candidates[k].job.id || free[t] == 0 {
                    *gain = c.gain(elastic, &free);
                }
            }
        }
        // Placed as Pollux places them: fewest GPUs first (arrival order on ties), each on the servers
        // with the most free GPUs.
        let mut grants: Vec<Grant> = candidates
            .iter()
            .map(|c| Grant::new(c.job.id, c.gpu_type, c.gpus).placed_by(&most_free::MOST_FREE))
            .collect();
        grants.sort_by_key(|g| g.gpus);
        grants
    }
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("optimus", |_| Box::new(Optimus::default()))
            .summary(
                "Optimus as Pollux compares with it: the workload's batch size, GPUs by \
                 greedy marginal gain over oracle step times (goodput workloads)",
            )
            .needs(Needs::GOODPUT),
    )?;
    Ok(())
}
