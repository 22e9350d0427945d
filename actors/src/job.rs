//! The job actor: one job's lifecycle. It owns the job's [`Phase`], refuses illegal moves, and
//! publishes every move on the control plane's event stream, inside a tracing span.

use actix::prelude::*;
use gangway_core::job::JobId;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::lifecycle::{IllegalTransition, Phase};

/// A job moved, at this (control-plane) time.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobEvent {
    /// The job.
    pub job: JobId,
    /// The phase it left.
    pub from: Phase,
    /// The phase it entered.
    pub to: Phase,
    /// When, in control-plane seconds.
    pub at: f64,
}

/// Moves the job to a phase.
#[derive(Message)]
#[rtype(result = "Result<Phase, IllegalTransition>")]
pub struct Advance {
    /// The phase to move to.
    pub to: Phase,
    /// When, in control-plane seconds (for the event).
    pub at: f64,
}

/// Moves the job through several phases in order, in one message (a start's Starting then Running);
/// stops at the first illegal move. Answers the phase it reached.
#[derive(Message)]
#[rtype(result = "Result<Phase, IllegalTransition>")]
pub struct AdvanceThrough {
    /// The phases, in order.
    pub path: &'static [Phase],
    /// When, in control-plane seconds (for the events).
    pub at: f64,
}

/// One job's phase: every move is checked against the state machine and published.
pub struct JobActor {
    job: JobId,
    phase: Phase,
    events: broadcast::Sender<JobEvent>,
}

impl JobActor {
    /// Job `job` in `phase`, publishing its moves on `events`.
    pub fn new(job: JobId, phase: Phase, events: broadcast::Sender<JobEvent>) -> Self {
        JobActor { job, phase, events }
    }
}

impl Actor for JobActor {
    type Context = Context<Self>;
}

impl Handler<Advance> for JobActor {
    type Result = Result<Phase, IllegalTransition>;

    fn handle(&mut self, Advance { to, at }: Advance, ctx: &mut Context<Self>) -> Self::Result {
        self.advance(to, at, ctx)
    }
}

impl Handler<AdvanceThrough> for JobActor {
    type Result = Result<Phase, IllegalTransition>;

    fn handle(&mut self, msg: AdvanceThrough, ctx: &mut Context<Self>) -> Self::Result {
        let mut reached = self.phase;
        for &to in msg.path {
            reached = self.advance(to, msg.at, ctx)?;
        }
        Ok(reached)
    }
}

impl JobActor {
    fn advance(
        &mut self,
        to: Phase,
        at: f64,
        ctx: &mut Context<Self>,
    ) -> Result<Phase, IllegalTransition> {
        let from = self.phase;
        let _span = tracing::info_span!("job_transition", job = self.job.0, %from, %to).entered();
        self.phase.advance(to)?;
        tracing::debug!(at, "moved");
        // Nobody listening is fine: the stream is for observers.
        let _ = self.events.send(JobEvent {
            job: self.job,
            from,
            to,
            at,
        });
        if to.is_terminal() {
            ctx.stop();
        }
        Ok(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix::test]
    async fn a_path_moves_through_every_phase_in_order_and_stops_at_an_illegal_one() {
        let (events, mut seen) = broadcast::channel(16);
        let job = JobActor::new(JobId(7), Phase::Pending, events).start();
        let path = &[Phase::Placing, Phase::Starting, Phase::Running];
        let reached = job.send(AdvanceThrough { path, at: 1.0 }).await.unwrap();
        assert_eq!(reached, Ok(Phase::Running));
        let moves: Vec<(Phase, Phase)> = (0..3)
            .map(|_| seen.try_recv().unwrap())
            .map(|e| (e.from, e.to))
            .collect();
        assert_eq!(
            moves,
            [
                (Phase::Pending, Phase::Placing),
                (Phase::Placing, Phase::Starting),
                (Phase::Starting, Phase::Running),
            ]
        );
        // Running cannot go back to Placing: the path stops there, and the job stays Running.
        let illegal = &[Phase::Placing, Phase::Starting];
        let refused = job
            .send(AdvanceThrough {
                path: illegal,
                at: 2.0,
            })
            .await
            .unwrap();
        assert!(refused.is_err());
        assert!(seen.try_recv().is_err(), "no move was published");
    }
}
