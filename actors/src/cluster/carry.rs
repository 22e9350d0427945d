//! Carrying out a committed plan: stop workers (checkpoint, release the gang), then lease and launch
//! the new gangs. This runs outside the cluster actor's state, so that the API keeps answering while
//! workers checkpoint; the actor settles the outcome when it is done.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use futures::future::join_all;
use gangway_core::job::JobId;
use rustc_hash::FxHashSet;

use super::messages::RoundReport;
use super::plan::Retune;
use crate::clock::Clock;
use crate::executor::{Executor, Launch};
use crate::gang::{Acquire, GangActor};
use crate::gpu::{GpuActor, Holder, Release};
use crate::job::{Advance, AdvanceThrough, JobActor};
use crate::lifecycle::Phase;

/// A leased gang: the actor that leased it, and the GPUs to give back when it stops.
#[derive(Clone)]
pub(super) struct Gang {
    pub holder: Holder,
    pub actor: Addr<GangActor>,
    pub gpus: Vec<Addr<GpuActor>>,
}

impl Gang {
    /// Gives every GPU back, without waiting: the releases are queued on the GPUs' mailboxes now, so
    /// a lease sent to them afterwards finds them free. Idempotent.
    pub fn release(&self) {
        for gpu in &self.gpus {
            gpu.do_send(Release(self.holder));
        }
    }
}

/// A stop to carry out.
pub(super) struct StopStep {
    pub job: JobId,
    pub addr: Addr<JobActor>,
    pub gang: Option<Gang>,
    /// Workers to stop (not when they finished on their own).
    pub stop_workers: bool,
    /// Through Checkpointing (not when the job ends).
    pub checkpoint: bool,
    pub next: Phase,
}

/// A start to carry out.
pub(super) struct StartStep {
    pub launch: Launch,
    pub addr: Addr<JobActor>,
    pub gang: Gang,
    /// Through Placing (a queued job), or straight to Starting (a job being moved or resized).
    pub via_placing: bool,
}

/// One committed batch: its steps, in order (stops, then starts).
pub(super) struct Steps {
    pub stops: Vec<StopStep>,
    pub starts: Vec<StartStep>,
    pub retunes: Vec<Retune>,
    pub now: f64,
    /// The control plane's clock, to time the stops and the launches.
    pub clock: Arc<dyn Clock>,
}

/// What carrying out a batch came to.
#[derive(Default)]
pub(super) struct Outcome {
    /// Work the stopped workers saved.
    pub saved: Vec<(JobId, f64)>,
    /// When the stopped workers had all exited, and when the new ones had all been launched.
    pub stopped_at: f64,
    pub launched_at: f64,
    /// Starts whose gang could not be leased or whose workers could not launch, with why.
    pub failed_starts: Vec<(JobId, String)>,
    pub report: RoundReport,
}

/// Carries out `steps` through the job and gang actors and the executor.
pub(super) async fn carry_out(steps: Steps, executor: &Arc<Mutex<Box<dyn Executor>>>) -> Outcome {
    let Steps {
        stops,
        starts,
        retunes,
        now,
        clock,
    } = steps;
    let mut outcome = Outcome::default();
    outcome.report.stops = stops.len();
    outcome.report.starts = starts.len();
    // Stops: checkpoint, release the gang, move on.
    let advance = |steps: &[StopStep], pick: fn(&StopStep) -> Option<Phase>| {
        join_all(
            steps
                .iter()
                .filter_map(|s| pick(s).map(|to| s.addr.send(Advance { to, at: now }))),
        )
    };
    log_refusals(advance(&stops, |s| s.checkpoint.then_some(Phase::Checkpointing)).await);
    let to_stop: Vec<JobId> = stops
        .iter()
        .filter(|s| s.stop_workers)
        .map(|s| s.job)
        .collect();
    let exec = Arc::clone(executor);
    outcome.saved = blocking(move || {
        let mut exec = exec.lock().expect("executor");
        let saved = exec
            .stop_many(&to_stop, now)
            .into_iter()
            .filter_map(|(job, stopped)| match stopped {
                Ok(steps) => Some((job, steps)),
                Err(e) => {
                    tracing::warn!(error = %e, "stopping workers");
                    None
                }
            })
            .collect();
        for retune in &retunes {
            retune.apply(&mut **exec, now);
        }
        saved
    })
    .await;
    outcome.stopped_at = clock.now();
    for gang in stops.iter().filter_map(|s| s.gang.as_ref()) {
        gang.release();
    }
    log_refusals(advance(&stops, |s| Some(s.next)).await);

    // Starts: lease each gang, then launch; each job then moves through its phases in one message.
    let leased = join_all(starts.iter().map(|s| s.gang.actor.send(Acquire))).await;
    let mut ready = Vec::new();
    for (step, lease) in starts.iter().zip(leased) {
        match lease {
            Ok(Ok(())) => ready.push(step.launch.clone()),
            Ok(Err(e)) => outcome.failed_starts.push((step.launch.job, e.to_string())),
            Err(e) => outcome.failed_starts.push((step.launch.job, e.to_string())),
        }
    }
    let exec = Arc::clone(executor);
    let launch_failures: Vec<(JobId, String)> = blocking(move || {
        let mut exec = exec.lock().expect("executor");
        ready
            .iter()
            .filter_map(|l| exec.launch(l, now).err().map(|e| (l.job, e.to_string())))
            .collect()
    })
    .await;
    outcome.launched_at = clock.now();
    outcome.failed_starts.extend(launch_failures);
    let failed: FxHashSet<JobId> = outcome.failed_starts.iter().map(|(j, _)| *j).collect();
    let moves = starts.iter().map(|step| {
        let failed = failed.contains(&step.launch.job);
        if failed {
            step.gang.release();
        }
        let path: &'static [Phase] = match (step.via_placing, failed) {
            (true, false) => &[Phase::Placing, Phase::Starting, Phase::Running],
            (true, true) => &[Phase::Placing, Phase::Pending],
            (false, false) => &[Phase::Starting, Phase::Running],
            (false, true) => &[Phase::Pending],
        };
        step.addr.send(AdvanceThrough { path, at: now })
    });
    log_refusals(join_all(moves).await);
    outcome.report.failed_starts = outcome.failed_starts.len();
    outcome
}

/// Runs `f` on tokio's blocking pool.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking control-plane task panicked")
}

/// Illegal transitions are bugs in the control plane, not in its input: log them loudly.
fn log_refusals<E: std::fmt::Display>(results: Vec<Result<Result<Phase, E>, actix::MailboxError>>) {
    for result in results {
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "job refused a transition"),
            Err(e) => tracing::error!(error = %e, "job actor unreachable"),
        }
    }
}
