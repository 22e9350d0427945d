//! The cluster actor: owns the scheduling state, runs the rounds, and has what they decide carried out
//! through the GPU actors and the executor.
//!
//! A round runs the same [`Engine`] the simulator runs, with the same policy and placer, on a blocking
//! thread (the actor takes no other message meanwhile: solving is short). Its changes are planned
//! (`plan`: pure), journaled and fsynced as one group (`store`), and only then carried out (`carry`):
//! stops first (checkpoint, release the gang), then starts (lease every gang at once, launch).
//! Carrying out runs outside the actor's state, one batch at a time and in order, so that the API
//! keeps answering while workers checkpoint; the next round waits until the batch before it has
//! settled. A start whose gang cannot be leased or whose workers cannot launch goes back to the queue.
//!
//! Rooms, each with its own part of the actor's work:
//! - `submit`: validation, idempotency keys, and group commit of submissions;
//! - `round`: the rounds, and committing, carrying out and settling what they and other changes
//!   (cancels, cordons, health) decide;
//! - `events`: what the workers report;
//! - `jobs`: a job's phase (one state machine, checked in `ClusterActor::advance`), its gang and
//!   its restarts;
//! - `views`: the read-only views the API reads without asking the actor;
//! - `plan`, `carry`, `store`, `recover`: the pure plan, carrying it out, the journal, recovery;
//! - `messages`: what the actor answers (re-exported here).

mod carry;
mod events;
mod jobs;
mod messages;
mod plan;
mod recover;
mod round;
mod stopping;
mod store;
mod submit;
mod views;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::prelude::*;
use gangway_core::cluster::{GpuId, NodeId};
use gangway_core::engine::Engine;
use gangway_core::job::JobId;
use gangway_core::placement::Placer;
use gangway_core::policy::Policy;
use rustc_hash::FxHashMap;
use tokio::sync::{broadcast, oneshot};

use crate::IdMap;
use crate::clock::{Clock, WallClock};
use crate::executor::Executor;
use crate::gpu::{GpuActor, HealthChanged, Holder};
use crate::health::HealthProbe;
use crate::ledger::{Record, Standing, Violation};
use crate::lifecycle::Phase;
use crate::stats::Stats;
use carry::{Gang, GpuActors};
use jobs::JobHandle;
use plan::Retune;
use round::Carrier;
use store::Store;
use submit::{Unjournaled, job_of};

pub use messages::{
    Cancel, ClusterSample, Cordon, GetStats, GetViews, GpuCount, JobInfo, JobRequest, JobSizes,
    LearnedSteps, ListJobs, ListNodes, NodeInfo, Outlook, Parts, Peek, Poll, QueueBy, QueueOrder,
    Refusal, Resize, RestartPhases, Round, RoundReport, RunsAs, Settings, ShowJob, StartError,
    Submit, Subscribe, TimeSource, Timeline,
};
pub use views::{
    HISTORY_EVERY_SECONDS, HISTORY_SAMPLES, HISTORY_TENANTS, JOBS_PER_PIECE, JobPage,
    RUNNING_SWEEP_SECONDS, View, Views, WAITING_SWEEP_SECONDS,
};

/// The policy's state and the placer, with the engine they drive; moved to a blocking thread while a
/// round solves.
struct Scheduler {
    engine: Engine<'static>,
    policy: Box<dyn Policy>,
    placer: Box<dyn Placer>,
}

/// The control plane's scheduler: the engine with its policy and placer, the journal, the job and
/// GPU actors, and the executor it drives through them (see the module's doc).
pub struct ClusterActor {
    /// Home between rounds; on a blocking thread while a round solves.
    sched: Option<Scheduler>,
    store: Store,
    jobs: IdMap<JobId, JobHandle>,
    executor: Arc<Mutex<Box<dyn Executor>>>,
    gpus: Arc<GpuActors>,
    carrier: Carrier,
    clock: Arc<dyn Clock>,
    stats: Stats,
    /// Jobs in phase Running (kept as they move, for the views).
    running: usize,
    views: views::Publisher,
    settings: Settings,
    /// Submissions validated and waiting to be journaled together.
    unjournaled: Vec<Unjournaled>,
    /// What those hold of each user's (as the store counts them once journaled): kept as they
    /// come, since summing the commands again at each submission costs a batch times their sizes.
    unjournaled_by_user: IdMap<u32, store::Unfinished>,
    /// Jobs that ended since the last batch that started one: what a resize's reason names as the
    /// GPUs' source.
    ended_since_starts: Vec<JobId>,
    /// The id the next submission gets.
    next_job_id: u32,
    /// Submissions that repeat the idempotency key of one waiting to be journaled: answered with
    /// its id once it is.
    key_waiters: Vec<(JobId, oneshot::Sender<Result<JobId, Refusal>>)>,
    /// How the jobs that ended since the start ended, as the API shows them, for as long as the
    /// ledger remembers them (at most [`HISTORY`](crate::ledger::HISTORY): those it forgets are taken out as it does); the
    /// engine forgets them.
    ended: BTreeMap<JobId, JobInfo>,
    /// Jobs re-adopted at recovery whose gangs are leased once the actor runs.
    adopted: Vec<JobId>,
    round_queued: bool,
    /// GPUs their health probes took out of service, with why.
    unhealthy: FxHashMap<GpuId, String>,
    /// GPUs whose probe failed and is no longer called, with why.
    unwatched: FxHashMap<GpuId, String>,
    /// Stops going on in the background, by job ([`stopping`]).
    stopping: IdMap<JobId, stopping::Lingering>,
    /// Ends of stops in the background polled before the batch that began them settled (the
    /// executor answered, and the workers went, while the batch's starts were carried out).
    stopped_early: IdMap<JobId, (u64, f64)>,
    /// Job types each user other than the daemon's named first ([`submit::MAX_NEW_TYPES_PER_USER`]).
    types_named_by: IdMap<u32, u32>,
    /// Retunes that found the executor busy (stopping workers, for up to its patience):
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
        let cluster = Arc::clone(&parts.cluster);
        let (probes, health_every) = (parts.probes, parts.health_every);
        let (policy, placer) = (parts.policy, parts.placer);
        Ok(ClusterActor::create(move |ctx| {
            let watcher = ctx.address().recipient::<HealthChanged>();
            // Probes by GPU id: the first GPUs have them.
            let mut probes: Vec<Option<Box<dyn HealthProbe>>> =
                probes.into_iter().map(Some).collect();
            let servers = (cluster.nodes().iter().enumerate())
                .map(|(n, _)| cluster.gpus_of(NodeId(n as u32)).collect::<Vec<GpuId>>());
            let gpus = Arc::new(GpuActors::start(servers, |gpus| {
                let probes =
                    (gpus.iter()).filter_map(|&g| Some((g, probes.get_mut(g.0 as usize)?.take()?)));
                GpuActor::new(gpus.iter().copied())
                    .with_probes(probes, health_every, watcher.clone())
                    .start()
            }));
            let mut actor = ClusterActor {
                sched: None,
                next_job_id: store.ledger.next_job_id,
                store,
                jobs: IdMap::default(),
                executor,
                gpus,
                carrier: Carrier::default(),
                clock,
                stats: Stats::default(),
                running: 0,
                views: views::Publisher::new(events),
                settings,
                unjournaled: Vec::new(),
                unjournaled_by_user: IdMap::default(),
                ended_since_starts: Vec::new(),
                key_waiters: Vec::new(),
                ended: BTreeMap::new(),
                adopted: Vec::new(),
                unhealthy: FxHashMap::default(),
                unwatched: FxHashMap::default(),
                stopping: IdMap::default(),
                stopped_early: IdMap::default(),
                types_named_by: IdMap::default(),
                round_queued: false,
                deferred_retunes: Vec::new(),
                next_event: None,
            };
            actor.recover(engine, policy, placer, now);
            actor.stats.counters.recovery_seconds = recovery.elapsed().as_secs_f64();
            tracing::info!(
                seconds = actor.stats.counters.recovery_seconds,
                jobs = actor.jobs.len(),
                replayed,
                "control plane recovered"
            );
            actor
        }))
    }

    fn add_job(&mut self, id: JobId, phase: Phase) {
        self.running += usize::from(phase == Phase::Running);
        self.jobs.insert(id, JobHandle::new(id, phase));
        self.views.touch(id);
    }

    /// Moves job `job` to phase `to`: the one place where jobs change phase. The move is published
    /// on the event stream with the next view, which shows it. A move the state
    /// machine refuses is a bug in the control plane, not in its input: it is logged loudly and
    /// counted ([`crate::stats::Counters::illegal_transitions`]), and the job stays where it was.
    fn advance(&mut self, job: JobId, to: Phase, at: f64) {
        let Some(handle) = self.jobs.get_mut(&job) else {
            return;
        };
        let from = handle.phase();
        match handle.advance(to, at) {
            Ok(event) => {
                self.running = self.running + usize::from(to == Phase::Running)
                    - usize::from(from == Phase::Running);
                self.views.touch(job);
                self.views.moved(event);
            }
            Err(e) => {
                tracing::error!(job = job.0, error = %e, "job refused a transition");
                self.stats.counters.illegal_transitions += 1;
            }
        }
    }

    fn engine(&mut self) -> &mut Engine<'static> {
        &mut self
            .sched
            .as_mut()
            .expect("the scheduler is home between rounds")
            .engine
    }

    /// Journals `records` (fsynced) and folds them into the ledger; counts what the ledger refused.
    fn persist(&mut self, records: &[Record]) -> Vec<Violation> {
        let violations = self.store.persist(records);
        self.stats.counters.violations += violations.len() as u64;
        // Ended jobs past the ledger's history (or a user's share of it): the views and the
        // endings kept forget them too.
        for job in self.store.ledger.take_forgotten() {
            self.ended.remove(&job);
            self.views.touch(job);
        }
        violations
    }

    /// Jobs that ended (their ending committed): the API keeps how they ended, and the engine and the
    /// actor's handles forget them, so that memory follows the active jobs and a bounded history.
    fn retire(&mut self, jobs: impl IntoIterator<Item = JobId>) {
        for job in jobs {
            if let Some(info) = self.info(job) {
                self.ended.insert(job, info);
            }
            self.engine().forget(job);
            if let Some(handle) = self.jobs.remove(&job) {
                self.running -= usize::from(handle.phase() == Phase::Running);
            }
            self.views.touch(job);
        }
    }

    fn current_attempt(&self, job: JobId) -> Option<u64> {
        match self.store.ledger.jobs.get(&job).map(|e| &e.standing) {
            Some(Standing::Running { attempt, .. }) => Some(*attempt),
            _ => None,
        }
    }
}

impl Actor for ClusterActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Re-adopted jobs lease their gangs again before anything else happens.
        let adopted = std::mem::take(&mut self.adopted);
        let now = self.clock.now();
        let mut gangs = Vec::new();
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
            let gang = Gang::new(&self.gpus, Holder { job, attempt }, partner, &gpus);
            if let Some(handle) = self.jobs.get_mut(&job) {
                handle.gang = Some(gang.clone());
                handle.note_gpus(now, gpus.len() as u32);
            }
            gangs.push(gang);
        }
        let actors = Arc::clone(&self.gpus);
        let leases = async move {
            let (leased, _) = carry::lease_all(&actors, std::iter::empty(), gangs.iter()).await;
            for (gang, result) in gangs.iter().zip(leased) {
                if let Err(e) = result {
                    let job = gang.holder.job.0;
                    tracing::error!(job, error = %e, "a re-adopted job could not lease its GPUs");
                }
            }
        };
        ctx.wait(leases.into_actor(self));
        self.publish();
        if let TimeSource::Wall { time_scale } = self.settings.time {
            let round = Duration::from_secs_f64(
                (self.settings.engine.round_length / time_scale).max(0.001),
            );
            ctx.run_interval(round, |actor, ctx| actor.queue_round(ctx));
            ctx.run_interval(self.settings.poll_every, |_, ctx| ctx.notify(Poll));
        }
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

/// Runs a closure on the actor, in its context (tests: a state no message leads to).
#[cfg(test)]
pub(crate) struct OnActor<F>(pub F);

#[cfg(test)]
impl<F, R> Message for OnActor<F>
where
    F: FnOnce(&mut ClusterActor, &mut Context<ClusterActor>) -> R,
    R: 'static,
{
    type Result = R;
}

#[cfg(test)]
impl<F, R> Handler<OnActor<F>> for ClusterActor
where
    F: FnOnce(&mut ClusterActor, &mut Context<ClusterActor>) -> R,
    R: 'static,
{
    type Result = MessageResult<OnActor<F>>;

    fn handle(&mut self, OnActor(f): OnActor<F>, ctx: &mut Context<Self>) -> Self::Result {
        MessageResult(f(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::cluster::submit::MAX_NAMES;
    use crate::executor::SimExecutor;
    use gangway_core::cluster::Cluster;
    use gangway_core::engine::EngineConfig;
    use gangway_core::job::Names;
    use gangway_core::placement::PackingPlacer;
    use gangway_core::throughput::DurationModel;

    /// Waits until the publications' tally tells `view`'s job list's length (it is counted on a
    /// blocking thread after the view is published), and checks it against the length counted
    /// entry by entry.
    async fn told_length_is_counted(view: &View) {
        for _ in 0..2000 {
            if let (Some(told), counted) = view.told_and_counted_json_len() {
                assert_eq!(told, counted, "the length the tally told");
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the view's length was not told in 10 s");
    }

    /// A submission, now and without a key, of a `toy` job of `gpus` GPUs and `work` seconds.
    fn toy(gpus: u32, work: f64) -> Submit {
        Submit {
            request: JobRequest::new("toy", gpus, work),
            at: None,
            key: None,
        }
    }

    /// FIFO on one server of 4 V100s, simulated workers, in `clock`'s virtual time.
    fn fifo_on_four_gpus(clock: Arc<VirtualClock>) -> Addr<ClusterActor> {
        fifo_on("v100=1x4", clock)
    }

    fn fifo_on(cluster: &str, clock: Arc<VirtualClock>) -> Addr<ClusterActor> {
        let model = DurationModel::uniform(1);
        let policy = gangway_core::policy::build("fifo", &Default::default(), &model).unwrap();
        start_on(cluster, model, policy, clock)
    }

    /// `policy` on `cluster` (servers of 4 GPUs), simulated workers, in `clock`'s virtual time.
    fn start_on(
        cluster: &str,
        model: DurationModel,
        policy: Box<dyn gangway_core::policy::Policy>,
        clock: Arc<VirtualClock>,
    ) -> Addr<ClusterActor> {
        let parts = Parts {
            cluster: Arc::new(Cluster::parse_spec(cluster, 4).unwrap()),
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

    /// Grants every job `plan[k]` (GPU type, GPUs; none: nothing) in its `k`th round.
    struct Scripted {
        plan: Vec<Option<(u16, u32)>>,
        round: usize,
    }

    impl gangway_core::policy::Policy for Scripted {
        fn allocate(
            &mut self,
            input: &gangway_core::policy::RoundInput<'_>,
        ) -> Vec<gangway_core::policy::Grant> {
            let granted = self.plan[self.round.min(self.plan.len() - 1)];
            self.round += 1;
            let Some((t, gpus)) = granted else {
                return Vec::new();
            };
            let gpu_type = gangway_core::cluster::GpuTypeId(t);
            (input.jobs.iter())
                .map(|v| gangway_core::policy::Grant::new(v.id(), gpu_type, gpus))
                .collect()
        }
    }

    /// Grants the `k`th job (by id) four GPUs of type `(round + k) % 2`: two jobs swap servers every
    /// round.
    struct Swapping {
        round: usize,
    }

    impl gangway_core::policy::Policy for Swapping {
        fn allocate(
            &mut self,
            input: &gangway_core::policy::RoundInput<'_>,
        ) -> Vec<gangway_core::policy::Grant> {
            let mut ids: Vec<JobId> = input.jobs.iter().map(|v| v.id()).collect();
            ids.sort_unstable();
            self.round += 1;
            (ids.into_iter().enumerate())
                .map(|(k, id)| {
                    let gpu_type = gangway_core::cluster::GpuTypeId(((self.round + k) % 2) as u16);
                    gangway_core::policy::Grant::new(id, gpu_type, 4)
                })
                .collect()
        }
    }

    #[actix::test]
    async fn jobs_that_swap_servers_lease_in_one_batch_as_their_gpus_are_given_back_first() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let model = DurationModel::uniform(2);
        let policy = Box::new(Swapping { round: 0 });
        let cluster = start_on("v100=1x4,k80=1x4", model, policy, Arc::clone(&clock));
        let mut ids = Vec::new();
        for _ in 0..2 {
            ids.push(cluster.send(toy(4, 1e6)).await.unwrap().unwrap());
        }
        let mut placed_before: Option<Vec<Vec<u32>>> = None;
        for round in 0..4 {
            clock.set(60.0 * f64::from(round));
            let report = cluster.send(Round).await.unwrap();
            cluster.send(Poll).await.unwrap();
            // Each takes the GPUs the other gives back in the same batch: given back first, every
            // take is granted at once, and no gang falls back to leasing GPU by GPU.
            assert_eq!(report.failed_starts, 0, "round {round}: {report:?}");
            assert_eq!(report.leased_in_order, 0, "round {round}: {report:?}");
            assert_eq!(report.starts, 2, "round {round}: {report:?}");
            let jobs = cluster.send(ListJobs).await.unwrap();
            let placed: Vec<Vec<u32>> = jobs.iter().map(|j| j.placement.clone()).collect();
            assert!(jobs.iter().all(|j| j.phase == Phase::Running), "{jobs:?}");
            if let Some(before) = &placed_before {
                assert_eq!(placed[0], before[1], "round {round}: swapped");
                assert_eq!(placed[1], before[0], "round {round}: swapped");
            }
            placed_before = Some(placed);
        }
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!(stats.counters.leases_in_order, 0);
    }

    #[actix::test]
    async fn a_move_to_as_many_gpus_leaves_a_jobs_gpu_history_as_it_was() {
        let clock = Arc::new(VirtualClock::new(0.0));
        // Two GPUs of the first type, moved to the second, preempted, then back on the first.
        let policy = Box::new(Scripted {
            plan: vec![Some((0, 2)), Some((1, 2)), None, Some((0, 2))],
            round: 0,
        });
        let model = DurationModel::uniform(2);
        let cluster = start_on("v100=1x4,k80=1x4", model, policy, Arc::clone(&clock));
        let id = cluster.send(toy(2, 1e6)).await.unwrap().unwrap();
        let history_at = |t: f64| {
            let cluster = cluster.clone();
            let clock = Arc::clone(&clock);
            async move {
                clock.set(t);
                cluster.send(Round).await.unwrap();
                cluster.send(Poll).await.unwrap();
                let view = cluster.send(GetViews).await.unwrap().latest();
                let placed = view.job(id).unwrap().placement.clone();
                (view, placed)
            }
        };
        let (first, on_v100) = history_at(0.0).await;
        let (moved, on_k80) = history_at(60.0).await;
        assert_eq!(on_v100.len(), 2);
        assert_eq!(on_k80.len(), 2);
        assert!(on_v100.iter().all(|g| !on_k80.contains(g)), "it moved");
        let points = |view: &View| {
            (view.gpu_history(id).unwrap().iter())
                .map(|p| (p.at, p.gpus))
                .collect::<Vec<_>>()
        };
        assert_eq!(points(&moved), [(0.0, 2)], "a move is no stop");
        // The history was not copied for the move: both views share it.
        assert_eq!(
            first.gpu_history(id).unwrap().as_ptr(),
            moved.gpu_history(id).unwrap().as_ptr()
        );
        let (preempted, _) = history_at(120.0).await;
        assert_eq!(points(&preempted), [(0.0, 2), (120.0, 0)], "a stop shows");
        let (resumed, _) = history_at(180.0).await;
        assert_eq!(points(&resumed), [(0.0, 2), (120.0, 0), (180.0, 2)]);
    }

    #[actix::test]
    async fn a_start_the_ledger_refuses_is_not_carried_out_and_is_tried_again() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        let mut ids = Vec::new();
        for _ in 0..2 {
            ids.push(cluster.send(toy(2, 1e6)).await.unwrap().unwrap());
        }
        // The ledger believes a job it does not know holds every GPU: each start breaks an
        // invariant.
        let phantom = OnActor(|actor: &mut ClusterActor, _: &mut Context<ClusterActor>| {
            for gpu in 0..4 {
                actor
                    .store
                    .ledger
                    .holders
                    .insert(gpu, smallvec::smallvec![JobId(999)]);
            }
        });
        cluster.send(phantom).await.unwrap();
        let report = cluster.send(Round).await.unwrap();
        cluster.send(Poll).await.unwrap();
        assert_eq!(report.starts, 0, "{report:?}");
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!(stats.counters.violations, 2);
        let jobs = cluster.send(ListJobs).await.unwrap();
        assert!(jobs.iter().all(|j| j.phase == Phase::Pending), "{jobs:?}");
        // Once the ledger holds the GPUs free, the next round starts both.
        let free = OnActor(|actor: &mut ClusterActor, _: &mut Context<ClusterActor>| {
            actor.store.ledger.holders.clear();
        });
        cluster.send(free).await.unwrap();
        clock.set(60.0);
        let report = cluster.send(Round).await.unwrap();
        cluster.send(Poll).await.unwrap();
        assert_eq!(report.starts, 2, "{report:?}");
        let jobs = cluster.send(ListJobs).await.unwrap();
        assert!(jobs.iter().all(|j| j.phase == Phase::Running), "{jobs:?}");
    }

    #[actix::test]
    async fn the_views_forget_the_ended_jobs_the_ledger_forgets() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        let total = crate::ledger::HISTORY as u32 + 3;
        for _ in 0..total {
            let id = cluster.send(toy(2, 100.0)).await.unwrap().unwrap();
            cluster.send(Cancel(id)).await.unwrap().unwrap();
        }
        let view = cluster.send(GetViews).await.unwrap().latest();
        let listed: Vec<u32> = view.jobs().map(|j| j.id.0).collect();
        assert_eq!(listed.len(), crate::ledger::HISTORY, "the last ended jobs");
        // Told from the views before it, forgotten jobs taken off.
        told_length_is_counted(&view).await;
        assert_eq!(listed.first(), Some(&3), "the three oldest forgotten");
        assert_eq!(listed.last(), Some(&(total - 1)));
    }

    #[actix::test]
    async fn a_batch_carried_out_quickly_is_published_once_settled() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        cluster.send(toy(2, 100.0)).await.unwrap().unwrap();
        let report = cluster.send(Round).await.unwrap();
        assert_eq!(report.starts, 1);
        let published = cluster
            .send(GetStats)
            .await
            .unwrap()
            .counters
            .views_published;
        // Past the time a batch still being carried out would be published: this one settled (and
        // was published then), so nothing is published again, in the middle of a later round.
        tokio::time::sleep(super::round::PUBLISH_WHILE_CARRYING * 2).await;
        let after = cluster
            .send(GetStats)
            .await
            .unwrap()
            .counters
            .views_published;
        assert_eq!(after, published, "a stale publication ran");
    }

    #[actix::test]
    async fn the_servers_list_rebuilds_only_the_servers_that_changed() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on("v100=3x2", Arc::clone(&clock));
        let views = cluster.send(GetViews).await.unwrap();
        let submit = || toy(2, 1000.0);
        // What is published is what a list built whole from the ledger says, at every step.
        let published = || {
            let view = views.latest();
            let nodes: Vec<NodeInfo> = view.nodes().iter().map(|n| NodeInfo::clone(n)).collect();
            (view, nodes)
        };
        let a = cluster.send(submit()).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        let (first, nodes) = published();
        assert_eq!(nodes, cluster.send(ListNodes).await.unwrap());
        let on_a = nodes.iter().position(|n| n.jobs == [a]).unwrap();
        assert_eq!(nodes[on_a].free, 0);
        assert_eq!(nodes.iter().map(|n| n.free).sum::<u32>(), 4);
        let b = cluster.send(submit()).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        let (second, nodes) = published();
        assert_eq!(nodes, cluster.send(ListNodes).await.unwrap());
        let on_b = nodes.iter().position(|n| n.jobs == [b]).unwrap();
        let idle = 3 - on_a - on_b;
        // The servers no lease touched are the entries published before, shared.
        assert!(Arc::ptr_eq(&first.nodes()[on_a], &second.nodes()[on_a]));
        assert!(Arc::ptr_eq(&first.nodes()[idle], &second.nodes()[idle]));
        assert!(!Arc::ptr_eq(&first.nodes()[on_b], &second.nodes()[on_b]));
        // A cordoned GPU's server says so; a finished job's server is free again.
        let gpu = nodes[idle].gpus[0];
        let cordon = Cordon {
            gpus: vec![gpu],
            cordoned: true,
        };
        cluster.send(cordon).await.unwrap().unwrap();
        clock.set(1500.0);
        cluster.send(Poll).await.unwrap();
        let (_, nodes) = published();
        assert_eq!(nodes, cluster.send(ListNodes).await.unwrap());
        assert_eq!(nodes[idle].out_of_service, [(gpu, "cordoned".to_owned())]);
        assert_eq!(nodes[idle].free, 1);
        assert!(nodes.iter().all(|n| n.jobs.is_empty()), "{nodes:?}");
        assert_eq!(nodes.iter().map(|n| n.free).sum::<u32>(), 5);
    }

    #[actix::test]
    async fn every_move_is_published_after_the_view_that_shows_it() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        let views = cluster.send(GetViews).await.unwrap();
        let mut events = cluster.send(Subscribe).await.unwrap().subscribe();
        let id = cluster.send(toy(2, 100.0)).await.unwrap().unwrap();
        assert_eq!(views.latest().job(id).unwrap().phase, Phase::Pending);
        cluster.send(Round).await.unwrap();
        let mut moves = Vec::new();
        while let Ok(event) = events.try_recv() {
            // The round's moves went out after the view that shows where they end.
            let shown = views.latest().job(id).unwrap().phase;
            assert_eq!(shown, Phase::Running, "{event:?}");
            moves.push((event.from, event.to));
        }
        assert_eq!(
            moves,
            [
                (Phase::Pending, Phase::Placing),
                (Phase::Placing, Phase::Starting),
                (Phase::Starting, Phase::Running),
            ]
        );
        let view = views.latest();
        assert_eq!(view.job(id).unwrap().placement.len(), 2);
        let held: u32 = view.nodes().iter().map(|n| 4 - n.free).sum();
        assert_eq!(held, 2);
        assert_eq!(view.stats().running_jobs, 1);
        // It finishes: the view and the stream say so; nothing was refused on the way.
        clock.set(200.0);
        cluster.send(Poll).await.unwrap();
        let ended = events.try_recv().unwrap();
        assert_eq!((ended.from, ended.to), (Phase::Running, Phase::Finished));
        let view = views.latest();
        assert_eq!(view.job(id).unwrap().phase, Phase::Finished);
        assert_eq!(view.stats().running_jobs, 0);
        assert_eq!(view.stats().counters.illegal_transitions, 0);
        told_length_is_counted(&view).await;
        let listed = view.jobs_json();
        assert_eq!(listed.len(), view.jobs_json_len());
        let listed: serde_json::Value = serde_json::from_slice(&listed).unwrap();
        assert_eq!(listed[0]["phase"], "finished", "{listed}");
    }

    #[actix::test]
    async fn a_submission_while_a_batch_is_carried_out_publishes_only_itself() {
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = fifo_on_four_gpus(Arc::clone(&clock));
        let views = cluster.send(GetViews).await.unwrap();
        let mut events = cluster.send(Subscribe).await.unwrap().subscribe();
        let submit = || toy(2, 100.0);
        let first = cluster.send(submit()).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        while events.try_recv().is_ok() {}
        let before = views.latest();
        assert_eq!(before.job(first).unwrap().phase, Phase::Running);
        assert_eq!(before.stats().running_jobs, 1);

        // A batch is being carried out; the first job finishes meanwhile, and its stop waits.
        let hold = |held| {
            OnActor(
                move |actor: &mut ClusterActor, ctx: &mut Context<ClusterActor>| {
                    actor.hold_carrier(held, ctx)
                },
            )
        };
        cluster.send(hold(true)).await.unwrap();
        clock.set(200.0);
        cluster.do_send(Poll);
        let second = cluster.send(submit()).await.unwrap().unwrap();
        let shown = views.latest();
        let phase = shown.job(second).map(|j| j.phase);
        assert_eq!(
            phase,
            Some(Phase::Pending),
            "answered before a view showed it"
        );
        assert!(
            std::ptr::eq(shown.job(first).unwrap(), before.job(first).unwrap()),
            "the stopping job's entry was rebuilt in the batch's middle: {:?}",
            shown.job(first)
        );
        assert_eq!(
            shown.stats().running_jobs,
            1,
            "counters ahead of the entries"
        );
        assert!(events.try_recv().is_err(), "a move went out unshown");

        // The batches go on: the stop's end shows the job finished, and its move goes out.
        cluster.send(hold(false)).await.unwrap();
        cluster.send(Round).await.unwrap();
        let finished = views.latest().job(first).map(|j| j.phase);
        assert_eq!(finished, Some(Phase::Finished));
        let moves: Vec<(JobId, Phase)> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| (e.job, e.to))
            .collect();
        assert!(moves.contains(&(first, Phase::Finished)), "{moves:?}");
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
        // The view lists them all: streamed in pieces, which join into the whole list, in id
        // order, of the length it says.
        let view = cluster.send(GetViews).await.unwrap().latest();
        let pieces: Vec<bytes::Bytes> = Arc::clone(&view).jobs_json_pieces().collect();
        assert_eq!(pieces.len(), (MAX_NAMES + 1).div_ceil(JOBS_PER_PIECE));
        let whole = view.jobs_json();
        assert_eq!(whole.len(), view.jobs_json_len());
        let listed: Vec<JobInfo> = serde_json::from_slice(&whole).unwrap();
        assert_eq!(listed.len(), MAX_NAMES + 1);
        assert!(listed.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(listed.last().unwrap().tenant, "tenant-7");
    }
}
