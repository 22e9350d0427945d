//! A GPU that fails is taken out of service, and the job on it moves to healthy GPUs.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{ClusterActor, JobRequest, Round, Settings, ShowJob, TimeSource};
use gangway_actors::executor::SimExecutor;
use gangway_actors::health::{Health, HealthProbe, Switch};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::GpuId;
use gangway_core::engine::EngineConfig;

#[actix::test]
async fn a_failed_gpu_moves_its_job_elsewhere() {
    let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
    let clock = Arc::new(VirtualClock::new(0.0));
    let parts = support::probed(
        support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
        switches
            .iter()
            .map(|s| Box::new(s.clone()) as Box<dyn HealthProbe>)
            .collect(),
    );
    let settings = Settings::new(
        EngineConfig::default(),
        TimeSource::Virtual(Arc::clone(&clock)),
    );
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let request = JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", 2, 3600.0)
    };
    let job = support::submit(&cluster, request).await;
    cluster.send(Round).await.unwrap();
    let before = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(before.phase, Phase::Running);
    let failed = before.placement[0];

    switches[failed as usize].set_failed(true);
    // The GPU's actor notices within a few polls and tells the cluster, which stops the job.
    let mut stopped = false;
    for _ in 0..200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let info = cluster.send(ShowJob(job)).await.unwrap().unwrap();
        if info.phase == Phase::Preempted {
            stopped = true;
            break;
        }
    }
    assert!(stopped, "the job on the failed GPU was not stopped");
    clock.set(60.0);
    cluster.send(Round).await.unwrap();
    let after = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(after.phase, Phase::Running);
    assert_eq!(after.placement.len(), 2);
    assert!(
        !after.placement.contains(&failed),
        "placed on the failed GPU again: {:?}",
        after.placement
    );
    assert_eq!(after.preemptions, 1);
}

/// Bounds every wait, so that a control plane that stops answering fails the test instead of hanging
/// it, however loaded the machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// A probe that panics, counting its calls; quick (called on the actor's thread) or not.
struct Panicking(Arc<AtomicUsize>, bool);

impl HealthProbe for Panicking {
    fn check(&mut self, _: GpuId) -> Health {
        self.0.fetch_add(1, Ordering::SeqCst);
        panic!("a probe that panics (on purpose, in a test)");
    }

    fn quick(&self) -> bool {
        self.1
    }
}

#[actix::test]
async fn a_probe_that_panics_leaves_its_gpu_in_service_and_is_not_called_again() {
    let calls = Arc::new(AtomicUsize::new(0));
    let parts = support::probed(
        support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
        // Two quick, two called on threads of their own.
        (0..4)
            .map(|g| Box::new(Panicking(Arc::clone(&calls), g < 2)) as Box<dyn HealthProbe>)
            .collect(),
    );
    let settings = Settings::new(
        EngineConfig::default(),
        TimeSource::Virtual(Arc::new(VirtualClock::new(0.0))),
    );
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let patience = Instant::now() + PATIENCE;
    while calls.load(Ordering::SeqCst) < 4 && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4, "each probe is called once");
    let job = support::submit(&cluster, JobRequest::new("toy", 4, 3600.0)).await;
    cluster.send(Round).await.unwrap();
    let mut shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    while shown.phase != Phase::Running && Instant::now() < patience {
        tokio::time::sleep(Duration::from_millis(5)).await;
        shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    }
    assert_eq!(shown.phase, Phase::Running, "{shown:?}");
    assert_eq!(shown.placement.len(), 4);
    // Many intervals later, no probe has been called again.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
}
