//! Carrying out a committed plan: stop workers (checkpoint, release the gang), then lease and launch
//! the new gangs. This runs outside the cluster actor's state, so that the API keeps answering while
//! workers checkpoint; the actor settles the outcome when it is done.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use futures::future::join_all;
use gangway_core::job::JobId;
use rustc_hash::FxHashSet;

use super::messages::RoundReport;
use crate::executor::{Executor, Launch};
use crate::gang::{Acquire, Disband, GangActor};
use crate::job::{Advance, JobActor};
use crate::lifecycle::Phase;

/// A stop to carry out.
pub(super) struct StopStep {
    pub job: JobId,
    pub addr: Addr<JobActor>,
    pub gang: Option<Addr<GangActor>>,
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
    pub gang: Addr<GangActor>,
    /// Through Placing (a queued job), or straight to Starting (a job being moved or resized).
    pub via_placing: bool,
}

/// One committed batch: its steps, in order (stops, then starts).
pub(super) struct Steps {
    pub stops: Vec<StopStep>,
    pub starts: Vec<StartStep>,
    pub retunes: Vec<(JobId, f64)>,
    pub now: f64,
}

/// What carrying out a batch came to.
#[derive(Default)]
pub(super) struct Outcome {
    /// Work the stopped workers saved.
    pub saved: Vec<(JobId, f64)>,
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
        for (job, rate) in retunes {
            exec.retune(job, rate, now);
        }
        saved
    })
    .await;
    join_all(
        stops
            .iter()
            .filter_map(|s| s.gang.as_ref().map(|g| g.send(Disband))),
    )
    .await;
    log_refusals(advance(&stops, |s| Some(s.next)).await);

    // Starts: lease each gang in two phases, then launch.
    log_refusals(
        join_all(starts.iter().filter(|s| s.via_placing).map(|s| {
            s.addr.send(Advance {
                to: Phase::Placing,
                at: now,
            })
        }))
        .await,
    );
    let leased = join_all(starts.iter().map(|s| s.gang.send(Acquire))).await;
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
    outcome.failed_starts.extend(launch_failures);
    let failed: FxHashSet<JobId> = outcome.failed_starts.iter().map(|(j, _)| *j).collect();
    let moves = starts.iter().map(|step| {
        let failed = failed.contains(&step.launch.job);
        if failed {
            step.gang.do_send(Disband);
        }
        async move {
            let path: &[Phase] = if failed {
                &[Phase::Pending]
            } else {
                &[Phase::Starting, Phase::Running]
            };
            let mut results = Vec::new();
            for &to in path {
                results.push(step.addr.send(Advance { to, at: now }).await);
            }
            results
        }
    });
    log_refusals(join_all(moves).await.into_iter().flatten().collect());
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
