//! Carrying out a committed plan: stop workers (checkpoint, release the gang), then lease and launch
//! the new gangs. This runs outside the cluster actor's state, so that the API keeps answering while
//! workers checkpoint; the actor moves the jobs through their phases as it commits the plan and as
//! it settles the outcome.

use std::sync::{Arc, Mutex};

use actix::prelude::*;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

use super::messages::RoundReport;
use super::plan::Retune;
use crate::IdSet;
use crate::clock::Clock;
use crate::executor::{Executor, ExecutorError, Launch};
use crate::gang::{Acquire, GangActor};
use crate::gpu::{GpuActor, Handover, Handovers, Holder, Tally};

/// The cluster's GPU actors, one per server, and which of them holds each GPU.
pub(super) struct GpuActors {
    actors: Vec<Addr<GpuActor>>,
    /// By GPU id, the index of the actor holding it.
    of_gpu: Vec<u32>,
}

impl GpuActors {
    /// The actors of `servers` (each server's GPUs), started with `start` (given the GPUs).
    pub fn start(
        servers: impl IntoIterator<Item = Vec<GpuId>>,
        mut start: impl FnMut(&[GpuId]) -> Addr<GpuActor>,
    ) -> Self {
        let (mut actors, mut of_gpu) = (Vec::new(), Vec::new());
        for gpus in servers {
            for gpu in &gpus {
                let at = gpu.0 as usize;
                if of_gpu.len() <= at {
                    of_gpu.resize(at + 1, u32::MAX);
                }
                of_gpu[at] = actors.len() as u32;
            }
            actors.push(start(&gpus));
        }
        assert!(
            !of_gpu.contains(&u32::MAX),
            "every GPU has an actor (the servers' GPUs number 0 to N - 1)"
        );
        GpuActors { actors, of_gpu }
    }

    /// How many GPUs there are.
    pub fn gpus(&self) -> usize {
        self.of_gpu.len()
    }

    fn index(&self, gpu: GpuId) -> usize {
        self.of_gpu[gpu.0 as usize] as usize
    }

    fn actor(&self, gpu: GpuId) -> &Addr<GpuActor> {
        &self.actors[self.index(gpu)]
    }

    /// Sends each actor its part of `handovers`, in their order, in one message.
    fn send(&self, handovers: Vec<Handover>) {
        let actor_of = |h: &Handover| {
            let (Handover::Release { gpu, .. } | Handover::Take { gpu, .. }) = *h;
            self.index(gpu)
        };
        // Each batch allocated once, at its size.
        let mut sizes = vec![0; self.actors.len()];
        for handover in &handovers {
            sizes[actor_of(handover)] += 1;
        }
        let mut batches: Vec<Vec<Handover>> = sizes.into_iter().map(Vec::with_capacity).collect();
        for handover in handovers {
            batches[actor_of(&handover)].push(handover);
        }
        for (actor, batch) in self.actors.iter().zip(batches) {
            if !batch.is_empty() {
                actor.do_send(Handovers(batch));
            }
        }
    }
}

/// A gang's lease: who holds it (or will), and its GPUs, in ascending id, among the cluster's GPU
/// actors.
#[derive(Clone)]
pub(super) struct Gang {
    pub holder: Holder,
    pub partner: Option<JobId>,
    /// Shared with the job's handle, which keeps the gang while it runs.
    pub gpus: Arc<[GpuId]>,
    actors: Arc<GpuActors>,
}

impl Gang {
    /// A gang for `holder` on `gpus` (not yet leased), among the cluster's `actors`.
    pub fn new(
        actors: &Arc<GpuActors>,
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

    /// Leases every GPU in the ordered two-phase way, through a gang actor, which waits where it
    /// must and says why it failed (after a refusal at [`lease_all`]'s).
    pub async fn lease_in_order(&self) -> Result<(), String> {
        let gpus = (self.gpus.iter()).map(|&g| (g, self.actors.actor(g).clone()));
        let actor = GangActor::new(self.holder, self.partner, gpus.collect()).start();
        match actor.send(Acquire).await {
            Ok(leased) => leased.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Gives every GPU back, without waiting: the releases are queued on the GPUs' mailboxes now, so
    /// a lease sent to them afterwards finds them free. Idempotent.
    pub fn release(&self) {
        // Its GPUs are in ascending id, each server's together: a message per server it spans.
        let actors = &self.actors;
        for run in self
            .gpus
            .chunk_by(|a, b| actors.index(*a) == actors.index(*b))
        {
            let handovers = releases(run, self.holder).collect();
            actors.actor(run[0]).do_send(Handovers(handovers));
        }
    }

    /// Each of its GPUs given back.
    fn releases(&self) -> impl Iterator<Item = Handover> + '_ {
        releases(&self.gpus, self.holder)
    }
}

/// `gpus` given back by `holder`.
fn releases(gpus: &[GpuId], holder: Holder) -> impl Iterator<Item = Handover> + '_ {
    (gpus.iter()).map(move |&gpu| Handover::Release { gpu, holder })
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
    /// The GPU actors, to lease through.
    pub actors: Arc<GpuActors>,
}

/// What carrying out a batch came to.
#[derive(Default)]
pub(super) struct Outcome {
    /// Work the stopped workers saved.
    pub saved: Vec<(JobId, f64)>,
    /// When the stopped workers had all exited (or the rest went on stopping in the background), and
    /// when the new ones had all been launched.
    pub stopped_at: f64,
    pub launched_at: f64,
    /// Starts whose gang could not be leased or whose workers could not launch.
    pub failed_starts: Vec<FailedStart>,
    /// Stops whose workers had not exited within the executor's patience, with their gangs (still
    /// leased): they go on, and the executor's poll reports their end.
    pub still_stopping: Vec<(JobId, Option<Gang>)>,
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
        actors,
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
    let answers = if nothing_to_stop {
        Vec::new()
    } else {
        blocking(move || {
            let mut exec = exec.lock().expect("executor");
            let answers = exec.stop_many(&to_stop, now);
            for retune in &retunes {
                retune.apply(&mut **exec, now);
            }
            answers
        })
        .await
    };
    let mut still_stopping = IdSet::default();
    for (job, stopped) in answers {
        match stopped {
            Ok(steps) => outcome.saved.push((job, steps)),
            Err(ExecutorError::StillStopping(job)) => {
                still_stopping.insert(job);
            }
            Err(e) => tracing::warn!(error = %e, "stopping workers"),
        }
    }
    outcome.stopped_at = clock.now();

    // A stop still under way keeps its GPUs: no start of this batch may take them.
    let (stops, starts) = if still_stopping.is_empty() {
        (stops, starts)
    } else {
        set_aside(stops, starts, &still_stopping, &mut outcome)
    };

    // Starts: lease every gang at once, then launch.
    let stopped = stops.iter().filter_map(|s| s.gang.as_ref());
    let (leased, in_order) = lease_all(&actors, stopped, starts.iter().map(|s| &s.gang)).await;
    outcome.report.leased_in_order = in_order;
    let mut ready = Vec::new();
    for (step, lease) in starts.iter().zip(leased) {
        match lease {
            Ok(()) => ready.push(step.launch.clone()),
            Err(why) => (outcome.failed_starts).push(FailedStart::by_cluster(step.launch.job, why)),
        }
    }
    let exec = Arc::clone(executor);
    let launch_failures: Vec<FailedStart> = if ready.is_empty() {
        Vec::new()
    } else {
        blocking(move || {
            let mut exec = exec.lock().expect("executor");
            ready
                .iter()
                .filter_map(|l| exec.launch(l, now).err().map(|e| launch_failure(l.job, e)))
                .collect()
        })
        .await
    };
    outcome.launched_at = clock.now();
    outcome.failed_starts.extend(launch_failures);
    let failed: IdSet<JobId> = outcome.failed_starts.iter().map(|f| f.job).collect();
    for step in starts.iter().filter(|s| failed.contains(&s.launch.job)) {
        step.gang.release();
    }
    outcome.report.failed_starts = outcome.failed_starts.len();
    outcome
}

/// Sets aside the stops that go on in the background (`still_stopping`) with their gangs, which stay
/// leased ([`Outcome::still_stopping`]), and fails the starts that need their GPUs or their jobs:
/// answers the other stops and starts.
fn set_aside(
    stops: Vec<StopStep>,
    starts: Vec<StartStep>,
    still_stopping: &IdSet<JobId>,
    outcome: &mut Outcome,
) -> (Vec<StopStep>, Vec<StartStep>) {
    let (lingering, stops): (Vec<StopStep>, Vec<StopStep>) = stops
        .into_iter()
        .partition(|s| still_stopping.contains(&s.job));
    let held: IdSet<GpuId> = (lingering.iter())
        .flat_map(|s| s.gang.iter().flat_map(|g| g.gpus.iter().copied()))
        .collect();
    let mut ready = Vec::with_capacity(starts.len());
    for step in starts {
        let job = step.launch.job;
        let taken: Vec<String> = (step.gang.gpus.iter())
            .filter(|g| held.contains(g))
            .map(|g| g.0.to_string())
            .collect();
        if still_stopping.contains(&job) {
            let why = "its last attempt's workers have not stopped yet";
            (outcome.failed_starts).push(FailedStart::by_cluster(job, why.to_owned()));
        } else if !taken.is_empty() {
            let why = format!(
                "GPUs {} are still held by workers that have not stopped yet",
                taken.join(", ")
            );
            (outcome.failed_starts).push(FailedStart::by_cluster(job, why));
        } else {
            ready.push(step);
        }
    }
    outcome.still_stopping = (lingering.into_iter()).map(|s| (s.job, s.gang)).collect();
    (stops, ready)
}

/// Gives the `stopped` gangs' GPUs back and leases the `started` ones, as one batch: one message
/// per server touched ([`Handovers`]), which gives back the GPUs stopped there and then takes the
/// started ones, each at once or refused. Within one batch no two gangs share a GPU (except packing
/// partners), so that is how almost every lease goes; a gang refused anywhere gives back what it took
/// and leases in order ([`Gang::lease_in_order`]). Answers each started gang's lease, in order, and
/// how many gangs leased in order.
pub(super) async fn lease_all<'a>(
    actors: &GpuActors,
    stopped: impl Iterator<Item = &'a Gang> + Clone,
    started: impl Iterator<Item = &'a Gang> + Clone,
) -> (Vec<Result<(), String>>, usize) {
    let gpus = started.clone().map(|g| g.gpus.len()).sum();
    let released: usize = stopped.clone().map(|g| g.gpus.len()).sum();
    let (tally, answered) = Tally::new(started.clone().count(), gpus);
    let takes = started.clone().enumerate().flat_map(|(k, gang)| {
        let tally = &tally;
        gang.gpus.iter().map(move |&gpu| Handover::Take {
            gpu,
            holder: gang.holder,
            partner: gang.partner,
            answer: tally.answer_for(k),
        })
    });
    let mut handovers = Vec::with_capacity(released + gpus);
    handovers.extend(stopped.flat_map(Gang::releases).chain(takes));
    actors.send(handovers);
    // Every answer comes, even from a GPU actor gone (its message, dropped, says "refused").
    let refused = answered.await.expect("a tally completes");
    let mut leases = Vec::with_capacity(refused.len());
    let in_order = refused.iter().filter(|&&r| r).count();
    for (gang, refused) in started.zip(refused) {
        leases.push(if refused {
            gang.release();
            gang.lease_in_order().await
        } else {
            Ok(())
        });
    }
    (leases, in_order)
}

/// The failed start of `job`, the job launched (whatever job the executor's error names): why, as
/// its view says it, and when it may be tried again.
fn launch_failure(job: JobId, e: ExecutorError) -> FailedStart {
    let (why, retry) = match e {
        ExecutorError::Launch { reason, .. } => (reason, Retry::AfterPause),
        ExecutorError::Later { reason, after, .. } => (reason, Retry::After(after)),
        // Its last attempt still stopping is what the engine's hold is for.
        ExecutorError::StillStopping(_) => (
            "its last attempt's workers have not stopped yet".to_owned(),
            Retry::NextRound,
        ),
        ExecutorError::NotRunning(_) => (e.to_string(), Retry::NextRound),
    };
    FailedStart { job, why, retry }
}

/// A start that did not happen.
pub(super) struct FailedStart {
    pub job: JobId,
    /// Why, in words (shown while the job waits).
    pub why: String,
    pub retry: Retry,
}

impl FailedStart {
    /// A start the cluster could not give `job` (its GPUs still held by a stop, a lease refused).
    pub(super) fn by_cluster(job: JobId, why: String) -> Self {
        FailedStart {
            job,
            why,
            retry: Retry::NextRound,
        }
    }
}

/// When a job whose start failed may be tried again.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Retry {
    /// At the next round: the cluster failed it, not the job.
    NextRound,
    /// After a pause that doubles with each of its failures in a row: its launch failed.
    AfterPause,
    /// After this many seconds, which the executor asked for: not the job's failure either.
    After(f64),
}

/// Runs `f` on tokio's blocking pool.
pub(super) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking control-plane task panicked")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[actix::test]
    async fn a_gang_refused_in_the_batch_is_counted_as_leased_in_order() {
        let server = vec![GpuId(0), GpuId(1)];
        let actors = Arc::new(GpuActors::start([server], |gpus| {
            GpuActor::new(gpus.iter().copied()).start()
        }));
        let gang = |job: u32, gpus: &[GpuId]| {
            let holder = Holder {
                job: JobId(job),
                attempt: 1,
            };
            Gang::new(&actors, holder, None, gpus)
        };
        let first = gang(1, &[GpuId(0)]);
        let (leased, in_order) = lease_all(&actors, std::iter::empty(), [&first].into_iter()).await;
        assert_eq!(
            (leased, in_order),
            (vec![Ok(())], 0),
            "a free GPU is taken at once"
        );
        // GPU 0 is still the first gang's: the second's take of it is refused, and its lease in
        // order finds it held too.
        let second = gang(2, &[GpuId(0), GpuId(1)]);
        let (leased, in_order) =
            lease_all(&actors, std::iter::empty(), [&second].into_iter()).await;
        assert_eq!(in_order, 1);
        assert!(leased[0].is_err(), "{leased:?}");
        // Given back in the same batch, first: taken at once.
        let (leased, in_order) =
            lease_all(&actors, [&first].into_iter(), [&second].into_iter()).await;
        assert_eq!((leased, in_order), (vec![Ok(())], 0));
    }
}
