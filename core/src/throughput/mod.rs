//! Throughput models: how fast a job runs on a given number of GPUs of a given type.
//!
//! Work is counted in steps (see [`crate::job::WorkUnit`]); a model turns an allocation into steps per
//! second. Two models ship here:
//! - [`TableModel`]: Gavel's measured table, per job type, scale factor and GPU type, with the
//!   space-sharing pair entries kept for packing policies;
//! - [`DurationModel`]: for traces that give only durations, every GPU type runs a job at one
//!   "second of work" per second at its requested size;
//! - [`goodput::ProfiledWorkload`]: elastic jobs (Pollux's and Sia's workloads) whose rate follows
//!   their epochs, placement and batch, with restart delays;
//! - [`resources::ResourceModel`]: wraps any of these, scaling a run's rate by the CPUs and memory it
//!   is allotted (Synergy's profiles).

pub mod goodput;
pub mod locality;
pub mod resources;
mod table;

pub use goodput::BatchPlan;
pub use table::{TableModel, ThroughputTable};

use crate::cluster::GpuTypeId;
use crate::job::Job;
use crate::resources::Allotment;

/// The shape of a run, for models whose rate depends on more than a GPU count.
#[derive(Clone, Copy, Debug)]
pub struct RunShape<'a> {
    /// The GPU type it runs on.
    pub gpu_type: GpuTypeId,
    /// GPUs per server, in server order.
    pub placement: &'a [u32],
    /// The batch plan a policy chose; `None`: the job's own.
    pub batch: Option<BatchPlan>,
    /// CPUs and memory per GPU; `None`: the servers' GPU-proportional share.
    pub allotment: Option<Allotment>,
}

pub use gangway_protocol::worker::Segment;

/// How fast jobs run. The simulator asks once per job and GPU type and caches the answer.
pub trait ThroughputModel: Send + Sync {
    /// Steps per second of `job` alone on `gpus` GPUs of `gpu_type`; `None` where it cannot run there.
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64>;

    /// Steps per second of `a` and of `b` when packed together on the same `gpus` GPUs of `gpu_type`
    /// (space sharing); `None` where the model does not know, which forbids packing them there.
    fn packed_steps_per_second(
        &self,
        _a: &Job,
        _b: &Job,
        _gpu_type: GpuTypeId,
        _gpus: u32,
    ) -> Option<(f64, f64)> {
        None
    }

    /// The rate of a run of `job` shaped as `shape`, from `steps_done` on, and how far it holds: for
    /// models whose rate changes as a job progresses (its epochs) or with its placement and batch. The
    /// default is [`ThroughputModel::steps_per_second`] on the shape's GPUs, for good.
    fn run_rate(&self, job: &Job, shape: &RunShape<'_>, _steps_done: f64) -> Option<Segment> {
        let gpus = shape.placement.iter().sum();
        self.steps_per_second(job, shape.gpu_type, gpus)
            .map(|rate| Segment {
                rate,
                until: f64::INFINITY,
            })
    }

    /// Whether [`ThroughputModel::run_rate`] says more than [`ThroughputModel::steps_per_second`] on the
    /// run's GPU count (it follows placement, batch, CPUs and memory, or progress). Where it does not,
    /// the engine starts runs at the rates it caches per job and type. A model that overrides
    /// `run_rate` says true.
    fn rate_follows_run(&self) -> bool {
        false
    }

    /// Seconds of no progress every (re)start of `job` costs (a restart delay); 0 by default, where the
    /// engine's preemption and migration costs stand instead.
    fn restart_seconds(&self, _job: &Job) -> f64 {
        0.0
    }

    /// Goodput queries, for models of elastic jobs.
    fn elastic(&self) -> Option<&dyn goodput::Elastic> {
        None
    }

    /// CPU and memory sensitivity, for models whose rate follows a run's allotment.
    fn resources(&self) -> Option<&dyn resources::ResourceAware> {
        None
    }
}

/// A borrowed model is a model, so that a driver can hold either a borrowed or an owned one.
impl<T: ThroughputModel + ?Sized> ThroughputModel for &T {
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        (**self).steps_per_second(job, gpu_type, gpus)
    }

    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        (**self).packed_steps_per_second(a, b, gpu_type, gpus)
    }

    fn run_rate(&self, job: &Job, shape: &RunShape<'_>, steps_done: f64) -> Option<Segment> {
        (**self).run_rate(job, shape, steps_done)
    }

    fn rate_follows_run(&self) -> bool {
        (**self).rate_follows_run()
    }

    fn restart_seconds(&self, job: &Job) -> f64 {
        (**self).restart_seconds(job)
    }

    fn elastic(&self) -> Option<&dyn goodput::Elastic> {
        (**self).elastic()
    }

    fn resources(&self) -> Option<&dyn resources::ResourceAware> {
        (**self).resources()
    }
}

/// Duration-only traces: one unit of work per second on any GPU type, scaled by an optional per-type speed.
#[derive(Clone, Debug)]
pub struct DurationModel {
    speed: Vec<f64>,
}

impl DurationModel {
    /// Every type runs at the speed the trace's durations were measured at.
    pub fn uniform(num_gpu_types: usize) -> Self {
        DurationModel {
            speed: vec![1.0; num_gpu_types],
        }
    }
}

impl ThroughputModel for DurationModel {
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        // A duration is measured at the job's requested gang; other sizes are not modelled here.
        (gpus == job.gpus)
            .then(|| self.speed.get(gpu_type.0 as usize).copied())
            .flatten()
    }
}
