//! A control plane that restarts while workers keep running re-adopts them (no restart, no lost work,
//! no second start); jobs whose workers died are requeued from their last checkpoint.

mod support;

use std::sync::{Arc, Mutex};

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, GetStats, JobRequest, ListNodes, Poll, Round, ShowJob,
};
use gangway_actors::executor::{
    Executor, ExecutorError, Launch, Segment, SimExecutor, WorkerEvent,
};
use gangway_actors::ledger::Ledger;
use gangway_actors::lifecycle::Phase;
use gangway_core::job::JobId;

use support::Outliving;

fn start(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    workers: &Outliving,
) -> actix::Addr<ClusterActor> {
    start_on("v100=1x4", journal, clock, Box::new(workers.clone()))
}

/// A FIFO control plane on the cluster `spec` (servers of 4 GPUs), journaling to `journal`.
fn start_on(
    spec: &str,
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    executor: Box<dyn Executor>,
) -> actix::Addr<ClusterActor> {
    let parts = support::parts(spec, 4, "fifo", executor);
    let mut settings = support::virtual_time(clock);
    settings.journal = Some(journal.to_owned());
    ClusterActor::start(parts, settings).unwrap()
}

fn request(gpus: u32, work: f64) -> JobRequest {
    JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", gpus, work)
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
            support::submit(&cluster, request(gpus, work)).await;
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

    let (_journal, recovered) = gangway_actors::ledger::open_journal(&journal).unwrap();
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

/// Workers that crash at every launch, as a job with a bug in its data loader does.
#[derive(Clone, Default)]
struct Crashing(Arc<Mutex<Vec<(JobId, u64)>>>);

impl Executor for Crashing {
    fn launch(&mut self, launch: &Launch, _: f64) -> Result<(), ExecutorError> {
        self.0.lock().unwrap().push((launch.job, launch.attempt));
        Ok(())
    }
    fn stop(&mut self, job: JobId, _: f64) -> Result<f64, ExecutorError> {
        Err(ExecutorError::NotRunning(job))
    }
    fn retune(&mut self, _: JobId, _: f64, _: &[Segment], _: f64) {}
    fn alive(&mut self, _: JobId, _: u64) -> bool {
        false
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        self.0
            .lock()
            .unwrap()
            .drain(..)
            .map(|(job, attempt)| WorkerEvent::Failed {
                job,
                attempt,
                at: now,
                error: "segfault".into(),
                retryable: true,
            })
            .collect()
    }
    fn next_event(&self) -> Option<f64> {
        None
    }
}

fn start_with(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    executor: Box<dyn Executor>,
) -> actix::Addr<ClusterActor> {
    let parts = support::parts("v100=1x4", 4, "fifo", executor);
    let mut settings = support::virtual_time(clock);
    settings.journal = Some(journal.to_owned());
    settings.max_restarts = 3;
    ClusterActor::start(parts, settings).unwrap()
}

#[test]
fn the_restart_budget_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    // Two crashes before the restart, of a budget of three.
    actix::System::new().block_on(async {
        let cluster = start_with(&journal, &clock, Box::new(Crashing::default()));
        support::submit(&cluster, request(2, 100.0)).await;
        for t in [0.0, 10.0] {
            clock.set(t);
            cluster.send(Round).await.unwrap();
            cluster.send(Poll).await.unwrap();
        }
    });
    // After it: the third crash is still retried, the fourth is one too many.
    let phases = actix::System::new().block_on(async {
        let cluster = start_with(&journal, &clock, Box::new(Crashing::default()));
        let mut phases = Vec::new();
        for t in [20.0, 30.0] {
            clock.set(t);
            cluster.send(Round).await.unwrap();
            cluster.send(Poll).await.unwrap();
            phases.push(
                cluster
                    .send(ShowJob(JobId(0)))
                    .await
                    .unwrap()
                    .unwrap()
                    .phase,
            );
        }
        phases
    });
    assert_eq!(phases, [Phase::Preempted, Phase::Failed]);
}

#[test]
fn cordons_of_gpus_the_restarted_cluster_lacks_are_not_counted_out_of_service() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let on = |spec: &str| start_on(spec, &journal, &clock, Box::new(SimExecutor::default()));
    // GPU 1 and GPU 6 cordoned on two servers; then the daemon restarts on the first alone.
    actix::System::new().block_on(async {
        let cluster = on("v100=2x4");
        let cordon = gangway_actors::cluster::Cordon {
            gpus: vec![1, 6],
            cordoned: true,
        };
        cluster.send(cordon).await.unwrap().unwrap();
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!((stats.gpus, stats.gpus_out_of_service), (8, 2));
    });
    actix::System::new().block_on(async {
        let cluster = on("v100=1x4");
        let stats = cluster.send(GetStats).await.unwrap();
        assert_eq!(
            (stats.gpus, stats.gpus_out_of_service),
            (4, 1),
            "only GPU 1 is this cluster's"
        );
        let nodes = cluster.send(ListNodes).await.unwrap();
        let out: Vec<u32> = (nodes.iter().flat_map(|n| &n.out_of_service))
            .map(|(g, _)| *g)
            .collect();
        assert_eq!(out, [1]);
    });
}

#[test]
fn cordoned_gpus_stay_out_of_service_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let workers = Outliving(Arc::new(Mutex::new(SimExecutor::new(1e9))));
    actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        cluster
            .send(gangway_actors::cluster::Cordon {
                gpus: vec![0, 1],
                cordoned: true,
            })
            .await
            .unwrap()
            .unwrap();
    });
    let (first, second) = actix::System::new().block_on(async {
        let cluster = start(&journal, &clock, &workers);
        for _ in 0..2 {
            support::submit(&cluster, request(2, 1000.0)).await;
        }
        cluster.send(Round).await.unwrap();
        let show = |id| {
            let cluster = cluster.clone();
            async move { cluster.send(ShowJob(JobId(id))).await.unwrap().unwrap() }
        };
        (show(0).await, show(1).await)
    });
    assert_eq!(first.phase, Phase::Running);
    assert_eq!(first.placement, [2, 3], "only the GPUs in service");
    assert_eq!(second.phase, Phase::Pending);
    let why = second.waiting.expect("a waiting job says why");
    assert!(why.contains("2 out of service"), "{why}");
}

/// A job the restarted cluster cannot run fails, and workers of its that still run are stopped
/// first: the ledger gives its GPUs back, and another job may be placed on them.
#[test]
fn a_job_that_cannot_run_after_a_restart_has_its_live_workers_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let workers = Outliving(Arc::new(Mutex::new(SimExecutor::new(50.0))));
    let on = |spec: &str| start_on(spec, &journal, &clock, Box::new(workers.clone()));
    let alive = || (0..4).any(|attempt| workers.0.lock().unwrap().alive(JobId(0), attempt));
    // Job 0 runs on both servers' eight GPUs; the daemon restarts on the first server alone.
    actix::System::new().block_on(async {
        let cluster = on("v100=2x4");
        support::submit(&cluster, request(8, 1000.0)).await;
        cluster.send(Round).await.unwrap();
        let job = cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap();
        assert_eq!((job.phase, job.placement.len()), (Phase::Running, 8));
    });
    assert!(alive(), "its workers outlive the daemon");
    clock.set(100.0);
    let failed = actix::System::new().block_on(async {
        let cluster = on("v100=1x4");
        cluster.send(ShowJob(JobId(0))).await.unwrap().unwrap()
    });
    assert_eq!(failed.phase, Phase::Failed);
    assert!(
        !alive(),
        "its workers are stopped before its GPUs are given back"
    );
}

/// A command of `uid`'s (another user's than the daemon's, as a root daemon runs it).
fn as_user(uid: u32) -> gangway_actors::executor::RunCommand {
    gangway_actors::executor::RunCommand {
        args: vec!["train.py".into()],
        cwd: "/".into(),
        env: Default::default(),
        log: None,
        user: Some(gangway_actors::executor::RunAs { uid, gid: uid }),
    }
}

/// A control plane on one 4-GPU server, journaled in `journal` and snapshotted every `snapshot_every`
/// records, its settings otherwise as `settings` leaves them.
fn journaled(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    snapshot_every: u64,
    settings: impl Fn(&mut gangway_actors::cluster::Settings),
) -> actix::Addr<ClusterActor> {
    let parts = support::parts("v100=1x4", 4, "fifo", Box::new(SimExecutor::new(50.0)));
    let mut all = support::virtual_time(clock);
    all.journal = Some(journal.to_path_buf());
    all.snapshot_every = snapshot_every;
    settings(&mut all);
    ClusterActor::start(parts, all).unwrap()
}

/// Submits `request` under idempotency key `key`, if given.
fn submit(
    cluster: &actix::Addr<ClusterActor>,
    request: JobRequest,
    key: Option<&str>,
) -> actix::prelude::Request<ClusterActor, gangway_actors::cluster::Submit> {
    cluster.send(gangway_actors::cluster::Submit {
        request,
        at: None,
        key: key.map(str::to_owned),
    })
}

/// Jobs that run as another user than the daemon's (on a root daemon, a socket peer's) are bounded
/// per user, and the count is the journal's: after a restart (from a snapshot and the records after
/// it) one more is still refused, until one of theirs ends. Other users, and the daemon's own
/// jobs, are not held back by it.
#[test]
fn another_users_unfinished_jobs_are_bounded_across_a_restart() {
    use gangway_actors::cluster::{Cancel, Refusal};
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let start = || journaled(&journal, &clock, 3, |s| s.max_jobs_per_user = 2);
    let theirs = |uid: u32| JobRequest {
        run: Some(as_user(uid)),
        ..request(4, 1000.0)
    };
    let submit = |cluster: &actix::Addr<ClusterActor>, request| submit(cluster, request, None);
    let too_many = Err(Refusal::TooMany {
        uid: 1000,
        unfinished: 2,
    });
    actix::System::new().block_on(async {
        let cluster = start();
        for _ in 0..2 {
            assert!(submit(&cluster, theirs(1000)).await.unwrap().is_ok());
        }
        assert_eq!(submit(&cluster, theirs(1000)).await.unwrap(), too_many);
        assert!(submit(&cluster, theirs(1001)).await.unwrap().is_ok());
        assert!(submit(&cluster, request(1, 10.0)).await.unwrap().is_ok());
    });
    actix::System::new().block_on(async {
        let cluster = start();
        assert_eq!(submit(&cluster, theirs(1000)).await.unwrap(), too_many);
        cluster.send(Cancel(JobId(0))).await.unwrap().unwrap();
        assert!(submit(&cluster, theirs(1000)).await.unwrap().is_ok());
        assert_eq!(submit(&cluster, theirs(1000)).await.unwrap(), too_many);
    });
}

/// Submissions of one user that arrive together are journaled together: those still waiting to be
/// journaled count toward the user's bounds, jobs and bytes, as the journaled ones do.
#[test]
fn another_users_submissions_waiting_to_be_journaled_count_toward_their_bounds() {
    use gangway_actors::cluster::Refusal;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(VirtualClock::new(0.0));
    let big = || {
        let mut run = as_user(1000);
        run.env.insert("DATA".into(), "x".repeat(100_000));
        run
    };
    let one = big().bytes() as u64;
    for (jobs, bytes, refusal) in [
        (
            2,
            u64::MAX,
            Refusal::TooMany {
                uid: 1000,
                unfinished: 2,
            },
        ),
        (
            u32::MAX,
            2 * one + one / 2,
            Refusal::TooLarge {
                uid: 1000,
                bytes: 2 * one,
                limit: 2 * one + one / 2,
            },
        ),
    ] {
        let journal = dir.path().join(format!("journal-{jobs}"));
        let answers = actix::System::new().block_on(async {
            let cluster = journaled(&journal, &clock, 100, |s| {
                s.max_jobs_per_user = jobs;
                s.max_command_bytes_per_user = bytes;
            });
            let theirs = || JobRequest {
                run: Some(big()),
                ..request(4, 1000.0)
            };
            // Sent before any is answered: one batch.
            let sent: Vec<_> = (0..3).map(|_| submit(&cluster, theirs(), None)).collect();
            futures::future::join_all(sent).await
        });
        let answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            answers.iter().filter(|a| a.is_ok()).count(),
            2,
            "{answers:?}"
        );
        assert_eq!(answers[2], Err(refusal));
    }
}

/// What the commands of another user's unfinished jobs hold is bounded too (each is kept in memory
/// and in the journal while its job lives), and counted from the journal across a restart; an
/// ended job's command is forgotten but its idempotency key still answers the same request.
#[test]
fn another_users_commands_are_bounded_in_bytes_across_a_restart() {
    use gangway_actors::cluster::{Cancel, Refusal};
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let mut big = as_user(1000);
    big.env.insert("DATA".into(), "x".repeat(100_000));
    let one = big.bytes() as u64;
    let start = || {
        journaled(&journal, &clock, 3, |s| {
            s.max_command_bytes_per_user = 2 * one + one / 2
        })
    };
    let theirs = || JobRequest {
        run: Some(big.clone()),
        ..request(4, 1000.0)
    };
    let too_large = Err(Refusal::TooLarge {
        uid: 1000,
        bytes: 2 * one,
        limit: 2 * one + one / 2,
    });
    actix::System::new().block_on(async {
        let cluster = start();
        assert_eq!(
            submit(&cluster, theirs(), Some("1000:a")).await.unwrap(),
            Ok(JobId(0))
        );
        assert!(submit(&cluster, theirs(), None).await.unwrap().is_ok());
        assert_eq!(submit(&cluster, theirs(), None).await.unwrap(), too_large);
        // Others are not held back by it.
        assert!(
            submit(&cluster, request(1, 10.0), None)
                .await
                .unwrap()
                .is_ok()
        );
    });
    actix::System::new().block_on(async {
        let cluster = start();
        assert_eq!(submit(&cluster, theirs(), None).await.unwrap(), too_large);
        cluster.send(Cancel(JobId(0))).await.unwrap().unwrap();
        // Ended, its arguments and environment forgotten: its key still answers the request it
        // was made with, and still refuses one in another directory.
        assert_eq!(
            submit(&cluster, theirs(), Some("1000:a")).await.unwrap(),
            Ok(JobId(0))
        );
        let mut other = theirs();
        other.run.as_mut().unwrap().cwd = "/tmp".into();
        assert!(matches!(
            submit(&cluster, other, Some("1000:a")).await.unwrap(),
            Err(Refusal::KeyReused { .. })
        ));
        assert!(submit(&cluster, theirs(), None).await.unwrap().is_ok());
        assert_eq!(submit(&cluster, theirs(), None).await.unwrap(), too_large);
    });
}

/// Job types are kept for good, so one user other than the daemon's may name only so many the
/// control plane did not know (before, one could name the 10,000 it keeps, after which nobody,
/// root included, could name a new one); the count is rebuilt from the journal at a restart.
#[test]
fn another_user_names_only_so_many_new_job_types_across_a_restart() {
    use gangway_actors::cluster::Refusal;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let start = || journaled(&journal, &clock, 50, |_| {});
    let typed = |uid: Option<u32>, job_type: String| JobRequest {
        job_type,
        run: uid.map(as_user),
        ..request(1, 1000.0)
    };
    let submit = |cluster: &actix::Addr<ClusterActor>, request| submit(cluster, request, None);
    let refused = |answer: Result<_, Refusal>| match answer {
        Err(Refusal::Invalid { field, problem }) => Some((field, problem)),
        _ => None,
    };
    let past_the_limit = Some((
        "job_type",
        "uid 1000 has named 64 job types this control plane did not know, the most one user \
         may: name one it knows"
            .to_owned(),
    ));
    actix::System::new().block_on(async {
        let cluster = start();
        for k in 0..64 {
            let answer = submit(&cluster, typed(Some(1000), format!("mine-{k}"))).await;
            assert!(answer.unwrap().is_ok(), "type {k}");
        }
        let answer = submit(&cluster, typed(Some(1000), "mine-64".into())).await;
        assert_eq!(refused(answer.unwrap()), past_the_limit);
        // A type it knows, theirs or another's, still goes; others and the operator still name
        // new ones.
        assert!(
            submit(&cluster, typed(Some(1000), "mine-3".into()))
                .await
                .unwrap()
                .is_ok()
        );
        assert!(
            submit(&cluster, typed(Some(1001), "theirs".into()))
                .await
                .unwrap()
                .is_ok()
        );
        assert!(
            submit(&cluster, typed(None, "operators".into()))
                .await
                .unwrap()
                .is_ok()
        );
    });
    actix::System::new().block_on(async {
        let cluster = start();
        let answer = submit(&cluster, typed(Some(1000), "mine-64".into())).await;
        assert_eq!(refused(answer.unwrap()), past_the_limit);
        assert!(
            submit(&cluster, typed(Some(1001), "theirs-2".into()))
                .await
                .unwrap()
                .is_ok()
        );
    });
}
