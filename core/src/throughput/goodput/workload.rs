//! The simulated truth for elastic workloads (Pollux's and Sia's): a job's progress rate on a run
//! follows its application's measured profiles, epoch by epoch, at the batch it runs with, on the
//! placement it has; every (re)start costs a restart delay.
//!
//! As in Pollux's simulator, the step time of a placement measured exactly (up to four nodes) is
//! interpolated over the per-replica batch; others are interpolated over the replicas and batch of the
//! nearest measured shapes. The gain of a step follows the gradient statistics of the job's current
//! epoch at its global batch.

use std::sync::Arc;

use super::profiles::{Application, Profiles, Step, TypeProfile, interpolate, placement_id};
use super::{BatchPlan, Elastic};
use crate::cluster::{Cluster, GpuTypeId};
use crate::error::{InputError, Source};
use crate::job::{Job, Names, Trace};
use crate::throughput::{RunShape, Segment, ThroughputModel};

/// Whose simulator's constants to follow: restart delays, and how much slower real runs were than
/// the profiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calibration {
    /// Pollux's: a 30 s restart for every application, the profiles as measured.
    Pollux,
    /// Sia's: restart delays per application (bert 120 s, imagenet 250 s, yolov3 80 s, cifar10 50 s,
    /// deepspeech2 25 s, ncf 15 s, others 30 s) and profiles slowed to real runs (cifar10 1.8x, ncf
    /// 1.5x, imagenet, yolov3, bert and deepspeech2 1.2x), as Sia's simulator calibrates them.
    Sia,
}

impl Calibration {
    fn restart_delay(self, app: &str) -> f64 {
        match self {
            Calibration::Pollux => 30.0,
            Calibration::Sia => match app {
                "cifar10" => 50.0,
                "deepspeech2" => 25.0,
                "bert" => 120.0,
                "yolov3" => 80.0,
                "imagenet" => 250.0,
                "ncf" => 15.0,
                _ => 30.0,
            },
        }
    }

    fn slowdown(self, app: &str) -> f64 {
        match self {
            Calibration::Pollux => 1.0,
            Calibration::Sia => match app {
                "cifar10" => 1.8,
                "ncf" => 1.5,
                "imagenet" | "yolov3" | "bert" | "deepspeech2" => 1.2,
                _ => 1.0,
            },
        }
    }

    /// The restart cost a policy reckons with (Pollux: 30 s; Sia's program: per application).
    fn penalty(self, app: &str) -> f64 {
        match self {
            Calibration::Pollux => 30.0,
            Calibration::Sia => match app {
                "deepspeech2" => 25.0,
                "imagenet" => 250.0,
                "cifar10" => 30.0,
                "bert" => 120.0,
                "yolov3" => 45.0,
                _ => 30.0,
            },
        }
    }
}

/// Elastic jobs on a cluster, as their profiles say they run.
#[derive(Clone, Debug)]
pub struct ProfiledWorkload {
    profiles: Arc<Profiles>,
    /// By job type id: its application's name (job types are applications).
    apps: Vec<Option<String>>,
    /// By GPU type id: the profile key, and GPUs per server.
    types: Vec<(String, u32)>,
    calibration: Calibration,
}

impl ProfiledWorkload {
    /// The workload of jobs named by `names` (job types are application names) on `cluster`, whose GPU
    /// type names are profile keys (`t4` and `aws` for Pollux's profiles; `rtx`, `dgx-ext`, ... for
    /// Sia's).
    pub fn new(
        profiles: Arc<Profiles>,
        names: &Names,
        cluster: &Cluster,
        calibration: Calibration,
    ) -> ProfiledWorkload {
        let apps = names
            .job_types
            .iter()
            .map(|n| profiles.apps.contains_key(n).then(|| n.clone()))
            .collect();
        let types = cluster
            .gpu_types()
            .iter()
            .enumerate()
            .map(|(t, name)| {
                let size = cluster
                    .nodes()
                    .iter()
                    .filter(|n| n.gpu_type.0 as usize == t)
                    .map(|n| n.gpus)
                    .max()
                    .unwrap_or(1);
                (name.clone(), size)
            })
            .collect();
        ProfiledWorkload {
            profiles,
            apps,
            types,
            calibration,
        }
    }

    /// The workload of `trace` (counted in progress, with its profiles' folder) on `cluster`, with the
    /// constants of the simulator whose profiles these are (Sia's for per-type profiles, else Pollux's).
    pub fn for_trace(trace: &Trace, cluster: &Cluster) -> Result<ProfiledWorkload, InputError> {
        let source = Source(trace.source.clone());
        let dir = trace.profiles.as_deref().ok_or_else(|| {
            InputError::whole(&source, "the trace counts progress but names no profiles")
        })?;
        let profiles = crate::trace::load_profiles(dir)?;
        Self::of_profiles(profiles, &trace.names, cluster)
    }

    /// The workload of the applications profiled in `dir`, for jobs submitted live: every
    /// application is a job type (returned with the model, in the model's order).
    pub fn for_profiles(
        dir: &std::path::Path,
        cluster: &Cluster,
    ) -> Result<(ProfiledWorkload, Names), InputError> {
        let profiles = crate::trace::load_profiles(dir)?;
        let mut names = Names::default();
        for app in profiles.apps.keys() {
            names.intern_job_type(app);
        }
        Ok((Self::of_profiles(profiles, &names, cluster)?, names))
    }

    /// `profiles` for jobs of `names` on `cluster`, which must have a profile for each GPU type.
    fn of_profiles(
        profiles: Profiles,
        names: &Names,
        cluster: &Cluster,
    ) -> Result<ProfiledWorkload, InputError> {
        let calibration = if profiles.per_type {
            Calibration::Sia
        } else {
            Calibration::Pollux
        };
        for name in cluster.gpu_types() {
            let profiled = profiles.apps.values().any(|a| a.types.contains_key(name));
            if !profiled {
                let mut known: Vec<&str> = profiles
                    .apps
                    .values()
                    .flat_map(|a| a.types.keys().map(String::as_str))
                    .collect();
                known.sort_unstable();
                known.dedup();
                return Err(InputError::whole(
                    &Source(profiles.source.clone()),
                    format!(
                        "no profile for GPU type `{name}` of the cluster (profiled: {})",
                        known.join(", ")
                    ),
                ));
            }
        }
        Ok(ProfiledWorkload::new(
            Arc::new(profiles),
            names,
            cluster,
            calibration,
        ))
    }

    /// The same workload on another cluster (whose GPU types are among this one's profile keys).
    pub fn on(&self, names: &Names, cluster: &Cluster) -> ProfiledWorkload {
        ProfiledWorkload::new(Arc::clone(&self.profiles), names, cluster, self.calibration)
    }

    /// Whose simulator's restart delays and slowdowns it follows.
    pub fn calibration(&self) -> Calibration {
        self.calibration
    }

    fn app(&self, job: &Job) -> Option<&Application> {
        let name = self.apps.get(job.job_type.0 as usize)?.as_ref()?;
        self.profiles.apps.get(name)
    }

    fn type_profile<'a>(
        &'a self,
        app: &'a Application,
        gpu_type: GpuTypeId,
    ) -> Option<&'a TypeProfile> {
        let (key, _) = self.types.get(gpu_type.0 as usize)?;
        app.types.get(key)
    }

    /// The batch plan a run without a policy's choice uses: the job's own batch (the least of its range,
    /// for one that adapts it; else M0, or the least its replicas hold), split by the fixed rule.
    pub fn default_plan(&self, job: &Job, gpu_type: GpuTypeId, replicas: u32) -> Option<BatchPlan> {
        let app = self.app(job)?;
        let profile = self.type_profile(app, gpu_type)?;
        let batch = job
            .min_batch
            .or(job.batch)
            .unwrap_or_else(|| app.init_batch.max(profile.min_local * replicas));
        Some(BatchPlan::split(batch, replicas, app, profile.max_local))
    }

    /// Progress per second of `job` at `steps_done` on `placement` of `gpu_type` with `plan`, and the
    /// progress at which its epoch ends.
    fn rate(
        &self,
        job: &Job,
        gpu_type: GpuTypeId,
        placement: &[u32],
        plan: BatchPlan,
        steps_done: f64,
    ) -> Option<Segment> {
        let app = self.app(job)?;
        let replicas = job.replicas_on(gpu_type, placement.iter().sum());
        let (step, sync) = self.measure(job, gpu_type, placement, f64::from(plan.local))?;
        let seconds = step + (step - sync).max(0.0) * f64::from(plan.accum);
        let (epoch, until) = app.epoch_at(steps_done);
        let gain = app.gain(f64::from(plan.global(replicas)), epoch);
        let rate = gain / seconds / self.calibration.slowdown(&app.name);
        (rate.is_finite() && rate > 0.0).then_some(Segment { rate, until })
    }

    fn packed(&self, gpu_type: GpuTypeId, gpus: u32) -> Vec<u32> {
        super::packed_placement(self.node_size(gpu_type), gpus)
    }
}

impl ThroughputModel for ProfiledWorkload {
    /// Progress per second at the start of the job, with its own batch, packed onto whole servers.
    fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, gpus: u32) -> Option<f64> {
        let plan = self.default_plan(job, gpu_type, job.replicas_on(gpu_type, gpus))?;
        let placement = self.packed(gpu_type, gpus);
        self.rate(job, gpu_type, &placement, plan, 0.0)
            .map(|s| s.rate)
    }

    fn rate_follows_run(&self) -> bool {
        true
    }

    fn run_rate(&self, job: &Job, shape: &RunShape<'_>, steps_done: f64) -> Option<Segment> {
        let replicas = job.replicas_on(shape.gpu_type, shape.placement.iter().sum());
        let plan = match shape.batch {
            Some(plan) => plan,
            None => self.default_plan(job, shape.gpu_type, replicas)?,
        };
        self.rate(job, shape.gpu_type, shape.placement, plan, steps_done)
    }

    fn restart_seconds(&self, job: &Job) -> f64 {
        self.app(job)
            .map_or(0.0, |app| self.calibration.restart_delay(&app.name))
    }

    fn elastic(&self) -> Option<&dyn Elastic> {
        Some(self)
    }
}

/// Where a placement's step times come from: its own profile, or its shape's (see [`shape_time`]).
#[derive(Clone, Copy)]
enum Steps<'a> {
    Measured(&'a [Step]),
    Shape(&'a TypeProfile, u32, u32),
}

impl Steps<'_> {
    /// Step and sync seconds at per-replica batch `local`.
    fn at(self, local: f64) -> Option<(f64, f64)> {
        match self {
            Steps::Measured(steps) => interpolate(steps, local),
            Steps::Shape(profile, nodes, replicas) => shape_time(profile, nodes, replicas, local),
        }
    }
}

impl ProfiledWorkload {
    /// The step times of `job` on `placement` of `gpu_type`, if its application has a profile there.
    fn steps_on(&self, job: &Job, gpu_type: GpuTypeId, placement: &[u32]) -> Option<Steps<'_>> {
        let profile = self.profile(job, gpu_type)?;
        Some(match profile.placements.get(&placement_id(placement)) {
            Some(steps) => Steps::Measured(steps),
            None => Steps::Shape(profile, placement.len() as u32, placement.iter().sum()),
        })
    }
}

impl Elastic for ProfiledWorkload {
    fn application(&self, job: &Job) -> Option<&Application> {
        self.app(job)
    }

    fn profile(&self, job: &Job, gpu_type: GpuTypeId) -> Option<&TypeProfile> {
        self.type_profile(self.app(job)?, gpu_type)
    }

    fn measure(
        &self,
        job: &Job,
        gpu_type: GpuTypeId,
        placement: &[u32],
        local: f64,
    ) -> Option<(f64, f64)> {
        self.steps_on(job, gpu_type, placement)?.at(local)
    }

    fn measurer<'a>(
        &'a self,
        job: &'a Job,
        gpu_type: GpuTypeId,
        placement: &'a [u32],
    ) -> Box<dyn Fn(f64) -> Option<(f64, f64)> + 'a> {
        match self.steps_on(job, gpu_type, placement) {
            Some(steps) => Box::new(move |local| steps.at(local)),
            None => Box::new(|_| None),
        }
    }

    fn node_size(&self, gpu_type: GpuTypeId) -> u32 {
        self.types.get(gpu_type.0 as usize).map_or(1, |t| t.1)
    }

    fn restart_penalty(&self, job: &Job) -> f64 {
        self.app(job)
            .map_or(30.0, |app| self.calibration.penalty(&app.name))
    }
}

/// Step and sync time on a shape no placement measured: between the nearest node counts below and
/// above whose measured replicas span `replicas`, linearly in the nodes, each over its replicas (and each
/// of those over the per-replica batch); where no node count spans it, at the nearest node count, its
/// replicas clamped to what was measured there. (Clamping at the nearest count alone made a job's step
/// time jump where the nearest count changed: imagenet's grew from 28 to 29 GPUs, which stopped
/// Optimus' greedy growth there.)
fn shape_time(profile: &TypeProfile, nodes: u32, replicas: u32, local: f64) -> Option<(f64, f64)> {
    let counts: Vec<u32> = {
        let mut counts: Vec<u32> = profile.shapes.keys().map(|&(n, _)| n).collect();
        counts.dedup();
        counts
    };
    let spans = |n: u32| {
        let mut measured = profile
            .shapes
            .range((n, 0)..=(n, u32::MAX))
            .map(|(&(_, r), _)| r);
        let low = measured.next().unwrap_or(u32::MAX);
        let high = measured.next_back().unwrap_or(low);
        (low..=high).contains(&replicas)
    };
    let below = counts
        .iter()
        .rev()
        .copied()
        .find(|&n| n <= nodes && spans(n));
    let above = counts.iter().copied().find(|&n| n >= nodes && spans(n));
    match (below, above) {
        (Some(lo), Some(hi)) if hi > lo => {
            let (a, b) = (
                at_nodes(profile, lo, replicas, local)?,
                at_nodes(profile, hi, replicas, local)?,
            );
            Some(lerp(a, b, f64::from(nodes - lo) / f64::from(hi - lo)))
        }
        (Some(n), _) | (None, Some(n)) => at_nodes(profile, n, replicas, local),
        (None, None) => {
            let nearest = counts
                .iter()
                .copied()
                .min_by_key(|&n| (n.abs_diff(nodes), n))?;
            at_nodes(profile, nearest, replicas, local)
        }
    }
}

/// Step and sync time of `replicas` over `nodes` (a node count measured), interpolated over the
/// measured replicas there and clamped to their range.
fn at_nodes(profile: &TypeProfile, nodes: u32, replicas: u32, local: f64) -> Option<(f64, f64)> {
    let candidates: Vec<(u32, (f64, f64))> = profile
        .shapes
        .range((nodes, 0)..=(nodes, u32::MAX))
        .filter_map(|(&(_, r), steps)| Some((r, interpolate(steps, local)?)))
        .collect();
    let below = candidates.iter().rev().find(|(r, _)| *r <= replicas);
    let above = candidates.iter().find(|(r, _)| *r >= replicas);
    match (below, above) {
        (Some(&(lo, a)), Some(&(hi, b))) if hi > lo => {
            Some(lerp(a, b, f64::from(replicas - lo) / f64::from(hi - lo)))
        }
        (Some(&(_, a)), _) | (None, Some(&(_, a))) => Some(a),
        (None, None) => None,
    }
}

/// `a + (b - a) w`, on both times.
fn lerp(a: (f64, f64), b: (f64, f64), w: f64) -> (f64, f64) {
    (a.0 + (b.0 - a.0) * w, a.1 + (b.1 - a.1) * w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use crate::throughput::goodput::profiles::Step;

    /// A profile whose step time is `nodes + replicas / 10` at any batch, measured on 1 node (1 to 4
    /// replicas), 2 nodes (2 to 8) and 6 nodes (6 to 24).
    fn profile() -> TypeProfile {
        let mut shapes = BTreeMap::new();
        for (nodes, replicas) in [(1, 1..=4), (2, 2..=8), (6, 6..=24)] {
            for r in replicas.step_by(2) {
                let time = f64::from(nodes) + f64::from(r) / 10.0;
                let step = Step {
                    local_bsz: 32.0,
                    step_time: time,
                    sync_time: time / 2.0,
                };
                shapes.insert((nodes, r), vec![step]);
            }
        }
        TypeProfile {
            shapes,
            ..TypeProfile::default()
        }
    }

    #[test]
    fn shapes_between_measured_node_counts_are_interpolated_across_them() {
        let p = profile();
        let step = |nodes, replicas| shape_time(&p, nodes, replicas, 32.0).unwrap().0;
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        // Measured.
        assert!(close(step(2, 6), 2.6));
        // Between replicas measured on one node count.
        assert!(close(step(6, 7), 6.7));
        // 4 nodes, 8 replicas: between 2 nodes (which measured 8) and 6 (which measured 8), halfway.
        assert!(close(step(4, 8), 4.8), "{}", step(4, 8));
        // 5 nodes, 12 replicas: only 6 nodes measured 12; no jump from clamping at 2 nodes' 8.
        assert!(close(step(5, 12), 7.2));
        // Nothing spans 30 replicas: the nearest node count, clamped to what it measured.
        assert!(close(step(7, 30), 6.0 + 2.4));
    }
}
