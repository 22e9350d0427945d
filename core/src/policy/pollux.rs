//! Pollux (Qiao et al., OSDI'21): every round, GPUs go where they raise goodput most fairly, and each
//! job runs at the batch size its own learned model says is best.
//!
//! - **Learning**: a job learns its step times only from the configurations it has run (nodes,
//!   replicas, per-replica batch), refitting Pollux's model whenever it measures a new one
//!   ([`Learned`]). Pollux knows no GPU types: one model per job over all its runs.
//! - **Speedup** of `r` replicas on `n` nodes: the best goodput there over the goodput at the fair
//!   share (`ceil(GPUs / jobs)` replicas on one node), both at their best batch. A job that has never
//!   run is assumed to scale linearly.
//! - **Objective**: maximize the power mean with p = -1 (the harmonic mean) of the jobs' speedups
//!   (scaled by nodes over GPUs, as Pollux does; a job left out counts as 0.001), with the goodput of a
//!   configuration other than the job's current one discounted by the restart factor.
//! - **Limits**: a job may take at most twice the most replicas it has run with (one before its first
//!   run), at most 64, and no more than its largest batch spreads over; a gang that spans servers takes
//!   whole servers, so that no two distributed jobs share one (what Pollux's repair step ensures); a
//!   gang on part of a server waits for a server with room rather than spread (spread gangs run slower
//!   than the program priced them; letting them spread made runs 5-18% slower). A job that says which
//!   sizes it runs on ([`crate::job::Sizes`]: a rigid or hybrid-parallel job submitted live) gets only
//!   those, and its fewest GPUs whatever its limit.
//!
//! Pollux searches with a genetic algorithm (population 100, 100 generations). Its objective is a sum
//! over jobs of a cost per job (`1 / (speedup + 0.001)`) under GPU capacity, so the search here is exact
//! instead: one configuration per job by the multiple-choice program of [`super::pick`], solved
//! exactly, deterministic, and at least as good as any allocation the GA can reach in this space
//! (`tests/pollux_ga.rs`). The program counts GPUs per type, not per server: [`super::fit`] then places
//! the pick as the engine will, and a gang that finds no server with room takes its best option that
//! does.

use rustc_hash::FxHashMap;

use super::pick::{Candidate, Choices, pick_near};
use super::{Grant, Intent, Needs, Policy, PolicyEntry, Registry, RegistryError, RoundInput};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, Job, JobId};
use crate::throughput::goodput::{
    Application, BatchPlan, Elastic, Learned, PerfParams, TypeProfile, batch_range, optimize,
    restart_factor,
};

/// The power of the mean Pollux maximizes: -1, the harmonic mean.
const POWER: f64 = -1.0;
/// What a job without GPUs counts for in the mean (Pollux's 1e-3).
const FLOOR: f64 = 1e-3;
/// The most replicas Pollux gives one job.
const MAX_REPLICAS: u32 = 64;
/// Gradient statistics (squared norm, variance) assumed before a job has measured any.
const NO_GRAD: (f64, f64) = (1.0, 0.0);
/// Pollux's model is per job, not per GPU type: every run is learned under this key.
const ANY_TYPE: u16 = 0;

/// Pollux's goodput-fair allocation.
#[derive(Debug, Default)]
pub struct Pollux {
    learned: IdMap<JobId, Learned>,
    /// Each job's configuration (GPU type, replicas) when it last got one.
    previous: IdMap<JobId, (GpuTypeId, u32)>,
    /// Each job's restarts so far (changes of configuration after its first).
    restarts: IdMap<JobId, u32>,
    /// Each job's best goodputs, kept while its model and gradient statistics stay the same.
    best: IdMap<JobId, Memo>,
    /// Whether it said that the model has no goodput to allocate by.
    unmet_said: bool,
}

/// Per-replica batch limits, nodes and replicas: what a job's best goodput depends on in a round.
type Shape = (u32, u32, u32, u32);

/// A job's best goodput and batch plan by [`Shape`], for one state of its model (configurations
/// measured) and gradient statistics.
#[derive(Debug, Default)]
struct Memo {
    state: (usize, u64, u64),
    table: FxHashMap<Shape, Option<(f64, BatchPlan)>>,
}

/// A job's options in a round: GPU type, replicas, and the batch plan it would run with.
type Row = Vec<(GpuTypeId, u32, BatchPlan)>;

/// What one job brings to a round: its application, the global batches it may run with, its model and
/// gradient statistics.
struct Standing<'a> {
    app: &'a Application,
    batches: (u32, u32),
    params: Option<&'a PerfParams>,
    grad: (f64, f64),
    memo: &'a mut Memo,
}

impl Standing<'_> {
    /// The best goodput and batch plan on `replicas` replicas over `nodes` nodes with `profile`'s
    /// per-replica limits, by the job's model.
    fn best(
        &mut self,
        profile: &TypeProfile,
        nodes: u32,
        replicas: u32,
    ) -> Option<(f64, BatchPlan)> {
        let params = self.params?;
        let (app, batches, grad) = (self.app, self.batches, self.grad);
        *self
            .memo
            .table
            .entry((profile.min_local, profile.max_local, nodes, replicas))
            .or_insert_with(|| {
                let range = (profile.min_local, profile.max_local);
                optimize(params, app, grad, nodes, replicas, batches, range)
            })
    }

    /// The batch plan for `replicas` replicas over `nodes` nodes: the application's fixed batch when it
    /// has one; else the model's best; else, before any run, the least batch the replicas hold.
    fn plan(&mut self, profile: &TypeProfile, nodes: u32, replicas: u32) -> BatchPlan {
        let fixed = self.app.fixed_batch;
        if let Some(batch) = fixed {
            return BatchPlan::split(batch, replicas, self.app, profile.max_local);
        }
        if let Some((_, plan)) = self.best(profile, nodes, replicas) {
            return plan;
        }
        let batch = self.batches.0.max(profile.min_local * replicas);
        BatchPlan::split(batch, replicas, self.app, profile.max_local)
    }
}

/// Pollux's speedup of `replicas` replicas: their best goodput over the best at the fair share (`base`),
/// or `replicas / fair` (linear) for a job without a model yet.
fn speedup(best: Option<f64>, base: Option<f64>, replicas: u32, fair: u32) -> f64 {
    match (best, base) {
        (Some(goodput), Some(base)) if base > 0.0 => goodput / base,
        _ => f64::from(replicas) / f64::from(fair),
    }
}

/// The replica counts a job may take on servers of `size` GPUs: any part of one server, then whole
/// servers, up to `most`.
fn counts(size: u32, most: u32) -> impl Iterator<Item = u32> {
    let size = size.max(1);
    (1..=size.min(most)).chain((2..=most / size).map(move |nodes| nodes * size))
}

impl Pollux {
    /// The most replicas `job` may take now.
    pub fn most_replicas(&self, job: &Job, app: &Application, profile: &TypeProfile) -> u32 {
        if app.fixed_batch.is_some() {
            return 1;
        }
        let ran = self.learned.get(&job.id).map_or(0, Learned::max_replicas);
        (2 * ran)
            .clamp(1, MAX_REPLICAS)
            .min(batch_range(job, app).1 / profile.min_local.max(1))
            .max(1)
    }

    /// The restarts `job` has made so far, as its restart factor counts them.
    pub fn restarts(&self, job: JobId) -> u32 {
        self.restarts.get(&job).copied().unwrap_or(0)
    }

    /// The speedup this policy reckons for `job` on `replicas` replicas over `nodes` nodes of
    /// `gpu_type` with the fair share `fair` (before the scaling by nodes over GPUs and the restart
    /// factor), by what it has learned up to its latest round, on any spread of nodes, not only the
    /// packed ones it offers. For tools that measure its search against Pollux's GA
    /// (`examples/pollux_rounds.rs`). `None` where the job has no profile on `gpu_type`.
    pub fn speedup(
        &self,
        elastic: &dyn Elastic,
        job: &Job,
        gpu_type: GpuTypeId,
        fair: u32,
        (nodes, replicas): (u32, u32),
    ) -> Option<f64> {
        let app = elastic.application(job)?;
        let profile = elastic.profile(job, gpu_type)?;
        let learned = self.learned.get(&job.id);
        let grad = learned.and_then(|l| l.grad).unwrap_or(NO_GRAD);
        let params = learned.and_then(|l| l.params(ANY_TYPE));
        let (batches, range) = (
            batch_range(job, app),
            (profile.min_local, profile.max_local),
        );
        let best = |n, r| params.and_then(|p| optimize(p, app, grad, n, r, batches, range));
        Some(speedup(
            best(nodes, replicas).map(|b| b.0),
            best(1, fair).map(|b| b.0),
            replicas,
            fair,
        ))
    }
}

impl Policy for Pollux {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let Some(elastic) = input.model.elastic() else {
            return super::unmet("pollux", Needs::GOODPUT, &mut self.unmet_said, input);
        };
        // Forget the jobs that have ended (not those paused: they come back).
        let active = input.not_ended();
        self.learned.retain(|job, _| active.contains(job));
        self.previous.retain(|job, _| active.contains(job));
        self.restarts.retain(|job, _| active.contains(job));
        self.best.retain(|job, _| active.contains(job));
        super::measured::learn(&mut self.learned, input, elastic, |_| ANY_TYPE);

        let total: u32 = input.capacity.iter().sum();
        let fair = total.div_ceil(input.jobs.len().max(1) as u32).max(1);
        // Pollux scales speedups by its dominant share times the nodes: nodes over GPUs.
        let scale = input.cluster.nodes().len() as f64 / f64::from(total.max(1));
        let mut rows: Vec<(JobId, Row)> = Vec::new();
        let mut program: Vec<Choices> = Vec::new();
        // Each job's option for what it runs on now: most keep it, so that pick finds this
        // round's sooner.
        let mut now: Vec<Option<usize>> = Vec::new();
        for view in input.jobs {
            let job = view.job;
            let Some(app) = elastic.application(job) else {
                continue;
            };
            // The most GPUs per type: its replica limit in whole groups of that type.
            let most: Vec<u32> = (0..input.capacity.len())
                .map(|t| {
                    let gpu_type = GpuTypeId(t as u16);
                    elastic.profile(job, gpu_type).map_or(0, |p| {
                        self.most_replicas(job, app, p) * job.group_on(gpu_type)
                    })
                })
                .collect();
            let learned = self.learned.get(&job.id);
            let grad = learned.and_then(|l| l.grad).unwrap_or(NO_GRAD);
            let state = (
                learned.map_or(0, Learned::measured),
                grad.0.to_bits(),
                grad.1.to_bits(),
            );
            let memo = self.best.entry(job.id).or_default();
            if memo.state != state {
                *memo = Memo {
                    state,
                    table: FxHashMap::default(),
                };
            }
            let mut standing = Standing {
                app,
                batches: batch_range(job, app),
                params: learned.and_then(|l| l.params(ANY_TYPE)),
                grad,
                memo,
            };
            let current = view.running.map(|r| (r.gpu_type, r.gpus.len() as u32));
            let restart = restart_factor(
                input.now - job.arrival,
                elastic.restart_penalty(job),
                self.restarts.get(&job.id).copied().unwrap_or(0),
            );
            let mut choices = Choices {
                options: Vec::new(),
                left_out: Some(1.0 / FLOOR),
            };
            let mut row = Vec::new();
            let mut kept = None;
            for (t, &capacity) in input.capacity.iter().enumerate() {
                let gpu_type = GpuTypeId(t as u16);
                let Some(profile) = elastic.profile(job, gpu_type) else {
                    continue;
                };
                let size = elastic.node_size(gpu_type).max(1);
                let base =
                    (standing.best(profile, 1, job.replicas_on(gpu_type, fair))).map(|b| b.0);
                let offered = counts(size, most[t].min(capacity));
                for gpus in job.sizes_within(gpu_type, offered, most[t], capacity) {
                    // A hybrid-parallel job's batch is split over its data-parallel replicas.
                    let (nodes, replicas) = (gpus.div_ceil(size), job.replicas_on(gpu_type, gpus));
                    let best = standing.best(profile, nodes, replicas);
                    let mut value = speedup(best.map(|b| b.0), base, gpus, fair) * scale;
                    if current == Some((gpu_type, gpus)) {
                        kept = Some(row.len());
                    } else {
                        value *= restart;
                    }
                    choices.options.push(Candidate {
                        gpu_type,
                        gpus,
                        cost: (value + FLOOR).powf(POWER),
                    });
                    row.push((gpu_type, gpus, standing.plan(profile, nodes, replicas)));
                }
            }
            if !row.is_empty() {
                program.push(choices);
                now.push(kept);
                rows.push((job.id, row));
            }
        }
        let mut picked = match pick_near(&program, input.capacity, &now) {
            Ok(picked) => picked,
            Err(e) => {
                tracing::warn!(error = %e, jobs = input.jobs.len(), "Pollux's program failed; running jobs keep their GPUs this round");
                return super::keep_running(input);
            }
        };
        let ids: Vec<JobId> = rows.iter().map(|(job, _)| *job).collect();
        super::fit::make_placeable(input, &ids, &program, &mut picked, |t| elastic.node_size(t));
        let current: IdMap<JobId, (GpuTypeId, u32)> = input
            .jobs
            .iter()
            .filter_map(|v| {
                Some((
                    v.id(),
                    v.running.map(|r| (r.gpu_type, r.gpus.len() as u32))?,
                ))
            })
            .collect();
        let mut grants = Vec::new();
        for ((job, row), picked) in rows.into_iter().zip(picked) {
            let Some((gpu_type, replicas, plan)) = picked.map(|k| row[k]) else {
                continue;
            };
            // Every start after the first is a restart, a resume included.
            let running = current.get(&job).copied();
            if self.previous.insert(job, (gpu_type, replicas)).is_some()
                && running != Some((gpu_type, replicas))
            {
                *self.restarts.entry(job).or_default() += 1;
            }
            let size = elastic.node_size(gpu_type);
            let intent = if replicas <= size {
                Intent::Consolidated
            } else {
                Intent::Anywhere
            };
            grants.push(
                Grant::new(job, gpu_type, replicas)
                    .with(intent)
                    .with_batch(plan),
            );
        }
        // Largest first, so that whole servers go to the gangs that span them.
        grants.sort_by_key(|g| std::cmp::Reverse(g.gpus));
        grants
    }
}

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("pollux", |_| Box::new(Pollux::default()))
            .summary(
                "Pollux: GPUs by the harmonic mean of goodput speedups over the fair share, \
                 with restart factors; each job's batch from its own learned model (goodput \
                 workloads)",
            )
            .needs(Needs::GOODPUT.and(Needs::LP_SOLVER)),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speedup_is_over_the_fair_share_or_linear_without_a_model() {
        assert_eq!(speedup(Some(3.0), Some(2.0), 8, 4), 1.5);
        // No model, or none at the fair share: linear in the replicas.
        assert_eq!(speedup(None, Some(2.0), 8, 4), 2.0);
        assert_eq!(speedup(Some(3.0), None, 2, 4), 0.5);
        assert_eq!(speedup(Some(3.0), Some(0.0), 2, 4), 0.5);
    }

    #[test]
    fn counts_are_parts_of_a_server_then_whole_servers() {
        assert_eq!(counts(4, 13).collect::<Vec<_>>(), [1, 2, 3, 4, 8, 12]);
        assert_eq!(counts(4, 3).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(counts(8, 1).collect::<Vec<_>>(), [1]);
    }
}
