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
    /// Where its job goes once its workers are gone (none: it stays where it is, a job that ended
    /// or one recovery found).
    next: Option<Phase>,
    /// Found at recovery: the stops the journal counted before, for the job's progress, which the
    /// engine has from the journal rather than from a run.
    recovered: Option<u32>,
}

impl ClusterActor {
    /// The job whose workers, still stopping, hold `gpu`, if one does.
    pub(super) fn draining(&self, gpu: GpuId) -> Option<JobId> {
        (self.stopping.iter())
            .find(|(_, l)| l.gang.as_ref().is_some_and(|g| g.gpus.contains(&gpu)))
            .map(|(&job, _)| job)
    }

    /// The GPUs workers still stopping hold, each once.
    pub(super) fn gpus_draining(&self) -> impl Iterator<Item = GpuId> + '_ {
        let held = (self.stopping.values()).filter_map(|l| l.gang.as_ref());
        let gpus: crate::IdSet<GpuId> = held.flat_map(|g| g.gpus.iter().copied()).collect();
        gpus.into_iter()
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
        let mut over = Vec::new();
        for (job, gang) in lingering {
            gpus.extend(self.linger(job, gang, next(job), None));
            // Its end may have been polled while the batch was still carried out.
            if let Some((attempt, steps_done)) = self.stopped_early.remove(&job) {
                over.push((job, attempt, steps_done));
            }
        }
        if !gpus.is_empty() {
            // Nothing runs there (the batch's starts on them failed), so nothing is carried out.
            drop(self.refresh_service(&gpus, ctx));
        }
        let now = self.clock.now();
        for (job, attempt, steps_done) in over {
            self.stop_ended(job, attempt, steps_done, now, ctx);
        }
    }

    /// Recovery found `job`'s attempt `attempt` alive on `gpus` and could not re-adopt it: its stop
    /// goes on in the background (as [`ClusterActor::keep_stopping`]'s, once the engine is home).
    /// `stops`: the stops the journal counted before.
    pub(super) fn keep_stopping_recovered(
        &mut self,
        job: JobId,
        attempt: u64,
        gpus: &[GpuId],
        stops: u32,
    ) {
        // Those this cluster still has (it may have changed under the journal).
        let gpus: Vec<GpuId> = (gpus.iter().copied())
            .filter(|g| (g.0 as usize) < self.gpus.gpus())
            .collect();
        let gang = Gang::new(&self.gpus, Holder { job, attempt }, None, &gpus);
        let now = self.clock.now();
        for gpu in self.linger(job, Some(gang), None, Some(stops)) {
            // Nothing runs there: the ledger gave them to that attempt.
            self.engine().disable_gpu(gpu, now);
        }
    }

    /// Notes `job`'s stop going on with `gang` (out of service until it ends) and holds the job;
    /// answers the gang's GPUs.
    fn linger(
        &mut self,
        job: JobId,
        gang: Option<Gang>,
        next: Option<Phase>,
        recovered: Option<u32>,
    ) -> Vec<GpuId> {
        tracing::warn!(
            job = job.0,
            "its workers are still stopping: its GPUs stay out of service until they have"
        );
        let gpus = gang.as_ref().map_or(Vec::new(), |g| g.gpus.to_vec());
        // A job that ended is not placed again anyway.
        let _ = self.engine().hold(job);
        self.views.touch(job);
        let lingering = Lingering {
            gang,
            next,
            recovered,
        };
        self.stopping.insert(job, lingering);
        gpus
    }

    /// The executor reports that the workers of `job`'s attempt `attempt`, stopped in the
    /// background, are gone, having saved `steps_done`: its gang is given back, its GPUs come back
    /// in service, its job moves on and may start again, and a round is queued to use them.
    /// Nothing here changes what runs, so nothing is committed.
    pub(super) fn stop_ended(
        &mut self,
        job: JobId,
        attempt: u64,
        steps_done: f64,
        now: f64,
        ctx: &mut Context<Self>,
    ) {
        let awaited = self
            .stopping
            .get(&job)
            .is_some_and(|l| (l.gang.as_ref()).is_none_or(|g| g.holder.attempt == attempt));
        let Some(lingering) = awaited.then(|| self.stopping.remove(&job)).flatten() else {
            // Polled between the executor's answer and the batch's settling: kept for then.
            self.stopped_early.insert(job, (attempt, steps_done));
            return;
        };
        // Its GPUs come back unless something else holds them out (another stop's, a packing
        // partner's, still holds the GPU; a cordon; its health).
        let gpus = lingering
            .gang
            .as_ref()
            .map_or(Vec::new(), |g| g.gpus.to_vec());
        if let Some(gang) = &lingering.gang {
            gang.release();
        }
        // A job that ended meanwhile (cancelled) keeps no checkpoint.
        let entry = self.store.ledger.jobs.get(&job);
        if entry.is_some_and(|e| !e.standing.is_terminal()) {
            self.persist(&[Record::Checkpointed { job, steps_done }]);
            if let Some(stops) = lingering.recovered {
                self.engine().restore_progress(job, steps_done, stops);
            }
            let _ = self.engine().release_hold(job);
        }
        let checkpointing = self.jobs.get(&job).map(|h| h.phase()) == Some(Phase::Checkpointing);
        if let Some(next) = lingering.next.filter(|_| checkpointing) {
            self.advance(job, next, now);
        }
        self.views.touch(job);
        tracing::info!(job = job.0, "workers stopped in the background");
        self.follow_service(&gpus, now);
        self.queue_round(ctx);
    }
}

/// Why a GPU that `job`'s stopping workers hold is out of service.
pub(super) fn held_by(job: JobId) -> String {
    format!(
        "held by job {}'s workers, which have not stopped yet",
        job.0
    )
}
