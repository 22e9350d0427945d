//! Sia (Jayaram Subramanya et al., SOSP'23): every round, one mixed-integer program picks each job's
//! GPU type, GPU count and batch size on a heterogeneous cluster, by goodput.
//!
//! - **Configurations** per GPU type: 1, 2, 4, ... GPUs up to a server, then whole servers. A job may
//!   take at most twice the most GPUs it has held (a new job starts at one).
//! - **Goodput** of a job in a configuration: Pollux's (throughput times statistical efficiency), at the
//!   batch size that maximizes it, from the workload's profiles (Sia's "oracle" throughputs: Sia itself
//!   learns them online and bootstraps types a job has not run on). Each job's goodputs are normalized by
//!   its smallest, so that every job counts alike.
//! - **Restart factor**: a configuration other than the job's current one is discounted by
//!   `max(age - restarts * S, 0) / (age + S)`, S the job's restart delay.
//! - **Objective**: maximize `sum x_jc (lambda - G_jc^p)` with p = -0.5 and lambda = 1.1 (leaving a job
//!   out costs more than any configuration), one configuration per job, GPUs per type within capacity;
//!   a job still paying its restart delay keeps its configuration. HiGHS solves it.
//!
//! It needs a goodput model (a Pollux or Sia workload); with another model jobs get the GPUs they asked
//! for, first come first served.

use rustc_hash::{FxHashMap, FxHashSet};

use super::pick::{Candidate, Choices, pick};
use super::{Grant, Intent, Policy, PolicyInfo, RoundInput};
use crate::cluster::GpuTypeId;
use crate::job::{Job, JobId};
use crate::throughput::goodput::{BatchPlan, Elastic, restart_factor, search_batch};

/// The fairness power: below 0, large speedups count for less.
const POWER: f64 = -0.5;
/// What leaving a job without GPUs costs, above any configuration's `G^p` (at most 1).
const LEFT_OUT: f64 = 1.1;

/// One way to run a job: `gpus` GPUs of `gpu_type`, on `nodes` whole servers (1 for part of one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Config {
    gpu_type: GpuTypeId,
    gpus: u32,
    nodes: u32,
}

/// A job, a configuration, an epoch and the largest global batch tried.
type GoodputKey = (JobId, Config, usize, u32);

/// Sia's goodput-driven allocation.
#[derive(Debug, Default)]
pub struct Sia {
    /// Each job's configuration when it last got one (kept while it waits).
    previous: FxHashMap<JobId, Config>,
    /// Each job's restarts so far (changes of configuration after its first).
    restarts: FxHashMap<JobId, u32>,
    /// The most GPUs each job has held.
    most: FxHashMap<JobId, u32>,
    /// Best goodput and batch plan per (job, configuration, epoch, batch limit): profiles do not change.
    cache: FxHashMap<GoodputKey, Option<(f64, BatchPlan)>>,
}

/// The configurations of a cluster with `capacity` GPUs per type.
fn configurations(elastic: &dyn Elastic, capacity: &[u32]) -> Vec<Config> {
    let mut configs = Vec::new();
    for (t, &gpus) in capacity.iter().enumerate() {
        let gpu_type = GpuTypeId(t as u16);
        let size = elastic.node_size(gpu_type).max(1);
        let mut g = 1;
        while g < size && g <= gpus {
            configs.push(Config {
                gpu_type,
                gpus: g,
                nodes: 1,
            });
            g *= 2;
        }
        for nodes in 1..=gpus / size {
            configs.push(Config {
                gpu_type,
                gpus: nodes * size,
                nodes,
            });
        }
    }
    configs
}

/// The best goodput of `job` in `config` at `epoch` with global batches up to `max_batch`, and the batch
/// plan that reaches it (Sia's search: 50 batches from the least the replicas hold, as little
/// accumulation as fits, and at least one accumulation step on one GPU above the initial batch).
fn best_goodput(
    elastic: &dyn Elastic,
    job: &Job,
    config: Config,
    epoch: usize,
    max_batch: u32,
) -> Option<(f64, BatchPlan)> {
    let app = elastic.application(job)?;
    let profile = elastic.profile(job, config.gpu_type)?;
    let size = elastic.node_size(config.gpu_type).max(1);
    let placement: Vec<u32> = if config.nodes > 1 {
        vec![size; config.nodes as usize]
    } else {
        vec![config.gpus]
    };
    let up_to = max_batch.min(app.max_batch);
    let local_range = (profile.min_local, profile.max_local);
    search_batch(app, config.gpus, up_to, local_range, |plan| {
        let local = f64::from(plan.local);
        let (step, sync) = elastic.measure(job, config.gpu_type, &placement, local)?;
        let seconds = step + (step - sync).max(0.0) * f64::from(plan.accum);
        let goodput = app.gain(f64::from(plan.global(config.gpus)), epoch) / seconds;
        (goodput > 0.0).then_some(goodput)
    })
}

impl Policy for Sia {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let Some(elastic) = input.model.elastic() else {
            return super::ordered::requested_in_arrival_order(input);
        };
        // Forget the jobs that have ended.
        let active: FxHashSet<JobId> = input.jobs.iter().map(|v| v.id()).collect();
        self.previous.retain(|job, _| active.contains(job));
        self.restarts.retain(|job, _| active.contains(job));
        self.most.retain(|job, _| active.contains(job));
        self.cache.retain(|(job, _, _, _), _| active.contains(job));
        let configs = configurations(elastic, input.capacity);
        // Per job: its candidate configurations with their batch plans, and the program's row.
        let mut rows: Vec<(JobId, Vec<(Config, BatchPlan)>)> = Vec::new();
        let mut program: Vec<Choices> = Vec::new();
        for view in input.jobs {
            let job = view.job;
            let Some(app) = elastic.application(job) else {
                continue;
            };
            let (epoch, _) = app.epoch_at(view.steps_done);
            let limit = (2 * self.most.get(&job.id).copied().unwrap_or(0)).max(1);
            // Sia prices configurations with batches up to the workload's (its tuned batch), and runs
            // the chosen one at the best batch up to the application's largest.
            let priced_up_to = job.batch.unwrap_or(app.max_batch);
            let mut best = |c: Config, up_to: u32| {
                *self
                    .cache
                    .entry((job.id, c, epoch, up_to))
                    .or_insert_with(|| best_goodput(elastic, job, c, epoch, up_to))
            };
            let goodputs: Vec<(Config, f64, BatchPlan)> = configs
                .iter()
                .filter(|c| c.gpus <= limit)
                .filter_map(|&c| {
                    let (goodput, _) = best(c, priced_up_to)?;
                    let (_, plan) = best(c, app.max_batch)?;
                    Some((c, goodput, plan))
                })
                .collect();
            let Some(smallest) = goodputs.iter().map(|x| x.1).reduce(f64::min) else {
                continue;
            };
            let current = view
                .running
                .and_then(|_| self.previous.get(&job.id).copied());
            let previous = self.previous.get(&job.id).copied();
            // Sia spares a job younger than its restart delay the discount Pollux gives it.
            let (age, penalty) = (input.now - job.arrival, elastic.restart_penalty(job));
            let restarts = self.restarts.get(&job.id).copied().unwrap_or(0);
            let restart = if age < penalty {
                1.0
            } else {
                restart_factor(age, penalty, restarts)
            };
            // A job still paying its restart delay keeps its configuration.
            let pinned = view.running.is_some_and(|r| r.restarting);
            let mut row = Vec::new();
            let mut choices = Choices {
                options: Vec::new(),
                left_out: (!pinned).then_some(LEFT_OUT),
            };
            for (config, goodput, plan) in goodputs {
                if pinned && Some(config) != current {
                    continue;
                }
                let mut normalized = goodput / smallest;
                if previous.is_some_and(|p| p != config) {
                    normalized *= restart;
                }
                // A discounted (or tiny) goodput can cost more than leaving the job out.
                choices.options.push(Candidate {
                    gpu_type: config.gpu_type,
                    gpus: config.gpus,
                    cost: normalized.max(1e-4).powf(POWER),
                });
                row.push((config, plan));
            }
            if row.is_empty() {
                continue;
            }
            program.push(choices);
            rows.push((job.id, row));
        }
        let picked = match pick(&program, input.capacity) {
            Ok(picked) => picked,
            Err(e) => {
                // Running jobs keep what they hold rather than all being stopped; waiting ones wait.
                tracing::warn!(error = %e, jobs = input.jobs.len(), "Sia's program failed; running jobs keep their GPUs this round");
                return super::keep_running(input);
            }
        };
        let mut grants = Vec::new();
        for ((job, row), picked) in rows.into_iter().zip(picked) {
            let Some((config, plan)) = picked.map(|k| row[k]) else {
                continue;
            };
            if let Some(before) = self.previous.insert(job, config)
                && before != config
            {
                *self.restarts.entry(job).or_default() += 1;
            }
            let most = self.most.entry(job).or_default();
            *most = (*most).max(config.gpus);
            // Part of a server stays on one server; whole servers are whole.
            let intent = if config.nodes == 1 {
                Intent::Consolidated
            } else {
                Intent::Anywhere
            };
            grants.push(
                Grant::new(job, config.gpu_type, config.gpus)
                    .with(intent)
                    .with_batch(plan),
            );
        }
        // Placed largest first, as Sia places, so that parts of servers do not split whole ones.
        grants.sort_by_key(|g| std::cmp::Reverse(g.gpus));
        grants
    }
}

pub(super) static POLICIES: &[PolicyInfo] = &[PolicyInfo {
    name: "sia",
    aliases: &[],
    summary: "Sia: one MILP per round picks each job's GPU type, count and batch by normalized goodput (p = -0.5), with restart factors (goodput workloads)",
    knobs: &[],
    build: |_| Box::new(Sia::default()),
}];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throughput::goodput::{Application, TypeProfile};

    /// Servers of 4 GPUs of type 0 and of 8 of type 1.
    struct Servers;

    impl Elastic for Servers {
        fn application(&self, _: &Job) -> Option<&Application> {
            None
        }
        fn profile(&self, _: &Job, _: GpuTypeId) -> Option<&TypeProfile> {
            None
        }
        fn measure(&self, _: &Job, _: GpuTypeId, _: &[u32], _: f64) -> Option<(f64, f64)> {
            None
        }
        fn node_size(&self, gpu_type: GpuTypeId) -> u32 {
            [4, 8][gpu_type.0 as usize]
        }
        fn restart_penalty(&self, _: &Job) -> f64 {
            30.0
        }
    }

    #[test]
    fn configurations_are_powers_of_two_inside_a_server_then_whole_servers() {
        let shown: Vec<(u16, u32, u32)> = configurations(&Servers, &[24, 16])
            .iter()
            .map(|c| (c.gpu_type.0, c.gpus, c.nodes))
            .collect();
        assert_eq!(
            shown,
            [
                (0, 1, 1),
                (0, 2, 1),
                (0, 4, 1),
                (0, 8, 2),
                (0, 12, 3),
                (0, 16, 4),
                (0, 20, 5),
                (0, 24, 6),
                (1, 1, 1),
                (1, 2, 1),
                (1, 4, 1),
                (1, 8, 1),
                (1, 16, 2),
            ]
        );
    }
}
