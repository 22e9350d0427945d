//! Throughput models: how fast a job runs on a given number of GPUs of a given type.
//!
//! Work is counted in steps (see [`crate::job::WorkUnit`]); a model turns an allocation into steps per
//! second. Two models ship here:
//! - [`TableModel`]: Gavel's measured table, per job type, scale factor and GPU type, with the
//!   space-sharing pair entries kept for packing policies;
//! - [`DurationModel`]: for traces that give only durations, every GPU type runs a job at one
//!   "second of work" per second at its requested size.

pub mod locality;
mod table;

pub use table::{TableModel, ThroughputTable};

use crate::cluster::GpuTypeId;
use crate::job::Job;

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
