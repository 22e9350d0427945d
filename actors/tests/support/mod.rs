//! What the control plane's integration tests share: the parts of a small control plane.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{ClusterActor, JobRequest, Parts, Settings, Submit, TimeSource};
use gangway_actors::executor::{
    Executor, ExecutorError, Launch, Segment, SimExecutor, WorkerEvent,
};
use gangway_actors::health::HealthProbe;
use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::job::{JobId, Names};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::throughput::DurationModel;

/// A control plane's parts: `cluster` (a `--cluster` spec, one server per node of its GPUs) run by
/// the built-in `policy` through `executor`, jobs that take their work in seconds, packed placement,
/// no health probes.
pub fn parts(
    cluster: &str,
    gpus_per_node: u32,
    policy: &str,
    executor: Box<dyn Executor>,
) -> Parts {
    Parts {
        cluster: Arc::new(Cluster::parse_spec(cluster, gpus_per_node).unwrap()),
        model: Arc::new(DurationModel::uniform(1)),
        names: Names::default(),
        policy: policy::builtin()
            .build(policy, &PolicyConfig::default(), &policy::Capabilities::ALL)
            .unwrap(),
        placer: Box::new(PackingPlacer),
        executor,
        probes: Vec::new(),
        health_every: Duration::from_secs(60),
    }
}

/// The engine's default settings, on `clock`'s virtual time.
pub fn virtual_time(clock: &Arc<VirtualClock>) -> Settings {
    Settings::new(
        EngineConfig::default(),
        TimeSource::Virtual(Arc::clone(clock)),
    )
}

/// `parts` with a health probe for each of its first GPUs, checked every 5 ms.
pub fn probed(parts: Parts, probes: Vec<Box<dyn HealthProbe>>) -> Parts {
    Parts {
        probes,
        health_every: Duration::from_millis(5),
        ..parts
    }
}

/// Submits `request` (no arrival time, no idempotency key) and answers the job's id; panics on a
/// refusal.
pub async fn submit(cluster: &actix::Addr<ClusterActor>, request: JobRequest) -> JobId {
    cluster
        .send(Submit {
            request,
            at: None,
            key: None,
        })
        .await
        .unwrap()
        .unwrap()
}

/// Workers that outlive the control plane: one simulated executor shared by its successive runs
/// (and by the test, and by executors of a test's own that wrap it).
#[derive(Clone, Default)]
pub struct Outliving(pub Arc<Mutex<SimExecutor>>);

impl Executor for Outliving {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        self.0.lock().unwrap().launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.0.lock().unwrap().stop(job, now)
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64) {
        self.0
            .lock()
            .unwrap()
            .retune(job, steps_per_second, pace, now)
    }
    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.0.lock().unwrap().alive(job, attempt)
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        self.0.lock().unwrap().poll(now)
    }
    fn next_event(&self) -> Option<f64> {
        self.0.lock().unwrap().next_event()
    }
}
