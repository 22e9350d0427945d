//! Stops that outlast the executor's patience go on in the background: the rounds go on, the
//! stopping workers' GPUs stay out of service and their job waits until the executor reports them
//! gone, and then both come back.

mod support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    Cancel, ClusterActor, Cordon, GetStats, JobInfo, JobRequest, ListNodes, Poll, Round, ShowJob,
};
use gangway_actors::executor::{Executor, ExecutorError, Launch, Segment, WorkerEvent};
use gangway_actors::lifecycle::Phase;
use gangway_core::job::JobId;

/// What the test's executor shares with the test.
#[derive(Default)]
struct Shared {
    /// Stops answer [`ExecutorError::StillStopping`] while this holds.
    linger: bool,
    /// The stops going on: job, attempt, work saved.
    stopping: Vec<(JobId, u64, f64)>,
    /// The attempt each job last launched.
    attempts: HashMap<JobId, u64>,
}

/// Simulated workers whose stops, while the test says so, go on until the test ends them; they
/// outlive the control plane (its clones share them).
#[derive(Clone, Default)]
struct Lingering {
    inner: support::Outliving,
    shared: Arc<Mutex<Shared>>,
}

impl Lingering {
    fn new() -> Self {
        Lingering::default()
    }

    fn linger(&self, linger: bool) {
        self.shared.lock().unwrap().linger = linger;
    }
}

impl Executor for Lingering {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        let mut shared = self.shared.lock().unwrap();
        if shared.stopping.iter().any(|s| s.0 == launch.job) {
            panic!("job {} launched while its last workers stop", launch.job.0);
        }
        shared.attempts.insert(launch.job, launch.attempt);
        self.inner.launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        let saved = self.inner.stop(job, now)?;
        let mut shared = self.shared.lock().unwrap();
        if !shared.linger {
            return Ok(saved);
        }
        let attempt = shared.attempts[&job];
        shared.stopping.push((job, attempt, saved));
        Err(ExecutorError::StillStopping(job))
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64) {
        self.inner.retune(job, steps_per_second, pace, now)
    }
    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.inner.alive(job, attempt)
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        let mut events = self.inner.poll(now);
        let mut shared = self.shared.lock().unwrap();
        if !shared.linger {
            let ended = shared.stopping.drain(..);
            events.extend(
                ended.map(|(job, attempt, steps_done)| WorkerEvent::Stopped {
                    job,
                    attempt,
                    steps_done,
                }),
            );
        }
        events
    }
    fn next_event(&self) -> Option<f64> {
        self.inner.next_event()
    }
}

/// Bounds every wait, so that a control plane that stops answering fails the test instead of
/// hanging it.
const PATIENCE: Duration = Duration::from_secs(20);

/// A control plane on the cluster `spec` (servers of four GPUs) under fifo, through `workers`,
/// journaling to `journal` if given.
fn start_on(
    spec: &str,
    workers: &Lingering,
    journal: Option<&Path>,
    clock: &Arc<VirtualClock>,
) -> actix::Addr<ClusterActor> {
    let parts = support::parts(spec, 4, "fifo", Box::new(workers.clone()));
    let mut settings = support::virtual_time(clock);
    settings.journal = journal.map(Path::to_owned);
    ClusterActor::start(parts, settings).unwrap()
}

/// A control plane on one server of four GPUs, and its workers.
fn start() -> (actix::Addr<ClusterActor>, Lingering) {
    let workers = Lingering::new();
    let clock = Arc::new(VirtualClock::new(0.0));
    (start_on("v100=1x4", &workers, None, &clock), workers)
}

fn request(gpus: u32) -> JobRequest {
    JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", gpus, 3600.0)
    }
}

async fn show(cluster: &actix::Addr<ClusterActor>, job: JobId) -> JobInfo {
    cluster.send(ShowJob(job)).await.unwrap().unwrap()
}

/// Nothing broke the ledger's invariants or the job state machine.
async fn assert_consistent(cluster: &actix::Addr<ClusterActor>) {
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!(
        (
            stats.counters.violations,
            stats.counters.illegal_transitions
        ),
        (0, 0)
    );
}

/// Polls the executor and runs rounds until `job` reaches `phase`.
async fn until_phase(cluster: &actix::Addr<ClusterActor>, job: JobId, phase: Phase) -> JobInfo {
    tokio::time::timeout(PATIENCE, async {
        loop {
            cluster.send(Poll).await.unwrap();
            cluster.send(Round).await.unwrap();
            let shown = show(cluster, job).await;
            if shown.phase == phase {
                return shown;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("job {} never reached {phase}", job.0))
}

/// A cancelled job whose workers go on stopping holds its GPUs out of service, and no round waits
/// for it: the next job waits, saying why, and starts once they are gone.
#[actix::test]
async fn a_cancelled_jobs_lingering_workers_keep_their_gpus_out_of_service_until_gone() {
    let (cluster, workers) = start();
    let first = support::submit(&cluster, request(4)).await;
    cluster.send(Round).await.unwrap();
    assert_eq!(show(&cluster, first).await.phase, Phase::Running);
    let second = support::submit(&cluster, request(2)).await;

    workers.linger(true);
    tokio::time::timeout(PATIENCE, cluster.send(Cancel(first)))
        .await
        .expect("the cancel waited for the workers")
        .unwrap()
        .unwrap();
    tokio::time::timeout(PATIENCE, cluster.send(Round))
        .await
        .expect("the round waited for the workers")
        .unwrap();
    assert_eq!(show(&cluster, first).await.phase, Phase::Cancelled);
    let waiting = show(&cluster, second).await;
    assert_eq!(waiting.phase, Phase::Pending, "{waiting:?}");
    let why = waiting.waiting.unwrap_or_default();
    assert!(why.contains("4 out of service"), "{why}");
    let nodes = cluster.send(ListNodes).await.unwrap();
    let out: Vec<&(u32, String)> = nodes.iter().flat_map(|n| &n.out_of_service).collect();
    assert_eq!(out.len(), 4, "{out:?}");
    assert!(
        out.iter()
            .all(|(_, why)| why.contains("have not stopped yet")),
        "{out:?}"
    );
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!(
        (stats.stops_in_background, stats.gpus_out_of_service),
        (1, 4)
    );

    // The workers are gone: their GPUs come back, and the waiting job starts on them.
    workers.linger(false);
    let started = until_phase(&cluster, second, Phase::Running).await;
    assert_eq!(started.placement.len(), 2);
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!(
        (stats.stops_in_background, stats.gpus_out_of_service),
        (0, 0)
    );
    let nodes = cluster.send(ListNodes).await.unwrap();
    assert!(
        nodes.iter().all(|n| n.out_of_service.is_empty()),
        "{nodes:?}"
    );
    assert_consistent(&cluster).await;
}

/// A job moved off cordoned GPUs whose workers go on stopping is not started elsewhere until they
/// are gone (two runs of a job never overlap); it waits in Checkpointing, saying why, then runs.
#[actix::test]
async fn a_job_whose_workers_still_stop_is_not_started_again_until_they_are_gone() {
    let (cluster, workers) = start();
    let job = support::submit(&cluster, request(2)).await;
    cluster.send(Round).await.unwrap();
    let running = show(&cluster, job).await;
    assert_eq!(running.phase, Phase::Running);

    workers.linger(true);
    let cordoned = running.placement.clone();
    tokio::time::timeout(
        PATIENCE,
        cluster.send(Cordon {
            gpus: cordoned.clone(),
            cordoned: true,
        }),
    )
    .await
    .expect("the cordon waited for the workers")
    .unwrap()
    .unwrap();
    for _ in 0..3 {
        cluster.send(Poll).await.unwrap();
        cluster.send(Round).await.unwrap();
    }
    let held = show(&cluster, job).await;
    assert_eq!(held.phase, Phase::Checkpointing, "{held:?}");
    assert!(held.placement.is_empty(), "{held:?}");
    let why = held.waiting.unwrap_or_default();
    assert!(why.contains("have not stopped yet"), "{why}");

    workers.linger(false);
    let moved = until_phase(&cluster, job, Phase::Running).await;
    assert!(
        moved.placement.iter().all(|g| !cordoned.contains(g)),
        "{moved:?}"
    );
    // Its old GPUs come back from the stop, and stay out: they are cordoned.
    let nodes = cluster.send(ListNodes).await.unwrap();
    let out: Vec<(u32, String)> = nodes.into_iter().flat_map(|n| n.out_of_service).collect();
    assert_eq!(
        out,
        cordoned
            .iter()
            .map(|&g| (g, "cordoned".to_owned()))
            .collect::<Vec<_>>()
    );
    assert_consistent(&cluster).await;
}

/// Workers a restarted control plane finds alive and cannot re-adopt (their job cannot run on the
/// cluster it restarted on) and whose stop goes on: the GPUs they hold are out of service until
/// they are gone, and only then does another job run there.
#[test]
fn workers_a_restart_cannot_readopt_hold_their_gpus_while_they_stop() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let workers = Lingering::new();
    // Job 0 runs on both servers' eight GPUs; the daemon restarts on the first server alone.
    actix::System::new().block_on(async {
        let cluster = start_on("v100=2x4", &workers, Some(&journal), &clock);
        support::submit(&cluster, request(8)).await;
        cluster.send(Round).await.unwrap();
        assert_eq!(show(&cluster, JobId(0)).await.phase, Phase::Running);
    });
    workers.linger(true);
    clock.set(100.0);
    actix::System::new().block_on(async {
        let cluster = start_on("v100=1x4", &workers, Some(&journal), &clock);
        assert_eq!(show(&cluster, JobId(0)).await.phase, Phase::Failed);
        let next = support::submit(&cluster, request(4)).await;
        cluster.send(Round).await.unwrap();
        let waiting = show(&cluster, next).await;
        assert_eq!(waiting.phase, Phase::Pending, "{waiting:?}");
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!(
            (stats.stops_in_background, stats.gpus_out_of_service),
            (1, 4)
        );

        workers.linger(false);
        until_phase(&cluster, next, Phase::Running).await;
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!(
            (stats.stops_in_background, stats.gpus_out_of_service),
            (0, 0)
        );
        assert_consistent(&cluster).await;
    });
}
