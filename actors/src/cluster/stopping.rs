//! Stops that go on in the background: workers that have not exited within the executor's patience
//! (a long checkpoint, or a job that ignores the stop until it is killed at the end of its grace)
//! hold no other job's start. Until the executor reports them gone, their gang stays leased, their
//! GPUs are out of service, and their job waits where the engine does not place it.

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

use super::ClusterActor;
use super::carry::Gang;
use crate::gpu::Holder;
use crate::ledger::Record;
use crate::lifecycle::Phase;

/// A stop going on in the background.
pub(super) struct Lingering {
    /// Its gang, still leased to the stopping attempt.
    gang: Option<Gang>,
    /// Where its job goes once its workers are gone (none for a job that already ended).
    next: Option<Phase>,
}

impl ClusterActor {
    /// Why `gpu` is held by workers still stopping, if it is.
    pub(super) fn draining(&self, gpu: GpuId) -> Option<&str> {
        self.draining.get(&gpu).map(String::as_str)
    }

    /// How many stops go on in the background.
    pub(super) fn stops_in_background(&self) -> usize {
        self.stopping.len()
    }

    /// Stops whose workers outlasted the executor's patience (with their gangs): each job waits
    /// in Checkpointing, held by the engine, and its GPUs go out of service, until
    /// [`ClusterActor::stop_ended`]. `next` says where each job goes then.
    pub(super) fn keep_stopping(
        &mut self,
        lingering: Vec<(JobId, Option<Gang>)>,
        next: impl Fn(JobId) -> Option<Phase>,
        ctx: &mut Context<Self>,
    ) {
        let mut gpus = Vec::new();
        for (job, gang) in lingering {
            let next = next(job);
            gpus.extend(self.linger(job, gang, next));
        }
        if !gpus.is_empty() {
            // Nothing to carry out (nothing runs there), and nobody waits on it.
            drop(self.refresh_service(&gpus, ctx));
        }
    }

    /// Recovery found `job`'s attempt `attempt` alive on `gpus` and could not re-adopt it: its stop
    /// goes on in the background (as [`ClusterActor::keep_stopping`]'s, once the engine is home).
    pub(super) fn keep_stopping_recovered(&mut self, job: JobId, attempt: u64, gpus: &[GpuId]) {
        // Those this cluster still has (it may have changed under the journal).
        let gpus: Vec<GpuId> = (gpus.iter().copied())
            .filter(|g| (g.0 as usize) < self.gpus.gpus())
            .collect();
        let gang = Gang::new(&self.gpus, Holder { job, attempt }, None, &gpus);
        let now = self.clock.now();
        for gpu in self.linger(job, Some(gang), None) {
            // Nothing runs there: the ledger gave them to that attempt.
            self.engine().disable_gpu(gpu, now);
        }
    }

    /// Notes `job`'s stop going on with `gang` (out of service until it ends) and holds the job;
    /// answers the gang's GPUs.
    fn linger(&mut self, job: JobId, gang: Option<Gang>, next: Option<Phase>) -> Vec<GpuId> {
        tracing::warn!(
            job = job.0,
            "its workers are still stopping: its GPUs stay out of service until they have"
        );
        let mut gpus = Vec::new();
        if let Some(gang) = &gang {
            let why = format!(
                "held by job {}'s workers, which have not stopped yet",
                job.0
            );
            for &gpu in gang.gpus.iter() {
                self.draining.insert(gpu, why.clone());
                gpus.push(gpu);
            }
        }
        // A job that ended is not placed again anyway.
        let _ = self.engine().hold(job);
        self.views.touch(job);
        self.stopping.insert(job, Lingering { gang, next });
        gpus
    }

    /// The executor reports that the workers of `job`'s stop in the background are gone, having
    /// saved `steps_done`: its gang is given back, its GPUs come back in service, its job moves on
    /// and may start again, and a round is queued to use them.
    pub(super) fn stop_ended(
        &mut self,
        job: JobId,
        steps_done: f64,
        now: f64,
        ctx: &mut Context<Self>,
    ) {
        let Some(Lingering { gang, next }) = self.stopping.remove(&job) else {
            tracing::debug!(
                job = job.0,
                "a stop's end that no stop in the background awaits"
            );
            return;
        };
        let mut gpus = Vec::new();
        if let Some(gang) = gang {
            gang.release();
            for &gpu in gang.gpus.iter() {
                self.draining.remove(&gpu);
                gpus.push(gpu);
            }
        }
        // A job that ended meanwhile (cancelled) keeps no checkpoint.
        let alive = (self.store.ledger.jobs.get(&job)).is_some_and(|e| !e.standing.is_terminal());
        if alive {
            self.persist(&[Record::Checkpointed { job, steps_done }]);
            let _ = self.engine().release_hold(job);
        }
        let checkpointing = self.jobs.get(&job).map(|h| h.phase()) == Some(Phase::Checkpointing);
        if let Some(next) = next.filter(|_| checkpointing) {
            self.advance(job, next, now);
        }
        self.views.touch(job);
        tracing::info!(job = job.0, "workers stopped in the background");
        if !gpus.is_empty() {
            drop(self.refresh_service(&gpus, ctx));
        }
        self.queue_round(ctx);
    }
}
