//! The control plane embedded through `ControlPlaneBuilder`: what it refuses before starting, and a
//! journal that outlives the handle.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use gangway::ControlPlaneBuilder;
use gangway::actors::cluster::JobRequest;
use gangway::actors::lifecycle::Phase;
use gangway::actors::plane::{ControlError, ControlPlane};
use gangway::core::cluster::{Cluster, GpuTypeId};
use gangway::core::job::{Job, Names};
use gangway::core::placement::{FreeGpus, PackingPlacer, PlaceRequest, Placed, Placer, Unplaced};
use gangway::core::policy::{
    self as policy, BuildError, Capabilities, Grant, Policy, PolicyEntry, Registry, RoundInput,
};
use gangway::core::throughput::ThroughputModel;
use gangway::plane::PlaneError;

/// A handle is shared between threads.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<ControlPlane>();
};

fn builder() -> ControlPlaneBuilder {
    ControlPlaneBuilder::new()
        .cluster(Cluster::parse_spec("v100=2x4", 4).unwrap())
        .policy("fifo")
        .simulated_workers()
        .time_scale(3600.0)
}

#[test]
fn a_journaled_control_plane_started_again_has_its_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let plane = builder().journal(&journal).start().unwrap();
    let short = plane.submit(JobRequest::new("toy", 4, 600.0)).unwrap();
    // Far longer than the test: it is still running when the plane stops.
    let long = plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap();
    plane
        .wait_for(&[short], Some(Duration::from_secs(60)))
        .unwrap();
    plane.shutdown().unwrap();

    let again = builder().journal(&journal).start().unwrap();
    let jobs = again.list().unwrap();
    let phase = |id| jobs.iter().find(|j| j.id == id).map(|j| j.phase);
    assert_eq!(phase(short), Some(Phase::Finished), "{jobs:?}");
    assert!(phase(long).is_some_and(|p| !p.is_terminal()), "{jobs:?}");
    again.cancel(long).unwrap();
    again.shutdown().unwrap();
}

#[test]
fn what_cannot_run_is_refused_before_anything_starts() {
    let said = |b: ControlPlaneBuilder| match b.start() {
        Ok(_) => panic!("started"),
        Err(e) => e,
    };
    let err = said(builder().policy("fifoo"));
    assert!(
        matches!(&err, PlaneError::Policy(BuildError::UnknownPolicy { name, .. }) if name == "fifoo"),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("unknown policy `fifoo`"),
        "{err}"
    );
    // A policy that needs what this control plane lacks: a goodput model.
    let err = said(builder().policy("sia"));
    assert!(
        matches!(&err, PlaneError::Policy(BuildError::Unmet { missing, .. }) if missing.goodput),
        "{err}"
    );
    let err = said(builder().time_scale(0.0));
    assert!(err.to_string().starts_with("--time-scale"), "{err}");
    // Process workers need somewhere to run: these GPUs are on no machine a process can reach.
    let err = said(builder().process_workers());
    assert!(
        err.to_string().starts_with("process workers run on"),
        "{err}"
    );
    // A journal that is a file cannot be opened: the actors never start.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal");
    std::fs::write(&file, "not a directory").unwrap();
    let err = said(builder().journal(&file));
    assert!(
        matches!(
            err,
            PlaneError::Io { .. } | PlaneError::Control(ControlError::Start(_))
        ),
        "{err:?}"
    );
}

/// Best-fit packing that counts the gangs it placed.
struct CountingPlacer(Arc<AtomicUsize>);

impl Placer for CountingPlacer {
    fn place(
        &mut self,
        cluster: &Cluster,
        free: &FreeGpus,
        request: &PlaceRequest<'_>,
    ) -> Result<Placed, Unplaced> {
        self.0.fetch_add(1, Ordering::Relaxed);
        PackingPlacer.place(cluster, free, request)
    }
}

/// Every job runs at half a step a second, on any GPUs.
struct HalfSpeed;

impl ThroughputModel for HalfSpeed {
    fn steps_per_second(&self, _job: &Job, _t: GpuTypeId, _gpus: u32) -> Option<f64> {
        Some(0.5)
    }
}

#[test]
fn a_users_placer_and_throughput_model_run_the_live_control_plane() {
    let placed = Arc::new(AtomicUsize::new(0));
    let plane = builder()
        .placer(CountingPlacer(Arc::clone(&placed)))
        .model(Arc::new(HalfSpeed), Names::default())
        .start()
        .unwrap();
    let ids: Vec<_> = (0..3)
        .map(|_| plane.submit(JobRequest::new("toy", 2, 600.0)).unwrap())
        .collect();
    let jobs = plane.wait_for(&ids, Some(Duration::from_secs(60))).unwrap();
    plane.shutdown().unwrap();
    assert_eq!(
        placed.load(Ordering::Relaxed),
        3,
        "each gang placed once, by the user's placer"
    );
    for job in jobs {
        let ran = job.finished.unwrap() - job.started.unwrap();
        // 600 steps at half a step a second; the default model would take 600 s.
        assert!(
            (1150.0..1300.0).contains(&ran),
            "job {} ran {ran} s",
            job.id
        );
    }
}

/// FIFO, but its third round panics.
struct PanicsOnItsThirdRound {
    fifo: Box<dyn Policy>,
    rounds: u32,
}

impl Policy for PanicsOnItsThirdRound {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        self.rounds += 1;
        if self.rounds == 3 {
            panic!("round three is cursed");
        }
        self.fifo.allocate(input)
    }

    fn keeps_queue(&self) -> bool {
        self.fifo.keeps_queue()
    }
}

/// The built-in policies and `name`, which is FIFO wrapped by `wrap`.
fn registry_wrapping_fifo(
    name: &str,
    wrap: impl Fn(Box<dyn Policy>) -> Box<dyn Policy> + Send + Sync + 'static,
) -> Registry {
    let mut registry = Registry::with_builtins();
    registry
        .register(PolicyEntry::new(name, move |config| {
            let fifo = policy::builtin()
                .build("fifo", config, &Capabilities::ALL)
                .expect("fifo is built in");
            wrap(fifo)
        }))
        .unwrap();
    registry
}

fn cursed_registry() -> Registry {
    registry_wrapping_fifo("cursed", |fifo| {
        Box::new(PanicsOnItsThirdRound { fifo, rounds: 0 })
    })
}

/// A policy that panics fails its round alone: the control plane serves on, the runs keep their
/// GPUs, the failure is counted and named (stats, `/metrics`), and the next rounds schedule again;
/// started again on its journal, the plane recovers (nothing of the failed round was journaled).
#[test]
fn a_policy_that_panics_fails_its_round_alone_and_the_plane_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let cursed = || {
        builder()
            .registry(cursed_registry())
            .policy("cursed")
            .journal(&journal)
    };
    let plane = cursed().start().unwrap();
    // Far longer than the test: both run until cancelled, on all 8 GPUs.
    let (a, b) = (
        plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap(),
        plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap(),
    );
    let placements = |plane: &ControlPlane| -> Vec<(u32, Phase, Vec<u32>)> {
        let mut jobs: Vec<_> = plane
            .list()
            .unwrap()
            .into_iter()
            .filter(|j| j.id == a || j.id == b)
            .map(|j| (j.id.0, j.phase, j.placement))
            .collect();
        jobs.sort_by_key(|(id, _, _)| *id);
        jobs
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let running = loop {
        let jobs = placements(&plane);
        if jobs.iter().all(|(_, phase, _)| *phase == Phase::Running) {
            break jobs;
        }
        assert!(std::time::Instant::now() < deadline, "{jobs:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // A third job waits for GPUs: its submission's round is the policy's third or later.
    let c = plane.submit(JobRequest::new("toy", 4, 600.0)).unwrap();
    let stats = loop {
        let stats = plane.stats().unwrap();
        if stats.counters.round_failures > 0 {
            break stats;
        }
        assert!(std::time::Instant::now() < deadline, "no round failed");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(stats.counters.round_failures, 1);
    let failure = stats.counters.last_round_failure.clone().unwrap();
    assert_eq!(failure.message, "round three is cursed");
    let metrics = gangway::actors::api::prometheus_text(&stats);
    assert!(
        metrics.contains("gangway_round_failures_total 1"),
        "{metrics}"
    );
    assert_eq!(placements(&plane), running, "the runs kept their GPUs");
    // The next rounds schedule: once a GPU frees, the waiting job runs and finishes.
    plane.cancel(a).unwrap();
    let done = plane.wait_for(&[c], Some(Duration::from_secs(60))).unwrap();
    assert_eq!(done[0].phase, Phase::Finished, "{done:?}");
    plane.shutdown().unwrap();

    // Started again on its journal, it recovers (no round of the old one is replayed) and
    // schedules: the job still running is started again (simulated workers are not re-adopted).
    let again = cursed().start().unwrap();
    let phase = |id| {
        let jobs = again.list().unwrap();
        jobs.iter().find(|j| j.id == id).map(|j| j.phase)
    };
    assert_eq!(phase(c), Some(Phase::Finished));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while phase(b) != Some(Phase::Running) {
        assert!(std::time::Instant::now() < deadline, "{:?}", phase(b));
        std::thread::sleep(Duration::from_millis(20));
    }
    again.cancel(b).unwrap();
    again.shutdown().unwrap();
}

/// FIFO, but once a second job is there, each of its rounds waits, inside the round, until the
/// test lets it go; it says when it is waiting.
struct StallsInItsRounds {
    fifo: Box<dyn Policy>,
    stalled: std::sync::mpsc::SyncSender<()>,
    released: Arc<std::sync::Mutex<std::sync::mpsc::Receiver<()>>>,
}

impl Policy for StallsInItsRounds {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        if input.jobs.len() >= 2 {
            let _ = self.stalled.try_send(());
            let _ = (self.released.lock().unwrap()).recv_timeout(Duration::from_secs(60));
        }
        self.fifo.allocate(input)
    }

    fn keeps_queue(&self) -> bool {
        self.fifo.keeps_queue()
    }
}

/// The API's reads (jobs, one job, servers, counters) come from the view published after the last
/// change: they answer while a round is under way, however long it takes, and show what was true
/// before it.
#[test]
fn reads_answer_while_a_round_is_under_way() {
    let (stalled, stalls) = std::sync::mpsc::sync_channel(1);
    let (release, released) = std::sync::mpsc::channel();
    let released = Arc::new(std::sync::Mutex::new(released));
    let registry = registry_wrapping_fifo("stalling", move |fifo| {
        Box::new(StallsInItsRounds {
            fifo,
            stalled: stalled.clone(),
            released: Arc::clone(&released),
        })
    });
    let plane = builder()
        .registry(registry)
        .policy("stalling")
        .start()
        .unwrap();
    let first = plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let running = loop {
        let job = plane.job(first).unwrap().unwrap();
        if job.phase == Phase::Running {
            break job.placement;
        }
        assert!(std::time::Instant::now() < deadline, "{job:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The next submission's round stalls in the policy.
    let second = plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap();
    stalls
        .recv_timeout(Duration::from_secs(60))
        .expect("the second round never started");
    // Were reads messages to the cluster actor, they would wait for the round, which waits for
    // this thread: a read that answers is one served from the view.
    let jobs = plane.list().unwrap();
    let phases: Vec<(u32, Phase)> = jobs.iter().map(|j| (j.id.0, j.phase)).collect();
    assert_eq!(
        phases,
        [(first.0, Phase::Running), (second.0, Phase::Pending)]
    );
    assert_eq!(plane.job(first).unwrap().unwrap().placement, running);
    let nodes = plane.nodes().unwrap();
    assert_eq!(nodes.iter().map(|n| n.free).sum::<u32>(), 4, "{nodes:?}");
    assert_eq!(plane.stats().unwrap().counters.submitted, 2);
    // Let go: this round and every later one go on at once.
    drop(release);
    plane.cancel(first).unwrap();
    plane.cancel(second).unwrap();
    plane.shutdown().unwrap();
}
