//! Carrying out a committed plan: stop workers (checkpoint, release the gang), then lease and launch
//! the new gangs. This runs outside the cluster actor's state, so that the API keeps answering while
//! workers checkpoint; the actor moves the jobs through their phases as it commits the plan and as
//! it settles the outcome.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::messages::RoundReport;
use super::plan::Retune;
use crate::IdSet;
use crate::clock::Clock;
use crate::executor::{Executor, Launch};
use crate::gang::{Acquire, GangActor};
use crate::gpu::{GpuActor, Handover, Holder, Release, Take, Tally};

/// A gang's lease: who holds it (or will), and its GPUs, in ascending id, among the cluster's GPU
/// actors.
#[derive(Clone)]
pub(super) struct Gang {
    pub holder: Holder,
    pub partner: Option<JobId>,
    /// Shared with the job's handle, which keeps the gang while it runs.
    pub gpus: Arc<[GpuId]>,
    actors: Arc<[Addr<GpuActor>]>,
}

impl Gang {
    /// A gang for `holder` on `gpus` (not yet leased), among the cluster's `actors`.
    pub fn new(
        actors: &Arc<[Addr<GpuActor>]>,
        holder: Holder,
        partner: Option<JobId>,
        gpus: &[GpuId],
    ) -> Self {
        let mut gpus: Arc<[GpuId]> = gpus.into();
        Arc::get_mut(&mut gpus).expect("a new list").sort_unstable();
        Gang {
            holder,
            partner,
            gpus,
            actors: Arc::clone(actors),
        }
    }

    fn actor(&self, gpu: GpuId) -> &Addr<GpuActor> {
        &self.actors[gpu.0 as usize]
    }

    fn actors(&self) -> impl Iterator<Item = &Addr<GpuActor>> {
        self.gpus.iter().map(|&g| self.actor(g))
    }

    /// Leases every GPU in the ordered two-phase way, through a gang actor, which waits where it
    /// must and says why it failed (after a refusal at [`lease_all`]'s).
    pub async fn lease_in_order(&self) -> Result<(), String> {
        let gpus = self.gpus.iter().copied().zip(self.actors().cloned());
        let actor = GangActor::new(self.holder, self.partner, gpus.collect()).start();
        match actor.send(Acquire).await {
            Ok(leased) => leased.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Gives every GPU back, without waiting: the releases are queued on the GPUs' mailboxes now, so
    /// a lease sent to them afterwards finds them free. Idempotent.
    pub fn release(&self) {
        for gpu in self.actors() {
            gpu.do_send(Release(self.holder));
        }
    }
}

/// A stop to carry out.
pub(super) struct StopStep {
    pub job: JobId,
    pub gang: Option<Gang>,
    /// Workers to stop (not when they finished on their own).
    pub stop_workers: bool,
}

/// A start to carry out.
pub(super) struct StartStep {
    pub launch: Launch,
    pub gang: Gang,
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

/// Carries out `steps` through the GPU actors and the executor.
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
    // Stops: checkpoint, release the gang.
    let to_stop: Vec<JobId> = stops
        .iter()
        .filter(|s| s.stop_workers)
        .map(|s| s.job)
        .collect();
    // The executor is reached on a blocking thread (stopping workers waits for their checkpoints),
    // and only when there is something to tell it: a round that stops or starts nothing does not
    // wait for a thread.
    let exec = Arc::clone(executor);
    let nothing_to_stop = to_stop.is_empty() && retunes.is_empty();
    outcome.saved = if nothing_to_stop {
        Vec::new()
    } else {
        blocking(move || {
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
        .await
    };
    outcome.stopped_at = clock.now();

    // Starts: lease every gang at once, then launch.
    let stopped = stops.iter().filter_map(|s| s.gang.as_ref());
    let leased = lease_all(stopped, starts.iter().map(|s| &s.gang)).await;
    let mut ready = Vec::new();
    for (step, lease) in starts.iter().zip(leased) {
        match lease {
            Ok(()) => ready.push(step.launch.clone()),
            Err(e) => outcome.failed_starts.push((step.launch.job, e)),
        }
    }
    let exec = Arc::clone(executor);
    let launch_failures: Vec<(JobId, String)> = if ready.is_empty() {
        Vec::new()
    } else {
        blocking(move || {
            let mut exec = exec.lock().expect("executor");
            ready
                .iter()
                .filter_map(|l| exec.launch(l, now).err().map(|e| (l.job, e.to_string())))
                .collect()
        })
        .await
    };
    outcome.launched_at = clock.now();
    outcome.failed_starts.extend(launch_failures);
    let failed: IdSet<JobId> = outcome.failed_starts.iter().map(|(j, _)| *j).collect();
    for step in starts.iter().filter(|s| failed.contains(&s.launch.job)) {
        step.gang.release();
    }
    outcome.report.failed_starts = outcome.failed_starts.len();
    outcome
}

/// Gives the `stopped` gangs' GPUs back and leases the `started` ones, as one batch: one message
/// per GPU, which hands a GPU from its stopped holders to its new one at once, or takes a free one
/// ([`Handover`]), or frees one nobody takes ([`Release`]). Within one batch no two gangs
/// share a GPU (except packing partners), so that is how almost every lease goes; a gang refused
/// anywhere gives back what it took and leases in order ([`Gang::lease_in_order`]). Answers each
/// started gang's lease, in order.
pub(super) async fn lease_all<'a>(
    stopped: impl Iterator<Item = &'a Gang>,
    started: impl Iterator<Item = &'a Gang> + Clone,
) -> Vec<Result<(), String>> {
    // Each GPU's stopped holders, with a gang that names its actor.
    let mut released: FxHashMap<GpuId, (&Gang, SmallVec<[Holder; 2]>)> = FxHashMap::default();
    for gang in stopped {
        for &gpu in gang.gpus.iter() {
            let (_, holders) = released.entry(gpu).or_insert((gang, SmallVec::new()));
            holders.push(gang.holder);
        }
    }
    let gpus = started.clone().map(|g| g.gpus.len()).sum();
    let (tally, answered) = Tally::new(started.clone().count(), gpus);
    for (k, gang) in started.clone().enumerate() {
        for &gpu in gang.gpus.iter() {
            gang.actor(gpu).do_send(Handover {
                release: released.remove(&gpu).map(|(_, h)| h).unwrap_or_default(),
                take: Take {
                    holder: gang.holder,
                    partner: gang.partner,
                },
                answer: tally.answer_for(k),
            });
        }
    }
    for (gpu, (gang, holders)) in released {
        for holder in holders {
            gang.actor(gpu).do_send(Release(holder));
        }
    }
    // Every answer comes, even from a GPU actor gone (its message, dropped, says "refused").
    let refused = answered.await.expect("a tally completes");
    let mut leases = Vec::with_capacity(refused.len());
    for (gang, refused) in started.zip(refused) {
        leases.push(if refused {
            gang.release();
            gang.lease_in_order().await
        } else {
            Ok(())
        });
    }
    leases
}

/// Runs `f` on tokio's blocking pool.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking control-plane task panicked")
}
