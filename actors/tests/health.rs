//! A GPU that fails is taken out of service, and the job on it moves to healthy GPUs.

use std::sync::Arc;
use std::time::Duration;

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, JobRequest, Parts, Round, Settings, ShowJob, Submit, TimeSource,
};
use gangway_actors::executor::SimExecutor;
use gangway_actors::health::{HealthProbe, Switch};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::job::Names;
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::throughput::DurationModel;

#[actix::test]
async fn a_failed_gpu_moves_its_job_elsewhere() {
    let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
    let clock = Arc::new(VirtualClock::new(0.0));
    let parts = Parts {
        cluster: Arc::new(Cluster::parse_spec("v100=1x4", 4).unwrap()),
        model: Arc::new(DurationModel::uniform(1)),
        names: Names::default(),
        policy: policy::builtin()
            .build("fifo", &PolicyConfig::default(), &policy::Capabilities::ALL)
            .unwrap(),
        placer: Box::new(PackingPlacer),
        executor: Box::new(SimExecutor::default()),
        probes: switches
            .iter()
            .map(|s| Box::new(s.clone()) as Box<dyn HealthProbe>)
            .collect(),
        health_every: Duration::from_millis(5),
    };
    let settings = Settings::new(
        EngineConfig::default(),
        TimeSource::Virtual(Arc::clone(&clock)),
    );
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let request = JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", 2, 3600.0)
    };
    let job = cluster
        .send(Submit {
            request,
            at: None,
            key: None,
        })
        .await
        .unwrap()
        .unwrap();
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
