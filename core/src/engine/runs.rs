//! Starting and stopping runs, and what they cost: restore, migration and checkpoint time owed.

use smallvec::SmallVec;

use super::{Engine, Run};
use crate::cluster::{Cluster, GpuId, GpuSet, GpuTypeId};
use crate::job::Job;
use crate::placement::Placed;
use crate::resources::Allotment;
use crate::throughput::locality::locality_factor;
use crate::throughput::{BatchPlan, RunShape, Segment, ThroughputModel};

use super::live::Change;

/// GPUs per server of a gang, in server order.
pub(super) fn placement_shape(cluster: &Cluster, gpus: &[GpuId]) -> SmallVec<[u32; 8]> {
    cluster
        .gpus_per_node(gpus)
        .iter()
        .map(|&(_, n)| n)
        .collect()
}

/// What a policy tuned for a run beside its GPUs.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Tuning {
    batch: Option<BatchPlan>,
    allotment: Option<Allotment>,
}

/// The part of its allotment a run is charged: a packed pair shares one.
pub(super) fn pair_weight(packed: bool) -> f64 {
    if packed { 0.5 } else { 1.0 }
}

/// Job `job`'s rate alone on `gpus` of `gpu_type` from `steps_done` on (0 where it cannot run).
#[allow(clippy::too_many_arguments)]
pub(super) fn alone_segment(
    model: &dyn ThroughputModel,
    cluster: &Cluster,
    job: &Job,
    gpu_type: GpuTypeId,
    gpus: &[GpuId],
    batch: Option<BatchPlan>,
    allotment: Option<Allotment>,
    steps_done: f64,
) -> Segment {
    let placement = placement_shape(cluster, gpus);
    let shape = RunShape {
        gpu_type,
        placement: &placement,
        batch,
        allotment,
    };
    model
        .run_rate(job, &shape, steps_done)
        .filter(|s| s.rate.is_finite() && s.rate > 0.0)
        .unwrap_or(Segment {
            rate: 0.0,
            until: f64::INFINITY,
        })
}

/// [`alone_segment`] of `run`'s shape for `job`, from `steps_done` on: where its rate changes as it
/// progresses, the segment it is in.
pub(super) fn run_segment(
    model: &dyn ThroughputModel,
    cluster: &Cluster,
    job: &Job,
    run: &Run,
    steps_done: f64,
) -> Segment {
    alone_segment(
        model,
        cluster,
        job,
        run.gpu_type,
        &run.gpus,
        run.batch,
        run.allotment,
        steps_done,
    )
}

impl Engine<'_> {
    /// Takes `placed` GPUs and starts job `i` on them (with its partner, when packed), with `batch`
    /// and `allotment` (a packed pair runs on its servers' shares).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        i: usize,
        placed: Placed,
        gpu_type: GpuTypeId,
        partner: Option<usize>,
        batch: Option<BatchPlan>,
        allotment: Option<Allotment>,
        now: f64,
    ) {
        let allotment = allotment.map(|a| Allotment { server: None, ..a });
        self.busy.change(now, placed.gpus.len() as i64);
        self.free.take(&self.cluster, &placed.gpus);
        match partner {
            None => {
                // Where the model's rate is the GPU count's alone, the cached rates answer (starts are
                // the hottest path of time-slicing policies, which move most jobs every round).
                let segment = if self.model.rate_follows_run() {
                    alone_segment(
                        &*self.model,
                        &self.cluster,
                        &self.jobs[i],
                        gpu_type,
                        &placed.gpus,
                        batch,
                        allotment,
                        self.states[i].steps_done,
                    )
                } else {
                    Segment {
                        rate: self.rate_at(i, gpu_type, placed.gpus.len() as u32),
                        until: f64::INFINITY,
                    }
                };
                let run = Tuning { batch, allotment };
                self.begin_run(i, &placed, gpu_type, segment, run, None, now);
            }
            Some(p) => {
                let (a, b) = (&self.jobs[i], &self.jobs[p]);
                let (rate_a, rate_b) = self
                    .model
                    .packed_steps_per_second(a, b, gpu_type, a.gpus)
                    .expect("the pair's rates were checked before it was placed");
                let for_good = |rate| Segment {
                    rate,
                    until: f64::INFINITY,
                };
                let shares = Tuning::default();
                self.begin_run(i, &placed, gpu_type, for_good(rate_a), shares, Some(p), now);
                self.begin_run(p, &placed, gpu_type, for_good(rate_b), shares, Some(i), now);
            }
        }
    }

    /// Sets up job `i`'s run on GPUs already taken, at `segment`'s rate alone (scaled by its locality
    /// factor), after the costs it owes.
    #[allow(clippy::too_many_arguments)]
    fn begin_run(
        &mut self,
        i: usize,
        placed: &Placed,
        gpu_type: GpuTypeId,
        segment: Segment,
        tuning: Tuning,
        partner: Option<usize>,
        now: f64,
    ) {
        let Tuning { batch, allotment } = tuning;
        self.ledger.charge(
            &self.cluster,
            &placed.gpus,
            allotment.as_ref(),
            pair_weight(partner.is_some()),
            1.0,
        );
        self.busy.allot(now, self.ledger.total());
        let rate = segment.rate;
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
        self.records[i].first_start.get_or_insert(now);
        self.running.insert((state.order, i));
        state.run = Some(Run {
            gpu_type,
            mixed,
            gpus: placed.gpus.clone(),
            rate: rate * locality,
            until: segment.until,
            batch,
            allotment,
            locality,
            partner,
            settled_to: now,
            progress_from: now + overhead,
            started: now,
            look_again_at: f64::NEG_INFINITY,
        });
        if self.changes.is_some() {
            let change = Change::Started {
                job: self.jobs[i].id,
                gpu_type,
                gpus: placed.gpus.clone(),
                partner: partner.map(|p| self.jobs[p].id),
                steps_per_second: rate * locality,
                pace: self.pace(i),
                startup_seconds: overhead,
                remaining_steps: (self.jobs[i].total_steps - self.states[i].steps_done).max(0.0),
                batch,
                resources: self.ledger.held(
                    &self.cluster,
                    &placed.gpus,
                    allotment.as_ref(),
                    pair_weight(partner.is_some()),
                ),
            };
            self.note_change(|| change);
        }
        self.reschedule_completion(i, now + overhead);
    }

    /// Run `i`'s pace from its work done to its end, for a live driver's simulated workers: its
    /// rate now, then a segment wherever the model's rate changes as it progresses (its epochs), as
    /// the engine predicts its finish. Empty when its rate holds to the end.
    fn pace(&self, i: usize) -> Vec<Segment> {
        let total = self.jobs[i].total_steps;
        let Some(run) = &self.states[i].run else {
            return Vec::new();
        };
        if run.until >= total {
            return Vec::new();
        }
        let mut pace = vec![Segment {
            rate: run.rate,
            until: run.until,
        }];
        let mut done = self.states[i].steps_done;
        // Epochs are finite: the bound keeps a model that never ends one from spinning.
        while let Some(&last) = pace.last().filter(|s| s.until < total && s.rate > 0.0) {
            if pace.len() >= 100_000 || last.until <= done {
                break;
            }
            done = last.until;
            let segment = run_segment(&*self.model, &self.cluster, &self.jobs[i], run, done);
            pace.push(Segment {
                rate: segment.rate * run.locality,
                until: segment.until.max(done),
            });
        }
        pace
    }

    /// Seconds of no progress job `i` pays when it starts on `gpus`: costs it still owes (at least its
    /// model's restart delay), plus a migration when it ran last round elsewhere.
    fn start_overhead(&mut self, i: usize, gpus: &GpuSet) -> f64 {
        let migrate_cost = self.config.migrate_cost;
        let restart = self.model.restart_seconds(&self.jobs[i]);
        let state = &mut self.states[i];
        let was_running = std::mem::take(&mut state.displaced);
        let previous = std::mem::take(&mut state.last_gpus);
        let mut overhead = state.overhead_due.max(restart);
        if was_running && *gpus != previous {
            self.records[i].migrations += 1;
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
        self.running.remove(&(state.order, i));
        state.last_run_seconds = now - run.started;
        // Costs not yet paid carry over, so that a job preempted again before it progresses is not
        // charged twice (which could otherwise starve it forever when costs exceed a round).
        state.overhead_due = (run.progress_from - now).max(0.0);
        state.progressed = now > run.progress_from;
        state.last_gpus.clone_from(&run.gpus);
        let (id, steps_done) = (self.jobs[i].id, state.steps_done);
        // It waits now (or ends): its view changed, and it may say why it waits.
        self.unexplained.push(i);
        self.touch(i);
        self.ledger.charge(
            &self.cluster,
            &run.gpus,
            run.allotment.as_ref(),
            pair_weight(run.partner.is_some()),
            -1.0,
        );
        self.busy.allot(now, self.ledger.total());
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
        if let Some(run) = self.states[i].run.as_mut() {
            run.partner = None;
            // It held half its servers' share beside its partner; now it holds all of it.
            self.ledger
                .charge(&self.cluster, &run.gpus, run.allotment.as_ref(), 0.5, 1.0);
            self.busy.allot(now, self.ledger.total());
        }
        self.rerate(i, now);
    }

    /// Recomputes job `i`'s rate from `now` (its partner left, or its batch changed), and tells the
    /// live driver.
    pub(super) fn rerate(&mut self, i: usize, now: f64) {
        let id = self.jobs[i].id;
        let steps_done = self.states[i].steps_done;
        let Some(run) = self.states[i].run.as_mut() else {
            return;
        };
        let progress_from = run.progress_from.max(now);
        // Its batch or partner changed: the policy sees it at the next pass.
        run.look_again_at = f64::NEG_INFINITY;
        let segment = run_segment(&*self.model, &self.cluster, &self.jobs[i], run, steps_done);
        run.rate = segment.rate * run.locality;
        run.until = segment.until;
        let (rate, batch) = (run.rate, run.batch);
        let pace = if self.changes.is_some() {
            self.pace(i)
        } else {
            Vec::new()
        };
        let Some(run) = self.states[i].run.as_ref() else {
            return;
        };
        if let Some(changes) = self.changes.as_mut() {
            changes.push(Change::Retuned {
                job: id,
                steps_per_second: rate,
                pace,
                batch,
                resources: self.ledger.held(
                    &self.cluster,
                    &run.gpus,
                    run.allotment.as_ref(),
                    pair_weight(run.partner.is_some()),
                ),
            });
        }
        self.reschedule_completion(i, progress_from);
    }

    /// Gives running job `i` `target` CPUs and memory per GPU where its servers have room for them
    /// (with what it holds given back first), and recomputes its rate; returns whether it changed.
    pub(super) fn reallot(&mut self, i: usize, target: Option<Allotment>, now: f64) -> bool {
        let target = target.map(|a| Allotment { server: None, ..a });
        let Some(run) = self.states[i].run.as_ref() else {
            return false;
        };
        // A run that holds its servers' shares and is granted them again keeps what it has (the
        // common case, checked first: most runs in a large round are kept as they were).
        if run.partner.is_some() || (run.allotment.is_none() && target.is_none()) {
            return false;
        }
        let cluster = &*self.cluster;
        let share_of = |g: &GpuId| Allotment::share(cluster.node(cluster.node_of(*g)));
        let same = run.gpus.iter().all(|g| {
            let now_held = run.allotment.unwrap_or_else(|| share_of(g));
            now_held.same_amounts(&target.unwrap_or_else(|| share_of(g)))
        });
        if same {
            return false;
        }
        let (gpus, held) = (run.gpus.clone(), run.allotment);
        self.ledger.charge(cluster, &gpus, held.as_ref(), 1.0, -1.0);
        let shape = cluster.gpus_per_node(&gpus);
        let fits = shape.iter().all(|&(node, count)| {
            let wanted = target.unwrap_or_else(|| Allotment::share(cluster.node(node)));
            self.ledger.room(cluster, node, &wanted, count) == count
        });
        let chosen = if fits { target } else { held };
        self.ledger
            .charge(cluster, &gpus, chosen.as_ref(), 1.0, 1.0);
        self.busy.allot(now, self.ledger.total());
        if !fits {
            return false;
        }
        self.settle(i, now);
        if let Some(run) = self.states[i].run.as_mut() {
            run.allotment = chosen;
        }
        self.rerate(i, now);
        true
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
        self.records[i].finish = Some(now);
        self.retire(i);
        self.finished += 1;
        self.note_utilization(now);
    }

    /// Job `i` leaves the active set.
    pub(super) fn retire(&mut self, i: usize) {
        let state = &mut self.states[i];
        self.active.remove(&(state.order, i));
        state.active = false;
        state.waiting = None;
        if state.deferred_until.take().is_some() {
            self.deferred.retain(|&d| d != i);
        } else {
            self.left.push(self.jobs[i].id);
        }
        self.jobs_changed = true;
    }
}
