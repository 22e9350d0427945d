//! What the workers report is the truth and the model only predicts: a job's reported progress is what
//! the API shows and what the policy counts as its remaining work. What they measure of their training
//! becomes the job's goodput model (the simulator's `Learned`), journaled: a restart keeps it, also
//! past snapshots, which hold the ledger alone.

mod support;

use std::sync::{Arc, Mutex};

use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{
    ClusterActor, GetViews, JobRequest, LearnedSteps, Poll, Round, ShowJob,
};
use gangway_actors::executor::{Executor, ExecutorError, Launch, Measured, Segment, WorkerEvent};
use gangway_actors::ledger::{Record, Start};
use gangway_actors::lifecycle::Phase;
use gangway_core::cluster::{GpuId, GpuTypeId};
use gangway_core::job::JobId;

/// The last launch, the steps to report at the next poll, and why launches fail, while they do.
#[derive(Default)]
struct Reports {
    launched: Option<(JobId, u64)>,
    due: Option<(f64, Option<Measured>)>,
    refusing: Option<String>,
    /// Launches of this job alone fail, while `refusing` says why (without it, every job's do).
    refused: Option<JobId>,
    /// Launches are put off this many seconds, while `refusing` says why.
    put_off: Option<f64>,
    /// Launches asked for, whatever came of them.
    tries: u32,
    /// An attempt taken to be alive though never launched here (a restarted control plane's).
    alive: Option<(JobId, u64)>,
}

/// Simulated workers that also report the progress the test gives them, and fail launches while
/// the test says so.
#[derive(Clone, Default)]
struct Reporting {
    inner: support::Outliving,
    reports: Arc<Mutex<Reports>>,
}

impl Reporting {
    fn report(&self, steps_done: f64, measured: Option<Measured>) {
        self.reports.lock().unwrap().due = Some((steps_done, measured));
    }
}

impl Executor for Reporting {
    fn launch(&mut self, launch: &Launch, now: f64) -> Result<(), ExecutorError> {
        let mut reports = self.reports.lock().unwrap();
        reports.tries += 1;
        if let Some(reason) = reports.refusing.clone()
            && reports.refused.is_none_or(|job| job == launch.job)
        {
            let job = launch.job;
            return Err(match reports.put_off {
                Some(after) => ExecutorError::Later { job, reason, after },
                None => ExecutorError::Launch { job, reason },
            });
        }
        reports.launched = Some((launch.job, launch.attempt));
        self.inner.launch(launch, now)
    }
    fn stop(&mut self, job: JobId, now: f64) -> Result<f64, ExecutorError> {
        self.inner.stop(job, now)
    }
    fn retune(&mut self, job: JobId, steps_per_second: f64, pace: &[Segment], now: f64) {
        self.inner.retune(job, steps_per_second, pace, now)
    }
    fn alive(&mut self, job: JobId, attempt: u64) -> bool {
        self.reports.lock().unwrap().alive == Some((job, attempt)) || self.inner.alive(job, attempt)
    }
    fn poll(&mut self, now: f64) -> Vec<WorkerEvent> {
        let mut events = self.inner.poll(now);
        let mut reports = self.reports.lock().unwrap();
        if let (Some((job, attempt)), Some((steps_done, measured))) =
            (reports.launched, reports.due.take())
        {
            events.push(WorkerEvent::Progressed {
                job,
                attempt,
                steps_done,
                measured,
            });
        }
        events
    }
    fn next_event(&self) -> Option<f64> {
        self.inner.next_event()
    }
}

/// A control plane on two V100s, run by `workers`; with a journal, it snapshots after every batch.
fn start(
    clock: &Arc<VirtualClock>,
    workers: &Reporting,
    journal: Option<&std::path::Path>,
) -> actix::Addr<ClusterActor> {
    let parts = support::parts("v100=1x2", 2, "srtf", Box::new(workers.clone()));
    let mut settings = support::virtual_time(clock);
    settings.journal = journal.map(std::path::Path::to_owned);
    settings.snapshot_every = 1;
    ClusterActor::start(parts, settings).unwrap()
}

/// Submits a job of 1,000 units on both GPUs.
async fn submit(cluster: &actix::Addr<ClusterActor>) -> JobId {
    let request = JobRequest {
        tenant: "a".into(),
        ..JobRequest::new("toy", 2, 1000.0)
    };
    support::submit(cluster, request).await
}

/// A job whose start failed (its program's check did not come back, say) waits, and says why, until a
/// start succeeds.
#[actix::test]
async fn a_job_whose_start_failed_says_why_while_it_waits() {
    let workers = Reporting::default();
    let clock = Arc::new(VirtualClock::new(0.0));
    let cluster = start(&clock, &workers, None);
    let job = submit(&cluster).await;
    let why = "its program's check took longer than 3 s";
    workers.reports.lock().unwrap().refusing = Some(why.into());
    cluster.send(Round).await.unwrap();
    let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(shown.phase, Phase::Pending);
    let waiting = shown.waiting.expect("it says why it waits");
    assert!(
        waiting.ends_with(&format!("its last start failed: {why}")),
        "{waiting}"
    );
    workers.reports.lock().unwrap().refusing = None;
    clock.set(60.0);
    cluster.send(Round).await.unwrap();
    let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(shown.phase, Phase::Running);
    assert_eq!(shown.waiting, None);
}

/// A job whose starts keep failing pauses before each next try, longer each time, out of its
/// policy's sight: the GPUs it was granted go to the job behind it meanwhile, instead of idling
/// round after round.
#[actix::test]
async fn a_job_whose_starts_keep_failing_leaves_its_gpus_to_the_next_meanwhile() {
    let workers = Reporting::default();
    let clock = Arc::new(VirtualClock::new(0.0));
    let cluster = start(&clock, &workers, None);
    let first = submit(&cluster).await;
    let request = JobRequest {
        tenant: "b".into(),
        ..JobRequest::new("toy", 2, 5000.0)
    };
    let next = support::submit(&cluster, request).await;
    {
        let mut reports = workers.reports.lock().unwrap();
        reports.refusing = Some("its program's file system did not answer".into());
        reports.refused = Some(first);
    }
    // Shortest first: the first job is granted both GPUs, and its start fails.
    cluster.send(Round).await.unwrap();
    assert_eq!(phase(&cluster, next).await, Phase::Pending);
    clock.set(1.0);
    cluster.send(Round).await.unwrap();
    assert_eq!(
        phase(&cluster, next).await,
        Phase::Running,
        "the next job runs while the first pauses"
    );
    let shown = cluster.send(ShowJob(first)).await.unwrap().unwrap();
    let waiting = shown.waiting.expect("it says why it waits");
    assert!(
        waiting.contains("pauses before its next try")
            && waiting.ends_with("its last start failed: its program's file system did not answer"),
        "{waiting}"
    );
    // Out of the policy's queue while it pauses, but still among the jobs waiting (`GET /queue`,
    // the dashboard's queue), after the policy's: the queue is taken at most once a second.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    cluster.send(Round).await.unwrap();
    let views = cluster.send(GetViews).await.unwrap();
    assert_eq!(views.latest().queue().jobs, [first]);
    // Past its first pause (15 s) it is granted again, preempting the longer job, and fails again;
    // its next pause is 30 s, and the longer job has the GPUs back meanwhile.
    for (at, next_phase) in [
        (20.0, Phase::Preempted),
        (30.0, Phase::Running),
        (40.0, Phase::Running),
    ] {
        clock.set(at);
        cluster.send(Round).await.unwrap();
        assert_eq!(phase(&cluster, first).await, Phase::Pending, "at {at} s");
        assert_eq!(phase(&cluster, next).await, next_phase, "at {at} s");
    }
    workers.reports.lock().unwrap().refusing = None;
    // The second pause (30 s from 20 s) is over at 50 s: it starts.
    clock.set(51.0);
    cluster.send(Round).await.unwrap();
    cluster.send(Round).await.unwrap();
    assert_eq!(phase(&cluster, first).await, Phase::Running);
    let shown = cluster.send(ShowJob(first)).await.unwrap().unwrap();
    assert_eq!(shown.waiting, None);
}

/// A job whose own starts keep failing fails after [`FailedStarts::MOST_IN_A_ROW`] of them in a
/// row (after about three and a half hours of pauses), rather than be granted GPUs, and preempt
/// others for them, forever.
#[actix::test]
async fn a_job_whose_starts_fail_for_hours_fails() {
    let workers = Reporting::default();
    let clock = Arc::new(VirtualClock::new(0.0));
    let cluster = start(&clock, &workers, None);
    let job = submit(&cluster).await;
    workers.reports.lock().unwrap().refusing = Some("its file system did not answer".into());
    let mut at = 0.0;
    for failed in 1..=20 {
        assert_eq!(
            phase(&cluster, job).await,
            Phase::Pending,
            "after {failed} tries"
        );
        // Past the longest pause each time: every round grants it again.
        at += 901.0;
        clock.set(at);
        cluster.send(Round).await.unwrap();
    }
    // The last failure's end is carried out after its round.
    cluster.send(Round).await.unwrap();
    let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(
        phase(&cluster, job).await,
        Phase::Failed,
        "{:?}",
        shown.waiting
    );
}

/// Why the launches of [`journaled_and_failing`]'s workers fail.
const WHY: &str = "its file system did not answer";

/// A directory for a journal (kept while the first value lives), its path, a clock at 0, and
/// workers whose launches fail for [`WHY`].
fn journaled_and_failing() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Arc<VirtualClock>,
    Reporting,
) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let workers = Reporting::default();
    workers.reports.lock().unwrap().refusing = Some(WHY.into());
    (dir, journal, Arc::new(VirtualClock::new(0.0)), workers)
}

/// A restart keeps a job's starts that failed in a row (journaled, and in the snapshots): the
/// pause its last failure left it is kept, and it fails at its
/// [`FailedStarts::MOST_IN_A_ROW`]th failure, not as many more after each restart; also when a
/// try it is not blamed for (put off by the executor) came between.
#[test]
fn a_restart_keeps_a_jobs_failed_starts_and_its_pause() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let tries = || workers.reports.lock().unwrap().tries;

    let (job, last) = fail_19_times(&journal, &clock, &workers);
    assert_eq!(tries(), 19);

    // Restarted within the last pause (the longest, 900 s): not tried before it ends. Then a try
    // the executor puts off (not counted), and another restart.
    let (waiting, tried_in_pause) = actix::System::new().block_on(async {
        clock.set(last + 100.0);
        let cluster = start(&clock, &workers, Some(&journal));
        cluster.send(Round).await.unwrap();
        let waiting = cluster.send(ShowJob(job)).await.unwrap().unwrap().waiting;
        let tried_in_pause = tries() > 19;
        workers.reports.lock().unwrap().put_off = Some(100.0);
        clock.set(last + 901.0);
        cluster.send(Round).await.unwrap();
        (waiting, tried_in_pause)
    });
    let waiting = waiting.expect("it says why it waits");
    assert!(
        waiting.ends_with(&format!("its last start failed: {WHY}")),
        "{waiting}"
    );
    assert!(!tried_in_pause, "tried within its pause");
    assert_eq!(tries(), 20, "the put-off try");

    // Its next failure of its own is its 20th in a row: it fails.
    workers.reports.lock().unwrap().put_off = None;
    let ended = restart(&journal, &clock, &workers, (job, last + 1100.0), 2);
    assert_eq!(tries(), 21);
    assert_eq!(
        ended,
        Phase::Failed,
        "not failed at its 20th failure in a row"
    );
}

/// A job whose last failed start, its 20th in a row, was journaled but whose failure was not (the
/// daemon stopped in between) fails when the control plane starts again, without another try.
#[test]
fn a_job_that_failed_to_start_too_often_before_a_restart_fails_at_it() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let tries = || workers.reports.lock().unwrap().tries;
    let job = actix::System::new().block_on(async {
        let cluster = start(&clock, &workers, Some(&journal));
        submit(&cluster).await
    });
    // What the 20th failure journals, as if the daemon had stopped right after writing it.
    let (mut written, _) = gangway_actors::ledger::open_journal(&journal).unwrap();
    written
        .append(&Record::StartFailed {
            job,
            at: 10.0,
            count: 20,
            why: WHY.into(),
        })
        .unwrap();
    drop(written);
    let shown = actix::System::new().block_on(async {
        clock.set(20.0);
        let cluster = start(&clock, &workers, Some(&journal));
        // A round first: the job failed in the recovery, before any round could grant it.
        cluster.send(Round).await.unwrap();
        cluster.send(ShowJob(job)).await.unwrap().unwrap()
    });
    assert_eq!(shown.phase, Phase::Failed, "{:?}", shown.waiting);
    assert_eq!(tries(), 0, "tried again");
}

/// The crash between a try's `Started` (journaled before its launch) and its failure: the count
/// journaled before it stands at the restart, and the job fails at its 20th failure in a row.
#[test]
fn a_try_cut_short_by_a_crash_keeps_the_count() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let tries = || workers.reports.lock().unwrap().tries;
    let (job, last) = fail_19_times(&journal, &clock, &workers);
    // The 20th try's start, journaled; the daemon stopped before its launch.
    journal_a_try(&journal, job, last + 901.0);
    let ended = restart(&journal, &clock, &workers, (job, last + 1000.0), 2);
    assert_eq!(tries(), 20);
    assert_eq!(ended, Phase::Failed, "the count was lost with the try");
}

/// A job that starts after failed starts of its own journals its count back to 0: a restart later
/// does not give it back (a job preempted afterwards would otherwise fail at its next failure).
#[test]
fn a_start_that_succeeds_ends_the_journaled_count() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let (job, last) = fail_19_times(&journal, &clock, &workers);
    workers.reports.lock().unwrap().refusing = None;
    let running = actix::System::new().block_on(async {
        clock.set(last + 901.0);
        let cluster = start(&clock, &workers, Some(&journal));
        cluster.send(Round).await.unwrap();
        phase(&cluster, job).await
    });
    assert_eq!(running, Phase::Running);
    let count = journaled_count(&journal, job);
    assert!(
        count.is_none_or(|count| count == 0),
        "a count of {count:?} outlives the start"
    );
}

/// A job found running at a restart (its start succeeded, and the daemon stopped before it
/// journaled that the count ended) has no count: the recovery journals it back to 0.
#[test]
fn a_job_found_running_at_a_restart_has_no_count() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let (job, last) = fail_19_times(&journal, &clock, &workers);
    journal_a_try(&journal, job, last + 901.0);
    workers.reports.lock().unwrap().alive = Some((job, TRIED));
    let running = restart(&journal, &clock, &workers, (job, last + 1000.0), 0);
    assert_eq!(running, Phase::Running, "not re-adopted");
    let count = journaled_count(&journal, job);
    assert!(
        count.is_none_or(|count| count == 0),
        "a count of {count:?} outlives the start"
    );
}

/// Starts the control plane again at `at` and runs `rounds` rounds (a failure in one is carried
/// out in the next); `job`'s phase then.
fn restart(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    workers: &Reporting,
    (job, at): (JobId, f64),
    rounds: usize,
) -> Phase {
    actix::System::new().block_on(async {
        clock.set(at);
        let cluster = start(clock, workers, Some(journal));
        for _ in 0..rounds {
            cluster.send(Round).await.unwrap();
        }
        phase(&cluster, job).await
    })
}

/// A job the journal says runs, whose 20th failure in a row was journaled before its last start,
/// is re-adopted at a restart, not failed while its workers run.
#[test]
fn a_job_found_running_after_its_20th_failure_is_re_adopted() {
    let (_dir, journal, clock, workers) = journaled_and_failing();
    let (job, last) = fail_19_times(&journal, &clock, &workers);
    let (mut written, _) = gangway_actors::ledger::open_journal(&journal).unwrap();
    let failed = Record::StartFailed {
        job,
        at: last + 901.0,
        count: 20,
        why: WHY.into(),
    };
    written.append(&failed).unwrap();
    drop(written);
    journal_a_try(&journal, job, last + 902.0);
    workers.reports.lock().unwrap().alive = Some((job, TRIED));
    let running = restart(&journal, &clock, &workers, (job, last + 1000.0), 0);
    assert_eq!(running, Phase::Running);
}

/// The attempt of the try [`journal_a_try`] journals.
const TRIED: u64 = 1_000;

/// Journals a start of `job` on both GPUs at `at` (attempt [`TRIED`]), as a round does before its
/// launch, while no control plane runs.
fn journal_a_try(journal: &std::path::Path, job: JobId, at: f64) {
    let (mut written, _) = gangway_actors::ledger::open_journal(journal).unwrap();
    let tried = Start {
        job,
        attempt: TRIED,
        gpu_type: GpuTypeId(0),
        gpus: [GpuId(0), GpuId(1)].into_iter().collect(),
        partner: None,
        at,
    };
    written.append(&Record::Started(tried)).unwrap();
}

/// The count of `job`'s failed starts a restart would read from `journal`: its last
/// `StartFailed`, in the snapshot's records or the journal's after it.
fn journaled_count(journal: &std::path::Path, job: JobId) -> Option<u32> {
    let (_, recovered) = gangway_actors::ledger::open_journal(journal).unwrap();
    let beside = recovered
        .snapshot
        .map(|(_, beside)| beside)
        .unwrap_or_default();
    beside
        .iter()
        .chain(recovered.records.iter().map(|(_, record)| record))
        .rev()
        .find_map(|record| match record {
            Record::StartFailed { job: j, count, .. } if *j == job => Some(*count),
            _ => None,
        })
}

/// Submits a job and fails its starts 19 times in a row, each past the longest pause; returns it
/// and when the last failed.
fn fail_19_times(
    journal: &std::path::Path,
    clock: &Arc<VirtualClock>,
    workers: &Reporting,
) -> (JobId, f64) {
    actix::System::new().block_on(async {
        let cluster = start(clock, workers, Some(journal));
        let job = submit(&cluster).await;
        let mut at = 0.0;
        for _ in 0..19 {
            at += 901.0;
            clock.set(at);
            cluster.send(Round).await.unwrap();
        }
        assert_eq!(phase(&cluster, job).await, Phase::Pending);
        (job, at)
    })
}

/// A launch the executor puts off (it rests the job's user) is not the job's failure: the job
/// waits as long as the executor says, and its next failure of its own pauses it for the first
/// pause, not a doubled one.
#[actix::test]
async fn a_launch_put_off_waits_as_long_as_the_executor_says_and_is_not_counted() {
    let workers = Reporting::default();
    let clock = Arc::new(VirtualClock::new(0.0));
    let cluster = start(&clock, &workers, None);
    let job = submit(&cluster).await;
    {
        let mut reports = workers.reports.lock().unwrap();
        reports.refusing = Some("its user rests".into());
        reports.put_off = Some(100.0);
    }
    cluster.send(Round).await.unwrap();
    for at in [50.0, 99.0] {
        clock.set(at);
        cluster.send(Round).await.unwrap();
        assert_eq!(phase(&cluster, job).await, Phase::Pending, "at {at} s");
    }
    // Granted again at 100 s, and its own launch fails: its first pause, 15 s.
    workers.reports.lock().unwrap().put_off = None;
    clock.set(100.0);
    cluster.send(Round).await.unwrap();
    assert_eq!(phase(&cluster, job).await, Phase::Pending);
    workers.reports.lock().unwrap().refusing = None;
    clock.set(114.0);
    cluster.send(Round).await.unwrap();
    assert_eq!(phase(&cluster, job).await, Phase::Pending, "paused still");
    clock.set(115.0);
    cluster.send(Round).await.unwrap();
    assert_eq!(phase(&cluster, job).await, Phase::Running);
}

async fn phase(cluster: &actix::Addr<ClusterActor>, job: JobId) -> Phase {
    cluster.send(ShowJob(job)).await.unwrap().unwrap().phase
}

#[actix::test]
async fn reported_progress_replaces_the_models_estimate() {
    let workers = Reporting::default();
    let clock = Arc::new(VirtualClock::new(0.0));
    let cluster = start(&clock, &workers, None);
    let job = submit(&cluster).await;
    cluster.send(Round).await.unwrap();
    // 100 s in, the model says 10%; the workers say 70%, and what they measured of their training.
    clock.set(100.0);
    let measured = Measured {
        steps: 70,
        step_seconds: 1.5,
        sync_seconds: 0.5,
        replica_batch: 64,
        replicas: 2,
        accum_steps: 1,
        noise_scale: Some(900.0),
        grad_sqr: Some(0.25),
        grad_var: Some(225.0),
    };
    workers.report(700.0, Some(measured));
    cluster.send(Poll).await.unwrap();
    let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert!(
        (shown.progress - 0.7).abs() < 1e-9,
        "shown {} instead of the reported 0.7",
        shown.progress
    );
    assert_eq!(
        shown.measured,
        Some(measured),
        "the API shows what they measured"
    );
    // A report without a measurement keeps the last one.
    workers.report(700.0, None);
    cluster.send(Poll).await.unwrap();
    let shown = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert_eq!(shown.measured, Some(measured));
    // Time goes on from the report: 50 s more at 1 unit/s.
    clock.set(150.0);
    cluster.send(Round).await.unwrap();
    let later = cluster.send(ShowJob(job)).await.unwrap().unwrap();
    assert!(
        (later.progress - 0.75).abs() < 1e-9,
        "shown {} after 50 s more",
        later.progress
    );
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
    // Shared by the control plane's two runs: its workers outlive it.
    let workers = Reporting::default();

    let seen = actix::System::new().block_on(async {
        let cluster = start(&clock, &workers, Some(&journal));
        let job = submit(&cluster).await;
        cluster.send(Round).await.unwrap();
        let mut seen = Vec::new();
        // One configuration, measured twice (the first stands), then another batch per replica.
        for (t, report) in [
            (10.0, measured(32, 0.5)),
            (20.0, measured(32, 0.6)),
            (30.0, measured(64, 0.9)),
        ] {
            clock.set(t);
            workers.report(t, Some(report));
            cluster.send(Poll).await.unwrap();
            seen.push(cluster.send(ShowJob(job)).await.unwrap().unwrap().learned);
        }
        seen
    });
    assert_eq!(seen, [learned(1), learned(1), learned(2)]);

    // The control plane restarts on its journal (a snapshot after every record, as far as one at
    // a time allows: it recovers from the last one written and the records after it).
    clock.set(40.0);
    let (after_restart, after_end) = actix::System::new().block_on(async {
        let cluster = start(&clock, &workers, Some(&journal));
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
