//! What live workers measure becomes the job's goodput model (the simulator's `Learned`), journaled:
//! a restart keeps it, also past snapshots, which hold the ledger alone.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, JobRequest, LearnedSteps, Parts, Poll, Round, Settings, ShowJob, Submit,
    TimeSource,
};
use gangway_actors::executor::{
    Executor, ExecutorError, Launch, Measured, SimExecutor, WorkerEvent,
};
use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::job::{JobId, Names};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::throughput::DurationModel;

/// Simulated workers, shared by the control plane's successive runs, that report what the test
/// gives them at the next poll.
#[derive(Clone, Default)]
struct Measuring {
    inner: Arc<Mutex<SimExecutor>>,
    launched: Arc<Mutex<Option<(JobId, u64)>>>,
    due: Arc<Mutex<Option<Measured>>>,
}

impl Executor for Measuring {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        *self.launched.lock().unwrap() = Some((launch.job, launch.attempt));
        self.inner.lock().unwrap().launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.inner.lock().unwrap().stop(job, now)
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, now: f64) {
        self.inner
            .lock()
            .unwrap()
            .retune(job, steps_per_second, now)
    }
    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.inner.lock().unwrap().alive(job, attempt)
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        let mut events = self.inner.lock().unwrap().poll(now);
        if let (Some((job, attempt)), Some(measured)) = (
            *self.launched.lock().unwrap(),
            self.due.lock().unwrap().take(),
        ) {
            events.push(WorkerEvent::Progressed {
                job,
                attempt,
                steps_done: now,
                measured: Some(measured),
            });
        }
        events
    }
    fn next_event(&self) -> Option<f64> {
        self.inner.lock().unwrap().next_event()
    }
}

fn start(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    workers: &Measuring,
) -> actix::Addr<ClusterActor> {
    let parts = Parts {
        cluster: Arc::new(Cluster::parse_spec("v100=1x4", 4).unwrap()),
        model: Arc::new(DurationModel::uniform(1)),
        names: Names::default(),
        policy: policy::build("fifo", &PolicyConfig::default()).unwrap(),
        placer: Box::new(PackingPlacer),
        executor: Box::new(workers.clone()),
        probes: Vec::new(),
        health_every: Duration::from_secs(60),
    };
    let mut settings = Settings::new(
        EngineConfig::default(),
        TimeSource::Virtual(Arc::clone(clock)),
    );
    settings.journal = Some(journal.to_owned());
    // A snapshot after every batch: what was learned must outlive them.
    settings.snapshot_every = 1;
    ClusterActor::start(parts, settings).unwrap()
}

fn measured(replica_batch: u32, step_seconds: f64) -> Measured {
    Measured {
        steps: 10,
        step_seconds,
        sync_seconds: 0.1,
        replica_batch,
        replicas: 2,
        accum_steps: 1,
        noise_scale: Some(400.0),
        grad_sqr: Some(0.5),
        grad_var: Some(200.0),
    }
}

fn learned(configurations: u32) -> Vec<LearnedSteps> {
    vec![LearnedSteps {
        gpu_type: "v100".into(),
        configurations,
    }]
}

#[test]
fn a_jobs_learned_model_survives_restarts_and_snapshots_and_goes_when_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let workers = Measuring::default();

    let seen = actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        let request = JobRequest {
            id: None,
            job_type: "toy".into(),
            tenant: "a".into(),
            gpus: 2,
            work: 1000.0,
            weight: 1.0,
            run: None,
        };
        let submitted = Submit {
            request,
            at: None,
            key: None,
        };
        cluster.send(submitted).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        let mut seen = Vec::new();
        // One configuration, measured twice (the first stands), then another batch per replica.
        for (t, report) in [
            (10.0, measured(32, 0.5)),
            (20.0, measured(32, 0.6)),
            (30.0, measured(64, 0.9)),
        ] {
            clock.set(t);
            *workers.due.lock().unwrap() = Some(report);
            cluster.send(Poll).await.unwrap();
            let job = cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap();
            seen.push(job.learned);
        }
        seen
    });
    assert_eq!(seen, [learned(1), learned(1), learned(2)]);

    // The control plane restarts on its journal (its last snapshot was after the last record).
    clock.set(40.0);
    let (after_restart, after_end) = actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        let job = cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap();
        cluster.send(Round).await.unwrap();
        clock.set(2000.0);
        cluster.send(Poll).await.unwrap();
        let ended = cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap();
        (job, ended)
    });
    assert_eq!(after_restart.learned, learned(2), "{after_restart:?}");
    assert!(after_end.finished.is_some(), "{after_end:?}");
    assert!(
        after_end.learned.is_empty(),
        "an ended job's model is dropped"
    );
}
