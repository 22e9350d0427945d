//! The bodies of the control plane's HTTP API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::JobId;
use crate::lifecycle::Phase;
use crate::worker::RunCommand;

/// A job to run, as the API receives it (`POST /jobs`). Unknown fields are refused: a typo in a field
/// name would otherwise do nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// Set by trace replays; the control plane numbers jobs itself otherwise.
    #[serde(default)]
    pub id: Option<JobId>,
    /// Its model, by name: the throughput model's row it runs at (`default` when not given).
    #[serde(default = "default_name")]
    pub job_type: String,
    /// The user or team it belongs to, for policies that share the cluster between tenants and for
    /// per-tenant figures (`default` when not given).
    #[serde(default = "default_name")]
    pub tenant: String,
    /// GPUs it asks for: what it runs on under policies that do not resize jobs, and the most it
    /// runs on under those that do (`sia`, `pollux`).
    pub gpus: u32,
    /// The fewest GPUs it runs on, for an elastic job: policies that resize jobs run it on
    /// `min_gpus..=gpus`. Absent: rigid, always on `gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gpus: Option<u32>,
    /// Tensor- and pipeline-parallel degrees of a hybrid-parallel job: it runs only on multiples of
    /// `tp x pp` GPUs.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub tp: u32,
    /// The pipeline-parallel degree (1 when not given); see `tp`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub pp: u32,
    /// Pipeline stages on each GPU type (by name) where they differ from `pp`: a large model's
    /// pipeline spans more small GPUs than large ones (Sia's scale unit). On a type named here the job
    /// runs on multiples of `tp x pp_by_type[type]` GPUs, and its workers get that `pp` at launch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pp_by_type: BTreeMap<String, u32>,
    /// The global batch it is tuned for: what goodput policies price it at (the peers' workloads
    /// give one). With `min_batch`, the largest it adapts to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// The least global batch, for a job that adapts its batch: goodput policies (`sia`, `pollux`)
    /// choose it within `min_batch..=batch`, and its workers get their choice at every launch
    /// (`elastic-run --global-batch MIN:MAX` takes it). Absent: the job keeps its batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_batch: Option<u32>,
    /// Work, in the model's units (seconds at the requested GPU count for the duration model).
    pub work: f64,
    /// Its priority weight, for the policies that weigh jobs (1 when not given; the control plane
    /// accepts 1e-6 to 1e6).
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// What to run, when the control plane runs real processes (`elastic-run --daemon` fills it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunCommand>,
}

impl JobRequest {
    /// A rigid job of `job_type` on `gpus` GPUs with `work` to do, as the defaults have it (tenant
    /// `default`, weight 1, its own batch, no command): set the other fields on the value.
    pub fn new(job_type: impl Into<String>, gpus: u32, work: f64) -> Self {
        JobRequest {
            id: None,
            job_type: job_type.into(),
            tenant: default_name(),
            gpus,
            min_gpus: None,
            tp: 1,
            pp: 1,
            pp_by_type: BTreeMap::new(),
            batch: None,
            min_batch: None,
            work,
            weight: default_weight(),
            run: None,
        }
    }
}

/// The job type and tenant a request that names none has.
pub const DEFAULT_NAME: &str = "default";

fn default_name() -> String {
    DEFAULT_NAME.to_owned()
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

fn default_weight() -> f64 {
    1.0
}

/// What a job's goodput model learned on one GPU type.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LearnedSteps {
    /// The GPU type's name.
    pub gpu_type: String,
    /// Configurations (nodes, replicas, per-replica batch) measured there.
    pub configurations: u32,
}

/// The GPU counts an elastic or hybrid-parallel job runs on: `min..=max`, multiples of `multiple`
/// (of `multiple_by_type[type]` on the GPU types named there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSizes {
    /// Fewest GPUs.
    pub min: u32,
    /// Most GPUs (the `gpus` it was submitted with).
    pub max: u32,
    /// GPU counts are multiples of it: the `tp x pp` group (1 for a data-parallel job).
    pub multiple: u32,
    /// The multiple on GPU types where it differs, by type name (`tp x pp_by_type[type]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub multiple_by_type: BTreeMap<String, u32>,
}

/// A restart (a resize or a move) phase by phase, in control-plane seconds; they add up to the
/// restart's seconds. The first two are timed per batch of changes: a batch stops all its jobs'
/// workers, then launches all its new ones.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestartPhases {
    /// From the round's decision (its solve and journal write included) until the old workers had
    /// saved their checkpoint and exited.
    pub stop: f64,
    /// Until the executor had started the new workers' processes.
    pub launch: f64,
    /// Until the new workers reported their first step (their start-up: imports, rendezvous,
    /// restoring the checkpoint, one step).
    pub first_step: f64,
}

/// A job's resize: from `from` GPUs to `to`, at control-plane second `at`, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resize {
    /// GPUs before.
    pub from: u32,
    /// GPUs after.
    pub to: u32,
    /// When, in control-plane seconds.
    pub at: f64,
    /// Why, in words: which arrivals it made room for, which ended jobs freed the GPUs it grew on, or
    /// that its goodput gains from them.
    pub why: String,
}

/// A server as the API shows it (`GET /nodes`): its GPUs, which are out of service and why, and the
/// jobs running on it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its name (a Slurm node's, or `server-N`).
    pub name: String,
    /// The type of its GPUs (a server's GPUs are all of one type).
    pub gpu_type: String,
    /// Its GPU ids.
    pub gpus: Vec<u32>,
    /// How many of them no job holds and are in service.
    pub free: u32,
    /// GPUs out of service, with why (cordoned by the operator, or their health: a Slurm node
    /// down or drained, an NVML fault).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub out_of_service: Vec<(u32, String)>,
    /// GPUs whose health is no longer checked, with why: their probe failed (it panicked, or its
    /// thread died) and is not called again, so they keep the health it last gave.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unwatched: Vec<(u32, String)>,
    /// Jobs running on it.
    pub jobs: Vec<JobId>,
}

/// A job as the API shows it (`GET /jobs`, `GET /jobs/{id}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// Its id, as the control plane (or the submitted trace) numbered it.
    pub id: JobId,
    /// Its model, by name, as submitted.
    pub job_type: String,
    /// Its tenant, as submitted.
    pub tenant: String,
    /// GPUs it asked for (the most, for an elastic job; `placement` is what it holds now).
    pub gpus: u32,
    /// Where it is in its lifecycle.
    pub phase: Phase,
    /// When it was submitted, in control-plane seconds.
    pub submitted: f64,
    /// When it first started running, in control-plane seconds (`None`: not yet).
    pub started: Option<f64>,
    /// When it finished, in control-plane seconds (`None`: not yet, or never, for a job that failed or
    /// was cancelled).
    pub finished: Option<f64>,
    /// Work done, between 0 and 1: what its workers last reported, or the scheduler's estimate.
    pub progress: f64,
    /// The GPU ids it holds.
    pub placement: Vec<u32>,
    /// The CPUs and memory it holds beside them, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<crate::worker::Resources>,
    /// Times it was stopped and left waiting for GPUs (a round gave it none, or a GPU it held went out of service).
    pub preemptions: u32,
    /// Times it was stopped and restarted at once on other GPUs (moves and resizes).
    pub migrations: u32,
    /// What its workers last measured of their training (step time, batch, gradient noise), when
    /// they measure it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<crate::worker::Measured>,
    /// Its goodput model: the configurations measured on each GPU type (journaled: a restart keeps
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub learned: Vec<LearnedSteps>,
    /// The GPU counts it runs on under policies that resize jobs, when it is elastic or hybrid
    /// parallel (absent: only `gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sizes: Option<JobSizes>,
    /// Times it was resized (since the control plane last started), and the last time.
    #[serde(default)]
    pub resizes: u32,
    /// Its most recent resize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_resize: Option<Resize>,
    /// Seconds its last restart (a resize or a move) took, from the decision to its first step after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_seconds: Option<f64>,
    /// Where those seconds went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restart_phases: Option<RestartPhases>,
    /// The global batch its policy chose last (at its latest launch, or retuned since), for a job
    /// that adapts its batch (`min_batch` submitted). Workers that do not read a retuned batch
    /// mid-run (`gw.retuned()`) take it at their next launch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// Why it waits, when it does: the policy gave it no GPUs, or the placer could not place them;
    /// and, until a start succeeds, why its last start failed (its program may not run now, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
}

/// The cluster at one moment, as `GET /history` lists it: what its GPUs did and who held them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterSample {
    /// When, in control-plane seconds.
    pub at: f64,
    /// GPUs held by jobs.
    pub busy_gpus: u32,
    /// Jobs waiting for GPUs.
    pub queued_jobs: usize,
    /// Jobs running.
    pub running_jobs: usize,
    /// The median and 99th percentile round latency then, in seconds, over the last rounds.
    pub round_latency_p50: f64,
    /// See `round_latency_p50`.
    pub round_latency_p99: f64,
    /// GPUs held by each tenant: the tenants holding the most by name, the rest summed under
    /// [`OTHER_TENANTS`].
    pub tenants: BTreeMap<String, u32>,
}

/// The waiting jobs in the order they are to be served, as `GET /queue` lists them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueOrder {
    /// Whose order: the policy's, or, for a policy that keeps none (one that shares time or solves
    /// a program each round), arrival.
    pub by: QueueBy,
    /// The first waiting jobs in that order (at most [`QUEUE_SHOWN`]); in the policy's, those its
    /// queue does not hold (paused after failed starts, or arrived since its last round) follow,
    /// oldest first.
    pub jobs: Vec<JobId>,
}

/// The most jobs a [`QueueOrder`] lists.
pub const QUEUE_SHOWN: usize = 1_000;

/// Whose order a [`QueueOrder`] is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QueueBy {
    /// The policy's own (its queue).
    Policy,
    /// Arrival: the policy keeps no order.
    #[default]
    Arrival,
}

/// The name under which a [`ClusterSample`] sums the tenants beyond those it names.
pub const OTHER_TENANTS: &str = "(others)";

/// The most points a job's GPU history (`GET /gpu-history`) keeps (the oldest go first).
pub const GPU_HISTORY_POINTS: usize = 32;

/// From control-plane second `at` on, a job held `gpus` GPUs: a point of its GPU history, which the
/// API serves apart from the job (`GET /gpu-history?jobs=..`), since a policy that moves jobs every
/// round would otherwise multiply the size of every job list.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuCount {
    /// When, in control-plane seconds.
    pub at: f64,
    /// How many GPUs.
    pub gpus: u32,
}

impl GpuCount {
    /// Adds "`gpus` from `at` on" to `history`: a point only where the count changes (a point at the
    /// same second as the last replaces it: a move decided and carried out at once is not a stop), at
    /// most [`GPU_HISTORY_POINTS`].
    pub fn note(history: &mut Vec<GpuCount>, at: f64, gpus: u32) {
        if let Some(last) = history.last_mut()
            && last.at == at
        {
            last.gpus = gpus;
            // The change may have undone the one before it.
            let len = history.len();
            if len >= 2 && history[len - 2].gpus == gpus {
                history.pop();
            }
            return;
        }
        if history.last().is_some_and(|last| last.gpus == gpus) {
            return;
        }
        if history.len() == GPU_HISTORY_POINTS {
            history.remove(0);
        }
        history.push(GpuCount { at, gpus });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_gpu_history_keeps_changes_only_and_its_last_points() {
        let mut history = Vec::new();
        let counts = |h: &[GpuCount]| h.iter().map(|p| (p.at, p.gpus)).collect::<Vec<_>>();
        GpuCount::note(&mut history, 10.0, 4);
        GpuCount::note(&mut history, 20.0, 4);
        assert_eq!(counts(&history), [(10.0, 4)], "no change, no point");
        // Stopped and restarted on 4 others in the same instant: not a stop.
        GpuCount::note(&mut history, 30.0, 0);
        GpuCount::note(&mut history, 30.0, 4);
        assert_eq!(counts(&history), [(10.0, 4)]);
        // Resized at once: one point.
        GpuCount::note(&mut history, 40.0, 0);
        GpuCount::note(&mut history, 40.0, 8);
        GpuCount::note(&mut history, 50.0, 0);
        assert_eq!(counts(&history), [(10.0, 4), (40.0, 8), (50.0, 0)]);
        for k in 0..GPU_HISTORY_POINTS {
            GpuCount::note(&mut history, 100.0 + k as f64, 1 + k as u32 % 2);
        }
        assert_eq!(history.len(), GPU_HISTORY_POINTS);
        let last = GPU_HISTORY_POINTS - 1;
        assert_eq!(history[last].at, 100.0 + last as f64, "the newest kept");
        assert_eq!(history[0].at, 100.0, "the oldest dropped");
    }
}
