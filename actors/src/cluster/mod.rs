//! The cluster actor: owns the scheduling state, runs the rounds, and has what they decide carried out
//! through the job, gang and GPU actors and the executor.
//!
//! A round runs the same [`Engine`] the simulator runs, with the same policy and placer, on a blocking
//! thread (the actor takes no other message meanwhile: solving is short). Its changes are planned
//! (`plan`: pure), journaled and fsynced (`store`), and only then carried out (`carry`): stops
//! first (checkpoint, release the gang), then starts (lease the gang in two phases, launch). Carrying
//! out runs outside the actor's state, one batch at a time and in order, so that the API keeps
//! answering while workers checkpoint; the next round waits until the batch before it has settled. A
//! start whose gang cannot be leased or whose workers cannot launch goes back to the queue.
//!
//! Rooms, all private: `messages` (what the actor answers, re-exported here), `plan`, `store`,
//! `carry`, `recover`.

mod carry;
mod messages;
mod plan;
mod recover;
mod store;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::engine::{Change, Engine, Unrunnable};
use gangway_core::job::{Job, JobId, Sizes};
use gangway_core::placement::Placer;
use gangway_core::policy::Policy;
use gangway_core::throughput::goodput::Observation;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio::sync::{broadcast, oneshot};

use crate::clock::{Clock, WallClock};
use crate::executor::{Executor, Measured, WorkerEvent};
use crate::gang::{Acquire, GangActor};
use crate::gpu::{GpuActor, HealthChanged, Holder};
use crate::job::{Advance, JobActor, JobEvent};
use crate::ledger::{HISTORY, JobSpec, Record, Shape, Standing};
use crate::lifecycle::Phase;
use crate::request::same_request;
use crate::stats::{Stats, StatsSnapshot};
use carry::Gang;

use carry::{Outcome, StartStep, Steps, StopStep, blocking, carry_out};
use plan::Retune;
use store::Store;

pub use messages::{
    Cancel, Cordon, GetStats, JobInfo, JobRequest, JobSizes, LearnedSteps, ListJobs, ListNodes,
    NodeInfo, Outlook, Parts, Peek, Poll, Refusal, Resize, RestartPhases, Round, RoundReport,
    RunsAs, Settings, ShowJob, StartError, Submit, Subscribe, TimeSource, Timeline,
};

/// Distinct job types, and distinct tenants, a control plane keeps: names are never forgotten (ids
/// must stay stable), so a client that invents a new one per job is refused past this many.
const MAX_NAMES: usize = 10_000;

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
    gang: Option<Gang>,
    crashes: u32,
    /// What its workers last measured of their training.
    measured: Option<Measured>,
    /// Resizes so far (since this control plane started: starts on another number of GPUs than
    /// its last run's, whether it was resized at once or preempted and resumed), and the last one.
    resizes: u32,
    last_resize: Option<Resize>,
    /// The GPUs its last run held.
    last_size: Option<u32>,
    /// While a resize or move is under way: when it was decided, and once carried out, when its old
    /// workers had exited and when its new ones were launched.
    restarting: Option<f64>,
    restart_marks: Option<(f64, f64)>,
    /// Seconds the last restart took, from the decision to the first step after it, and where.
    last_restart_seconds: Option<f64>,
    last_restart_phases: Option<RestartPhases>,
    /// The global batch its policy chose last (at its latest launch, or retuned since), when it
    /// adapts its batch.
    batch: Option<u32>,
}

/// A submission validated and waiting for its journal records: the spec, what it asked beyond its
/// GPUs, the engine's job, and where to answer.
type Unjournaled = (JobSpec, Shape, Job, oneshot::Sender<Result<JobId, Refusal>>);

/// Committed batches, carried out one at a time, in order; and rounds waiting for them to settle.
#[derive(Default)]
struct Carrier {
    busy: bool,
    queue: VecDeque<(Steps, oneshot::Sender<RoundReport>)>,
    rounds_waiting: Vec<oneshot::Sender<RoundReport>>,
}

impl Carrier {
    fn idle(&self) -> bool {
        !self.busy && self.queue.is_empty()
    }
}

/// The control plane's scheduler: the engine with its policy and placer, the journal, the job and
/// GPU actors, and the executor it drives through them (see the module's doc).
pub struct ClusterActor {
    /// Home between rounds; on a blocking thread while a round solves.
    sched: Option<Scheduler>,
    store: Store,
    jobs: FxHashMap<JobId, JobHandle>,
    executor: Arc<Mutex<Box<dyn Executor>>>,
    gpus: Vec<Addr<GpuActor>>,
    carrier: Carrier,
    clock: Arc<dyn Clock>,
    events: broadcast::Sender<JobEvent>,
    stats: Stats,
    settings: Settings,
    /// Submissions validated and waiting to be journaled together.
    unjournaled: Vec<Unjournaled>,
    /// Jobs that ended since the last batch that started one: what a resize's reason names as the
    /// GPUs' source.
    ended_since_starts: Vec<JobId>,
    /// The id the next submission gets.
    next_job_id: u32,
    /// Submissions that repeat the idempotency key of one waiting to be journaled: answered with
    /// its id once it is.
    key_waiters: Vec<(JobId, oneshot::Sender<Result<JobId, Refusal>>)>,
    /// How the jobs that ended since the start ended, as the API shows them (the most recent
    /// [`HISTORY`]); the engine forgets them.
    ended: BTreeMap<JobId, JobInfo>,
    /// Jobs re-adopted at recovery whose gangs are leased once the actor runs.
    adopted: Vec<JobId>,
    round_queued: bool,
    /// GPUs their health probes took out of service, with why.
    unhealthy: FxHashMap<GpuId, String>,
    /// Retunes that found the executor busy (stopping workers, which may take a job's whole grace):
    /// told at the next poll that finds it free. The actor's thread never waits on the executor.
    deferred_retunes: Vec<Retune>,
    /// What the executor last said of its next event, for when it is busy.
    next_event: Option<f64>,
}

impl ClusterActor {
    /// Recovers the journal (if any), rebuilds the state, and starts the actors. Must run inside an
    /// actix system.
    pub fn start(parts: Parts, settings: Settings) -> Result<Addr<ClusterActor>, StartError> {
        let recovery = Instant::now();
        let (mut store, replayed) = Store::open(
            settings.journal.as_deref(),
            settings.journal_options,
            settings.snapshot_every,
            settings.reports.clone(),
        )?;
        let (clock, epoch): (Arc<dyn Clock>, Option<Record>) = match &settings.time {
            TimeSource::Virtual(clock) => (clock.clone(), None),
            TimeSource::Wall { time_scale } => {
                let (unix_seconds, time_scale) = store
                    .ledger
                    .epoch
                    .unwrap_or((WallClock::unix_now(), *time_scale));
                let record = store.ledger.epoch.is_none().then_some(Record::Epoch {
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
        store.persist(epoch.as_slice());
        let now = clock.now();
        let mut engine = Engine::new(
            Arc::clone(&parts.cluster),
            parts.model,
            settings.engine.clone(),
            parts.names,
            now,
        );
        engine.record_changes();
        let executor = Arc::new(Mutex::new(parts.executor));
        let (events, _) = broadcast::channel(4096);
        let num_gpus = parts.cluster.num_gpus();
        let (probes, health_every) = (parts.probes, parts.health_every);
        let (policy, placer) = (parts.policy, parts.placer);
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
                next_job_id: store.ledger.next_job_id,
                store,
                jobs: FxHashMap::default(),
                executor,
                gpus,
                carrier: Carrier::default(),
                clock,
                events,
                stats: Stats::default(),
                settings,
                unjournaled: Vec::new(),
                ended_since_starts: Vec::new(),
                key_waiters: Vec::new(),
                ended: BTreeMap::new(),
                adopted: Vec::new(),
                unhealthy: FxHashMap::default(),
                round_queued: false,
                deferred_retunes: Vec::new(),
                next_event: None,
            };
            actor.recover(engine, policy, placer, now);
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

    fn add_job(&mut self, id: JobId, phase: Phase) {
        let addr = JobActor::new(id, phase, self.events.clone()).start();
        self.jobs.insert(
            id,
            JobHandle {
                addr,
                phase,
                gang: None,
                crashes: 0,
                measured: None,
                resizes: 0,
                last_resize: None,
                last_size: None,
                restarting: None,
                restart_marks: None,
                last_restart_seconds: None,
                last_restart_phases: None,
                batch: None,
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

    /// Journals `records` (fsynced) and folds them into the ledger; counts what the ledger refused.
    fn persist(&mut self, records: &[Record]) {
        let violations = self.store.persist(records);
        self.stats.violations += violations.len() as u64;
    }

    /// Plans `changes`, journals the plan, and queues its steps to be carried out; the receiver answers
    /// once they have been and the outcome is settled. `ending` names jobs whose stop ends them
    /// (finished, cancelled, failed).
    fn commit(
        &mut self,
        changes: Vec<Change>,
        now: f64,
        ending: FxHashMap<JobId, Phase>,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RoundReport> {
        let sched = self
            .sched
            .as_ref()
            .expect("the scheduler is home between rounds");
        let plan = plan::plan(
            changes,
            now,
            &ending,
            &self.store.ledger,
            (&self.store.shapes, sched.engine.cluster().gpu_types()),
            |job| self.jobs.get(&job).map(|h| h.phase),
        );
        self.persist(&plan.records);
        let ended = plan.stops.iter().filter(|s| s.next.is_terminal());
        self.ended_since_starts.extend(ended.map(|s| s.job));
        let arrived: Vec<JobId> = plan
            .starts
            .iter()
            .filter(|s| s.via_placing)
            .map(|s| s.launch.job)
            .collect();
        let ended = if plan.starts.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut self.ended_since_starts)
        };
        let stops: Vec<StopStep> = plan
            .stops
            .into_iter()
            .filter_map(|stop| {
                let handle = self.jobs.get_mut(&stop.job)?;
                if let Some(gang) = &handle.gang {
                    handle.last_size = Some(gang.gpus.len() as u32);
                }
                // A new restart starts its clock; any other stop abandons one under way.
                let restarts = matches!(stop.next, Phase::Migrating | Phase::Resizing);
                handle.restarting = restarts.then_some(now);
                handle.restart_marks = None;
                // What the API shows until the workers have stopped.
                handle.phase = if stop.checkpoint {
                    Phase::Checkpointing
                } else {
                    stop.next
                };
                Some(StopStep {
                    job: stop.job,
                    addr: handle.addr.clone(),
                    gang: handle.gang.take(),
                    stop_workers: stop.stop_workers,
                    checkpoint: stop.checkpoint,
                    next: stop.next,
                })
            })
            .collect();
        let mut refused = Vec::new();
        let mut starts = Vec::new();
        let active = self.store.ledger.unfinished().count();
        let mut resized = 0;
        for start in plan.starts {
            let launch = start.launch;
            // A start the ledger refused (it breaks an invariant) is not carried out: it fails.
            let journaled = matches!(
                self.store.ledger.jobs.get(&launch.job).map(|e| &e.standing),
                Some(Standing::Running { attempt, .. }) if *attempt == launch.attempt
            );
            let Some(handle) = self.jobs.get_mut(&launch.job) else {
                continue;
            };
            if !journaled {
                refused.push((launch.job, "the journal refused the start".to_owned()));
                continue;
            }
            let holder = Holder {
                job: launch.job,
                attempt: launch.attempt,
            };
            let size = launch.gpus.len() as u32;
            if let Some(from) = handle.last_size.filter(|&from| from != size) {
                handle.resizes += 1;
                resized += 1;
                let others: Vec<JobId> = arrived
                    .iter()
                    .copied()
                    .filter(|&j| j != launch.job)
                    .collect();
                handle.last_resize = Some(Resize {
                    from,
                    to: size,
                    at: now,
                    why: plan::resize_reason(from, size, &others, &ended, active),
                });
            }
            handle.batch = launch.batch;
            let gang = gang_of(&self.gpus, holder, start.partner, &launch.gpus);
            handle.gang = Some(gang.clone());
            // What the API shows until its workers are launched (a job resized or moved shows its
            // checkpoint first).
            if handle.phase != Phase::Checkpointing {
                handle.phase = Phase::Starting;
            }
            starts.push(StartStep {
                launch,
                addr: handle.addr.clone(),
                gang,
                via_placing: start.via_placing,
            });
        }
        let count = |next: Phase| stops.iter().filter(|s| s.next == next).count();
        let (preempted, moved) = (count(Phase::Preempted), count(Phase::Migrating));
        self.stats
            .note_changes(preempted, moved, resized, starts.len());
        if !refused.is_empty() {
            self.fail_starts(&refused, now);
        }
        for retune in &plan.retunes {
            if let (Some(batch), Some(handle)) = (retune.batch, self.jobs.get_mut(&retune.job)) {
                handle.batch = Some(batch);
            }
        }
        let steps = Steps {
            stops,
            starts,
            retunes: plan.retunes,
            now,
            clock: Arc::clone(&self.clock),
        };
        let (answer, answered) = oneshot::channel();
        self.carrier.queue.push_back((steps, answer));
        self.pump(ctx);
        answered
    }

    /// Carries out the next committed batch, unless one is being carried out; once none is left, runs
    /// the rounds that waited.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.carrier.busy {
            return;
        }
        let Some((steps, answer)) = self.carrier.queue.pop_front() else {
            let waiting = std::mem::take(&mut self.carrier.rounds_waiting);
            if !waiting.is_empty() {
                let report = self.round(ctx);
                ctx.spawn(fut::wrap_future(async move {
                    let report = report.await.unwrap_or_default();
                    for answer in waiting {
                        let _ = answer.send(report.clone());
                    }
                }));
            }
            return;
        };
        self.carrier.busy = true;
        let now = steps.now;
        let stopped: Vec<(JobId, Phase)> = steps.stops.iter().map(|s| (s.job, s.next)).collect();
        let started: Vec<JobId> = steps.starts.iter().map(|s| s.launch.job).collect();
        let executor = Arc::clone(&self.executor);
        let work = async move { carry_out(steps, &executor).await };
        ctx.spawn(work.into_actor(self).map(move |outcome, actor, ctx| {
            for (job, next) in stopped {
                if let Some(handle) = actor.jobs.get_mut(&job)
                    && handle.phase == Phase::Checkpointing
                {
                    handle.phase = next;
                }
            }
            // Launched (a start that failed goes back to the queue as it settles).
            for job in started {
                let Some(handle) = actor.jobs.get_mut(&job) else {
                    continue;
                };
                let failed = outcome.failed_starts.iter().any(|(j, _)| *j == job);
                if handle.restarting.is_some() && !failed {
                    handle.restart_marks = Some((outcome.stopped_at, outcome.launched_at));
                }
                if matches!(
                    handle.phase,
                    Phase::Starting | Phase::Resizing | Phase::Migrating
                ) {
                    handle.phase = Phase::Running;
                }
            }
            let report = actor.settle(outcome, now);
            let _ = answer.send(report);
            actor.carrier.busy = false;
            actor.pump(ctx);
        }));
    }

    /// Journals the checkpoints the stops saved, and requeues the starts that failed.
    fn settle(&mut self, outcome: Outcome, now: f64) -> RoundReport {
        // A job that ended (cancelled) keeps no checkpoint.
        let records: Vec<Record> = outcome
            .saved
            .iter()
            .filter(|(job, _)| {
                self.store
                    .ledger
                    .jobs
                    .get(job)
                    .is_some_and(|e| !e.standing.is_terminal())
            })
            .map(|&(job, steps_done)| Record::Checkpointed { job, steps_done })
            .collect();
        self.persist(&records);
        self.fail_starts(&outcome.failed_starts, now);
        outcome.report
    }

    /// Starts that did not happen go back to the queue; a failed start's partner runs alone, and the
    /// executor follows.
    fn fail_starts(&mut self, failed: &[(JobId, String)], now: f64) {
        let mut records = Vec::new();
        for (job, why) in failed {
            tracing::warn!(job = job.0, %why, "start failed; back to the queue");
            let running = matches!(
                self.store.ledger.jobs.get(job).map(|e| &e.standing),
                Some(Standing::Running { .. })
            );
            if self.engine().requeue(*job, now, None).is_ok() && running {
                records.push(Record::Stopped { job: *job, at: now });
            }
            if let Some(handle) = self.jobs.get_mut(job) {
                if handle.phase == Phase::Running {
                    handle.phase = Phase::Pending;
                }
                handle.gang = None;
                // A restart that did not start is not one.
                handle.restarting = None;
                handle.restart_marks = None;
            }
        }
        let retunes: Vec<Retune> = self
            .engine()
            .take_changes()
            .into_iter()
            .filter_map(|c| match c {
                Change::Retuned {
                    job,
                    steps_per_second,
                    pace,
                    resources,
                    ..
                } => Some(Retune {
                    job,
                    steps_per_second,
                    pace,
                    resources,
                    // A partner that runs alone now keeps its batch.
                    batch: None,
                }),
                _ => None,
            })
            .collect();
        self.deferred_retunes.extend(retunes);
        self.tell_retunes(now);
        self.persist(&records);
    }

    /// Tells the executor the retunes waiting for it, unless it is busy (then they wait for the next
    /// poll).
    fn tell_retunes(&mut self, now: f64) {
        if self.deferred_retunes.is_empty() {
            return;
        }
        if let Ok(mut executor) = self.executor.try_lock() {
            for retune in self.deferred_retunes.drain(..) {
                retune.apply(&mut **executor, now);
            }
        }
    }

    /// Jobs that ended (their ending committed): the API keeps how they ended, and the engine and the
    /// actor's handles forget them, so that memory follows the active jobs and a bounded history.
    fn retire(&mut self, jobs: impl IntoIterator<Item = JobId>) {
        for job in jobs {
            if let Some(info) = self.info(job) {
                self.ended.insert(job, info);
            }
            self.engine().forget(job);
            self.jobs.remove(&job);
        }
        while self.ended.len() > HISTORY {
            self.ended.pop_first();
        }
    }

    fn current_attempt(&self, job: JobId) -> Option<u64> {
        match self.store.ledger.jobs.get(&job).map(|e| &e.standing) {
            Some(Standing::Running { attempt, .. }) => Some(*attempt),
            _ => None,
        }
    }

    /// Every server: its GPUs, those out of service and why, and the jobs running on it.
    fn nodes(&mut self) -> Vec<NodeInfo> {
        let mut holder: FxHashMap<GpuId, JobId> = FxHashMap::default();
        for (&job, entry) in &self.store.ledger.jobs {
            if let Standing::Running { gpus, .. } = &entry.standing {
                holder.extend(gpus.iter().map(|&g| (g, job)));
            }
        }
        let out: Vec<(u32, String)> = self
            .unhealthy
            .iter()
            .map(|(g, why)| (g.0, why.clone()))
            .chain(
                self.store
                    .ledger
                    .cordoned
                    .iter()
                    .map(|&g| (g, "cordoned".into())),
            )
            .collect();
        let names = self.settings.node_names.clone();
        let cluster = self.engine().cluster();
        cluster
            .nodes()
            .iter()
            .enumerate()
            .map(|(n, node)| {
                let gpus: Vec<u32> = cluster
                    .gpus_of(gangway_core::cluster::NodeId(n as u32))
                    .map(|g| g.0)
                    .collect();
                // Health first: a cordoned GPU that also failed says why it failed.
                let out_of_service: Vec<(u32, String)> = gpus
                    .iter()
                    .filter_map(|&g| out.iter().find(|(o, _)| *o == g).cloned())
                    .collect();
                let mut jobs: Vec<JobId> = gpus
                    .iter()
                    .filter_map(|&g| holder.get(&GpuId(g)).copied())
                    .collect();
                jobs.sort_unstable();
                jobs.dedup();
                let free = gpus
                    .iter()
                    .filter(|&&g| {
                        !holder.contains_key(&GpuId(g))
                            && !out_of_service.iter().any(|(o, _)| *o == g)
                    })
                    .count() as u32;
                NodeInfo {
                    name: names
                        .get(n)
                        .cloned()
                        .unwrap_or_else(|| format!("server-{n}")),
                    gpu_type: cluster.gpu_types()[node.gpu_type.0 as usize].clone(),
                    gpus,
                    free,
                    out_of_service,
                    jobs,
                }
            })
            .collect()
    }

    fn info(&mut self, id: JobId) -> Option<JobInfo> {
        let entry = self.store.ledger.jobs.get(&id)?;
        if let Some(info) = self.ended.get(&id) {
            return Some(info.clone());
        }
        let spec = entry.spec.clone();
        let handle = self.jobs.get(&id);
        let phase = handle.map_or(
            entry.standing.ended_phase().unwrap_or(Phase::Pending),
            |h| h.phase,
        );
        let checkpoint = entry.checkpoint;
        let engine = &self.sched.as_ref().expect("the scheduler is home").engine;
        let status = engine.status(id);
        let waiting = engine
            .waiting_reason(id)
            .filter(|_| matches!(phase, Phase::Pending | Phase::Preempted));
        let resources = status.as_ref().and_then(|s| s.resources);
        let (done, started, finished, placement, preemptions, migrations) = match &status {
            Some(s) => (
                s.steps_done,
                s.record.first_start,
                s.record.finish,
                s.gpus.iter().flatten().map(|g| g.0).collect(),
                s.record.preemptions,
                s.record.migrations,
            ),
            // Ended before a restart: what the ledger remembers.
            None => {
                let finished = match entry.standing {
                    Standing::Finished { at } => Some(at),
                    _ => None,
                };
                (checkpoint, entry.first_start, finished, Vec::new(), 0, 0)
            }
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
            resources,
            preemptions,
            migrations,
            measured: handle.and_then(|h| h.measured),
            learned: self.learned_of(id),
            sizes: self
                .store
                .shapes
                .get(&id)
                .filter(|s| s.sizes != Sizes::rigid(spec.gpus) || !s.pp_by_type.is_empty())
                .map(|s| JobSizes {
                    min: s.sizes.min,
                    max: s.sizes.max,
                    multiple: s.sizes.multiple,
                    multiple_by_type: (s.pp_by_type.iter())
                        .map(|(t, pp)| (t.clone(), s.tp * pp))
                        .collect(),
                }),
            resizes: handle.map_or(0, |h| h.resizes),
            last_resize: handle.and_then(|h| h.last_resize.clone()),
            last_restart_seconds: handle.and_then(|h| h.last_restart_seconds),
            last_restart_phases: handle.and_then(|h| h.last_restart_phases),
            batch: handle.and_then(|h| h.batch),
            waiting,
        })
    }

    /// A running job made progress: if it was restarting, the restart is over, and what it took is
    /// measured (for the API, `/metrics`, and the model's restart penalty).
    fn note_progress(&mut self, job: JobId, now: f64) {
        let Some(handle) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(since) = handle.restarting.take() {
            let seconds = (now - since).max(0.0);
            handle.last_restart_seconds = Some(seconds);
            handle.last_restart_phases =
                (handle.restart_marks.take()).map(|(stopped, launched)| RestartPhases {
                    stop: (stopped - since).max(0.0),
                    launch: (launched - stopped).max(0.0),
                    first_step: (now - launched).max(0.0),
                });
            self.stats.note_restart(seconds);
            self.store.restarted(job, seconds);
        }
    }

    /// A record of what a running job's workers measured, when it is on a configuration its model
    /// has not measured yet (the first measurement of a configuration stands, as in simulation).
    fn learned_from(&self, job: JobId, measured: &Measured) -> Option<Record> {
        let Standing::Running { gpu_type, gpus, .. } = &self.store.ledger.jobs.get(&job)?.standing
        else {
            return None;
        };
        let cluster = self.sched.as_ref()?.engine.cluster();
        let nodes = cluster.gpus_per_node(gpus).len() as u32;
        let observation = Observation::from_measured(nodes, measured);
        let known = self.store.learned.get(&job);
        if known.is_some_and(|l| l.knows(gpu_type.0, &observation)) {
            return None;
        }
        Some(Record::Learned {
            job,
            gpu_type: gpu_type.0,
            observation,
            grad: measured.grad_sqr.zip(measured.grad_var),
        })
    }

    /// What a job's model has learned, for the API: configurations measured on each GPU type.
    fn learned_of(&self, job: JobId) -> Vec<LearnedSteps> {
        let (Some(learned), Some(sched)) = (self.store.learned.get(&job), self.sched.as_ref())
        else {
            return Vec::new();
        };
        let names = sched.engine.cluster().gpu_types();
        learned
            .types()
            .map(|t| LearnedSteps {
                gpu_type: names
                    .get(t as usize)
                    .cloned()
                    .unwrap_or_else(|| t.to_string()),
                configurations: learned.measured_on(t) as u32,
            })
            .collect()
    }

    /// The job an idempotency key already names, and whether it is journaled yet; a refusal when
    /// that job was submitted with another request; `None` for a new key.
    fn keyed(&self, key: &str, request: &JobRequest) -> Option<Result<(JobId, bool), Refusal>> {
        // Its shape, while it is known (an ended job's is forgotten).
        let (spec, shape, journaled) = match self.store.ledger.keys.get(key) {
            Some(id) => {
                let entry = self.store.ledger.jobs.get(id)?;
                let shape = (!entry.standing.is_terminal()).then(|| {
                    let shaped = self.store.shapes.get(id).cloned();
                    shaped.unwrap_or(Shape::rigid(entry.spec.gpus))
                });
                (&entry.spec, shape, true)
            }
            None => {
                let (spec, shape, _, _) = self
                    .unjournaled
                    .iter()
                    .find(|(spec, ..)| spec.key.as_deref() == Some(key))?;
                (spec, Some(shape.clone()), false)
            }
        };
        let same_shape = shape.is_none_or(|s| s == crate::request::shape(request));
        Some(if same_request(spec, request) && same_shape {
            Ok((spec.id, journaled))
        } else {
            Err(Refusal::KeyReused {
                key: key.to_owned(),
                job: spec.id,
            })
        })
    }

    fn validate(&self, request: &JobRequest) -> Result<(), Refusal> {
        crate::request::validate(request)?;
        if let Some(id) = request.id
            && (self.store.ledger.jobs.contains_key(&id)
                || self.unjournaled.iter().any(|(spec, ..)| spec.id == id))
        {
            return Err(Refusal::Exists(id));
        }
        Ok(())
    }

    /// Queues a round unless one is already queued.
    fn queue_round(&mut self, ctx: &mut Context<Self>) {
        if !std::mem::replace(&mut self.round_queued, true) {
            ctx.notify(Round);
        }
    }

    /// Runs a round now, or once the batches being carried out have settled. The receiver answers
    /// when the round's own changes have been carried out.
    fn round(&mut self, ctx: &mut Context<Self>) -> oneshot::Receiver<RoundReport> {
        let (answer, answered) = oneshot::channel();
        if !self.carrier.idle() {
            self.carrier.rounds_waiting.push(answer);
            return answered;
        }
        self.round_queued = false;
        let now = self.clock.now();
        let began = Instant::now();
        let mut sched = self.sched.take().expect("one round at a time");
        if sched.engine.is_idle() {
            self.sched = Some(sched);
            let _ = answer.send(RoundReport::default());
            return answered;
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
            // A policy that panics fails its round alone: its runs keep their GPUs, and the next
            // round asks it again (nothing of the failed round was journaled to replay).
            let failed = engine
                .try_schedule(policy.as_mut(), placer.as_mut(), now)
                .err();
            if failed.is_none() && engine.config().audit {
                engine.audit();
            }
            (sched, solving.elapsed().as_secs_f64(), failed)
        });
        // Nothing else is handled while the engine is away.
        ctx.wait(solve.into_actor(self).map(
            move |(mut sched, solve_seconds, failed), actor, ctx| {
                if let Some(failed) = failed {
                    tracing::error!(
                        now,
                        error = %failed,
                        "the round failed: every run keeps its GPUs, and the next round asks \
                         the policy again"
                    );
                    actor.stats.note_round_failure(now, failed.message());
                }
                let changes = sched.engine.take_changes();
                actor.sched = Some(sched);
                let carried = actor.commit(changes, now, FxHashMap::default(), ctx);
                ctx.spawn(carried.into_actor(actor).map(move |report, actor, _| {
                    actor.stats.note_round(began.elapsed());
                    let _ = answer.send(RoundReport {
                        solve_seconds,
                        ..report.unwrap_or_default()
                    });
                }));
            },
        ));
        answered
    }

    /// Puts GPUs in or out of service; the jobs on those leaving stop now and wait for a round.
    fn set_in_service(
        &mut self,
        gpus: &[GpuId],
        in_service: bool,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RoundReport> {
        let now = self.clock.now();
        for &gpu in gpus {
            if in_service {
                self.engine().enable_gpu(gpu);
            } else {
                self.engine().disable_gpu(gpu, now);
            }
        }
        let changes = self.engine().take_changes();
        self.commit(changes, now, FxHashMap::default(), ctx)
    }
}

/// A gang actor for `holder` on `gpus` (not yet leased), among the cluster's `gpu_actors`.
fn gang_of(
    gpu_actors: &[Addr<GpuActor>],
    holder: Holder,
    partner: Option<JobId>,
    gpus: &[GpuId],
) -> Gang {
    let addrs: Vec<_> = gpus
        .iter()
        .map(|&g| gpu_actors[g.0 as usize].clone())
        .collect();
    let leased = gpus.iter().copied().zip(addrs.iter().cloned()).collect();
    Gang {
        holder,
        actor: GangActor::new(holder, partner, leased).start(),
        gpus: addrs,
    }
}

/// A job of the engine's from a journaled spec and its shape (`None`: rigid), interning its names.
fn job_of(engine: &mut Engine<'static>, spec: &JobSpec, shape: Option<&Shape>) -> Job {
    let rigid = Shape::rigid(spec.gpus);
    let shape = shape.unwrap_or(&rigid);
    Job {
        id: spec.id,
        arrival: spec.arrival,
        job_type: engine.intern_job_type(&spec.job_type),
        gpus: spec.gpus,
        total_steps: spec.total_steps,
        weight: spec.weight,
        tenant: engine.intern_tenant(&spec.tenant),
        batch: shape.batch,
        min_batch: shape.min_batch,
        sizes: Some(shape.sizes),
        group_by_type: shape.group_by_type(engine.cluster().gpu_types()),
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
            }) = self.store.ledger.jobs.get(&job).map(|e| e.standing.clone())
            else {
                continue;
            };
            let gang = gang_of(&self.gpus, Holder { job, attempt }, partner, &gpus);
            leases.push(gang.actor.send(Acquire));
            if let Some(handle) = self.jobs.get_mut(&job) {
                handle.gang = Some(gang);
            }
        }
        ctx.wait(
            futures::future::join_all(leases)
                .into_actor(self)
                .map(|results, _, _| {
                    for result in results {
                        if !matches!(result, Ok(Ok(()))) {
                            tracing::error!(?result, "a re-adopted job could not lease its GPUs");
                        }
                    }
                }),
        );
        if let TimeSource::Wall { time_scale } = self.settings.time {
            let round = Duration::from_secs_f64(
                (self.settings.engine.round_length / time_scale).max(0.001),
            );
            ctx.run_interval(round, |actor, ctx| actor.queue_round(ctx));
            ctx.run_interval(self.settings.poll_every, |_, ctx| ctx.notify(Poll));
        }
    }
}

impl Handler<Round> for ClusterActor {
    type Result = ResponseFuture<RoundReport>;

    fn handle(&mut self, _: Round, ctx: &mut Context<Self>) -> Self::Result {
        let report = self.round(ctx);
        Box::pin(async move { report.await.unwrap_or_default() })
    }
}

impl Handler<Poll> for ClusterActor {
    type Result = ResponseFuture<usize>;

    fn handle(&mut self, _: Poll, ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now();
        // Polling only drains what the workers reported; it never blocks. While a batch stops workers,
        // the executor is busy: its events wait for the next poll.
        let events = match self.executor.try_lock() {
            Ok(mut executor) => executor.poll(now),
            Err(_) => return Box::pin(std::future::ready(0)),
        };
        self.tell_retunes(now);
        let count = events.len();
        let mut records = Vec::new();
        let mut ending = FxHashMap::default();
        let mut requeue = Vec::new();
        let mut progressed = Vec::new();
        // The ledger learns of this batch only after the loop: one event per job ends it.
        let mut ended = FxHashSet::default();
        for event in events {
            let job = event.job();
            if ended.contains(&job) {
                continue;
            }
            if self.current_attempt(job) != Some(event.attempt()) {
                tracing::debug!(?event, "event from an old attempt ignored");
                continue;
            }
            match event {
                WorkerEvent::Finished { job, at, .. } => {
                    records.push(Record::Finished { job, at });
                    ending.insert(job, Phase::Finished);
                    ended.insert(job);
                }
                WorkerEvent::Checkpointed {
                    job, steps_done, ..
                } => records.push(Record::Checkpointed { job, steps_done }),
                WorkerEvent::Progressed {
                    job,
                    steps_done,
                    measured,
                    ..
                } => {
                    self.note_progress(job, now);
                    if let Some(m) = measured {
                        records.extend(self.learned_from(job, &m));
                        if let Some(grad) = m.grad_sqr.zip(m.grad_var) {
                            self.store.refresh_grad(job, grad);
                        }
                        if let Some(handle) = self.jobs.get_mut(&job) {
                            handle.measured = Some(m);
                        }
                    }
                    progressed.push((job, steps_done));
                }
                WorkerEvent::Failed {
                    job,
                    at,
                    error,
                    retryable,
                    ..
                } => {
                    let crashes = self.jobs.get_mut(&job).map_or(u32::MAX, |h| {
                        h.crashes += 1;
                        h.crashes
                    });
                    ended.insert(job);
                    if retryable && crashes <= self.settings.max_restarts {
                        tracing::warn!(job = job.0, %error, crashes, "workers crashed; requeued");
                        // Journaled as stopped by the commit, with the engine's change; the crash
                        // itself here, so that a restart keeps the budget spent.
                        records.push(Record::Crashed { job, at });
                        requeue.push(job);
                    } else {
                        tracing::warn!(job = job.0, %error, "job failed");
                        records.push(Record::Failed { job, at, error });
                        ending.insert(job, Phase::Failed);
                    }
                }
            }
        }
        self.persist(&records);
        for (job, steps_done) in progressed {
            self.engine().report_progress(job, steps_done, now);
        }
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
            let checkpoint = self.store.ledger.jobs.get(&job).map(|e| e.checkpoint);
            let _ = self.engine().requeue(job, now, checkpoint);
        }
        for &phase in ending.values() {
            self.stats.note_end(phase);
        }
        if !ending.is_empty() && self.settings.engine.schedule_on_completion {
            self.queue_round(ctx);
        }
        let changes = self.engine().take_changes();
        let ended: Vec<JobId> = ending.keys().copied().collect();
        if changes.is_empty() {
            self.retire(ended);
            return Box::pin(std::future::ready(count));
        }
        let carried = self.commit(changes, now, ending, ctx);
        self.retire(ended);
        Box::pin(async move {
            let _ = carried.await;
            count
        })
    }
}

impl Handler<Submit> for ClusterActor {
    type Result = ResponseFuture<Result<JobId, Refusal>>;

    /// Validates the job now, and answers once it is journaled. Submissions that wait in the mailbox
    /// together are journaled together, with one fsync (group commit).
    fn handle(&mut self, msg: Submit, ctx: &mut Context<Self>) -> Self::Result {
        let refused = |r| -> Self::Result { Box::pin(std::future::ready(Err(r))) };
        let Submit { request, at, key } = msg;
        if let Err(r) = self.validate(&request) {
            return refused(r);
        }
        if let Some(key) = &key {
            // A retry: the job its key names, once that is journaled.
            match self.keyed(key, &request) {
                Some(Ok((id, true))) => return Box::pin(std::future::ready(Ok(id))),
                Some(Ok((id, false))) => {
                    let (answer, answered) = oneshot::channel();
                    self.key_waiters.push((id, answer));
                    return Box::pin(async move {
                        answered.await.unwrap_or(Err(Refusal::Invalid {
                            field: "job",
                            problem: "the control plane stopped before journaling it".into(),
                        }))
                    });
                }
                Some(Err(r)) => return refused(r),
                None => {}
            }
        }
        let at = at.unwrap_or_else(|| self.clock.now());
        let id = request.id.unwrap_or(JobId(self.next_job_id));
        let shape = crate::request::shape(&request);
        let spec = JobSpec {
            id,
            job_type: request.job_type,
            tenant: request.tenant,
            gpus: request.gpus,
            total_steps: request.work,
            weight: request.weight,
            arrival: at,
            run: request.run,
            key,
        };
        // Checked before its names are interned: a refused submission adds nothing to the engine.
        let engine = self.engine();
        let names = engine.names();
        for (field, name, known) in [
            ("job_type", &spec.job_type, &names.job_types),
            ("tenant", &spec.tenant, &names.tenants),
        ] {
            if known.len() >= MAX_NAMES && !known.contains(name) {
                return refused(Refusal::Invalid {
                    field,
                    problem: format!(
                        "this control plane already knows {MAX_NAMES} names of that kind, the most it keeps"
                    ),
                });
            }
        }
        let types = engine.cluster().gpu_types();
        if let Some(unknown) = shape.pp_by_type.keys().find(|t| !types.contains(t)) {
            return refused(Refusal::Invalid {
                field: "pp_by_type",
                problem: format!(
                    "this cluster has no GPU type {unknown:?} (it has {})",
                    types.join(", ")
                ),
            });
        }
        let mut candidate = engine.candidate(spec.id, &spec.job_type, spec.gpus, spec.total_steps);
        candidate.sizes = Some(shape.sizes);
        candidate.group_by_type = shape.group_by_type(types);
        if let Err(why) = engine.check(&candidate) {
            let field = match why {
                Unrunnable::TooLong { .. } => "work",
                Unrunnable::GangTooLarge { .. } | Unrunnable::NoRate { .. } => "gpus",
            };
            return refused(Refusal::Invalid {
                field,
                problem: format!("job type {:?} cannot run here: {why}", spec.job_type),
            });
        }
        let job = job_of(self.engine(), &spec, Some(&shape));
        self.next_job_id = self.next_job_id.max(id.0 + 1);
        let (answer, answered) = oneshot::channel();
        self.unjournaled.push((spec, shape, job, answer));
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
            .flat_map(|(spec, shape, _, _)| {
                let shaped = (*shape != Shape::rigid(spec.gpus)).then(|| Record::Shaped {
                    job: spec.id,
                    shape: shape.clone(),
                });
                std::iter::once(Record::Submitted(spec.clone())).chain(shaped)
            })
            .collect();
        self.persist(&records);
        for (spec, _, job, answer) in batch {
            self.engine()
                .submit(job, spec.arrival)
                .expect("checked: new id, runnable");
            self.add_job(spec.id, Phase::Pending);
            self.stats.submitted += 1;
            let _ = answer.send(Ok(spec.id));
        }
        for (id, answer) in self.key_waiters.drain(..) {
            let _ = answer.send(Ok(id));
        }
        if self.settings.engine.schedule_on_arrival {
            self.queue_round(ctx);
        }
    }
}

impl Handler<Cancel> for ClusterActor {
    type Result = ResponseFuture<Result<(), Refusal>>;

    fn handle(&mut self, Cancel(job): Cancel, ctx: &mut Context<Self>) -> Self::Result {
        let refused = |r| -> Self::Result { Box::pin(std::future::ready(Err(r))) };
        let Some(entry) = self.store.ledger.jobs.get(&job) else {
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
        let carried = self.commit(changes, now, ending, ctx);
        self.retire([job]);
        Box::pin(async move {
            let _ = carried.await;
            Ok(())
        })
    }
}

impl Handler<HealthChanged> for ClusterActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: HealthChanged, ctx: &mut Context<Self>) -> Self::Result {
        if msg.health.healthy {
            self.unhealthy.remove(&msg.gpu);
        } else {
            tracing::warn!(gpu = msg.gpu.0, reason = ?msg.health.reason, "GPU out of service; its job moves");
            let why = msg.health.reason.clone();
            self.unhealthy
                .insert(msg.gpu, why.unwrap_or_else(|| "unhealthy".into()));
        }
        // Its job is placed again by the next round on the timer: GPU failures come in bursts
        // (a node's XID storm), and one round then moves all their jobs.
        let carried = self.set_in_service(&[msg.gpu], msg.health.healthy, ctx);
        Box::pin(async move {
            let _ = carried.await;
        })
    }
}

impl Handler<Cordon> for ClusterActor {
    type Result = ResponseFuture<Result<(), Refusal>>;

    fn handle(&mut self, msg: Cordon, ctx: &mut Context<Self>) -> Self::Result {
        let count = self.gpus.len();
        if let Some(bad) = msg.gpus.iter().find(|&&g| g as usize >= count) {
            let problem = format!(
                "GPU {bad} does not exist (this cluster has GPUs 0 to {})",
                count - 1
            );
            return Box::pin(std::future::ready(Err(Refusal::Invalid {
                field: "gpus",
                problem,
            })));
        }
        tracing::info!(gpus = ?msg.gpus, cordoned = msg.cordoned, "cordon changed by the operator");
        // Journaled first: a restarted daemon keeps the GPUs out of service.
        self.persist(&[Record::Cordoned {
            gpus: msg.gpus.clone(),
            cordoned: msg.cordoned,
        }]);
        let gpus: Vec<GpuId> = msg.gpus.iter().map(|&g| GpuId(g)).collect();
        let carried = self.set_in_service(&gpus, !msg.cordoned, ctx);
        // An operator waits on the move: place the jobs now.
        self.queue_round(ctx);
        Box::pin(async move {
            let _ = carried.await;
            Ok(())
        })
    }
}

impl Handler<Peek> for ClusterActor {
    type Result = MessageResult<Peek>;

    fn handle(&mut self, _: Peek, _: &mut Context<Self>) -> Self::Result {
        // Busy stopping workers: what it said last.
        if let Ok(executor) = self.executor.try_lock() {
            self.next_event = executor.next_event();
        }
        let next_event = self.next_event;
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
        let ids: Vec<JobId> = self.store.ledger.jobs.keys().copied().collect();
        MessageResult(ids.into_iter().filter_map(|id| self.info(id)).collect())
    }
}

impl Handler<ListNodes> for ClusterActor {
    type Result = MessageResult<ListNodes>;

    fn handle(&mut self, _: ListNodes, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.nodes())
    }
}

impl Handler<RunsAs> for ClusterActor {
    type Result = Result<Option<u32>, Refusal>;

    fn handle(&mut self, RunsAs(job): RunsAs, _: &mut Context<Self>) -> Self::Result {
        let entry = self
            .store
            .ledger
            .jobs
            .get(&job)
            .ok_or(Refusal::NoSuchJob(job))?;
        Ok(entry.spec.run.as_ref().and_then(|r| r.user).map(|u| u.uid))
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
        let snapshot: StatsSnapshot = self.stats.snapshot(active, running, busy, gpus);
        MessageResult(snapshot)
    }
}

impl Handler<Subscribe> for ClusterActor {
    type Result = MessageResult<Subscribe>;

    fn handle(&mut self, _: Subscribe, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.events.clone())
    }
}

impl Handler<Timeline> for ClusterActor {
    type Result = MessageResult<Timeline>;

    fn handle(&mut self, _: Timeline, _: &mut Context<Self>) -> Self::Result {
        let ids: Vec<JobId> = self.store.ledger.jobs.keys().copied().collect();
        MessageResult(
            ids.into_iter()
                .filter_map(|id| self.info(id).map(|i| (id, (i.started, i.finished))))
                .collect(),
        )
    }
}

/// The job type and tenant ids the engine gave a job (tests: a refused submission interns nothing).
#[cfg(test)]
#[derive(Message)]
#[rtype(result = "Option<(u32, u32)>")]
pub(crate) struct InternedIds(pub JobId);

#[cfg(test)]
impl Handler<InternedIds> for ClusterActor {
    type Result = MessageResult<InternedIds>;

    fn handle(&mut self, InternedIds(id): InternedIds, _: &mut Context<Self>) -> Self::Result {
        let engine = self.engine();
        MessageResult(engine.job(id).map(|j| (j.job_type.0, j.tenant.0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::executor::SimExecutor;
    use gangway_core::cluster::Cluster;
    use gangway_core::engine::EngineConfig;
    use gangway_core::job::Names;
    use gangway_core::placement::PackingPlacer;
    use gangway_core::throughput::DurationModel;

    /// FIFO on one server of 4 V100s, simulated workers, in `clock`'s virtual time.
    fn fifo_on_four_gpus(clock: Arc<VirtualClock>) -> Addr<ClusterActor> {
        let model = DurationModel::uniform(1);
        let policy = gangway_core::policy::build("fifo", &Default::default(), &model).unwrap();
        let parts = Parts {
            cluster: Arc::new(Cluster::parse_spec("v100=1x4", 4).unwrap()),
            model: Arc::new(model),
            names: Names::default(),
            policy,
            placer: Box::new(PackingPlacer),
            executor: Box::new(SimExecutor::default()),
            probes: Vec::new(),
            health_every: Duration::from_secs(60),
        };
        let settings = Settings::new(EngineConfig::default(), TimeSource::Virtual(clock));
        ClusterActor::start(parts, settings).unwrap()
    }

    #[actix::test]
    async fn ended_jobs_leave_the_engine_and_stay_listed() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        let mut ids = Vec::new();
        for work in [100.0, 5000.0, 7000.0] {
            let request = JobRequest {
                tenant: "a".into(),
                ..JobRequest::new("toy", 2, work)
            };
            let submit = Submit {
                request,
                at: None,
                key: None,
            };
            ids.push(cluster.send(submit).await.unwrap().unwrap());
        }
        cluster.send(Round).await.unwrap();
        cluster.send(Cancel(ids[2])).await.unwrap().unwrap();
        clock.set(200.0);
        cluster.send(Poll).await.unwrap();
        // The finished and the cancelled jobs are gone from the engine; the running one is there.
        let interned = |id| cluster.send(InternedIds(id));
        assert_eq!(interned(ids[0]).await.unwrap(), None, "finished, forgotten");
        assert_eq!(
            interned(ids[2]).await.unwrap(),
            None,
            "cancelled, forgotten"
        );
        assert!(interned(ids[1]).await.unwrap().is_some(), "running, kept");
        // The API still shows how they ended.
        let jobs = cluster.send(ListJobs).await.unwrap();
        let phases: Vec<Phase> = jobs.iter().map(|j| j.phase).collect();
        assert_eq!(phases, [Phase::Finished, Phase::Running, Phase::Cancelled]);
        assert_eq!(jobs[0].finished, Some(100.0));
        assert_eq!(jobs[0].started, Some(0.0));
        assert_eq!(jobs[0].progress, 1.0);
    }

    #[actix::test]
    async fn a_client_inventing_names_is_refused_past_the_limit() {
        let cluster = fifo_on_four_gpus(Arc::new(VirtualClock::new(0.0)));
        let submit = |tenant: String| Submit {
            request: JobRequest {
                tenant,
                ..JobRequest::new("toy", 1, 10.0)
            },
            at: None,
            key: None,
        };
        for k in 0..MAX_NAMES {
            cluster
                .send(submit(format!("tenant-{k}")))
                .await
                .unwrap()
                .unwrap();
        }
        let refused = cluster.send(submit("one-more".into())).await.unwrap();
        assert!(
            matches!(&refused, Err(Refusal::Invalid { field: "tenant", problem }) if problem.contains("10000")),
            "{refused:?}"
        );
        // A name it knows is still fine.
        assert!(
            cluster
                .send(submit("tenant-7".into()))
                .await
                .unwrap()
                .is_ok()
        );
    }
}
