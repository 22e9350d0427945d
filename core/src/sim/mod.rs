//! The trace-driven discrete-event simulator.
//!
//! Virtual time advances from event to event: arrivals (read in order from the trace), completions (a
//! priority queue), and round boundaries every `round_length` seconds. At a round boundary the policy
//! decides, the simulator preempts, migrates and places, and each running job's completion time is
//! pushed as an event. Nothing scans the whole trace per event: a scheduling pass visits the running
//! jobs, and the waiting ones only as far as its policy needs (all of them, or, for a policy that keeps
//! its own queue, the head it can start).
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

pub mod alone;
pub mod builder;

pub use builder::{PolicyRun, Report, SimulationBuilder, SimulationError};

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::engine::{Change, Engine, EngineConfig, new_record};
use crate::job::{JobId, Trace};
use crate::metrics::{self, JobRecord, RunTotals, Summary, Window};
use crate::placement::Placer;
use crate::policy::Policy;
use crate::throughput::ThroughputModel;

/// Simulator settings: the engine's, and what only a simulation has.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    /// The round length, costs and scheduling triggers, as the live plane takes them.
    #[serde(flatten)]
    pub engine: EngineConfig,
    /// Seeds every random choice of the run (policies and placers are built with it).
    pub seed: u64,
    /// Keep every start and stop in [`SimResult::changes`] (to compare runs decision by decision).
    #[serde(default)]
    pub log_changes: bool,
}

/// Everything a run produces.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimResult {
    /// Every job's record, in the trace's order: those that never arrived (a stalled run)
    /// unfinished.
    pub records: Vec<JobRecord>,
    /// (time, busy GPUs) whenever the number of busy GPUs changes.
    pub utilization: Vec<(f64, u32)>,
    /// The cluster's GPU type names, in the order of [`JobRecord::gpu_seconds`].
    pub gpu_types: Vec<String>,
    /// The cluster's GPUs, of every type.
    pub capacity_gpus: u32,
    /// GPU-seconds for which GPUs were held by runs (a packed pair's GPUs count once).
    pub busy_gpu_seconds: f64,
    /// CPU-seconds and GB-seconds of memory allotted to runs.
    pub allotted_seconds: (f64, f64),
    /// The cluster's CPUs and GB of memory, all nodes together.
    pub capacity_resources: (f64, f64),
    /// Simulated seconds from the first arrival to the last event.
    pub span_seconds: f64,
    /// Wall-clock seconds the run took.
    pub wall_seconds: f64,
    /// The jobs the summary measures.
    pub window: Window,
    /// Jobs whose gang is larger than any GPU type's capacity; they never run.
    pub unschedulable: Vec<JobId>,
    /// Round boundaries passed, those skipped between events by a policy that time does not move
    /// included.
    pub rounds: u64,
    /// Every start and stop with its time, when [`SimConfig::log_changes`] is on.
    pub changes: Vec<(f64, Change)>,
}

impl SimResult {
    /// The jobs that never finished, leaving out those too large for the cluster (reported apart in
    /// [`SimResult::unschedulable`]). The simulator runs until every job finishes, so any other
    /// unfinished job means the policy stalled.
    pub fn unfinished(&self) -> Vec<JobId> {
        self.records
            .iter()
            .filter(|r| r.finish.is_none() && !self.unschedulable.contains(&r.id))
            .map(|r| r.id)
            .collect()
    }

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
        self.summary_against(policy, iso_jct.as_deref())
    }

    /// Summarizes the run over its window, with rho against each record's JCT in `reference` (in
    /// record order) where given.
    pub fn summary_against(&self, policy: &str, reference: Option<&[Option<f64>]>) -> Summary {
        metrics::summarize(
            policy,
            &self.records,
            &self.window,
            reference,
            &RunTotals {
                busy_gpu_seconds: self.busy_gpu_seconds,
                allotted_seconds: self.allotted_seconds,
                capacity_resources: self.capacity_resources,
                capacity_gpus: self.capacity_gpus,
                span_seconds: self.span_seconds,
                wall_seconds: self.wall_seconds,
            },
        )
    }
}

/// Scheduling passes in a row in which no job progressed (every GPU idle with jobs waiting and no
/// arrivals left, or every run still in its restart delay), before a run is declared stalled.
const STALL_ROUNDS: u32 = 1000;

/// Progress reports: (jobs finished, jobs in the trace).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// One simulation: a trace on a cluster under a throughput model.
pub struct Simulation<'a> {
    /// The jobs, in arrival order.
    pub trace: &'a Trace,
    /// The cluster they run on.
    pub cluster: &'a Cluster,
    /// How fast each job runs on an allocation.
    pub model: &'a dyn ThroughputModel,
    /// The engine's settings, the seed, and whether to log every change.
    pub config: SimConfig,
    /// The jobs its summary measures (all, by default).
    pub window: Window,
    /// Set by another thread to stop the run at its next event (Ctrl-C in a front end); what ran
    /// by then is its result. `None`: it runs to its end.
    pub stop: Option<Arc<AtomicBool>>,
}

impl<'a> Simulation<'a> {
    /// `trace` on `cluster` under `model`, with the default settings (Gavel's 360 s rounds, no
    /// costs, seed 0) and every job measured.
    pub fn new(trace: &'a Trace, cluster: &'a Cluster, model: &'a dyn ThroughputModel) -> Self {
        Simulation {
            trace,
            cluster,
            model,
            config: SimConfig::default(),
            window: Window::default(),
            stop: None,
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
        let start = self.trace.jobs.first().map_or(0.0, |j| j.arrival);
        let config = &self.config.engine;
        let mut engine = Engine::new(
            Arc::new(self.cluster.clone()),
            Arc::new(self.model),
            config.clone(),
            self.trace.names.clone(),
            start,
        );
        let mut changes = Vec::new();
        if self.config.log_changes {
            engine.record_changes();
        }
        let round = config.round_length.max(1e-6);
        let trace_jobs = &self.trace.jobs;
        let mut unschedulable = Vec::new();
        let mut next_arrival = 0usize;
        let mut now = start;
        let mut next_round = now;
        let mut rounds = 0u64;
        let mut idle_rounds = 0u32;
        // When the previous scheduling pass ran.
        let mut last_pass = f64::NEG_INFINITY;
        let mut last_event = now;
        let stopped = || (self.stop.as_ref()).is_some_and(|s| s.load(Ordering::Relaxed));
        loop {
            if stopped() {
                break;
            }
            // The next event: a completion, an arrival, or the round boundary.
            let arrival_at = trace_jobs.get(next_arrival).map(|j| j.arrival);
            let completion_at = engine.peek_completion();
            if engine.is_idle() && completion_at.is_none() {
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
            while engine.complete_due(now).is_some() {
                changes.extend(engine.take_changes().into_iter().map(|c| (now, c)));
                progress(engine.finished_jobs(), trace_jobs.len());
                pass |= config.schedule_on_completion;
            }
            while next_arrival < trace_jobs.len() && trace_jobs[next_arrival].arrival <= now {
                let job = &trace_jobs[next_arrival];
                next_arrival += 1;
                match engine.submit(job.clone(), job.arrival) {
                    Ok(()) => pass |= config.schedule_on_arrival,
                    Err(_) => unschedulable.push(job.id),
                }
            }
            if now >= next_round {
                pass = true;
                rounds += 1;
                next_round = now + round;
                engine.advance_horizon(next_round);
            }
            if pass && !engine.is_idle() {
                // Progress now, or since the previous pass (jobs that ran and finished in between).
                let progressed = engine.progressing(now) || engine.last_progress() > last_pass;
                last_pass = now;
                engine.schedule(policy, placer, now);
                changes.extend(engine.take_changes().into_iter().map(|c| (now, c)));
                if config.audit {
                    engine.audit();
                }
                // A policy that leaves every GPU idle with jobs waiting and nothing left to arrive has
                // stalled, and so has one under which no job progresses, round after round (it restarts
                // jobs faster than their restart delays let them run); stop rather than spin, and report
                // those jobs unfinished.
                let stalled =
                    (engine.busy_gpus() == 0 && next_arrival == trace_jobs.len()) || !progressed;
                idle_rounds = if stalled { idle_rounds + 1 } else { 0 };
                // A policy that time alone does not move decides as it just did until the next event:
                // skip to the round that follows it, so that run time depends on events, not on time.
                let steady = !policy.changes_with_time() && !placer.changes_with_time();
                if steady && !engine.is_idle() {
                    let next_event = trace_jobs
                        .get(next_arrival)
                        .map_or(f64::INFINITY, |j| j.arrival)
                        .min(engine.next_finish());
                    if next_event.is_infinite() {
                        idle_rounds = STALL_ROUNDS + 1;
                    } else if next_event > next_round {
                        let skipped = ((next_event - next_round) / round).ceil();
                        next_round += skipped * round;
                        rounds += skipped as u64;
                        engine.advance_horizon(next_round);
                    }
                }
                if idle_rounds > STALL_ROUNDS {
                    tracing::warn!(
                        jobs = engine.active_jobs(),
                        "policy stalled: for {STALL_ROUNDS} scheduling passes no job progressed (GPUs idle while jobs wait, or jobs restarted faster than they run)"
                    );
                    break;
                }
            }
        }
        let totals = engine.into_totals(now);
        // Jobs that never arrived (the run stalled first) keep an unfinished record.
        let types = self.cluster.num_gpu_types();
        let mut records = totals.records;
        records.extend(
            trace_jobs[next_arrival..]
                .iter()
                .map(|job| new_record(job, self.trace.job_type_name(job.job_type).into(), types)),
        );
        SimResult {
            records,
            utilization: totals.utilization,
            gpu_types: self.cluster.gpu_types().to_vec(),
            capacity_gpus: self.cluster.num_gpus(),
            busy_gpu_seconds: totals.busy_gpu_seconds,
            allotted_seconds: totals.allotted_seconds,
            capacity_resources: self.cluster.nodes().iter().fold((0.0, 0.0), |(c, m), n| {
                (c + f64::from(n.cpus), m + n.memory_gb)
            }),
            span_seconds: last_event - start,
            wall_seconds: wall.elapsed().as_secs_f64(),
            window: self.window.clone(),
            unschedulable,
            rounds,
            changes,
        }
    }
}
