//! What the journal records, and the state that replaying it rebuilds.
//!
//! Every decision is appended (and fsynced) before it is acted on. [`Ledger::apply`] folds records into
//! the durable state, and checks the invariants as it goes: a job never starts while it runs, and a
//! GPU is never held by two jobs that are not each other's packing partner. Replaying a journal through
//! it is therefore also an audit of everything the control plane ever decided.

use std::collections::BTreeMap;

use gangway_core::cluster::{GpuSet, GpuTypeId};
use gangway_core::job::{JobId, Sizes};
use gangway_core::throughput::BatchPlan;
use gangway_core::throughput::goodput::perf::Observation;
use gangway_journal::{Journal, JournalError, Options, Recovered};
use serde::{Deserialize, Serialize};

use crate::IdMap;
use crate::executor::RunCommand;
use crate::lifecycle::Phase;

/// A job as it was submitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Its id, given by the control plane or by the submission (trace replays).
    pub id: JobId,
    /// Its model, by name (the throughput model's row).
    pub job_type: String,
    /// The user or team it belongs to, by name.
    pub tenant: String,
    /// GPUs it asked for (the most, for an elastic job; its [`Shape`] says the rest).
    pub gpus: u32,
    /// Work, in the units of the control plane's throughput model (seconds at the requested GPU count
    /// for the default duration model).
    pub total_steps: f64,
    /// Its priority weight, for the policies that weigh jobs.
    pub weight: f64,
    /// Control-plane seconds.
    pub arrival: f64,
    /// The command of a real job. Once the job has ended only its directory, log and user are
    /// kept: its arguments and environment may take up to
    /// [`crate::request::limits::MAX_COMMAND_BYTES`], and the ledger remembers [`HISTORY`] ended
    /// jobs.
    pub run: Option<RunCommand>,
    /// The idempotency key it was submitted with (scoped to its submitter): a retry with the same
    /// key gets this job, across restarts.
    pub key: Option<String>,
}

impl JobSpec {
    /// The user its command runs as, where that is another user than the daemon's (`run.user`, set
    /// by a root daemon to whoever submitted it).
    pub fn runs_as(&self) -> Option<u32> {
        Some(self.run.as_ref()?.user?.uid)
    }

    /// Keeps of its command only what an ended job needs: its directory, log and user. (A command
    /// has at least one argument, so one with none was forgotten.)
    fn forget_command(&mut self) {
        if let Some(run) = self.run.as_mut() {
            run.args = Vec::new();
            run.env = Default::default();
        }
    }

    /// Whether `run` could be the command it was submitted with: the same, or, once the job has
    /// ended and its arguments and environment are forgotten, the same directory, log and user.
    pub fn same_command(&self, run: Option<&RunCommand>) -> bool {
        match (self.run.as_ref(), run) {
            (Some(kept), Some(run)) if kept.args.is_empty() => {
                (&kept.cwd, &kept.log, kept.user) == (&run.cwd, &run.log, run.user)
            }
            (kept, run) => kept == run,
        }
    }
}

/// One journal record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// The control plane's clock: control-plane second 0 is this Unix time, and control-plane time
    /// runs `time_scale` times faster than the wall clock. The first record of a journal.
    Epoch {
        /// The Unix time of control-plane second 0.
        unix_seconds: f64,
        /// Control-plane seconds per real second.
        time_scale: f64,
    },
    /// A job was accepted (it is queued).
    Submitted(JobSpec),
    /// A start: the job's gang is `gpus`; `attempt` names this start everywhere (GPU leases, workers).
    Started(Start),
    /// The job stops running (preempted, moved, or its start failed); it keeps its last checkpoint.
    Stopped {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
    },
    /// The workers saved this much work.
    Checkpointed {
        /// The job.
        job: JobId,
        /// Work done at the checkpoint, in the units of [`JobSpec::total_steps`].
        steps_done: f64,
    },
    /// The job's workers completed its work.
    Finished {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
    },
    /// The job was cancelled.
    Cancelled {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
    },
    /// The job failed: a user error, or crashes beyond its restart budget.
    Failed {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
        /// What went wrong, as the executor reported it.
        error: String,
    },
    /// The job's workers crashed; it was requeued. Counts toward its restart budget.
    Crashed {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
    },
    /// An operator took these GPUs out of service (`cordoned`), or put them back.
    Cordoned {
        /// The GPUs' ids.
        gpus: Vec<u32>,
        /// `true`: out of service; `false`: back in.
        cordoned: bool,
    },
    /// What a job's workers measured on a configuration not measured before (on GPU type
    /// `gpu_type`), and its gradient statistics `(sqr, var)` then: what its goodput model is fitted
    /// to. New variants go last: the encoding numbers them, and old journals must still read.
    Learned {
        /// The job.
        job: JobId,
        /// The GPU type's index in the cluster's types.
        gpu_type: u16,
        /// The configuration and what one step took on it.
        observation: Observation,
        /// The gradient's squared norm and variance `(sqr, var)`, when the workers estimated them.
        grad: Option<(f64, f64)>,
    },
    /// A [`Record::Shaped`] as written before jobs could adapt their batch: read, no longer written.
    ShapedV1 {
        /// The job.
        job: JobId,
        /// What it asked.
        shape: ShapeV1,
    },
    /// A [`Record::Shaped`] as written before a job's pipeline stages could differ by GPU type:
    /// read, no longer written.
    ShapedV2 {
        /// The job.
        job: JobId,
        /// What it asked.
        shape: ShapeV2,
    },
    /// What a job asked of policies that resize jobs, when it asked more than its GPUs (an elastic
    /// or hybrid-parallel job, or a batch): written with its `Submitted`, in one batch.
    Shaped {
        /// The job.
        job: JobId,
        /// What it asked.
        shape: Shape,
    },
    /// The job stopped and started again at once, on `gpus` (moved or resized): one record where a
    /// `Stopped` and a `Started` would be. Refused, changing nothing, unless the job runs and, its own
    /// GPUs released, no job but its partner holds the new ones.
    Moved(Start),
    /// The job's starts have failed `count` times in a row for reasons of its own (its launch),
    /// the last at `at`, for `why`: what its pause before the next try, and its failure after too
    /// many, count from, so that a restart keeps them. Written at each such failure, and with
    /// `count` 0 when the job starts after one (or is found running at a restart).
    StartFailed {
        /// The job.
        job: JobId,
        /// When, in control-plane seconds.
        at: f64,
        /// Its starts that failed in a row for reasons of its own (0: none, since it started).
        count: u32,
        /// Why the last did (empty with `count` 0).
        why: String,
    },
}

/// A run's start, as [`Record::Started`] and [`Record::Moved`] journal it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Start {
    /// The job.
    pub job: JobId,
    /// The start's number, unique across the journal.
    pub attempt: u64,
    /// The type of its GPUs.
    pub gpu_type: GpuTypeId,
    /// Its GPUs.
    pub gpus: GpuSet,
    /// The job it shares these GPUs with (its packing partner), if any.
    pub partner: Option<JobId>,
    /// When, in control-plane seconds.
    pub at: f64,
}

/// What a job asks of policies that resize jobs, beyond its [`JobSpec`]: the GPU counts it runs on,
/// and its global batch: the one it is tuned for, or, when it adapts its batch, the range
/// `min_batch..=batch` a policy chooses within.
///
/// A hybrid-parallel job may name its pipeline stages on some GPU types (`pp_by_type`, by type name:
/// the journal outlives a cluster's numbering), where they differ from the `pp` in `sizes.multiple`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// The GPU counts it runs on: `min..=max`, multiples of `multiple` (its `tp x pp`).
    pub sizes: Sizes,
    /// The global batch it is tuned for, if it gave one; with `min_batch`, the largest it adapts to.
    pub batch: Option<u32>,
    /// The least global batch, for a job that adapts its batch (`None`: it keeps its batch).
    pub min_batch: Option<u32>,
    /// Its tensor-parallel degree (`sizes.multiple` is `tp x pp`).
    pub tp: u32,
    /// Pipeline stages on each GPU type (by name) where they differ from its own `pp`.
    pub pp_by_type: BTreeMap<String, u32>,
}

impl Shape {
    /// Exactly `gpus`, at its own batch.
    pub fn rigid(gpus: u32) -> Shape {
        Shape {
            sizes: Sizes::rigid(gpus),
            batch: None,
            min_batch: None,
            tp: 1,
            pp_by_type: BTreeMap::new(),
        }
    }

    /// The pipeline stages its workers run with on GPU type `gpu_type`, where it named them for
    /// that type (`None`: its own `pp`).
    pub fn stages_on(&self, gpu_type: &str) -> Option<u32> {
        self.pp_by_type.get(gpu_type).copied()
    }

    /// Its group (GPUs per data-parallel replica) on GPU type `gpu_type`, where it named its stages
    /// for that type (`None`: its `sizes.multiple` stands).
    fn named_group(&self, gpu_type: &str) -> Option<u32> {
        self.stages_on(gpu_type).map(|pp| self.tp * pp)
    }

    /// Its data-parallel replicas on `gpus` GPUs of type `gpu_type` (by name, where known): what a
    /// global batch is split across.
    pub fn replicas_on(&self, gpu_type: Option<&str>, gpus: u32) -> u32 {
        let group = gpu_type.and_then(|t| self.named_group(t));
        (gpus / group.unwrap_or(self.sizes.multiple).max(1)).max(1)
    }

    /// Its group on each of `types`, by the cluster's numbering, for the engine's job: 0 where it
    /// named no stages.
    pub fn group_by_type(&self, types: &[String]) -> Vec<u32> {
        if self.pp_by_type.is_empty() {
            return Vec::new();
        }
        let group = |name: &String| self.named_group(name).unwrap_or(0);
        types.iter().map(group).collect()
    }
}

impl Shape {
    /// The global batch a run on `replicas` replicas gets from its policy's `plan`, for a job that
    /// adapts its batch (kept within its range: a plan's split may round past it); `None` for a job
    /// that keeps its own, or when the policy chose none.
    pub fn chosen_batch(&self, plan: Option<BatchPlan>, replicas: u32) -> Option<u32> {
        let (min, max) = (self.min_batch?, self.batch?);
        Some(plan?.global(replicas).clamp(min, max))
    }
}

/// [`Shape`] as journaled before jobs could adapt their batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeV1 {
    /// See [`Shape::sizes`].
    pub sizes: Sizes,
    /// See [`Shape::batch`].
    pub batch: Option<u32>,
}

impl From<ShapeV1> for Shape {
    fn from(old: ShapeV1) -> Shape {
        Shape {
            sizes: old.sizes,
            batch: old.batch,
            ..Shape::rigid(0)
        }
    }
}

/// [`Shape`] as journaled before a job's pipeline stages could differ by GPU type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeV2 {
    /// See [`Shape::sizes`].
    pub sizes: Sizes,
    /// See [`Shape::batch`].
    pub batch: Option<u32>,
    /// See [`Shape::min_batch`].
    pub min_batch: Option<u32>,
}

impl From<ShapeV2> for Shape {
    fn from(old: ShapeV2) -> Shape {
        Shape {
            sizes: old.sizes,
            batch: old.batch,
            min_batch: old.min_batch,
            ..Shape::rigid(0)
        }
    }
}

impl Record {
    /// The job a record is about (`None` for the clock and cordons).
    pub fn job(&self) -> Option<JobId> {
        match self {
            Record::Epoch { .. } | Record::Cordoned { .. } => None,
            Record::Submitted(spec) => Some(spec.id),
            Record::Started(Start { job, .. })
            | Record::Stopped { job, .. }
            | Record::Checkpointed { job, .. }
            | Record::Finished { job, .. }
            | Record::Cancelled { job, .. }
            | Record::Failed { job, .. }
            | Record::Crashed { job, .. }
            | Record::Learned { job, .. }
            | Record::ShapedV1 { job, .. }
            | Record::ShapedV2 { job, .. }
            | Record::Shaped { job, .. }
            | Record::Moved(Start { job, .. })
            | Record::StartFailed { job, .. } => Some(*job),
        }
    }

    /// Whether it ends its job (finished, cancelled or failed).
    pub fn ends_job(&self) -> bool {
        matches!(
            self,
            Record::Finished { .. } | Record::Cancelled { .. } | Record::Failed { .. }
        )
    }

    /// The kinds of record, in the order of the enum's variants (as the encoding numbers them).
    pub const KINDS: [&'static str; 16] = [
        "epoch",
        "submitted",
        "started",
        "stopped",
        "checkpointed",
        "finished",
        "cancelled",
        "failed",
        "crashed",
        "cordoned",
        "learned",
        "shaped",
        "shaped",
        "shaped",
        "moved",
        "start_failed",
    ];

    /// The record's kind, as a word for reports.
    pub fn kind(&self) -> &'static str {
        Self::KINDS[match self {
            Record::Epoch { .. } => 0,
            Record::Submitted(_) => 1,
            Record::Started(_) => 2,
            Record::Stopped { .. } => 3,
            Record::Checkpointed { .. } => 4,
            Record::Finished { .. } => 5,
            Record::Cancelled { .. } => 6,
            Record::Failed { .. } => 7,
            Record::Crashed { .. } => 8,
            Record::Cordoned { .. } => 9,
            Record::Learned { .. } => 10,
            Record::ShapedV1 { .. } => 11,
            Record::ShapedV2 { .. } => 12,
            Record::Shaped { .. } => 13,
            Record::Moved(_) => 14,
            Record::StartFailed { .. } => 15,
        }]
    }
}

/// A snapshot: the ledger, and the records that rebuild what the store keeps beside it. Records
/// evolve by new variants only (the encoding numbers them), so state added after the ledger's format
/// was fixed goes here, not into the ledger.
pub type Snapshot = (Ledger, Vec<Record>);

/// The journal and what its recovery returned.
pub type Opened = (Journal<Record>, Recovered<Snapshot, Record>);

/// Opens the journal in `dir` with the default options (see [`open_journal_with`]).
pub fn open_journal(dir: &std::path::Path) -> Result<Opened, JournalError> {
    open_journal_with(dir, Options::default())
}

/// Opens the journal in `dir`. A snapshot written before snapshots kept records beside the ledger is
/// the ledger alone: one that does not decode as [`Snapshot`] is read as that. (Postcard refuses
/// trailing bytes and a missing field alike, so neither form reads as the other.)
pub fn open_journal_with(dir: &std::path::Path, options: Options) -> Result<Opened, JournalError> {
    match Journal::<Record>::open_with::<Snapshot>(dir, options) {
        Err(JournalError::Decode { path, .. }) if path.extension().is_some_and(|e| e == "snap") => {
            let (journal, recovered) = Journal::<Record>::open_with::<Ledger>(dir, options)?;
            let recovered = Recovered {
                snapshot: recovered.snapshot.map(|ledger| (ledger, Vec::new())),
                snapshot_seq: recovered.snapshot_seq,
                records: recovered.records,
                torn: recovered.torn,
            };
            Ok((journal, recovered))
        }
        other => other,
    }
}

/// What a torn tail that recovery truncated held, in terms of jobs: `None` when it held nothing
/// readable. The records were never acknowledged, so nothing was acted on; but a torn tail can also be
/// damage to committed records, and then these jobs are where to look.
pub fn torn_tail_report(torn: &gangway_journal::TornTail<Record>) -> String {
    let mut touched: BTreeMap<JobId, Vec<&'static str>> = BTreeMap::new();
    for record in &torn.readable {
        if let Some(job) = record.job() {
            touched.entry(job).or_default().push(record.kind());
        }
    }
    let dropped = torn.dropped();
    let mut unread = dropped.saturating_sub(torn.readable.len() as u64);
    // The record the cut went through: every kind but the clock and cordons starts with its job's id.
    if let [variant, job] = torn.cut_varints(2)[..]
        && let Some(&kind) = Record::KINDS.get(variant as usize)
        && kind != "epoch"
        && kind != "cordoned"
        && let Ok(job) = u32::try_from(job)
    {
        touched.entry(JobId(job)).or_default().push(kind);
        unread = unread.saturating_sub(1);
    }
    let mut jobs: Vec<String> = touched
        .iter()
        .map(|(job, kinds)| format!("job {job} ({})", kinds.join(", ")))
        .collect();
    if jobs.is_empty() {
        jobs.push("no job that can still be read".into());
    }
    let seqs = torn.seqs.as_ref().map_or(String::new(), |s| {
        format!(" (records {}..={})", s.start, s.end - 1)
    });
    format!(
        "journal: {}: dropped {dropped} record(s){seqs} in a torn tail of {} bytes at byte {}; they touched {}{}",
        torn.path.display(),
        torn.bytes,
        torn.offset,
        jobs.join(", "),
        if unread > 0 {
            format!(", and {unread} more that cannot be read")
        } else {
            String::new()
        }
    )
}

/// Where a job stands in the ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Standing {
    /// Waiting for GPUs: never started, or stopped with its checkpoint.
    Queued,
    /// Holding GPUs, as its last [`Record::Started`] said.
    Running {
        /// The start's number.
        attempt: u64,
        /// The type of its GPUs.
        gpu_type: GpuTypeId,
        /// Its GPUs.
        gpus: GpuSet,
        /// The job it shares them with, if any.
        partner: Option<JobId>,
    },
    /// Its work is done.
    Finished {
        /// When, in control-plane seconds.
        at: f64,
    },
    /// It was cancelled.
    Cancelled {
        /// When, in control-plane seconds.
        at: f64,
    },
    /// It failed.
    Failed {
        /// When, in control-plane seconds.
        at: f64,
        /// What went wrong.
        error: String,
    },
}

impl Standing {
    /// Whether the job has ended (finished, cancelled or failed): it never changes again.
    pub fn is_terminal(&self) -> bool {
        self.ended_phase().is_some()
    }

    /// The GPUs it runs on; `None` unless it runs.
    pub fn gpus(&self) -> Option<&GpuSet> {
        match self {
            Standing::Running { gpus, .. } => Some(gpus),
            _ => None,
        }
    }

    /// The lifecycle phase a job that has ended ended in; `None` while it lives.
    pub fn ended_phase(&self) -> Option<Phase> {
        match self {
            Standing::Finished { .. } => Some(Phase::Finished),
            Standing::Cancelled { .. } => Some(Phase::Cancelled),
            Standing::Failed { .. } => Some(Phase::Failed),
            Standing::Queued | Standing::Running { .. } => None,
        }
    }
}

/// One job in the ledger: as submitted, where it stands, and what it has done.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The job as it was submitted.
    pub spec: JobSpec,
    /// Where it stands.
    pub standing: Standing,
    /// Work saved by the last checkpoint.
    pub checkpoint: f64,
    /// Times it started.
    pub starts: u32,
    /// Times it stopped (and went back to the queue).
    pub stops: u32,
    /// Worker crashes so far (the restart budget spent).
    pub crashes: u32,
    /// When it first started.
    pub first_start: Option<f64>,
}

/// Ended jobs the ledger remembers, the most recent ones: a control plane that runs for months keeps
/// its active jobs and a bounded history, in memory and in its snapshots.
pub const HISTORY: usize = 10_000;

/// Of those, the most one user other than the daemon's keeps (jobs whose commands run as them):
/// submitting and cancelling in a loop, one user could otherwise push every other job's ending (its
/// answer, and its idempotency key) out of the history.
pub const HISTORY_PER_USER: usize = 1_000;

/// A record that breaks an invariant.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Violation {
    /// A record about a job never submitted (or already forgotten).
    #[error("record {seq}: job {job} is not known")]
    UnknownJob {
        /// The record's sequence number.
        seq: u64,
        /// The job.
        job: JobId,
    },
    /// A second submission of a job id.
    #[error("record {seq}: job {job} submitted twice")]
    Resubmitted {
        /// The record's sequence number.
        seq: u64,
        /// The job.
        job: JobId,
    },
    /// A start of a job that is running.
    #[error("record {seq}: job {job} started while it runs")]
    StartedTwice {
        /// The record's sequence number.
        seq: u64,
        /// The job.
        job: JobId,
    },
    /// A start on a GPU that another job holds, and not as its packing partner.
    #[error("record {seq}: job {job} takes GPU {gpu}, held by job {holder}")]
    GpuHeldTwice {
        /// The record's sequence number.
        seq: u64,
        /// The job that starts.
        job: JobId,
        /// The GPU's id.
        gpu: u32,
        /// The job that holds it.
        holder: JobId,
    },
    /// A record about a job that has ended.
    #[error("record {seq}: job {job} changes after it ended")]
    AfterEnd {
        /// The record's sequence number.
        seq: u64,
        /// The job.
        job: JobId,
    },
    /// A move of a job that does not run.
    #[error("record {seq}: job {job} moved while it does not run")]
    MovedIdle {
        /// The record's sequence number.
        seq: u64,
        /// The job.
        job: JobId,
    },
}

impl Violation {
    /// The job the refused record was about.
    pub fn job(&self) -> JobId {
        match self {
            Violation::UnknownJob { job, .. }
            | Violation::Resubmitted { job, .. }
            | Violation::StartedTwice { job, .. }
            | Violation::GpuHeldTwice { job, .. }
            | Violation::AfterEnd { job, .. }
            | Violation::MovedIdle { job, .. } => *job,
        }
    }
}

/// The jobs holding one GPU: one, or two packing partners.
pub type Holders = smallvec::SmallVec<[JobId; 2]>;

/// The durable state: every job, who holds which GPU, and the clock.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// The clock, from [`Record::Epoch`]: (Unix time of control-plane second 0, time scale).
    pub epoch: Option<(f64, f64)>,
    /// Every job it remembers: the live ones, and the last [`HISTORY`] that ended (in no order:
    /// [`Ledger::ids`] lists them in id order).
    pub jobs: IdMap<JobId, Entry>,
    /// GPU id -> the jobs holding it (two only for packing partners).
    pub holders: IdMap<u32, Holders>,
    /// The attempt number the next start gets: one more than any journaled.
    pub next_attempt: u64,
    /// The id the next submission gets unless it brings one: one more than any journaled.
    pub next_job_id: u32,
    /// Idempotency keys of submissions, and their jobs.
    pub keys: BTreeMap<String, JobId>,
    /// GPUs an operator took out of service.
    pub cordoned: std::collections::BTreeSet<u32>,
    /// Ended jobs, oldest first: beyond [`HISTORY`], the oldest are forgotten.
    pub ended: std::collections::VecDeque<JobId>,
    /// Of those, how many ran as each user other than the daemon's: what [`HISTORY_PER_USER`]
    /// bounds. Neither journaled nor snapshotted: a ledger read back counts them again
    /// ([`Ledger::count_ended_by_user`]).
    #[serde(skip)]
    ended_by_user: IdMap<u32, usize>,
    /// Ended jobs forgotten since [`Ledger::take_forgotten`] last took them (not kept either).
    #[serde(skip)]
    forgotten: Vec<JobId>,
}

impl Ledger {
    /// Folds record `seq` in; a record that breaks an invariant is refused and changes nothing.
    pub fn apply(&mut self, seq: u64, record: &Record) -> Result<(), Violation> {
        match record {
            Record::Epoch {
                unix_seconds,
                time_scale,
            } => self.epoch = Some((*unix_seconds, *time_scale)),
            Record::Submitted(spec) => {
                if self.jobs.contains_key(&spec.id) {
                    return Err(Violation::Resubmitted { seq, job: spec.id });
                }
                self.next_job_id = self.next_job_id.max(spec.id.0 + 1);
                if let Some(key) = &spec.key {
                    self.keys.insert(key.clone(), spec.id);
                }
                self.jobs.insert(
                    spec.id,
                    Entry {
                        spec: spec.clone(),
                        standing: Standing::Queued,
                        checkpoint: 0.0,
                        starts: 0,
                        stops: 0,
                        crashes: 0,
                        first_start: None,
                    },
                );
            }
            Record::Started(start) | Record::Moved(start) => {
                let Start {
                    job,
                    attempt,
                    gpu_type,
                    gpus,
                    partner,
                    at,
                } = start;
                let moves = matches!(record, Record::Moved(_));
                let entry = live(&mut self.jobs, seq, *job)?;
                match (moves, matches!(entry.standing, Standing::Running { .. })) {
                    (false, true) => return Err(Violation::StartedTwice { seq, job: *job }),
                    (true, false) => return Err(Violation::MovedIdle { seq, job: *job }),
                    _ => {}
                }
                check_free(&self.holders, seq, *job, gpus, *partner)?;
                if moves {
                    stop(&mut self.holders, *job, entry);
                }
                for g in gpus {
                    self.holders.entry(g.0).or_default().push(*job);
                }
                entry.standing = Standing::Running {
                    attempt: *attempt,
                    gpu_type: *gpu_type,
                    gpus: gpus.clone(),
                    partner: *partner,
                };
                entry.starts += 1;
                entry.first_start.get_or_insert(*at);
                self.next_attempt = self.next_attempt.max(attempt + 1);
            }
            Record::Stopped { job, .. } => {
                let entry = live(&mut self.jobs, seq, *job)?;
                stop(&mut self.holders, *job, entry);
            }
            Record::Checkpointed { job, steps_done } => {
                let entry = live(&mut self.jobs, seq, *job)?;
                entry.checkpoint = entry.checkpoint.max(*steps_done);
            }
            Record::Finished { job, at } => self.end(seq, *job, Standing::Finished { at: *at })?,
            Record::Cancelled { job, at } => {
                self.end(seq, *job, Standing::Cancelled { at: *at })?
            }
            Record::Crashed { job, .. } => live(&mut self.jobs, seq, *job)?.crashes += 1,
            Record::Cordoned { gpus, cordoned } => {
                for &g in gpus {
                    if *cordoned {
                        self.cordoned.insert(g);
                    } else {
                        self.cordoned.remove(&g);
                    }
                }
            }
            // What was learned, sizes and failed starts live beside the ledger (in the store):
            // only a live job learns, is shaped or fails to start.
            Record::Learned { job, .. }
            | Record::ShapedV1 { job, .. }
            | Record::ShapedV2 { job, .. }
            | Record::Shaped { job, .. }
            | Record::StartFailed { job, .. } => {
                live(&mut self.jobs, seq, *job)?;
            }
            Record::Failed { job, at, error } => self.end(
                seq,
                *job,
                Standing::Failed {
                    at: *at,
                    error: error.clone(),
                },
            )?,
        }
        Ok(())
    }

    fn end(&mut self, seq: u64, job: JobId, standing: Standing) -> Result<(), Violation> {
        let entry = live(&mut self.jobs, seq, job)?;
        release(&mut self.holders, job, &entry.standing);
        if matches!(standing, Standing::Finished { .. }) {
            entry.checkpoint = entry.spec.total_steps;
        }
        entry.standing = standing;
        entry.spec.forget_command();
        let user = entry.spec.runs_as();
        self.ended.push_back(job);
        if let Some(uid) = user {
            *self.ended_by_user.entry(uid).or_default() += 1;
            self.keep_within_users_history(uid);
        }
        while self.ended.len() > HISTORY {
            let Some(old) = self.ended.pop_front() else {
                break;
            };
            self.forget(old);
        }
        Ok(())
    }

    /// Forgets user `uid`'s oldest ended job if they have more than [`HISTORY_PER_USER`] in the
    /// history (looked for only then).
    fn keep_within_users_history(&mut self, uid: u32) {
        if self
            .ended_by_user
            .get(&uid)
            .is_none_or(|&n| n <= HISTORY_PER_USER)
        {
            return;
        }
        let oldest = (self.ended.iter())
            .position(|id| (self.jobs.get(id)).and_then(|e| e.spec.runs_as()) == Some(uid));
        if let Some(old) = oldest.and_then(|at| self.ended.remove(at)) {
            self.forget(old);
        }
    }

    /// Forgets ended job `old` (and its idempotency key).
    fn forget(&mut self, old: JobId) {
        let Some(entry) = self.jobs.remove(&old) else {
            return;
        };
        self.forgotten.push(old);
        if let Some(key) = &entry.spec.key {
            self.keys.remove(key);
        }
        if let Some(uid) = entry.spec.runs_as()
            && let Some(n) = self.ended_by_user.get_mut(&uid)
        {
            *n -= 1;
            if *n == 0 {
                self.ended_by_user.remove(&uid);
            }
        }
    }

    /// The ended jobs it forgot since the last call: what a reader of it forgets too.
    pub fn take_forgotten(&mut self) -> Vec<JobId> {
        std::mem::take(&mut self.forgotten)
    }

    /// Counts the ended jobs each user other than the daemon's has in the history, for a ledger
    /// read back from a snapshot (which does not keep the counts).
    pub fn count_ended_by_user(&mut self) {
        self.ended_by_user.clear();
        for id in &self.ended {
            if let Some(uid) = self.jobs.get(id).and_then(|e| e.spec.runs_as()) {
                *self.ended_by_user.entry(uid).or_default() += 1;
            }
        }
    }

    /// The ids of the jobs it remembers, in id order.
    pub fn ids(&self) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.jobs.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Jobs that have not ended, in id order.
    pub fn unfinished(&self) -> impl Iterator<Item = &Entry> {
        let ids = self.ids();
        ids.into_iter()
            .map(|id| &self.jobs[&id])
            .filter(|e| !e.standing.is_terminal())
    }
}

/// Job `job` of `jobs`, which exists and has not ended.
fn live(jobs: &mut IdMap<JobId, Entry>, seq: u64, job: JobId) -> Result<&mut Entry, Violation> {
    let entry = jobs
        .get_mut(&job)
        .ok_or(Violation::UnknownJob { seq, job })?;
    if entry.standing.is_terminal() {
        return Err(Violation::AfterEnd { seq, job });
    }
    Ok(entry)
}

/// Whether job `job` may take `gpus`: no job holds them but itself (about to release them) and
/// `partner`.
fn check_free(
    holders: &IdMap<u32, Holders>,
    seq: u64,
    job: JobId,
    gpus: &GpuSet,
    partner: Option<JobId>,
) -> Result<(), Violation> {
    for g in gpus {
        let on = holders.get(&g.0).map_or(&[][..], |h| h.as_slice());
        if let Some(&holder) = on.iter().find(|&&h| h != job && Some(h) != partner) {
            return Err(Violation::GpuHeldTwice {
                seq,
                job,
                gpu: g.0,
                holder,
            });
        }
    }
    Ok(())
}

/// Live job `job` (`entry`) stops: it releases its GPUs and queues.
fn stop(holders: &mut IdMap<u32, Holders>, job: JobId, entry: &mut Entry) {
    release(holders, job, &entry.standing);
    entry.standing = Standing::Queued;
    entry.stops += 1;
}

/// Job `job`, standing as `standing`, lets go of the GPUs it runs on.
fn release(holders: &mut IdMap<u32, Holders>, job: JobId, standing: &Standing) {
    let Some(gpus) = standing.gpus() else {
        return;
    };
    for g in gpus {
        if let Some(on) = holders.get_mut(&g.0) {
            on.retain(|h| *h != job);
            if on.is_empty() {
                holders.remove(&g.0);
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use gangway_core::cluster::GpuId;

    pub(crate) fn spec(id: u32) -> Record {
        Record::Submitted(JobSpec {
            id: JobId(id),
            job_type: "toy".into(),
            tenant: "default".into(),
            gpus: 2,
            total_steps: 100.0,
            weight: 1.0,
            arrival: 0.0,
            run: None,
            key: None,
        })
    }

    fn started(job: u32, attempt: u64, gpus: &[u32], partner: Option<u32>) -> Record {
        Record::Started(start(job, attempt, gpus, partner))
    }

    fn start(job: u32, attempt: u64, gpus: &[u32], partner: Option<u32>) -> Start {
        Start {
            job: JobId(job),
            attempt,
            gpu_type: GpuTypeId(0),
            gpus: gpus.iter().map(|&g| GpuId(g)).collect(),
            partner: partner.map(JobId),
            at: 0.0,
        }
    }

    fn moved(job: u32, attempt: u64, gpus: &[u32]) -> Record {
        Record::Moved(start(job, attempt, gpus, None))
    }

    /// `Started` held its fields itself before they were a [`Start`]: a journal written then
    /// reads the same (postcard writes a variant around a struct as it writes a struct variant).
    #[test]
    fn a_start_journaled_before_start_was_a_struct_reads_the_same() {
        #[derive(Serialize)]
        #[allow(dead_code)]
        enum Before {
            Epoch {
                unix_seconds: f64,
                time_scale: f64,
            },
            Submitted(JobSpec),
            Started {
                job: JobId,
                attempt: u64,
                gpu_type: GpuTypeId,
                gpus: GpuSet,
                partner: Option<JobId>,
                at: f64,
            },
        }
        let before = Before::Started {
            job: JobId(7),
            attempt: 3,
            gpu_type: GpuTypeId(1),
            gpus: [GpuId(4), GpuId(5)].into_iter().collect(),
            partner: Some(JobId(9)),
            at: 12.5,
        };
        let bytes = postcard::to_allocvec(&before).unwrap();
        let read: Record = postcard::from_bytes(&bytes).unwrap();
        let mut start = start(7, 3, &[4, 5], Some(9));
        (start.gpu_type, start.at) = (GpuTypeId(1), 12.5);
        assert_eq!(read, Record::Started(start.clone()));
        assert_eq!(
            postcard::to_allocvec(&Record::Started(start)).unwrap(),
            bytes
        );
    }

    /// A move is a stop and a start in one record: it may land on GPUs it holds, never on another
    /// job's, and only a running job moves; a refused move changes nothing.
    #[test]
    fn a_move_stops_and_starts_a_running_job_on_gpus_no_other_job_holds() {
        let mut ledger = Ledger::default();
        for (seq, r) in [spec(1), spec(2), spec(3), started(1, 1, &[0, 1], None)]
            .iter()
            .chain(&[started(2, 2, &[2], None)])
            .enumerate()
        {
            ledger.apply(seq as u64, r).unwrap();
        }
        let before = ledger.clone();
        assert_eq!(
            ledger.apply(9, &moved(3, 3, &[4])),
            Err(Violation::MovedIdle {
                seq: 9,
                job: JobId(3)
            })
        );
        assert_eq!(
            ledger.apply(10, &moved(1, 3, &[1, 2])),
            Err(Violation::GpuHeldTwice {
                seq: 10,
                job: JobId(1),
                gpu: 2,
                holder: JobId(2)
            })
        );
        assert_eq!(ledger, before, "a refused move changes nothing");
        // Growing in place: it keeps GPU 1 and takes 3 and 4.
        ledger.apply(11, &moved(1, 3, &[1, 3, 4])).unwrap();
        let entry = &ledger.jobs[&JobId(1)];
        assert!(
            matches!(&entry.standing, Standing::Running { attempt: 3, gpus, .. } if gpus.len() == 3)
        );
        assert_eq!((entry.starts, entry.stops), (2, 1));
        assert!(!ledger.holders.contains_key(&0));
        assert_eq!(ledger.holders[&1][..], [JobId(1)]);
        assert_eq!(ledger.next_attempt, 4);
    }

    /// A torn tail names the jobs of the records it dropped, including the one the cut went through,
    /// whatever its kind.
    #[test]
    fn a_torn_tail_names_the_jobs_and_kinds_it_dropped() {
        let samples = [
            spec(7),
            started(7, 1, &[0], None),
            Record::Stopped {
                job: JobId(7),
                at: 1.0,
            },
            Record::Checkpointed {
                job: JobId(7),
                steps_done: 5.0,
            },
            Record::Finished {
                job: JobId(7),
                at: 1.0,
            },
            Record::Cancelled {
                job: JobId(7),
                at: 1.0,
            },
            Record::Failed {
                job: JobId(7),
                at: 1.0,
                error: "x".into(),
            },
            Record::Crashed {
                job: JobId(7),
                at: 1.0,
            },
            moved(7, 2, &[1]),
            Record::StartFailed {
                job: JobId(7),
                at: 1.0,
                count: 2,
                why: "x".into(),
            },
        ];
        for record in samples {
            let batch = [spec(3), record.clone()];
            let frame = gangway_journal::fuzzing::frame(1, &batch).unwrap();
            let (records, torn) =
                gangway_journal::fuzzing::segment::<Record>(&frame[..frame.len() - 1], 1).unwrap();
            assert!(records.is_empty());
            let report = torn_tail_report(&torn.unwrap());
            let expected = format!(
                "dropped 2 record(s) (records 1..=2) in a torn tail of {} bytes at byte 0; they touched job 3 (submitted), job 7 ({})",
                frame.len() - 1,
                record.kind()
            );
            assert!(report.ends_with(&expected), "{report}");
        }
    }

    #[test]
    fn a_gpu_is_never_held_twice_except_by_partners() {
        let mut ledger = Ledger::default();
        for (seq, r) in [spec(1), spec(2), spec(3), started(1, 1, &[0, 1], Some(2))]
            .iter()
            .enumerate()
        {
            ledger.apply(seq as u64, r).unwrap();
        }
        let clash = started(3, 2, &[1, 2], None);
        assert_eq!(
            ledger.apply(9, &clash),
            Err(Violation::GpuHeldTwice {
                seq: 9,
                job: JobId(3),
                gpu: 1,
                holder: JobId(1)
            })
        );
        assert!(
            !ledger.holders.contains_key(&2),
            "a refused record changes nothing"
        );
        ledger.apply(10, &started(2, 3, &[0, 1], Some(1))).unwrap();
        assert_eq!(ledger.holders[&0][..], [JobId(1), JobId(2)]);
        ledger
            .apply(
                11,
                &Record::Stopped {
                    job: JobId(1),
                    at: 5.0,
                },
            )
            .unwrap();
        ledger
            .apply(
                12,
                &Record::Stopped {
                    job: JobId(2),
                    at: 5.0,
                },
            )
            .unwrap();
        ledger.apply(13, &clash).unwrap();
        assert_eq!(ledger.next_attempt, 4);
    }

    #[test]
    fn a_job_never_starts_while_it_runs_nor_moves_after_it_ends() {
        let mut ledger = Ledger::default();
        ledger.apply(0, &spec(1)).unwrap();
        ledger.apply(1, &started(1, 1, &[0], None)).unwrap();
        assert_eq!(
            ledger.apply(2, &started(1, 2, &[1], None)),
            Err(Violation::StartedTwice {
                seq: 2,
                job: JobId(1)
            })
        );
        ledger
            .apply(
                3,
                &Record::Checkpointed {
                    job: JobId(1),
                    steps_done: 40.0,
                },
            )
            .unwrap();
        ledger
            .apply(
                4,
                &Record::Finished {
                    job: JobId(1),
                    at: 9.0,
                },
            )
            .unwrap();
        assert_eq!(ledger.jobs[&JobId(1)].checkpoint, 100.0);
        assert!(ledger.holders.is_empty());
        assert_eq!(
            ledger.apply(
                5,
                &Record::Stopped {
                    job: JobId(1),
                    at: 9.0
                }
            ),
            Err(Violation::AfterEnd {
                seq: 5,
                job: JobId(1)
            })
        );
        assert_eq!(ledger.unfinished().count(), 0);
    }

    /// An ended job's command keeps what its answers need (its directory, log and user): its
    /// arguments and environment, up to 256 KiB, are not kept for [`HISTORY`] ended jobs.
    #[test]
    fn an_ended_jobs_command_keeps_only_its_directory_log_and_user() {
        let run = RunCommand {
            args: vec!["train.py".into(), "--lr".into()],
            cwd: "/home/a".into(),
            env: [("DATA".to_owned(), "x".repeat(1000))].into(),
            log: Some("/home/a/job.log".into()),
            user: Some(crate::executor::RunAs { uid: 7, gid: 7 }),
        };
        let Record::Submitted(mut submitted) = spec(1) else {
            unreachable!()
        };
        submitted.run = Some(run.clone());
        let mut ledger = Ledger::default();
        ledger.apply(0, &Record::Submitted(submitted)).unwrap();
        assert!(ledger.jobs[&JobId(1)].spec.same_command(Some(&run)));
        let mut other = run.clone();
        other.args.push("1e-3".into());
        assert!(!ledger.jobs[&JobId(1)].spec.same_command(Some(&other)));
        ledger
            .apply(
                1,
                &Record::Finished {
                    job: JobId(1),
                    at: 9.0,
                },
            )
            .unwrap();
        let kept = ledger.jobs[&JobId(1)].spec.run.clone().unwrap();
        assert!(kept.args.is_empty() && kept.env.is_empty(), "{kept:?}");
        assert_eq!(
            (&kept.cwd, &kept.log, kept.user),
            (&run.cwd, &run.log, run.user)
        );
        // A retry of the same submission is still that job's; one elsewhere is not.
        assert!(ledger.jobs[&JobId(1)].spec.same_command(Some(&run)));
        other.cwd = "/home/b".into();
        assert!(!ledger.jobs[&JobId(1)].spec.same_command(Some(&other)));
        assert!(!ledger.jobs[&JobId(1)].spec.same_command(None));
    }

    /// One user cancelling their own jobs in a loop pushes only their own out of the history:
    /// another's ending (and its idempotency key) stays.
    #[test]
    fn one_users_endings_never_push_anothers_out_of_the_history() {
        let mut ledger = Ledger::default();
        let mut seq = 0;
        let mut apply = |ledger: &mut Ledger, record: Record| {
            ledger.apply(seq, &record).unwrap();
            seq += 1;
        };
        let Record::Submitted(mut operators) = spec(0) else {
            unreachable!()
        };
        operators.key = Some("0:first".into());
        apply(&mut ledger, Record::Submitted(operators));
        apply(
            &mut ledger,
            Record::Finished {
                job: JobId(0),
                at: 1.0,
            },
        );
        let total = HISTORY as u32 + 5;
        for id in 1..=total {
            let Record::Submitted(mut theirs) = spec(id) else {
                unreachable!()
            };
            theirs.run = Some(RunCommand {
                args: vec!["train.py".into()],
                cwd: "/".into(),
                env: Default::default(),
                log: None,
                user: Some(crate::executor::RunAs { uid: 7, gid: 7 }),
            });
            apply(&mut ledger, Record::Submitted(theirs));
            apply(
                &mut ledger,
                Record::Cancelled {
                    job: JobId(id),
                    at: 2.0,
                },
            );
        }
        assert!(
            ledger.jobs.contains_key(&JobId(0)),
            "the operator's ending stays"
        );
        assert_eq!(ledger.keys.get("0:first"), Some(&JobId(0)));
        assert_eq!(ledger.ended.len(), HISTORY_PER_USER + 1);
        assert!(ledger.jobs.contains_key(&JobId(total)));
        assert!(
            !ledger
                .jobs
                .contains_key(&JobId(total - HISTORY_PER_USER as u32))
        );
        // A snapshot keeps no counts: read back, the ledger counts them again.
        let bytes = postcard::to_allocvec(&ledger).unwrap();
        let mut read: Ledger = postcard::from_bytes(&bytes).unwrap();
        assert_ne!(read, ledger, "the counts are not in the snapshot");
        read.count_ended_by_user();
        assert_eq!(
            ledger.take_forgotten().len(),
            total as usize - HISTORY_PER_USER
        );
        assert_eq!(read, ledger);
    }

    #[test]
    fn the_ledger_keeps_a_bounded_history_of_ended_jobs() {
        let mut ledger = Ledger::default();
        let mut seq = 0;
        let total = HISTORY as u32 + 5;
        for id in 0..total {
            for record in [
                spec(id),
                Record::Finished {
                    job: JobId(id),
                    at: f64::from(id),
                },
            ] {
                ledger.apply(seq, &record).unwrap();
                seq += 1;
            }
        }
        // One job still runs: it is kept whatever the history.
        ledger.apply(seq, &spec(total)).unwrap();
        assert_eq!(ledger.jobs.len(), HISTORY + 1);
        assert!(
            !ledger.jobs.contains_key(&JobId(4)),
            "the oldest are forgotten"
        );
        assert!(ledger.jobs.contains_key(&JobId(5)));
        assert!(ledger.jobs.contains_key(&JobId(total)));
        assert_eq!(ledger.ended.len(), HISTORY);
    }

    /// The jobs are kept in a hash map, in no order; what lists them lists them by id, and a
    /// snapshot, which writes them in the map's order, reads back the same.
    #[test]
    fn jobs_are_listed_by_id_whatever_order_they_came_in() {
        let mut ledger = Ledger::default();
        let ids = [17, 3, 250, 42, 0, 99, 7];
        for (seq, &id) in ids.iter().enumerate() {
            ledger.apply(seq as u64, &spec(id)).unwrap();
        }
        let ended = Record::Finished {
            job: JobId(42),
            at: 1.0,
        };
        ledger.apply(ids.len() as u64, &ended).unwrap();
        let mut sorted = ids.map(JobId);
        sorted.sort();
        assert_eq!(ledger.ids(), sorted);
        let unfinished: Vec<JobId> = ledger.unfinished().map(|e| e.spec.id).collect();
        let expected: Vec<JobId> = sorted.into_iter().filter(|&j| j != JobId(42)).collect();
        assert_eq!(unfinished, expected);
        let bytes = postcard::to_allocvec(&ledger).unwrap();
        let read: Ledger = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(read, ledger);
    }
}
