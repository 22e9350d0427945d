//! The scheduling state that the simulator and the live control plane share.
//!
//! Both drivers run the same [`Engine`], so that a policy decides the same way in both: the simulator's
//! event loop (the `sim` module, a driver of this engine) and the live control plane's cluster actor.
//! A driver submits jobs, reports completions, and calls [`Engine::schedule`] at round boundaries; with
//! [`Engine::record_changes`] on, the engine lists every start and stop a pass made, for the live
//! driver to carry out.
//!
//! The engine's rooms, one responsibility each:
//! - `admission`: submitting jobs, their names, the rate cache and the GPU type order;
//! - `input`: the [`RoundInput`](crate::policy::RoundInput) a policy sees;
//! - `reconcile`: turning grants into runs, through the placement steps the grants' intents name;
//! - `runs`: starting and stopping runs, and what they cost;
//! - `accounting`: attained service, GPU time, busy time and utilization, usage for policies;
//! - `completions`: when runs finish, indexed by time;
//! - `slots`: each job's slot, found by its id;
//! - `live`: what only a live driver needs (adoption, requeues, failed GPUs, the change log);
//! - `audit`: the invariants, checked on demand.

mod accounting;
mod admission;
mod audit;
mod completions;
mod config;
mod failure;
mod input;
mod live;
mod reconcile;
mod runs;
mod slots;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cluster::{Cluster, GpuSet, GpuTypeId};
use crate::job::{Job, JobId, Names};
use crate::metrics::JobRecord;
use crate::placement::{FreeGpus, Ledger, Unplaced};
use crate::policy::effective::FastestFirst;
use crate::policy::{Grant, Usage};
use crate::resources::Allotment;
use crate::throughput::locality::default_sensitivity;
use crate::throughput::{BatchPlan, ThroughputModel};

pub use accounting::{EngineTotals, new_record};
pub use admission::MAX_JOB_SECONDS;
pub use config::EngineConfig;
pub use failure::PolicyPanic;
pub use live::{Change, JobStatus, Rejected, Unrunnable};

use accounting::BusyTime;
use admission::NameIds;
use completions::CompletionIndex;
use slots::SlotIndex;

/// A job's current run.
#[derive(Clone, Debug)]
struct Run {
    /// The GPU type that sets its pace: its only type, or the slowest of a gang spanning types.
    gpu_type: GpuTypeId,
    gpus: GpuSet,
    /// Its GPUs span types (placed for an `Intent::MixedTypes` grant).
    mixed: bool,
    rate: f64,
    /// Work done at which `rate` stops holding (an epoch ends); infinite for models of constant rate.
    until: f64,
    /// The batch plan it runs with, when a policy chose one.
    batch: Option<BatchPlan>,
    /// CPUs and memory per GPU, charged to its servers; `None`: their proportional share.
    allotment: Option<Allotment>,
    /// How much its placement slows it (1 = ideal), kept to recompute the rate when a partner leaves.
    locality: f64,
    /// The job packed on the same GPUs, if any. The GPUs belong to the pair: they are free again only
    /// when both have stopped.
    partner: Option<usize>,
    /// Accounting is settled up to here.
    settled_to: f64,
    /// Progress starts here (after restore or migration costs).
    progress_from: f64,
    /// When this run started (for `last_run_seconds`).
    started: f64,
    /// When a policy that keeps its queue needs to be shown it again ([`Policy::look_again_at`]):
    /// until then its view changes only by what accrues as it runs.
    ///
    /// [`Policy::look_again_at`]: crate::policy::Policy::look_again_at
    look_again_at: f64,
}

#[derive(Clone, Debug)]
struct JobState {
    steps_done: f64,
    attained_gpu_seconds: f64,
    attained_seconds: f64,
    /// Kept inline, at 144 bytes more per waiting job: every pass reads each running job's run
    /// beside its state, and a box made that a second miss in the cache per running job.
    run: Option<Run>,
    last_gpus: GpuSet,
    /// Seconds of no progress owed at the next start (restore costs not yet paid).
    overhead_due: f64,
    /// Whether the last run made progress (so that a preemption has something to checkpoint).
    progressed: bool,
    queued_since: f64,
    last_run_seconds: f64,
    /// Lost its GPUs in this pass and has not (yet) been placed again.
    displaced: bool,
    /// Why it waits, after the last pass that left it without GPUs.
    waiting: Option<Unplaced>,
    /// When the current run will finish if nothing changes.
    finish_at: f64,
    /// Key of its completion in the completion index, once that falls within the current round.
    completion: Option<(u64, usize)>,
    /// Its place in admission order: the key of its entries in the active and running sets.
    order: u64,
    /// It is active (admitted, not ended).
    active: bool,
    /// It is listed in [`Engine::touched`].
    touched: bool,
    /// It may not start until released ([`Engine::hold`]): its last run's workers are still
    /// stopping.
    held: bool,
    /// It may not start before this time, and its policy does not see it until then
    /// ([`Engine::defer`]): a pause after starts that failed.
    deferred_until: Option<f64>,
    /// While a pass runs: its grant, by position in [`Engine::grants`] (none, or taken once placed
    /// or claimed as a partner's).
    grant: Option<u32>,
}

/// The scheduling state of a cluster: the jobs, who runs where, and the costs owed.
pub struct Engine<'m> {
    cluster: Arc<Cluster>,
    model: Arc<dyn ThroughputModel + 'm>,
    config: EngineConfig,
    /// The names job-type and tenant ids refer to.
    names: Names,
    /// Their ids by name: names are a client's to choose, so finding one must not cost a scan of all.
    name_ids: NameIds,
    /// Every job submitted so far, in submission order: a job's index is its position here.
    jobs: Vec<Job>,
    states: Vec<JobState>,
    /// Each job's record, beside its state: the records are what a run returns, handed over whole
    /// instead of copied out of every state at the end.
    records: Vec<JobRecord>,
    index_of: SlotIndex,
    /// Slots of forgotten jobs, reused by the next submissions (a live control plane forgets the jobs
    /// that ended, so that its memory follows its active jobs, not its history).
    vacant: Vec<usize>,
    /// rates[i * types + t]: steps/s of job i alone on its gang of type t (0 = cannot run).
    rates: Vec<f64>,
    /// The GPU types, fastest first for the jobs admitted so far.
    type_order: FastestFirst,
    /// Per job type: how much a poorly placed gang slows down (see `throughput::locality`).
    sensitivity: Vec<f64>,
    /// Per job type: its name, shared by its jobs' records.
    type_names: Vec<Arc<str>>,
    /// Active jobs as (admission order, index): in arrival order, each removed in O(log n), so that
    /// a job's end costs nothing that grows with the backlog.
    active: BTreeSet<(u64, usize)>,
    /// Running jobs as (admission order, index): what the per-round work visits, rather than every
    /// active job (a backlog far beyond the cluster must not make every round pay for it).
    running: BTreeSet<(u64, usize)>,
    /// Admissions so far, the next job's `order`.
    admissions: u64,
    /// Active jobs whose view may have changed since the policy's last call, apart from running ones
    /// (shown unless the policy is to look at them later): admitted, stopped or put back in the
    /// queue (for a policy that keeps its own queue).
    touched: Vec<usize>,
    /// Jobs that ended since the policy's last call.
    left: Vec<JobId>,
    /// Waiting jobs whose `waiting` may say something other than [`Unplaced::NotGranted`]: admitted,
    /// stopped, or given a reason by the last pass. The next pass resets them, instead of every
    /// waiting job.
    unexplained: Vec<usize>,
    /// Active jobs paused by [`Engine::defer`], each listed once: every pass releases those whose
    /// pause is over.
    deferred: Vec<usize>,
    free: FreeGpus,
    /// CPUs and memory in use per server.
    ledger: Ledger,
    /// GPUs out of service (failed, cordoned, or held by workers still stopping), per GPU id; they
    /// are neither free nor held.
    disabled: Vec<bool>,
    /// GPUs in service per type: what policies may allocate.
    capacity: Vec<u32>,
    completions: CompletionIndex,
    busy: BusyTime,
    /// The latest time up to which some job's progress has been counted.
    last_progress: f64,
    /// What ran since the last pass, for the policy.
    usage: Vec<Usage>,
    /// This pass's grants, while a pass runs, in the policy's order (each job's state names its
    /// own: a queue-keeping policy grants every running job each pass, so finding a grant is an
    /// index, not a lookup).
    grants: Vec<Grant>,
    finished: usize,
    jobs_changed: bool,
    /// Starts and stops since the last [`Engine::take_changes`], when recording.
    changes: Option<Vec<Change>>,
    /// The policy whose answers the runs' `look_again_at` are, by address: another one is shown
    /// every active job as changed.
    quiet_for: usize,
}

impl<'m> Engine<'m> {
    /// An empty cluster state. `names` name the ids of the jobs to come (more are added by
    /// [`Engine::intern_job_type`]); `start` is when accounting starts.
    pub fn new(
        cluster: Arc<Cluster>,
        model: Arc<dyn ThroughputModel + 'm>,
        config: EngineConfig,
        names: Names,
        start: f64,
    ) -> Self {
        let types = cluster.num_gpu_types();
        Engine {
            sensitivity: names
                .job_types
                .iter()
                .map(|t| default_sensitivity(t))
                .collect(),
            type_names: names
                .job_types
                .iter()
                .map(|t| Arc::from(t.as_str()))
                .collect(),
            name_ids: NameIds::of(&names),
            names,
            jobs: Vec::new(),
            states: Vec::new(),
            records: Vec::new(),
            index_of: SlotIndex::default(),
            vacant: Vec::new(),
            rates: Vec::new(),
            type_order: FastestFirst::new(types),
            active: BTreeSet::new(),
            running: BTreeSet::new(),
            admissions: 0,
            touched: Vec::new(),
            left: Vec::new(),
            unexplained: Vec::new(),
            deferred: Vec::new(),
            free: FreeGpus::new(&cluster),
            ledger: Ledger::new(&cluster),
            disabled: vec![false; cluster.num_gpus() as usize],
            capacity: cluster.capacity().to_vec(),
            completions: CompletionIndex::default(),
            busy: BusyTime::new(start),
            last_progress: f64::NEG_INFINITY,
            usage: Vec::new(),
            grants: Vec::new(),
            finished: 0,
            jobs_changed: false,
            changes: None,
            quiet_for: 0,
            cluster,
            model,
            config,
        }
    }

    /// The cluster it schedules, every GPU included (those out of service too).
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Its round length, costs and when it schedules between rounds.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Whether no job waits or runs.
    pub fn is_idle(&self) -> bool {
        self.active.is_empty()
    }

    /// Jobs admitted and not ended: waiting or running.
    pub fn active_jobs(&self) -> usize {
        self.active.len()
    }

    /// GPUs held by runs now (a packed pair's GPUs count once).
    pub fn busy_gpus(&self) -> u32 {
        self.busy.gpus
    }

    /// The latest time up to which some job's progress has been counted (as runs settle: when they
    /// stop or finish, or the engine looks at them).
    pub fn last_progress(&self) -> f64 {
        self.last_progress
    }

    /// Whether some job is making progress at `now`: it runs, past its restart or restore delay, at a
    /// positive rate. GPUs can be busy with none progressing, when jobs restart faster than they run.
    pub fn progressing(&self, now: f64) -> bool {
        self.running.iter().any(|&(_, i)| {
            self.states[i]
                .run
                .as_ref()
                .is_some_and(|run| run.progress_from <= now && run.rate > 0.0)
        })
    }

    /// Jobs that have finished so far (cancelled ones are not counted).
    pub fn finished_jobs(&self) -> usize {
        self.finished
    }

    /// A job submitted and not forgotten.
    pub fn job(&self, id: JobId) -> Option<&Job> {
        self.index_of.get(id).map(|i| &self.jobs[i])
    }

    fn types(&self) -> usize {
        self.cluster.num_gpu_types()
    }

    fn sensitivity_of(&self, i: usize) -> f64 {
        self.sensitivity[self.jobs[i].job_type.0 as usize]
    }

    /// The running jobs' indices, in arrival order (a copy: the caller may start and stop runs).
    fn running_now(&self) -> Vec<usize> {
        self.running.iter().map(|&(_, i)| i).collect()
    }

    /// Why job `i` may not start whatever it is granted, if it may not (a pause says so before a
    /// hold: it usually lasts longer).
    fn barred(&self, i: usize) -> Option<Unplaced> {
        let state = &self.states[i];
        match state.deferred_until {
            Some(until) => Some(Unplaced::Deferred { until }),
            None => state.held.then_some(Unplaced::Stopping),
        }
    }

    /// Job `i`'s view may have changed while it waits: the policy's next call hears of it.
    fn touch(&mut self, i: usize) {
        let state = &mut self.states[i];
        if !state.touched {
            state.touched = true;
            self.touched.push(i);
        }
    }
}
