//! Recovery: the engine rebuilt from the ledger after a restart.

use gangway_core::cluster::GpuId;
use gangway_core::engine::Engine;
use gangway_core::job::JobId;
use gangway_core::placement::Placer;
use gangway_core::policy::Policy;

use super::jobs::FailedStarts;
use super::round::GiveUp;
use super::{ClusterActor, Scheduler, job_of};
use crate::IdMap;
use crate::executor::ExecutorError;
use crate::ledger::{Record, Standing};
use crate::lifecycle::Phase;

impl ClusterActor {
    /// Rebuilds the engine from the ledger: unfinished jobs are submitted again with their last
    /// checkpoint; those whose workers still run are re-adopted on their GPUs, the others requeued.
    pub(super) fn recover(
        &mut self,
        mut engine: Engine<'static>,
        policy: Box<dyn Policy>,
        mut placer: Box<dyn Placer>,
        now: f64,
    ) {
        // GPUs an operator cordoned stay out of service, before any job is placed again.
        for &gpu in &self.store.ledger.cordoned {
            if gpu < engine.cluster().num_gpus() {
                engine.disable_gpu(gangway_core::cluster::GpuId(gpu), now);
            }
        }
        // Who first named each job type the engine did not know, in the order of the submissions.
        let mut named = std::collections::HashSet::new();
        for id in self.store.ledger.ids() {
            let spec = &self.store.ledger.jobs[&id].spec;
            if engine.job_type_id(&spec.job_type).is_none()
                && named.insert(spec.job_type.as_str())
                && let Some(uid) = spec.runs_as()
            {
                *self.types_named_by.entry(uid).or_default() += 1;
            }
        }
        // Ended jobs still count toward the order in which GPU types are offered (sim/live parity).
        for id in self.store.ledger.ids() {
            let entry = &self.store.ledger.jobs[&id];
            if entry.standing.is_terminal() {
                let job = job_of(&mut engine, &entry.spec, None);
                engine.remember_ended(&job);
            }
        }
        let entries: Vec<_> = self.store.ledger.unfinished().cloned().collect();
        let mut requeued = Vec::new();
        // Live workers that cannot be re-adopted, stopped together once all are known (each stop
        // may take the executor's patience).
        let mut to_stop = Vec::new();
        for entry in &entries {
            // Its starts that failed in a row, as journaled. A waiting job whose last was its
            // `FailedStarts::MOST_IN_A_ROW`th, whose failure the daemon stopped before writing,
            // fails now, before a round can grant it again (one the journal says runs is looked
            // for below, as any other).
            let failed = self.store.failed_starts.get(&entry.spec.id).cloned();
            let waits = !matches!(entry.standing, Standing::Running { .. });
            if let Some(give_up) = (failed.as_ref())
                .filter(|_| waits)
                .and_then(|f| GiveUp::after(entry.spec.id, f))
            {
                requeued.push(Record::Failed {
                    job: entry.spec.id,
                    at: now,
                    error: give_up.why,
                });
                continue;
            }
            let shape = self.store.shapes.get(&entry.spec.id);
            let job = job_of(&mut engine, &entry.spec, shape);
            let id = job.id;
            if engine.submit(job, entry.spec.arrival).is_err() {
                // The cluster changed under the journal: the job can never run here. It fails, and
                // gives back whatever the ledger says it held, once workers of its that still run
                // there are stopped (another job may be placed on those GPUs).
                tracing::error!(job = id.0, "a journaled job cannot run on this cluster");
                if let Standing::Running { attempt, gpus, .. } = &entry.standing
                    && self.executor.lock().expect("executor").alive(id, *attempt)
                {
                    to_stop.push(Unadopted {
                        job: id,
                        attempt: *attempt,
                        gpus: gpus.to_vec(),
                        stops: entry.stops,
                        resumes: false,
                    });
                }
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
                let alive = self.executor.lock().expect("executor").alive(id, *attempt);
                if alive
                    && engine
                        .adopt(id, *gpu_type, gpus.clone(), placer.as_mut(), now)
                        .is_ok()
                {
                    phase = Phase::Running;
                    self.adopted.push(id);
                } else {
                    // Live workers that cannot be re-adopted (a packed partner's GPUs are taken by
                    // then) are stopped, so that the job never runs twice.
                    if alive {
                        to_stop.push(Unadopted {
                            job: id,
                            attempt: *attempt,
                            gpus: gpus.to_vec(),
                            stops: entry.stops,
                            resumes: true,
                        });
                    }
                    requeued.push(Record::Stopped { job: id, at: now });
                }
            }
            // A waiting job pauses as long as its last failed start left it to, and fails after
            // as many more as it would have. One whose last start succeeded before the daemon
            // stopped, and was re-adopted, has no count: the journal says so now.
            if phase == Phase::Running && failed.is_some() {
                requeued.push(FailedStarts::ended(id, now));
            }
            let failed = failed.filter(|_| phase == Phase::Pending);
            if let Some(failed) = &failed
                && failed.at + failed.pause() > now
            {
                let _ = engine.defer(id, now, failed.at + failed.pause());
            }
            self.add_job(id, phase);
            if let Some(handle) = self.jobs.get_mut(&id) {
                handle.crashes = entry.crashes;
                handle.start_failed = failed;
            }
        }
        let lingering = self.stop_unadopted(to_stop, &mut engine, &mut requeued, now);
        // Changes from adoption are already journaled.
        engine.take_changes();
        self.sched = Some(Scheduler {
            engine,
            policy,
            placer,
        });
        for stopping in lingering {
            let Unadopted {
                job,
                attempt,
                gpus,
                stops,
                ..
            } = stopping;
            self.keep_stopping_recovered(job, attempt, &gpus, stops);
        }
        self.persist(&requeued);
        let ended: Vec<Phase> = self
            .store
            .ledger
            .jobs
            .values()
            .filter_map(|e| e.standing.ended_phase())
            .collect();
        for phase in ended {
            self.stats.note_end(phase);
        }
        // The first view shows every job the ledger knows, ended ones included.
        for &job in self.store.ledger.jobs.keys() {
            self.views.touch(job);
        }
    }

    /// Stops the live workers recovery could not re-adopt, all at once: what those of a job that
    /// resumes saved becomes its checkpoint (journaled into `records`); answers those still
    /// stopping after the executor's patience.
    fn stop_unadopted(
        &mut self,
        to_stop: Vec<Unadopted>,
        engine: &mut Engine<'static>,
        records: &mut Vec<Record>,
        now: f64,
    ) -> Vec<Unadopted> {
        if to_stop.is_empty() {
            return Vec::new();
        }
        let jobs: Vec<JobId> = to_stop.iter().map(|u| u.job).collect();
        let answers: IdMap<JobId, Result<f64, ExecutorError>> = (self.executor.lock())
            .expect("executor")
            .stop_many(&jobs, now)
            .into_iter()
            .collect();
        let mut lingering = Vec::new();
        for unadopted in to_stop {
            match &answers[&unadopted.job] {
                Ok(saved) if unadopted.resumes => {
                    let job = unadopted.job;
                    records.push(Record::Checkpointed {
                        job,
                        steps_done: *saved,
                    });
                    engine.restore_progress(job, *saved, unadopted.stops);
                }
                Ok(_) => {}
                Err(ExecutorError::StillStopping(_)) => lingering.push(unadopted),
                Err(e) => {
                    tracing::error!(job = unadopted.job.0, error = %e, "stopping its workers failed")
                }
            }
        }
        lingering
    }
}

/// Live workers recovery found and could not re-adopt.
struct Unadopted {
    job: JobId,
    attempt: u64,
    /// The GPUs the journal gave them.
    gpus: Vec<GpuId>,
    /// The job's stops the journal counted before.
    stops: u32,
    /// Whether the job resumes here (else it fails: it cannot run on this cluster).
    resumes: bool,
}
