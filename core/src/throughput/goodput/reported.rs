//! A goodput model for live jobs: the profiles predict, and what each job's workers reported is the
//! truth. The control plane keeps each job's measurements in [`Reports`] (fitted and journaled as it
//! goes); [`Reported`] answers [`Elastic::observe`] from them, and everything else from the model it
//! wraps, so that the policies that learn (Pollux, `sia:learned=1`) learn from real steps.

use std::sync::{Arc, PoisonError, RwLock};

use super::{Application, Elastic, Learned, Observed, TypeProfile};
use crate::cluster::GpuTypeId;
use crate::job::{IdMap, Job, JobId};
use crate::throughput::resources::ResourceAware;
use crate::throughput::{RunShape, Segment, ThroughputModel};

/// What each live job's workers have measured, shared between the control plane, which writes it
/// as reports arrive, and the model its policy reads.
#[derive(Clone, Debug, Default)]
pub struct Reports(Arc<RwLock<Measurements>>);

#[derive(Debug, Default)]
struct Measurements {
    learned: IdMap<JobId, Learned>,
    /// Seconds its last restart took, from the decision to its first step after.
    restart_seconds: IdMap<JobId, f64>,
}

impl Reports {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Measurements> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Measurements> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// `job`'s measurements are now `learned`.
    pub fn set(&self, job: JobId, learned: Learned) {
        self.write().learned.insert(job, learned);
    }

    /// `job`'s last restart took `seconds`.
    pub fn restarted(&self, job: JobId, seconds: f64) {
        self.write().restart_seconds.insert(job, seconds);
    }

    /// `job` has ended: its measurements go.
    pub fn forget(&self, job: JobId) {
        let mut measurements = self.write();
        measurements.learned.remove(&job);
        measurements.restart_seconds.remove(&job);
    }

    /// Seconds `job`'s last restart took, once one was measured.
    pub fn restart_seconds(&self, job: JobId) -> Option<f64> {
        self.read().restart_seconds.get(&job).copied()
    }

    /// What `job` has measured, as a policy learns it: every configuration on every GPU type, and
    /// its gradient statistics once its workers estimated them.
    pub fn observed(&self, job: JobId) -> Option<Observed> {
        let reports = self.read();
        let learned = reports.learned.get(&job)?;
        Some(Observed {
            observations: learned
                .observations()
                .map(|(t, &o)| (GpuTypeId(t), o))
                .collect(),
            grad: learned.grad,
        })
    }
}

/// `M` with its measurements replaced by what workers reported. Before a job's workers report, it
/// has measured nothing; until they estimate its gradient noise, `M`'s statistics stand in; until it
/// has restarted once, `M`'s restart penalty does.
pub struct Reported<M> {
    model: M,
    reports: Reports,
}

impl<M> Reported<M> {
    /// `model`, corrected by what workers report into `reports`.
    pub fn new(model: M, reports: Reports) -> Self {
        Reported { model, reports }
    }
}

impl<M: ThroughputModel + Elastic> ThroughputModel for Reported<M> {
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        self.model.steps_per_second(job, gpu_type, gpus)
    }

    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        self.model.packed_steps_per_second(a, b, gpu_type, gpus)
    }

    fn run_rate(&self, job: &Job, shape: &RunShape<'_>, steps_done: f64) -> Option<Segment> {
        self.model.run_rate(job, shape, steps_done)
    }

    fn rate_follows_run(&self) -> bool {
        self.model.rate_follows_run()
    }

    fn restart_seconds(&self, job: &Job) -> f64 {
        self.model.restart_seconds(job)
    }

    fn elastic(&self) -> Option<&dyn Elastic> {
        Some(self)
    }

    fn resources(&self) -> Option<&dyn ResourceAware> {
        self.model.resources()
    }
}

impl<M: Elastic> Elastic for Reported<M> {
    fn application(&self, job: &Job) -> Option<&Application> {
        self.model.application(job)
    }

    fn profile(&self, job: &Job, gpu_type: GpuTypeId) -> Option<&TypeProfile> {
        self.model.profile(job, gpu_type)
    }

    fn measure(
        &self,
        job: &Job,
        gpu_type: GpuTypeId,
        placement: &[u32],
        local: f64,
    ) -> Option<(f64, f64)> {
        self.model.measure(job, gpu_type, placement, local)
    }

    fn measurer<'a>(
        &'a self,
        job: &'a Job,
        gpu_type: GpuTypeId,
        placement: &'a [u32],
    ) -> Box<dyn Fn(f64) -> Option<(f64, f64)> + 'a> {
        self.model.measurer(job, gpu_type, placement)
    }

    fn node_size(&self, gpu_type: GpuTypeId) -> u32 {
        self.model.node_size(gpu_type)
    }

    /// What its last restart measured, once it has restarted; the model's reckoning before.
    fn restart_penalty(&self, job: &Job) -> f64 {
        self.reports
            .restart_seconds(job.id)
            .unwrap_or_else(|| self.model.restart_penalty(job))
    }

    fn observe(&self, job: &Job, run: &RunShape<'_>, steps_done: f64) -> Option<Observed> {
        let mut observed = self.reports.observed(job.id)?;
        if observed.grad.is_none() {
            observed.grad = self
                .model
                .observe(job, run, steps_done)
                .and_then(|predicted| predicted.grad);
        }
        Some(observed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::throughput::goodput::Observation;

    /// A model whose runs measure one fixed step and gradient statistics `(1, 2)`.
    struct Predicts;

    const PREDICTED: Observation = Observation {
        nodes: 1,
        replicas: 1,
        local: 32.0,
        step_time: 1.0,
        sync_time: 0.0,
    };

    impl ThroughputModel for Predicts {
        fn steps_per_second(&self, _: &Job, _: GpuTypeId, _: u32) -> Option<f64> {
            Some(1.0)
        }
    }

    impl Elastic for Predicts {
        fn application(&self, _: &Job) -> Option<&Application> {
            None
        }
        fn profile(&self, _: &Job, _: GpuTypeId) -> Option<&TypeProfile> {
            None
        }
        fn measure(&self, _: &Job, _: GpuTypeId, _: &[u32], _: f64) -> Option<(f64, f64)> {
            Some((1.0, 0.0))
        }
        fn node_size(&self, _: GpuTypeId) -> u32 {
            4
        }
        fn restart_penalty(&self, _: &Job) -> f64 {
            30.0
        }
        fn observe(&self, _: &Job, run: &RunShape<'_>, _: f64) -> Option<Observed> {
            Some(Observed {
                observations: vec![(run.gpu_type, PREDICTED)],
                grad: Some((1.0, 2.0)),
            })
        }
    }

    #[test]
    fn what_workers_reported_replaces_the_models_measurements() {
        let reports = Reports::default();
        let model = Reported::new(Predicts, reports.clone());
        let job = Job::new(JobId(3), 0.0, 2, 1.0);
        let run = RunShape {
            gpu_type: GpuTypeId(1),
            placement: &[2],
            batch: None,
            allotment: None,
        };
        // Nothing reported yet: nothing measured, whatever the model would say.
        assert_eq!(model.observe(&job, &run, 0.0), None);
        assert_eq!(model.restart_penalty(&job), 30.0);

        let measured = Observation {
            nodes: 1,
            replicas: 2,
            local: 8.0,
            step_time: 0.25,
            sync_time: 0.05,
        };
        let mut learned = Learned::default();
        learned.observe(1, measured);
        reports.set(job.id, learned.clone());
        reports.restarted(job.id, 7.5);
        // The report stands; the model's gradient statistics fill in until the workers estimate them.
        assert_eq!(
            model.observe(&job, &run, 0.0),
            Some(Observed {
                observations: vec![(GpuTypeId(1), measured)],
                grad: Some((1.0, 2.0)),
            })
        );
        assert_eq!(model.restart_penalty(&job), 7.5);
        learned.grad = Some((3.0, 4.0));
        reports.set(job.id, learned);
        assert_eq!(
            model.observe(&job, &run, 0.0).unwrap().grad,
            Some((3.0, 4.0))
        );

        reports.forget(job.id);
        assert_eq!(model.observe(&job, &run, 0.0), None);
        assert_eq!(model.restart_penalty(&job), 30.0);
    }
}
