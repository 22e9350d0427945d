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
    pub job: JobId,
    pub from: Phase,
    pub to: Phase,
    pub at: f64,
}

/// Moves the job to a phase.
#[derive(Message)]
#[rtype(result = "Result<Phase, IllegalTransition>")]
pub struct Advance {
    pub to: Phase,
    pub at: f64,
}

pub struct JobActor {
    job: JobId,
    phase: Phase,
    events: broadcast::Sender<JobEvent>,
}

impl JobActor {
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
