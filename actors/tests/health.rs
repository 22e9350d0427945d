//! A GPU that fails is taken out of service, and the job on it moves to healthy GPUs.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, Cordon, GetStats, GetViews, JobInfo, JobRequest, ListNodes, NodeInfo, Parts,
    Round, ShowJob,
};
use gangway_actors::executor::SimExecutor;
use gangway_actors::health::{Health, HealthProbe, Switch};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::GpuId;
use gangway_core::job::JobId;

/// A control plane on four GPUs, each probed through a fault-injection switch; the switches, and its
/// clock.
fn switched() -> (actix::Addr<ClusterActor>, Vec<Switch>, Arc<VirtualClock>) {
    let switches: Vec<Switch> = (0..4).map(|_| Switch::default()).collect();
    let clock = Arc::new(VirtualClock::new(0.0));
    let parts = support::probed(
        support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
        (switches.iter())
            .map(|s| Box::new(s.clone()) as Box<dyn HealthProbe>)
            .collect(),
    );
    let settings = support::virtual_time(&clock);
    (
        ClusterActor::start(parts, settings).unwrap(),
        switches,
        clock,
    )
}

#[actix::test]
async fn a_failed_gpu_moves_its_job_elsewhere() {
    let (cluster, switches, clock) = switched();
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
    // Checked every 200 ms: a panic's report (its backtrace) takes the probe's thread long enough
    // to be counted silent at 5 ms ticks, which would take the GPU out of service for a while.
    let parts = Parts {
        health_every: Duration::from_millis(200),
        ..support::probed(
            support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
            // Two quick, two called on threads of their own.
            (0..4)
                .map(|g| Box::new(Panicking(Arc::clone(&calls), g < 2)) as Box<dyn HealthProbe>)
                .collect(),
        )
    };
    let settings = support::virtual_time(&Arc::new(VirtualClock::new(0.0)));
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
    // Several intervals later, no probe has been called again, and no GPU left service for it.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    let still = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(
        (still.phase, still.preemptions),
        (Phase::Running, 0),
        "{still:?}"
    );
    let nodes = cluster.send(ListNodes).await.unwrap();
    assert!(
        nodes.iter().all(|n| n.out_of_service.is_empty()),
        "{nodes:?}"
    );
    // But the operator is told that their health is no longer checked, and why.
    let unwatched: Vec<&(u32, String)> = nodes.iter().flat_map(|n| &n.unwatched).collect();
    assert_eq!(unwatched.len(), 4, "{nodes:?}");
    assert!(
        unwatched.iter().all(|(_, why)| why.contains("panicked")),
        "{unwatched:?}"
    );
    // And so are its metrics.
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!((stats.gpus_unwatched, stats.gpus_out_of_service), (4, 0));
    // As the API serves them: from the view published last, not the actor's state.
    let view = cluster.send(GetViews).await.unwrap().latest();
    let published = (view.nodes().iter()).flat_map(|n| &n.unwatched).count();
    assert_eq!(published, 4, "{:?}", view.nodes());
    assert_eq!(view.stats().gpus_unwatched, 4);
    let metrics = gangway_actors::api::prometheus_text(view.stats());
    assert!(
        metrics.contains("\ngangway_gpus_unwatched 4\n"),
        "{metrics}"
    );
}

/// A probe that stalls (as a wedged NVML call does) while `stall` is set, then answers healthy, or,
/// if `panics`, panics once it has stalled.
struct Stalling {
    stall: Arc<AtomicBool>,
    panics: bool,
}

impl HealthProbe for Stalling {
    fn check(&mut self, _: GpuId) -> Health {
        let (began, stalled) = (Instant::now(), self.stall.load(Ordering::SeqCst));
        while self.stall.load(Ordering::SeqCst) && began.elapsed() < PATIENCE {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            !(self.panics && stalled),
            "a probe that panics (on purpose, in a test)"
        );
        Health::healthy()
    }
}

/// Waits (within [`PATIENCE`]) until `done` holds of GPU 0's reason in a list of each server's
/// (`list`: out of service, or unwatched) as the view published last has it (what the API serves);
/// answers that reason.
async fn gpu_0_reason(
    cluster: &actix::Addr<ClusterActor>,
    list: impl Fn(&NodeInfo) -> &[(u32, String)],
    done: impl Fn(Option<&str>) -> bool,
) -> Option<String> {
    let patience = Instant::now() + PATIENCE;
    loop {
        let view = cluster.send(GetViews).await.unwrap().latest();
        let why = (view.nodes().iter().flat_map(|n| list(n)))
            .find(|(g, _)| *g == 0)
            .map(|(_, why)| why.clone());
        if done(why.as_deref()) || Instant::now() > patience {
            return why;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// GPU 0's reason for being out of service once `done` holds of it (see [`gpu_0_reason`]).
async fn gpu_0_out_of_service(
    cluster: &actix::Addr<ClusterActor>,
    done: impl Fn(Option<&str>) -> bool,
) -> Option<String> {
    gpu_0_reason(cluster, |n| &n.out_of_service, done).await
}

/// GPU 0's reason for being unwatched, once it is (see [`gpu_0_reason`]).
async fn gpu_0_unwatched(cluster: &actix::Addr<ClusterActor>) -> Option<String> {
    gpu_0_reason(cluster, |n| &n.unwatched, |why| why.is_some()).await
}

/// Waits (within [`PATIENCE`]) until `job` is in `phase`; answers how it is then.
async fn in_phase(cluster: &actix::Addr<ClusterActor>, job: JobId, phase: Phase) -> JobInfo {
    let patience = Instant::now() + PATIENCE;
    loop {
        let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
        if shown.phase == phase || Instant::now() > patience {
            return shown;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A control plane on four GPUs, GPU 0's probe stalling while the flag answered is set (the others
/// have none), running a job on all four; and its clock.
async fn a_job_beside_a_stalling_probe(
    panics: bool,
) -> (
    actix::Addr<ClusterActor>,
    JobId,
    Arc<AtomicBool>,
    Arc<VirtualClock>,
) {
    let stall = Arc::new(AtomicBool::new(false));
    let clock = Arc::new(VirtualClock::new(0.0));
    let probe = Stalling {
        stall: Arc::clone(&stall),
        panics,
    };
    // Checked every 100 ms: silent after 300 ms, long beyond a probe thread's start on a busy machine.
    let parts = Parts {
        health_every: Duration::from_millis(100),
        ..support::probed(
            support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::default())),
            vec![Box::new(probe) as Box<dyn HealthProbe>],
        )
    };
    let settings = support::virtual_time(&clock);
    let cluster = ClusterActor::start(parts, settings).unwrap();
    let job = support::submit(&cluster, JobRequest::new("toy", 4, 3600.0)).await;
    cluster.send(Round).await.unwrap();
    let running = in_phase(&cluster, job, Phase::Running).await;
    assert_eq!(running.phase, Phase::Running, "{running:?}");
    (cluster, job, stall, clock)
}

#[actix::test]
async fn a_gpu_whose_probe_stops_answering_is_out_of_service_until_it_answers() {
    let (cluster, job, stall, clock) = a_job_beside_a_stalling_probe(false).await;
    stall.store(true, Ordering::SeqCst);
    let why = gpu_0_out_of_service(&cluster, |why| why.is_some()).await;
    let why = why.expect("GPU 0 stayed in service while its probe did not answer");
    assert!(why.contains("has not answered"), "{why}");
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!((stats.gpus_out_of_service, stats.gpus_unwatched), (1, 0));
    // Its job, which needs all four GPUs, is stopped and waits.
    let stopped = in_phase(&cluster, job, Phase::Preempted).await;
    assert_eq!(stopped.phase, Phase::Preempted, "{stopped:?}");

    stall.store(false, Ordering::SeqCst);
    let why = gpu_0_out_of_service(&cluster, |why| why.is_none()).await;
    assert_eq!(
        why, None,
        "GPU 0 stayed out of service once its probe answered"
    );
    clock.set(60.0);
    cluster.send(Round).await.unwrap();
    let back = in_phase(&cluster, job, Phase::Running).await;
    assert_eq!(back.phase, Phase::Running, "{back:?}");
    assert_eq!(back.placement.len(), 4);
    // A probe that was slow but answers is still watching its GPU.
    let nodes = cluster.send(ListNodes).await.unwrap();
    assert!(nodes.iter().all(|n| n.unwatched.is_empty()), "{nodes:?}");
}

#[actix::test]
async fn a_probe_that_stalls_then_panics_gives_its_gpu_back_to_service() {
    let (cluster, _, stall, _) = a_job_beside_a_stalling_probe(true).await;
    stall.store(true, Ordering::SeqCst);
    let why = gpu_0_out_of_service(&cluster, |why| why.is_some()).await;
    assert!(
        why.is_some(),
        "GPU 0 stayed in service while its probe did not answer"
    );
    // The probe's fault says nothing of the GPU: it is back in the health the probe last gave.
    stall.store(false, Ordering::SeqCst);
    let why = gpu_0_out_of_service(&cluster, |why| why.is_none()).await;
    assert_eq!(
        why, None,
        "GPU 0 stayed out of service after its probe panicked"
    );
    // In service, but no longer watched: said so.
    let unwatched = gpu_0_unwatched(&cluster).await;
    let unwatched = unwatched.expect("GPU 0 not shown as unwatched after its probe panicked");
    assert!(unwatched.contains("panicked"), "{unwatched}");
}

#[actix::test]
async fn a_gpu_is_in_service_only_while_neither_cordoned_nor_unhealthy() {
    let (cluster, switches, clock) = switched();
    let cordon = |cordoned| Cordon {
        gpus: vec![0],
        cordoned,
    };
    let job = support::submit(&cluster, JobRequest::new("toy", 4, 3600.0)).await;
    let mut at = 0.0;
    let mut round = async || {
        at += 60.0;
        clock.set(at);
        cluster.send(Round).await.unwrap();
        cluster.send(ShowJob(job)).await.unwrap().unwrap().phase
    };

    // Cordoned, then failed and healed: still cordoned, and the job (all four GPUs) waits.
    cluster.send(cordon(true)).await.unwrap().unwrap();
    switches[0].set_failed(true);
    let why = gpu_0_out_of_service(&cluster, |why| why == Some("marked failed")).await;
    assert_eq!(why.as_deref(), Some("marked failed"));
    let stats = cluster.send(GetStats).await.unwrap();
    assert_eq!(stats.gpus_out_of_service, 1, "cordoned and failed: one GPU");
    switches[0].set_failed(false);
    let why = gpu_0_out_of_service(&cluster, |why| why == Some("cordoned")).await;
    assert_eq!(why.as_deref(), Some("cordoned"));
    assert_eq!(round().await, Phase::Pending, "placed on a cordoned GPU");

    // Failed, then uncordoned: still out of service.
    switches[0].set_failed(true);
    gpu_0_out_of_service(&cluster, |why| why == Some("marked failed")).await;
    cluster.send(cordon(false)).await.unwrap().unwrap();
    assert_eq!(round().await, Phase::Pending, "placed on a failed GPU");

    // Healed: back in service.
    switches[0].set_failed(false);
    assert_eq!(
        gpu_0_out_of_service(&cluster, |why| why.is_none()).await,
        None
    );
    assert_eq!(round().await, Phase::Running);
}
