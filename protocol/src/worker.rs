//! The worker contract: what a job's workers are launched with, what they report back, and the
//! [`Executor`] trait, the only way the control plane reaches workers.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::ids::{GpuSet, GpuTypeId, JobId};

/// A real job's command, for executors that run processes. Scheduling never reads it; the journal
/// keeps it, so that a restarted control plane can relaunch the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunCommand {
    /// `elastic-run`'s arguments: gangway's options, torchrun's, the script and its arguments.
    pub args: Vec<String>,
    /// The directory it runs in.
    pub cwd: PathBuf,
    /// The whole environment it runs with (the submitter's, as `sbatch` passes it).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where its output goes, appended across launches (discarded when `None`).
    #[serde(default)]
    pub log: Option<PathBuf>,
    /// The user it runs as, when not the control plane's own: set by a daemon running as root to
    /// whoever submitted the job, never by a client.
    #[serde(default)]
    pub user: Option<RunAs>,
}

impl RunCommand {
    /// The bytes it holds: its arguments, its environment's names and values, and its paths (what
    /// a control plane keeps of it for as long as its job lives), each argument and variable
    /// counted with what keeping it costs beside its text (4,096 empty ones take about 400 KB).
    pub fn bytes(&self) -> usize {
        /// What a string costs beside its text: its header and its allocation's rounding.
        const PER_ARG: usize = 48;
        /// What a variable costs beside its name and value: two strings and its share of a node.
        const PER_VAR: usize = 112;
        let args: usize = self.args.iter().map(|a| PER_ARG + a.len()).sum();
        let env: usize = (self.env.iter())
            .map(|(name, value)| PER_VAR + name.len() + value.len())
            .sum();
        let paths =
            self.cwd.as_os_str().len() + self.log.as_ref().map_or(0, |l| l.as_os_str().len());
        args + env + paths
    }
}

/// A user and group to run a command as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunAs {
    /// The user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
}

/// A progress rate that holds until the job's work done reaches `until` (then it is asked again):
/// models whose rate follows a job's progress (its epochs) answer in segments, and a simulated
/// worker follows them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// Work per second (the job's work units, such as steps) until `until`.
    pub rate: f64,
    /// The work done, in the same units as the job's `total_steps`, at which the rate stops holding.
    pub until: f64,
}

/// What a job's workers are launched with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The job the workers run.
    pub job: JobId,
    /// Unique per start (a counter the journal keeps): launching the same attempt twice is a no-op,
    /// which makes replays idempotent.
    pub attempt: u64,
    /// The type of its GPUs.
    pub gpu_type: GpuTypeId,
    /// The GPUs the workers run on.
    pub gpus: GpuSet,
    /// The pace the scheduler expects at first (the simulated executor runs at exactly this pace).
    pub steps_per_second: f64,
    /// The pace to the end, segment by segment, where it changes as the job progresses (empty: the
    /// first pace holds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pace: Vec<Segment>,
    /// Seconds of restore or migration before the first step.
    pub startup_seconds: f64,
    /// Work left at launch: where its last checkpoint leaves it, in the units of `total_steps`.
    pub remaining_steps: f64,
    /// The job's whole work, in its model's units (steps, or seconds for the duration model).
    pub total_steps: f64,
    /// The CPUs and memory the workers are allotted, all their GPUs together (`None` in a run file
    /// written before allotments were carried: the executor then gives what it gave before, no pin).
    #[serde(default)]
    pub resources: Option<Resources>,
    /// What to run, for executors of real processes (`None` for simulated jobs).
    pub run: Option<RunCommand>,
    /// The global batch its policy chose for this run, for a job that adapts its batch (`None`: the
    /// job keeps its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    /// The pipeline stages its workers run with on this launch's GPU type, for a job whose stages
    /// differ by type (`None`: the job keeps its own `pp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp: Option<u32>,
}

/// CPUs and memory a job's workers are allotted, all their GPUs together: what its policy's resource
/// mechanism chose (Synergy's `tune` or `opt`), or its servers' GPU-proportional share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPUs (cores, possibly fractional).
    pub cpus: f64,
    /// Memory, in gigabytes (10^9 bytes).
    pub memory_gb: f64,
}

impl Resources {
    /// Whole cores to pin the workers to: the CPUs allotted, rounded down (a fraction of a core cannot
    /// be pinned), and at least one.
    pub fn cores(&self) -> usize {
        if self.cpus.is_finite() && self.cpus >= 1.0 {
            // Slack for shares summed in floating point (24 CPUs over 8 GPUs, times 8).
            (self.cpus + 1e-6).floor() as usize
        } else {
            1
        }
    }

    /// The memory allotted, in bytes, for a limit (`None` when it is not a positive finite size).
    pub fn memory_bytes(&self) -> Option<u64> {
        let bytes = self.memory_gb * 1e9;
        (bytes.is_finite() && bytes >= 1.0).then(|| bytes.min(u64::MAX as f64) as u64)
    }
}

/// What the workers measured of their own training, for goodput models (Pollux, Sia): the Python
/// helper's `GoodputMeter`, smoothed over its recent steps.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Optimizer steps measured.
    pub steps: u64,
    /// Wall seconds per optimizer step.
    pub step_seconds: f64,
    /// The part of `step_seconds` with an all-reduce in flight (at most `step_seconds`).
    pub sync_seconds: f64,
    /// Samples one replica processes per step (micro-batch x accumulation).
    pub replica_batch: u32,
    /// Data-parallel replicas.
    pub replicas: u32,
    /// Micro-batches each replica accumulates per optimizer step.
    pub accum_steps: u32,
    /// The gradient noise scale, in samples, where there are several replicas to estimate it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub noise_scale: Option<f64>,
    /// The estimate of `|G|^2`, the true gradient's squared norm (`noise_scale = grad_var / grad_sqr`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_sqr: Option<f64>,
    /// The estimate of `tr(Sigma)`, the per-sample gradient variance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_var: Option<f64>,
}

impl Measured {
    /// Largest batch or replica count a report may claim (a bound on what a worker can make the
    /// control plane hold, not a limit of training).
    const MOST: u32 = 1 << 24;

    /// A report from the workers' progress file, if it is one: numbers finite, times not negative,
    /// the sync time within the step time, counts between 1 and 2^24. Anything else is dropped:
    /// workers run user code, and nothing they write reaches a model unchecked.
    pub fn checked(self) -> Option<Measured> {
        let finite = |x: f64| x.is_finite();
        let counts = [self.replica_batch, self.replicas, self.accum_steps];
        let ok = finite(self.step_seconds)
            && finite(self.sync_seconds)
            && self.step_seconds > 0.0
            && (0.0..=self.step_seconds).contains(&self.sync_seconds)
            && counts.iter().all(|c| (1..=Self::MOST).contains(c))
            && [self.noise_scale, self.grad_sqr, self.grad_var]
                .iter()
                .all(|x| x.is_none_or(finite));
        ok.then_some(self)
    }

    /// The time per step not spent with an all-reduce in flight.
    pub fn compute_seconds(&self) -> f64 {
        (self.step_seconds - self.sync_seconds).max(0.0)
    }
}

/// Something the workers did, reported by [`Executor::poll`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum WorkerEvent {
    /// The workers completed the job's work and exited.
    Finished {
        /// The job.
        job: JobId,
        /// The attempt (see [`Launch::attempt`]) whose workers finished.
        attempt: u64,
        /// When, in control-plane seconds.
        at: f64,
    },
    /// The workers exited without completing the job's work, or could not be launched.
    Failed {
        /// The job.
        job: JobId,
        /// The attempt whose workers failed.
        attempt: u64,
        /// When, in control-plane seconds.
        at: f64,
        /// What went wrong, in words (the launcher's exit and its reason).
        error: String,
        /// A crash worth retrying, or a user error (bad script, bad arguments) that never is.
        retryable: bool,
    },
    /// The workers saved a checkpoint with this much work done.
    Checkpointed {
        /// The job.
        job: JobId,
        /// The attempt whose workers saved it.
        attempt: u64,
        /// Work done at the checkpoint, in the units of [`Launch::total_steps`].
        steps_done: f64,
    },
    /// The workers report this much work done (not yet checkpointed): what the scheduler counts as the
    /// job's progress, in place of its model's estimate.
    Progressed {
        /// The job.
        job: JobId,
        /// The attempt whose workers report.
        attempt: u64,
        /// Work done, in the units of [`Launch::total_steps`].
        steps_done: f64,
        /// What they measured of their training, when they measure it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        measured: Option<Measured>,
    },
    /// The workers of a stop that outlasted the executor's patience
    /// ([`ExecutorError::StillStopping`]) have exited (or were given up on after their kill).
    Stopped {
        /// The job.
        job: JobId,
        /// The attempt whose workers stopped.
        attempt: u64,
        /// Work their checkpoint saved, as [`Executor::stop`] answers it.
        steps_done: f64,
    },
}

impl WorkerEvent {
    /// The job it is about.
    pub fn job(&self) -> JobId {
        match self {
            WorkerEvent::Finished { job, .. }
            | WorkerEvent::Failed { job, .. }
            | WorkerEvent::Checkpointed { job, .. }
            | WorkerEvent::Progressed { job, .. }
            | WorkerEvent::Stopped { job, .. } => *job,
        }
    }

    /// The attempt it is about.
    pub fn attempt(&self) -> u64 {
        match self {
            WorkerEvent::Finished { attempt, .. }
            | WorkerEvent::Failed { attempt, .. }
            | WorkerEvent::Checkpointed { attempt, .. }
            | WorkerEvent::Progressed { attempt, .. }
            | WorkerEvent::Stopped { attempt, .. } => *attempt,
        }
    }
}

/// Why the executor could not do what it was asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecutorError {
    /// The job has no workers running here to stop.
    #[error("job {0} has no running workers")]
    NotRunning(JobId),
    /// The workers were told to stop and have not exited within the executor's patience: the stop
    /// goes on without holding the caller, and [`Executor::poll`] reports
    /// [`WorkerEvent::Stopped`] once they have. Their GPUs are still in use until then.
    #[error("job {0}'s workers have not stopped yet")]
    StillStopping(JobId),
    /// The workers could not be started.
    #[error("job {job}: launch failed: {reason}")]
    Launch {
        /// The job.
        job: JobId,
        /// Why, in words.
        reason: String,
    },
    /// The workers were not started, and a launch before `after` seconds have passed would not
    /// start them either (the process executor rests a user whose file system answered its last
    /// check slowly): the job is not at fault, and waits that long.
    #[error("job {job}: launch put off for {after:.0} s: {reason}")]
    Later {
        /// The job.
        job: JobId,
        /// Why, in words.
        reason: String,
        /// Seconds to wait before launching it again (the control plane waits 15 minutes at
        /// most).
        after: f64,
    },
}

/// Runs and stops a job's workers.
///
/// The control plane calls [`Executor::launch`], [`Executor::stop`] and [`Executor::stop_many`] on a
/// blocking thread, outside its actors: they may block for as long as workers take to start or to
/// checkpoint. An executor of real processes bounds that wait by a patience of its own and answers
/// [`ExecutorError::StillStopping`] for workers still checkpointing then, so that one job's long
/// grace does not hold every other job's start. [`Executor::poll`], [`Executor::alive`],
/// [`Executor::retune`] and [`Executor::next_event`] run on the control plane's own thread and must
/// return at once.
pub trait Executor: Send + 'static {
    /// Starts the workers of `launch` at `now`. Launching an attempt that already runs does nothing.
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError>;

    /// Makes the workers of `job` save a checkpoint and exit; returns the work saved, once they have
    /// exited, or [`ExecutorError::StillStopping`] (then [`Executor::poll`] reports
    /// [`WorkerEvent::Stopped`] with the work saved once they have).
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError>;

    /// Stops several jobs' workers; an executor of real processes stops them all at once, so that
    /// one round waits for the slowest checkpoint (up to its patience) rather than for the sum of them.
    fn stop_many(&mut self, jobs: &[JobId], now: f64) -> Vec<(JobId, Result<f64, ExecutorError>)> {
        jobs.iter().map(|&job| (job, self.stop(job, now))).collect()
    }

    /// The job's pace changed in place (its packing partner left, its batch changed): from `now`,
    /// `steps_per_second`, and then `pace`'s segments where it has some.
    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64);

    /// The job's CPUs and memory changed in place (a resource mechanism gave some back to a peer, or
    /// took more). Executors that enforce no allotment ignore it.
    fn reallot(&mut self, _job: JobId, _resources: Resources) {}

    /// The job's policy chose another global batch while it keeps its GPUs (Pollux retunes in
    /// place), for a job that adapts its batch. Executors whose workers cannot take it mid-run
    /// ignore it: the next launch carries it.
    fn rebatch(&mut self, _job: JobId, _batch: u32) {}

    /// Whether the workers of this attempt still run (to re-adopt them after a control-plane restart).
    fn alive(&mut self, job: JobId, attempt: u64) -> bool;

    /// What happened by `now`, in time order.
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent>;

    /// When the next event is due, for a virtual clock; `None` for an executor whose events come on
    /// their own (real processes).
    fn next_event(&self) -> Option<f64>;
}
