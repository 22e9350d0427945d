//! On Slurm, an ended attempt's step is cancelled, and the queue is listed for steps an earlier
//! daemon left, without the executor's `poll` waiting for `scancel` or `squeue`: `poll` runs on the
//! control plane's thread, and both wait for Slurm's controller (its message timeout, then retries)
//! when the controller does not answer.
//!
//! The only test in this binary: it puts fake Slurm commands first on this process's `PATH`, which
//! no other thread reads meanwhile.

use std::path::Path;
use std::time::{Duration, Instant};

use gangway_launcher::executor::{Hosts, ProcessExecutor};
use gangway_protocol::ids::{GpuId, GpuTypeId, JobId};
use gangway_protocol::worker::{Executor, Launch, RunCommand, WorkerEvent};

/// Stands in for `elastic-run`: reports success and exits.
const FINISHING_ELASTIC_RUN: &str = r#"#!/bin/sh
printf '{"code":0,"why":"completed"}\n' > "/proc/self/fd/$GANGWAY_EXIT_FD"
"#;

/// A controller that does not answer: says what it was asked, then hangs (as itself, so that the
/// test can end it by its pid).
const HANGING_SCANCEL: &str = r#"#!/bin/sh
echo "$@" >> "$(dirname "$0")/scancel.log"
echo $$ >> "$(dirname "$0")/scancel.pid"
exec sleep 60
"#;

/// A controller slow to list the queue (the executor lists it once, for steps an earlier daemon
/// left): it answers once the test writes `queue` beside it.
const SLOW_SQUEUE: &str = r#"#!/bin/sh
d="$(dirname "$0")"
while [ ! -e "$d/queue" ]; do sleep 0.05; done
cat "$d/queue"
"#;

fn script(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn slurm_steps_are_listed_and_cancelled_without_poll_waiting_for_slurm() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    script(&bin, "scancel", HANGING_SCANCEL);
    script(&bin, "squeue", SLOW_SQUEUE);
    script(dir.path(), "elastic-run", FINISHING_ELASTIC_RUN);
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    // SAFETY: the only test of this binary, and no thread of it reads the environment meanwhile.
    unsafe { std::env::set_var("PATH", &path) };

    let mut exec = ProcessExecutor::on(
        dir.path().join("elastic-run"),
        Hosts::Slurm(vec!["node1".into()]),
        dir.path().join("runs"),
    )
    .unwrap();
    exec.launch(
        &Launch {
            job: JobId(7),
            attempt: 0,
            gpu_type: GpuTypeId(0),
            gpus: [GpuId(0)].into_iter().collect(),
            steps_per_second: 1.0,
            pace: Vec::new(),
            startup_seconds: 0.0,
            remaining_steps: 10.0,
            total_steps: 10.0,
            resources: None,
            batch: None,
            pp: None,
            run: Some(RunCommand {
                args: vec!["train.py".into()],
                cwd: dir.path().to_path_buf(),
                env: [("PATH".to_owned(), path)].into(),
                log: None,
                user: None,
            }),
        },
        0.0,
    )
    .unwrap();

    // The first poll starts listing the queue, which does not answer yet; the attempt ends; the
    // poll that reports it starts its step's scancel, which hangs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (event, slowest) = loop {
        let began = Instant::now();
        let events = exec.poll(1.0);
        let took = began.elapsed();
        if let Some(event) = events.into_iter().next() {
            break (event, took);
        }
        assert!(Instant::now() < deadline, "the attempt never ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        matches!(event, WorkerEvent::Finished { job: JobId(7), .. }),
        "{event:?}"
    );
    let log = dir.path().join("bin/scancel.log");
    let deadline = Instant::now() + Duration::from_secs(10);
    // Until its line is whole: the shell creates the log before `echo` writes to it.
    let asked = loop {
        match std::fs::read_to_string(&log) {
            Ok(asked) if asked.ends_with('\n') => break asked,
            _ => {
                assert!(Instant::now() < deadline, "scancel was never started");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert!(
        asked.contains("--name=") && asked.contains("--quiet"),
        "scancel was asked {asked:?}"
    );
    // The hanging scancel holds 60 s; the poll that started it did not wait for it.
    assert!(
        slowest < Duration::from_secs(10),
        "poll waited {slowest:?} for scancel"
    );
    // Later polls do not wait for it either, while it still hangs.
    let began = Instant::now();
    assert!(exec.poll(2.0).is_empty());
    assert!(began.elapsed() < Duration::from_secs(10));

    // The queue comes in: a step of this executor's that no attempt accounts for is cancelled at a
    // later poll, a step of another's is not.
    let stray = gangway_launcher::executor::slurm_job_name(&exec.attempt_marker(JobId(99), 0));
    let queue = format!("41 {stray}\n42 gangway-another-daemon-1.0\n");
    std::fs::write(dir.path().join("bin/queue.part"), queue).unwrap();
    std::fs::rename(
        dir.path().join("bin/queue.part"),
        dir.path().join("bin/queue"),
    )
    .unwrap();
    let cancelled = |id: &str| {
        let asked = std::fs::read_to_string(&log).unwrap();
        asked.lines().any(|l| l.split_whitespace().any(|w| w == id))
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cancelled("41") {
        let began = Instant::now();
        exec.poll(3.0);
        assert!(began.elapsed() < Duration::from_secs(10));
        assert!(
            Instant::now() < deadline,
            "the stray step was never cancelled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    exec.poll(4.0);
    let asked = std::fs::read_to_string(&log).unwrap();
    assert!(!cancelled("42"), "{asked}");
    assert_eq!(asked.lines().count(), 2, "{asked}");

    for pid in std::fs::read_to_string(dir.path().join("bin/scancel.pid"))
        .unwrap()
        .lines()
    {
        let pid: i32 = pid.trim().parse().unwrap();
        // SAFETY: kill(2) of a fake scancel this test started (the executor's child, not yet
        // reaped).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}
