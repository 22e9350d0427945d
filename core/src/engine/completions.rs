//! When runs finish: completions due within the current round, ordered by time.
//!
//! Only completions that fall before the next round boundary (the horizon) are indexed; runs that end
//! later are added when the horizon reaches them, so that jobs preempted or migrated every round (LAS)
//! cost no index updates.

use std::collections::BTreeSet;

use super::Engine;
use crate::job::JobId;

/// Orders non-negative times as integers, so that completions can live in a `BTreeSet` and be removed
/// when a run ends early (preemption, migration) instead of going stale.
fn time_key(t: f64) -> u64 {
    debug_assert!(t >= 0.0);
    t.max(0.0).to_bits()
}

/// Completions due by the horizon: (time key, job index).
#[derive(Debug)]
pub(super) struct CompletionIndex {
    due: BTreeSet<(u64, usize)>,
    /// The next round boundary: every run that finishes by then has its completion in the set.
    horizon: f64,
}

impl Default for CompletionIndex {
    fn default() -> Self {
        CompletionIndex {
            due: BTreeSet::new(),
            horizon: f64::NEG_INFINITY,
        }
    }
}

impl CompletionIndex {
    /// Indexes job `i`'s completion at `at` if it falls within the horizon; returns its key.
    fn insert(&mut self, at: f64, i: usize) -> Option<(u64, usize)> {
        (at <= self.horizon).then(|| {
            let key = (time_key(at), i);
            self.due.insert(key);
            key
        })
    }

    fn remove(&mut self, key: (u64, usize)) {
        self.due.remove(&key);
    }

    fn first(&self) -> Option<(f64, usize)> {
        self.due.first().map(|&(key, i)| (f64::from_bits(key), i))
    }
}

impl Engine<'_> {
    /// Moves the horizon to the next round boundary, adding the completions that now fall within it.
    pub fn advance_horizon(&mut self, horizon: f64) {
        self.completions.horizon = horizon;
        for i in self.running_now() {
            let state = &self.states[i];
            let Some(run) = &state.run else {
                continue;
            };
            if state.completion.is_some() {
                continue;
            }
            // A finish beyond the old horizon of a rate that changes with progress is predicted now.
            let finish = if state.finish_at.is_infinite() && run.until.is_finite() {
                let from = run.progress_from.max(run.settled_to);
                self.predict_finish(i, from, state.steps_done, horizon)
            } else {
                state.finish_at
            };
            let state = &mut self.states[i];
            state.finish_at = finish;
            state.completion = self.completions.insert(finish, i);
        }
    }

    /// When the earliest run finishes if nothing changes, indexed or not (infinite when none runs).
    pub fn next_finish(&self) -> f64 {
        self.running
            .iter()
            .filter_map(|&(_, i)| {
                let state = &self.states[i];
                let run = state.run.as_ref()?;
                Some(if state.finish_at.is_finite() {
                    state.finish_at
                } else {
                    let from = run.progress_from.max(run.settled_to);
                    self.predict_finish(i, from, state.steps_done, f64::INFINITY)
                })
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// When the earliest indexed completion is due.
    pub fn peek_completion(&self) -> Option<f64> {
        self.completions.first().map(|(at, _)| at)
    }

    /// Completes the earliest completion due by `now`, if any, returning its job.
    pub fn complete_due(&mut self, now: f64) -> Option<JobId> {
        match self.completions.first() {
            Some((at, i)) if at <= now => {
                self.complete(i, now);
                Some(self.jobs[i].id)
            }
            _ => None,
        }
    }

    /// Drops job `i`'s indexed completion (its run ended early).
    pub(super) fn unindex_completion(&mut self, i: usize) {
        if let Some(key) = self.states[i].completion.take() {
            self.completions.remove(key);
        }
    }

    /// Recomputes when job `i`'s run ends, progressing from `progress_from` at its current rate.
    pub(super) fn reschedule_completion(&mut self, i: usize, progress_from: f64) {
        self.unindex_completion(i);
        let steps = self.states[i].steps_done;
        let finish = self.predict_finish(i, progress_from, steps, self.completions.horizon);
        let state = &mut self.states[i];
        state.finish_at = finish;
        state.completion = self.completions.insert(finish, i);
    }

    /// When job `i`'s run finishes if nothing changes, progressing from time `from` with `steps` done:
    /// exact when its rate holds to the end; for a rate that changes as it progresses (epochs), exact
    /// when that is by `limit`, and infinite beyond (it is asked again when the horizon moves).
    fn predict_finish(&self, i: usize, from: f64, steps: f64, limit: f64) -> f64 {
        let total = self.jobs[i].total_steps;
        let Some(run) = &self.states[i].run else {
            return f64::INFINITY;
        };
        if run.until >= total {
            return from + (total - steps).max(0.0) / run.rate;
        }
        let (mut t, mut done, mut rate, mut until) = (from, steps, run.rate, run.until);
        // Epochs are finite: a bound on the segments keeps a model that never ends one from spinning.
        for _ in 0..100_000 {
            if rate <= 0.0 {
                return f64::INFINITY;
            }
            if until >= total {
                return t + (total - done).max(0.0) / rate;
            }
            if until > done {
                t += (until - done) / rate;
                done = until;
            }
            if t > limit {
                return f64::INFINITY;
            }
            let segment =
                super::runs::run_segment(&*self.model, &self.cluster, &self.jobs[i], run, done);
            rate = segment.rate * run.locality;
            until = segment.until.max(done);
        }
        f64::INFINITY
    }
}
