//! The trace-driven discrete-event simulator.
//!
//! Virtual time advances from event to event: arrivals (read in order from the trace), completions (a
//! priority queue), and round boundaries every `round_length` seconds. At a round boundary the policy
//! decides, the simulator preempts, migrates and places, and each running job's completion time is
//! pushed as an event. Nothing scans the whole trace per event: only active jobs are visited, once per
//! scheduling pass.
//!
//! Semantics (those of Gavel's simulator, where they matter for its published numbers):
//! - a job that arrives mid-round waits for the next boundary (unless `schedule_on_arrival`);
//! - a job that finishes mid-round finishes at its exact time, and its GPUs idle until the next boundary
//!   (unless `schedule_on_completion`);
//! - when nothing is active, time jumps to the next arrival and rounds restart from there.
//!
//! Costs: a preempted job pays `preempt_cost + restore_cost` seconds of no progress when it next starts
//! (the checkpoint is charged with the restore, so that GPU accounting stays per round); a job moved to
//! other GPUs between two consecutive rounds pays `migrate_cost`.

pub mod free;
pub mod placer;
pub mod topology_placer;

use std::collections::{BTreeSet, HashMap};

use rustc_hash::FxHashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, GpuSet, GpuTypeId};
use crate::job::{JobId, Trace};
use crate::metrics::{self, JobRecord, RunTotals, Summary, Window};
use crate::policy::timeshare::Mechanism;
use crate::policy::{Allocation, Grant, JobView, Policy, RoundInput, Running, Unit};
use crate::throughput::ThroughputModel;
use crate::throughput::locality::{default_sensitivity, locality_factor};

pub use free::FreeGpus;
pub use placer::{PackingPlacer, PlaceRequest, Placed, Placer};
pub use topology_placer::{Placement, TopologyPlacer};

/// Simulator settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// Seconds per round (Gavel: 360).
    pub round_length: f64,
    /// Seconds to checkpoint a preempted job.
    pub preempt_cost: f64,
    /// Seconds to restore a job from its checkpoint when it starts again.
    pub restore_cost: f64,
    /// Seconds lost when a running job moves to other GPUs.
    pub migrate_cost: f64,
    /// Run a scheduling pass when a job arrives, not only at round boundaries.
    pub schedule_on_arrival: bool,
    /// Run a scheduling pass when a job finishes, not only at round boundaries.
    pub schedule_on_completion: bool,
    /// Seeds every random choice (mechanism type order, random placers).
    pub seed: u64,
    /// Check the invariants after every scheduling pass and panic on a violation (for tests).
    #[serde(default)]
    pub audit: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            round_length: 360.0,
            preempt_cost: 0.0,
            restore_cost: 0.0,
            migrate_cost: 0.0,
            schedule_on_arrival: false,
            schedule_on_completion: false,
            seed: 0,
            audit: false,
        }
    }
}

/// Everything a run produces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimResult {
    pub records: Vec<JobRecord>,
    /// (time, busy GPUs) whenever the number of busy GPUs changes.
    pub utilization: Vec<(f64, u32)>,
    pub gpu_types: Vec<String>,
    pub capacity_gpus: u32,
    pub busy_gpu_seconds: f64,
    /// First arrival to last event.
    pub span_seconds: f64,
    pub wall_seconds: f64,
    pub window: Window,
    /// Jobs whose gang is larger than any GPU type's capacity; they never run.
    pub unschedulable: Vec<JobId>,
    pub rounds: u64,
}

impl SimResult {
    /// Summarizes the run over its window, with rho against `isolated` where given.
    pub fn summary(&self, policy: &str, isolated: Option<&SimResult>) -> Summary {
        let iso_jct: Option<Vec<Option<f64>>> = isolated.map(|iso| {
            let by_id: HashMap<JobId, Option<f64>> =
                iso.records.iter().map(|r| (r.id, r.jct())).collect();
            self.records
                .iter()
                .map(|r| by_id.get(&r.id).copied().flatten())
                .collect()
        });
        metrics::summarize(
            policy,
            &self.records,
            &self.window,
            iso_jct.as_deref(),
            &RunTotals {
                busy_gpu_seconds: self.busy_gpu_seconds,
                capacity_gpus: self.capacity_gpus,
                span_seconds: self.span_seconds,
                wall_seconds: self.wall_seconds,
            },
        )
    }
}

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

/// Scheduling passes with every GPU idle, jobs waiting and no arrivals left, before a run is declared stalled.
const STALL_ROUNDS: u32 = 1000;

/// Progress reports: (jobs finished, jobs in the trace).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// One simulation: a trace on a cluster under a throughput model.
pub struct Simulation<'a> {
    pub trace: &'a Trace,
    pub cluster: &'a Cluster,
    pub model: &'a dyn ThroughputModel,
    pub config: SimConfig,
    pub window: Window,
}

/// The mutable state of a run.
struct World<'a> {
    sim: &'a Simulation<'a>,
    /// rates[i * types + t]: steps/s of job i alone on its gang of type t (0 = cannot run).
    rates: Vec<f64>,
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
}

impl<'a> Simulation<'a> {
    pub fn new(trace: &'a Trace, cluster: &'a Cluster, model: &'a dyn ThroughputModel) -> Self {
        Simulation {
            trace,
            cluster,
            model,
            config: SimConfig::default(),
            window: Window::default(),
        }
    }

    /// Runs `policy` with `placer` to the end of the trace.
    pub fn run(
        &self,
        policy: &mut dyn Policy,
        placer: &mut dyn Placer,
        progress: Progress<'_>,
    ) -> SimResult {
        let wall = Instant::now();
        let mut world = World::new(self);
        let round = self.config.round_length.max(1e-6);
        let trace_jobs = &self.trace.jobs;
        let mut unschedulable = Vec::new();
        let mut next_arrival = 0usize;
        let mut now = trace_jobs.first().map_or(0.0, |j| j.arrival);
        let start = now;
        let mut next_round = now;
        let mut rounds = 0u64;
        let mut idle_rounds = 0u32;
        let mut last_event = now;
        loop {
            // The next event: a completion, an arrival, or the round boundary.
            let arrival_at = trace_jobs.get(next_arrival).map(|j| j.arrival);
            let completion_at = world.peek_completion();
            if world.active.is_empty() && completion_at.is_none() {
                match arrival_at {
                    // Idle: jump to the next arrival and restart rounds there.
                    Some(t) => next_round = next_round.max(t),
                    None => break,
                }
            }
            let t = [completion_at, arrival_at, Some(next_round)]
                .into_iter()
                .flatten()
                .fold(f64::INFINITY, f64::min);
            now = t;
            last_event = last_event.max(now);
            let mut pass = false;
            while let Some(i) = world.pop_completion_at(now) {
                world.complete(i, now);
                progress(world.finished, trace_jobs.len());
                pass |= self.config.schedule_on_completion;
            }
            while next_arrival < trace_jobs.len() && trace_jobs[next_arrival].arrival <= now {
                let i = next_arrival;
                next_arrival += 1;
                if world.can_ever_run(i) {
                    world.admit(i, trace_jobs[i].arrival);
                    pass |= self.config.schedule_on_arrival;
                } else {
                    unschedulable.push(trace_jobs[i].id);
                }
            }
            if now >= next_round {
                pass = true;
                rounds += 1;
                next_round = now + round;
                world.advance_horizon(next_round);
            }
            if pass && !world.active.is_empty() {
                world.schedule(policy, placer, now);
                if self.config.audit {
                    world.audit();
                }
                // A policy that leaves every GPU idle with jobs waiting and nothing left to arrive has
                // stalled; stop rather than spin, and report those jobs unfinished.
                let stalled = world.busy_gpus == 0 && next_arrival == trace_jobs.len();
                idle_rounds = if stalled { idle_rounds + 1 } else { 0 };
                if idle_rounds > STALL_ROUNDS {
                    tracing::warn!(
                        jobs = world.active.len(),
                        "policy stalled: jobs wait while every GPU is idle"
                    );
                    break;
                }
            }
        }
        world.note_busy(now);
        let records = world.jobs.into_iter().map(|j| j.record).collect();
        SimResult {
            records,
            utilization: world.utilization,
            gpu_types: self.cluster.gpu_types().to_vec(),
            capacity_gpus: self.cluster.num_gpus(),
            busy_gpu_seconds: world.busy_gpu_seconds,
            span_seconds: last_event - start,
            wall_seconds: wall.elapsed().as_secs_f64(),
            window: self.window.clone(),
            unschedulable,
            rounds,
        }
    }
}

impl<'a> World<'a> {
    fn new(sim: &'a Simulation<'a>) -> Self {
        let types = sim.cluster.num_gpu_types();
        let mut rates = Vec::with_capacity(sim.trace.jobs.len() * types);
        for job in &sim.trace.jobs {
            for t in 0..types {
                let r = sim
                    .model
                    .steps_per_second(job, GpuTypeId(t as u16), job.gpus);
                rates.push(r.filter(|r| r.is_finite() && *r > 0.0).unwrap_or(0.0));
            }
        }
        let jobs = sim
            .trace
            .jobs
            .iter()
            .map(|job| JobState {
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
                record: JobRecord {
                    id: job.id,
                    job_type: sim.trace.job_type_name(job.job_type).to_owned(),
                    gpus: job.gpus,
                    arrival: job.arrival,
                    first_start: None,
                    finish: None,
                    gpu_seconds: vec![0.0; types],
                    preemptions: 0,
                    migrations: 0,
                },
            })
            .collect();
        World {
            sim,
            rates,
            sensitivity: sim
                .trace
                .job_types
                .iter()
                .map(|t| default_sensitivity(t))
                .collect(),
            jobs,
            active: Vec::new(),
            index_of: sim
                .trace
                .jobs
                .iter()
                .enumerate()
                .map(|(i, j)| (j.id, i))
                .collect(),
            free: FreeGpus::new(sim.cluster),
            completions: BTreeSet::new(),
            horizon: f64::NEG_INFINITY,
            mechanism: Mechanism::new(types, sim.config.seed),
            time_shared: false,
            busy_gpus: 0,
            busy_gpu_seconds: 0.0,
            last_busy_change: sim.trace.jobs.first().map_or(0.0, |j| j.arrival),
            utilization: Vec::new(),
            finished: 0,
            jobs_changed: false,
        }
    }

    fn types(&self) -> usize {
        self.sim.cluster.num_gpu_types()
    }

    fn job_rates(&self, i: usize) -> &[f64] {
        let t = self.types();
        &self.rates[i * t..(i + 1) * t]
    }

    /// Job `i`'s rate alone on `gpus` GPUs of `gpu_type`: cached at the size it asked for, from the model
    /// at any other size (a policy that resizes jobs); 0 where it cannot run so.
    fn rate_at(&self, i: usize, gpu_type: GpuTypeId, gpus: u32) -> f64 {
        let job = &self.sim.trace.jobs[i];
        if gpus == job.gpus {
            return self.job_rates(i)[gpu_type.0 as usize];
        }
        self.sim
            .model
            .steps_per_second(job, gpu_type, gpus)
            .filter(|r| r.is_finite() && *r > 0.0)
            .unwrap_or(0.0)
    }

    /// A job can run if some type it has a rate on has room for its whole gang.
    fn can_ever_run(&self, i: usize) -> bool {
        let gpus = self.sim.trace.jobs[i].gpus;
        self.job_rates(i)
            .iter()
            .zip(self.sim.cluster.capacity())
            .any(|(r, &cap)| *r > 0.0 && cap >= gpus)
    }

    fn admit(&mut self, i: usize, now: f64) {
        self.jobs[i].queued_since = now;
        self.active.push(i);
        self.jobs_changed = true;
    }

    /// Moves the horizon to the next round boundary, adding the completions that now fall within it.
    fn advance_horizon(&mut self, horizon: f64) {
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

    fn peek_completion(&self) -> Option<f64> {
        self.completions
            .first()
            .map(|&(key, _)| f64::from_bits(key))
    }

    /// The job index of the earliest completion, if it is due by `now`.
    fn pop_completion_at(&mut self, now: f64) -> Option<usize> {
        match self.completions.first() {
            Some(&(key, i)) if f64::from_bits(key) <= now => Some(i),
            _ => None,
        }
    }

    /// Brings a running job's accounting up to `now`.
    fn settle(&mut self, i: usize, now: f64) {
        let cluster = self.sim.cluster;
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
        match run.partner {
            // The partner keeps the GPUs and runs on alone.
            Some(p) => self.run_alone(p, now),
            None => {
                self.note_busy(now);
                self.busy_gpus -= run.gpus.len() as u32;
                self.free.release(self.sim.cluster, &run.gpus);
            }
        }
        run
    }

    /// Job `i`'s partner left: from `now` on it runs alone on the GPUs, at its rate alone there.
    fn run_alone(&mut self, i: usize, now: f64) {
        self.settle(i, now);
        let id = self.sim.trace.jobs[i].id;
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
        self.reschedule_completion(i, progress_from);
    }

    /// Recomputes when job `i`'s run ends, progressing from `progress_from` at its current rate.
    fn reschedule_completion(&mut self, i: usize, progress_from: f64) {
        let remaining = (self.sim.trace.jobs[i].total_steps - self.jobs[i].steps_done).max(0.0);
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
        self.stop(i, now);
        let state = &mut self.jobs[i];
        state.steps_done = self.sim.trace.jobs[i].total_steps;
        state.record.finish = Some(now);
        self.active.retain(|&a| a != i);
        self.mechanism.forget(self.sim.trace.jobs[i].id);
        self.finished += 1;
        self.jobs_changed = true;
        self.note_utilization(now);
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
        self.free.take(self.sim.cluster, &placed.gpus);
        let id = |k: usize| self.sim.trace.jobs[k].id;
        match partner {
            None => {
                let rate = self.rate_at(i, gpu_type, placed.gpus.len() as u32);
                let unit = Unit::Job(id(i));
                self.begin_run(i, &placed, gpu_type, rate, None, Some(unit), now);
            }
            Some(p) => {
                let (a, b) = (&self.sim.trace.jobs[i], &self.sim.trace.jobs[p]);
                let (rate_a, rate_b) = self
                    .sim
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
        let job = &self.sim.trace.jobs[i];
        let locality = locality_factor(self.sensitivity[job.job_type.0 as usize], placed.score);
        let overhead = self.start_overhead(i, &placed.gpus);
        let cluster = self.sim.cluster;
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
                overhead += self.sim.config.migrate_cost;
            }
        }
        overhead
    }

    /// One scheduling pass at `now`: ask the policy, then preempt, migrate and place.
    fn schedule(&mut self, policy: &mut dyn Policy, placer: &mut dyn Placer, now: f64) {
        for k in 0..self.active.len() {
            self.settle(self.active[k], now);
        }
        let grants = self.decide(policy, now);
        let config = &self.sim.config;
        let cluster = self.sim.cluster;

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
            let partner = run.partner.map(|p| self.sim.trace.jobs[p].id);
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
                let job = &self.sim.trace.jobs[i];
                let request = PlaceRequest {
                    job,
                    gpu_type: g.gpu_type,
                    gpus: g.gpus,
                    previous: &self.jobs[i].last_gpus,
                    waited: (now - self.jobs[i].queued_since).max(0.0),
                    sensitivity: self.sensitivity[job.job_type.0 as usize],
                    consolidate: g.consolidate,
                };
                placer.place(cluster, &self.free, &request)
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
                    state.overhead_due += config.preempt_cost + config.restore_cost;
                }
                state.queued_since = now;
            }
        }
        self.note_utilization(now);
    }

    /// Moves job `i`, which keeps its GPUs but should sit on one server, onto one server when its gang
    /// runs spread over several and a server now has room (Gandiva's defragmenting migration).
    fn defragment(&mut self, i: usize, placer: &mut dyn Placer, now: f64) {
        let cluster = self.sim.cluster;
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
        let job = &self.sim.trace.jobs[i];
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
        let cluster = self.sim.cluster;
        let job = &self.sim.trace.jobs[i];
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
        let own_id = self.sim.trace.jobs[i].id;
        let reciprocal = state.grant.is_some_and(|pg| {
            pg.partner == Some(own_id) && pg.gpu_type == g.gpu_type && pg.gpus == g.gpus
        });
        let (a, b) = (&self.sim.trace.jobs[i], &self.sim.trace.jobs[p]);
        let runs = self
            .sim
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
    fn audit(&self) {
        let cluster = self.sim.cluster;
        let mut holder: Vec<Option<usize>> = vec![None; cluster.num_gpus() as usize];
        let mut held_per_type = vec![0u32; self.types()];
        for &i in &self.active {
            let Some(run) = &self.jobs[i].run else {
                continue;
            };
            let job = &self.sim.trace.jobs[i];
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
                        g.0, self.sim.trace.jobs[other].id, job.id
                    ),
                }
                assert!(!self.free.is_free(g), "GPU {} is held but marked free", g.0);
            }
        }
        for (t, &held) in held_per_type.iter().enumerate() {
            let capacity = cluster.capacity()[t];
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
        let cluster = self.sim.cluster;
        let views: Vec<JobView<'_>> = self
            .active
            .iter()
            .map(|&i| {
                let job = &self.sim.trace.jobs[i];
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
            round_length: self.sim.config.round_length,
            cluster,
            capacity: cluster.capacity(),
            jobs: &views,
            jobs_changed: std::mem::take(&mut self.jobs_changed),
            model: self.sim.model,
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
