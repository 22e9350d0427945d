//! Recovery: the engine rebuilt from the ledger after a restart.

use gangway_core::engine::Engine;
use gangway_core::placement::Placer;
use gangway_core::policy::Policy;

use super::{ClusterActor, Scheduler, job_of};
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
        // Live workers stopped here that went on stopping in the background: job, attempt, GPUs, and
        // the stops the journal counted before.
        let mut lingering = Vec::new();
        for entry in &entries {
            let shape = self.store.shapes.get(&entry.spec.id);
            let job = job_of(&mut engine, &entry.spec, shape);
            let id = job.id;
            if engine.submit(job, entry.spec.arrival).is_err() {
                // The cluster changed under the journal: the job can never run here. It fails, and
                // gives back whatever the ledger says it held, once workers of its that still run
                // there are stopped (another job may be placed on those GPUs).
                tracing::error!(job = id.0, "a journaled job cannot run on this cluster");
                if let Standing::Running { attempt, gpus, .. } = &entry.standing {
                    let mut executor = self.executor.lock().expect("executor");
                    if executor.alive(id, *attempt) {
                        match executor.stop(id, now) {
                            Err(ExecutorError::StillStopping(_)) => {
                                lingering.push((id, *attempt, gpus.clone(), entry.stops))
                            }
                            Err(e) => {
                                tracing::error!(job = id.0, error = %e, "stopping its workers failed")
                            }
                            Ok(_) => {}
                        }
                    }
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
                let mut executor = self.executor.lock().expect("executor");
                let alive = executor.alive(id, *attempt);
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
                    match alive.then(|| executor.stop(id, now)) {
                        Some(Ok(saved)) => {
                            requeued.push(Record::Checkpointed {
                                job: id,
                                steps_done: saved,
                            });
                            engine.restore_progress(id, saved, entry.stops);
                        }
                        Some(Err(ExecutorError::StillStopping(_))) => {
                            lingering.push((id, *attempt, gpus.clone(), entry.stops))
                        }
                        _ => {}
                    }
                    requeued.push(Record::Stopped { job: id, at: now });
                }
            }
            self.add_job(id, phase);
            if let Some(handle) = self.jobs.get_mut(&id) {
                handle.crashes = entry.crashes;
            }
        }
        // Changes from adoption are already journaled.
        engine.take_changes();
        self.sched = Some(Scheduler {
            engine,
            policy,
            placer,
        });
        for (job, attempt, gpus, stops) in lingering {
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
}
