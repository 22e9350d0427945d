//! Starting and stopping runs, and what they cost: restore, migration and checkpoint time owed.

use super::{Engine, Run};
use crate::cluster::{GpuSet, GpuTypeId};
use crate::placement::Placed;
use crate::throughput::locality::locality_factor;

use super::live::Change;

impl Engine<'_> {
    /// Takes `placed` GPUs and starts job `i` on them (with its partner, when packed).
    pub(super) fn start(
        &mut self,
        i: usize,
        placed: Placed,
        gpu_type: GpuTypeId,
        partner: Option<usize>,
        now: f64,
    ) {
        self.busy.change(now, placed.gpus.len() as i64);
        self.free.take(&self.cluster, &placed.gpus);
        match partner {
            None => {
                let rate = self.rate_at(i, gpu_type, placed.gpus.len() as u32);
                self.begin_run(i, &placed, gpu_type, rate, None, now);
            }
            Some(p) => {
                let (a, b) = (&self.jobs[i], &self.jobs[p]);
                let (rate_a, rate_b) = self
                    .model
                    .packed_steps_per_second(a, b, gpu_type, a.gpus)
                    .expect("the pair's rates were checked before it was placed");
                self.begin_run(i, &placed, gpu_type, rate_a, Some(p), now);
                self.begin_run(p, &placed, gpu_type, rate_b, Some(i), now);
            }
        }
    }

    /// Sets up job `i`'s run on GPUs already taken, at `rate` alone (scaled by its locality factor),
    /// after the costs it owes.
    fn begin_run(
        &mut self,
        i: usize,
        placed: &Placed,
        gpu_type: GpuTypeId,
        rate: f64,
        partner: Option<usize>,
        now: f64,
    ) {
        let locality = locality_factor(self.sensitivity_of(i), placed.locality);
        let overhead = self.start_overhead(i, &placed.gpus);
        let cluster = &self.cluster;
        let mixed = placed
            .gpus
            .iter()
            .any(|&g| cluster.gpu_type_of(g) != gpu_type);
        let state = &mut self.states[i];
        state.overhead_due = 0.0;
        state.waiting = None;
        state.record.first_start.get_or_insert(now);
        state.run = Some(Run {
            gpu_type,
            mixed,
            gpus: placed.gpus.clone(),
            rate: rate * locality,
            locality,
            partner,
            settled_to: now,
            progress_from: now + overhead,
            started: now,
        });
        if self.changes.is_some() {
            let change = Change::Started {
                job: self.jobs[i].id,
                gpu_type,
                gpus: placed.gpus.clone(),
                partner: partner.map(|p| self.jobs[p].id),
                steps_per_second: rate * locality,
                startup_seconds: overhead,
                remaining_steps: (self.jobs[i].total_steps - self.states[i].steps_done).max(0.0),
            };
            self.note_change(|| change);
        }
        self.reschedule_completion(i, now + overhead);
    }

    /// Seconds of no progress job `i` pays when it starts on `gpus`: costs it still owes, plus a
    /// migration when it ran last round elsewhere.
    fn start_overhead(&mut self, i: usize, gpus: &GpuSet) -> f64 {
        let migrate_cost = self.config.migrate_cost;
        let state = &mut self.states[i];
        let was_running = std::mem::take(&mut state.displaced);
        let previous = std::mem::take(&mut state.last_gpus);
        let mut overhead = state.overhead_due;
        if was_running && *gpus != previous {
            state.record.migrations += 1;
            if state.progressed {
                overhead += migrate_cost;
            }
        }
        overhead
    }

    /// Ends job `i`'s run at `now`, returning its GPUs.
    pub(super) fn stop(&mut self, i: usize, now: f64) -> Run {
        self.settle(i, now);
        self.unindex_completion(i);
        let state = &mut self.states[i];
        let run = state
            .run
            .take()
            .expect("stop() on a job that is not running");
        state.last_run_seconds = now - run.started;
        // Costs not yet paid carry over, so that a job preempted again before it progresses is not
        // charged twice (which could otherwise starve it forever when costs exceed a round).
        state.overhead_due = (run.progress_from - now).max(0.0);
        state.progressed = now > run.progress_from;
        state.last_gpus.clone_from(&run.gpus);
        let (id, steps_done) = (self.jobs[i].id, state.steps_done);
        self.note_change(|| Change::Stopped {
            job: id,
            steps_done,
        });
        match run.partner {
            // The partner keeps the GPUs and runs on alone.
            Some(p) => self.run_alone(p, now),
            None => {
                self.busy.change(now, -(run.gpus.len() as i64));
                self.release_gpus(&run.gpus);
            }
        }
        run
    }

    /// Job `i`'s partner left: from `now` on it runs alone on the GPUs, at its rate alone there.
    fn run_alone(&mut self, i: usize, now: f64) {
        self.settle(i, now);
        let id = self.jobs[i].id;
        let Some(run) = self.states[i].run.as_mut() else {
            return;
        };
        run.partner = None;
        let (gpu_type, gpus, locality) = (run.gpu_type, run.gpus.len() as u32, run.locality);
        let progress_from = run.progress_from.max(now);
        let rate = self.rate_at(i, gpu_type, gpus) * locality;
        if let Some(run) = self.states[i].run.as_mut() {
            run.rate = rate;
        }
        self.note_change(|| Change::Retuned {
            job: id,
            steps_per_second: rate,
        });
        self.reschedule_completion(i, progress_from);
    }

    /// Frees `gpus`, except those out of service.
    fn release_gpus(&mut self, gpus: &GpuSet) {
        if gpus.iter().any(|&g| self.disabled[g.0 as usize]) {
            let in_service: GpuSet = gpus
                .iter()
                .copied()
                .filter(|&g| !self.disabled[g.0 as usize])
                .collect();
            self.free.release(&self.cluster, &in_service);
        } else {
            self.free.release(&self.cluster, gpus);
        }
    }

    /// Job `i` finished at `now`.
    pub(super) fn complete(&mut self, i: usize, now: f64) {
        if self.states[i].run.is_some() {
            self.stop(i, now);
        }
        let state = &mut self.states[i];
        state.steps_done = self.jobs[i].total_steps;
        state.record.finish = Some(now);
        self.retire(i);
        self.finished += 1;
        self.note_utilization(now);
    }

    /// Job `i` leaves the active set.
    pub(super) fn retire(&mut self, i: usize) {
        self.active.retain(|&a| a != i);
        self.states[i].waiting = None;
        self.jobs_changed = true;
    }
}
