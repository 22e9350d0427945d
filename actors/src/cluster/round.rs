//! The rounds, and committing what they and every other change (cancels, worker events, cordons,
//! health) decide: plan, journal as one group, move the jobs' phases, then carry out one batch at a
//! time and settle its outcome.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::engine::Change;
use gangway_core::job::JobId;
use tokio::sync::oneshot;

use super::carry::{
    FailedStart, Gang, Outcome, Retry, StartStep, Steps, StopStep, blocking, carry_out,
};
use super::jobs::FailedStarts;
use super::messages::{Cancel, Cordon, Refusal, Resize, Round, RoundReport};
use super::plan::{self, Retune};
use super::stopping::held_by;
use super::views::Scope;
use super::{ClusterActor, Scheduler};
use crate::gpu::{HealthChanged, Holder};
use crate::ledger::{Record, Standing, Violation};
use crate::lifecycle::Phase;
use crate::{IdMap, IdSet};

/// How long a batch is carried out before the views show its jobs stopping and starting.
pub(super) const PUBLISH_WHILE_CARRYING: Duration = Duration::from_millis(50);

/// Committed batches, carried out one at a time, in order; and rounds waiting for them to settle.
#[derive(Default)]
pub(super) struct Carrier {
    /// The batch being carried out, if one is.
    carrying: Option<Carrying>,
    queue: VecDeque<(Steps, Settling, oneshot::Sender<RoundReport>)>,
    rounds_waiting: Vec<oneshot::Sender<RoundReport>>,
}

impl Carrier {
    fn idle(&self) -> bool {
        self.carrying.is_none() && self.queue.is_empty()
    }
}

/// A batch being carried out.
struct Carrying {
    since: Instant,
    /// The publication due if it takes longer than [`PUBLISH_WHILE_CARRYING`], cancelled when it
    /// settles (a stale one would publish in the middle of a later round, and lengthen it by a
    /// publication).
    publish_later: SpawnHandle,
}

/// Whether worker events publish a view now, with a batch carried out for `carrying` (if one is)
/// and the last full view published `since_last` ago: at once when none is; while one is, only
/// once it has been for [`PUBLISH_WHILE_CARRYING`] and no full view was published for as long (its
/// end publishes it all).
fn events_publish(carrying: Option<Duration>, since_last: Duration) -> bool {
    carrying.is_none_or(|c| c >= PUBLISH_WHILE_CARRYING && since_last >= PUBLISH_WHILE_CARRYING)
}

/// Where a batch's jobs go once it is carried out: the stopped ones from Checkpointing to their
/// next phase, and the started ones to Running (or back to Pending, if their start failed).
struct Settling {
    /// The round whose batch this is (other batches: cancels, worker events, cordons).
    round: Option<RoundTimes>,
    stopped: Vec<(JobId, Phase)>,
    started: Vec<JobId>,
}

/// When a round began, and how long its solve took.
#[derive(Clone, Copy)]
pub(super) struct RoundTimes {
    began: Instant,
    solve: Duration,
}

impl ClusterActor {
    /// Plans `changes`, journals the plan, moves the jobs it stops and starts into their phases, and
    /// queues its steps to be carried out; the receiver answers once they have been and the outcome
    /// is settled. `ending` names jobs whose stop ends them (finished, cancelled, failed);
    /// `round`, the round that decided them, if one did.
    pub(super) fn commit(
        &mut self,
        changes: Vec<Change>,
        now: f64,
        ending: IdMap<JobId, Phase>,
        round: Option<RoundTimes>,
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
            |job| self.jobs.get(&job).map(|h| h.phase()),
        );
        // The jobs whose records the ledger refused (they break an invariant): a plan's records
        // stop and start each job at most once, so these are the jobs whose start, if they have
        // one, was refused.
        let refused_jobs: IdSet<JobId> = (self.persist(&plan.records).iter())
            .map(Violation::job)
            .collect();
        let started = plan
            .starts
            .iter()
            .flat_map(|s| s.launch.gpus.iter().copied());
        self.views.touch_gpus(started);
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
        let mut stops = Vec::with_capacity(plan.stops.len());
        let mut settling = Settling {
            round,
            stopped: Vec::new(),
            started: Vec::new(),
        };
        for stop in plan.stops {
            let Some(handle) = self.jobs.get_mut(&stop.job) else {
                continue;
            };
            if let Some(gang) = &handle.gang {
                handle.restarts.last_size = Some(gang.gpus.len() as u32);
                self.views.touch_gpus(gang.gpus.iter().copied());
            }
            let restarts = matches!(stop.next, Phase::Migrating | Phase::Resizing);
            handle.restarts.stopped(restarts, now);
            // A move or resize starts it again in this plan (below, or it fails and shows the
            // stop there): its GPU history shows no stop, and is not copied for one.
            if !restarts {
                handle.note_gpus(now, 0);
            }
            stops.push(StopStep {
                job: stop.job,
                gang: handle.gang.take(),
                stop_workers: stop.stop_workers,
            });
            // Its workers checkpoint while the batch is carried out; a job that ends, ends now.
            if stop.checkpoint {
                self.advance(stop.job, Phase::Checkpointing, now);
                settling.stopped.push((stop.job, stop.next));
            } else {
                self.advance(stop.job, stop.next, now);
            }
        }
        let mut refused = Vec::new();
        let mut starts = Vec::new();
        let active = self.jobs.len();
        let mut resized = 0;
        for start in plan.starts {
            let launch = start.launch;
            let job = launch.job;
            let Some(handle) = self.jobs.get_mut(&job) else {
                continue;
            };
            // A start the ledger refused is not carried out: it fails, and a job stopped to move
            // waits instead.
            if refused_jobs.contains(&job) {
                refused.push(FailedStart::by_cluster(
                    job,
                    "the journal refused the start".to_owned(),
                ));
                if let Some(stopped) = settling.stopped.iter_mut().find(|(j, _)| *j == job) {
                    stopped.1 = Phase::Preempted;
                }
                continue;
            }
            let size = launch.gpus.len() as u32;
            if let Some(from) = handle.restarts.last_size.filter(|&from| from != size) {
                resized += 1;
                let others: Vec<JobId> = arrived.iter().copied().filter(|&j| j != job).collect();
                handle.restarts.resizes += 1;
                handle.restarts.last_resize = Some(Resize {
                    from,
                    to: size,
                    at: now,
                    why: plan::resize_reason(from, size, &others, &ended, active),
                });
            }
            handle.batch = launch.batch;
            handle.note_gpus(now, size);
            let holder = Holder {
                job,
                attempt: launch.attempt,
            };
            let gang = Gang::new(&self.gpus, holder, start.partner, &launch.gpus);
            handle.gang = Some(gang.clone());
            // A queued job is placed and starting now; a job being moved or resized shows its
            // checkpoint until its old workers have stopped.
            if start.via_placing {
                self.advance(job, Phase::Placing, now);
                self.advance(job, Phase::Starting, now);
            }
            settling.started.push(job);
            starts.push(StartStep { launch, gang });
        }
        let count = |next: Phase| settling.stopped.iter().filter(|s| s.1 == next).count();
        let (preempted, moved) = (count(Phase::Preempted), count(Phase::Migrating));
        self.stats
            .note_changes(preempted, moved, resized, starts.len());
        if !refused.is_empty() {
            self.fail_starts(&refused, now, ctx);
        }
        for retune in &plan.retunes {
            if let (Some(batch), Some(handle)) = (retune.batch, self.jobs.get_mut(&retune.job)) {
                handle.batch = Some(batch);
                self.views.touch(retune.job);
            }
        }
        let steps = Steps {
            stops,
            starts,
            retunes: plan.retunes,
            now,
            clock: Arc::clone(&self.clock),
            actors: Arc::clone(&self.gpus),
        };
        let (answer, answered) = oneshot::channel();
        self.carrier.queue.push_back((steps, settling, answer));
        self.pump(ctx);
        answered
    }

    /// Carries out the next committed batch, unless one is being carried out; once none is left, runs
    /// the rounds that waited.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        if self.carrier.carrying.is_some() {
            return;
        }
        let Some((steps, settling, answer)) = self.carrier.queue.pop_front() else {
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
        let now = steps.now;
        let executor = Arc::clone(&self.executor);
        // A batch carried out quickly is published once, settled; one that takes longer (workers
        // checkpointing) shows its jobs stopping and starting meanwhile.
        let publish_later = ctx.run_later(PUBLISH_WHILE_CARRYING, |actor, _| actor.publish());
        self.carrier.carrying = Some(Carrying {
            since: Instant::now(),
            publish_later,
        });
        let work = async move { carry_out(steps, &executor).await };
        ctx.spawn(work.into_actor(self).map(move |outcome, actor, ctx| {
            let round = settling.round;
            let report = actor.settle(outcome, settling, now, ctx);
            // A round lasts from its start until its changes are carried out; publishing what it
            // changed for the readers comes after.
            if let Some(RoundTimes { began, solve }) = round {
                actor.stats.note_round(began.elapsed(), solve);
            }
            actor.publish();
            let _ = answer.send(report);
            if let Some(carried) = actor.carrier.carrying.take() {
                ctx.cancel_future(carried.publish_later);
            }
            actor.pump(ctx);
        }));
    }

    /// Publishes for worker events, as [`events_publish`] says. They come every few milliseconds;
    /// publishing for them while a round that moved thousands of jobs is carried out would rebuild
    /// those jobs' entries in the middle of the round (on the thread that carries it out), and
    /// again at its end.
    pub(super) fn publish_unless_carrying(&mut self) {
        let carrying = self.carrier.carrying.as_ref().map(|c| c.since.elapsed());
        if events_publish(carrying, self.views.since_last()) {
            self.publish();
        }
    }

    /// Publishes for a batch of submissions, `submitted`, so that their submitters read them once
    /// answered: everything that changed, or, while a batch is carried out, only them (the batch's
    /// end publishes the rest). Submissions pour in while rounds are carried out: under las at
    /// 16,384 GPUs, publishing everything for them built half of all the entries the views built,
    /// each a moved job's, rebuilt at its round's end.
    pub(super) fn publish_for_submissions(&mut self, submitted: &[JobId]) {
        self.publish_view(match self.carrier.carrying {
            Some(_) => Scope::Submitted(submitted),
            None => Scope::Changed,
        });
    }

    /// Tests: holds the carrier as if a batch were being carried out (batches committed meanwhile
    /// wait behind it), or lets it go on to them.
    #[cfg(test)]
    pub(super) fn hold_carrier(&mut self, held: bool, ctx: &mut Context<Self>) {
        if let Some(carried) = self.carrier.carrying.take() {
            ctx.cancel_future(carried.publish_later);
        }
        if held {
            self.carrier.carrying = Some(Carrying {
                since: Instant::now(),
                publish_later: ctx.run_later(Duration::from_secs(3600), |_, _| {}),
            });
        } else {
            self.pump(ctx);
        }
    }

    /// Moves the batch's jobs on, journals the checkpoints the stops saved, and requeues the starts
    /// that failed. A job whose stop goes on in the background stays in Checkpointing.
    fn settle(
        &mut self,
        mut outcome: Outcome,
        settling: Settling,
        now: f64,
        ctx: &mut Context<Self>,
    ) -> RoundReport {
        let lingering = std::mem::take(&mut outcome.still_stopping);
        let still_stopping = |job: JobId| lingering.iter().any(|(j, _)| *j == job);
        let mut next_after = IdMap::default();
        for (job, next) in settling.stopped {
            if still_stopping(job) {
                next_after.insert(job, next);
            // Unless it ended meanwhile (cancelled while it checkpointed).
            } else if self.jobs.get(&job).map(|h| h.phase()) == Some(Phase::Checkpointing) {
                self.advance(job, next, now);
            }
        }
        // Jobs that start after starts of their own failed: their count, as journaled, ends.
        let mut counts_ended = Vec::new();
        for job in settling.started {
            let Some(handle) = self.jobs.get_mut(&job) else {
                continue;
            };
            if outcome.failed_starts.iter().any(|f| f.job == job) {
                if still_stopping(job) {
                    // Stopped to move or resize, and not started: it waits, once stopped.
                    next_after.insert(job, Phase::Preempted);
                } else {
                    self.advance(job, Phase::Pending, now);
                }
                continue;
            }
            if handle.start_failed.take().is_some_and(|f| f.count > 0) {
                counts_ended.push(FailedStarts::ended(job, now));
            }
            handle
                .restarts
                .carried(outcome.stopped_at, outcome.launched_at);
            if matches!(handle.phase(), Phase::Resizing | Phase::Migrating) {
                self.advance(job, Phase::Starting, now);
            }
            self.advance(job, Phase::Running, now);
        }
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
            .chain(counts_ended)
            .collect();
        self.persist(&records);
        self.fail_starts(&outcome.failed_starts, now, ctx);
        self.keep_stopping(lingering, |job| next_after.get(&job).copied(), ctx);
        self.stats.counters.leases_in_order += outcome.report.leased_in_order as u64;
        outcome.report
    }

    /// Ends unfinished job `job` at `now` as `record` says (cancelled, or failed, at `now`), in
    /// `phase`: journaled first, its workers stopped if it runs, then gone from the engine.
    fn end(
        &mut self,
        job: JobId,
        record: Record,
        phase: Phase,
        now: f64,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RoundReport> {
        self.persist(&[record]);
        self.stats.note_end(phase);
        if let Err(e) = self.engine().cancel(job, now) {
            tracing::error!(error = %e, "ending a job the engine does not hold");
        }
        let changes = self.engine().take_changes();
        let running = changes
            .iter()
            .any(|c| matches!(c, Change::Stopped { job: j, .. } if *j == job));
        if !running {
            self.advance(job, phase, now);
        }
        let ending = IdMap::from_iter([(job, phase)]);
        let carried = self.commit(changes, now, ending, None, ctx);
        self.retire([job]);
        self.publish();
        carried
    }

    /// Starts that did not happen go back to the queue; a failed start's partner runs alone, and the
    /// executor follows. A job whose own starts failed [`FailedStarts::MOST_IN_A_ROW`] times in a
    /// row fails.
    pub(super) fn fail_starts(
        &mut self,
        failed: &[FailedStart],
        now: f64,
        ctx: &mut Context<Self>,
    ) {
        let mut records = Vec::new();
        // Pauses count from when the starts failed, after the batch's stops and checks.
        let failed_at = self.clock.now().max(now);
        for FailedStart { job, why, retry } in failed {
            tracing::warn!(job = job.0, %why, "start failed; back to the queue");
            let running = matches!(
                self.store.ledger.jobs.get(job).map(|e| &e.standing),
                Some(Standing::Running { .. })
            );
            if self.engine().requeue(*job, now, None).is_ok() && running {
                records.push(Record::Stopped { job: *job, at: now });
            }
            if let Some(handle) = self.jobs.get_mut(job) {
                if let Some(gang) = handle.gang.take() {
                    self.views.touch_gpus(gang.gpus.iter().copied());
                }
                handle.note_gpus(now, 0);
                // A restart that did not start is not one.
                handle.restarts.abandon();
                let earlier = handle.start_failed.take();
                let (failed, pause) = match *retry {
                    Retry::NextRound => (FailedStarts::not_counted(earlier, why), None),
                    // As the executor asks, within the longest pause (it may be anyone's code).
                    Retry::After(seconds) => {
                        let seconds = if seconds.is_nan() { 0.0 } else { seconds };
                        let pause = seconds.clamp(0.0, FailedStarts::LONGEST_PAUSE);
                        (FailedStarts::not_counted(earlier, why), Some(pause))
                    }
                    Retry::AfterPause => {
                        let failed = FailedStarts::after(earlier, why, failed_at);
                        // Journaled, so that a restart neither forgets the pause nor starts the
                        // count again (a start that succeeds journals the count back to 0).
                        records.push(failed.record(*job));
                        if let Some(give_up) = GiveUp::after(*job, &failed) {
                            ctx.notify(give_up);
                        }
                        let pause = failed.pause();
                        (failed, Some(pause))
                    }
                };
                handle.start_failed = Some(failed);
                // Out of its policy's sight for a while, so that its grants go to others.
                if let Some(pause) = pause {
                    let _ = self.engine().defer(*job, now, failed_at + pause);
                }
            }
            self.views.touch(*job);
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
    pub(super) fn tell_retunes(&mut self, now: f64) {
        if self.deferred_retunes.is_empty() {
            return;
        }
        if let Ok(mut executor) = self.executor.try_lock() {
            for retune in self.deferred_retunes.drain(..) {
                retune.apply(&mut **executor, now);
            }
        }
    }

    /// Queues a round unless one is already queued.
    pub(super) fn queue_round(&mut self, ctx: &mut Context<Self>) {
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
            (sched, solving.elapsed(), failed)
        });
        // Nothing else is handled while the engine is away.
        ctx.wait(
            solve
                .into_actor(self)
                .map(move |(mut sched, solve, failed), actor, ctx| {
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
                    let round = RoundTimes { began, solve };
                    let carried = actor.commit(changes, now, IdMap::default(), Some(round), ctx);
                    ctx.spawn(carried.into_actor(actor).map(move |report, _, _| {
                        let _ = answer.send(RoundReport {
                            solve_seconds: solve.as_secs_f64(),
                            ..report.unwrap_or_default()
                        });
                    }));
                }),
        );
        answered
    }

    /// Why `gpu` is out of service, if it is: unhealthy (its probe's reason, first: a cordoned GPU
    /// that also failed says why it failed), cordoned, or held by workers still stopping.
    pub(super) fn out_of_service(&self, gpu: GpuId) -> Option<Cow<'_, str>> {
        (self
            .unhealthy
            .get(&gpu)
            .map(|why| Cow::Borrowed(why.as_str())))
        .or_else(|| (self.store.ledger.cordoned.contains(&gpu.0)).then_some("cordoned".into()))
        .or_else(|| self.draining(gpu).map(|job| held_by(job).into()))
    }

    /// Puts `gpus` in service or out of it in the engine, as [`ClusterActor::out_of_service`] says
    /// (the jobs on those leaving stop there: the caller commits that).
    pub(super) fn follow_service(&mut self, gpus: &[GpuId], now: f64) {
        for &gpu in gpus {
            if self.out_of_service(gpu).is_none() {
                self.engine().enable_gpu(gpu);
            } else {
                self.engine().disable_gpu(gpu, now);
            }
        }
        self.views.touch_gpus(gpus.iter().copied());
    }

    /// Puts GPUs in service or out of it after their cordon, health or stopping workers changed: in
    /// only if none holds it out (an uncordoned GPU that failed stays out, and so does a cordoned
    /// one whose probe answers healthy again). The jobs on those leaving stop now and wait for a
    /// round.
    pub(super) fn refresh_service(
        &mut self,
        gpus: &[GpuId],
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<RoundReport> {
        let now = self.clock.now();
        self.follow_service(gpus, now);
        let changes = self.engine().take_changes();
        let carried = self.commit(changes, now, IdMap::default(), None, ctx);
        self.publish();
        carried
    }
}

impl Handler<Round> for ClusterActor {
    type Result = ResponseFuture<RoundReport>;

    fn handle(&mut self, _: Round, ctx: &mut Context<Self>) -> Self::Result {
        let report = self.round(ctx);
        Box::pin(async move { report.await.unwrap_or_default() })
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
        let record = Record::Cancelled { job, at: now };
        let carried = self.end(job, record, Phase::Cancelled, now, ctx);
        Box::pin(async move {
            let _ = carried.await;
            Ok(())
        })
    }
}

/// A job whose starts failed [`FailedStarts::MOST_IN_A_ROW`] times in a row fails, for the reason
/// given: sent by the actor to itself, so that the job ends as a cancelled one does, after the
/// round its last start failed in.
#[derive(Message)]
#[rtype(result = "()")]
pub(super) struct GiveUp {
    pub job: JobId,
    pub why: String,
}

impl GiveUp {
    /// What gives `job` up, once its starts have failed [`FailedStarts::MOST_IN_A_ROW`] times in
    /// a row (`failed`), saying why.
    pub fn after(job: JobId, failed: &FailedStarts) -> Option<GiveUp> {
        (failed.count >= FailedStarts::MOST_IN_A_ROW).then(|| GiveUp {
            job,
            why: format!(
                "its last {} starts failed in a row, the last: {}; submit it again once what \
                 fails them is fixed",
                failed.count, failed.why
            ),
        })
    }
}

impl Handler<GiveUp> for ClusterActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, GiveUp { job, why }: GiveUp, ctx: &mut Context<Self>) -> Self::Result {
        // Unless it started (or ended) since.
        let still_failing = self.jobs.get(&job).is_some_and(|handle| {
            handle
                .start_failed
                .as_ref()
                .is_some_and(|failed| failed.count >= FailedStarts::MOST_IN_A_ROW)
        });
        let unfinished =
            (self.store.ledger.jobs.get(&job)).is_some_and(|e| !e.standing.is_terminal());
        if !(still_failing && unfinished) {
            return Box::pin(std::future::ready(()));
        }
        tracing::warn!(job = job.0, %why, "job failed: its starts kept failing");
        let now = self.clock.now();
        let record = Record::Failed {
            job,
            at: now,
            error: why,
        };
        let carried = self.end(job, record, Phase::Failed, now, ctx);
        Box::pin(async move {
            let _ = carried.await;
        })
    }
}

impl Handler<HealthChanged> for ClusterActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: HealthChanged, ctx: &mut Context<Self>) -> Self::Result {
        if msg.health.healthy {
            self.unhealthy.remove(&msg.gpu);
        } else {
            let why = msg.health.reason.clone();
            let newly = (self.unhealthy)
                .insert(msg.gpu, why.unwrap_or_else(|| "unhealthy".into()))
                .is_none();
            // Told again (its probe then failed, say): said once.
            if newly {
                tracing::warn!(gpu = msg.gpu.0, reason = ?msg.health.reason, "GPU out of service; its job moves");
            }
        }
        if let Some(why) = msg.unwatched {
            self.unwatched.insert(msg.gpu, why);
        }
        // Its job is placed again by the next round on the timer: GPU failures come in bursts
        // (a node's XID storm), and one round then moves all their jobs.
        let carried = self.refresh_service(&[msg.gpu], ctx);
        Box::pin(async move {
            let _ = carried.await;
        })
    }
}

impl Handler<Cordon> for ClusterActor {
    type Result = ResponseFuture<Result<(), Refusal>>;

    fn handle(&mut self, msg: Cordon, ctx: &mut Context<Self>) -> Self::Result {
        let count = self.gpus.gpus();
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
        let carried = self.refresh_service(&gpus, ctx);
        // An operator waits on the move: place the jobs now.
        self.queue_round(ctx);
        Box::pin(async move {
            let _ = carried.await;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_events_publish_in_a_batchs_middle_only_once_it_is_long() {
        let (long, short) = (PUBLISH_WHILE_CARRYING, PUBLISH_WHILE_CARRYING / 10);
        assert!(events_publish(None, short), "nothing carried out: at once");
        assert!(
            !events_publish(Some(short), 2 * long),
            "a batch just begun: its end publishes it, however old the last view"
        );
        assert!(!events_publish(Some(long), short), "published a moment ago");
        assert!(
            events_publish(Some(long), long),
            "a long batch shows its moves"
        );
    }
}
