//! What the control plane counts, for `/metrics` and the scale benchmark.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::lifecycle::Phase;

/// Round latencies kept for percentiles.
const LATENCY_WINDOW: usize = 4096;

/// Upper bounds (seconds) of the round-latency histogram's buckets.
pub const LATENCY_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0];

#[derive(Debug, Default)]
pub struct Stats {
    pub submitted: u64,
    pub finished: u64,
    pub cancelled: u64,
    pub failed: u64,
    pub starts: u64,
    pub preemptions: u64,
    pub migrations: u64,
    pub resizes: u64,
    /// Seconds restarts (resizes and moves) took, from the decision to the first step after.
    pub restart_seconds: f64,
    pub rounds: u64,
    /// Decisions that broke a ledger invariant (always 0 unless there is a bug).
    pub violations: u64,
    pub recovery_seconds: f64,
    latency_sum: f64,
    latency_counts: [u64; LATENCY_BUCKETS.len()],
    recent: VecDeque<f64>,
}

/// A copy of the counters and gauges at one moment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsSnapshot {
    pub queued_jobs: usize,
    pub running_jobs: usize,
    pub busy_gpus: u32,
    pub gpus: u32,
    pub submitted: u64,
    pub finished: u64,
    pub cancelled: u64,
    pub failed: u64,
    pub starts: u64,
    pub preemptions: u64,
    pub migrations: u64,
    pub resizes: u64,
    pub restart_seconds: f64,
    pub rounds: u64,
    pub violations: u64,
    pub recovery_seconds: f64,
    pub round_latency_sum: f64,
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    pub round_latency_buckets: Vec<u64>,
    /// Over the last rounds (up to 4,096).
    pub round_latency_p50: f64,
    pub round_latency_p99: f64,
}

impl Stats {
    pub fn note_round(&mut self, took: Duration) {
        let seconds = took.as_secs_f64();
        self.rounds += 1;
        self.latency_sum += seconds;
        if let Some(k) = LATENCY_BUCKETS.iter().position(|&b| seconds <= b) {
            self.latency_counts[k] += 1;
        }
        if self.recent.len() == LATENCY_WINDOW {
            self.recent.pop_front();
        }
        self.recent.push_back(seconds);
    }

    pub fn note_changes(&mut self, preempted: usize, moved: usize, resized: usize, started: usize) {
        self.preemptions += preempted as u64;
        self.migrations += moved as u64;
        self.resizes += resized as u64;
        self.starts += started as u64;
    }

    pub fn note_restart(&mut self, seconds: f64) {
        self.restart_seconds += seconds;
    }

    pub fn note_end(&mut self, phase: Phase) {
        match phase {
            Phase::Finished => self.finished += 1,
            Phase::Cancelled => self.cancelled += 1,
            Phase::Failed => self.failed += 1,
            _ => {}
        }
    }

    pub fn snapshot(
        &self,
        active: usize,
        running: usize,
        busy_gpus: u32,
        gpus: u32,
    ) -> StatsSnapshot {
        let mut sorted: Vec<f64> = self.recent.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let percentile = |p: f64| gangway_core::metrics::percentile(&sorted, p);
        let mut cumulative = 0;
        StatsSnapshot {
            queued_jobs: active.saturating_sub(running),
            running_jobs: running,
            busy_gpus,
            gpus,
            submitted: self.submitted,
            finished: self.finished,
            cancelled: self.cancelled,
            failed: self.failed,
            starts: self.starts,
            preemptions: self.preemptions,
            migrations: self.migrations,
            resizes: self.resizes,
            restart_seconds: self.restart_seconds,
            rounds: self.rounds,
            violations: self.violations,
            recovery_seconds: self.recovery_seconds,
            round_latency_sum: self.latency_sum,
            round_latency_buckets: self
                .latency_counts
                .iter()
                .map(|c| {
                    cumulative += c;
                    cumulative
                })
                .collect(),
            round_latency_p50: percentile(50.0),
            round_latency_p99: percentile(99.0),
        }
    }
}
