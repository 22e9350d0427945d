//! The control plane keeps answering while workers checkpoint: a preemption that waits on a slow
//! worker holds neither the job list, the metrics, nor new submissions; nor does a GPU's health
//! probe that hangs.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, Cordon, GetStats, GetViews, JobRequest, ListJobs, Parts, Round, ShowJob, Submit,
};
use gangway_actors::executor::{
    Executor, ExecutorError, Launch, Segment, SimExecutor, WorkerEvent,
};
use gangway_actors::health::{Health, HealthProbe};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

/// A gate a stop waits at until the test opens it; it also tells when a stop is waiting.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<(bool, bool)>, Condvar)>);

/// Opens the gate when the test ends, failed or not, so that a failure ends the test instead of
/// leaving the stop blocked.
struct OpenOnDrop(Gate);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

impl Gate {
    /// Blocks until the gate opens, noting that a stop waits.
    fn pass(&self) {
        self.pass_within(Duration::MAX);
    }

    /// Blocks until the gate opens or `limit` has passed, noting that something waits.
    fn pass_within(&self, limit: Duration) {
        let (state, opened) = &*self.0;
        let began = Instant::now();
        let mut state = state.lock().unwrap();
        state.1 = true;
        while !state.0 {
            let Some(left) = limit.checked_sub(began.elapsed()) else {
                return;
            };
            state = opened.wait_timeout(state, left).unwrap().0;
        }
    }

    fn waiting(&self) -> bool {
        self.0.0.lock().unwrap().1
    }

    fn open(&self) {
        self.0.0.lock().unwrap().0 = true;
        self.0.1.notify_all();
    }
}

/// Simulated workers whose checkpoints take as long as the gate stays shut.
struct SlowToStop {
    inner: SimExecutor,
    gate: Gate,
}

impl Executor for SlowToStop {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        self.inner.launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.gate.pass();
        self.inner.stop(job, now)
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64) {
        self.inner.retune(job, steps_per_second, pace, now)
    }
    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.inner.alive(job, attempt)
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        self.inner.poll(now)
    }
    fn next_event(&self) -> Option<f64> {
        self.inner.next_event()
    }
}

/// A GPU's health probe whose first check hangs at the gate (for at most three times
/// [`PATIENCE`], longer than the test waits for anything), and tells when it has returned.
struct HangingProbe {
    gate: Gate,
    returned: Arc<AtomicBool>,
}

impl HealthProbe for HangingProbe {
    fn check(&mut self, _: GpuId) -> Health {
        if !self.returned.load(Ordering::SeqCst) {
            self.gate.pass_within(3 * PATIENCE);
            self.returned.store(true, Ordering::SeqCst);
        }
        Health::healthy()
    }
}

fn request() -> JobRequest {
    JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", 2, 3600.0)
    }
}

/// Bounds every wait, so that a control plane that stops answering fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(20);

#[actix::test]
async fn the_api_answers_while_a_preemption_waits_on_a_slow_worker() {
    let gate = Gate::default();
    let _opened = OpenOnDrop(gate.clone());
    let clock = Arc::new(VirtualClock::new(0.0));
    let parts = support::parts(
        "v100=1x4",
        4,
        "fifo",
        Box::new(SlowToStop {
            inner: SimExecutor::default(),
            gate: gate.clone(),
        }),
    );
    let settings = support::virtual_time(&clock);
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let job = support::submit(&cluster, request()).await;
    cluster.send(Round).await.unwrap();
    let running = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(running.phase, Phase::Running);

    // An operator cordons the job's GPUs: it must checkpoint, and its worker is slow to.
    let cordoned = running.placement.clone();
    let cordon = actix::spawn(cluster.send(Cordon {
        gpus: cordoned.clone(),
        cordoned: true,
    }));
    let waited = Instant::now();
    while !gate.waiting() {
        assert!(
            waited.elapsed() < PATIENCE,
            "the stop never reached the worker"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // The worker is still checkpointing: the API answers meanwhile.
    let asked = Instant::now();
    let jobs = tokio::time::timeout(PATIENCE, cluster.send(ListJobs))
        .await
        .expect("GET /jobs waited for the worker's checkpoint")
        .unwrap();
    let listed = asked.elapsed();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].phase, Phase::Checkpointing, "{:?}", jobs[0]);
    let stats = tokio::time::timeout(PATIENCE, cluster.send(GetStats))
        .await
        .expect("/metrics waited for the worker's checkpoint")
        .unwrap();
    assert_eq!(stats.counters.submitted, 1);
    let second = tokio::time::timeout(
        PATIENCE,
        cluster.send(Submit {
            request: request(),
            at: None,
            key: None,
        }),
    )
    .await
    .expect("a submission waited for the worker's checkpoint")
    .unwrap()
    .unwrap();
    // Answered with a view that shows it, though the batch being carried out has not ended.
    let views = cluster.send(GetViews).await.unwrap();
    assert_eq!(
        views.latest().job(second).map(|j| j.phase),
        Some(Phase::Pending),
        "answered before a view showed it"
    );
    assert!(
        !cordon.is_finished(),
        "the cordon must still wait on the worker"
    );
    eprintln!("job list answered in {listed:?} while a worker checkpointed");

    gate.open();
    tokio::time::timeout(PATIENCE, cordon)
        .await
        .expect("the cordon never completed")
        .unwrap()
        .unwrap()
        .unwrap();
    // The round the cordon asked for waited for the stop, then put the older job back on the two
    // GPUs left in service (starting, until its launch is carried out); the newer one waits.
    let moved = tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
            if shown.phase != Phase::Starting {
                return shown;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the job never left Starting");
    assert_eq!(moved.phase, Phase::Running, "{moved:?}");
    assert_eq!(moved.preemptions, 1);
    assert!(
        moved.placement.iter().all(|g| !cordoned.contains(g)),
        "placed on a cordoned GPU: {moved:?}"
    );
    let waiting = cluster.send(ShowJob(second)).await.unwrap().unwrap();
    assert_eq!(waiting.phase, Phase::Pending, "{waiting:?}");
    // The batch's end showed the move (`cluster::tests` checks what a view published in its middle
    // shows).
    assert_eq!(
        views.latest().job(job),
        Some(&moved),
        "the view lags the move"
    );
}

/// A control plane on four GPUs whose first GPU's health probe hangs (the others have none), once
/// the probe has begun to hang.
async fn start_with_a_hanging_probe(
    gate: &Gate,
    returned: &Arc<AtomicBool>,
) -> actix::Addr<ClusterActor> {
    let probe = HangingProbe {
        gate: gate.clone(),
        returned: Arc::clone(returned),
    };
    // Checked every 2 s: the hung probe takes its GPU out of service only after
    // `UNANSWERED_CHECKS` more ticks, long after the requests these tests make.
    let parts = Parts {
        health_every: Duration::from_secs(2),
        ..support::probed(
            support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
            vec![Box::new(probe) as Box<dyn HealthProbe>],
        )
    };
    let settings = support::virtual_time(&Arc::new(VirtualClock::new(0.0)));
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let waited = Instant::now();
    while !gate.waiting() {
        assert!(waited.elapsed() < PATIENCE, "the probe never ran");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cluster
}

#[test]
fn a_shutdown_does_not_wait_for_a_hung_health_probe() {
    let (gate, returned) = (Gate::default(), Arc::default());
    let _opened = OpenOnDrop(gate.clone());
    let system = actix::System::new();
    system.block_on(async {
        start_with_a_hanging_probe(&gate, &returned).await;
    });
    // The runtime ends, and with it the control plane; the probe's thread is left to hang.
    drop(system);
    assert!(
        !returned.load(Ordering::SeqCst),
        "the shutdown waited for the probe to return"
    );
}

#[actix::test]
async fn the_api_answers_while_a_gpus_health_probe_hangs() {
    let (gate, returned) = (Gate::default(), Arc::default());
    let _opened = OpenOnDrop(gate.clone());
    let cluster = start_with_a_hanging_probe(&gate, &returned).await;
    // The probe hangs: submissions, the job list, the metrics and rounds (which lease the GPU it
    // checks) go on meanwhile (a probe that ran on the control plane's thread would hold them all
    // until it returned).
    let job = support::submit(&cluster, request()).await;
    let jobs = cluster.send(ListJobs).await.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].id, job);
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!(stats.counters.submitted, 1);
    cluster.send(Round).await.unwrap();
    let started = tokio::time::timeout(PATIENCE, async {
        loop {
            let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
            if shown.phase == Phase::Running {
                return shown;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the job never started");
    assert!(started.placement.contains(&0), "{started:?}");
    assert!(
        !returned.load(Ordering::SeqCst),
        "the control plane answered only once the probe had returned"
    );
    gate.open();
}
