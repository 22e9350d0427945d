//! The cluster actor: owns the scheduling state, runs the rounds, and carries out what they decide
//! through the job, gang and GPU actors and the executor.
//!
//! A round runs the same [`Engine`] the simulator runs, with the same policy and placer, on a blocking
//! thread. The starts and stops it lists are then journaled (fsynced) and only then carried out: stops
//! first (checkpoint, release the gang), then starts (lease the gang in two phases, launch). A start
//! whose gang cannot be leased or whose workers cannot launch goes back to the queue.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::join_all;
use gangway_core::cluster::{Cluster, GpuId};
use gangway_core::engine::{Change, Engine};
use gangway_core::job::{Job, JobId, Trace};
use gangway_core::policy::Policy;
use gangway_core::sim::{Placer, SimConfig};
use gangway_core::throughput::ThroughputModel;
use gangway_journal::{Journal, JournalError};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};

use crate::clock::{Clock, VirtualClock, WallClock};
use crate::executor::{Executor, Launch, RunCommand, WorkerEvent};
use crate::gang::{Acquire, Disband, GangActor};
use crate::gpu::{GpuActor, HealthChanged, Holder};
use crate::health::HealthProbe;
use crate::job::{Advance, JobActor, JobEvent};
use crate::ledger::{JobSpec, Ledger, Record, Standing};
use crate::lifecycle::Phase;
use crate::stats::{Stats, StatsSnapshot};

/// Where control-plane time comes from.
#[derive(Clone)]
pub enum TimeSource {
    /// A driver sets the time (trace replays, the parity test).
    Virtual(Arc<VirtualClock>),
    /// The wall clock from the journal's epoch, `time_scale` times faster than real time. Rounds and
    /// executor polls run on timers.
    Wall { time_scale: f64 },
}

/// How the control plane behaves.
#[derive(Clone)]
pub struct Settings {
    /// Round length, preemption costs, seed, and whether arrivals and completions trigger a round.
    pub sim: SimConfig,
    pub time: TimeSource,
    /// Journal directory; `None` keeps no journal (nothing survives a restart).
    pub journal: Option<PathBuf>,
    /// Records between snapshots (each snapshot compacts the journal).
    pub snapshot_every: u64,
    /// Worker crashes retried per job before it fails.
    pub max_restarts: u32,
    /// How often the executor is polled for worker events, in wall time.
    pub poll_every: Duration,
}

impl Settings {
    pub fn new(sim: SimConfig, time: TimeSource) -> Self {
        Settings {
            sim,
            time,
            journal: None,
            snapshot_every: 100_000,
            max_restarts: 3,
            poll_every: Duration::from_millis(20),
        }
    }
}

/// What a control plane runs on.
pub struct Parts {
    pub cluster: Arc<Cluster>,
    pub model: Arc<dyn ThroughputModel>,
    /// Names of the job types and tenants the model knows (their ids must match the model's).
    pub names: Trace,
    pub policy: Box<dyn Policy>,
    pub placer: Box<dyn Placer>,
    pub executor: Box<dyn Executor>,
    /// One health probe per GPU (by GPU id), polled every `health_every`; empty for none.
    pub probes: Vec<Box<dyn HealthProbe>>,
    pub health_every: Duration,
}

/// Why the control plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("journal: {0}")]
    Journal(#[from] JournalError),
}

/// A job to run, as the API receives it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobRequest {
    /// Set by trace replays; the control plane numbers jobs itself otherwise.
    #[serde(default)]
    pub id: Option<JobId>,
    #[serde(default = "default_name")]
    pub job_type: String,
    #[serde(default = "default_name")]
    pub tenant: String,
    pub gpus: u32,
    /// Work, in the model's units (seconds at the requested GPU count for the duration model).
    pub work: f64,
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// What to run, when the control plane runs real processes (`elastic-run --daemon` fills it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunCommand>,
}

fn default_name() -> String {
    "default".to_owned()
}

fn default_weight() -> f64 {
    1.0
}

/// A request the control plane refuses; nothing changed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Refusal {
    #[error("{field}: {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
    #[error("job {0} does not exist")]
    NoSuchJob(JobId),
    #[error("job {0} has already ended")]
    Ended(JobId),
    #[error("job {0} already exists")]
    Exists(JobId),
}

/// A job as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub id: JobId,
    pub job_type: String,
    pub tenant: String,
    pub gpus: u32,
    pub phase: Phase,
    pub submitted: f64,
    pub started: Option<f64>,
    pub finished: Option<f64>,
    /// Work done, between 0 and 1.
    pub progress: f64,
    /// The GPU ids it holds.
    pub placement: Vec<u32>,
    pub preemptions: u32,
    pub migrations: u32,
}

/// Submits a job.
#[derive(Message)]
#[rtype(result = "Result<JobId, Refusal>")]
pub struct Submit {
    pub request: JobRequest,
    /// Its arrival time; now when `None`.
    pub at: Option<f64>,
}

/// Cancels a job.
#[derive(Message)]
#[rtype(result = "Result<(), Refusal>")]
pub struct Cancel(pub JobId);

/// Runs a scheduling round now.
#[derive(Message)]
#[rtype(result = "RoundReport")]
pub struct Round;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RoundReport {
    pub starts: usize,
    pub stops: usize,
    /// Starts that could not lease their gang or launch, and went back to the queue.
    pub failed_starts: usize,
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

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outlook {
    /// When the executor's next event is due.
    pub next_event: Option<f64>,
    /// No job waits or runs.
    pub idle: bool,
    pub busy_gpus: u32,
}

#[derive(Message)]
#[rtype(result = "Vec<JobInfo>")]
pub struct ListJobs;

#[derive(Message)]
#[rtype(result = "Option<JobInfo>")]
pub struct ShowJob(pub JobId);

#[derive(Message)]
#[rtype(result = "StatsSnapshot")]
pub struct GetStats;

/// The event stream's sender, to subscribe.
#[derive(Message)]
#[rtype(result = "broadcast::Sender<JobEvent>")]
pub struct Subscribe;

/// The policy's state and the placer, with the engine they drive; moved to a blocking thread while a
/// round solves.
struct Scheduler {
    engine: Engine<'static>,
    policy: Box<dyn Policy>,
    placer: Box<dyn Placer>,
}

struct JobHandle {
    addr: Addr<JobActor>,
    phase: Phase,
    gang: Option<(Holder, Addr<GangActor>)>,
    crashes: u32,
}

/// A submission validated and waiting for its journal record: the spec, the engine's job, and where
/// to answer.
type Unjournaled = (JobSpec, Job, oneshot::Sender<Result<JobId, Refusal>>);

/// A stop to carry out.
struct StopStep {
    job: JobId,
    addr: Addr<JobActor>,
    gang: Option<Addr<GangActor>>,
    /// Workers to stop (not when they finished on their own).
    stop_workers: bool,
    /// Through Checkpointing (not when the job ends).
    checkpoint: bool,
    next: Phase,
}

/// A start to carry out.
struct StartStep {
    launch: Launch,
    addr: Addr<JobActor>,
    gang: Addr<GangActor>,
    /// Through Placing (a queued job), or straight to Starting (a job being moved or resized).
    via_placing: bool,
}

/// What carrying out a batch of changes came to.
#[derive(Default)]
struct Outcome {
    saved: Vec<(JobId, f64)>,
    failed_starts: Vec<(JobId, String)>,
    report: RoundReport,
}

pub struct ClusterActor {
    sched: Option<Scheduler>,
    journal: Option<Journal<Record>>,
    records_since_snapshot: u64,
    /// Sequence numbers when there is no journal.
    memory_seq: u64,
    ledger: Ledger,
    executor: Arc<Mutex<Box<dyn Executor>>>,
    clock: Arc<dyn Clock>,
    gpus: Vec<Addr<GpuActor>>,
    jobs: FxHashMap<JobId, JobHandle>,
    events: broadcast::Sender<JobEvent>,
    stats: Stats,
    settings: Settings,
    /// Jobs re-adopted at recovery whose gangs are leased once the actor runs.
    adopted: Vec<JobId>,
    round_queued: bool,
    /// Submissions validated and waiting to be journaled together.
    unjournaled: Vec<Unjournaled>,
    /// The id the next submission gets.
    next_job_id: u32,
}

impl ClusterActor {
    /// Recovers the journal (if any), rebuilds the state, and starts the actors. Must run inside an
    /// actix system.
    pub fn start(parts: Parts, settings: Settings) -> Result<Addr<ClusterActor>, StartError> {
        let recovery = Instant::now();
        let (journal, mut ledger, replayed) = match &settings.journal {
            Some(dir) => {
                let (journal, recovered) = Journal::<Record>::open::<Ledger>(dir)?;
                if let Some(torn) = &recovered.torn {
                    tracing::warn!("{}", crate::ledger::torn_tail_report(torn));
                }
                let mut ledger = recovered.snapshot.unwrap_or_default();
                let replayed = recovered.records.len() as u64;
                for (seq, record) in &recovered.records {
                    if let Err(v) = ledger.apply(*seq, record) {
                        tracing::error!(%v, "journal record breaks an invariant; skipped");
                    }
                }
                (Some(journal), ledger, replayed)
            }
            None => (None, Ledger::default(), 0),
        };
        let (clock, epoch): (Arc<dyn Clock>, Option<Record>) = match &settings.time {
            TimeSource::Virtual(clock) => (clock.clone(), None),
            TimeSource::Wall { time_scale } => {
                let (unix_seconds, time_scale) =
                    ledger.epoch.unwrap_or((WallClock::unix_now(), *time_scale));
                let record = ledger.epoch.is_none().then_some(Record::Epoch {
                    unix_seconds,
                    time_scale,
                });
                let clock = WallClock {
                    unix_epoch: unix_seconds,
                    time_scale,
                };
                (Arc::new(clock), record)
            }
        };
        let now = clock.now();
        let mut engine = Engine::new(
            Arc::clone(&parts.cluster),
            parts.model,
            settings.sim.clone(),
            parts.names,
            now,
        );
        engine.record_changes();
        let executor = Arc::new(Mutex::new(parts.executor));
        let (events, _) = broadcast::channel(4096);
        let num_gpus = parts.cluster.num_gpus();
        let probes = parts.probes;
        let health_every = parts.health_every;
        Ok(ClusterActor::create(move |ctx| {
            let watcher = ctx.address().recipient::<HealthChanged>();
            let mut probes = probes.into_iter();
            let gpus = (0..num_gpus)
                .map(|g| {
                    let actor = GpuActor::new(GpuId(g));
                    match probes.next() {
                        Some(probe) => actor.with_probe(probe, health_every, watcher.clone()),
                        None => actor,
                    }
                    .start()
                })
                .collect();
            let mut actor = ClusterActor {
                sched: None,
                journal,
                records_since_snapshot: replayed,
                memory_seq: 0,
                ledger: Ledger::default(),
                executor,
                clock,
                gpus,
                jobs: FxHashMap::default(),
                events,
                stats: Stats::default(),
                settings,
                adopted: Vec::new(),
                round_queued: false,
                unjournaled: Vec::new(),
                next_job_id: 0,
            };
            std::mem::swap(&mut actor.ledger, &mut ledger);
            actor.persist(epoch.as_slice());
            actor.recover(engine, parts.policy, parts.placer, now);
            actor.next_job_id = actor.ledger.next_job_id;
            actor.stats.recovery_seconds = recovery.elapsed().as_secs_f64();
            tracing::info!(
                seconds = actor.stats.recovery_seconds,
                jobs = actor.jobs.len(),
                replayed,
                "control plane recovered"
            );
            actor
        }))
    }

    /// Rebuilds the engine from the ledger: unfinished jobs are submitted again with their last
    /// checkpoint; those whose workers still run are re-adopted on their GPUs, the others requeued.
    fn recover(
        &mut self,
        mut engine: Engine<'static>,
        policy: Box<dyn Policy>,
        placer: Box<dyn Placer>,
        now: f64,
    ) {
        // Ended jobs still count toward the order in which GPU types are offered (sim/live parity).
        for entry in self.ledger.jobs.values() {
            if entry.standing.is_terminal() {
                let job = job_of(&mut engine, &entry.spec);
                engine.remember_ended(&job);
            }
        }
        let entries: Vec<_> = self.ledger.unfinished().cloned().collect();
        let mut requeued = Vec::new();
        for entry in &entries {
            let job = job_of(&mut engine, &entry.spec);
            let id = job.id;
            if engine.submit(job, entry.spec.arrival).is_err() {
                // The cluster changed under the journal: the job can never run here. It fails, and
                // gives back whatever the ledger says it held.
                tracing::error!(job = id.0, "a journaled job cannot run on this cluster");
                requeued.push(Record::Failed {
                    job: id,
                    at: now,
                    error: "cannot run on this cluster (it changed since the job was submitted)"
                        .into(),
                });
                continue;
            }
            engine.restore_progress(id, entry.checkpoint, entry.stops);
            let mut phase = Phase::Pending;
            if let Standing::Running {
                attempt,
                gpu_type,
                gpus,
                ..
            } = &entry.standing
            {
                let mut executor = self.executor.lock().expect("executor");
                let alive = executor.alive(id, *attempt);
                if alive && engine.adopt(id, *gpu_type, gpus.clone(), now).is_ok() {
                    phase = Phase::Running;
                    self.adopted.push(id);
                } else {
                    // Live workers that cannot be re-adopted (a packed partner's GPUs are taken by
                    // then) are stopped, so that the job never runs twice.
                    if alive && let Ok(saved) = executor.stop(id, now) {
                        requeued.push(Record::Checkpointed {
                            job: id,
                            steps_done: saved,
                        });
                        engine.restore_progress(id, saved, entry.stops);
                    }
                    requeued.push(Record::Stopped { job: id, at: now });
                }
            }
            self.add_job(id, phase);
        }
        // Changes from adoption are already journaled.
        engine.take_changes();
        self.sched = Some(Scheduler {
            engine,
            policy,
            placer,
        });
        self.persist(&requeued);
        let ended: Vec<Phase> = self
            .ledger
            .jobs
            .values()
            .filter_map(|e| e.standing.ended_phase())
            .collect();
        // Ended jobs need no actor: the API lists them from the ledger.
        for phase in ended {
            self.stats.note_end(phase);
        }
    }

    fn add_job(&mut self, id: JobId, phase: Phase) {
        let addr = JobActor::new(id, phase, self.events.clone()).start();
        self.jobs.insert(
            id,
            JobHandle {
                addr,
                phase,
                gang: None,
                crashes: 0,
            },
        );
    }

    fn engine(&mut self) -> &mut Engine<'static> {
        &mut self
            .sched
            .as_mut()
            .expect("the scheduler is home between rounds")
            .engine
    }

    /// Appends `records` to the journal (fsynced) and folds them into the ledger. Nothing is acted on
    /// before this returns.
    fn persist(&mut self, records: &[Record]) {
        if records.is_empty() {
            return;
        }
        let first = match self.journal.as_mut() {
            // The control plane cannot act on what it cannot record: it stops, and a restart recovers
            // from what did reach the disk.
            Some(journal) => match journal.append_batch(records) {
                Ok(seqs) => seqs.start,
                Err(e) => {
                    // A panic would end only this actor and leave the API up; end the process.
                    tracing::error!(error = %e, "journal append failed; stopping");
                    eprintln!("gangway: journal append failed: {e}; stopping");
                    std::process::abort();
                }
            },
            None => self.memory_seq,
        };
        self.memory_seq = first + records.len() as u64;
        for (k, record) in records.iter().enumerate() {
            if let Err(v) = self.ledger.apply(first + k as u64, record) {
                tracing::error!(%v, "decision breaks an invariant");
                self.stats.violations += 1;
            }
        }
        self.records_since_snapshot += records.len() as u64;
        if self.records_since_snapshot >= self.settings.snapshot_every
            && let Some(journal) = self.journal.as_mut()
        {
            match journal.snapshot(&self.ledger) {
                Ok(_) => self.records_since_snapshot = 0,
                Err(e) => tracing::warn!(error = %e, "snapshot failed; the journal keeps growing"),
            }
        }
    }

    /// Journals `changes` and turns them into steps, then carries the steps out. `ending` names jobs
    /// whose stop ends them (finished, cancelled, failed).
    fn carry_out(
        &mut self,
        changes: Vec<Change>,
        now: f64,
        ending: FxHashMap<JobId, Phase>,
    ) -> ResponseActFuture<Self, RoundReport> {
        let mut records = Vec::new();
        let mut stopped = Vec::new();
        let mut launches = Vec::new();
        let mut retunes = Vec::new();
        let mut attempt = self.ledger.next_attempt;
        for change in changes {
            match change {
                Change::Stopped { job, .. } => {
                    if !ending.contains_key(&job) {
                        records.push(Record::Stopped { job, at: now });
                    }
                    stopped.push(job);
                }
                Change::Started {
                    job,
                    gpu_type,
                    gpus,
                    partner,
                    steps_per_second,
                    startup_seconds,
                    remaining_steps,
                } => {
                    records.push(Record::Started {
                        job,
                        attempt,
                        gpu_type,
                        gpus: gpus.clone(),
                        partner,
                        at: now,
                    });
                    let spec = self.ledger.jobs.get(&job).map(|e| &e.spec);
                    let total_steps = spec.map_or(0.0, |s| s.total_steps);
                    let run = spec.and_then(|s| s.run.clone());
                    launches.push((
                        Launch {
                            job,
                            attempt,
                            gpu_type,
                            gpus,
                            steps_per_second,
                            startup_seconds,
                            remaining_steps,
                            total_steps,
                            run,
                        },
                        partner,
                    ));
                    attempt += 1;
                }
                Change::Retuned {
                    job,
                    steps_per_second,
                } => retunes.push((job, steps_per_second)),
            }
        }
        // The gang sizes the stopped jobs held, to tell a move from a resize.
        let held: FxHashMap<JobId, usize> = stopped
            .iter()
            .filter_map(|job| match self.ledger.jobs.get(job).map(|e| &e.standing) {
                Some(Standing::Running { gpus, .. }) => Some((*job, gpus.len())),
                _ => None,
            })
            .collect();
        self.persist(&records);

        let restarting: FxHashMap<JobId, usize> = launches
            .iter()
            .map(|(l, _)| (l.job, l.gpus.len()))
            .collect();
        let stops: Vec<StopStep> = stopped
            .into_iter()
            .filter_map(|job| {
                let handle = self.jobs.get_mut(&job)?;
                let gang = handle.gang.take().map(|(_, g)| g);
                let next = match (ending.get(&job), restarting.get(&job)) {
                    (Some(&end), _) => end,
                    (None, Some(gpus)) if held.get(&job) == Some(gpus) => Phase::Migrating,
                    (None, Some(_)) => Phase::Resizing,
                    (None, None) => Phase::Preempted,
                };
                let step = StopStep {
                    job,
                    addr: handle.addr.clone(),
                    gang,
                    stop_workers: next != Phase::Finished,
                    checkpoint: !next.is_terminal(),
                    next,
                };
                handle.phase = next;
                Some(step)
            })
            .collect();
        let starts: Vec<StartStep> = launches
            .into_iter()
            .filter_map(|(launch, partner)| {
                let handle = self.jobs.get_mut(&launch.job)?;
                let holder = Holder {
                    job: launch.job,
                    attempt: launch.attempt,
                };
                let gpus = launch
                    .gpus
                    .iter()
                    .map(|&g| (g, self.gpus[g.0 as usize].clone()))
                    .collect();
                let gang = GangActor::new(holder, partner, gpus).start();
                let via_placing = matches!(handle.phase, Phase::Pending | Phase::Preempted);
                handle.gang = Some((holder, gang.clone()));
                handle.phase = Phase::Running;
                Some(StartStep {
                    launch,
                    addr: handle.addr.clone(),
                    gang,
                    via_placing,
                })
            })
            .collect();
        let moved = stops
            .iter()
            .filter(|s| matches!(s.next, Phase::Migrating | Phase::Resizing))
            .count();
        let preempted = stops.iter().filter(|s| s.next == Phase::Preempted).count();
        self.stats.note_changes(preempted, moved, starts.len());

        let executor = Arc::clone(&self.executor);
        let work = async move {
            let mut outcome = Outcome::default();
            outcome.report.stops = stops.len();
            outcome.report.starts = starts.len();
            // Stops: checkpoint, release the gang, move on.
            let advance = |steps: &[StopStep], pick: fn(&StopStep) -> Option<Phase>| {
                join_all(
                    steps
                        .iter()
                        .filter_map(|s| pick(s).map(|to| s.addr.send(Advance { to, at: now }))),
                )
            };
            log_refusals(advance(&stops, |s| s.checkpoint.then_some(Phase::Checkpointing)).await);
            let to_stop: Vec<JobId> = stops
                .iter()
                .filter(|s| s.stop_workers)
                .map(|s| s.job)
                .collect();
            let exec = Arc::clone(&executor);
            outcome.saved = blocking(move || {
                let mut exec = exec.lock().expect("executor");
                let saved = exec
                    .stop_many(&to_stop, now)
                    .into_iter()
                    .filter_map(|(job, stopped)| match stopped {
                        Ok(steps) => Some((job, steps)),
                        Err(e) => {
                            tracing::warn!(error = %e, "stopping workers");
                            None
                        }
                    })
                    .collect();
                for (job, rate) in retunes {
                    exec.retune(job, rate, now);
                }
                saved
            })
            .await;
            join_all(
                stops
                    .iter()
                    .filter_map(|s| s.gang.as_ref().map(|g| g.send(Disband))),
            )
            .await;
            log_refusals(advance(&stops, |s| Some(s.next)).await);

            // Starts: lease each gang in two phases, then launch.
            log_refusals(
                join_all(starts.iter().filter(|s| s.via_placing).map(|s| {
                    s.addr.send(Advance {
                        to: Phase::Placing,
                        at: now,
                    })
                }))
                .await,
            );
            let leased = join_all(starts.iter().map(|s| s.gang.send(Acquire))).await;
            let mut ready = Vec::new();
            for (step, lease) in starts.iter().zip(leased) {
                match lease {
                    Ok(Ok(())) => ready.push(step.launch.clone()),
                    Ok(Err(e)) => outcome.failed_starts.push((step.launch.job, e.to_string())),
                    Err(e) => outcome.failed_starts.push((step.launch.job, e.to_string())),
                }
            }
            let exec = Arc::clone(&executor);
            let launch_failures: Vec<(JobId, String)> = blocking(move || {
                let mut exec = exec.lock().expect("executor");
                ready
                    .iter()
                    .filter_map(|l| exec.launch(l, now).err().map(|e| (l.job, e.to_string())))
                    .collect()
            })
            .await;
            outcome.failed_starts.extend(launch_failures);
            let failed: FxHashSet<JobId> = outcome.failed_starts.iter().map(|(j, _)| *j).collect();
            let moves = starts.iter().map(|step| {
                let failed = failed.contains(&step.launch.job);
                if failed {
                    step.gang.do_send(Disband);
                }
                async move {
                    let path: &[Phase] = if failed {
                        &[Phase::Pending]
                    } else {
                        &[Phase::Starting, Phase::Running]
                    };
                    let mut results = Vec::new();
                    for &to in path {
                        results.push(step.addr.send(Advance { to, at: now }).await);
                    }
                    results
                }
            });
            log_refusals(join_all(moves).await.into_iter().flatten().collect());
            outcome.report.failed_starts = outcome.failed_starts.len();
            outcome
        };
        Box::pin(
            work.into_actor(self)
                .map(move |outcome, actor, _| actor.settle(outcome, now)),
        )
    }

    /// Journals the checkpoints the stops saved, and requeues the starts that failed.
    fn settle(&mut self, outcome: Outcome, now: f64) -> RoundReport {
        // A job that ended (cancelled) keeps no checkpoint.
        let mut records: Vec<Record> = outcome
            .saved
            .iter()
            .filter(|(job, _)| {
                self.ledger
                    .jobs
                    .get(job)
                    .is_some_and(|e| !e.standing.is_terminal())
            })
            .map(|&(job, steps_done)| Record::Checkpointed { job, steps_done })
            .collect();
        for (job, why) in &outcome.failed_starts {
            tracing::warn!(job = job.0, %why, "start failed; back to the queue");
            if self.engine().requeue(*job, now, None).is_ok() {
                records.push(Record::Stopped { job: *job, at: now });
            }
            if let Some(handle) = self.jobs.get_mut(job) {
                handle.phase = Phase::Pending;
                handle.gang = None;
            }
        }
        // A failed start's partner runs alone; the executor follows.
        let retunes: Vec<(JobId, f64)> = self
            .engine()
            .take_changes()
            .into_iter()
            .filter_map(|c| match c {
                Change::Retuned {
                    job,
                    steps_per_second,
                } => Some((job, steps_per_second)),
                _ => None,
            })
            .collect();
        if !retunes.is_empty() {
            let mut exec = self.executor.lock().expect("executor");
            for (job, rate) in retunes {
                exec.retune(job, rate, now);
            }
        }
        self.persist(&records);
        outcome.report
    }

    fn current_attempt(&self, job: JobId) -> Option<u64> {
        match self.ledger.jobs.get(&job).map(|e| &e.standing) {
            Some(Standing::Running { attempt, .. }) => Some(*attempt),
            _ => None,
        }
    }

    fn info(&mut self, id: JobId) -> Option<JobInfo> {
        let entry = self.ledger.jobs.get(&id)?;
        let spec = entry.spec.clone();
        let phase = self.jobs.get(&id).map_or(
            entry.standing.ended_phase().unwrap_or(Phase::Pending),
            |h| h.phase,
        );
        let checkpoint = entry.checkpoint;
        let status = self.engine().status(id);
        let (done, started, finished, placement, preemptions, migrations) = match &status {
            Some(s) => (
                s.steps_done,
                s.record.first_start,
                s.record.finish,
                s.gpus.iter().flatten().map(|g| g.0).collect(),
                s.record.preemptions,
                s.record.migrations,
            ),
            None => (checkpoint, None, None, Vec::new(), 0, 0),
        };
        Some(JobInfo {
            id,
            job_type: spec.job_type,
            tenant: spec.tenant,
            gpus: spec.gpus,
            phase,
            submitted: spec.arrival,
            started,
            finished,
            progress: if spec.total_steps > 0.0 {
                (done / spec.total_steps).clamp(0.0, 1.0)
            } else {
                1.0
            },
            placement,
            preemptions,
            migrations,
        })
    }

    fn validate(&self, request: &JobRequest) -> Result<(), Refusal> {
        let invalid = |field, problem: String| Err(Refusal::Invalid { field, problem });
        if request.gpus == 0 {
            return invalid("gpus", "must be at least 1".into());
        }
        if !request.work.is_finite() || request.work <= 0.0 {
            return invalid(
                "work",
                format!("must be a positive number, not {}", request.work),
            );
        }
        if !request.weight.is_finite() || request.weight <= 0.0 {
            return invalid(
                "weight",
                format!("must be a positive number, not {}", request.weight),
            );
        }
        for (field, name) in [("job_type", &request.job_type), ("tenant", &request.tenant)] {
            if name.is_empty() || name.len() > 200 {
                return invalid(field, "must be 1 to 200 characters".into());
            }
        }
        if let Some(id) = request.id
            && (self.ledger.jobs.contains_key(&id)
                || self.unjournaled.iter().any(|(spec, _, _)| spec.id == id))
        {
            return Err(Refusal::Exists(id));
        }
        Ok(())
    }
}

/// A job of the engine's from a journaled spec, interning its names.
fn job_of(engine: &mut Engine<'static>, spec: &JobSpec) -> Job {
    Job {
        id: spec.id,
        arrival: spec.arrival,
        job_type: engine.intern_job_type(&spec.job_type),
        gpus: spec.gpus,
        total_steps: spec.total_steps,
        weight: spec.weight,
        tenant: engine.intern_tenant(&spec.tenant),
    }
}

/// Runs `f` on tokio's blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking control-plane task panicked")
}

/// Illegal transitions are bugs in the control plane, not in its input: log them loudly.
fn log_refusals<E: std::fmt::Display>(results: Vec<Result<Result<Phase, E>, MailboxError>>) {
    for result in results {
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "job refused a transition"),
            Err(e) => tracing::error!(error = %e, "job actor unreachable"),
        }
    }
}

impl Actor for ClusterActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Re-adopted jobs lease their gangs again before anything else happens.
        let adopted = std::mem::take(&mut self.adopted);
        let mut leases = Vec::new();
        for job in adopted {
            let Some(Standing::Running {
                attempt,
                gpus,
                partner,
                ..
            }) = self.ledger.jobs.get(&job).map(|e| e.standing.clone())
            else {
                continue;
            };
            let holder = Holder { job, attempt };
            let addrs = gpus
                .iter()
                .map(|&g| (g, self.gpus[g.0 as usize].clone()))
                .collect();
            let gang = GangActor::new(holder, partner, addrs).start();
            leases.push(gang.send(Acquire));
            if let Some(handle) = self.jobs.get_mut(&job) {
                handle.gang = Some((holder, gang));
            }
        }
        ctx.wait(join_all(leases).into_actor(self).map(|results, _, _| {
            for result in results {
                if !matches!(result, Ok(Ok(()))) {
                    tracing::error!(?result, "a re-adopted job could not lease its GPUs");
                }
            }
        }));
        if let TimeSource::Wall { time_scale } = self.settings.time {
            let round =
                Duration::from_secs_f64((self.settings.sim.round_length / time_scale).max(0.001));
            ctx.run_interval(round, |actor, ctx| actor.queue_round(ctx));
            ctx.run_interval(self.settings.poll_every, |_, ctx| ctx.notify(Poll));
        }
    }
}

impl ClusterActor {
    /// Queues a round unless one is already queued.
    fn queue_round(&mut self, ctx: &mut Context<Self>) {
        if !std::mem::replace(&mut self.round_queued, true) {
            ctx.notify(Round);
        }
    }
}

impl Handler<Round> for ClusterActor {
    type Result = AtomicResponse<Self, RoundReport>;

    fn handle(&mut self, _: Round, _: &mut Context<Self>) -> Self::Result {
        self.round_queued = false;
        let now = self.clock.now();
        let began = Instant::now();
        let mut sched = self.sched.take().expect("one round at a time");
        if sched.engine.is_idle() {
            self.sched = Some(sched);
            return AtomicResponse::new(Box::pin(fut::ready(RoundReport::default())));
        }
        let span = tracing::info_span!("round", now, jobs = sched.engine.active_jobs());
        let solve = blocking(move || {
            let _span = span.entered();
            let solving = Instant::now();
            let Scheduler {
                engine,
                policy,
                placer,
            } = &mut sched;
            engine.schedule(policy.as_mut(), placer.as_mut(), now);
            if engine.config().audit {
                engine.audit();
            }
            (sched, solving.elapsed().as_secs_f64())
        });
        AtomicResponse::new(Box::pin(
            solve
                .into_actor(self)
                .then(move |(mut sched, solve_seconds), actor, _| {
                    let changes = sched.engine.take_changes();
                    actor.sched = Some(sched);
                    actor
                        .carry_out(changes, now, FxHashMap::default())
                        .map(move |report, _, _| RoundReport {
                            solve_seconds,
                            ..report
                        })
                })
                .map(move |report, actor, _| {
                    actor.stats.note_round(began.elapsed());
                    report
                }),
        ))
    }
}

impl Handler<Poll> for ClusterActor {
    type Result = AtomicResponse<Self, usize>;

    fn handle(&mut self, _: Poll, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now();
        // Polling only drains what the workers reported; it never blocks.
        let events = self.executor.lock().expect("executor").poll(now);
        let count = events.len();
        let mut records = Vec::new();
        let mut ending = FxHashMap::default();
        let mut requeue = Vec::new();
        // The ledger learns of this batch only after the loop: one event per job ends it.
        let mut ended = FxHashSet::default();
        for event in events {
            let job = match &event {
                WorkerEvent::Finished { job, .. }
                | WorkerEvent::Failed { job, .. }
                | WorkerEvent::Checkpointed { job, .. } => *job,
            };
            if ended.contains(&job) {
                continue;
            }
            match event {
                WorkerEvent::Finished { job, attempt, at }
                    if self.current_attempt(job) == Some(attempt) =>
                {
                    records.push(Record::Finished { job, at });
                    ending.insert(job, Phase::Finished);
                    ended.insert(job);
                }
                WorkerEvent::Checkpointed {
                    job,
                    attempt,
                    steps_done,
                } if self.current_attempt(job) == Some(attempt) => {
                    records.push(Record::Checkpointed { job, steps_done });
                }
                WorkerEvent::Failed {
                    job,
                    attempt,
                    at,
                    error,
                    retryable,
                } if self.current_attempt(job) == Some(attempt) => {
                    let crashes = self.jobs.get_mut(&job).map_or(u32::MAX, |h| {
                        h.crashes += 1;
                        h.crashes
                    });
                    ended.insert(job);
                    if retryable && crashes <= self.settings.max_restarts {
                        tracing::warn!(job = job.0, %error, crashes, "workers crashed; requeued");
                        // Journaled as stopped by carry_out, with the engine's change.
                        requeue.push(job);
                    } else {
                        tracing::warn!(job = job.0, %error, "job failed");
                        records.push(Record::Failed { job, at, error });
                        ending.insert(job, Phase::Failed);
                    }
                }
                stale => tracing::debug!(?stale, "event from an old attempt ignored"),
            }
        }
        self.persist(&records);
        for record in &records {
            let result = match record {
                Record::Finished { job, at } => self.engine().finish(*job, *at),
                Record::Failed { job, at, .. } => self.engine().cancel(*job, *at),
                _ => Ok(()),
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "worker event for a job the engine does not run");
            }
        }
        for job in requeue {
            let checkpoint = self.ledger.jobs.get(&job).map(|e| e.checkpoint);
            let _ = self.engine().requeue(job, now, checkpoint);
        }
        for &phase in ending.values() {
            self.stats.note_end(phase);
        }
        if !ending.is_empty() && self.settings.sim.schedule_on_completion {
            self.queue_round(ctx);
        }
        let changes = self.engine().take_changes();
        if changes.is_empty() {
            return AtomicResponse::new(Box::pin(fut::ready(count)));
        }
        AtomicResponse::new(Box::pin(
            self.carry_out(changes, now, ending)
                .map(move |_, _, _| count),
        ))
    }
}

impl Handler<Submit> for ClusterActor {
    type Result = ResponseFuture<Result<JobId, Refusal>>;

    /// Validates the job now, and answers once it is journaled. Submissions that wait in the mailbox
    /// together are journaled together, with one fsync (group commit).
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let refused = |r| -> Self::Result { Box::pin(std::future::ready(Err(r))) };
        let request = msg.request;
        if let Err(r) = self.validate(&request) {
            return refused(r);
        }
        let at = msg.at.unwrap_or_else(|| self.clock.now());
        let id = request.id.unwrap_or(JobId(self.next_job_id));
        let spec = JobSpec {
            id,
            job_type: request.job_type,
            tenant: request.tenant,
            gpus: request.gpus,
            total_steps: request.work,
            weight: request.weight,
            arrival: at,
            run: request.run,
        };
        let job = job_of(self.engine(), &spec);
        if !self.engine().accepts(&job) {
            return refused(Refusal::Invalid {
                field: "gpus",
                problem: format!(
                    "no GPU type can run a gang of {} for job type {:?} on this cluster",
                    spec.gpus, spec.job_type
                ),
            });
        }
        self.next_job_id = self.next_job_id.max(id.0 + 1);
        let (answer, answered) = oneshot::channel();
        self.unjournaled.push((spec, job, answer));
        if self.unjournaled.len() == 1 {
            // Through the mailbox, behind the submissions already waiting there, so that they join
            // this batch (`notify` would run it before them).
            ctx.address().do_send(JournalSubmissions);
        }
        Box::pin(async move {
            answered.await.unwrap_or_else(|_| {
                Err(Refusal::Invalid {
                    field: "job",
                    problem: "the control plane stopped before journaling it".into(),
                })
            })
        })
    }
}

/// Journals the submissions validated so far, then admits and answers them.
#[derive(Message)]
#[rtype(result = "()")]
struct JournalSubmissions;

impl Handler<JournalSubmissions> for ClusterActor {
    type Result = ();

    fn handle(&mut self, _: JournalSubmissions, ctx: &mut Context<Self>) {
        let batch = std::mem::take(&mut self.unjournaled);
        let records: Vec<Record> = batch
            .iter()
            .map(|(spec, _, _)| Record::Submitted(spec.clone()))
            .collect();
        self.persist(&records);
        for (spec, job, answer) in batch {
            self.engine()
                .submit(job, spec.arrival)
                .expect("checked: new id, runnable");
            self.add_job(spec.id, Phase::Pending);
            self.stats.submitted += 1;
            let _ = answer.send(Ok(spec.id));
        }
        if self.settings.sim.schedule_on_arrival {
            self.queue_round(ctx);
        }
    }
}

impl Handler<Cancel> for ClusterActor {
    type Result = AtomicResponse<Self, Result<(), Refusal>>;

    fn handle(&mut self, Cancel(job): Cancel, _: &mut Context<Self>) -> Self::Result {
        let refused = |r| AtomicResponse::new(Box::pin(fut::ready(Err(r))));
        let Some(entry) = self.ledger.jobs.get(&job) else {
            return refused(Refusal::NoSuchJob(job));
        };
        if entry.standing.is_terminal() {
            return refused(Refusal::Ended(job));
        }
        let now = self.clock.now();
        self.persist(&[Record::Cancelled { job, at: now }]);
        self.stats.note_end(Phase::Cancelled);
        if let Err(e) = self.engine().cancel(job, now) {
            tracing::error!(error = %e, "cancelling a job the engine does not hold");
        }
        let changes = self.engine().take_changes();
        let running = changes
            .iter()
            .any(|c| matches!(c, Change::Stopped { job: j, .. } if *j == job));
        if !running && let Some(handle) = self.jobs.get_mut(&job) {
            handle.phase = Phase::Cancelled;
            handle.addr.do_send(Advance {
                to: Phase::Cancelled,
                at: now,
            });
        }
        let ending = FxHashMap::from_iter([(job, Phase::Cancelled)]);
        AtomicResponse::new(Box::pin(
            self.carry_out(changes, now, ending).map(|_, _, _| Ok(())),
        ))
    }
}

impl Handler<HealthChanged> for ClusterActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: HealthChanged, _: &mut Context<Self>) -> Self::Result {
        if !msg.health.healthy {
            tracing::warn!(gpu = msg.gpu.0, reason = ?msg.health.reason, "GPU out of service; its job moves");
        }
        // Its job is placed again by the next round on the timer: GPU failures come in bursts
        // (a node's XID storm), and one round then moves all their jobs.
        AtomicResponse::new(self.set_in_service(&[msg.gpu], msg.health.healthy))
    }
}

/// An operator takes GPUs out of service (`cordoned`), or puts them back: the jobs on them checkpoint
/// and move, and nothing new lands on them. All of them change in one step, so that no round places
/// a moving job on a GPU about to be cordoned too.
#[derive(Message, Clone, Debug, Serialize, Deserialize)]
#[rtype(result = "Result<(), Refusal>")]
pub struct Cordon {
    pub gpus: Vec<u32>,
    pub cordoned: bool,
}

impl Handler<Cordon> for ClusterActor {
    type Result = AtomicResponse<Self, Result<(), Refusal>>;

    fn handle(&mut self, msg: Cordon, ctx: &mut Context<Self>) -> Self::Result {
        let count = self.gpus.len();
        if let Some(bad) = msg.gpus.iter().find(|&&g| g as usize >= count) {
            let problem = format!(
                "GPU {bad} does not exist (this cluster has GPUs 0 to {})",
                count - 1
            );
            return AtomicResponse::new(Box::pin(fut::ready(Err(Refusal::Invalid {
                field: "gpus",
                problem,
            }))));
        }
        tracing::info!(gpus = ?msg.gpus, cordoned = msg.cordoned, "cordon changed by the operator");
        let gpus: Vec<GpuId> = msg.gpus.iter().map(|&g| GpuId(g)).collect();
        // An operator waits on the move: place the jobs now.
        self.queue_round(ctx);
        AtomicResponse::new(Box::pin(
            self.set_in_service(&gpus, !msg.cordoned)
                .map(|_, _, _| Ok(())),
        ))
    }
}

impl ClusterActor {
    /// Puts GPUs in or out of service; the jobs on those leaving stop now and wait for a round.
    fn set_in_service(&mut self, gpus: &[GpuId], in_service: bool) -> ResponseActFuture<Self, ()> {
        let now = self.clock.now();
        for &gpu in gpus {
            if in_service {
                self.engine().enable_gpu(gpu);
            } else {
                self.engine().disable_gpu(gpu, now);
            }
        }
        let changes = self.engine().take_changes();
        Box::pin(
            self.carry_out(changes, now, FxHashMap::default())
                .map(|_, _, _| ()),
        )
    }
}

impl Handler<Peek> for ClusterActor {
    type Result = MessageResult<Peek>;

    fn handle(&mut self, _: Peek, _: &mut Context<Self>) -> Self::Result {
        let next_event = self.executor.lock().expect("executor").next_event();
        let engine = self.engine();
        MessageResult(Outlook {
            next_event,
            idle: engine.is_idle(),
            busy_gpus: engine.busy_gpus(),
        })
    }
}

impl Handler<ListJobs> for ClusterActor {
    type Result = MessageResult<ListJobs>;

    fn handle(&mut self, _: ListJobs, _: &mut Context<Self>) -> Self::Result {
        let ids: Vec<JobId> = self.ledger.jobs.keys().copied().collect();
        MessageResult(ids.into_iter().filter_map(|id| self.info(id)).collect())
    }
}

impl Handler<ShowJob> for ClusterActor {
    type Result = MessageResult<ShowJob>;

    fn handle(&mut self, ShowJob(id): ShowJob, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.info(id))
    }
}

impl Handler<GetStats> for ClusterActor {
    type Result = MessageResult<GetStats>;

    fn handle(&mut self, _: GetStats, _: &mut Context<Self>) -> Self::Result {
        let gpus = self.gpus.len() as u32;
        let engine = self.engine();
        let (active, busy) = (engine.active_jobs(), engine.busy_gpus());
        let running = self
            .jobs
            .values()
            .filter(|h| h.phase == Phase::Running)
            .count();
        MessageResult(self.stats.snapshot(active, running, busy, gpus))
    }
}

impl Handler<Subscribe> for ClusterActor {
    type Result = MessageResult<Subscribe>;

    fn handle(&mut self, _: Subscribe, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.events.clone())
    }
}

/// Per-job records of a finished run, for comparisons with the simulator.
#[derive(Message)]
#[rtype(result = "BTreeMap<JobId, (Option<f64>, Option<f64>)>")]
pub struct Timeline;

impl Handler<Timeline> for ClusterActor {
    type Result = MessageResult<Timeline>;

    fn handle(&mut self, _: Timeline, _: &mut Context<Self>) -> Self::Result {
        let ids: Vec<JobId> = self.ledger.jobs.keys().copied().collect();
        let engine = self.engine();
        MessageResult(
            ids.into_iter()
                .filter_map(|id| {
                    engine
                        .status(id)
                        .map(|s| (id, (s.record.first_start, s.record.finish)))
                })
                .collect(),
        )
    }
}
