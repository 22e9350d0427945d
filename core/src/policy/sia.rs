//! Sia (Jayaram Subramanya et al., SOSP'23): every round, one mixed-integer program picks each job's
//! GPU type, GPU count and batch size on a heterogeneous cluster, by goodput.
//!
//! - **Configurations** per GPU type: 1, 2, 4, ... GPUs up to a server, then whole servers. A job may
//!   take at most twice the most GPUs it has held (a new job starts at one). A job that says which
//!   sizes it runs on ([`crate::job::Sizes`]: a rigid or hybrid-parallel job submitted live) gets only
//!   those, and its fewest GPUs whatever its limit.
//! - **Goodput** of a job in a configuration: Pollux's (throughput times statistical efficiency), at the
//!   batch size that maximizes it, from the workload's profiles (Sia's "oracle" throughputs: Sia itself
//!   learns them online and bootstraps types a job has not run on). Each job's goodputs are normalized by
//!   its smallest, so that every job counts alike.
//! - **Restart factor**: a configuration other than the job's current one is discounted by
//!   `max(age - restarts * S, 0) / (age + S)`, S the job's restart delay.
//! - **Objective**: maximize `sum x_jc (lambda - G_jc^p)` with p = -0.5 and lambda = 1.1 (leaving a job
//!   out costs more than any configuration), one configuration per job, GPUs per type within capacity;
//!   a job still paying its restart delay keeps its configuration. [`super::pick`] solves it.
//! - **Placement**: capacity is per type, as in Sia's program. Sia's simulator re-places every job from
//!   scratch each round (moving within a type is free there), so a per-type count always fits; here runs
//!   stay where they are, and [`super::fit`] moves a part-server gang that no server has room for to its
//!   best configuration that fits.
//!
//! It needs a goodput model (a Pollux or Sia workload); with another model jobs get the GPUs they asked
//! for, first come first served.
//!
//! The choices above that are Sia's own (the power, what leaving a job out costs, the batches it
//! prices with, how fast a job may grow, how dear a move is) are a public [`Settings`]: a policy may
//! run the same program with its own through [`Sia::with`] (as `ramp` does, `super::ramp`).

use rustc_hash::FxHashMap;

use super::pick::{Candidate, Choices, pick_near};
use super::{
    Grant, Intent, Knob, KnobRange, Needs, Policy, PolicyEntry, Registry, RegistryError, RoundInput,
};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, Job, JobId};
use crate::throughput::goodput::{
    BatchPlan, Elastic, Learned, batch_range, optimize, restart_factor, search_batch,
};

/// The choices that make the program Sia's ([`Settings::SIA`]), for a policy that runs it with its
/// own ([`Sia::with`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settings {
    /// The fairness power p of the objective `sum x (left_out - G^p)`: below 0, large speedups count
    /// for less (Sia: -0.5).
    pub power: f64,
    /// What leaving a job without GPUs costs, above any configuration's `G^p`, which is at most 1
    /// (Sia: 1.1).
    pub left_out: f64,
    /// Price every configuration with batches up to the application's largest, the batch the chosen
    /// one runs at; Sia prices with batches up to the workload's (its tuned batch).
    pub price_full_batch_range: bool,
    /// The most GPUs a job may take before it has held any (Sia: 1).
    pub first_gpus: u32,
    /// The most GPUs a job may take, as a multiple of the most it has held (Sia: 2).
    pub growth: f64,
    /// The restart factor is raised to this power: above 1, a job that has restarted often pays more
    /// for the next restart (Sia: 1).
    pub restart_exponent: f64,
    /// A configuration other than the job's last is discounted by this fraction besides the restart
    /// factor, so that a near tie does not move it (Sia: 0).
    pub move_margin: f64,
    /// Learn each job's throughputs from its runs and bootstrap the GPU types it has not run on, as
    /// Sia does, rather than read them from the profiles (an oracle).
    pub learns: bool,
}

impl Settings {
    /// Sia's, with throughputs read from the profiles.
    pub const SIA: Settings = Settings {
        power: -0.5,
        left_out: 1.1,
        price_full_batch_range: false,
        first_gpus: 1,
        growth: 2.0,
        restart_exponent: 1.0,
        move_margin: 0.0,
        learns: false,
    };
}

impl Default for Settings {
    fn default() -> Self {
        Settings::SIA
    }
}

/// One way to run a job: `gpus` GPUs of `gpu_type`, on `nodes` whole servers (1 for part of one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Config {
    gpu_type: GpuTypeId,
    gpus: u32,
    nodes: u32,
}

/// What a job's goodputs depend on besides the configuration: its epoch and the state of what it has
/// measured (configurations, gradient statistics; zero with oracle throughputs).
type GoodputState = (usize, (usize, u64, u64));

/// One job's best goodputs and batch plans in the [`GoodputState`] they were computed in, per
/// configuration and largest global batch tried.
#[derive(Debug, Default)]
struct Goodputs {
    state: GoodputState,
    best: FxHashMap<(Config, u32), Option<(f64, BatchPlan)>>,
}

/// Sia's goodput-driven allocation (with [`Settings::SIA`], or a policy's own through [`Sia::with`]).
#[derive(Debug, Default)]
pub struct Sia {
    settings: Settings,
    /// Each job's configuration when it last got one (kept while it waits).
    previous: IdMap<JobId, Config>,
    /// Each job's restarts so far (changes of configuration after its first).
    restarts: IdMap<JobId, u32>,
    /// The most GPUs each job has held.
    most: IdMap<JobId, u32>,
    /// Each job's best goodputs and batch plans while its epoch and measurements stay the same:
    /// neither profiles nor past measurements change, and a job's epoch only moves on.
    cache: IdMap<JobId, Goodputs>,
    /// Goodput from what each job measured as it ran (with [`Settings::learns`]).
    learned: IdMap<JobId, Learned>,
    /// Whether it said that the model has no goodput to allocate by.
    unmet_said: bool,
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

/// `job`'s configurations among the cluster's (`configs`): up to `limit` GPUs, on the sizes it can run
/// on (see [`Job::sizes_within`]).
fn job_configurations(
    elastic: &dyn Elastic,
    job: &Job,
    configs: &[Config],
    capacity: &[u32],
    limit: u32,
) -> Vec<Config> {
    let mut own = Vec::new();
    for (t, &room) in capacity.iter().enumerate() {
        let gpu_type = GpuTypeId(t as u16);
        let size = elastic.node_size(gpu_type).max(1);
        let offered = configs
            .iter()
            .filter(|c| c.gpu_type == gpu_type)
            .map(|c| c.gpus);
        own.extend(
            job.sizes_within(gpu_type, offered, limit, room)
                .into_iter()
                .map(|gpus| Config {
                    gpu_type,
                    gpus,
                    nodes: gpus.div_ceil(size).max(1),
                }),
        );
    }
    own
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
    let (least, most) = batch_range(job, app);
    let local_range = (profile.min_local, profile.max_local);
    let replicas = job.replicas_on(config.gpu_type, config.gpus);
    let measure = elastic.measurer(job, config.gpu_type, &placement);
    search_batch(
        app,
        replicas,
        (least, max_batch.min(most)),
        local_range,
        |plan| {
            let (step, sync) = measure(f64::from(plan.local))?;
            let seconds = step + (step - sync).max(0.0) * f64::from(plan.accum);
            let goodput = app.gain(f64::from(plan.global(replicas)), epoch) / seconds;
            (goodput > 0.0).then_some(goodput)
        },
    )
}

/// Sia's estimate of `job`'s best goodput in `config` from what it has measured (`learned`): with the
/// model fitted on the config's GPU type when it ran there; otherwise bootstrapped from the first type
/// that has one, B, as `thr(N, t) = thr(1, t) / thr(1, B) x thr(N, B)`: N data-parallel replicas,
/// on B's servers with B's group per replica (Sia's scale unit), and one replica's throughput on each
/// type from the profiles. `None` when no type has a model, or none fits.
fn learned_goodput(
    elastic: &dyn Elastic,
    job: &Job,
    learned: &Learned,
    config: Config,
    max_batch: u32,
) -> Option<(f64, BatchPlan)> {
    let app = elastic.application(job)?;
    let grad = learned.grad?;
    let (least, most) = batch_range(job, app);
    let replicas = job.replicas_on(config.gpu_type, config.gpus);
    let estimate = |on: GpuTypeId, nodes: u32| {
        let profile = elastic.profile(job, on)?;
        let params = learned.params(on.0)?;
        let range = (profile.min_local, profile.max_local);
        let batches = (least, max_batch.min(most));
        optimize(params, app, grad, nodes, replicas, batches, range)
    };
    if learned.params(config.gpu_type.0).is_some() {
        return estimate(config.gpu_type, config.nodes);
    }
    let source = GpuTypeId(learned.types().next()?);
    let one_replica = |on: GpuTypeId| {
        Some(
            elastic
                .profile(job, on)?
                .replica_throughput(job.group_on(on)),
        )
    };
    let ratio = one_replica(config.gpu_type)? / one_replica(source)?;
    let source_gpus = replicas * job.group_on(source);
    let nodes = source_gpus.div_ceil(elastic.node_size(source).max(1));
    let (goodput, plan) = estimate(source, nodes)?;
    (ratio.is_finite() && ratio > 0.0).then_some((goodput * ratio, plan))
}

/// The batch plan `job` runs `config` with when it learns its throughputs: its model's best on the
/// config's type up to the application's largest batch; before it has run there, the least batch its
/// replicas hold (Sia's rule).
fn learned_plan(
    elastic: &dyn Elastic,
    job: &Job,
    learned: Option<&Learned>,
    config: Config,
) -> Option<BatchPlan> {
    let app = elastic.application(job)?;
    let profile = elastic.profile(job, config.gpu_type)?;
    let fitted = learned.and_then(|l| Some((l.params(config.gpu_type.0)?, l.grad?)));
    let batches = batch_range(job, app);
    let replicas = job.replicas_on(config.gpu_type, config.gpus);
    if let Some((params, grad)) = fitted {
        let range = (profile.min_local, profile.max_local);
        if let Some((_, plan)) = optimize(params, app, grad, config.nodes, replicas, batches, range)
        {
            return Some(plan);
        }
    }
    let batch = batches.0.max(profile.min_local * replicas);
    Some(BatchPlan::split(batch, replicas, app, profile.max_local))
}

impl Sia {
    /// Sia's program with `settings`.
    pub fn with(settings: Settings) -> Sia {
        Sia {
            settings,
            ..Sia::default()
        }
    }
}

impl Policy for Sia {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let Some(elastic) = input.model.elastic() else {
            return super::unmet("sia", Needs::GOODPUT, &mut self.unmet_said, input);
        };
        // Forget the jobs that have ended (not those paused: they come back).
        let active = input.not_ended();
        self.previous.retain(|job, _| active.contains(job));
        self.restarts.retain(|job, _| active.contains(job));
        self.most.retain(|job, _| active.contains(job));
        self.cache.retain(|job, _| active.contains(job));
        self.learned.retain(|job, _| active.contains(job));
        let settings = self.settings;
        if settings.learns {
            super::measured::learn(&mut self.learned, input, elastic, |t| t.0);
        }
        let configs = configurations(elastic, input.capacity);
        // Per job: its candidate configurations with their batch plans, and the program's row.
        let mut rows: Vec<(JobId, Vec<(Config, BatchPlan)>)> = Vec::new();
        let mut program: Vec<Choices> = Vec::new();
        // Each job's option for its last configuration: most keep it, so their last pick finds
        // this round's sooner.
        let mut last: Vec<Option<usize>> = Vec::new();
        for view in input.jobs {
            let job = view.job;
            let Some(app) = elastic.application(job) else {
                continue;
            };
            let (epoch, _) = app.epoch_at(view.steps_done);
            let most = self.most.get(&job.id).copied().unwrap_or(0);
            let limit = ((settings.growth * f64::from(most)) as u32).max(settings.first_gpus);
            // Sia prices configurations with batches up to the workload's (its tuned batch), and runs
            // the chosen one at the best batch up to the application's largest; other settings may
            // price that range too.
            let priced_up_to = if settings.price_full_batch_range {
                batch_range(job, app).1
            } else {
                job.batch.unwrap_or(app.max_batch)
            };
            let learned = self.learned.get(&job.id).filter(|l| l.has_run());
            let state = learned.map_or((0, 0, 0), |l| {
                let (sqr, var) = l.grad.unwrap_or_default();
                (l.measured(), sqr.to_bits(), var.to_bits())
            });
            let learns = settings.learns;
            let known = self.cache.entry(job.id).or_default();
            if known.state != (epoch, state) {
                *known = Goodputs {
                    state: (epoch, state),
                    best: FxHashMap::default(),
                };
            }
            let mut best = |c: Config, up_to: u32| {
                *known
                    .best
                    .entry((c, up_to))
                    .or_insert_with(|| match (learns, learned) {
                        (false, _) => best_goodput(elastic, job, c, epoch, up_to),
                        (true, Some(learned)) => {
                            let (goodput, _) = learned_goodput(elastic, job, learned, c, up_to)?;
                            Some((goodput, learned_plan(elastic, job, Some(learned), c)?))
                        }
                        // Before its first run every type's fewest GPUs (one, or one replica) are
                        // alike (Sia does not profile a job before it runs); its solver breaks the
                        // tie.
                        (true, None) => (c.gpus == job.fewest_gpus_on(c.gpu_type))
                            .then(|| Some((1.0, learned_plan(elastic, job, None, c)?)))
                            .flatten(),
                    })
            };
            let goodputs: Vec<(Config, f64, BatchPlan)> =
                job_configurations(elastic, job, &configs, input.capacity, limit)
                    .into_iter()
                    .filter_map(|c| {
                        let (goodput, _) = best(c, priced_up_to)?;
                        let (_, plan) = best(c, batch_range(job, app).1)?;
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
            let moved = restart.powf(settings.restart_exponent) * (1.0 - settings.move_margin);
            // A job still paying its restart delay keeps its configuration.
            let pinned = view.running.is_some_and(|r| r.restarting);
            let mut row = Vec::new();
            let mut kept = None;
            let mut choices = Choices {
                options: Vec::new(),
                left_out: (!pinned).then_some(settings.left_out),
            };
            for (config, goodput, plan) in goodputs {
                if pinned && Some(config) != current {
                    continue;
                }
                let mut normalized = goodput / smallest;
                if previous == Some(config) {
                    kept = Some(row.len());
                } else if previous.is_some() {
                    normalized *= moved;
                }
                // A discounted (or tiny) goodput can cost more than leaving the job out.
                choices.options.push(Candidate {
                    gpu_type: config.gpu_type,
                    gpus: config.gpus,
                    cost: normalized.max(1e-4).powf(settings.power),
                });
                row.push((config, plan));
            }
            if row.is_empty() {
                continue;
            }
            program.push(choices);
            last.push(kept);
            rows.push((job.id, row));
        }
        let mut picked = match pick_near(&program, input.capacity, &last) {
            Ok(picked) => picked,
            Err(e) => {
                // Running jobs keep what they hold rather than all being stopped; waiting ones wait.
                tracing::warn!(error = %e, jobs = input.jobs.len(), "Sia's program failed; running jobs keep their GPUs this round");
                return super::keep_running(input);
            }
        };
        let ids: Vec<JobId> = rows.iter().map(|(job, _)| *job).collect();
        super::fit::make_placeable(input, &ids, &program, &mut picked, |t| elastic.node_size(t));
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

/// The `learned` knob, shared with the policies that run this program.
pub const LEARNED: Knob = Knob {
    name: "learned",
    default: 0.0,
    range: KnobRange::Flag,
    help: "1: learn each job's throughputs from its runs and bootstrap the GPU types it has not run on, as Sia does; 0: read them from the profiles (an oracle)",
};

/// Enters this module's policies (the same call a user's policy is entered by).
pub(super) fn register(registry: &mut Registry) -> Result<(), RegistryError> {
    registry.register(
        PolicyEntry::new("sia", |config| {
            Box::new(Sia::with(Settings {
                learns: config.knob("learned") == 1.0,
                ..Settings::SIA
            }))
        })
        .summary(
            "Sia: one MILP per round picks each job's GPU type, count and batch by \
             normalized goodput (p = -0.5), with restart factors (goodput workloads)",
        )
        .knob(LEARNED)
        .needs(Needs::GOODPUT.and(Needs::LP_SOLVER)),
    )?;
    Ok(())
}

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

    /// One application profiled on one GPU of two types, type 1 twice as fast as type 0 (and on two
    /// GPUs, a quarter as fast as on one).
    struct TwoTypes {
        app: Application,
    }

    impl TwoTypes {
        fn new() -> TwoTypes {
            use crate::throughput::goodput::profiles::{GradStats, Step, placement_id};
            // One GPU, and a replica of a two-stage pipeline on two GPUs of type 0.
            let step = |step_time| {
                vec![Step {
                    local_bsz: 32.0,
                    step_time,
                    sync_time: 0.0,
                }]
            };
            let one_gpu = |step_time: f64| TypeProfile {
                placements: [
                    (placement_id(&[1]), step(step_time)),
                    (placement_id(&[2]), step(4.0 * step_time)),
                ]
                .into(),
                min_local: 8,
                max_local: 64,
                ..TypeProfile::default()
            };
            let stats = GradStats {
                sqr: 1.0,
                var: 4.0,
                iteration: 100.0,
            };
            TwoTypes {
                app: Application {
                    name: "app".into(),
                    init_batch: 32,
                    max_batch: 256,
                    epoch_end: vec![1000.0],
                    validation: [(32, vec![stats]), (256, vec![stats])].into(),
                    types: [("a".into(), one_gpu(0.2)), ("b".into(), one_gpu(0.1))].into(),
                    fixed_batch: None,
                },
            }
        }
    }

    impl Elastic for TwoTypes {
        fn application(&self, _: &Job) -> Option<&Application> {
            Some(&self.app)
        }
        fn profile(&self, _: &Job, gpu_type: GpuTypeId) -> Option<&TypeProfile> {
            self.app.types.get(["a", "b"][gpu_type.0 as usize])
        }
        fn measure(&self, _: &Job, _: GpuTypeId, _: &[u32], _: f64) -> Option<(f64, f64)> {
            None
        }
        fn node_size(&self, _: GpuTypeId) -> u32 {
            4
        }
        fn restart_penalty(&self, _: &Job) -> f64 {
            30.0
        }
    }

    #[test]
    fn a_type_a_job_has_not_run_on_is_bootstrapped_from_one_it_has() {
        use crate::throughput::goodput::Observation;
        let elastic = TwoTypes::new();
        let job = one_job();
        let mut learned = learned_on_type_0(1, 0.0);
        let config = |t: u16, gpus: u32| Config {
            gpu_type: GpuTypeId(t),
            gpus,
            nodes: 1,
        };
        for gpus in [1, 2, 4] {
            let on_a = learned_goodput(&elastic, &job, &learned, config(0, gpus), 256).unwrap();
            let on_b = learned_goodput(&elastic, &job, &learned, config(1, gpus), 256).unwrap();
            // thr(N, b) = thr(1, b) / thr(1, a) x thr(N, a), and one GPU of b is twice one of a.
            assert!(
                (on_b.0 / on_a.0 - 2.0).abs() < 1e-9,
                "{gpus}: {on_a:?} {on_b:?}"
            );
        }
        // Once it has run on b, b's own model stands.
        learned.observe(
            1,
            Observation {
                nodes: 1,
                replicas: 1,
                local: 32.0,
                step_time: 0.3,
                sync_time: 0.0,
            },
        );
        let on_a = learned_goodput(&elastic, &job, &learned, config(0, 1), 256).unwrap();
        let on_b = learned_goodput(&elastic, &job, &learned, config(1, 1), 256).unwrap();
        assert!(on_b.0 < on_a.0, "b measured slower: {on_a:?} {on_b:?}");
    }

    #[test]
    fn a_pipeline_is_bootstrapped_replica_for_replica_with_each_types_own_stages() {
        let elastic = TwoTypes::new();
        // Two stages on type 0 (its GPUs are small), one on type 1.
        let job = Job {
            group_by_type: vec![2, 1],
            sizes: Some(crate::job::Sizes {
                min: 1,
                max: 8,
                multiple: 1,
            }),
            ..one_job()
        };
        // One pipeline replica, on two GPUs of type 0.
        let learned = learned_on_type_0(1, 0.0);
        let config = |t: u16, gpus: u32| Config {
            gpu_type: GpuTypeId(t),
            gpus,
            nodes: 1,
        };
        for replicas in [1, 2] {
            let on_a = learned_goodput(&elastic, &job, &learned, config(0, 2 * replicas), 256);
            let on_b = learned_goodput(&elastic, &job, &learned, config(1, replicas), 256);
            let (on_a, on_b) = (on_a.unwrap(), on_b.unwrap());
            // The same replicas: one replica of b (32 / 0.1 samples/s) is 8 times one of a's
            // two-GPU pipelines (32 / 0.8).
            assert!(
                (on_b.0 / on_a.0 - 8.0).abs() < 1e-9,
                "{replicas}: {on_a:?} {on_b:?}"
            );
            assert_eq!(on_a.1, on_b.1, "the same batch plan per replica");
        }
        // Its configurations: whole pipelines on type 0, any count on type 1.
        let configs = configurations(&elastic, &[8, 8]);
        let shown: Vec<(u16, u32)> = job_configurations(&elastic, &job, &configs, &[8, 8], 8)
            .iter()
            .map(|c| (c.gpu_type.0, c.gpus))
            .collect();
        assert_eq!(
            shown,
            [(0, 2), (0, 4), (0, 8), (1, 1), (1, 2), (1, 4), (1, 8)]
        );
    }

    /// What a job measured on type 0, with `replicas` replicas on one node, at per-replica batches
    /// 16 and 32 (a step of `0.05 + 0.005 x local` seconds, `sync` of them synchronizing).
    fn learned_on_type_0(replicas: u32, sync: f64) -> Learned {
        use crate::throughput::goodput::Observation;
        let mut learned = Learned::default();
        learned.grad = Some((1.0, 4.0));
        for local in [16.0, 32.0] {
            let observation = Observation {
                nodes: 1,
                replicas,
                local,
                step_time: 0.05 + local * 0.005,
                sync_time: sync,
            };
            learned.observe(0, observation);
        }
        learned
    }

    /// A one-GPU trace job of the test application.
    fn one_job() -> Job {
        Job::new(JobId(0), 0.0, 1, 1000.0)
    }

    #[test]
    fn a_job_that_adapts_its_batch_is_planned_within_its_range() {
        let elastic = TwoTypes::new();
        let learned = learned_on_type_0(2, 0.01);
        let config = Config {
            gpu_type: GpuTypeId(0),
            gpus: 2,
            nodes: 1,
        };
        let job = |min_batch: u32, batch: u32| {
            Job::new(JobId(0), 0.0, 2, 1000.0)
                .with_batch(batch)
                .with_min_batch(min_batch)
        };
        // The application's range is 32..=256; each of these is narrower.
        for (min, max) in [(34, 40), (100, 120), (200, 256)] {
            let job = job(min, max);
            let fitted = learned_plan(&elastic, &job, Some(&learned), config).unwrap();
            // Two replicas round an odd batch up by one.
            assert!(
                (min..=max + 1).contains(&fitted.global(2)),
                "{min}:{max}: {fitted:?}"
            );
            let (_, priced) = learned_goodput(&elastic, &job, &learned, config, max).unwrap();
            assert!((min..=max + 1).contains(&priced.global(2)), "{priced:?}");
            // Before it has run: the least of its range.
            let first = learned_plan(&elastic, &job, None, config).unwrap();
            assert_eq!(first.global(2), min, "{first:?}");
        }
        // A range past the application's largest batch (256) is capped there: the profile says
        // nothing beyond it.
        let greedy = job(100, 1 << 20);
        let fitted = learned_plan(&elastic, &greedy, Some(&learned), config).unwrap();
        assert!((100..=257).contains(&fitted.global(2)), "{fitted:?}");
    }

    #[test]
    fn a_job_with_sizes_is_configured_only_on_them() {
        let configs = configurations(&Servers, &[24, 16]);
        let job = |sizes| Job {
            sizes,
            ..Job::new(JobId(0), 0.0, 3, 1000.0)
        };
        let shown = |job: &Job, limit| -> Vec<(u16, u32, u32)> {
            job_configurations(&Servers, job, &configs, &[24, 16], limit)
                .iter()
                .map(|c| (c.gpu_type.0, c.gpus, c.nodes))
                .collect()
        };
        // Rigid on 3: one server of either type, whatever the limit.
        let rigid = job(Some(crate::job::Sizes::rigid(3)));
        assert_eq!(shown(&rigid, 1), [(0, 3, 1), (1, 3, 1)]);
        // Tensor-parallel pairs, up to 12 GPUs: even sizes; 12 spans three 4-GPU servers.
        let pairs = job(Some(crate::job::Sizes {
            min: 1,
            max: 12,
            multiple: 2,
        }));
        assert_eq!(shown(&pairs, 1), [(0, 2, 1), (1, 2, 1)]);
        assert_eq!(
            shown(&pairs, 16),
            [
                (0, 2, 1),
                (0, 4, 1),
                (0, 8, 2),
                (0, 12, 3),
                (1, 2, 1),
                (1, 4, 1),
                (1, 8, 1)
            ]
        );
        // A trace job, as before: every configuration up to its limit.
        assert_eq!(
            shown(&job(None), 2),
            [(0, 1, 1), (0, 2, 1), (1, 1, 1), (1, 2, 1)]
        );
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
