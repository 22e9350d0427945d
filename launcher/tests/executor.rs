//! The process executor without torch: a shell script stands in for `elastic-run`, and behaves as
//! its `FAKE_MODE` variable says (finish, fail as a user error, crash, or run until stopped).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod fuse;

use fuse::{FUSE_FLUSH, FUSE_LOOKUP, FUSE_READ, Swallowing};
use gangway_launcher::confine::CorePool;
use gangway_launcher::executor::{
    ATTEMPT_VAR, HOST_RETRY, ProcessExecutor, check_command, reported,
};
use gangway_launcher::process::{Owner, Pinned, processes_with_env, scans_asked};
use gangway_protocol::command::Submitter;
use gangway_protocol::ids::{GpuId, GpuTypeId, JobId};
use gangway_protocol::worker::{
    Executor, ExecutorError, Launch, Measured, Resources, RunCommand, WorkerEvent,
};

const FAKE_ELASTIC_RUN: &str = r#"#!/bin/sh
# Where it started, and the directory and log it was told of; then into that directory, as
# elastic-run enters it.
echo "$(pwd) $GANGWAY_WORKDIR ${GANGWAY_LOG:-none} ${GANGWAY_SCRIPT:-none}" >> "$GANGWAY_WORKDIR/started.log"
cd "$GANGWAY_WORKDIR" || exit 1
# Writes $2 as the whole of the file behind descriptor $1 (one the daemon handed over).
put() { printf '%s\n' "$2" > "/proc/self/fd/$1"; }
echo "$@" >> calls.log
echo "${GANGWAY_POLICY_BATCH:-none} ${GANGWAY_POLICY_PP:-none}" >> chosen.log
echo "${GANGWAY_EXIT_FILE:-none} ${GANGWAY_PROGRESS_FILE:-none}" >> paths.log
case "$FAKE_MODE" in
  finish) put "$GANGWAY_EXIT_FD" '{"code":0,"why":"completed"}'; exit 0 ;;
  usererror) put "$GANGWAY_EXIT_FD" '{"code":2,"why":"SyntaxError in train.py"}'; exit 2 ;;
  crash) exit 9 ;;
  run)
    trap 'put "$GANGWAY_EXIT_FD" "{\"code\":75,\"why\":\"stopped\"}"; exit 75' TERM
    : > "trapped-$GANGWAY_ATTEMPT"
    # What the daemon's policy chose last, as read through the descriptor.
    while true; do tr -d ' ' < "/proc/self/fd/$GANGWAY_POLICY_BATCH_FD" > "batch-seen-$GANGWAY_ATTEMPT"; sleep 0.05; done ;;
  stubborn)
    trap '' TERM; : > "trapped-$GANGWAY_ATTEMPT"
    while true; do sleep 0.05; done ;;
  worker)
    # Ignores SIGTERM, so that its stop must kill it, and starts a worker that reads $FAKE_HELD
    # (which the test holds) and says its pid (whole, once the file is there).
    trap '' TERM; cat "$FAKE_HELD" > /dev/null & echo $! > worker.pid.new; mv worker.pid.new worker.pid
    while true; do sleep 0.05; done ;;
  session)
    # Its pid and session (the sixth field of its stat; its name has no space).
    echo "$$ $(cut -d' ' -f6 /proc/$$/stat)" > session.log
    put "$GANGWAY_EXIT_FD" '{"code":0,"why":"completed"}'; exit 0 ;;
  report)
    # 30 of 120 steps with what goodput needs, then 90 of 120 on the way out (its checkpoint at the
    # stop), with a measurement that does not check out (sync longer than the step).
    # The trap first: a stop may come as soon as the first report is read.
    trap 'put "$GANGWAY_PROGRESS_FD" "{\"step\":90,\"total_steps\":120,\"goodput\":{\"steps\":90,\"step_seconds\":0.5,\"sync_seconds\":0.75,\"replica_batch\":32,\"replicas\":4,\"accum_steps\":2}}"; put "$GANGWAY_EXIT_FD" "{\"code\":75,\"why\":\"stopped\"}"; exit 75' TERM
    put "$GANGWAY_PROGRESS_FD" '{"step":30,"total_steps":120,"goodput":{"steps":30,"step_seconds":0.5,"sync_seconds":0.125,"compute_seconds":0.375,"replica_batch":32,"replicas":4,"accum_steps":2,"grad_sqr":2.0,"grad_var":300.0,"noise_scale":150.0}}'
    while true; do sleep 0.05; done ;;
esac
"#;

/// A directory with the fake `elastic-run`, and an executor over it on devices 5..=8.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("elastic-run");
    std::fs::write(&fake, FAKE_ELASTIC_RUN).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, fake)
}

fn executor(dir: &Path, fake: &Path) -> ProcessExecutor {
    ProcessExecutor::new(fake.to_path_buf(), vec![5, 6, 7, 8], dir.join("runs")).unwrap()
}

fn launch(job: u32, attempt: u64, gpus: &[u32], mode: Option<&str>, dir: &Path) -> Launch {
    Launch {
        job: JobId(job),
        attempt,
        gpu_type: GpuTypeId(0),
        gpus: gpus.iter().map(|&g| GpuId(g)).collect(),
        steps_per_second: 2.0,
        pace: Vec::new(),
        startup_seconds: 0.0,
        remaining_steps: 100.0,
        total_steps: 100.0,
        resources: None,
        batch: None,
        pp: None,
        run: mode.map(|mode| RunCommand {
            args: vec!["--grace".into(), "1".into(), "train.py".into()],
            cwd: dir.to_path_buf(),
            env: std::env::vars()
                .chain([("FAKE_MODE".to_owned(), mode.to_owned())])
                .collect(),
            log: Some(dir.join("job.log")),
            user: None,
        }),
    }
}

fn wait_for_event(exec: &mut ProcessExecutor) -> WorkerEvent {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(event) = exec.poll(1.0).pop() {
            return event;
        }
        assert!(Instant::now() < deadline, "no event within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until attempt `marker` (running or stubborn) has set its SIGTERM trap, which it says in
/// `dir`, for 10 s at most: a SIGTERM sent before then ends it at once.
fn trapping_sigterm(dir: &Path, marker: &str) {
    let said = dir.join(format!("trapped-{marker}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !said.exists() {
        assert!(Instant::now() < deadline, "the attempt never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until no process carries `marker` (a SIGKILL lands asynchronously), for 10 s at most.
fn gone_within(marker: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !attempt_processes(marker).is_empty() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The processes of an attempt, by the marker its executor gave them (asked again while a scan does
/// not answer within its patience, as on a loaded machine).
fn attempt_processes(marker: &str) -> Vec<i32> {
    scanned(
        ATTEMPT_VAR,
        marker,
        Owner::this_user(),
        Duration::from_secs(30),
    )
}

/// `owner`'s processes whose environment has `name=value`, asked again while a scan does not
/// answer, for `within` at most.
fn scanned(name: &str, value: &str, owner: Owner, within: Duration) -> Vec<i32> {
    let deadline = Instant::now() + within;
    loop {
        match processes_with_env(name, value, owner) {
            Some(pids) => return pids,
            None => assert!(Instant::now() < deadline, "the processes never answered"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A job's `elastic-run` starts a session of its own: in the daemon's, a job of another user's
/// could open the terminal root started the daemon from and type commands into it (TIOCSTI).
#[test]
fn a_launched_job_has_a_session_of_its_own_and_so_no_terminal_of_the_daemons() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    exec.launch(&launch(3, 0, &[0], Some("session"), dir.path()), 0.0)
        .unwrap();
    assert!(matches!(
        wait_for_event(&mut exec),
        WorkerEvent::Finished { .. }
    ));
    let said = std::fs::read_to_string(dir.path().join("session.log")).unwrap();
    let (pid, session) = said.trim().split_once(' ').unwrap();
    assert_eq!(pid, session, "elastic-run leads its own session");
    // SAFETY: getsid(0) reads this process's session.
    let ours = unsafe { libc::getsid(0) };
    assert_ne!(session, ours.to_string(), "not the daemon's session");
}

#[test]
fn the_workers_reported_progress_is_the_jobs_work_done() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    // The model would say 2 steps/s from 0 of 100: about 0 at time 1, and 20 at time 10.
    exec.launch(&launch(4, 0, &[0], Some("report"), dir.path()), 0.0)
        .unwrap();
    let event = wait_for_event(&mut exec);
    assert_eq!(
        event,
        WorkerEvent::Progressed {
            job: JobId(4),
            attempt: 0,
            steps_done: 25.0,
            measured: Some(Measured {
                steps: 30,
                step_seconds: 0.5,
                sync_seconds: 0.125,
                replica_batch: 32,
                replicas: 4,
                accum_steps: 2,
                noise_scale: Some(150.0),
                grad_sqr: Some(2.0),
                grad_var: Some(300.0),
            }),
        },
        "30 of 120 steps is a quarter of the job's 100 units of work"
    );
    // A measurement that does not check out is dropped; the progress stands.
    let bad = br#"{"step":3,"total_steps":4,"goodput":{"steps":3,"step_seconds":0.5,"sync_seconds":0.75,"replica_batch":32,"replicas":4,"accum_steps":2}}"#;
    assert_eq!(reported(bad), Some((0.75, None)));
    // Nothing new reported: no new event.
    assert!(exec.poll(2.0).is_empty());
    // Stopped, the workers report their last step; that is the work saved, not the model's 20.
    let saved = exec.stop(JobId(4), 10.0).unwrap();
    assert_eq!(saved, 75.0);
}

#[test]
fn endings_come_from_the_exit_file_and_only_crashes_are_retried() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    let cases = [
        (Some("finish"), "finished"),
        (Some("usererror"), "fails for good"),
        (Some("crash"), "retried"),
        (None, "fails for good"),
    ];
    for (k, (mode, expected)) in cases.into_iter().enumerate() {
        exec.launch(&launch(k as u32, 0, &[1, 3], mode, dir.path()), 0.0)
            .unwrap();
        let event = wait_for_event(&mut exec);
        let seen = match &event {
            WorkerEvent::Finished { job, .. } if job.0 == k as u32 => "finished",
            WorkerEvent::Failed {
                retryable: true, ..
            } => "retried",
            WorkerEvent::Failed {
                retryable: false, ..
            } => "fails for good",
            other => panic!("{other:?}"),
        };
        assert_eq!(seen, expected, "{mode:?}: {event:?}");
        if let WorkerEvent::Failed { error, .. } = &event {
            let why = match mode {
                Some("usererror") => "SyntaxError in train.py",
                Some(_) => "without reporting",
                None => "elastic-run --daemon",
            };
            assert!(error.contains(why), "{error}");
        }
    }
    // GPU ids 1 and 3 are devices 6 and 8, named before the submitted command.
    let calls = std::fs::read_to_string(dir.path().join("calls.log")).unwrap();
    assert_eq!(
        calls.lines().next(),
        Some("--devices 6,8 --grace 1 train.py")
    );
    assert_eq!(calls.lines().count(), 3, "no launch without a command");
}

#[test]
fn only_the_policy_names_the_batch_and_the_stages_the_workers_run_with() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    let mut chosen = launch(1, 0, &[1], Some("finish"), dir.path());
    chosen.batch = Some(96);
    chosen.pp = Some(4);
    // A submitter who sets the variables itself gets nothing from them.
    let mut own = launch(2, 0, &[1], Some("finish"), dir.path());
    if let Some(run) = own.run.as_mut() {
        run.env.insert("GANGWAY_POLICY_BATCH".into(), "4096".into());
        run.env.insert("GANGWAY_POLICY_PP".into(), "2".into());
    }
    for l in [chosen, own] {
        exec.launch(&l, 0.0).unwrap();
        assert!(matches!(
            wait_for_event(&mut exec),
            WorkerEvent::Finished { .. }
        ));
    }
    let chosen = std::fs::read_to_string(dir.path().join("chosen.log")).unwrap();
    assert_eq!(chosen.lines().collect::<Vec<_>>(), ["96 4", "none none"]);
}

#[test]
fn a_batch_retuned_while_the_job_runs_reaches_its_elastic_run_through_its_descriptor() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    let mut adaptive = launch(1, 0, &[1], Some("run"), dir.path());
    adaptive.batch = Some(96);
    let fixed = launch(2, 0, &[2], Some("run"), dir.path());
    for l in [&adaptive, &fixed] {
        exec.launch(l, 0.0).unwrap();
    }
    let seen: Vec<PathBuf> = (0..3)
        .map(|job| {
            dir.path()
                .join(format!("batch-seen-{}", exec.attempt_marker(JobId(job), 0)))
        })
        .collect();
    let wait_for = |job: u32, expected: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&seen[job as usize]).unwrap_or_default();
            if text.trim() == expected {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} saw {text:?}, not {expected:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for(1, "96");
    wait_for(2, "");
    exec.rebatch(JobId(1), 128);
    wait_for(1, "128");
    // A job launched without a chosen batch gets none later either.
    exec.rebatch(JobId(2), 64);
    std::thread::sleep(Duration::from_millis(200));
    wait_for(2, "");
    // No path of the daemon's reaches the job: the variables that once named files are not set.
    let paths = std::fs::read_to_string(dir.path().join("paths.log")).unwrap();
    assert!(paths.lines().all(|l| l == "none none"), "{paths}");
    exec.stop_many(&[JobId(1), JobId(2)], 1.0);
}

#[test]
fn a_restarted_daemon_readopts_live_and_ended_attempts_and_stops_them() {
    let (dir, fake) = setup();
    let mut first = executor(dir.path(), &fake);
    first
        .launch(&launch(1, 4, &[0], Some("run"), dir.path()), 10.0)
        .unwrap();
    first
        .launch(&launch(2, 7, &[1], Some("finish"), dir.path()), 10.0)
        .unwrap();
    // Job 3's attempt is one no journal accounts for any more (the daemon died while it stopped).
    first
        .launch(&launch(3, 2, &[2], Some("stubborn"), dir.path()), 10.0)
        .unwrap();
    let (one, two, three) = (
        first.attempt_marker(JobId(1), 4),
        first.attempt_marker(JobId(2), 7),
        first.attempt_marker(JobId(3), 2),
    );
    let _reaper = KillAtEnd(three.clone());
    // Job 2 ends while no daemon watches: its exit file is all that is left of it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !attempt_processes(&two).is_empty() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!attempt_processes(&one).is_empty(), "job 1 runs");
    assert!(!attempt_processes(&three).is_empty(), "job 3 runs");
    drop(first); // the daemon dies; its children live on

    let mut second = executor(dir.path(), &fake);
    assert_eq!(
        second.attempt_marker(JobId(1), 4),
        one,
        "the same executor after a restart"
    );
    assert!(!second.alive(JobId(1), 3), "not an attempt that ran");
    assert!(second.alive(JobId(1), 4), "the live attempt is re-adopted");
    assert!(second.alive(JobId(2), 7), "the ended attempt is adopted");
    assert!(
        matches!(
            wait_for_event(&mut second),
            WorkerEvent::Finished {
                job: JobId(2),
                attempt: 7,
                ..
            }
        ),
        "and reports how it ended"
    );
    // The first poll, after the control plane re-adopted what it knows, ended the rest.
    gone_within(&three, "job 3's attempt outlived its daemon");
    assert!(
        !dir.path().join("runs/3.2.run").exists(),
        "its run file is left"
    );
    assert!(!attempt_processes(&one).is_empty(), "job 1 was ended too");
    // Stopping the adopted run: SIGTERM, it exits, and the work counts from its launch at t=10.
    let saved = second.stop(JobId(1), 30.0).unwrap();
    assert_eq!(saved, 40.0, "20 s at 2 steps/s");
    assert!(attempt_processes(&one).is_empty(), "nothing of it is left");
    assert!(
        second.poll(31.0).is_empty(),
        "a stopped job reports no ending"
    );
}

/// An attempt's run file holds the job's environment (tokens, keys): it was 0644 under the journal's
/// directory, which other users may pass through to their own exit files.
#[test]
fn an_attempts_run_file_is_the_daemons_alone() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    let mut job = launch(1, 1, &[0], Some("run"), dir.path());
    if let Some(run) = job.run.as_mut() {
        run.env.insert("API_KEY".into(), "hunter2".into());
    }
    exec.launch(&job, 0.0).unwrap();
    let run_file = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "run"))
        .expect("a run file");
    let text = std::fs::read_to_string(&run_file).unwrap();
    assert!(text.contains("hunter2"), "it holds the environment");
    let mode = std::fs::metadata(&run_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", run_file.display());
    exec.stop(JobId(1), 1.0).unwrap();
}

/// The cores a process may run on (`0-1`, `3`).
fn allowed_cores(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim()
        .to_owned()
}

#[test]
fn attempts_are_pinned_to_their_cores_which_follow_the_allotment_in_place() {
    let cores = gangway_launcher::confine::usable_cores();
    if cores.len() < 2 {
        eprintln!("SKIP: this machine gives the tests fewer than 2 cores");
        return;
    }
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake).with_cores(CorePool::new(cores[..2].to_vec()));
    let with = |job: u32, cpus: f64| Launch {
        resources: Some(Resources {
            cpus,
            memory_gb: 2.0,
        }),
        ..launch(job, 0, &[job], Some("run"), dir.path())
    };
    let markers: Vec<String> = (0..3).map(|j| exec.attempt_marker(JobId(j), 0)).collect();
    let pinned = |job: u32| -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let pids = attempt_processes(&markers[job as usize]);
            if let Some(&pid) = pids.first() {
                return allowed_cores(pid);
            }
            assert!(Instant::now() < deadline, "job {job} never ran");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let (first, second) = (cores[0].to_string(), cores[1].to_string());
    exec.launch(&with(0, 1.0), 0.0).unwrap();
    // 1.5 CPUs is one whole core: the other one.
    exec.launch(&with(1, 1.5), 0.0).unwrap();
    assert_eq!((pinned(0), pinned(1)), (first.clone(), second.clone()));
    let environ = std::fs::read(format!(
        "/proc/{}/environ",
        attempt_processes(&markers[0])[0]
    ))
    .unwrap();
    let environ = String::from_utf8_lossy(&environ);
    for told in [
        "GANGWAY_CPUS=1",
        &format!("GANGWAY_CPU_LIST={first}"),
        "GANGWAY_MEMORY_GB=2.000",
    ] {
        assert!(environ.split('\0').any(|v| v == told), "{told}");
    }
    // A stopped job gives its core back: the next launch gets the least held one, job 1's.
    exec.stop(JobId(1), 1.0).unwrap();
    exec.launch(&with(2, 1.0), 1.0).unwrap();
    assert_eq!(pinned(2), second);
    // Given both cores in place (sharing the one job 2 holds): re-pinned, still running.
    exec.reallot(
        JobId(0),
        Resources {
            cpus: 2.0,
            memory_gb: 2.0,
        },
    );
    let expected = if cores[1] == cores[0] + 1 {
        format!("{first}-{second}")
    } else {
        format!("{first},{second}")
    };
    assert_eq!(pinned(0), expected);
    for job in [0, 2] {
        exec.stop(JobId(job), 2.0).unwrap();
    }
}

/// Two daemons on one machine number their jobs alike: stopping one's job 0 must not touch the
/// other's (it once killed every process marked `0.0`).
#[test]
fn stopping_a_job_leaves_another_daemons_job_of_the_same_number_alone() {
    let (dir, fake) = setup();
    let other_dir = tempfile::tempdir().unwrap();
    let mut mine = executor(dir.path(), &fake);
    let mut theirs = executor(other_dir.path(), &fake);
    for exec in [&mut mine, &mut theirs] {
        exec.launch(&launch(0, 0, &[0], Some("run"), dir.path()), 0.0)
            .unwrap();
    }
    let theirs_marker = theirs.attempt_marker(JobId(0), 0);
    assert_ne!(mine.attempt_marker(JobId(0), 0), theirs_marker);
    trapping_sigterm(dir.path(), &mine.attempt_marker(JobId(0), 0));
    trapping_sigterm(dir.path(), &theirs_marker);
    mine.stop(JobId(0), 1.0).unwrap();
    assert!(
        !attempt_processes(&theirs_marker).is_empty(),
        "the other daemon's job 0 still runs"
    );
    theirs.stop(JobId(0), 1.0).unwrap();
    assert!(attempt_processes(&theirs_marker).is_empty());
}

/// Workers that ignore the stop (a job's own code may) are killed once the daemon's longest grace
/// and its margin have passed, not the week the job asked for: its GPUs wait for its stop. The
/// same holds for an attempt a daemon allowing longer graces launched, once a restarted daemon with
/// a shorter limit adopts it.
#[test]
fn a_stop_waits_for_at_most_the_longest_grace_the_daemon_allows() {
    let (dir, fake) = setup();
    let week = |job: u32| {
        let mut launch = launch(job, 1, &[job], Some("stubborn"), dir.path());
        let run = launch.run.as_mut().unwrap();
        run.args = ["--grace", "604800", "train.py"].map(String::from).to_vec();
        launch
    };
    let stopped_in_time = |mut exec: ProcessExecutor, job: u32| {
        let marker = exec.attempt_marker(JobId(job), 1);
        trapping_sigterm(dir.path(), &marker);
        let (done, stopped) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(exec.stop(JobId(job), 5.0).is_ok()));
        // Bounded only so that a regression fails instead of hanging for a week.
        let stopped = stopped.recv_timeout(Duration::from_secs(60));
        (stopped, attempt_processes(&marker).is_empty())
    };
    let limited = |mut exec: ProcessExecutor| {
        exec.max_grace = Duration::from_secs(1);
        exec.stop_margin = Duration::from_millis(500);
        exec
    };

    let mut exec = limited(executor(dir.path(), &fake));
    exec.launch(&week(0), 0.0).unwrap();
    assert_eq!(stopped_in_time(exec, 0), (Ok(true), true));

    // Launched by a daemon that allowed a week, adopted by one that allows a second.
    let mut first = executor(dir.path(), &fake);
    first.max_grace = Duration::from_secs(604_800);
    first.launch(&week(1), 0.0).unwrap();
    drop(first);
    let mut second = limited(executor(dir.path(), &fake));
    assert!(second.alive(JobId(1), 1), "adopted");
    assert_eq!(stopped_in_time(second, 1), (Ok(true), true));
}

/// A stop that outlasts the executor's patience (a job that ignores it, here) does not hold its
/// caller, the round, until the job's grace ends: the batch's other stops are answered, the
/// stubborn one goes on in the background, its job cannot start again while its workers live, and
/// a later poll reports its end once they are killed.
#[test]
fn a_stop_that_outlasts_the_patience_goes_on_in_the_background() {
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    exec.stop_patience = Duration::from_millis(300);
    exec.stop_margin = Duration::from_millis(500);
    let stubborn = launch(0, 1, &[0], Some("stubborn"), dir.path());
    exec.launch(&stubborn, 0.0).unwrap();
    exec.launch(&launch(1, 1, &[1], Some("run"), dir.path()), 0.0)
        .unwrap();
    let marker = exec.attempt_marker(JobId(0), 1);
    let _reaper = KillAtEnd(marker.clone());
    // Both running before they are stopped.
    trapping_sigterm(dir.path(), &exec.attempt_marker(JobId(1), 1));
    trapping_sigterm(dir.path(), &marker);

    let mut answers = exec.stop_many(&[JobId(0), JobId(1)], 1.0);
    answers.sort_by_key(|(job, _)| *job);
    assert!(matches!(answers[1], (JobId(1), Ok(_))), "{answers:?}");
    assert_eq!(
        answers[0],
        (JobId(0), Err(ExecutorError::StillStopping(JobId(0))))
    );
    assert!(
        !attempt_processes(&marker).is_empty(),
        "the stubborn workers were killed before the stop returned: it waited for their grace"
    );
    let again = Launch {
        attempt: 2,
        ..stubborn.clone()
    };
    let refused = exec.launch(&again, 1.5).unwrap_err().to_string();
    assert!(refused.contains("have not stopped yet"), "{refused}");

    // Killed at the end of its grace and margin, then reported by a poll.
    match wait_for_event(&mut exec) {
        WorkerEvent::Stopped {
            job: JobId(0),
            attempt: 1,
            steps_done,
        } => assert!((0.0..100.0).contains(&steps_done), "{steps_done}"),
        other => panic!("{other:?}"),
    }
    gone_within(&marker, "still running");
    let _again_reaper = KillAtEnd(exec.attempt_marker(JobId(0), 2));
    exec.launch(&again, 2.0).unwrap();
}

/// `elastic-run` starts in `/` and is told the job's directory and log, which it enters and opens
/// itself once it runs as the job's user: the launch never waits on a path of the job's. Under
/// torchrun's `--no-python` it is told where the script it runs was found, checked.
#[test]
fn elastic_run_starts_in_the_root_told_where_the_jobs_directory_log_and_script_are() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, fake) = setup();
    let script = dir.path().join("job.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut exec = executor(dir.path(), &fake);
    exec.launch(&launch(3, 1, &[0], Some("finish"), dir.path()), 0.0)
        .unwrap();
    let mut no_python = launch(4, 1, &[1], Some("finish"), dir.path());
    no_python.run.as_mut().unwrap().args = ["--grace", "1", "--no-python", "./job.sh"]
        .map(String::from)
        .to_vec();
    exec.launch(&no_python, 0.0).unwrap();
    // Both finish (one poll may hear both).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut finished = 0;
    while finished < 2 {
        assert!(
            Instant::now() < deadline,
            "{finished} of 2 finished within 20 s"
        );
        let events = exec.poll(1.0);
        finished += (events.iter())
            .filter(|e| matches!(e, WorkerEvent::Finished { .. }))
            .count();
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut started: Vec<String> = std::fs::read_to_string(dir.path().join("started.log"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    started.sort();
    let d = dir.path().display();
    assert_eq!(
        started,
        [
            format!("/ {d} {d}/job.log {d}/./job.sh"),
            format!("/ {d} {d}/job.log none"),
        ]
    );
}

/// A job whose directory never answers (a FUSE mount whose server took the request and hangs)
/// holds neither its launch (which, between fork and exec, held the executor and every later
/// launch with it, for good) nor its stop, although not even SIGKILL ends its `elastic-run` then
/// (the stop waited for it for good): the stop gives up on it after a while, and a later poll reaps
/// it once the file system lets it go. Needs root to mount, as CI runs.
#[test]
fn neither_launch_nor_stop_waits_on_a_directory_that_never_answers() {
    let (dir, fake) = setup();
    let Some((hanging, mount)) = mounted_in(dir.path(), "hanging", Swallowing::mount) else {
        return;
    };
    let mut exec = executor(dir.path(), &fake);
    exec.stop_margin = Duration::from_millis(200);
    let mut job = launch(1, 1, &[0], Some("run"), dir.path());
    job.run.as_mut().unwrap().cwd = hanging.clone();
    let marker = exec.attempt_marker(JobId(1), 1);
    // Whatever happens below, the attempt's processes do not outlive the test.
    let _reaper = KillAtEnd(marker.clone());
    // Each step on a thread of its own (see `bounded`).
    let in_time = |mut exec: ProcessExecutor,
                   step: fn(&mut ProcessExecutor, &Launch) -> String,
                   job: &Launch,
                   what: &str| {
        let job = job.clone();
        bounded(
            &format!("the {what} waited on the job's directory"),
            move || {
                let said = step(&mut exec, &job);
                (exec, said)
            },
        )
    };
    let (mut exec, launched) = in_time(
        exec,
        |e, j| format!("{:?}", e.launch(j, 0.0)),
        &job,
        "launch",
    );
    assert_eq!(launched, "Ok(())");
    // Its elastic-run waits in the kernel for the file system's answer about the directory.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "its elastic-run never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(exec.alive(JobId(1), 1));
    let (mut exec, stopped) = in_time(
        exec,
        |e, j| format!("{:?}", e.stop(j.job, 1.0)),
        &job,
        "stop",
    );
    assert!(stopped.starts_with("Ok("), "{stopped}");
    let held = attempt_processes(&marker);
    assert!(!held.is_empty(), "SIGKILL did not end it");
    // Let go by the file system, it dies of the SIGKILL it was sent, and a poll reaps it (until
    // then it stays in /proc, a zombie).
    drop(mount);
    let deadline = Instant::now() + Duration::from_secs(10);
    while held
        .iter()
        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(Instant::now() < deadline, "never reaped");
        exec.poll(2.0);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A stop that had to kill its attempt is over once the last of its processes is gone, not once
/// its `elastic-run` is: a worker tearing down its GPU context outlives its launcher (here it waits
/// in the kernel on a file system that answers late), and its GPUs are not handed on under it.
/// Needs root to mount, as CI runs.
#[test]
fn a_killed_attempts_stop_waits_for_the_last_of_its_workers() {
    let (dir, fake) = setup();
    let Some((held, mount)) = mounted_in(dir.path(), "held", |at| {
        Swallowing::holding(at, b"weights", &[FUSE_READ])
    }) else {
        return;
    };
    let mut exec = executor(dir.path(), &fake);
    exec.max_grace = Duration::from_secs(1);
    exec.stop_margin = Duration::from_millis(500);
    let mut job = launch(2, 1, &[0], Some("worker"), dir.path());
    let env = &mut job.run.as_mut().unwrap().env;
    env.insert(
        "FAKE_HELD".into(),
        held.join("program").display().to_string(),
    );
    let marker = exec.attempt_marker(JobId(2), 1);
    let _reaper = KillAtEnd(marker.clone());
    exec.launch(&job, 0.0).unwrap();
    let pid_file = dir.path().join("worker.pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) == 0 || !pid_file.exists() {
        assert!(Instant::now() < deadline, "the worker never read");
        std::thread::sleep(Duration::from_millis(20));
    }
    let worker: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    let stop = {
        let marker = marker.clone();
        std::thread::spawn(move || {
            let stopped = exec.stop(JobId(2), 1.0).is_ok();
            (stopped, attempt_processes(&marker))
        })
    };
    // Killed at the end of its grace and margin, its elastic-run goes and its worker stays, held.
    let deadline = Instant::now() + Duration::from_secs(20);
    while attempt_processes(&marker) != [worker] {
        assert!(
            Instant::now() < deadline,
            "the attempt was never killed, or its worker not held through its SIGKILL"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    // Let go, the worker dies of the SIGKILL it was sent.
    drop(mount);
    let (stopped, left) = bounded("the stop never ended", move || stop.join().unwrap());
    assert!(stopped);
    assert_eq!(left, [] as [i32; 0], "the stop ended before its worker");
}

/// Kills an attempt's processes when dropped.
struct KillAtEnd(String);

impl Drop for KillAtEnd {
    fn drop(&mut self) {
        for pid in attempt_processes(&self.0) {
            // SAFETY: kill(2) of a process that carries the test's attempt marker.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A directory `name` in `dir` with the FUSE file system `mount` makes mounted on it; `None`, said on
/// stderr, where this process may not mount one. Mounting is the kernel's to allow (root, and a
/// container that lets it): no set-up step can provide it, so the tests that need it skip even
/// under CI=true, saying why.
fn mounted_in(
    dir: &Path,
    name: &str,
    mount: impl FnOnce(&Path) -> Option<Swallowing>,
) -> Option<(PathBuf, Swallowing)> {
    let at = dir.join(name);
    std::fs::create_dir(&at).unwrap();
    let Some(mounted) = mount(&at) else {
        eprintln!("skipped: this process may not mount a FUSE file system (root, /dev/fuse)");
        return None;
    };
    Some((at, mounted))
}

/// What `step` answers, run on a thread of its own and waited for 30 s: bounded only so that a
/// regression fails (saying `waited`) instead of hanging.
fn bounded<T: Send + 'static>(waited: &str, step: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(step());
    });
    finished
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{waited}"))
}

/// A program whose file system fails while it is checked (EIO) is not refused, since that says
/// nothing of it: its launch fails for now and is tried again (a retryable failure, which the
/// control plane pauses), where a program found wanting fails its job for good. Needs root to
/// mount, as CI runs.
#[test]
fn a_check_that_its_file_system_fails_is_tried_again_not_refused() {
    let (dir, fake) = setup();
    let Some((erring, _mount)) = mounted_in(dir.path(), "erring", |at| {
        Swallowing::failing(at, b"#!/bin/sh\n", FUSE_READ, libc::EIO)
    }) else {
        return;
    };
    let mut exec = executor(dir.path(), &fake);
    let job = launch_running(&erring.join("program"), dir.path());
    // At submission, the daemon's check of the command says so (the control plane puts it off).
    let me = Submitter::this_process();
    let refused = check_command(job.run.as_ref().unwrap(), &me, Duration::from_secs(60));
    assert!(
        refused.as_ref().is_err_and(|refused| refused.unanswered),
        "{refused:?}"
    );
    // A failed start of the job's own (which pauses it), not a refusal (a failed job).
    match exec.launch(&job, 0.0) {
        Err(ExecutorError::Launch { job, reason }) => {
            assert_eq!(job, JobId(1));
            for says in ["Input/output error", "it is checked again at its next try"] {
                assert!(reason.contains(says), "{reason}");
            }
        }
        other => panic!("{other:?}: {:?}", exec.poll(1.0)),
    }
    // The same for a directory of its library path whose file system fails a lookup.
    let Some((failing, _mount)) = mounted_in(dir.path(), "failing", |at| {
        Swallowing::failing(at, b"", FUSE_LOOKUP, libc::EIO)
    }) else {
        return;
    };
    let mut job = launch(2, 1, &[1], Some("finish"), dir.path());
    let env = &mut job.run.as_mut().unwrap().env;
    env.insert(
        "LD_LIBRARY_PATH".into(),
        failing.join("lib").display().to_string(),
    );
    match exec.launch(&job, 1.0) {
        Err(ExecutorError::Launch { job, reason }) => {
            assert_eq!(job, JobId(2));
            assert!(reason.contains("Input/output error"), "{reason}");
        }
        other => panic!("{other:?}: {:?}", exec.poll(2.0)),
    }
    // A server that says this machine is out of descriptors (it may say any error) is still the
    // job's failure, counted, not the machine's: this machine has descriptors to spare.
    let Some((lying, _mount)) = mounted_in(dir.path(), "lying", |at| {
        Swallowing::failing(at, b"#!/bin/sh\n", FUSE_READ, libc::EMFILE)
    }) else {
        return;
    };
    let mut job = launch_running(&lying.join("program"), dir.path());
    job.job = JobId(3);
    match exec.launch(&job, 2.0) {
        Err(ExecutorError::Launch { job, reason }) => {
            assert_eq!(job, JobId(3));
            assert!(reason.contains("Too many open files"), "{reason}");
        }
        other => panic!("{other:?}: {:?}", exec.poll(3.0)),
    }
}

/// A program check that this machine has no file descriptor left for (EMFILE) is this machine's
/// trouble, not the job's: the launch is put off for [`HOST_RETRY`] and not counted against the
/// job, where an I/O error of the job's file system pauses it, doubling.
#[test]
fn a_check_short_of_descriptors_is_the_machines_trouble_not_the_jobs() {
    // It takes every descriptor its process may have: other tests in the same process would fail.
    if std::env::var_os("NEXTEST").is_none() {
        let why = "it needs a process of its own (cargo nextest runs each test in one)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("skipped: {why}");
        return;
    }
    let (dir, fake) = setup();
    let mut exec = executor(dir.path(), &fake);
    let job = launch_running(Path::new("/bin/sh"), dir.path());
    let me = Submitter::this_process();
    let limit = |soft: u64| {
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit(2) and setrlimit(2) on a struct of ours; this test's process alone
        // (nextest runs each test in its own).
        unsafe {
            assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut now), 0);
            let old = now.rlim_cur;
            now.rlim_cur = soft;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &now), 0);
            old
        }
    };
    // No descriptor left: those open now (the listing's own closed) are all it may have.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
    let was = limit(open);
    let checked = check_command(job.run.as_ref().unwrap(), &me, Duration::from_secs(60));
    let launched = exec.launch(&job, 0.0);
    limit(was);
    let refused = checked.unwrap_err();
    assert!(refused.host && refused.unanswered, "{refused:?}");
    assert!(
        refused.to_string().contains("Too many open files"),
        "{refused}"
    );
    match launched {
        Err(ExecutorError::Later { job, reason, after }) => {
            assert_eq!(job, JobId(1));
            assert_eq!(after, HOST_RETRY.as_secs_f64(), "{reason}");
            assert!(reason.starts_with("its program's check: "), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // With descriptors again, it runs.
    exec.launch(&job, 1.0).unwrap();
}

/// A job's `LD_LIBRARY_PATH` is checked again at each launch, as its program is: a directory of it
/// that others may write since is refused, unless the operator lets the variable through unchecked
/// (`gangway serve --allow-env LD_LIBRARY_PATH`).
#[test]
fn a_library_path_is_checked_again_at_each_launch() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, fake) = setup();
    let lib = dir.path().join("lib");
    std::fs::create_dir(&lib).unwrap();
    let mut exec = executor(dir.path(), &fake);
    let mut job = launch(1, 1, &[0], Some("finish"), dir.path());
    let env = &mut job.run.as_mut().unwrap().env;
    env.insert(
        "LD_LIBRARY_PATH".into(),
        format!("/usr/lib:{}", lib.display()),
    );
    let finished = |exec: &mut ProcessExecutor| {
        let event = wait_for_event(exec);
        assert!(
            matches!(event, WorkerEvent::Finished { job: JobId(1), .. }),
            "{event:?}"
        );
    };
    exec.launch(&job, 0.0).unwrap();
    finished(&mut exec);
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o1777)).unwrap();
    job.attempt = 2;
    // Refused: the job fails, for good.
    exec.launch(&job, 1.0).unwrap();
    let WorkerEvent::Failed {
        error, retryable, ..
    } = wait_for_event(&mut exec)
    else {
        panic!("the launch was not refused");
    };
    assert!(!retryable);
    for says in [
        format!(
            "run.env: LD_LIBRARY_PATH entry \"{}\" is refused",
            lib.display()
        ),
        "writable by everyone".into(),
    ] {
        assert!(error.contains(&says), "{error}");
    }
    exec.library_path_checked = false;
    job.attempt = 3;
    exec.launch(&job, 2.0).unwrap();
    finished(&mut exec);
}

/// Job 1, the daemon's user's, whose workers would run `program` (its `--python`), in `dir`.
fn launch_running(program: &Path, dir: &Path) -> Launch {
    let mut job = launch(1, 1, &[0], Some("finish"), dir);
    job.run.as_mut().unwrap().args = ["--grace", "1", "--python"]
        .map(String::from)
        .into_iter()
        .chain([program.display().to_string(), "train.py".into()])
        .collect();
    job
}

/// Job 1, `nobody`'s, whose workers would run `program` (its `--python`), in `dir`.
fn nobodys_launch(program: &Path, dir: &Path) -> Launch {
    let mut theirs = launch_running(program, dir);
    let run = theirs.run.as_mut().unwrap();
    run.user = Some(gangway_protocol::worker::RunAs {
        uid: 65534,
        gid: 65534,
    });
    // cargo's, whose directories `nobody` may not enter: the launch would be refused for it.
    run.env.remove("LD_LIBRARY_PATH");
    theirs
}

/// A job whose program is on a directory that never answers holds neither the executor nor another
/// user's launch: its launch gives up on the check after the patience, that user's later launches
/// fail at once while the check is still under way (so that they hold no more threads), and once the
/// file system answers, for the rest that a slow check earns them ([`ProcessExecutor::check_rest`]),
/// then are checked again. Needs root to mount, as CI runs.
#[test]
fn a_program_check_that_never_answers_holds_only_its_own_users_launches() {
    use std::os::unix::fs::PermissionsExt;
    let (dir, fake) = setup();
    // Where `nobody` may look.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let Some((hanging, mount)) = mounted_in(dir.path(), "hanging", Swallowing::mount) else {
        return;
    };
    let mut exec = executor(dir.path(), &fake);
    exec.check_patience = Duration::from_millis(500);
    let theirs = nobodys_launch(&hanging.join("python"), dir.path());
    let (mut exec, theirs, first, again) =
        bounded("the launch waited on the program's directory", move || {
            let first = exec.launch(&theirs, 0.0).unwrap_err().to_string();
            let again = exec.launch(&theirs, 1.0).unwrap_err().to_string();
            (exec, theirs, first, again)
        });
    // The first waited for its check as long as the patience; the second did not start one.
    assert!(first.contains("took longer than 0.5 s"), "{first}");
    assert!(again.contains("has not come back"), "{again}");
    assert!(mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) > 0);
    // The daemon's own job launches meanwhile (with patience enough for an answering check on a
    // loaded machine).
    exec.check_patience = Duration::from_secs(30);
    exec.launch(&launch(2, 1, &[1], Some("finish"), dir.path()), 2.0)
        .unwrap();
    assert!(matches!(
        wait_for_event(&mut exec),
        WorkerEvent::Finished { job: JobId(2), .. }
    ));
    // Let go, the check ends (its file system now errs), having taken long: their launches fail at
    // once for a while, so that a file system that answers just before the patience costs the
    // executor that wait once per rest, not at every launch.
    drop(mount);
    let deadline = Instant::now() + Duration::from_secs(10);
    let resting = loop {
        match exec.launch(&theirs, 3.0) {
            Err(e) if e.to_string().contains("has not come back") => {
                assert!(Instant::now() < deadline, "the check never came back");
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break format!("{other:?}"),
        }
    };
    assert!(resting.contains("answers slowly"), "{resting}");
    // Once the rest is over, their next launch is checked again: a refusal, which fails the job,
    // instead of a wait.
    exec.check_rest = Duration::ZERO;
    let launched = exec.launch(&theirs, 4.0);
    assert_eq!(format!("{launched:?}"), "Ok(())");
    match wait_for_event(&mut exec) {
        WorkerEvent::Failed {
            job,
            error,
            retryable,
            ..
        } => {
            assert_eq!(job, JobId(1));
            assert!(error.contains("its program may not run"), "{error}");
            assert!(!retryable);
        }
        other => panic!("{other:?}"),
    }
}

/// The daemon's own user's launches never rest after a slow check of theirs (their files are the
/// operator's): once the check comes back, their next launch is checked again at once, where another
/// user's would be put off ([`ProcessExecutor::check_rest`]). Needs root to mount, as CI runs.
#[test]
fn the_daemons_own_launches_never_rest() {
    let (dir, fake) = setup();
    let Some((hanging, mount)) = mounted_in(dir.path(), "hanging", Swallowing::mount) else {
        return;
    };
    let mut exec = executor(dir.path(), &fake);
    exec.check_patience = Duration::from_millis(500);
    let own = launch_running(&hanging.join("python"), dir.path());
    let (mut exec, own, first) =
        bounded("the launch waited on the program's directory", move || {
            let first = exec.launch(&own, 0.0).unwrap_err().to_string();
            (exec, own, first)
        });
    assert!(first.contains("took longer than 0.5 s"), "{first}");
    // Let go, the check ends, having taken long.
    drop(mount);
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        match exec.launch(&own, 1.0) {
            Err(e) if e.to_string().contains("has not come back") => {
                assert!(Instant::now() < deadline, "the check never came back");
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break format!("{other:?}"),
        }
    };
    // Checked again at once: the program is not there any more, a refusal.
    assert_eq!(after, "Ok(())", "the daemon's own launch was put off");
    match wait_for_event(&mut exec) {
        WorkerEvent::Failed { job, error, .. } => {
            assert_eq!(job, JobId(1));
            assert!(error.contains("does not exist"), "{error}");
        }
        other => panic!("{other:?}"),
    }
}

/// A program on a file system that answers its lookup and its opening but never its reading or
/// never the request that closes it: the check reads its first line and closes it on a thread whose
/// descriptors are its own, so that neither the executor (which closed the readable descriptor the
/// check handed it, after a launch) nor a child it starts meanwhile (which inherited the descriptor
/// the stuck check held, and closed it at its `exec`, which then never returned, nor the spawn
/// waiting for it) waits on that file system. Needs root to mount, as CI runs.
#[test]
fn a_program_whose_reading_or_closing_never_answers_holds_no_other_launch() {
    use std::os::unix::fs::PermissionsExt;
    for (swallow, what) in [
        (&[FUSE_READ, FUSE_FLUSH][..], "reading"),
        (&[FUSE_FLUSH][..], "closing"),
    ] {
        let (dir, fake) = setup();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let holding = |at: &Path| Swallowing::holding(at, b"\x7fELF, not really", swallow);
        let Some((mounted, mount)) = mounted_in(dir.path(), "mounted", holding) else {
            return;
        };
        let mut exec = executor(dir.path(), &fake);
        exec.check_patience = Duration::from_millis(500);
        let theirs = nobodys_launch(&mounted.join("program"), dir.path());
        let ours = launch(2, 1, &[1], Some("finish"), dir.path());
        let waited = format!("{what}: a launch waited on the program's file system");
        let (mut exec, [theirs, ours]) = bounded(&waited, move || {
            let theirs = format!("{:?}", exec.launch(&theirs, 0.0));
            // Patience enough for an answering check on a loaded machine.
            exec.check_patience = Duration::from_secs(30);
            let said = [theirs, format!("{:?}", exec.launch(&ours, 0.0))];
            (exec, said)
        });
        assert!(
            theirs.contains("took longer than 0.5 s"),
            "{what}: {theirs}"
        );
        assert_eq!(ours, "Ok(())", "{what}");
        assert!(matches!(
            wait_for_event(&mut exec),
            WorkerEvent::Finished { job: JobId(2), .. }
        ));
        assert!(mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) > 0);
    }
}

/// A process whose `execve` never ends (it closes a descriptor on a file system that never answers
/// the close) holds every read of its environment, which the executor makes to find an attempt's
/// processes where it has no cgroup (Slurm's, always): a scan of its user's processes gives up on
/// it after a while, their later scans answer at once that they cannot tell, and another user's
/// processes are scanned as ever, never reading it. The process is `nobody`'s, which no other test
/// scans (any scan that read it would wait too, in whatever test process). Needs root to mount, as
/// CI runs.
#[test]
fn a_process_stuck_in_its_exec_holds_no_scan_of_another_users_processes() {
    let (dir, _) = setup();
    let holding = |at: &Path| Swallowing::holding(at, b"data", &[FUSE_FLUSH]);
    let Some((mounted, mount)) = mounted_in(dir.path(), "mounted", holding) else {
        return;
    };
    let child = stuck_in_exec(65534, &mounted, &mount, c"GANGWAY_STUCK=1");
    let (roots, nobodys, again) = bounded("a scan waited on the process in its exec", || {
        // Asked again if it does not answer within its patience, as on a loaded machine.
        let roots =
            std::iter::repeat_with(|| processes_with_env("GANGWAY_STUCK", "1", Owner::User(0)))
                .find_map(|found| found);
        let nobodys = processes_with_env("GANGWAY_STUCK", "1", Owner::User(65534));
        let again = processes_with_env("GANGWAY_STUCK", "1", Owner::User(65534));
        (roots, nobodys, again)
    });
    assert_eq!(roots, Some(Vec::new()), "root's processes, as ever");
    assert_eq!(
        nobodys, None,
        "nobody's: the read of the stuck one was given up on"
    );
    assert_eq!(again, None, "and the next one did not start another");
    // Let go, its exec goes on and it ends.
    drop(mount);
    let mut status = 0;
    // SAFETY: waitpid(2) of this test's own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
}

/// A setuid program another user started runs as root, and its `/proc` entry is root's: it is
/// theirs all the same (its real uid), not root's, to a scan. Uid 65531's, which no other test
/// scans. Needs root, as CI runs.
#[test]
fn another_users_setuid_program_is_theirs_not_roots() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::os::unix::process::CommandExt;
    const OWNER: u32 = 65531;
    if !may_start_another_users_processes() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    // As /proc/PID/exe names it.
    let program = dir.path().canonicalize().unwrap().join("sleep");
    std::fs::copy("/bin/sleep", &program).unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let marker = format!("setuid-{}", std::process::id());
    let started = std::process::Command::new(&program)
        .arg("30")
        .env_clear()
        .env("GANGWAY_SETUID", &marker)
        .uid(OWNER)
        .gid(OWNER)
        .spawn();
    let pid = match started {
        Ok(child) => child.id() as i32,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            eprintln!("skipped: uid {OWNER} may not reach the temporary directory: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let _theirs = KillPidAtEnd(Some(pid));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_link(format!("/proc/{pid}/exe")).ok().as_ref() != Some(&program) {
        assert!(Instant::now() < deadline, "it never ran the program");
        std::thread::sleep(Duration::from_millis(20));
    }
    if std::fs::metadata(format!("/proc/{pid}")).unwrap().uid() != 0 {
        // The system's to allow (a nosuid temporary directory, or no new privileges for this
        // process's children): no set-up step can provide it.
        eprintln!("skipped: the program's setuid bit was not honoured");
        return;
    }
    // Asked again while a scan does not answer, as on a loaded machine (for longer than a rest).
    let scanned = |owner| scanned("GANGWAY_SETUID", &marker, owner, Duration::from_secs(40));
    let (roots, owners) = (scanned(Owner::User(0)), scanned(Owner::User(OWNER)));
    assert_eq!(roots, [] as [i32; 0], "taken for root's");
    assert_eq!(owners, [pid], "not found as its user's");
}

/// A daemon that stopped between writing an attempt's run file and learning its `elastic-run`'s
/// pid leaves a record without one, and a restarted daemon looks for the attempt's process-group
/// leader by marker (where it has no cgroup). Where that look cannot answer (here the leader is stuck in its exec on a file
/// system that does not answer, which holds every read of its environment), the attempt is adopted
/// all the same, not taken for gone: the control plane would launch it again beside itself. A
/// stop asked meanwhile goes on in the background; once its processes answer, a poll finds the
/// leader, keeps its pid in the run file and sends it SIGTERM, as to any adopted attempt. The stand-in attempt is uid 65533's, which no other
/// test scans. Needs root to mount, as CI runs.
#[test]
fn an_attempt_recorded_without_its_pid_is_adopted_while_its_processes_do_not_answer() {
    const OWNER: u32 = 65533;
    let (dir, fake) = setup();
    let holding = |at: &Path| Swallowing::holding(at, b"data", &[FUSE_FLUSH]);
    let Some((mounted, mount)) = mounted_in(dir.path(), "mounted", holding) else {
        return;
    };
    // Its record made one written before the pid was known. A grace of 2 s, far shorter than
    // the scans' rest: it must count from the SIGTERM.
    let (marker, run_file) = orphaned(dir.path(), &fake, 1);
    made_owners(&run_file, OWNER, |record| {
        record["pid"] = 0.into();
        record["stop_timeout"] = serde_json::json!({ "secs": 2, "nanos": 0 });
    });
    let recorded_pid = || {
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&run_file).ok()?).unwrap();
        record["pid"].as_i64()
    };

    // The attempt's elastic-run, leading its own group, held in its exec by a close-on-exec
    // descriptor whose close the file system never answers. Sent SIGTERM, it takes half a second
    // to save its work, and exits 7.
    let attempt_var = std::ffi::CString::new(format!("{ATTEMPT_VAR}={marker}")).unwrap();
    let held = mounted.join("program");
    let child = spawned_as(
        OWNER,
        Some(&held),
        c"trap 'sleep 0.5; exit 7' TERM; sleep 600 & wait",
        &attempt_var,
    );
    let mut reaper = KillPidAtEnd(Some(child));
    let _left = KillAtEnd(marker.clone());
    swallowed_within(&mount, "its exec never closed the file");

    let (mut second, adopted, events) = bounded("the adoption waited on the stuck process", {
        let (dir, fake) = (dir.path().to_path_buf(), fake.clone());
        move || {
            let mut second = executor(&dir, &fake);
            let adopted = second.alive(JobId(1), 1);
            let events = second.poll(1.0);
            (second, adopted, events)
        }
    });
    assert!(adopted, "taken for gone while its processes did not answer");
    assert!(events.is_empty(), "no ending while they do not: {events:?}");
    assert_eq!(recorded_pid(), Some(0));

    // Let go, its exec goes on. Its stop is asked before its user's scans answer again (after
    // their rest): it goes on in the background, and once they answer, a poll finds the leader,
    // keeps its pid and sends it SIGTERM, with its whole grace from then (the stop's own deadline
    // passed long before).
    drop(mount);
    second.stop_patience = Duration::from_millis(300);
    let asked = second.stop(JobId(1), 3.0);
    assert!(
        matches!(asked, Err(ExecutorError::StillStopping(JobId(1)))),
        "{asked:?}"
    );
    let (mut recorded, mut stopped) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(55);
    while !stopped {
        assert!(Instant::now() < deadline, "its stop never ended");
        for event in second.poll(4.0) {
            assert!(
                matches!(event, WorkerEvent::Stopped { job: JobId(1), .. }),
                "{event:?}"
            );
            stopped = true;
        }
        // Read between polls: the poll that finds the pid keeps it, and a later one, once the
        // process has ended, removes the run file.
        recorded |= recorded_pid() == Some(i64::from(child));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(recorded, "the leader's pid was never kept in the run file");
    let mut status = 0;
    // SAFETY: waitpid(2) of this test's own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    reaper.0 = None;
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "stopped by SIGTERM and given its grace to save its work: status {status:#x}"
    );
}

/// An adopted attempt's `elastic-run` is pinned once a look at its processes finds it the
/// attempt's: from then on its end, and its stop's SIGTERM, need no look at its user's processes.
/// Before, each poll looked at them once per adopted attempt of theirs, on the control plane's
/// thread: a user whose processes answer slowly held every poll that long per attempt, and one
/// whose processes do not answer (here one of theirs is stuck in its exec on a file system that
/// does not answer) hid their attempts' ends and kept their stops from being sent. The stand-in
/// attempts are uid 65532's, which no other test scans. Needs root to mount, as CI runs.
#[test]
fn adopted_attempts_end_and_stop_while_their_users_processes_do_not_answer() {
    const OWNER: u32 = 65532;
    if !pidfds_offered() {
        return;
    }
    let (dir, fake) = setup();
    let holding = |at: &Path| Swallowing::holding(at, b"data", &[FUSE_FLUSH]);
    let Some((mounted, mount)) = mounted_in(dir.path(), "mounted", holding) else {
        return;
    };
    // Three attempts whose elastic-runs are stand-ins started here. Sent SIGTERM, the first two
    // take half a second to save their work, and exit 7; the third ignores it, and its stop may
    // take half a second.
    let jobs = [JobId(1), JobId(2), JobId(3)];
    let scripts = [
        c"trap 'sleep 0.5; exit 7' TERM; while :; do sleep 0.05; done",
        c"trap 'sleep 0.5; exit 7' TERM; while :; do sleep 0.05; done",
        c"trap '' TERM; while :; do sleep 0.05; done",
    ];
    let mut reapers = Vec::new();
    let mut leaders = Vec::new();
    for (job, script) in jobs.into_iter().zip(scripts) {
        let (marker, run_file) = orphaned(dir.path(), &fake, job.0);
        let attempt_var = std::ffi::CString::new(format!("{ATTEMPT_VAR}={marker}")).unwrap();
        let leader = spawned_as(OWNER, None, script, &attempt_var);
        reapers.push(KillPidAtEnd(Some(leader)));
        leaders.push(leader);
        made_owners(&run_file, OWNER, |record| {
            record["pid"] = leader.into();
            if job == JobId(3) {
                record["stop_timeout"] = serde_json::json!({ "secs": 0, "nanos": 500_000_000 });
            }
        });
    }
    // Adopted while OWNER's processes answer (a stand-in carries its marker once its exec is
    // done: looked for until then).
    let mut second = executor(dir.path(), &fake);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !jobs.iter().all(|&job| second.alive(job, 1)) {
        assert!(Instant::now() < deadline, "the stand-ins were not adopted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(second.poll(1.0).is_empty(), "all run");

    // Job 3's stop goes on in the background. Once its deadline has passed, a poll kills its
    // processes, found by a scan of OWNER's, which still answer.
    second.stop_patience = Duration::ZERO;
    let asked = second.stop(JobId(3), 1.0);
    assert!(
        matches!(asked, Err(ExecutorError::StillStopping(JobId(3)))),
        "{asked:?}"
    );
    second.stop_patience = Duration::from_secs(10);
    std::thread::sleep(Duration::from_millis(600));
    let killed = leaders[2];
    let (mut second, status) = bounded("job 3's stand-in was not killed", move || {
        let mut status = 0;
        // Between two polls, longer than SIGKILL takes and shorter than the looks' spacing: the
        // poll after the kill finds nothing gone, and none looks again once it is.
        // SAFETY: waitpid(2) of this test's own child, without waiting.
        while unsafe { libc::waitpid(killed, &mut status, libc::WNOHANG) } != killed {
            let events = second.poll(1.5);
            assert!(events.is_empty(), "{events:?}");
            std::thread::sleep(Duration::from_millis(60));
        }
        (second, status)
    });
    reapers[2].0 = None;
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "status {status:#x}"
    );

    // Then one of OWNER's processes is stuck in its exec, and their processes do not answer.
    let stuck = stuck_in_exec(OWNER, &mounted, &mount, c"GANGWAY_STUCK=1");
    let answered = bounded("a scan waited on the stuck process", || {
        processes_with_env("GANGWAY_STUCK", "1", Owner::User(OWNER))
    });
    assert_eq!(answered, None, "OWNER's processes still answer");

    // Job 1's elastic-run dies: a poll sees it.
    // SAFETY: kill(2) and waitpid(2) of this test's own child.
    unsafe {
        libc::kill(leaders[0], libc::SIGKILL);
        libc::waitpid(leaders[0], std::ptr::null_mut(), 0);
    }
    reapers[0].0 = None;
    let (mut second, events) = bounded("a poll waited on OWNER's processes", move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut events = Vec::new();
        while events.is_empty() && Instant::now() < deadline {
            events = second.poll(2.0);
            std::thread::sleep(Duration::from_millis(20));
        }
        (second, events)
    });
    assert!(
        matches!(
            events[..],
            [WorkerEvent::Failed {
                job: JobId(1),
                retryable: true,
                ..
            }]
        ),
        "job 1's end was not seen (or job 3's stop ended): {events:?}"
    );

    // Job 2 is stopped: its SIGTERM is sent, and the stop ends with its elastic-run.
    let (mut second, stopped) = bounded("the stop waited on OWNER's processes", move || {
        let stopped = second.stop(JobId(2), 3.0);
        (second, stopped)
    });
    assert!(stopped.is_ok(), "{stopped:?}");
    let mut status = 0;
    // SAFETY: waitpid(2) of this test's own child.
    assert_eq!(
        unsafe { libc::waitpid(leaders[1], &mut status, 0) },
        leaders[1]
    );
    reapers[1].0 = None;
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "stopped by SIGTERM and given its grace: status {status:#x}"
    );

    // Job 3's killed stop is not given up on while OWNER's processes do not answer whether all
    // of it has gone: its GPUs stay its own, for longer than a stop whose leftovers were seen
    // not to end would wait.
    let events = bounded("a poll waited on OWNER's processes", move || {
        let until = Instant::now() + Duration::from_secs(7);
        let mut events = Vec::new();
        while Instant::now() < until {
            events.extend(second.poll(4.0));
            std::thread::sleep(Duration::from_millis(20));
        }
        events
    });
    assert!(events.is_empty(), "{events:?}");
    drop(mount);
    // SAFETY: waitpid(2) of this test's own child, whose exec goes on once let go.
    assert_eq!(unsafe { libc::waitpid(stuck, &mut status, 0) }, stuck);
}

/// A re-allotment of CPUs to an attempt whose processes do not answer (without a cgroup they are
/// found by a scan of its user's) cannot re-pin them: the job keeps its cores, and is re-pinned
/// once they answer (here after the rest a slow scan earns its user), not forgotten. The stand-in
/// attempt is uid 65530's, which no other test scans. Needs root to mount, as CI runs.
#[test]
fn a_reallotment_waits_for_its_attempts_processes_to_answer() {
    const OWNER: u32 = 65530;
    let cores = gangway_launcher::confine::usable_cores();
    if cores.len() < 2 {
        eprintln!("SKIP: this machine gives the tests fewer than 2 cores");
        return;
    }
    let (dir, fake) = setup();
    let holding = |at: &Path| Swallowing::holding(at, b"data", &[FUSE_FLUSH]);
    let Some((mounted, mount)) = mounted_in(dir.path(), "mounted", holding) else {
        return;
    };
    // An attempt on the first core, whose elastic-run is a stand-in started here.
    let (marker, run_file) = orphaned(dir.path(), &fake, 1);
    let attempt_var = std::ffi::CString::new(format!("{ATTEMPT_VAR}={marker}")).unwrap();
    let leader = spawned_as(OWNER, None, c"while :; do sleep 0.05; done", &attempt_var);
    let _reaper = KillPidAtEnd(Some(leader));
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_setaffinity(2) of the test's child.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cores[0], &mut set);
        assert_eq!(
            libc::sched_setaffinity(leader, std::mem::size_of_val(&set), &set),
            0
        );
    }
    made_owners(&run_file, OWNER, |record| {
        record["pid"] = leader.into();
        record["confinement"]["cores"] = serde_json::json!([cores[0]]);
        record["launch"]["resources"] = serde_json::json!({ "cpus": 1.0, "memory_gb": 1.0 });
    });
    let mut second = executor(dir.path(), &fake).with_cores(CorePool::new(cores[..2].to_vec()));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !second.alive(JobId(1), 1) {
        assert!(Instant::now() < deadline, "the stand-in was not adopted");
        std::thread::sleep(Duration::from_millis(20));
    }

    // One of OWNER's processes is stuck in its exec: their processes do not answer, and the
    // attempt, given both cores, keeps its one.
    let stuck = stuck_in_exec(OWNER, &mounted, &mount, c"GANGWAY_STUCK=1");
    let answered = bounded("a scan waited on the stuck process", || {
        processes_with_env("GANGWAY_STUCK", "1", Owner::User(OWNER))
    });
    assert_eq!(answered, None, "OWNER's processes still answer");
    second.reallot(
        JobId(1),
        Resources {
            cpus: 2.0,
            memory_gb: 1.0,
        },
    );
    assert!(second.poll(1.0).is_empty());
    assert_eq!(allowed_cores(leader), cores[0].to_string());

    // Let go, their processes answer again after their rest, and a poll re-pins it.
    drop(mount);
    let both = if cores[1] == cores[0] + 1 {
        format!("{}-{}", cores[0], cores[1])
    } else {
        format!("{},{}", cores[0], cores[1])
    };
    let mut status = 0;
    // SAFETY: waitpid(2) of this test's own child, whose exec goes on once let go.
    assert_eq!(unsafe { libc::waitpid(stuck, &mut status, 0) }, stuck);
    let deadline = Instant::now() + Duration::from_secs(55);
    while allowed_cores(leader) != both {
        assert!(
            Instant::now() < deadline,
            "never re-pinned once its processes answered"
        );
        assert!(second.poll(2.0).is_empty());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Attempt 1 of job `job`, launched by a first daemon that then died, its processes then killed:
/// its marker and run file, whose record a test makes another attempt's ([`made_owners`]).
fn orphaned(dir: &Path, fake: &Path, job: u32) -> (String, PathBuf) {
    let mut first = executor(dir, fake);
    first
        .launch(&launch(job, 1, &[job - 1], Some("run"), dir), 0.0)
        .unwrap();
    let marker = first.attempt_marker(JobId(job), 1);
    drop(first);
    drop(KillAtEnd(marker.clone()));
    gone_within(&marker, "the first daemon's attempt outlived its SIGKILL");
    (marker, dir.join(format!("runs/{job}.1.run")))
}

/// A wave of kills costs a user one scan of their processes a look, not one per attempt: four
/// adopted attempts of one user's, without cgroups, whose `elastic-run`s ignore SIGTERM, are stopped
/// together; at their deadline one scan kills them all, and the next look, finding none, ends every
/// stop and sweeps what each left. (Looked for one by one, each stop cost a scan at the kill, one
/// at each look after it and one at its release: 13 here.) Needs root to start another user's
/// processes, and pidfds (without them each look at an adopted run's `elastic-run` is a scan).
#[test]
fn a_wave_of_kills_costs_a_user_one_scan_a_look() {
    const OWNER: u32 = 65529;
    if !may_start_another_users_processes() {
        return;
    }
    if !pidfds_offered() {
        return;
    }
    let (dir, fake) = setup();
    let jobs = [JobId(1), JobId(2), JobId(3), JobId(4)];
    let mut reapers = Vec::new();
    let mut markers = Vec::new();
    for job in jobs {
        let (marker, run_file) = orphaned(dir.path(), &fake, job.0);
        let attempt_var = std::ffi::CString::new(format!("{ATTEMPT_VAR}={marker}")).unwrap();
        markers.push(marker);
        let script = c"trap '' TERM; while :; do sleep 0.05; done";
        let leader = spawned_as(OWNER, None, script, &attempt_var);
        reapers.push(KillPidAtEnd(Some(leader)));
        made_owners(&run_file, OWNER, |record| record["pid"] = leader.into());
    }
    let mut exec = executor(dir.path(), &fake);
    exec.max_grace = Duration::from_millis(500);
    exec.stop_margin = Duration::from_millis(500);
    // A stand-in carries its marker once its exec is done: looked for until then.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !jobs.iter().all(|&job| exec.alive(job, 1)) {
        assert!(Instant::now() < deadline, "the stand-ins were not adopted");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = scans_asked(Owner::User(OWNER));
    let answers = bounded("the stops never ended", move || exec.stop_many(&jobs, 1.0));
    assert!(answers.iter().all(|(_, a)| a.is_ok()), "{answers:?}");
    let scans = scans_asked(Owner::User(OWNER)) - before;
    // One at the kill and one at the look that found none, or a look more while SIGKILL lands.
    assert!(
        (2..=4).contains(&scans),
        "{scans} scans of the user's processes to stop 4 attempts"
    );
    for marker in &markers {
        let left = scanned(
            ATTEMPT_VAR,
            marker,
            Owner::User(OWNER),
            Duration::from_secs(30),
        );
        assert_eq!(left, [] as [i32; 0], "a stop ended before its processes");
    }
}

/// Whether this process may start another user's processes (it is root), said on stderr where it
/// may not: CI runs as root, and a developer's own account skips, saying why.
fn may_start_another_users_processes() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: only root can start another user's process");
    }
    root
}

/// Whether this kernel offers pidfds, said on stderr where it does not: the kernel's to offer (Linux
/// 5.3 on, and no seccomp filter refusing them), so the tests that need them skip even under
/// CI=true, saying why.
fn pidfds_offered() -> bool {
    let offered = Pinned::open(std::process::id() as i32)
        .unwrap()
        .is_some_and(|me| me.ended().is_some());
    if !offered {
        eprintln!("skipped: this kernel offers no pidfds");
    }
    offered
}

/// Makes the run record in `run_file` that of an attempt of `owner`'s without cgroups, then as
/// `change` makes it.
fn made_owners(run_file: &Path, owner: u32, change: impl FnOnce(&mut serde_json::Value)) {
    let mut record = serde_json::from_slice(&std::fs::read(run_file).unwrap()).unwrap();
    without_cgroups(&mut record);
    record["confinement"]["owner"] = owner.into();
    change(&mut record);
    std::fs::write(run_file, serde_json::to_vec(&record).unwrap()).unwrap();
}

/// Makes an attempt's run record one of an attempt without cgroups, found by its marker (as on
/// Slurm's nodes, or under a daemon that is not root), and removes the cgroups the daemon that
/// launched it made (emptied: its processes are gone).
fn without_cgroups(record: &mut serde_json::Value) {
    for made in ["cgroup", "tasks"] {
        if let Some(dir) = record["confinement"][made].as_str() {
            // A cgroup lists a process until late in its exit.
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = std::fs::remove_dir(dir) {
                if e.raw_os_error() != Some(libc::EBUSY) {
                    break;
                }
                assert!(Instant::now() < deadline, "{dir}: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        record["confinement"][made] = serde_json::Value::Null;
    }
}

/// Starts `sh -c script` as `owner` (all its ids, no groups), leading a process group of its own,
/// with `var` its whole environment; where `held` is given, the child first opens it (as root, which
/// a FUSE mount lets in alone) close-on-exec, so that its exec closes it. Returns its pid.
fn spawned_as(
    owner: u32,
    held: Option<&Path>,
    script: &std::ffi::CStr,
    var: &std::ffi::CStr,
) -> i32 {
    use std::os::unix::ffi::OsStrExt;
    let held = held.map(|path| std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap());
    let program = c"/bin/sh";
    let argv = [
        c"sh".as_ptr(),
        c"-c".as_ptr(),
        script.as_ptr(),
        std::ptr::null(),
    ];
    let envp = [var.as_ptr(), std::ptr::null()];
    // SAFETY: the child calls only async-signal-safe system calls, on memory made before the fork,
    // and ends with exec or _exit.
    let child = unsafe {
        let pid = libc::fork();
        if pid == 0 {
            // Nothing of the test's stays open (the FUSE server's own descriptor among them).
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            if libc::setpgid(0, 0) != 0
                || held.as_ref().is_some_and(|file| {
                    libc::open(file.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) < 0
                })
                || libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, owner, owner, owner) != 0
                || libc::syscall(libc::SYS_setresuid, owner, owner, owner) != 0
            {
                libc::_exit(3);
            }
            libc::execve(program.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(4);
        }
        pid
    };
    assert!(child > 0, "fork: {}", std::io::Error::last_os_error());
    child
}

/// A process of `owner`'s, with `var` its environment, stuck in its exec: it closes a descriptor on
/// `mounted` (a [`Swallowing::holding`] of FUSE_FLUSH) that `mount` never answers. Its pid.
fn stuck_in_exec(owner: u32, mounted: &Path, mount: &Swallowing, var: &std::ffi::CStr) -> i32 {
    let child = spawned_as(owner, Some(&mounted.join("program")), c"true", var);
    swallowed_within(mount, "its exec never closed the file");
    child
}

/// Waits until `mount` has swallowed a request, for 10 s at most (failing with `what`).
fn swallowed_within(mount: &Swallowing, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while mount.swallowed.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGKILLs a child of the test's, until it is reaped (`None`), when dropped.
struct KillPidAtEnd(Option<i32>);

impl Drop for KillPidAtEnd {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            // SAFETY: kill(2) of the test's own child, not reaped yet (its pid is still its own).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
