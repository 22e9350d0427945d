//! `elastic-run` end to end, with real torchrun on CPU (gloo) and fake GPUs. Needs a Python with torch:
//! GANGWAY_TEST_PYTHON (scripts/test sets it up); skipped with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const TOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/examples/toy_ddp.py");

/// The Python with torch, or `None` (the test then skips).
fn python() -> Option<String> {
    let python = std::env::var("GANGWAY_TEST_PYTHON").ok()?;
    let ok = Command::new(&python)
        .args(["-c", "import torch.distributed.run"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: GANGWAY_TEST_PYTHON={python} cannot import torch");
        return None;
    }
    Some(python)
}

macro_rules! need_torch {
    () => {
        match python() {
            Some(p) => p,
            None => {
                eprintln!("skipped: no torch (set GANGWAY_TEST_PYTHON to a python that has it)");
                return;
            }
        }
    };
}

fn elastic_run(python: &str, dir: &Path, job: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
    command
        .args([
            "--fake-gpus",
            "4",
            "--python",
            python,
            "--job-id",
            job,
            "--grace",
            "30",
        ])
        .arg("--checkpoint-dir")
        .arg(dir.join(job))
        .args(args)
        .current_dir(dir);
    command
}

fn run(command: &mut Command) -> Output {
    command.output().expect("run elastic-run")
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

fn write_script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path
}

fn wait_for_step(dir: &Path, job: &str, step: u64, child: &mut Child) {
    let path = dir.join(job).join("progress.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let reached = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["step"].as_u64())
            .is_some_and(|s| s >= step);
        if reached {
            return;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "elastic-run ended early"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no progress to step {step}");
}

/// Processes whose environment names this job.
fn processes_of(job: &str) -> Vec<i32> {
    gangway_launcher::process::processes_with_env("GANGWAY_JOB_ID", job)
}

#[test]
fn a_ddp_job_on_two_fake_gpus_completes_and_sees_its_devices() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let probe = write_script(
        dir.path(),
        "probe.py",
        "import os\nrank = os.environ['RANK']\nopen(f'rank{rank}.txt', 'w').write(\
         os.environ['CUDA_VISIBLE_DEVICES'] + ' ' + os.environ['WORLD_SIZE'] + ' ' + os.environ['GANGWAY_PLAN'])\n",
    );
    let out = run(elastic_run(&python, dir.path(), "probe", &["--gpus", "2"]).arg(&probe));
    assert!(out.status.success(), "{}", text(&out));
    for rank in 0..2 {
        let seen = std::fs::read_to_string(dir.path().join(format!("rank{rank}.txt"))).unwrap();
        assert_eq!(seen, "0,1 2 dp=2,tp=1,pp=1");
    }
    let out = run(
        elastic_run(&python, dir.path(), "toy", &["--gpus", "2"]).args([
            TOY,
            "--steps",
            "20",
            "--save-every",
            "10",
            "--out",
            "out.json",
        ]),
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("final loss"));
    assert!(dir.path().join("out.json").exists());
}

#[test]
fn preempting_and_resuming_gives_the_same_parameters_as_an_uninterrupted_run() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let toy = |job: &str, out: &str, sleep: &str| {
        let mut command = elastic_run(&python, dir.path(), job, &["--gpus", "2"]);
        command.args([
            TOY,
            "--steps",
            "40",
            "--save-every",
            "15",
            "--out",
            out,
            "--step-sleep",
            sleep,
        ]);
        command
    };
    let reference = run(&mut toy("reference", "reference.json", "0"));
    assert!(reference.status.success(), "{}", text(&reference));

    let mut child = toy("preempted", "resumed.json", "0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_step(dir.path(), "preempted", 8, &mut child);
    // A scheduler's preemption: SIGTERM to elastic-run. The workers save at the next step and exit.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(75), "preempted, resumable");
    assert!(
        !dir.path().join("resumed.json").exists(),
        "it stopped before the end"
    );

    // The same command resumes from the checkpoint and finishes.
    let resumed = run(&mut toy("preempted", "resumed.json", "0"));
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("resumed from step"),
        "{}",
        text(&resumed)
    );
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(name)).unwrap()).unwrap()
    };
    let (a, b) = (read("reference.json"), read("resumed.json"));
    assert_eq!(a["params"], b["params"], "bit-identical parameters");
    assert_eq!(a["final_loss"], b["final_loss"]);
}

#[test]
fn no_worker_outlives_a_sigkilled_launcher() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let mut child = elastic_run(&python, dir.path(), "killed", &["--gpus", "2"])
        .args([
            TOY,
            "--steps",
            "100000",
            "--save-every",
            "0",
            "--step-sleep",
            "0.05",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_step(dir.path(), "killed", 2, &mut child);
    assert!(
        processes_of("killed").len() >= 3,
        "torchrun and two workers run"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_of("killed").is_empty() {
        assert!(
            Instant::now() < deadline,
            "processes left 10 s after kill -9: {:?}",
            processes_of("killed")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn crashes_are_retried_user_errors_are_not_and_hangs_are_restarted() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    // Crashes on the first launch only (the marker survives), then succeeds.
    let flaky = write_script(
        dir.path(),
        "flaky.py",
        "import os, sys\nif os.environ['RANK'] == '0' and not os.path.exists('crashed'):\n    \
         open('crashed', 'w').close()\n    sys.exit(13)\n",
    );
    let out = run(elastic_run(
        &python,
        dir.path(),
        "flaky",
        &["--gpus", "2", "--max-restarts", "2"],
    )
    .arg(&flaky));
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("restart 1 of 2"), "{}", text(&out));

    let broken = write_script(dir.path(), "broken.py", "def f(:\n    pass\n");
    let out = run(elastic_run(
        &python,
        dir.path(),
        "broken",
        &["--gpus", "1", "--max-restarts", "5"],
    )
    .arg(&broken));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("not retried"));
    assert_eq!(
        text(&out).matches("elastic-run: launch").count(),
        1,
        "launched once"
    );

    // Reports step 1, then hangs on the first launch; finishes on the second.
    let hangs = write_script(
        dir.path(),
        "hangs.py",
        "import json, os, time\nif os.environ['RANK'] == '0':\n    \
         json.dump({'step': 1}, open(os.environ['GANGWAY_PROGRESS_FILE'], 'w'))\n\
         if not os.path.exists('hung'):\n    time.sleep(1)\n    \
         open('hung', 'w').close()\n    time.sleep(3600)\n",
    );
    let began = Instant::now();
    let out = run(elastic_run(
        &python,
        dir.path(),
        "hangs",
        &["--gpus", "2", "--hang-timeout", "3"],
    )
    .arg(&hangs));
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("the job is hung"), "{}", text(&out));
    assert!(began.elapsed() < Duration::from_secs(120));
}
