//! What the workers report (progress, measurements, checkpoints, ends, crashes), drained from the
//! executor without ever waiting for it, journaled, and passed on to the engine.

use actix::prelude::*;
use gangway_core::job::JobId;
use gangway_core::throughput::goodput::Observation;

use super::ClusterActor;
use super::messages::Poll;
use crate::executor::{Measured, WorkerEvent};
use crate::ledger::{Record, Standing};
use crate::lifecycle::Phase;
use crate::{IdMap, IdSet};

impl ClusterActor {
    /// A running job made progress: if it was restarting, the restart is over, and what it took is
    /// measured (for the API, `/metrics`, and the model's restart penalty).
    fn note_progress(&mut self, job: JobId, now: f64) {
        let Some(handle) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(seconds) = handle.restarts.progressed(now) {
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
        let mut ending = IdMap::default();
        let mut requeue = Vec::new();
        let mut progressed = Vec::new();
        let mut stops_ended = Vec::new();
        // The ledger learns of this batch only after the loop: one event per job ends it.
        let mut ended = IdSet::default();
        for event in events {
            let job = event.job();
            if ended.contains(&job) {
                continue;
            }
            // About an attempt that no longer runs: the stop in the background it ends says.
            if let WorkerEvent::Stopped {
                attempt,
                steps_done,
                ..
            } = event
            {
                stops_ended.push((job, attempt, steps_done));
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
                    // What it measured and a restart's end show; a checkpoint's work does not
                    // (the engine's progress does, swept), and an end moves the job.
                    self.views.touch(job);
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
                WorkerEvent::Stopped { .. } => unreachable!("taken above"),
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
        for (job, attempt, steps_done) in stops_ended {
            self.stop_ended(job, attempt, steps_done, now, ctx);
        }
        if !ending.is_empty() && self.settings.engine.schedule_on_completion {
            self.queue_round(ctx);
        }
        let changes = self.engine().take_changes();
        let mut ended: Vec<JobId> = ending.keys().copied().collect();
        // In id order: the engine reuses the slots of the jobs it forgets, last forgotten first.
        ended.sort_unstable();
        if changes.is_empty() {
            self.retire(ended);
            if count > 0 {
                self.publish_unless_carrying();
            }
            return Box::pin(std::future::ready(count));
        }
        let carried = self.commit(changes, now, ending, None, ctx);
        self.retire(ended);
        self.publish_unless_carrying();
        Box::pin(async move {
            let _ = carried.await;
            count
        })
    }
}
