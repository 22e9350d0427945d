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

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::engine::{Change, Engine, new_record};
use crate::job::{JobId, Trace};
use crate::metrics::{self, JobRecord, RunTotals, Summary, Window};
use crate::policy::Policy;
use crate::throughput::ThroughputModel;

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
    /// Keep every start and stop in [`SimResult::changes`] (to compare runs decision by decision).
    #[serde(default)]
    pub log_changes: bool,
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
            log_changes: false,
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
    /// Every start and stop with its time, when [`SimConfig::log_changes`] is on.
    pub changes: Vec<(f64, Change)>,
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
        let start = self.trace.jobs.first().map_or(0.0, |j| j.arrival);
        let mut world = Engine::new(
            Arc::new(self.cluster.clone()),
            Arc::new(self.model),
            self.config.clone(),
            self.trace.clone_names(),
            start,
        );
        let mut changes = Vec::new();
        if self.config.log_changes {
            world.record_changes();
        }
        let round = self.config.round_length.max(1e-6);
        let trace_jobs = &self.trace.jobs;
        let mut unschedulable = Vec::new();
        let mut next_arrival = 0usize;
        let mut now = start;
        let mut next_round = now;
        let mut rounds = 0u64;
        let mut idle_rounds = 0u32;
        let mut last_event = now;
        loop {
            // The next event: a completion, an arrival, or the round boundary.
            let arrival_at = trace_jobs.get(next_arrival).map(|j| j.arrival);
            let completion_at = world.peek_completion();
            if world.is_idle() && completion_at.is_none() {
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
            while world.complete_due(now).is_some() {
                changes.extend(world.take_changes().into_iter().map(|c| (now, c)));
                progress(world.finished_jobs(), trace_jobs.len());
                pass |= self.config.schedule_on_completion;
            }
            while next_arrival < trace_jobs.len() && trace_jobs[next_arrival].arrival <= now {
                let job = &trace_jobs[next_arrival];
                next_arrival += 1;
                match world.submit(job.clone(), job.arrival) {
                    Ok(()) => pass |= self.config.schedule_on_arrival,
                    Err(_) => unschedulable.push(job.id),
                }
            }
            if now >= next_round {
                pass = true;
                rounds += 1;
                next_round = now + round;
                world.advance_horizon(next_round);
            }
            if pass && !world.is_idle() {
                world.schedule(policy, placer, now);
                changes.extend(world.take_changes().into_iter().map(|c| (now, c)));
                if self.config.audit {
                    world.audit();
                }
                // A policy that leaves every GPU idle with jobs waiting and nothing left to arrive has
                // stalled; stop rather than spin, and report those jobs unfinished.
                let stalled = world.busy_gpus() == 0 && next_arrival == trace_jobs.len();
                idle_rounds = if stalled { idle_rounds + 1 } else { 0 };
                if idle_rounds > STALL_ROUNDS {
                    tracing::warn!(
                        jobs = world.active_jobs(),
                        "policy stalled: jobs wait while every GPU is idle"
                    );
                    break;
                }
            }
        }
        let totals = world.into_totals(now);
        // Jobs that never arrived (the run stalled first) keep an unfinished record.
        let types = self.cluster.num_gpu_types();
        let mut records = totals.records;
        records.extend(
            trace_jobs[next_arrival..]
                .iter()
                .map(|job| new_record(job, self.trace.job_type_name(job.job_type), types)),
        );
        SimResult {
            records,
            utilization: totals.utilization,
            gpu_types: self.cluster.gpu_types().to_vec(),
            capacity_gpus: self.cluster.num_gpus(),
            busy_gpu_seconds: totals.busy_gpu_seconds,
            span_seconds: last_event - start,
            wall_seconds: wall.elapsed().as_secs_f64(),
            window: self.window.clone(),
            unschedulable,
            rounds,
            changes,
        }
    }
}
