//! What the cluster actor is built from, and the messages it answers.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::job::{JobId, Names};
use gangway_core::placement::Placer;
use gangway_core::policy::Policy;
use gangway_core::throughput::ThroughputModel;
use gangway_core::throughput::goodput::Reports;
use gangway_journal::JournalError;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::clock::VirtualClock;
use crate::executor::Executor;
use crate::health::HealthProbe;
use crate::job::JobEvent;
use crate::stats::StatsSnapshot;

pub use crate::request::JobRequest;
pub use gangway_protocol::api::{
    ClusterSample, GpuCount, JobInfo, JobSizes, LearnedSteps, NodeInfo, OTHER_TENANTS, QUEUE_SHOWN,
    QueueBy, QueueOrder, Resize, RestartPhases,
};

/// Where control-plane time comes from.
#[derive(Clone)]
pub enum TimeSource {
    /// A driver sets the time (trace replays, the parity test).
    Virtual(Arc<VirtualClock>),
    /// The wall clock from the journal's epoch, `time_scale` times faster than real time. Rounds and
    /// executor polls run on timers.
    Wall {
        /// Control-plane seconds per real second (1 for real workers).
        time_scale: f64,
    },
}

/// How the control plane behaves.
#[derive(Clone)]
pub struct Settings {
    /// Round length, preemption costs, and whether arrivals and completions trigger a round.
    pub engine: EngineConfig,
    /// Where control-plane time comes from.
    pub time: TimeSource,
    /// Journal directory; `None` keeps no journal (nothing survives a restart).
    pub journal: Option<PathBuf>,
    /// How the journal is kept: its segments' size, and whether other users may pass through its
    /// directory (to a directory of theirs inside it).
    pub journal_options: gangway_journal::Options,
    /// Records between snapshots (each snapshot compacts the journal).
    pub snapshot_every: u64,
    /// Worker crashes retried per job before it fails.
    pub max_restarts: u32,
    /// The most unfinished jobs one user may have whose commands run as them rather than as the
    /// daemon's user (`run.user`: another user's jobs, on a root daemon); more are refused
    /// ([`Refusal::TooMany`]). The daemon's user and root are not limited.
    pub max_jobs_per_user: u32,
    /// The most bytes the commands of those unfinished jobs may hold in all (their arguments,
    /// environments and paths, kept in memory and in the journal while each job lives); more are
    /// refused ([`Refusal::TooLarge`]).
    pub max_command_bytes_per_user: u64,
    /// How often the executor is polled for worker events, in wall time.
    pub poll_every: Duration,
    /// The servers' names, in the cluster's node order (`GET /nodes`); `server-N` for those not
    /// named.
    pub node_names: Vec<String>,
    /// Where each job's learned goodput model is published as its workers report, for a model that
    /// reads them ([`gangway_core::throughput::goodput::Reported`]).
    pub reports: Reports,
}

impl Settings {
    /// `engine` and `time`, with the defaults for the rest: no journal, a snapshot every 100,000
    /// records, 3 restarts per job, no limit on another user's jobs, the executor polled every 20 ms,
    /// no server names, empty reports.
    pub fn new(engine: EngineConfig, time: TimeSource) -> Self {
        Settings {
            engine,
            time,
            journal: None,
            journal_options: gangway_journal::Options::default(),
            snapshot_every: 100_000,
            max_restarts: 3,
            max_jobs_per_user: u32::MAX,
            max_command_bytes_per_user: u64::MAX,
            poll_every: Duration::from_millis(20),
            node_names: Vec::new(),
            reports: Reports::default(),
        }
    }
}

/// What a control plane runs on.
pub struct Parts {
    /// The servers and their GPUs.
    pub cluster: Arc<Cluster>,
    /// How fast each job runs on each GPU type and count (the simulator's models).
    pub model: Arc<dyn ThroughputModel>,
    /// Names of the job types and tenants the model knows (their ids must match the model's).
    pub names: Names,
    /// Decides, every round, how many GPUs of each type each job gets.
    pub policy: Box<dyn Policy>,
    /// Picks the GPUs for each allocation.
    pub placer: Box<dyn Placer>,
    /// Runs and stops the jobs' workers.
    pub executor: Box<dyn Executor>,
    /// One health probe per GPU (by GPU id), polled every `health_every`; empty for none.
    pub probes: Vec<Box<dyn HealthProbe>>,
    /// How often each GPU's probe is polled, in wall time.
    pub health_every: Duration,
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The journal could not be opened or recovered (the error names the file).
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
}

/// A request the control plane refuses; nothing changed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// A field of the request is wrong (a 422 over the API).
    #[error("{field}: {problem}")]
    Invalid {
        /// The field, as the request names it.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// No job has this id.
    #[error("job {0} does not exist")]
    NoSuchJob(JobId),
    /// The job has already ended, so it cannot be cancelled.
    #[error("job {0} has already ended")]
    Ended(JobId),
    /// A submission names an id that a job already has.
    #[error("job {0} already exists")]
    Exists(JobId),
    /// An idempotency key names a job submitted with a different request.
    #[error("Idempotency-Key `{key}` was used for job {job} with a different request")]
    KeyReused {
        /// The key.
        key: String,
        /// The job it was first used for.
        job: JobId,
    },
    /// The user whose command it runs as has as many unfinished jobs as one user may (a 429 over
    /// the API).
    #[error(
        "uid {uid} has {unfinished} unfinished jobs, the most one user may have on this daemon \
         (gangway serve --max-jobs-per-user); submit more once some have ended"
    )]
    TooMany {
        /// The user.
        uid: u32,
        /// Their unfinished jobs, the limit.
        unfinished: u32,
    },
    /// The user whose command it runs as has unfinished jobs whose commands hold as many bytes as
    /// one user's may, with this one's (a 429 over the API).
    #[error(
        "uid {uid}'s unfinished jobs' commands (arguments, environments and paths) hold {bytes} \
         bytes; with this one's they would pass the {limit} bytes one user's may hold on this daemon \
         (gangway serve --max-command-mib-per-user): submit more once some have ended"
    )]
    TooLarge {
        /// The user.
        uid: u32,
        /// What their unfinished jobs' commands hold.
        bytes: u64,
        /// What one user's may hold, in bytes.
        limit: u64,
    },
}

/// Submits a job.
#[derive(Message)]
#[rtype(result = "Result<JobId, Refusal>")]
pub struct Submit {
    /// The job, as the API received it.
    pub request: JobRequest,
    /// Its arrival time; now when `None`.
    pub at: Option<f64>,
    /// An idempotency key: a submission with a key already journaled returns that job (and is
    /// refused if its request differs).
    pub key: Option<String>,
}

/// Cancels a job.
#[derive(Message)]
#[rtype(result = "Result<(), Refusal>")]
pub struct Cancel(pub JobId);

/// The user a job's command runs as, when not the control plane's own (`None`: its own, or a job
/// with no command): whom, beside the daemon's user and root, the API lets cancel it.
#[derive(Message)]
#[rtype(result = "Result<Option<u32>, Refusal>")]
pub struct RunsAs(pub JobId);

/// Runs a scheduling round now (after the changes already being carried out).
#[derive(Message)]
#[rtype(result = "RoundReport")]
pub struct Round;

/// What a round did ([`Round`]'s answer).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoundReport {
    /// Jobs it started (placed and launched, or relaunched after a move or resize).
    pub starts: usize,
    /// Jobs it stopped (to preempt, move or resize them).
    pub stops: usize,
    /// Starts that could not lease their gang or launch, and went back to the queue.
    pub failed_starts: usize,
    /// Started gangs whose batched lease was refused and that leased GPU by GPU instead (see
    /// [`crate::stats::Counters::leases_in_order`]).
    pub leased_in_order: usize,
    /// Seconds the policy and placer took (the rest of the round carries out their decisions).
    pub solve_seconds: f64,
}

/// Collects worker events from the executor and acts on them.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct Poll;

/// What a virtual-time driver needs to pick the next event.
#[derive(Message)]
#[rtype(result = "Outlook")]
pub struct Peek;

/// [`Peek`]'s answer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outlook {
    /// When the executor's next event is due.
    pub next_event: Option<f64>,
    /// No job waits or runs.
    pub idle: bool,
    /// GPUs held by runs now (a packed pair's GPUs count once).
    pub busy_gpus: u32,
}

/// Every job the control plane remembers, in id order.
#[derive(Message)]
#[rtype(result = "Vec<JobInfo>")]
pub struct ListJobs;

/// The servers, their GPUs and what runs on them.
#[derive(Message)]
#[rtype(result = "Vec<NodeInfo>")]
pub struct ListNodes;

/// One job, if the control plane remembers it.
#[derive(Message)]
#[rtype(result = "Option<JobInfo>")]
pub struct ShowJob(pub JobId);

/// The control plane's counters and latencies (what `GET /metrics` shows).
#[derive(Message)]
#[rtype(result = "StatsSnapshot")]
pub struct GetStats;

/// Where the published views are read ([`super::Views`]).
#[derive(Message)]
#[rtype(result = "super::Views")]
pub struct GetViews;

/// The event stream's sender, to subscribe.
#[derive(Message)]
#[rtype(result = "broadcast::Sender<JobEvent>")]
pub struct Subscribe;

/// An operator takes GPUs out of service (`cordoned`), or puts them back: the jobs on them checkpoint
/// and move, and nothing new lands on them. All of them change in one step, so that no round places
/// a moving job on a GPU about to be cordoned too.
#[derive(Message, Clone, Debug, Serialize, Deserialize)]
#[rtype(result = "Result<(), Refusal>")]
pub struct Cordon {
    /// The GPUs' ids.
    pub gpus: Vec<u32>,
    /// `true` to take them out of service, `false` to put them back.
    pub cordoned: bool,
}

/// Per-job records of a finished run, for comparisons with the simulator.
#[derive(Message)]
#[rtype(result = "BTreeMap<JobId, (Option<f64>, Option<f64>)>")]
pub struct Timeline;
