//! The scheduling state that the simulator and the live control plane share.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, GpuId, GpuSet, GpuTypeId};
use crate::job::{Job, JobId, JobTypeId, TenantId, Trace};
use crate::metrics::JobRecord;
use crate::policy::effective::FastestFirst;
use crate::policy::timeshare::Mechanism;
use crate::policy::{Allocation, Grant, JobView, Policy, RoundInput, Running, Unit};
use crate::sim::{FreeGpus, PlaceRequest, Placed, Placer, SimConfig};
use crate::throughput::ThroughputModel;
use crate::throughput::locality::{default_sensitivity, locality_factor};

/// A job's current run.
#[derive(Clone, Debug)]
struct Run {
    /// The GPU type that sets its pace: its only type, or the slowest of a gang spanning types.
    gpu_type: GpuTypeId,
    gpus: GpuSet,
    /// Its GPUs span types (a `mixed` grant).
    mixed: bool,
    rate: f64,
    /// How much its placement slows it (1 = ideal), kept to recompute the rate when a partner leaves.
    locality: f64,
    /// The job packed on the same GPUs, if any. The GPUs belong to the pair: they are free again only
    /// when both have stopped.
    partner: Option<usize>,
    /// What the time-share mechanism charges for this run: the job, or its pair (charged once, by the
    /// member whose grant came first).
    unit: Option<Unit>,
    /// Accounting is settled up to here.
    settled_to: f64,
    /// Progress starts here (after restore or migration costs).
    progress_from: f64,
    /// When this run started (for `last_run_seconds`).
    started: f64,
}

#[derive(Clone, Debug)]
struct JobState {
    steps_done: f64,
    attained_gpu_seconds: f64,
    attained_seconds: f64,
    run: Option<Run>,
    last_gpus: GpuSet,
    /// Seconds of no progress owed at the next start (restore costs not yet paid).
    overhead_due: f64,
    /// Whether the last run made progress (so that a preemption has something to checkpoint).
    progressed: bool,
    queued_since: f64,
    last_run_seconds: f64,
    /// This pass's grant, while a pass runs.
    grant: Option<Grant>,
    /// Lost its GPUs in this pass and has not (yet) been placed again.
    displaced: bool,
    /// When the current run will finish if nothing changes.
    finish_at: f64,
    /// Key of its completion in `World::completions`, once that falls within the current round.
    completion: Option<(u64, usize)>,
    record: JobRecord,
}

/// Orders non-negative times as integers, so that completions can live in a `BTreeSet` and be removed
/// when a run ends early (preemption, migration) instead of going stale.
fn time_key(t: f64) -> u64 {
    debug_assert!(t >= 0.0);
    t.max(0.0).to_bits()
}

/// The scheduling state of a cluster: the jobs, who runs where, and the costs owed.
///
/// Both drivers share it, so that a policy decides the same way in both: the simulator's event loop
/// ([`crate::sim::Simulation`]) and the live control plane's cluster actor. A driver submits jobs,
/// reports completions, and calls [`Engine::schedule`] at round boundaries; with
/// [`Engine::record_changes`] on, the engine lists every start and stop a pass made, for the live
/// driver to carry out.
pub struct Engine<'m> {
    cluster: Arc<Cluster>,
    model: Arc<dyn ThroughputModel + 'm>,
    config: SimConfig,
    /// Every job submitted so far, in submission order (a job's index is its position here), and the
    /// names its ids refer to.
    trace: Trace,
    /// rates[i * types + t]: steps/s of job i alone on its gang of type t (0 = cannot run).
    rates: Vec<f64>,
    /// The GPU types, fastest first for the jobs admitted so far.
    type_order: FastestFirst,
    /// Per job type: how much a poorly placed gang slows down (see `throughput::locality`).
    sensitivity: Vec<f64>,
    jobs: Vec<JobState>,
    /// Indices of active jobs, in arrival order.
    active: Vec<usize>,
    index_of: FxHashMap<JobId, usize>,
    free: FreeGpus,
    /// Completions due by `horizon`: (time key, job index). Runs that end later are added when the
    /// horizon reaches them, so that jobs preempted or migrated every round (LAS) cost no set updates.
    completions: BTreeSet<(u64, usize)>,
    /// The next round boundary: every run that finishes by then has its completion in the set.
    horizon: f64,
    mechanism: Mechanism,
    /// Whether the mechanism is in use (the last allocation was time shares).
    time_shared: bool,
    busy_gpus: u32,
    busy_gpu_seconds: f64,
    last_busy_change: f64,
    utilization: Vec<(f64, u32)>,
    finished: usize,
    jobs_changed: bool,
    /// Starts and stops since the last [`Engine::take_changes`], when recording.
    changes: Option<Vec<Change>>,
    /// GPUs out of service (failed), per GPU id; they are neither free nor held.
    disabled: Vec<bool>,
    /// GPUs in service per type: what policies may allocate.
    capacity: Vec<u32>,
}

/// A start or stop that a scheduling pass (or a completion) made, for a live driver to carry out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Change {
    /// The job starts on `gpus`, progressing at `steps_per_second` after `startup_seconds` of restore
    /// or migration costs, with `remaining_steps` to go.
    Started {
        job: JobId,
        gpu_type: GpuTypeId,
        gpus: GpuSet,
        partner: Option<JobId>,
        steps_per_second: f64,
        startup_seconds: f64,
        remaining_steps: f64,
    },
    /// The job stopped running (it was preempted, is about to move, or finished) with `steps_done`.
    Stopped { job: JobId, steps_done: f64 },
    /// A running job's pace changed in place (its packing partner left).
    Retuned { job: JobId, steps_per_second: f64 },
}

/// Why a job cannot be taken.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Rejected {
    #[error("job {0}: no GPU type has room for its gang, or the throughput model cannot run it")]
    Unschedulable(JobId),
    #[error("job {0} is already known")]
    Duplicate(JobId),
    #[error("job {0} is not known")]
    Unknown(JobId),
    #[error("job {0} has finished")]
    Finished(JobId),
    #[error("job {0}: its GPUs are taken, or it already runs")]
    GpusTaken(JobId),
}

/// Where a job stands, for the live driver and its API.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobStatus {
    pub id: JobId,
    pub steps_done: f64,
    pub total_steps: f64,
    /// Its GPUs, when running.
    pub gpus: Option<GpuSet>,
    pub record: JobRecord,
}

impl<'m> Engine<'m> {
    /// An empty cluster state. `job_types` and `tenants` name the ids of the jobs to come (more are
    /// added by [`Engine::intern_job_type`]); `start` is when accounting starts.
    pub fn new(
        cluster: Arc<Cluster>,
        model: Arc<dyn ThroughputModel + 'm>,
        config: SimConfig,
        names: Trace,
        start: f64,
    ) -> Self {
        let types = cluster.num_gpu_types();
        let mut trace = names;
        trace.jobs.clear();
        Engine {
            sensitivity: trace
                .job_types
                .iter()
                .map(|t| default_sensitivity(t))
                .collect(),
            trace,
            rates: Vec::new(),
            type_order: FastestFirst::new(types),
            jobs: Vec::new(),
            active: Vec::new(),
            index_of: FxHashMap::default(),
            free: FreeGpus::new(&cluster),
            completions: BTreeSet::new(),
            horizon: f64::NEG_INFINITY,
            mechanism: Mechanism::new(types, config.seed),
            time_shared: false,
            busy_gpus: 0,
            busy_gpu_seconds: 0.0,
            last_busy_change: start,
            utilization: Vec::new(),
            finished: 0,
            jobs_changed: false,
            changes: None,
            disabled: vec![false; cluster.num_gpus() as usize],
            capacity: cluster.capacity().to_vec(),
            cluster,
            model,
            config,
        }
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The id of a job type by name, added if new.
    pub fn intern_job_type(&mut self, name: &str) -> JobTypeId {
        let id = self.trace.intern_job_type(name);
        if self.sensitivity.len() < self.trace.job_types.len() {
            self.sensitivity.push(default_sensitivity(name));
        }
        id
    }

    /// The id of a tenant by name, added if new.
    pub fn intern_tenant(&mut self, name: &str) -> TenantId {
        self.trace.intern_tenant(name)
    }

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

    fn note_change(&mut self, change: impl FnOnce() -> Change) {
        if let Some(changes) = self.changes.as_mut() {
            changes.push(change());
        }
    }

    /// Takes a job that arrives at `now`. A job that can never run is kept (its record stays
    /// unfinished) but never scheduled.
    pub fn submit(&mut self, job: Job, now: f64) -> Result<(), Rejected> {
        if self.index_of.contains_key(&job.id) {
            return Err(Rejected::Duplicate(job.id));
        }
        let i = self.push(job);
        if !self.accepts(&self.trace.jobs[i]) {
            return Err(Rejected::Unschedulable(self.trace.jobs[i].id));
        }
        self.admit(i, now);
        Ok(())
    }

    /// Steps/s of `job` alone on its gang of each type (0 where it cannot run).
    fn rates_of<'a>(&'a self, job: &'a Job) -> impl Iterator<Item = f64> + 'a {
        (0..self.types()).map(move |t| {
            self.model
                .steps_per_second(job, GpuTypeId(t as u16), job.gpus)
                .filter(|r| r.is_finite() && *r > 0.0)
                .unwrap_or(0.0)
        })
    }

    /// The GPU types in the order heterogeneity-aware policies are offered them.
    pub fn type_order(&self) -> &[GpuTypeId] {
        self.type_order.order()
    }

    /// Counts a job that ran before a restart, and has ended, toward the GPU type order, as its
    /// admission did: a recovered control plane then offers the types in the order it did before.
    pub fn remember_ended(&mut self, job: &Job) {
        let rates: Vec<f64> = self.rates_of(job).collect();
        self.type_order.observe(&rates);
    }

    /// Adds a job's state without admitting it.
    fn push(&mut self, job: Job) -> usize {
        let rates: Vec<f64> = self.rates_of(&job).collect();
        self.rates.extend(rates);
        let i = self.jobs.len();
        self.index_of.insert(job.id, i);
        self.jobs.push(JobState {
            steps_done: 0.0,
            attained_gpu_seconds: 0.0,
            attained_seconds: 0.0,
            run: None,
            last_gpus: GpuSet::new(),
            overhead_due: 0.0,
            progressed: false,
            queued_since: job.arrival,
            last_run_seconds: 0.0,
            finish_at: f64::INFINITY,
            completion: None,
            grant: None,
            displaced: false,
            record: new_record(&job, self.trace.job_type_name(job.job_type), self.types()),
        });
        self.trace.jobs.push(job);
        i
    }

    /// Whether no job waits or runs.
    pub fn is_idle(&self) -> bool {
        self.active.is_empty()
    }

    pub fn active_jobs(&self) -> usize {
        self.active.len()
    }

    pub fn busy_gpus(&self) -> u32 {
        self.busy_gpus
    }

    pub fn finished_jobs(&self) -> usize {
        self.finished
    }

    /// Every job submitted, in submission order.
    pub fn jobs(&self) -> &[Job] {
        &self.trace.jobs
    }

    /// Where job `id` stands.
    pub fn status(&self, id: JobId) -> Option<JobStatus> {
        let &i = self.index_of.get(&id)?;
        let state = &self.jobs[i];
        Some(JobStatus {
            id,
            steps_done: state.steps_done,
            total_steps: self.trace.jobs[i].total_steps,
            gpus: state.run.as_ref().map(|r| r.gpus.clone()),
            record: state.record.clone(),
        })
    }

    /// Sets the progress of a job that has not started in this engine (recovery from a checkpoint).
    pub fn restore_progress(&mut self, id: JobId, steps_done: f64, preemptions: u32) {
        if let Some(&i) = self.index_of.get(&id) {
            let state = &mut self.jobs[i];
            state.steps_done = steps_done.clamp(0.0, self.trace.jobs[i].total_steps);
            state.progressed = steps_done > 0.0;
            state.record.preemptions = preemptions;
        }
    }

    /// Job `id` finished at `now` (a live driver's executor says so).
    pub fn finish(&mut self, id: JobId, now: f64) -> Result<(), Rejected> {
        let i = self.running_index(id)?;
        if self.jobs[i].run.is_some() {
            self.settle(i, now);
        }
        self.complete(i, now);
        Ok(())
    }

    /// Removes job `id` at `now`, stopping it if it runs; its record stays unfinished.
    pub fn cancel(&mut self, id: JobId, now: f64) -> Result<(), Rejected> {
        let i = self.running_index(id)?;
        if self.jobs[i].run.is_some() {
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
        let i = self.running_index(id)?;
        if self.jobs[i].run.is_some() {
            self.stop(i, now);
            self.note_utilization(now);
        }
        let total = self.trace.jobs[i].total_steps;
        let state = &mut self.jobs[i];
        if let Some(steps) = checkpoint {
            state.steps_done = steps.clamp(0.0, total).min(state.steps_done);
        }
        state.queued_since = now;
        Ok(())
    }

    /// The index of an active job.
    fn running_index(&self, id: JobId) -> Result<usize, Rejected> {
        let &i = self.index_of.get(&id).ok_or(Rejected::Unknown(id))?;
        if self.jobs[i].record.finish.is_some() || !self.active.contains(&i) {
            return Err(Rejected::Finished(id));
        }
        Ok(i)
    }

    /// Whether `job` could run here at all: some GPU type has a rate for it and room for its gang.
    pub fn accepts(&self, job: &Job) -> bool {
        (0..self.types()).any(|t| {
            self.cluster.capacity()[t] >= job.gpus
                && self
                    .model
                    .steps_per_second(job, GpuTypeId(t as u16), job.gpus)
                    .is_some_and(|r| r.is_finite() && r > 0.0)
        })
    }

    /// Runs job `id` on exactly `gpus` from `now` (its workers survived a control-plane restart), with
    /// no restore cost. Refused unless the job waits and every GPU is free.
    pub fn adopt(
        &mut self,
        id: JobId,
        gpu_type: GpuTypeId,
        gpus: GpuSet,
        now: f64,
    ) -> Result<(), Rejected> {
        let i = self.running_index(id)?;
        if self.jobs[i].run.is_some() || !gpus.iter().all(|&g| self.free.is_free(g)) {
            return Err(Rejected::GpusTaken(id));
        }
        self.jobs[i].overhead_due = 0.0;
        let placed = Placed { gpus, score: 1.0 };
        self.start(i, placed, gpu_type, None, now);
        self.note_utilization(now);
        Ok(())
    }

    /// Takes GPU `gpu` out of service at `now` (it failed). A job running on it stops, and waits with
    /// its work saved, as if preempted.
    pub fn disable_gpu(&mut self, gpu: GpuId, now: f64) {
        let g = gpu.0 as usize;
        if self.disabled[g] {
            return;
        }
        let holders: Vec<usize> = self
            .active
            .iter()
            .copied()
            .filter(|&i| {
                self.jobs[i]
                    .run
                    .as_ref()
                    .is_some_and(|r| r.gpus.contains(&gpu))
            })
            .collect();
        for i in holders {
            if self.jobs[i].run.is_some() {
                self.stop(i, now);
                let state = &mut self.jobs[i];
                state.record.preemptions += 1;
                state.queued_since = now;
            }
        }
        self.free.take(&self.cluster, &[gpu]);
        self.disabled[g] = true;
        self.capacity[self.cluster.gpu_type_of(gpu).0 as usize] -= 1;
        self.jobs_changed = true;
        self.note_utilization(now);
    }

    /// Puts a failed GPU back in service.
    pub fn enable_gpu(&mut self, gpu: GpuId) {
        let g = gpu.0 as usize;
        if std::mem::take(&mut self.disabled[g]) {
            self.free.release(&self.cluster, &[gpu]);
            self.capacity[self.cluster.gpu_type_of(gpu).0 as usize] += 1;
            self.jobs_changed = true;
        }
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

    /// The records of every job, in submission order, and the busy-time totals, up to `now`.
    pub fn into_totals(mut self, now: f64) -> EngineTotals {
        self.note_busy(now);
        EngineTotals {
            records: self.jobs.into_iter().map(|j| j.record).collect(),
            utilization: self.utilization,
            busy_gpu_seconds: self.busy_gpu_seconds,
        }
    }

    fn types(&self) -> usize {
        self.cluster.num_gpu_types()
    }

    fn job_rates(&self, i: usize) -> &[f64] {
        let t = self.types();
        &self.rates[i * t..(i + 1) * t]
    }

    /// Job `i`'s rate alone on `gpus` GPUs of `gpu_type`: cached at the size it asked for, from the model
    /// at any other size (a policy that resizes jobs); 0 where it cannot run so.
    fn rate_at(&self, i: usize, gpu_type: GpuTypeId, gpus: u32) -> f64 {
        let job = &self.trace.jobs[i];
        if gpus == job.gpus {
            return self.job_rates(i)[gpu_type.0 as usize];
        }
        self.model
            .steps_per_second(job, gpu_type, gpus)
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(0.0)
    }

    fn admit(&mut self, i: usize, now: f64) {
        let t = self.types();
        self.type_order.observe(&self.rates[i * t..(i + 1) * t]);
        self.jobs[i].queued_since = now;
        self.active.push(i);
        self.jobs_changed = true;
    }

    /// Moves the horizon to the next round boundary, adding the completions that now fall within it.
    pub fn advance_horizon(&mut self, horizon: f64) {
        self.horizon = horizon;
        for k in 0..self.active.len() {
            let i = self.active[k];
            let state = &mut self.jobs[i];
            if state.run.is_some() && state.completion.is_none() && state.finish_at <= horizon {
                let key = (time_key(state.finish_at), i);
                state.completion = Some(key);
                self.completions.insert(key);
            }
        }
    }

    pub fn peek_completion(&self) -> Option<f64> {
        self.completions
            .first()
            .map(|&(key, _)| f64::from_bits(key))
    }

    /// Completes the earliest completion due by `now`, if any, returning its job.
    pub fn complete_due(&mut self, now: f64) -> Option<JobId> {
        match self.completions.first() {
            Some(&(key, i)) if f64::from_bits(key) <= now => {
                self.complete(i, now);
                Some(self.trace.jobs[i].id)
            }
            _ => None,
        }
    }

    /// Brings a running job's accounting up to `now`.
    fn settle(&mut self, i: usize, now: f64) {
        let cluster = &self.cluster;
        let state = &mut self.jobs[i];
        let Some(run) = state.run.as_mut() else {
            return;
        };
        let from = run.settled_to;
        if now <= from {
            return;
        }
        let held = now - from;
        let progressing = (now - run.progress_from.max(from)).max(0.0);
        // Packed partners split the GPUs' time between them, so that GPU-time adds up to busy time.
        let sharers = if run.partner.is_some() { 2.0 } else { 1.0 };
        let gpus = run.gpus.len() as f64 / sharers;
        let (gpu_type, rate, unit) = (run.gpu_type, run.rate, run.unit);
        run.settled_to = now;
        if run.mixed {
            for &g in &run.gpus {
                state.record.gpu_seconds[cluster.gpu_type_of(g).0 as usize] += held / sharers;
            }
        } else {
            state.record.gpu_seconds[gpu_type.0 as usize] += held * gpus;
        }
        state.steps_done += progressing * rate;
        state.attained_seconds += held;
        state.attained_gpu_seconds += held * gpus;
        if let (true, Some(unit)) = (self.time_shared, unit) {
            self.mechanism.charge(unit, gpu_type, held);
        }
    }

    fn note_busy(&mut self, now: f64) {
        self.busy_gpu_seconds += f64::from(self.busy_gpus) * (now - self.last_busy_change).max(0.0);
        self.last_busy_change = now;
    }

    /// Ends job `i`'s run at `now`, returning its GPUs.
    fn stop(&mut self, i: usize, now: f64) -> Run {
        self.settle(i, now);
        let state = &mut self.jobs[i];
        let run = state
            .run
            .take()
            .expect("stop() on a job that is not running");
        if let Some(key) = state.completion.take() {
            self.completions.remove(&key);
        }
        state.last_run_seconds = now - run.started;
        // Costs not yet paid carry over, so that a job preempted again before it progresses is not
        // charged twice (which could otherwise starve it forever when costs exceed a round).
        state.overhead_due = (run.progress_from - now).max(0.0);
        state.progressed = now > run.progress_from;
        state.last_gpus.clone_from(&run.gpus);
        let (id, steps_done) = (self.trace.jobs[i].id, state.steps_done);
        self.note_change(|| Change::Stopped {
            job: id,
            steps_done,
        });
        match run.partner {
            // The partner keeps the GPUs and runs on alone.
            Some(p) => self.run_alone(p, now),
            None => {
                self.note_busy(now);
                self.busy_gpus -= run.gpus.len() as u32;
                self.release_gpus(&run.gpus);
            }
        }
        run
    }

    /// Job `i`'s partner left: from `now` on it runs alone on the GPUs, at its rate alone there.
    fn run_alone(&mut self, i: usize, now: f64) {
        self.settle(i, now);
        let id = self.trace.jobs[i].id;
        let Some(run) = self.jobs[i].run.as_mut() else {
            return;
        };
        run.partner = None;
        run.unit = Some(Unit::Job(id));
        let (gpu_type, gpus, locality) = (run.gpu_type, run.gpus.len() as u32, run.locality);
        let progress_from = run.progress_from.max(now);
        let rate = self.rate_at(i, gpu_type, gpus) * locality;
        if let Some(run) = self.jobs[i].run.as_mut() {
            run.rate = rate;
        }
        self.note_change(|| Change::Retuned {
            job: id,
            steps_per_second: rate,
        });
        self.reschedule_completion(i, progress_from);
    }

    /// Recomputes when job `i`'s run ends, progressing from `progress_from` at its current rate.
    fn reschedule_completion(&mut self, i: usize, progress_from: f64) {
        let remaining = (self.trace.jobs[i].total_steps - self.jobs[i].steps_done).max(0.0);
        let state = &mut self.jobs[i];
        let rate = state.run.as_ref().map_or(0.0, |r| r.rate);
        if let Some(key) = state.completion.take() {
            self.completions.remove(&key);
        }
        state.finish_at = progress_from + remaining / rate;
        if state.finish_at <= self.horizon {
            let key = (time_key(state.finish_at), i);
            state.completion = Some(key);
            self.completions.insert(key);
        }
    }

    fn complete(&mut self, i: usize, now: f64) {
        if self.jobs[i].run.is_some() {
            self.stop(i, now);
        }
        let state = &mut self.jobs[i];
        state.steps_done = self.trace.jobs[i].total_steps;
        state.record.finish = Some(now);
        self.retire(i);
        self.finished += 1;
        self.note_utilization(now);
    }

    /// Job `i` leaves the active set.
    fn retire(&mut self, i: usize) {
        self.active.retain(|&a| a != i);
        self.mechanism.forget(self.trace.jobs[i].id);
        self.jobs_changed = true;
    }

    /// Takes `gpus` and starts job `i` on them (with its partner, when packed).
    fn start(
        &mut self,
        i: usize,
        placed: Placed,
        gpu_type: GpuTypeId,
        partner: Option<usize>,
        now: f64,
    ) {
        self.note_busy(now);
        self.busy_gpus += placed.gpus.len() as u32;
        self.free.take(&self.cluster, &placed.gpus);
        let id = |k: usize| self.trace.jobs[k].id;
        match partner {
            None => {
                let rate = self.rate_at(i, gpu_type, placed.gpus.len() as u32);
                let unit = Unit::Job(id(i));
                self.begin_run(i, &placed, gpu_type, rate, None, Some(unit), now);
            }
            Some(p) => {
                let (a, b) = (&self.trace.jobs[i], &self.trace.jobs[p]);
                let (rate_a, rate_b) = self
                    .model
                    .packed_steps_per_second(a, b, gpu_type, a.gpus)
                    .expect("claim_partner checked the pair's rates");
                // The pair's time is charged once, through the member whose grant came first.
                let unit = Unit::Pair(a.id, b.id);
                self.begin_run(i, &placed, gpu_type, rate_a, Some(p), Some(unit), now);
                self.begin_run(p, &placed, gpu_type, rate_b, Some(i), None, now);
            }
        }
    }

    /// Sets up job `i`'s run on GPUs already taken, at `rate` alone (scaled by its locality factor),
    /// after the costs it owes.
    #[allow(clippy::too_many_arguments)]
    fn begin_run(
        &mut self,
        i: usize,
        placed: &Placed,
        gpu_type: GpuTypeId,
        rate: f64,
        partner: Option<usize>,
        unit: Option<Unit>,
        now: f64,
    ) {
        let job = &self.trace.jobs[i];
        let locality = locality_factor(self.sensitivity[job.job_type.0 as usize], placed.score);
        let overhead = self.start_overhead(i, &placed.gpus);
        let cluster = &self.cluster;
        let mixed = placed
            .gpus
            .iter()
            .any(|&g| cluster.gpu_type_of(g) != gpu_type);
        let state = &mut self.jobs[i];
        state.overhead_due = 0.0;
        state.record.first_start.get_or_insert(now);
        state.run = Some(Run {
            gpu_type,
            mixed,
            gpus: placed.gpus.clone(),
            rate: rate * locality,
            locality,
            partner,
            unit,
            settled_to: now,
            progress_from: now + overhead,
            started: now,
        });
        if self.changes.is_some() {
            let change = Change::Started {
                job: self.trace.jobs[i].id,
                gpu_type,
                gpus: placed.gpus.clone(),
                partner: partner.map(|p| self.trace.jobs[p].id),
                steps_per_second: rate * locality,
                startup_seconds: overhead,
                remaining_steps: (self.trace.jobs[i].total_steps - self.jobs[i].steps_done)
                    .max(0.0),
            };
            self.note_change(|| change);
        }
        self.reschedule_completion(i, now + overhead);
    }

    /// Seconds of no progress job `i` pays when it starts on `gpus`: costs it still owes, plus a
    /// migration when it ran last round elsewhere.
    fn start_overhead(&mut self, i: usize, gpus: &GpuSet) -> f64 {
        let was_running = std::mem::take(&mut self.jobs[i].displaced);
        let state = &mut self.jobs[i];
        let previous = std::mem::take(&mut state.last_gpus);
        let mut overhead = state.overhead_due;
        if was_running && *gpus != previous {
            state.record.migrations += 1;
            if state.progressed {
                overhead += self.config.migrate_cost;
            }
        }
        overhead
    }

    /// One scheduling pass at `now`: ask the policy, then preempt, migrate and place.
    pub fn schedule(&mut self, policy: &mut dyn Policy, placer: &mut dyn Placer, now: f64) {
        for k in 0..self.active.len() {
            self.settle(self.active[k], now);
        }
        let grants = self.decide(policy, now);
        let preempt_costs = self.config.preempt_cost + self.config.restore_cost;
        let cluster = Arc::clone(&self.cluster);

        // Which running jobs keep their GPUs, and which are displaced.
        for g in &grants {
            if let Some(&i) = self.index_of.get(&g.job) {
                self.jobs[i].grant.get_or_insert(*g);
            }
        }
        let mut displaced = Vec::new();
        let mut spread = Vec::new();
        for k in 0..self.active.len() {
            let i = self.active[k];
            let Some(run) = &self.jobs[i].run else {
                continue;
            };
            let partner = run.partner.map(|p| self.trace.jobs[p].id);
            let keep = self.jobs[i].grant.is_some_and(|g| {
                g.gpu_type == run.gpu_type
                    && g.gpus as usize == run.gpus.len()
                    && g.partner == partner
                    && g.mixed == run.mixed
            });
            if keep && self.jobs[i].grant.is_some_and(|g| g.defragment) {
                spread.push(i);
            }
            if !keep {
                self.stop(i, now);
                self.jobs[i].displaced = true;
                displaced.push(i);
            }
        }
        // Place the grants in order; running jobs that keep their GPUs are already placed.
        for g in &grants {
            let Some(&i) = self.index_of.get(&g.job) else {
                continue;
            };
            if self.jobs[i].grant.take().is_none()
                || self.jobs[i].run.is_some()
                || self.jobs[i].record.finish.is_some()
                || self.rate_at(i, g.gpu_type, g.gpus) <= 0.0
            {
                continue;
            }
            let partner = match g.partner {
                None => None,
                Some(p) => match self.claim_partner(i, p, g) {
                    Some(p) => Some(p),
                    None => continue,
                },
            };
            let placed = if g.mixed && partner.is_none() {
                self.place_mixed(i, g, placer, now)
            } else {
                let job = &self.trace.jobs[i];
                let request = PlaceRequest {
                    job,
                    gpu_type: g.gpu_type,
                    gpus: g.gpus,
                    previous: &self.jobs[i].last_gpus,
                    waited: (now - self.jobs[i].queued_since).max(0.0),
                    sensitivity: self.sensitivity[job.job_type.0 as usize],
                    consolidate: g.consolidate,
                };
                placer.place(&cluster, &self.free, &request)
            };
            if let Some(placed) = placed.filter(|c| c.gpus.len() == g.gpus as usize) {
                self.start(i, placed, g.gpu_type, partner, now);
            }
        }
        for i in spread {
            self.defragment(i, placer, now);
        }
        // Displaced jobs that did not get GPUs back are preempted.
        for i in displaced {
            let state = &mut self.jobs[i];
            if std::mem::take(&mut state.displaced) {
                state.record.preemptions += 1;
                if state.progressed {
                    state.overhead_due += preempt_costs;
                }
                state.queued_since = now;
            }
        }
        self.note_utilization(now);
    }

    /// Moves job `i`, which keeps its GPUs but should sit on one server, onto one server when its gang
    /// runs spread over several and a server now has room (Gandiva's defragmenting migration).
    fn defragment(&mut self, i: usize, placer: &mut dyn Placer, now: f64) {
        let cluster = &self.cluster;
        let Some(run) = &self.jobs[i].run else {
            return;
        };
        let first = cluster.node_of(run.gpus[0]);
        let n = run.gpus.len() as u32;
        if run.partner.is_some()
            || run.mixed
            || run.gpus.iter().all(|&g| cluster.node_of(g) == first)
            || self.free.widest(run.gpu_type) < n
        {
            return;
        }
        let job = &self.trace.jobs[i];
        let request = PlaceRequest {
            job,
            gpu_type: run.gpu_type,
            gpus: n,
            previous: &run.gpus,
            waited: 0.0,
            sensitivity: self.sensitivity[job.job_type.0 as usize],
            consolidate: true,
        };
        let gpu_type = run.gpu_type;
        let Some(placed) = placer.place(cluster, &self.free, &request) else {
            return;
        };
        let one_server = placed
            .gpus
            .iter()
            .all(|&g| cluster.node_of(g) == cluster.node_of(placed.gpus[0]));
        if placed.gpus.len() == n as usize && one_server {
            // The new GPUs were free before the old ones are released, so the two sets never overlap.
            self.stop(i, now);
            self.jobs[i].displaced = true;
            self.start(i, placed, gpu_type, None, now);
        }
    }

    /// Places a gang that may span GPU types: the types at least as fast for it as the grant's, fastest
    /// first, each through the placer; `None` unless the whole gang is covered.
    fn place_mixed(
        &self,
        i: usize,
        g: &Grant,
        placer: &mut dyn Placer,
        now: f64,
    ) -> Option<Placed> {
        let cluster = &self.cluster;
        let job = &self.trace.jobs[i];
        let pace = self.rate_at(i, g.gpu_type, g.gpus);
        let mut types: Vec<(f64, GpuTypeId)> = (0..self.types() as u16)
            .map(|t| (self.rate_at(i, GpuTypeId(t), g.gpus), GpuTypeId(t)))
            .filter(|&(rate, _)| rate >= pace && rate > 0.0)
            .collect();
        types.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut gpus = GpuSet::new();
        let mut score = f64::MAX;
        for (_, t) in types {
            let n = (g.gpus - gpus.len() as u32).min(self.free.free_of_type(t));
            if n == 0 {
                continue;
            }
            let request = PlaceRequest {
                job,
                gpu_type: t,
                gpus: n,
                previous: &self.jobs[i].last_gpus,
                waited: (now - self.jobs[i].queued_since).max(0.0),
                sensitivity: self.sensitivity[job.job_type.0 as usize],
                consolidate: false,
            };
            let part = placer.place(cluster, &self.free, &request)?;
            score = score.min(part.score);
            gpus.extend(part.gpus);
            if gpus.len() as u32 == g.gpus {
                break;
            }
        }
        (gpus.len() as u32 == g.gpus).then_some(Placed { gpus, score })
    }

    /// Job `i`'s grant packs it with job `partner`: takes the partner's matching grant and returns its
    /// index when the pair can run (both waiting, same gang, a packed rate for both on the type).
    fn claim_partner(&mut self, i: usize, partner: JobId, g: &Grant) -> Option<usize> {
        let p = *self.index_of.get(&partner)?;
        let state = &self.jobs[p];
        let own_id = self.trace.jobs[i].id;
        let reciprocal = state.grant.is_some_and(|pg| {
            pg.partner == Some(own_id) && pg.gpu_type == g.gpu_type && pg.gpus == g.gpus
        });
        let (a, b) = (&self.trace.jobs[i], &self.trace.jobs[p]);
        let runs = self
            .model
            .packed_steps_per_second(a, b, g.gpu_type, g.gpus)
            .is_some_and(|(ra, rb)| ra > 0.0 && rb > 0.0);
        if !reciprocal
            || !runs
            || state.run.is_some()
            || state.record.finish.is_some()
            || b.gpus != g.gpus
        {
            return None;
        }
        self.jobs[p].grant = None;
        Some(p)
    }

    /// Panics if an invariant does not hold: every running job holds exactly its gang, of one type it can
    /// run on; no GPU is held twice, except by two packing partners; the free count matches; nothing
    /// finished is running.
    pub fn audit(&self) {
        let cluster = &self.cluster;
        let mut holder: Vec<Option<usize>> = vec![None; cluster.num_gpus() as usize];
        let mut held_per_type = vec![0u32; self.types()];
        for &i in &self.active {
            let Some(run) = &self.jobs[i].run else {
                continue;
            };
            let job = &self.trace.jobs[i];
            // Its requested gang, or a size its throughput model runs it at (a resized job): never a
            // partial gang.
            assert!(
                self.rate_at(i, run.gpu_type, run.gpus.len() as u32) > 0.0,
                "job {} holds {} GPUs, a gang it cannot run on",
                job.id,
                run.gpus.len()
            );
            assert!(
                self.jobs[i].record.finish.is_none(),
                "finished job {} still runs",
                job.id
            );
            for &g in &run.gpus {
                assert!(
                    run.mixed || cluster.gpu_type_of(g) == run.gpu_type,
                    "job {} spans GPU types without a mixed grant",
                    job.id
                );
                match holder[g.0 as usize].replace(i) {
                    None => held_per_type[cluster.gpu_type_of(g).0 as usize] += 1,
                    // Two jobs may share a GPU only as each other's packing partner.
                    Some(other)
                        if run.partner == Some(other)
                            && self.jobs[other].run.as_ref().and_then(|r| r.partner) == Some(i) => {
                    }
                    Some(other) => panic!(
                        "GPU {} held by jobs {} and {}",
                        g.0, self.trace.jobs[other].id, job.id
                    ),
                }
                assert!(!self.free.is_free(g), "GPU {} is held but marked free", g.0);
            }
        }
        for (t, &held) in held_per_type.iter().enumerate() {
            let capacity = self.capacity[t];
            assert!(held <= capacity, "type {t}: {held} GPUs held of {capacity}");
            assert_eq!(
                held + self.free.free_of_type(GpuTypeId(t as u16)),
                capacity,
                "type {t}: free count drifted"
            );
        }
        assert_eq!(
            held_per_type.iter().sum::<u32>(),
            self.busy_gpus,
            "busy count drifted"
        );
    }

    /// Records a utilization sample when the number of busy GPUs changed.
    fn note_utilization(&mut self, now: f64) {
        if self
            .utilization
            .last()
            .is_none_or(|&(_, busy)| busy != self.busy_gpus)
        {
            self.utilization.push((now, self.busy_gpus));
        }
    }

    /// Asks the policy and turns its answer into grants.
    fn decide(&mut self, policy: &mut dyn Policy, now: f64) -> Vec<Grant> {
        let cluster = &self.cluster;
        let views: Vec<JobView<'_>> = self
            .active
            .iter()
            .map(|&i| {
                let job = &self.trace.jobs[i];
                let state = &self.jobs[i];
                JobView {
                    job,
                    rates: &self.rates
                        [i * cluster.num_gpu_types()..(i + 1) * cluster.num_gpu_types()],
                    steps_done: state.steps_done,
                    remaining_steps: (job.total_steps - state.steps_done).max(0.0),
                    attained_gpu_seconds: state.attained_gpu_seconds,
                    attained_seconds: state.attained_seconds,
                    running: state.run.as_ref().map(|r| Running {
                        gpu_type: r.gpu_type,
                        gpus: &r.gpus,
                    }),
                    queued_since: state.queued_since,
                    last_run_seconds: state.last_run_seconds,
                    preemptions: state.record.preemptions,
                }
            })
            .collect();
        let input = RoundInput {
            now,
            round_length: self.config.round_length,
            cluster,
            capacity: &self.capacity,
            jobs: &views,
            jobs_changed: std::mem::take(&mut self.jobs_changed),
            type_order: self.type_order.order(),
            model: &*self.model,
        };
        match policy.allocate(&input) {
            Allocation::Grants(grants) => {
                self.time_shared = false;
                grants
            }
            Allocation::TimeShares(shares) => {
                self.time_shared = true;
                self.mechanism.grants(&shares, &input)
            }
        }
    }
}

/// What an engine leaves at the end of a run.
pub struct EngineTotals {
    pub records: Vec<JobRecord>,
    pub utilization: Vec<(f64, u32)>,
    pub busy_gpu_seconds: f64,
}

/// The record of a job that has not run yet.
pub fn new_record(job: &Job, job_type: &str, gpu_types: usize) -> JobRecord {
    JobRecord {
        id: job.id,
        job_type: job_type.to_owned(),
        gpus: job.gpus,
        arrival: job.arrival,
        first_start: None,
        finish: None,
        gpu_seconds: vec![0.0; gpu_types],
        preemptions: 0,
        migrations: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Job type 0 runs 3x faster on GPU type 1; job type 1 twice as fast on GPU type 0.
    struct TwoKinds;

    impl ThroughputModel for TwoKinds {
        fn steps_per_second(&self, job: &Job, gpu_type: GpuTypeId, _gpus: u32) -> Option<f64> {
            let rates = [[1.0, 3.0], [2.0, 1.0]];
            Some(rates[job.job_type.0 as usize][gpu_type.0 as usize])
        }
    }

    fn engine() -> Engine<'static> {
        let cluster = Arc::new(Cluster::parse_spec("a=2,b=2", 1).unwrap());
        let mut engine = Engine::new(
            cluster,
            Arc::new(TwoKinds),
            SimConfig::default(),
            Trace::default(),
            0.0,
        );
        for name in ["fast-on-b", "fast-on-a"] {
            engine.intern_job_type(name);
        }
        engine
    }

    fn job(id: u32, job_type: u32) -> Job {
        Job {
            id: JobId(id),
            arrival: 0.0,
            job_type: JobTypeId(job_type),
            gpus: 1,
            total_steps: 100.0,
            weight: 1.0,
            tenant: TenantId(0),
        }
    }

    #[test]
    fn ended_jobs_remembered_at_recovery_give_the_type_order_their_admission_gave() {
        // Before the restart: two jobs that prefer type 1 (both ended), then one that prefers type 0.
        let mut before = engine();
        for (id, kind) in [(0, 0), (1, 0), (2, 1)] {
            before.submit(job(id, kind), 0.0).unwrap();
        }
        assert_eq!(before.type_order(), [GpuTypeId(1), GpuTypeId(0)]);
        // After it, only job 2 is submitted again: without the ended ones the order would flip.
        let mut recovered = engine();
        recovered.submit(job(2, 1), 0.0).unwrap();
        assert_eq!(recovered.type_order(), [GpuTypeId(0), GpuTypeId(1)]);
        let mut remembered = engine();
        for id in [0, 1] {
            remembered.remember_ended(&job(id, 0));
        }
        remembered.submit(job(2, 1), 0.0).unwrap();
        assert_eq!(remembered.type_order(), before.type_order());
    }
}
