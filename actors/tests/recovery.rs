//! A control plane that restarts while workers keep running re-adopts them (no restart, no lost work,
//! no second start); jobs whose workers died are requeued from their last checkpoint.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, JobRequest, Parts, Poll, Round, Settings, ShowJob, Submit, TimeSource,
};
use gangway_actors::executor::{Executor, ExecutorError, Launch, SimExecutor, WorkerEvent};
use gangway_actors::ledger::{Ledger, Record};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::Cluster;
use gangway_core::job::{JobId, Trace};
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::{PackingPlacer, SimConfig};
use gangway_core::throughput::DurationModel;
use gangway_journal::Journal;

/// Workers that outlive the control plane: one simulated executor shared by its successive runs.
#[derive(Clone)]
struct Outliving(Arc<Mutex<SimExecutor>>);

impl Executor for Outliving {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        self.0.lock().unwrap().launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.0.lock().unwrap().stop(job, now)
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, now: f64) {
        self.0.lock().unwrap().retune(job, steps_per_second, now)
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

fn start(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    workers: &Outliving,
) -> actix::Addr<ClusterActor> {
    let parts = Parts {
        cluster: Arc::new(Cluster::parse_spec("v100=1x4", 4).unwrap()),
        model: Arc::new(DurationModel::uniform(1)),
        names: Trace::default(),
        policy: policy::build("fifo", &PolicyConfig::default()).unwrap(),
        placer: Box::new(PackingPlacer),
        executor: Box::new(workers.clone()),
        probes: Vec::new(),
        health_every: Duration::from_secs(60),
    };
    let mut settings = Settings::new(SimConfig::default(), TimeSource::Virtual(Arc::clone(clock)));
    settings.journal = Some(journal.to_owned());
    ClusterActor::start(parts, settings).unwrap()
}

fn request(gpus: u32, work: f64) -> JobRequest {
    JobRequest {
        id: None,
        job_type: "toy".into(),
        tenant: "a".into(),
        gpus,
        work,
        weight: 1.0,
        run: None,
    }
}

#[test]
fn live_workers_are_readopted_and_dead_ones_requeued() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let workers = Outliving(Arc::new(Mutex::new(SimExecutor::new(50.0))));

    // First run: two jobs start at t=0; at t=100 job 1 reports a checkpoint; then the control plane
    // dies, and job 1's workers with it, while job 0's keep running.
    actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        for (gpus, work) in [(2, 1000.0), (2, 400.0)] {
            cluster
                .send(Submit {
                    request: request(gpus, work),
                    at: None,
                    key: None,
                })
                .await
                .unwrap()
                .unwrap();
        }
        cluster.send(Round).await.unwrap();
        clock.set(100.0);
        cluster.send(Poll).await.unwrap();
    });
    workers.0.lock().unwrap().stop(JobId(1), 100.0).unwrap();

    // Second run, at t=150.
    clock.set(150.0);
    let (adopted, requeued, done) = actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        let adopted = cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap();
        let requeued = cluster.send(ShowJob(JobId(1))).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        // Job 0 finishes on its first run's schedule; job 1 redoes the 300 s after its checkpoint.
        for t in [1000.0, 150.0 + 300.0] {
            clock.set(t);
            cluster.send(Poll).await.unwrap();
        }
        let done = [JobId(0), JobId(1)].map(|id| {
            let cluster = cluster.clone();
            async move { cluster.send(ShowJob(id)).await.unwrap().unwrap() }
        });
        (adopted, requeued, futures::future::join_all(done).await)
    });
    assert_eq!(adopted.phase, Phase::Running, "live workers are re-adopted");
    assert_eq!(adopted.placement.len(), 2);
    assert_eq!(requeued.phase, Phase::Pending, "dead workers are requeued");
    assert!(
        (requeued.progress - 100.0 / 400.0).abs() < 1e-9,
        "from its checkpoint: {requeued:?}"
    );
    assert_eq!(
        done[0].finished,
        Some(1000.0),
        "no work lost, no restart cost"
    );
    assert_eq!(done[1].finished, Some(450.0));

    let (_journal, recovered) = Journal::<Record>::open::<Ledger>(&journal).unwrap();
    let mut ledger = Ledger::default();
    for (seq, record) in &recovered.records {
        ledger.apply(*seq, record).unwrap();
    }
    assert_eq!(
        ledger.jobs[&JobId(0)].starts,
        1,
        "a re-adopted job is never started twice"
    );
    assert_eq!(ledger.jobs[&JobId(1)].starts, 2);
}
