//! Resource-sensitive throughput (Synergy, Mohan et al., OSDI'22): how fast a job runs on the CPUs and
//! memory it is allotted beside its GPUs.
//!
//! [`ResourceModel`] wraps any other model: the inner model gives a job's rate at the GPU-proportional
//! share of Synergy's servers (3 CPUs and 62.5 GB per GPU), and the job's profile scales it by the speed
//! its allotment reaches, interpolated between the profile's grid points ([`profiles`]). Jobs of types
//! with no profile run as the inner model says, whatever they are allotted. Mechanisms that size
//! allotments (`policy::resourced`) ask it through [`ResourceAware`].

pub mod profiles;

use std::sync::Arc;

use crate::cluster::{Cluster, GpuTypeId};
use crate::job::{Job, Names};
use crate::resources::Allotment;
use crate::throughput::{RunShape, Segment, ThroughputModel, goodput};

pub use profiles::{CPU_AXIS, MEMORY_AXIS, ResourceProfile, ResourceProfiles};

/// What a mechanism that sizes CPUs and memory needs to know of a job.
pub trait ResourceAware: Send + Sync {
    /// The job's speed at `allotment` per GPU, relative to its speed at the proportional share of
    /// Synergy's servers (1 for jobs without a profile).
    fn speed(&self, job: &Job, allotment: &Allotment) -> f64;

    /// Its best case per GPU: the fewest CPUs and memory at which it reaches its top speed; `None` for
    /// jobs without a profile (they run at their servers' share).
    fn best(&self, job: &Job) -> Option<Allotment>;

    /// The points per GPU a mechanism may choose from, with the speed at each (the profile's grid);
    /// empty for jobs without a profile.
    fn points(&self, job: &Job) -> Vec<(Allotment, f64)>;
}

/// A model whose rates follow the CPUs and memory a run is allotted.
pub struct ResourceModel<M> {
    inner: M,
    profiles: Arc<ResourceProfiles>,
    /// Per job type id: its profile.
    of_type: Vec<Option<usize>>,
    /// Per GPU type: the share of its first server, what a run without an allotment gets.
    shares: Vec<Allotment>,
}

impl<M: ThroughputModel> ResourceModel<M> {
    /// Wraps `inner` for jobs named by `names`, on `cluster`.
    pub fn new(
        inner: M,
        profiles: Arc<ResourceProfiles>,
        names: &Names,
        cluster: &Cluster,
    ) -> Self {
        let shares = (0..cluster.num_gpu_types())
            .map(|t| {
                cluster
                    .nodes()
                    .iter()
                    .find(|n| n.gpu_type.0 as usize == t)
                    .map_or(Allotment::new(3.0, 62.5), Allotment::share)
            })
            .collect();
        ResourceModel {
            of_type: names.job_types.iter().map(|t| profiles.find(t)).collect(),
            inner,
            profiles,
            shares,
        }
    }

    fn profile(&self, job: &Job) -> Option<&ResourceProfile> {
        let index = (*self.of_type.get(job.job_type.0 as usize)?)?;
        self.profiles.profiles.get(index)
    }

    fn share(&self, gpu_type: GpuTypeId) -> Allotment {
        self.shares
            .get(gpu_type.0 as usize)
            .copied()
            .unwrap_or(Allotment::new(3.0, 62.5))
    }
}

impl<M: ThroughputModel> ResourceAware for ResourceModel<M> {
    fn speed(&self, job: &Job, allotment: &Allotment) -> f64 {
        self.profile(job)
            .map_or(1.0, |p| p.speed_at(allotment.cpus, allotment.memory_gb))
    }

    fn best(&self, job: &Job) -> Option<Allotment> {
        self.profile(job).map(|p| p.best)
    }

    fn points(&self, job: &Job) -> Vec<(Allotment, f64)> {
        let Some(profile) = self.profile(job) else {
            return Vec::new();
        };
        let mut points = Vec::with_capacity(CPU_AXIS.len() * MEMORY_AXIS.len());
        for (r, &cpus) in CPU_AXIS.iter().enumerate() {
            for (c, &memory) in MEMORY_AXIS.iter().enumerate() {
                points.push((Allotment::new(cpus, memory), profile.at(r, c)));
            }
        }
        points
    }
}

impl<M: ThroughputModel> ThroughputModel for ResourceModel<M> {
    /// At the GPU type's proportional share.
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        let rate = self.inner.steps_per_second(job, gpu_type, gpus)?;
        Some(rate * self.speed(job, &self.share(gpu_type)))
    }

    fn packed_steps_per_second(
        &self,
        a: &Job,
        b: &Job,
        gpu_type: GpuTypeId,
        gpus: u32,
    ) -> Option<(f64, f64)> {
        self.inner.packed_steps_per_second(a, b, gpu_type, gpus)
    }

    fn rate_follows_run(&self) -> bool {
        true
    }

    fn run_rate(&self, job: &Job, shape: &RunShape<'_>, steps_done: f64) -> Option<Segment> {
        let segment = self.inner.run_rate(job, shape, steps_done)?;
        let allotment = shape
            .allotment
            .unwrap_or_else(|| self.share(shape.gpu_type));
        Some(Segment {
            rate: segment.rate * self.speed(job, &allotment),
            until: segment.until,
        })
    }

    fn restart_seconds(&self, job: &Job) -> f64 {
        self.inner.restart_seconds(job)
    }

    fn elastic(&self) -> Option<&dyn goodput::Elastic> {
        self.inner.elastic()
    }

    fn resources(&self) -> Option<&dyn ResourceAware> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Source;
    use crate::job::{JobId, JobTypeId};
    use crate::throughput::DurationModel;

    pub(crate) fn profiles() -> Arc<ResourceProfiles> {
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/synergy_profiles_small.json"
        ))
        .unwrap();
        Arc::new(ResourceProfiles::parse(&Source("small".into()), &text, "models").unwrap())
    }

    #[test]
    fn rate_follows_the_allotment() {
        let cluster = Cluster::from_nodes([("v100", 8, 24, 500.0)]);
        let names = Names {
            job_types: vec!["alexnet".into(), "ResNet-50".into()],
            tenants: vec!["t".into()],
        };
        let model = ResourceModel::new(DurationModel::uniform(1), profiles(), &names, &cluster);
        let job = |t| Job::new(JobId(0), 0.0, 1, 100.0).with_type(JobTypeId(t));
        let t = GpuTypeId(0);
        assert_eq!(model.steps_per_second(&job(0), t, 1), Some(1.0));
        let shape = |allotment| RunShape {
            gpu_type: t,
            placement: &[1],
            batch: None,
            allotment,
        };
        let best = model.best(&job(0)).unwrap();
        let rate = |a| model.run_rate(&job(0), &shape(a), 0.0).unwrap().rate;
        assert_eq!(rate(Some(best)), 2.94);
        assert_eq!(rate(None), 1.0);
        assert!(rate(Some(Allotment::new(1.0, 62.5))) < 0.5);
        // No profile: the allotment changes nothing.
        let other = model.run_rate(&job(1), &shape(Some(best)), 0.0).unwrap();
        assert_eq!(other.rate, 1.0);
        assert!(model.best(&job(1)).is_none() && model.points(&job(1)).is_empty());
        assert_eq!(model.points(&job(0)).len(), 45);
    }
}
