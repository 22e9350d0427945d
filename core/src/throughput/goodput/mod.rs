//! Goodput: what a deep-learning job gains from more GPUs or a larger batch (Pollux, Qiao et al.,
//! OSDI'21; Sia, Jayaram Subramanya et al., SOSP'23).
//!
//! - [`profiles`]: measured step times per placement and batch on each GPU type, and gradient
//!   statistics per epoch and batch size, from the peers' published profiles.
//! - [`perf`]: Pollux's step-time model and its fit to measured steps.
//! - goodput = throughput x statistical efficiency, and the batch size and accumulation that maximize it
//!   for an allocation ([`optimize`]);
//! - [`learned`]: what a scheduler knows of one job: the steps it has measured, per GPU type, the models
//!   fitted to them, and estimates for types it has not run on at scale (Sia's bootstrapping).
//! - [`workload`]: the simulated truth, a [`crate::throughput::ThroughputModel`] whose rate follows a
//!   job's epochs, placement and batch, with restart delays.
//!
//! Progress is counted in iterations at the application's initial batch size M0, so that work is the same
//! whatever batch size a job runs with; a larger batch makes more progress per step, by Pollux's gain.

pub mod learned;
pub mod perf;
pub mod profiles;
pub mod reported;
pub mod workload;

use serde::{Deserialize, Serialize};

use crate::cluster::GpuTypeId;
use crate::job::Job;

pub use learned::Learned;
pub use perf::{Observation, PerfParams};
pub use profiles::{Application, Profiles, TypeProfile};
pub use reported::{Reported, Reports};
pub use workload::{Calibration, ProfiledWorkload};

/// How a job's global batch is split for a run: the per-replica (micro-)batch, and the extra
/// gradient-accumulation micro-steps per optimizer step. The global batch is
/// `replicas * local * (accum + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BatchPlan {
    /// Samples per replica per micro-step.
    pub local: u32,
    /// Extra micro-steps per optimizer step, accumulating gradients before they are synchronized
    /// (0: none).
    pub accum: u32,
}

impl BatchPlan {
    /// The global batch on `replicas` replicas.
    pub fn global(&self, replicas: u32) -> u32 {
        replicas * self.local * (self.accum + 1)
    }

    /// A fixed global batch `batch` split over `replicas` (Pollux's simulator's rule): the per-replica
    /// share, accumulated when it exceeds `max_local` (and, on one replica above M0, at least once, to
    /// measure gradient noise), capped so that the global batch stays within `max_batch`.
    pub fn split(batch: u32, replicas: u32, app: &Application, max_local: u32) -> BatchPlan {
        let replicas = replicas.max(1);
        let local = (f64::from(batch) / f64::from(replicas) - 1e-8)
            .ceil()
            .max(1.0);
        let mut accum = ((local / f64::from(max_local.max(1)) - 1e-8).ceil() - 1.0).max(0.0) as u32;
        if replicas == 1 && batch > app.init_batch {
            accum = accum.max(1);
        }
        let mut per = (local / f64::from(accum + 1) - 1e-8).ceil().max(1.0) as u32;
        let cap = app.max_batch / (replicas * (accum + 1));
        if cap > 0 {
            per = per.min(cap);
        }
        BatchPlan { local: per, accum }
    }
}

/// Goodput (progress per second, in iterations at M0) of `plan` on `nodes` nodes with `replicas`
/// replicas, predicted by `params` with gradient statistics `(sqr, var)`.
pub fn goodput(
    params: &PerfParams,
    app: &Application,
    grad: (f64, f64),
    nodes: u32,
    replicas: u32,
    plan: BatchPlan,
) -> f64 {
    let batch = f64::from(plan.global(replicas));
    let scale = batch / f64::from(app.init_batch);
    let seconds = params.step_time(nodes, replicas, f64::from(plan.local), plan.accum);
    profiles::gain(grad.0, grad.1, scale) / seconds
}

/// Whole servers of `node_size` GPUs first, then the rest on one more: the placement (GPUs per server)
/// a gang of `gpus` packs into.
pub fn packed_placement(node_size: u32, gpus: u32) -> Vec<u32> {
    let size = node_size.max(1);
    let mut placement = vec![size; (gpus / size) as usize];
    if !gpus.is_multiple_of(size) {
        placement.push(gpus % size);
    }
    placement
}

/// Candidate global batch sizes Pollux and Sia search: 50, geometrically spaced.
const CANDIDATES: usize = 50;

/// The global batches a goodput policy may run `job` of `app` with: the range the job declared
/// (`min_batch..=batch`, a job that adapts its batch), else the application's, from its initial batch
/// M0 up to its largest (the peers' rule). A declared range goes no higher than the application's
/// largest: the profile says nothing beyond it, and a submitter must not buy GPUs with batches the
/// model can only extrapolate to.
pub fn batch_range(job: &Job, app: &Application) -> (u32, u32) {
    match (job.min_batch, job.batch) {
        (Some(min), Some(max)) => (min.min(app.max_batch), max.min(app.max_batch)),
        _ => (app.init_batch, app.max_batch),
    }
}

/// Pollux's and Sia's batch search on `replicas` replicas: 50 global batches from
/// `max(least, min_local * replicas)` up to `most` (only the first, when `most` is below it), for
/// `batches = (least, most)` (see [`batch_range`]), each split with as little accumulation as fits
/// (and, on one replica above M0, at least one step), per replica within `local_range`. Returns the
/// best plan by `goodput_of` (`None` where a plan cannot run), with its goodput.
pub fn search_batch(
    app: &Application,
    replicas: u32,
    batches: (u32, u32),
    local_range: (u32, u32),
    mut goodput_of: impl FnMut(BatchPlan) -> Option<f64>,
) -> Option<(f64, BatchPlan)> {
    let (min_local, max_local) = local_range;
    let r = f64::from(replicas.max(1));
    let lo = f64::from(batches.0).max(f64::from(min_local) * r);
    let hi = f64::from(batches.1).max(lo);
    let mut best: Option<(f64, BatchPlan)> = None;
    for k in 0..CANDIDATES {
        let batch = lo * (hi / lo).powf(k as f64 / (CANDIDATES - 1) as f64);
        let local = batch / r;
        let mut accum = ((local / f64::from(max_local.max(1)) - 1e-8).ceil() - 1.0).max(0.0) as u32;
        if replicas == 1 && local > f64::from(app.init_batch) + 1e-8 {
            accum = accum.max(1);
        }
        let per = (local / f64::from(accum + 1) - 1e-8).ceil() as u32;
        if per < min_local || per > max_local {
            continue;
        }
        let plan = BatchPlan { local: per, accum };
        let Some(value) = goodput_of(plan) else {
            continue;
        };
        if value.is_finite() && best.is_none_or(|(b, _)| value > b) {
            best = Some((value, plan));
        }
    }
    best
}

/// The batch plan that maximizes goodput predicted by `params` on `nodes` nodes with `replicas`
/// replicas, over global `batches` (see [`search_batch`]). `None` when no batch fits.
pub fn optimize(
    params: &PerfParams,
    app: &Application,
    grad: (f64, f64),
    nodes: u32,
    replicas: u32,
    batches: (u32, u32),
    local_range: (u32, u32),
) -> Option<(f64, BatchPlan)> {
    search_batch(app, replicas, batches, local_range, |plan| {
        Some(goodput(params, app, grad, nodes, replicas, plan))
    })
}

/// Pollux's restart factor: the share of a job's life it would have spent training had it paid every
/// restart so far plus one more, `max(age - restarts * penalty, 0) / (age + penalty)`. Policies scale
/// the goodput of a configuration other than a job's current one by it, so that jobs that have
/// restarted often, or just arrived, are moved less.
pub fn restart_factor(age: f64, penalty: f64, restarts: u32) -> f64 {
    (age - f64::from(restarts) * penalty).max(0.0) / (age + penalty).max(f64::MIN_POSITIVE)
}

/// What goodput-aware policies ask of a throughput model, beyond rates: a job's application, and what a
/// run of it measures (in simulation the profiles' truth; live, the workers' reports).
pub trait Elastic: Send + Sync {
    /// The application `job` runs, when it is one the model knows.
    fn application(&self, job: &Job) -> Option<&Application>;

    /// The application's step-time profile on `gpu_type`, when it has one.
    fn profile(&self, job: &Job, gpu_type: GpuTypeId) -> Option<&TypeProfile>;

    /// The step and synchronization seconds a run of `job` on `placement` (GPUs per node) of
    /// `gpu_type` measures at per-replica batch `local`.
    fn measure(
        &self,
        job: &Job,
        gpu_type: GpuTypeId,
        placement: &[u32],
        local: f64,
    ) -> Option<(f64, f64)>;

    /// [`Elastic::measure`] of one `placement` of `gpu_type` at any per-replica batch, for a search
    /// over batches: a model may look the job's profile and the placement up once. By default each
    /// batch goes through [`Elastic::measure`].
    fn measurer<'a>(
        &'a self,
        job: &'a Job,
        gpu_type: GpuTypeId,
        placement: &'a [u32],
    ) -> Box<dyn Fn(f64) -> Option<(f64, f64)> + 'a> {
        Box::new(move |local| self.measure(job, gpu_type, placement, local))
    }

    /// GPUs per server of `gpu_type`.
    fn node_size(&self, gpu_type: GpuTypeId) -> u32;

    /// Seconds a (re)start of `job` costs, as a policy reckons it (its restart factor).
    fn restart_penalty(&self, job: &Job) -> f64;

    /// What a run of `job` shaped as `run`, `steps_done` into the job, has measured: its
    /// observations by GPU type and its gradient statistics, for the policies that learn. By
    /// default the simulated truth: [`Elastic::measure`] of the run at its batch plan, and the
    /// application's statistics at that batch and epoch. A live model answers with what the job's
    /// workers reported ([`Reported`]).
    fn observe(
        &self,
        job: &Job,
        run: &crate::throughput::RunShape<'_>,
        steps_done: f64,
    ) -> Option<Observed> {
        let app = self.application(job)?;
        let plan = run.batch?;
        let local = f64::from(plan.local);
        let (step_time, sync_time) = self.measure(job, run.gpu_type, run.placement, local)?;
        let replicas = job.replicas_on(run.gpu_type, run.placement.iter().sum());
        let (epoch, _) = app.epoch_at(steps_done);
        Some(Observed {
            observations: vec![(
                run.gpu_type,
                Observation {
                    nodes: run.placement.len() as u32,
                    replicas,
                    local,
                    step_time,
                    sync_time,
                },
            )],
            grad: Some(app.grad_stats(f64::from(plan.global(replicas)), epoch)),
        })
    }
}

/// What a job has measured: step times by GPU type (of its current configuration, or of every one
/// it has run), and its gradient statistics `(sqr, var)` when it knows them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// Measured steps, each with the GPU type it ran on.
    pub observations: Vec<(GpuTypeId, Observation)>,
    /// Gradient statistics `(sqr, var)` at its current batch and epoch, when measured.
    pub grad: Option<(f64, f64)>,
}
