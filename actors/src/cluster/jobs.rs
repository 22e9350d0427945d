//! A job as the control plane holds it: its phase (one state machine: every move is checked here),
//! its leased gang, and its restart and
//! resize bookkeeping.

use std::sync::Arc;

use gangway_core::job::JobId;

use super::carry::Gang;
use super::messages::{GpuCount, Resize, RestartPhases};
use crate::executor::Measured;
use crate::job::JobEvent;
use crate::ledger::Record;
use crate::lifecycle::{IllegalTransition, Phase};

/// One job that has not ended (ended ones are forgotten: the ledger and the views keep how they
/// ended).
pub(super) struct JobHandle {
    job: JobId,
    phase: Phase,
    /// Its GPUs' lease, while it holds one.
    pub gang: Option<Gang>,
    /// Times its workers crashed (a restart keeps the count: it is journaled).
    pub crashes: u32,
    /// What its workers last measured of their training.
    pub measured: Option<Measured>,
    pub restarts: Restarts,
    /// The global batch its policy chose last (at its latest launch, or retuned since), when it
    /// adapts its batch.
    pub batch: Option<u32>,
    /// The GPUs it held over time (`GET /gpu-history`), shared with the views that show it (copied
    /// only when it changes while one does).
    pub gpu_history: Arc<Vec<GpuCount>>,
    /// The count its GPU history ends on (none while it is empty).
    gpus_noted: Option<u32>,
    /// Its starts that failed since it last started, until a start succeeds.
    pub start_failed: Option<FailedStarts>,
}

/// A job's starts that failed in a row: why the last did (shown with why it waits), how many of
/// them were its own, which set how long it pauses before the next try, and when the last of those
/// failed, which the pause counts from.
#[derive(Clone, Debug)]
pub(super) struct FailedStarts {
    pub why: Box<str>,
    pub count: u32,
    pub at: f64,
}

impl FailedStarts {
    /// The pause after the first failed start, in seconds: about a round, so that a failure that
    /// passes costs little.
    pub const FIRST_PAUSE: f64 = 15.0;
    /// The longest pause, in seconds: a job whose launches fail for good (its user's file system
    /// does not answer, say) tries about four times an hour, and leaves its GPUs to others between.
    pub const LONGEST_PAUSE: f64 = 900.0;
    /// Failed starts in a row after which the job fails, three and a half hours of pauses after
    /// its first: a start that fails for that long is not passing trouble, and each try (granted
    /// first by a policy such as least attained service) preempts a running job for nothing.
    pub const MOST_IN_A_ROW: u32 = 20;

    /// One more failed start, at `at` for `why`, after `earlier` ones.
    pub fn after(earlier: Option<FailedStarts>, why: &str, at: f64) -> Self {
        FailedStarts {
            why: why.into(),
            count: earlier.map_or(0, |f| f.count).saturating_add(1),
            at,
        }
    }

    /// `count` failed starts in a row, the last of its own at `at`, the last for `why`, as the
    /// journal kept them.
    pub fn recorded(count: u32, why: &str, at: f64) -> Self {
        FailedStarts {
            why: why.into(),
            count,
            at,
        }
    }

    /// The record that ends `job`'s count at `at`: it started (or was found running).
    pub fn ended(job: JobId, at: f64) -> Record {
        Record::StartFailed {
            job,
            at,
            count: 0,
            why: String::new(),
        }
    }

    /// The journal's record of it, for `job`.
    pub fn record(&self, job: JobId) -> Record {
        Record::StartFailed {
            job,
            at: self.at,
            count: self.count,
            why: self.why.to_string(),
        }
    }

    /// A failed start, for `why`, that was not the job's own (the cluster's, or put off by the
    /// executor): shown, not counted.
    pub fn not_counted(earlier: Option<FailedStarts>, why: &str) -> Self {
        let (count, at) = earlier.map_or((0, f64::NEG_INFINITY), |f| (f.count, f.at));
        FailedStarts {
            why: why.into(),
            count,
            at,
        }
    }

    /// How long the job pauses before its next try: doubled at each failure in a row.
    pub fn pause(&self) -> f64 {
        let doublings = self.count.saturating_sub(1).min(16) as i32;
        (Self::FIRST_PAUSE * 2f64.powi(doublings)).min(Self::LONGEST_PAUSE)
    }
}

impl JobHandle {
    /// Job `job`, in `phase` (a new job, or one recovered from the journal).
    pub fn new(job: JobId, phase: Phase) -> Self {
        JobHandle {
            job,
            phase,
            gang: None,
            crashes: 0,
            measured: None,
            restarts: Restarts::default(),
            batch: None,
            gpu_history: Arc::default(),
            gpus_noted: None,
            start_failed: None,
        }
    }

    /// From `at` on, it holds `gpus` GPUs (see [`GpuCount::note`]). The history is copied (when a
    /// view shares it) only if this changes it: not for a run moved to as many GPUs.
    pub fn note_gpus(&mut self, at: f64, gpus: u32) {
        // Asked of the handle, not of the history, which a move would otherwise read from memory
        // no other step of it touches.
        if self.gpus_noted == Some(gpus) {
            return;
        }
        let history = Arc::make_mut(&mut self.gpu_history);
        GpuCount::note(history, at, gpus);
        self.gpus_noted = history.last().map(|last| last.gpus);
    }

    /// Its phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Moves the job to `to` at control-plane time `at`, if the state machine allows it; returns
    /// the move, to publish.
    pub fn advance(&mut self, to: Phase, at: f64) -> Result<JobEvent, IllegalTransition> {
        let from = self.phase;
        self.phase.advance(to)?;
        tracing::debug!(job = self.job.0, %from, %to, at, "job moved");
        Ok(JobEvent {
            job: self.job,
            from,
            to,
            at,
        })
    }
}

/// A job's restarts (resizes and moves) since this control plane started.
#[derive(Default)]
pub(super) struct Restarts {
    /// Starts on another number of GPUs than its last run's (resized at once, or preempted and
    /// resumed), and the last one.
    pub resizes: u32,
    pub last_resize: Option<Resize>,
    /// The GPUs its last run held.
    pub last_size: Option<u32>,
    /// While one is under way: when it was decided, and once carried out, when its old workers had
    /// exited and when its new ones were launched.
    since: Option<f64>,
    marks: Option<(f64, f64)>,
    /// Seconds the last one took, from the decision to the first step after it, and where.
    pub last_seconds: Option<f64>,
    pub last_phases: Option<RestartPhases>,
}

impl Restarts {
    /// A stop decided at `now`: a restart (`restarts`) starts its clock; any other stop abandons
    /// one under way.
    pub fn stopped(&mut self, restarts: bool, now: f64) {
        self.since = restarts.then_some(now);
        self.marks = None;
    }

    /// A restart that did not start is not one.
    pub fn abandon(&mut self) {
        self.since = None;
        self.marks = None;
    }

    /// The restart under way was carried out: its old workers had all exited at `stopped`, its new
    /// ones were launched at `launched`.
    pub fn carried(&mut self, stopped: f64, launched: f64) {
        if self.since.is_some() {
            self.marks = Some((stopped, launched));
        }
    }

    /// The job made progress at `now`: the restart under way, if any, is over. Returns the seconds
    /// it took, from the decision to this first step.
    pub fn progressed(&mut self, now: f64) -> Option<f64> {
        let since = self.since.take()?;
        let seconds = (now - since).max(0.0);
        self.last_seconds = Some(seconds);
        self.last_phases = self.marks.take().map(|(stopped, launched)| RestartPhases {
            stop: (stopped - since).max(0.0),
            launch: (launched - stopped).max(0.0),
            first_step: (now - launched).max(0.0),
        });
        Some(seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_moves_only_where_the_state_machine_allows_and_says_so() {
        let mut job = JobHandle::new(JobId(7), Phase::Pending);
        let mut moves = Vec::new();
        for to in [Phase::Placing, Phase::Starting, Phase::Running] {
            moves.push(job.advance(to, 1.0).unwrap());
        }
        let pairs: Vec<(Phase, Phase)> = moves.iter().map(|m| (m.from, m.to)).collect();
        assert_eq!(
            pairs,
            [
                (Phase::Pending, Phase::Placing),
                (Phase::Placing, Phase::Starting),
                (Phase::Starting, Phase::Running),
            ]
        );
        assert!(moves.iter().all(|m| m.job == JobId(7) && m.at == 1.0));
        // Running cannot go back to Placing: refused, and the job stays Running.
        assert!(job.advance(Phase::Placing, 2.0).is_err());
        assert_eq!(job.phase(), Phase::Running);
    }

    /// Each failure in a row doubles the pause, up to the longest.
    #[test]
    fn the_pause_doubles_with_each_failure_in_a_row_up_to_the_longest() {
        let mut failed = None;
        let mut pauses = Vec::new();
        for _ in 0..9 {
            let now = FailedStarts::after(failed.take(), "no answer", 0.0);
            pauses.push(now.pause());
            failed = Some(now);
        }
        assert_eq!(
            pauses,
            [15.0, 30.0, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0, 900.0]
        );
        let many = FailedStarts::recorded(u32::MAX, "", 0.0);
        assert_eq!(FailedStarts::after(Some(many), "again", 0.0).pause(), 900.0);
        // A job gives up after its pauses between its tries add up to a few hours.
        let given_up_after: f64 = (1..FailedStarts::MOST_IN_A_ROW)
            .map(|count| FailedStarts::recorded(count, "", 0.0).pause())
            .sum();
        assert_eq!(given_up_after, 945.0 + 13.0 * 900.0);
    }
}
