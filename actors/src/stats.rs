//! What the control plane counts, for `/metrics` and the scale benchmark.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::lifecycle::Phase;

/// Latencies kept for percentiles.
const LATENCY_WINDOW: usize = 4096;

/// Upper bounds (seconds) of the buckets of the rounds' histograms (their latency, their solve).
pub const LATENCY_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0];

/// The control plane's counters since it started (they are not journaled; after a restart, the ended
/// jobs the ledger remembers are counted again), and its recent round latencies.
#[derive(Debug, Default)]
pub struct Stats {
    /// What it counts, as a snapshot shows them.
    pub counters: Counters,
    /// Each round, from the start of its solve until its changes were carried out.
    round_latency: Latencies,
    /// Each round's solve: the policy and the placer, on their own thread.
    round_solve: Latencies,
}

/// The control plane's counters since it started (not journaled: see [`Stats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Counters {
    /// Jobs submitted.
    pub submitted: u64,
    /// Jobs that finished.
    pub finished: u64,
    /// Jobs cancelled.
    pub cancelled: u64,
    /// Jobs that failed.
    pub failed: u64,
    /// Starts: jobs placed and launched, first times and restarts alike.
    pub starts: u64,
    /// Jobs stopped to wait for GPUs again.
    pub preemptions: u64,
    /// Jobs stopped to move to other GPUs.
    pub migrations: u64,
    /// Jobs stopped to run at another size.
    pub resizes: u64,
    /// Seconds restarts (resizes and moves) took, from the decision to the first step after.
    pub restart_seconds: f64,
    /// Scheduling rounds run (a round with no job to schedule is not counted).
    pub rounds: u64,
    /// Decisions that broke a ledger invariant (always 0 unless there is a bug).
    pub violations: u64,
    /// Phase moves the job state machine refused (always 0 unless there is a bug).
    pub illegal_transitions: u64,
    /// Views published for the readers.
    pub views_published: u64,
    /// Wall seconds the actor spent publishing them (not part of rounds' latency: after a round, or
    /// beside the carrying out of its changes).
    pub publish_seconds: f64,
    /// Wall seconds the last start took to recover the journal and rebuild its state.
    pub recovery_seconds: f64,
    /// Rounds whose policy failed (panicked): nothing of them was applied.
    pub round_failures: u64,
    /// Started gangs whose lease in a round's batch was refused and that leased GPU by GPU instead
    /// (not counting the gangs re-adopted at recovery). A take is refused where its GPU is still
    /// held (none, where every batch gives its stopped GPUs back before it takes them, as it
    /// should), part-way through another gang's ordered lease, or already known unhealthy to its
    /// actor before the cluster heard of it: a few are a race with health, many an ordering bug.
    pub leases_in_order: u64,
    /// The last such failure: the control plane's time, and the policy's message.
    pub last_round_failure: Option<RoundFailure>,
}

/// Durations in seconds: a histogram of every one, and the median and 99th percentile of the
/// latest ones.
#[derive(Debug, Default)]
struct Latencies {
    sum: f64,
    counts: [u64; LATENCY_BUCKETS.len()],
    /// The latest ones, oldest first.
    recent: VecDeque<f64>,
    /// The same, in order: kept so as they come and go (two moves of at most 32 KiB), rather than
    /// sorted anew for each (a copy and a sort of 4,096 on the actor's thread, twice a round), so
    /// that a snapshot reads its percentiles off it.
    sorted: Vec<f64>,
}

impl Latencies {
    fn note(&mut self, seconds: f64) {
        self.sum += seconds;
        if let Some(k) = LATENCY_BUCKETS.iter().position(|&b| seconds <= b) {
            self.counts[k] += 1;
        }
        let place = |sorted: &[f64], x: f64| sorted.partition_point(|&y| y.total_cmp(&x).is_lt());
        if self.recent.len() == LATENCY_WINDOW
            && let Some(oldest) = self.recent.pop_front()
        {
            let k = place(&self.sorted, oldest);
            self.sorted.remove(k);
        }
        self.recent.push_back(seconds);
        let k = place(&self.sorted, seconds);
        self.sorted.insert(k, seconds);
    }

    /// The median and 99th percentile of the latest ones.
    fn p50_p99(&self) -> (f64, f64) {
        let percentile = |p: f64| gangway_core::metrics::percentile(&self.sorted, p);
        (percentile(50.0), percentile(99.0))
    }

    /// The histogram's counts, cumulative (each bucket counts those at or below its bound).
    fn cumulative(&self) -> Vec<u64> {
        let mut below = 0;
        (self.counts.iter())
            .map(|c| {
                below += c;
                below
            })
            .collect()
    }
}

/// A round whose policy failed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RoundFailure {
    /// When, in the control plane's seconds.
    pub at: f64,
    /// The policy's panic message.
    pub message: String,
}

/// A copy of the counters and gauges at one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StatsSnapshot {
    /// Jobs not ended and not running (waiting, starting or stopping).
    pub queued_jobs: usize,
    /// Jobs whose workers run.
    pub running_jobs: usize,
    /// GPUs held by runs (a packed pair's GPUs count once).
    pub busy_gpus: u32,
    /// GPUs in the cluster, in service or not.
    pub gpus: u32,
    /// GPUs out of service: cordoned, unhealthy by their probe, or held by workers still stopping.
    pub gpus_out_of_service: u32,
    /// GPUs whose health is no longer checked: their probe failed and is not called again.
    pub gpus_unwatched: u32,
    /// Stops whose workers outlasted the executor's patience and go on in the background, their
    /// GPUs out of service until the workers are gone.
    pub stops_in_background: u32,
    /// The counters, as fields of the snapshot's own in JSON.
    #[serde(flatten)]
    pub counters: Counters,
    /// Wall seconds of every round, summed: each from the start of its solve until its changes
    /// were carried out.
    pub round_latency_sum: f64,
    /// Cumulative counts per bucket of [`LATENCY_BUCKETS`].
    pub round_latency_buckets: Vec<u64>,
    /// The median round latency, in seconds, over the last rounds (up to 4,096).
    pub round_latency_p50: f64,
    /// The 99th percentile round latency, in seconds, over the same rounds.
    pub round_latency_p99: f64,
    /// Wall seconds of every round's solve (the policy and the placer deciding), summed: the part
    /// of [`StatsSnapshot::round_latency_sum`] that is the policy's.
    pub round_solve_sum: f64,
    /// Cumulative counts of the solves per bucket of [`LATENCY_BUCKETS`].
    pub round_solve_buckets: Vec<u64>,
    /// The median solve, in seconds, over the last rounds (up to 4,096).
    pub round_solve_p50: f64,
    /// The 99th percentile solve, in seconds, over the same rounds.
    pub round_solve_p99: f64,
}

impl Stats {
    /// Counts a round that took `took`, from the start of its solve until its changes were carried
    /// out, of which its solve took `solve`. Both histograms count each round, as [`Counters::rounds`]
    /// does.
    pub fn note_round(&mut self, took: Duration, solve: Duration) {
        self.counters.rounds += 1;
        self.round_latency.note(took.as_secs_f64());
        self.round_solve.note(solve.as_secs_f64());
    }

    /// Counts a round whose policy failed at `at` with `message`.
    pub fn note_round_failure(&mut self, at: f64, message: &str) {
        self.counters.round_failures += 1;
        self.counters.last_round_failure = Some(RoundFailure {
            at,
            message: message.to_owned(),
        });
    }

    /// Counts a round's changes: jobs preempted, moved, resized and started.
    pub fn note_changes(&mut self, preempted: usize, moved: usize, resized: usize, started: usize) {
        self.counters.preemptions += preempted as u64;
        self.counters.migrations += moved as u64;
        self.counters.resizes += resized as u64;
        self.counters.starts += started as u64;
    }

    /// Adds a restart (a resize or a move) that took `seconds`, from the decision to its first step.
    pub fn note_restart(&mut self, seconds: f64) {
        self.counters.restart_seconds += seconds;
    }

    /// Counts a job that ended in `phase` (finished, cancelled or failed; other phases are ignored).
    pub fn note_end(&mut self, phase: Phase) {
        match phase {
            Phase::Finished => self.counters.finished += 1,
            Phase::Cancelled => self.counters.cancelled += 1,
            Phase::Failed => self.counters.failed += 1,
            _ => {}
        }
    }

    /// The counters, with the gauges the caller knows: `active` jobs (not ended), `running` ones,
    /// `busy_gpus` held of `gpus` (the GPUs out of service and unwatched at 0: the caller that knows
    /// them sets them).
    pub fn snapshot(
        &self,
        active: usize,
        running: usize,
        busy_gpus: u32,
        gpus: u32,
    ) -> StatsSnapshot {
        let (round_latency_p50, round_latency_p99) = self.round_latency.p50_p99();
        let (round_solve_p50, round_solve_p99) = self.round_solve.p50_p99();
        StatsSnapshot {
            queued_jobs: active.saturating_sub(running),
            running_jobs: running,
            busy_gpus,
            gpus,
            gpus_out_of_service: 0,
            stops_in_background: 0,
            gpus_unwatched: 0,
            counters: self.counters.clone(),
            round_latency_sum: self.round_latency.sum,
            round_latency_buckets: self.round_latency.cumulative(),
            round_latency_p50,
            round_latency_p99,
            round_solve_sum: self.round_solve.sum,
            round_solve_buckets: self.round_solve.cumulative(),
            round_solve_p50,
            round_solve_p99,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot's JSON (`/stats`) lists the counters beside the gauges, as fields of its own: the
    /// shape clients read did not change when the counters became a struct of their own.
    #[test]
    fn a_snapshots_counters_are_fields_of_its_own_json() {
        let mut stats = Stats::default();
        stats.counters.submitted = 3;
        stats.note_round_failure(1.5, "boom");
        let json = serde_json::to_value(stats.snapshot(2, 1, 4, 8)).unwrap();
        assert_eq!(json["submitted"], 3);
        assert_eq!(json["round_failures"], 1);
        assert_eq!(json["last_round_failure"]["message"], "boom");
        assert_eq!(json["queued_jobs"], 1);
        assert!(json.get("counters").is_none(), "{json}");
    }

    /// The percentiles kept as latencies come and go are those of the latest window, sorted anew.
    #[test]
    fn the_percentiles_are_those_of_the_latest_window() {
        let mut latencies = Latencies::default();
        let mut all = Vec::new();
        let mut x: u64 = 1;
        for n in 1..=3 * LATENCY_WINDOW {
            // Repeats among them, so that an evicted one has equals.
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let seconds = (x >> 54) as f64 / 1000.0;
            latencies.note(seconds);
            all.push(seconds);
            if n % 97 == 0 || n == LATENCY_WINDOW || n == LATENCY_WINDOW + 1 {
                let mut window = all[all.len().saturating_sub(LATENCY_WINDOW)..].to_vec();
                window.sort_by(f64::total_cmp);
                let percentile = |p| gangway_core::metrics::percentile(&window, p);
                assert_eq!(latencies.sorted, window, "after {n}");
                assert_eq!(latencies.p50_p99(), (percentile(50.0), percentile(99.0)));
            }
        }
        assert_eq!(latencies.recent.len(), LATENCY_WINDOW);
    }
}
