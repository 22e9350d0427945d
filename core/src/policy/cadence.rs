//! Gavel's re-solve cadence, as a wrapper any time-share policy can wear: [`Cadenced`] re-solves only
//! when a job arrived or left, and at most once per `interval` seconds (Gavel's 1,920 s by default); in
//! between, the last answer stands, and a job that arrived since has no share until the next solve.

use super::{RoundInput, TimeSharePolicy, TimeShares};

/// When to re-solve.
#[derive(Clone, Debug)]
pub struct Cadence {
    /// Least seconds between two solves; a solve waits, too, for a job to arrive or leave.
    pub interval: f64,
    /// A job arrived or left since the last solve.
    pending: bool,
    /// When it last solved.
    solved_at: Option<f64>,
}

impl Cadence {
    /// A cadence of at most one solve per `interval` seconds, its first solve due at the first
    /// round.
    pub fn new(interval: f64) -> Self {
        Cadence {
            interval,
            pending: false,
            solved_at: None,
        }
    }

    /// Whether to re-solve this round (the first round always); if so, the solve counts as done now.
    pub fn due(&mut self, input: &RoundInput<'_>) -> bool {
        self.pending |= input.jobs_changed;
        let due = self
            .solved_at
            .is_none_or(|at| self.pending && input.now - at >= self.interval);
        if due {
            self.pending = false;
            self.solved_at = Some(input.now);
        }
        due
    }
}

/// A time-share policy re-solved on a [`Cadence`]; with an interval of 0, whenever the jobs change.
pub struct Cadenced<P> {
    policy: P,
    cadence: Cadence,
    last: Option<TimeShares>,
}

impl<P: TimeSharePolicy> Cadenced<P> {
    /// `policy`, re-solved at most once per `interval` seconds, when the jobs have changed.
    pub fn new(policy: P, interval: f64) -> Self {
        Cadenced {
            policy,
            cadence: Cadence::new(interval),
            last: None,
        }
    }

    /// The wrapped policy.
    pub fn inner(&self) -> &P {
        &self.policy
    }
}

impl<P: TimeSharePolicy> TimeSharePolicy for Cadenced<P> {
    fn observe(&mut self, input: &RoundInput<'_>) {
        self.policy.observe(input);
    }

    fn shares(&mut self, input: &RoundInput<'_>) -> TimeShares {
        // The first round is always due.
        let due = self.cadence.due(input);
        match &self.last {
            Some(last) if !due => last.clone(),
            _ => {
                let shares = self.policy.shares(input);
                self.last = Some(shares.clone());
                shares
            }
        }
    }
}
