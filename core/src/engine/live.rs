//! What a live driver needs beyond the simulator's loop: the change log it carries out, completions and
//! cancellations it reports, requeues after failed starts, re-adoption after a restart, and GPUs going
//! out of service.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use super::Engine;
use crate::cluster::{GpuId, GpuSet, GpuTypeId};
use crate::job::JobId;
use crate::metrics::JobRecord;
use crate::placement::{Placed, Placer, Unplaced};
use crate::throughput::Segment;
use crate::throughput::goodput::BatchPlan;
use gangway_protocol::worker::Resources;

use super::accounting::new_record;

/// A start or stop that a scheduling pass (or a completion) made, for a live driver to carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Change {
    /// The job starts on `gpus`, progressing at `steps_per_second` after `startup_seconds` of restore
    /// or migration costs, with `remaining_steps` to go.
    Started {
        /// The job that starts.
        job: JobId,
        /// The GPU type its grant named: for a gang that spans types (placed by its policy's own
        /// step), the one that sets its pace.
        gpu_type: GpuTypeId,
        /// The GPUs it runs on, the whole gang.
        gpus: GpuSet,
        /// The job it shares these GPUs with (packed), if any.
        partner: Option<JobId>,
        /// Its rate once started, in its trace's work units per second (steps, or seconds of work,
        /// or progress), locality and packing included.
        steps_per_second: f64,
        /// Its pace to the end where it changes as the job progresses (its epochs): segments from
        /// the current one on (empty: `steps_per_second` holds).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pace: Vec<Segment>,
        /// Seconds of no progress before its first step: restore, checkpoint and migration costs it
        /// owes, at least its model's restart delay.
        startup_seconds: f64,
        /// Work left to do, in its work units (never below 0).
        remaining_steps: f64,
        /// The batch plan it runs with, when its policy chose one.
        batch: Option<BatchPlan>,
        /// The CPUs and memory it holds, all its GPUs together.
        resources: Resources,
    },
    /// The job stopped running (it was preempted, is about to move, or finished) with `steps_done`.
    Stopped {
        /// The job that stopped.
        job: JobId,
        /// Its work done in all, over every run so far, in its work units.
        steps_done: f64,
    },
    /// A running job's pace changed in place (its packing partner left, its batch plan or its CPUs
    /// and memory changed).
    Retuned {
        /// The job, which keeps its GPUs.
        job: JobId,
        /// Its new rate, in work units per second.
        steps_per_second: f64,
        /// Its new pace to the end where it changes as it progresses; empty: `steps_per_second`
        /// holds.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pace: Vec<Segment>,
        /// The batch plan it runs with now, when its policy chose one.
        batch: Option<BatchPlan>,
        /// The CPUs and memory it holds now, all its GPUs together.
        resources: Resources,
    },
}

/// Why a job can never run on this cluster.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Unrunnable {
    /// Its gang (at its fewest GPUs, for a job with sizes) is larger than every GPU type's
    /// capacity.
    #[error("no GPU type has {gpus} GPUs (the largest has {largest})")]
    GangTooLarge {
        /// The fewest GPUs it could run on; 0 when its sizes allow none on any type.
        gpus: u32,
        /// The most GPUs any one type has.
        largest: u32,
    },
    /// The throughput model gives it no positive, finite rate on any GPU type it fits.
    #[error("the throughput model has no rate for it at {gpus} GPUs on any GPU type with room")]
    NoRate {
        /// The fewest GPUs it fits on, on the types it fits.
        gpus: u32,
    },
    /// Even at its fastest it would run past [`MAX_JOB_SECONDS`](super::MAX_JOB_SECONDS).
    #[error(
        "it would run {seconds:.3e} s at its fastest, longer than the {limit:.0e} s (about 30 years) a job may take"
    )]
    TooLong {
        /// Its work over its fastest rate, in seconds (NaN for no work at no rate).
        seconds: f64,
        /// The most seconds a job may run, [`MAX_JOB_SECONDS`](super::MAX_JOB_SECONDS).
        limit: f64,
    },
}

/// Why a job cannot be taken.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Rejected {
    /// The job can never run on this cluster, and why; it is kept, unfinished, but never scheduled.
    #[error("job {0}: {1}")]
    Unrunnable(JobId, Unrunnable),
    /// A job of this id was submitted before.
    #[error("job {0} is already known")]
    Duplicate(JobId),
    /// No job of this id was submitted, or the engine has forgotten it ([`Engine::forget`]).
    #[error("job {0} is not known")]
    Unknown(JobId),
    /// The job is not active: it finished, was cancelled, or could never run (not admitted).
    #[error("job {0} has finished")]
    Finished(JobId),
    /// The job cannot be adopted: it runs already, or one of the GPUs it names is not free.
    #[error("job {0}: its GPUs are taken, or it already runs")]
    GpusTaken(JobId),
}

/// Where a job stands, for the live driver and its API.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobStatus<'e> {
    /// The job.
    pub id: JobId,
    /// Work done so far, in its work units (as settled at the last event or report).
    pub steps_done: f64,
    /// Its work in all, in its work units.
    pub total_steps: f64,
    /// Its GPUs, when running.
    pub gpus: Option<&'e GpuSet>,
    /// The CPUs and memory it holds, when running.
    pub resources: Option<Resources>,
    /// Why it waits, when it does and a pass has looked at it.
    pub waiting: Option<&'e Unplaced>,
    /// Its record: arrival, first start, finish, GPU-seconds, preemptions and migrations.
    pub record: &'e JobRecord,
}

impl Engine<'_> {
    /// Lists every start and stop from now on, for [`Engine::take_changes`].
    pub fn record_changes(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// The starts and stops made since the last call.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    pub(super) fn note_change(&mut self, change: impl FnOnce() -> Change) {
        if let Some(changes) = self.changes.as_mut() {
            changes.push(change());
        }
    }

    /// Where job `id` stands (borrowed: the API's views ask for every job that changed, thousands
    /// a round, and copy only what they show).
    pub fn status(&self, id: JobId) -> Option<JobStatus<'_>> {
        let i = self.index_of.get(id)?;
        let state = &self.states[i];
        Some(JobStatus {
            id,
            steps_done: state.steps_done,
            total_steps: self.jobs[i].total_steps,
            gpus: state.run.as_ref().map(|r| &r.gpus),
            resources: state.run.as_ref().map(|r| {
                let weight = super::runs::pair_weight(r.partner.is_some());
                self.ledger
                    .held(&self.cluster, &r.gpus, r.allotment.as_ref(), weight)
            }),
            waiting: state.waiting.as_ref(),
            record: &self.records[i],
        })
    }

    /// Why job `id` waits, in a sentence for people: the placer's reason, or the policy's with how
    /// many GPUs are free and out of service now. `None` when it runs, has ended, or no pass has
    /// looked at it yet.
    pub fn waiting_reason(&self, id: JobId) -> Option<String> {
        let i = self.index_of.get(id)?;
        let state = &self.states[i];
        if state.run.is_some() || !state.active {
            return None;
        }
        let why = state.waiting.as_ref()?;
        let mut text = why.describe(&self.cluster);
        if *why == Unplaced::NotGranted {
            let free: u32 = self.free.free_per_type().iter().sum();
            // From the capacity per type, not the GPUs one by one: this runs for every waiting job
            // a view shows.
            let in_service: u32 = self.capacity.iter().sum();
            let out_of_service = self.cluster.num_gpus() - in_service;
            // Written in place, grown once: every view entry of a waiting job says this.
            text.reserve(48);
            let _ = write!(text, " ({free} of {} GPUs free", self.cluster.num_gpus());
            if out_of_service > 0 {
                let _ = write!(text, ", {out_of_service} out of service");
            }
            text.push(')');
        }
        Some(text)
    }

    /// Sets the progress of a job that has not started in this engine (recovery from a checkpoint).
    pub fn restore_progress(&mut self, id: JobId, steps_done: f64, preemptions: u32) {
        if let Some(i) = self.index_of.get(id) {
            let state = &mut self.states[i];
            state.steps_done = steps_done.clamp(0.0, self.jobs[i].total_steps);
            state.progressed = steps_done > 0.0;
            // Its progress and count of preemptions are set, not accrued as it runs: a policy
            // looks at it again.
            if let Some(run) = state.run.as_mut() {
                run.look_again_at = f64::NEG_INFINITY;
            }
            self.records[i].preemptions = preemptions;
            if state.active {
                self.touch(i);
            }
        }
    }

    /// Job `id`'s workers report `steps_done` at `now`. What a worker reports is the truth and the model
    /// only predicts: its progress becomes the reported figure, and its predicted finish moves. Work
    /// past what it had also ends its startup, whatever the model reckoned the restart would cost.
    pub fn report_progress(&mut self, id: JobId, steps_done: f64, now: f64) {
        let Ok(i) = self.active_index(id) else {
            return;
        };
        if self.states[i].run.is_some() {
            self.settle(i, now);
        }
        self.touch(i);
        let total = self.jobs[i].total_steps;
        let state = &mut self.states[i];
        let stepped = steps_done.clamp(0.0, total) > state.steps_done;
        state.steps_done = steps_done.clamp(0.0, total);
        if let Some(run) = state
            .run
            .as_mut()
            .filter(|r| stepped && r.progress_from > now)
        {
            run.progress_from = now;
        }
        if let Some(run) = &self.states[i].run {
            let from = run.progress_from.max(now);
            self.reschedule_completion(i, from);
        }
    }

    /// Drops everything the engine keeps about job `id`, which has ended: a live driver keeps its
    /// history elsewhere (the journal), and the engine's memory then follows the active jobs. Returns
    /// whether it was forgotten (an active job is not).
    pub fn forget(&mut self, id: JobId) -> bool {
        let Some(i) = self.index_of.get(id) else {
            return false;
        };
        if self.states[i].active {
            return false;
        }
        self.index_of.remove(id);
        self.records[i] = new_record(&self.jobs[i], std::sync::Arc::from(""), 0);
        self.states[i].last_gpus = GpuSet::new();
        self.vacant.push(i);
        true
    }

    /// Job `id` finished at `now` (a live driver's executor says so).
    pub fn finish(&mut self, id: JobId, now: f64) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        if self.states[i].run.is_some() {
            self.settle(i, now);
        }
        self.complete(i, now);
        Ok(())
    }

    /// Removes job `id` at `now`, stopping it if it runs; its record stays unfinished.
    pub fn cancel(&mut self, id: JobId, now: f64) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        if self.states[i].run.is_some() {
            self.stop(i, now);
        }
        self.retire(i);
        self.note_utilization(now);
        Ok(())
    }

    /// Job `id` goes back to the queue at `now`: its start failed (GPUs not leased, workers not
    /// launched), or its workers crashed. With `checkpoint`, its work falls back to what that
    /// checkpoint saved.
    pub fn requeue(
        &mut self,
        id: JobId,
        now: f64,
        checkpoint: Option<f64>,
    ) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        if self.states[i].run.is_some() {
            self.stop(i, now);
            self.note_utilization(now);
        }
        let total = self.jobs[i].total_steps;
        let state = &mut self.states[i];
        if let Some(steps) = checkpoint {
            state.steps_done = steps.clamp(0.0, total).min(state.steps_done);
        }
        state.queued_since = now;
        self.touch(i);
        Ok(())
    }

    /// The index of an active job (submitted and not ended).
    fn active_index(&self, id: JobId) -> Result<usize, Rejected> {
        let i = self.index_of.get(id).ok_or(Rejected::Unknown(id))?;
        if self.records[i].finish.is_some() || !self.states[i].active {
            return Err(Rejected::Finished(id));
        }
        Ok(i)
    }

    /// Runs job `id` on exactly `gpus` from `now` (its workers survived a control-plane restart), with
    /// no restore cost, at the locality `placer` scores the set at. Refused unless the job waits and
    /// every GPU is free.
    pub fn adopt(
        &mut self,
        id: JobId,
        gpu_type: GpuTypeId,
        gpus: GpuSet,
        placer: &mut dyn Placer,
        now: f64,
    ) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        if self.states[i].run.is_some() || !gpus.iter().all(|&g| self.free.is_free(g)) {
            return Err(Rejected::GpusTaken(id));
        }
        self.states[i].overhead_due = 0.0;
        let locality = placer.locality(&self.cluster, &gpus);
        // Re-adopted at its servers' share: the journal keeps GPUs, not allotments.
        self.start(
            i,
            Placed { gpus, locality },
            gpu_type,
            None,
            None,
            None,
            now,
        );
        self.note_utilization(now);
        Ok(())
    }

    /// Waiting job `id` may not start until [`Engine::release_hold`]: its last run's workers have
    /// not stopped yet, and two runs of a job never overlap. It waits, saying why
    /// ([`Unplaced::Stopping`]). Its policy still sees it, and keeps what it knows of it (its
    /// restarts, its service, its leases): a grant to it is not placed, and its GPUs stay free for
    /// that round.
    pub fn hold(&mut self, id: JobId) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        self.states[i].held = true;
        self.explain_wait(i, Unplaced::Stopping);
        self.touch(i);
        Ok(())
    }

    /// Job `id` may start again (see [`Engine::hold`]).
    pub fn release_hold(&mut self, id: JobId) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        if std::mem::take(&mut self.states[i].held) {
            self.touch(i);
            self.jobs_changed = true;
        }
        Ok(())
    }

    /// Waiting job `id` may not start before `until`, and its policy does not see it until then:
    /// a pause after starts that failed, so that a job whose launches keep failing does not take
    /// the GPUs it is granted from the jobs behind it round after round. The policy hears of it as
    /// of a job that left, and of it again as a new one once the pause is over (the first pass at
    /// or after `until`); it waits meanwhile, saying so ([`Unplaced::Deferred`]). A running job is
    /// stopped first and queued from `now`, as by [`Engine::requeue`]. A later pause replaces an
    /// earlier one; an `until` that is not a number is `now` (the pause ends at the next pass).
    pub fn defer(&mut self, id: JobId, now: f64, until: f64) -> Result<(), Rejected> {
        let i = self.active_index(id)?;
        let until = if until.is_nan() { now } else { until };
        if self.states[i].run.is_some() {
            self.stop(i, now);
            self.note_utilization(now);
            self.states[i].queued_since = now;
        }
        if self.states[i].deferred_until.replace(until).is_none() {
            self.deferred.push(i);
            self.left.push(id);
            self.jobs_changed = true;
        }
        self.explain_wait(i, Unplaced::Deferred { until });
        Ok(())
    }

    /// Ends the pauses ([`Engine::defer`]) that are over at `now`: their jobs are shown to the
    /// policy again, as new.
    pub(super) fn end_pauses(&mut self, now: f64) {
        let mut k = 0;
        while k < self.deferred.len() {
            let i = self.deferred[k];
            if self.states[i]
                .deferred_until
                .is_some_and(|until| until > now)
            {
                k += 1;
                continue;
            }
            self.deferred.swap_remove(k);
            self.states[i].deferred_until = None;
            self.states[i].waiting = Some(Unplaced::NotGranted);
            self.unexplained.push(i);
            self.touch(i);
            self.jobs_changed = true;
        }
    }

    /// Takes GPU `gpu` out of service at `now` (it failed, or an operator cordoned it). A job running
    /// on it stops, and waits with its work saved, as if preempted.
    pub fn disable_gpu(&mut self, gpu: GpuId, now: f64) {
        let g = gpu.0 as usize;
        if self.disabled[g] {
            return;
        }
        let holders: Vec<usize> = self
            .running
            .iter()
            .map(|&(_, i)| i)
            .filter(|&i| {
                self.states[i]
                    .run
                    .as_ref()
                    .is_some_and(|r| r.gpus.contains(&gpu))
            })
            .collect();
        for i in holders {
            if self.states[i].run.is_some() {
                self.stop(i, now);
                let state = &mut self.states[i];
                self.records[i].preemptions += 1;
                state.queued_since = now;
            }
        }
        self.free.take(&self.cluster, &[gpu]);
        self.disabled[g] = true;
        self.capacity[self.cluster.gpu_type_of(gpu).0 as usize] -= 1;
        self.jobs_changed = true;
        self.note_utilization(now);
    }

    /// Puts a GPU back in service.
    pub fn enable_gpu(&mut self, gpu: GpuId) {
        let g = gpu.0 as usize;
        if std::mem::take(&mut self.disabled[g]) {
            self.free.release(&self.cluster, &[gpu]);
            self.capacity[self.cluster.gpu_type_of(gpu).0 as usize] += 1;
            self.jobs_changed = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::Cluster;
    use crate::engine::{Engine, EngineConfig};
    use crate::job::{Job, Names};
    use crate::placement::PackingPlacer;
    use crate::policy::Policy;
    use crate::policy::ordered::Ordered;
    use crate::throughput::DurationModel;

    /// An engine on the cluster `spec` (servers of 4), every job at one step a second.
    fn uniform_engine(spec: &str) -> Engine<'static> {
        Engine::new(
            Arc::new(Cluster::parse_spec(spec, 4).unwrap()),
            Arc::new(DurationModel::uniform(1)),
            EngineConfig::default(),
            Names::default(),
            0.0,
        )
    }

    #[test]
    fn a_readopted_job_runs_at_the_locality_of_its_set_not_at_the_worst() {
        let mut engine = uniform_engine("v100=1x4");
        engine.record_changes();
        // A VGG gang is placement-sensitive (0.6): a poor score would cost it 60% of its pace.
        let job_type = engine.intern_job_type("VGG16");
        let job = Job::new(JobId(7), 0.0, 2, 100.0).with_type(job_type);
        engine.submit(job, 0.0).unwrap();
        let gpus: GpuSet = [GpuId(0), GpuId(1)].into_iter().collect();
        engine
            .adopt(JobId(7), GpuTypeId(0), gpus, &mut PackingPlacer, 5.0)
            .unwrap();
        let started = engine.take_changes();
        assert!(
            matches!(
                started.as_slice(),
                [Change::Started { steps_per_second, startup_seconds, .. }]
                    if *steps_per_second == 1.0 && *startup_seconds == 0.0
            ),
            "{started:?}"
        );
    }

    /// Every start costs 30 s of restore before the first step, by this model's reckoning.
    struct SlowRestarts;

    impl crate::throughput::ThroughputModel for SlowRestarts {
        fn steps_per_second(&self, _: &Job, _: GpuTypeId, _: u32) -> Option<f64> {
            Some(1.0)
        }

        fn restart_seconds(&self, _: &Job) -> f64 {
            30.0
        }
    }

    /// Grants every job its GPUs, and notes whether each running job is restarting.
    #[derive(Default)]
    struct Watching(Vec<bool>);

    impl crate::policy::Policy for Watching {
        fn allocate(&mut self, input: &crate::policy::RoundInput<'_>) -> Vec<crate::policy::Grant> {
            self.0.extend(
                input
                    .jobs
                    .iter()
                    .filter_map(|v| v.running.map(|r| r.restarting)),
            );
            input
                .jobs
                .iter()
                .map(|v| crate::policy::Grant::new(v.id(), GpuTypeId(0), v.job.gpus))
                .collect()
        }
    }

    #[test]
    fn a_reported_step_ends_a_startup_the_model_reckoned_longer() {
        let cluster = Arc::new(Cluster::parse_spec("v100=1x4", 4).unwrap());
        let mut engine = Engine::new(
            cluster,
            Arc::new(SlowRestarts),
            EngineConfig::default(),
            Names::default(),
            0.0,
        );
        let job = Job::new(JobId(1), 0.0, 2, 1000.0).with_type(engine.intern_job_type("toy"));
        engine.submit(job, 0.0).unwrap();
        let mut policy = Watching::default();
        engine.schedule(&mut policy, &mut PackingPlacer, 0.0);
        // Its workers report the progress it resumed from: still starting.
        engine.report_progress(JobId(1), 0.0, 5.0);
        engine.schedule(&mut policy, &mut PackingPlacer, 6.0);
        // They report a step: the startup is over, 24 s before the model said.
        engine.report_progress(JobId(1), 1.0, 8.0);
        engine.schedule(&mut policy, &mut PackingPlacer, 9.0);
        assert_eq!(policy.0, [true, false]);
    }

    /// Grants nothing.
    struct Nothing;

    impl crate::policy::Policy for Nothing {
        fn allocate(&mut self, _: &crate::policy::RoundInput<'_>) -> Vec<crate::policy::Grant> {
            Vec::new()
        }
    }

    #[test]
    fn a_job_not_granted_hears_how_many_gpus_are_free_and_out_of_service() {
        let mut engine = uniform_engine("v100=2x4");
        let job = Job::new(JobId(1), 0.0, 2, 100.0).with_type(engine.intern_job_type("toy"));
        engine.submit(job, 0.0).unwrap();
        engine.disable_gpu(GpuId(3), 0.0);
        engine.disable_gpu(GpuId(6), 0.0);
        engine.schedule(&mut Nothing, &mut PackingPlacer, 1.0);
        let why = engine.waiting_reason(JobId(1)).expect("a reason");
        assert!(
            why.ends_with(" (6 of 8 GPUs free, 2 out of service)"),
            "{why}"
        );
        engine.enable_gpu(GpuId(6));
        engine.schedule(&mut Nothing, &mut PackingPlacer, 2.0);
        let why = engine.waiting_reason(JobId(1)).expect("a reason");
        assert!(
            why.ends_with(" (7 of 8 GPUs free, 1 out of service)"),
            "{why}"
        );
    }

    /// Grants every job its GPUs, and notes which jobs it was shown each pass.
    #[derive(Default)]
    struct Shown(Vec<Vec<JobId>>);

    impl crate::policy::Policy for Shown {
        fn allocate(&mut self, input: &crate::policy::RoundInput<'_>) -> Vec<crate::policy::Grant> {
            self.0.push(input.jobs.iter().map(|v| v.id()).collect());
            input
                .jobs
                .iter()
                .map(|v| crate::policy::Grant::new(v.id(), GpuTypeId(0), v.job.gpus))
                .collect()
        }
    }

    /// A held job waits whatever it is granted, saying why, and is placed once released.
    #[test]
    fn a_held_job_is_not_placed_until_released() {
        let mut engine = uniform_engine("v100=1x4");
        let job = Job::new(JobId(1), 0.0, 2, 100.0).with_type(engine.intern_job_type("toy"));
        engine.submit(job, 0.0).unwrap();
        engine.hold(JobId(1)).unwrap();
        let mut policy = Shown::default();
        engine.schedule(&mut policy, &mut PackingPlacer, 1.0);
        assert_eq!(policy.0, [vec![JobId(1)]], "its policy still sees it");
        assert!(engine.status(JobId(1)).unwrap().gpus.is_none());
        let why = engine.waiting_reason(JobId(1)).expect("a reason");
        assert!(why.contains("have not stopped yet"), "{why}");
        engine.schedule(&mut policy, &mut PackingPlacer, 2.0);
        assert!(
            engine.status(JobId(1)).unwrap().gpus.is_none(),
            "held still"
        );
        engine.release_hold(JobId(1)).unwrap();
        engine.schedule(&mut policy, &mut PackingPlacer, 3.0);
        assert!(
            engine.status(JobId(1)).unwrap().gpus.is_some(),
            "placed once released"
        );
        assert_eq!(engine.hold(JobId(9)), Err(Rejected::Unknown(JobId(9))));
    }

    /// A paused job is out of its policy's sight: the GPUs it would have had go to the job behind
    /// it, and it is shown again (as new) at the first pass after its pause, whether its policy is
    /// shown every job or keeps a queue of its own.
    #[test]
    fn a_deferred_job_leaves_its_gpus_to_the_next_and_is_shown_again_after_its_pause() {
        for queue in [false, true] {
            let mut engine = uniform_engine("v100=1x4");
            let toy = engine.intern_job_type("toy");
            for id in 1..=3 {
                let job = Job::new(JobId(id), 0.0, 4, 100.0).with_type(toy);
                engine.submit(job, 0.0).unwrap();
            }
            let mut shown = Shown::default();
            let mut fifo = Ordered::fifo();
            let policy: &mut dyn Policy = if queue { &mut fifo } else { &mut shown };
            engine.schedule(policy, &mut PackingPlacer, 0.0);
            assert!(engine.status(JobId(1)).unwrap().gpus.is_some());
            engine.defer(JobId(1), 1.0, 10.0).unwrap();
            engine.defer(JobId(3), 1.0, 10.0).unwrap();
            assert!(engine.status(JobId(1)).unwrap().gpus.is_none(), "stopped");
            engine.schedule(policy, &mut PackingPlacer, 2.0);
            assert!(
                engine.status(JobId(2)).unwrap().gpus.is_some(),
                "the next job has the GPUs (queue: {queue})"
            );
            let why = engine.waiting_reason(JobId(1)).expect("a reason");
            assert!(why.contains("pauses before its next try"), "{why}");
            // A paused job may end meanwhile.
            engine.audit();
            engine.cancel(JobId(3), 3.0).unwrap();
            engine.audit();
            engine.schedule(policy, &mut PackingPlacer, 9.0);
            assert!(
                engine.status(JobId(1)).unwrap().gpus.is_none(),
                "paused still"
            );
            engine.cancel(JobId(2), 9.5).unwrap();
            engine.schedule(policy, &mut PackingPlacer, 10.0);
            assert!(
                engine.status(JobId(1)).unwrap().gpus.is_some(),
                "placed after its pause (queue: {queue})"
            );
            engine.audit();
            if !queue {
                let seen: Vec<Vec<u32>> = shown
                    .0
                    .iter()
                    .map(|p| p.iter().map(|j| j.0).collect())
                    .collect();
                assert_eq!(seen, [vec![1, 2, 3], vec![2], vec![2], vec![1]]);
            }
        }
        let mut engine = uniform_engine("v100=1x4");
        assert_eq!(
            engine.defer(JobId(9), 0.0, 1.0),
            Err(Rejected::Unknown(JobId(9)))
        );
    }
}
