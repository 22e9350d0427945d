//! `elastic-run` end to end, with real torchrun on CPU (gloo) and fake GPUs. Needs a Python with torch:
//! GANGWAY_TEST_PYTHON (scripts/test sets it up); skipped with a message otherwise.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gangway_actors::executor::{Executor, Launch, RunCommand, WorkerEvent};
use gangway_core::cluster::{GpuId, GpuTypeId};
use gangway_core::job::JobId;
use gangway_launcher::executor::ProcessExecutor;
use gangway_launcher::inherit::AttemptFiles;

const TOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/examples/toy_ddp.py");

/// The Python with torch; without one the test skips (fails in CI).
macro_rules! need_torch {
    () => {
        match support::torch_python() {
            Some(p) => p,
            None => return,
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
    wait_for_progress(
        || vec![dir.join(job).join("progress.json")],
        step,
        || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "elastic-run ended early"
            )
        },
    );
}

/// The progress files of the attempts a process executor started in `runs`: under an executor
/// the workers report to it, not into the checkpoint directory.
fn attempt_progress_files(runs: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(runs)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "progress"))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until one of the progress files reports `step`, calling `check` while it waits.
fn wait_for_progress(files: impl Fn() -> Vec<PathBuf>, step: u64, mut check: impl FnMut()) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let reached = files().iter().any(|path| {
            std::fs::read_to_string(path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|v| v["step"].as_u64())
                .is_some_and(|s| s >= step)
        });
        if reached {
            return;
        }
        check();
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no progress to step {step}");
}

/// Processes whose environment names this job.
fn processes_of(job: &str) -> Vec<i32> {
    use gangway_launcher::process::{Owner, processes_with_env};
    // Asked again while a scan does not answer within its patience, as on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match processes_with_env("GANGWAY_JOB_ID", job, Owner::this_user()) {
            Some(pids) => return pids,
            None => assert!(Instant::now() < deadline, "the processes never answered"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A JSON file the toy wrote in `dir` (its `--out`).
fn read_json(dir: &Path, name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
}

/// Starts `command` on the toy job, which runs until it is killed, with its output discarded.
fn spawn_endless_toy(command: &mut Command) -> Child {
    command
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
        .unwrap()
}

/// Polls `check` until it passes; after `timeout`, panics with what it last said.
/// The first value `check` gives within `timeout`; panics with its last reason after.
fn eventually_value<T>(timeout: Duration, mut check: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(value) => return value,
            Err(why) => assert!(Instant::now() < deadline, "after {timeout:?}: {why}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn eventually(timeout: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + timeout;
    while let Err(why) = check() {
        assert!(Instant::now() < deadline, "after {timeout:?}: {why}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Python in `dir` that sees no installed package (`python3 -S`): no torch, and no test needs one.
fn python_without_packages(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let python = write_script(
        dir,
        "python-without-packages",
        "#!/bin/sh\nexec python3 -S \"$@\"\n",
    );
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    python
}

/// Without torch, elastic-run once took "No module named 'torch'" for a crash and relaunched it three
/// times. It is a user error: exit 2 at once, with a hint. (No torch needed: `python3 -S` sees no
/// installed package.)
#[test]
fn a_python_without_torch_is_a_user_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let python = python_without_packages(dir.path());
    let script = write_script(dir.path(), "train.py", "print('never runs')\n");
    let out = run(elastic_run(
        python.to_str().unwrap(),
        dir.path(),
        "no-torch",
        &["--gpus", "2"],
    )
    // torchrun's agent imports torch before any worker runs (a pool that cannot import it leaves
    // the workers to start directly, and this script needs no torch).
    .args(["--max-restarts", "3", "--spawn", "torchrun"])
    .arg(&script));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("no module `torch`") && all.contains("--python"),
        "{all}"
    );
    assert_eq!(all.matches("elastic-run: launch ").count(), 1, "{all}");
    assert!(!all.contains("restart 1"), "{all}");
}

/// A Python whose pool cannot start (no torch here) runs its workers directly, saying why, and
/// the next launch in that context does not try again (each try would cost a torch import).
#[test]
fn where_the_pool_cannot_start_the_workers_start_directly_and_it_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let python = python_without_packages(dir.path());
    let script = write_script(dir.path(), "train.py", "print('ran', flush=True)\n");
    let runtime = dir.path().join("runtime");
    std::fs::create_dir(&runtime).unwrap();
    let launch = || {
        // One owner for both launches (as a daemon is), and a pool directory of the test's own.
        let out = run(elastic_run(
            python.to_str().unwrap(),
            dir.path(),
            "no-pool",
            &["--gpus", "1"],
        )
        .args(["--spawn", "pool"])
        .arg(&script)
        .env("GANGWAY_POOL_OWNER", std::process::id().to_string())
        .env("XDG_RUNTIME_DIR", &runtime));
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("ran"), "{}", text(&out));
        text(&out)
    };
    let (first, second) = (launch(), launch());
    for said in [&first, &second] {
        assert!(
            said.contains("no warm pool (the pool exited at its start")
                && said.contains("cannot import torch"),
            "{said}"
        );
    }
    let logs: Vec<String> = std::fs::read_dir(runtime.join("gangway"))
        .unwrap()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(
        logs[0].matches("cannot import torch").count(),
        1,
        "one pool tried to start: {}",
        logs[0]
    );
}

/// A script whose directory would shadow a module the pool imported (`torch.py` beside it) gets
/// its workers started directly: forked, it would see the pool's module, not its own.
#[test]
fn a_script_that_shadows_a_preloaded_module_runs_directly() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    write_script(
        dir.path(),
        "torch.py",
        "WHO = 'the script directory torch'\n",
    );
    let script = write_script(
        dir.path(),
        "train.py",
        "import torch\nprint('imported', torch.WHO, flush=True)\n",
    );
    let out = run(elastic_run(&python, dir.path(), "shadow", &["--gpus", "1"])
        .args(["--spawn", "pool"])
        .arg(&script));
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains("the pool refused the launch: the script's directory shadows modules the pool imported: torch"),
        "{all}"
    );
    assert!(all.contains("imported the script directory torch"), "{all}");
}

/// `--job-id ../../../x` once wrote outside the checkpoint directory.
#[test]
fn a_job_id_that_leaves_the_checkpoint_root_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(dir.path(), "train.py", "print('never runs')\n");
    let out = run(Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args(["--fake-gpus", "2", "--job-id", "../../../escaped"])
        .arg(&script)
        .current_dir(dir.path()));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(all.contains("holds a path separator"), "{all}");
    assert!(!dir.path().join("checkpoints").exists(), "{all}");
}

#[test]
fn a_global_batch_its_replicas_cannot_divide_is_refused_not_rounded() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(dir.path(), "train.sh", "exit 0\n");
    let launch = |gpus: &str, batch: &str| {
        run(Command::new(env!("CARGO_BIN_EXE_elastic-run"))
            .args(["--fake-gpus", "2", "--gpus", gpus, "--global-batch", batch])
            .args(["--python", "/bin/sh", "--spawn", "direct", "--job-id", "b"])
            .arg(&script)
            .current_dir(dir.path()))
    };
    // Two replicas cannot split 3 samples: a user error, said, not a batch of 2 run instead.
    let out = launch("2", "3");
    let all = text(&out);
    assert_eq!(out.status.code(), Some(2), "{all}");
    assert!(
        all.contains("global batch 3 is not divisible by any placeable dp [2]"),
        "{all}"
    );
    // Allowed one replica, it runs at 3 on one GPU; a batch range may still be rounded.
    for (gpus, batch, plan) in [("1:2", "3", "dp=1"), ("2", "3:8", "dp=2")] {
        let out = launch(gpus, batch);
        let all = text(&out);
        assert!(out.status.success(), "{all}");
        assert!(all.contains(plan), "{gpus} {batch}: {all}");
    }
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

/// A worker that prints its plan, then (unless given `once`) waits for a retuned one and prints it.
const RETUNE_PROBE: &str = concat!(
    "import os, sys, time\n",
    "sys.path.insert(0, '",
    env!("CARGO_MANIFEST_DIR"),
    r#"/python')
import gangway_worker as gw
if os.environ['RANK'] != '0':
    sys.exit(0)  # without a process group, only rank 0 reads the retune file
p = gw.plan()
print('start', p.global_batch, p.micro_batch, p.accum_steps,
      os.environ.get('GANGWAY_RETUNE_FILE') is not None, flush=True)
open('started', 'w').close()
deadline = time.time() + 60
while 'once' not in sys.argv and time.time() < deadline:
    new = gw.retuned(p)
    if new:
        print('retuned', new.global_batch, new.micro_batch, new.accum_steps, flush=True)
        break
    time.sleep(0.05)
"#
);

/// Torch-free: a worker using the helper's `retuned()` sees a batch the daemon's policy rewrote in
/// the attempt's batch file (handed to elastic-run open, as the daemon hands it) while it runs, split
/// over its replicas by elastic-run, and a job that keeps its own batch is given no retune file. What
/// elastic-run reports goes through the descriptors it was handed.
#[test]
fn a_batch_retuned_mid_run_reaches_the_workers_split_over_their_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let probe = write_script(dir.path(), "probe.py", RETUNE_PROBE);
    let runs = dir.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let files = AttemptFiles::in_dir(&runs, "1.0");
    let handover = files.create(Some(32)).unwrap();
    let launched = [
        "--gpus",
        "2",
        "--spawn",
        "direct",
        "--max-micro-batch",
        "16",
    ];
    let options = [&launched[..], &["--global-batch", "16:128"]].concat();
    let mut command = elastic_run("python3", dir.path(), "adaptive", &options);
    command
        .env("GANGWAY_POLICY_BATCH", "32")
        .arg(&probe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    handover.pass_to(&mut command);
    let child = command.spawn().unwrap();
    drop(handover);
    let started = dir.path().join("started");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(Instant::now() < deadline, "the probe never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The policy retunes it past its range: kept at its largest, 128 = 16 x 4 x 2 replicas.
    files.write_batch(200).unwrap();
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("start 32 16 1 True"), "{all}");
    assert!(
        all.contains("global batch 128 (retuned by the daemon)"),
        "{all}"
    );
    assert!(all.contains("retuned 128 16 4"), "{all}");
    assert_eq!(
        files.exit_report().unwrap().map(|r| r.code),
        Some(0),
        "its ending, through its descriptor"
    );
    // A job that keeps its own batch reads no retune file.
    std::fs::remove_file(&started).unwrap();
    let fixed = [&launched[..], &["--global-batch", "32"]].concat();
    let files = AttemptFiles::in_dir(&runs, "2.0");
    let handover = files.create(Some(64)).unwrap();
    let mut command = elastic_run("python3", dir.path(), "fixed", &fixed);
    command.args([probe.to_str().unwrap(), "once"]);
    handover.pass_to(&mut command);
    let out = run(&mut command);
    assert!(text(&out).contains("start 32 16 1 False"), "{}", text(&out));
}

/// Torch-free: `--spawn direct` starts the probe with plain Python.
#[test]
fn a_pipeline_runs_with_the_stages_the_daemon_names_for_its_gpu_type() {
    let dir = tempfile::tempdir().unwrap();
    let probe = write_script(
        dir.path(),
        "probe.py",
        "import os\nrank = os.environ['RANK']\nopen(f'rank{rank}.txt', 'w').write(\
         os.environ['WORLD_SIZE'] + ' ' + os.environ['GANGWAY_PLAN'])\n",
    );
    let options = [
        "--gpus",
        "4",
        "--spawn",
        "direct",
        "--pp-by-type",
        "rtx=4,a100=2",
    ];
    // As the daemon's executor launches it on each type; a value the job never named is refused.
    for (chosen, plan) in [
        ("4", Some("dp=1,tp=1,pp=4")),
        ("2", Some("dp=2,tp=1,pp=2")),
        ("3", None),
    ] {
        let job = format!("pp{chosen}");
        let out = run(elastic_run("python3", dir.path(), &job, &options)
            .env("GANGWAY_POLICY_PP", chosen)
            .arg(&probe));
        let seen = std::fs::read_to_string(dir.path().join("rank0.txt"));
        let _ = std::fs::remove_file(dir.path().join("rank0.txt"));
        match plan {
            Some(plan) => {
                assert!(out.status.success(), "{}", text(&out));
                assert_eq!(seen.unwrap(), format!("4 {plan}"));
            }
            None => {
                assert!(!out.status.success(), "{}", text(&out));
                assert!(
                    text(&out).contains("GANGWAY_POLICY_PP=\"3\" is not one of the job's"),
                    "{}",
                    text(&out)
                );
                assert!(seen.is_err(), "no worker ran");
            }
        }
    }
}

#[test]
fn spawned_directly_or_by_the_pool_a_ddp_job_trains_exactly_as_under_torchrun() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    for (job, spawn) in [
        ("agent", "torchrun"),
        ("direct", "direct"),
        ("pool", "pool"),
    ] {
        let out = run(
            elastic_run(&python, dir.path(), job, &["--gpus", "2", "--spawn", spawn]).args([
                TOY,
                "--steps",
                "20",
                "--save-every",
                "10",
                "--out",
                &format!("{job}.json"),
            ]),
        );
        assert!(out.status.success(), "{}", text(&out));
        assert!(text(&out).contains("plan: world=2 "), "{}", text(&out));
    }
    let read = |name: &str| read_json(dir.path(), name);
    for other in ["direct.json", "pool.json"] {
        assert_eq!(
            read("agent.json")["params"],
            read(other)["params"],
            "the same training, bit for bit ({other})"
        );
    }
}

/// The differences between two probes' views that any two launches have (their rendezvous port,
/// run id and token), removed.
fn probe_view(dir: &Path, label: &str, rank: u32) -> serde_json::Value {
    let mut seen = read_json(dir, &format!("probe-{label}-{rank}.json"));
    let env = seen["env"].as_object_mut().unwrap();
    for per_launch in ["MASTER_PORT", "TORCHELASTIC_RUN_ID", "GANGWAY_RUN_TOKEN"] {
        assert!(env.remove(per_launch).is_some(), "{per_launch}");
    }
    seen
}

/// What a worker sees of its process (environment, directory, descriptors, limits, CPUs, signals,
/// `sys` and `__main__`, torch's threads and random state) is the same whether the pool forked it
/// or it was started directly.
#[test]
fn a_worker_forked_by_the_pool_sees_what_a_directly_started_one_sees() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let probe = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts/worker_probe.py");
    std::fs::copy(&probe, dir.path().join("worker_probe.py")).unwrap();
    for gpus in ["1", "2"] {
        for spawn in ["direct", "pool"] {
            let out = run(elastic_run(
                &python,
                dir.path(),
                "probe",
                &["--gpus", gpus, "--spawn", spawn],
            )
            .args(["worker_probe.py", &format!("{spawn}{gpus}")]));
            assert!(out.status.success(), "{}", text(&out));
            assert!(!text(&out).contains("no warm pool"), "{}", text(&out));
        }
        for rank in 0..gpus.parse().unwrap() {
            let seeds = |label: &str| read_json(dir.path(), &format!("seeds-{label}-{rank}.json"));
            let (direct, pooled) = (
                seeds(&format!("direct{gpus}")),
                seeds(&format!("pool{gpus}")),
            );
            for generator in ["torch", "random"] {
                assert_ne!(
                    direct[generator], pooled[generator],
                    "a fresh random stream in each worker ({generator})"
                );
            }
            if rank > 0 {
                let first = read_json(dir.path(), &format!("seeds-pool{gpus}-0.json"));
                assert_ne!(first, pooled, "ranks forked by one pool draw apart");
            }
            let direct = probe_view(dir.path(), &format!("direct{gpus}"), rank);
            let pooled = probe_view(dir.path(), &format!("pool{gpus}"), rank);
            for (key, seen) in direct.as_object().unwrap() {
                let expected = match key.as_str() {
                    // The script's own argument, which names the mode.
                    "argv" | "orig_argv" => serde_json::to_string(seen)
                        .unwrap()
                        .replace("direct", "pool"),
                    _ => serde_json::to_string(seen).unwrap(),
                };
                assert_eq!(
                    expected,
                    serde_json::to_string(&pooled[key]).unwrap(),
                    "{key}, rank {rank} of {gpus}"
                );
            }
        }
    }
}

/// Without torch: `/bin/sh` stands in for Python (`sh -u SCRIPT`), so the spawner's supervision is
/// seen alone.
#[test]
fn spawned_directly_one_failed_worker_stops_the_others_and_fails_the_launch_as_torchrun_does() {
    let dir = tempfile::tempdir().unwrap();
    let script = write_script(
        dir.path(),
        "train.sh",
        // Rank 1 fails once rank 0 is ready to be stopped.
        "if [ \"$RANK\" = 1 ]; then while [ ! -e ready ]; do sleep 0.02; done; exit 9; fi\n\
         trap 'echo \"$RANK $WORLD_SIZE $MASTER_ADDR\" > stopped.txt; exit 0' TERM\n\
         touch ready\n\
         while true; do sleep 0.05; done\n",
    );
    let out = run(elastic_run("/bin/sh", dir.path(), "sh", &["--gpus", "2"])
        .args(["--spawn", "direct", "--max-restarts", "0"])
        .arg(&script));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    assert!(
        all.contains("worker rank 1 failed\n  exitcode  : 9"),
        "{all}"
    );
    assert!(
        all.contains("worker exit codes [9]"),
        "a crash, as classified: {all}"
    );
    let stopped = std::fs::read_to_string(dir.path().join("stopped.txt")).unwrap();
    assert_eq!(stopped.trim(), "0 2 127.0.0.1", "rank 0 was stopped");
    // torchrun's options have no place there.
    let out = run(elastic_run("/bin/sh", dir.path(), "sh2", &["--gpus", "2"])
        .args(["--spawn", "direct", "--standalone"])
        .arg(&script));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("takes no torchrun options (--standalone)"));
}

/// Preempted (SIGTERM) and resumed under torchrun's agent and under the warm pool, a job ends with
/// the parameters of one uninterrupted run: made once, by the pool, as every way of starting the
/// workers trains alike (`spawned_directly_or_by_the_pool_a_ddp_job_trains_exactly_as_under_torchrun`).
#[test]
fn preempting_and_resuming_gives_the_same_parameters_as_an_uninterrupted_run() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let reference = run(&mut toy_for_preemption(
        &python,
        dir.path(),
        "pool",
        "reference",
        "reference.json",
        "0",
    ));
    assert!(reference.status.success(), "{}", text(&reference));
    for spawn in ["torchrun", "pool"] {
        preempt_and_resume(&python, dir.path(), spawn);
    }
}

/// The toy the preemption tests move and compare: 40 steps, saving every 15, `sleep` seconds a
/// step, its end written to `out`.
fn preemptible_toy<'a>(command: &'a mut Command, out: &str, sleep: &str) -> &'a mut Command {
    command.args([
        TOY,
        "--steps",
        "40",
        "--save-every",
        "15",
        "--step-sleep",
        sleep,
        "--out",
        out,
    ])
}

/// [`preemptible_toy`] on 2 GPUs, started by `spawn`.
fn toy_for_preemption(
    python: &str,
    dir: &Path,
    spawn: &str,
    job: &str,
    out: &str,
    sleep: &str,
) -> Command {
    let mut command = elastic_run(python, dir, job, &["--gpus", "2", "--spawn", spawn]);
    preemptible_toy(&mut command, out, sleep);
    command
}

fn preempt_and_resume(python: &str, dir: &Path, spawn: &str) {
    let job = format!("preempted-{spawn}");
    let out = format!("resumed-{spawn}.json");
    let toy = |sleep: &str| toy_for_preemption(python, dir, spawn, &job, &out, sleep);
    let mut child = toy("0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_step(dir, &job, 8, &mut child);
    // A scheduler's preemption: SIGTERM to elastic-run. The workers save at the next step and exit.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(75), "preempted, resumable");
    assert!(!dir.join(&out).exists(), "it stopped before the end");

    // The same command resumes from the checkpoint and finishes.
    let resumed = run(&mut toy("0"));
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("resumed from step"),
        "{}",
        text(&resumed)
    );
    let read = |name: &str| read_json(dir, name);
    let (a, b) = (read("reference.json"), read(&out));
    assert_eq!(
        a["params"], b["params"],
        "bit-identical parameters ({spawn})"
    );
    assert_eq!(a["final_loss"], b["final_loss"]);
}

#[test]
fn no_worker_outlives_a_sigkilled_launcher() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    // torchrun's agent and its workers; or the spawner, the pool's leader and the workers it forked.
    for spawn in ["torchrun", "pool"] {
        let job = format!("killed-{spawn}");
        let mut child = spawn_endless_toy(&mut elastic_run(
            &python,
            dir.path(),
            &job,
            &["--gpus", "2", "--spawn", spawn],
        ));
        wait_for_step(dir.path(), &job, 2, &mut child);
        assert!(
            processes_of(&job).len() >= 3,
            "{spawn}: elastic-run, its launch and two workers run"
        );
        let pool = pool_processes(child.id());
        if spawn == "pool" {
            assert_eq!(pool_workers(&job).len(), 2, "both workers from the pool");
            assert_eq!(pool.len(), 2, "the pool and the launch's leader: {pool:?}");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        none_left(&format!("{spawn}: kill -9"), || {
            processes_of(&job)
                .into_iter()
                .chain(still_alive(&pool))
                .collect()
        });
    }
}

/// Waits (10 s at most) until `left` finds no process; else panics naming them and `after` what.
fn none_left(after: &str, left: impl Fn() -> Vec<i32>) {
    eventually(Duration::from_secs(10), || match left() {
        pids if pids.is_empty() => Ok(()),
        pids => Err(format!("processes left after {after}: {pids:?}")),
    });
}

/// Those of `pids` still alive.
fn still_alive(pids: &[i32]) -> impl Iterator<Item = i32> + '_ {
    pids.iter().copied().filter(|&pid| alive(pid))
}

/// Whether process `pid` exists (and is not a zombie).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// A process's command line, split.
fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// Whether process `pid`'s environment (as /proc shows it) sets `name`.
fn sets_var(pid: i32, name: &str) -> bool {
    let prefix = format!("{name}=");
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|&b| b == 0)
            .any(|kv| kv.starts_with(prefix.as_bytes()))
    })
}

/// The warm pool's own processes (the pool, and its launches' leaders) that `owner` owns: they
/// carry the pool's mark, and the pool's command line, `PYTHON -u -c SOURCE SOCKET OWNER ...`.
fn pool_processes(owner: u32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| sets_var(pid, gangway_launcher::pool::POOL_VAR))
        .filter(|&pid| cmdline(pid).get(5).is_some_and(|o| *o == owner.to_string()))
        .collect()
}

/// The workers of `job` a pool forked: the job's processes that carry a pool's mark.
fn pool_workers(job: &str) -> Vec<i32> {
    processes_of(job)
        .into_iter()
        .filter(|&pid| sets_var(pid, gangway_launcher::pool::POOL_VAR))
        .collect()
}

/// Starts two pool workers of job `job` that write their pids and sleep; elastic-run, and rank 1's
/// pid once it runs.
fn sleeping_pool_workers(python: &str, dir: &Path, job: &str) -> (Child, i32) {
    let script = write_script(
        dir,
        "train.py",
        "import os, time\n\
         open(f\"rank{os.environ['RANK']}.pid\", \"w\").write(str(os.getpid()))\n\
         time.sleep(600)\n",
    );
    let _ = std::fs::remove_file(dir.join("rank1.pid"));
    let child = elastic_run(python, dir, job, &["--gpus", "2"])
        .args(["--spawn", "pool", "--max-restarts", "0"])
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rank1 = eventually_value(Duration::from_secs(60), || {
        std::fs::read_to_string(dir.join("rank1.pid"))
            .ok()
            .and_then(|pid| pid.parse::<i32>().ok())
            .ok_or_else(|| "rank 1 has not started".to_owned())
    });
    assert!(pool_workers(job).contains(&rank1), "forked by the pool");
    (child, rank1)
}

/// A pool whose owner dies while the pool still imports (torch, then a job's own slow preload)
/// goes at once, not once its imports are done.
#[test]
fn a_pool_whose_owner_dies_while_it_imports_goes_with_it() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let modules = dir.path().join("modules");
    std::fs::create_dir(&modules).unwrap();
    // It says when the pool has begun importing it (past torch and the pool's own checks).
    let importing = dir.path().join("importing");
    let slow = format!(
        "import time\nopen({:?}, 'w').close()\ntime.sleep(300)\n",
        importing.display().to_string()
    );
    write_script(&modules, "slow_to_import.py", &slow);
    let script = write_script(dir.path(), "train.py", "pass\n");
    let mut child = elastic_run(&python, dir.path(), "slow-pool", &["--gpus", "1"])
        .args(["--spawn", "pool"])
        .env(gangway_launcher::pool::PRELOAD_VAR, "slow_to_import")
        .env("PYTHONPATH", &modules)
        .arg(&script)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(60), || match importing.exists() {
        true => Ok(()),
        false => Err("the pool has not begun importing the slow module".to_owned()),
    });
    let pool = pool_processes(child.id());
    assert!(!pool.is_empty(), "the pool is there");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    none_left("its owner was killed while it imported", || {
        still_alive(&pool).collect()
    });
}

/// The pool's leader for a launch killed: its workers die with it (their parent-death signal),
/// and the launch fails as a crash blamed on the pool, not on a worker.
#[test]
fn a_pool_launch_whose_leader_is_killed_fails_as_a_crash_and_leaves_nothing() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let (child, rank1) = sleeping_pool_workers(&python, dir.path(), "leaderless");
    let leader: i32 = proc_field(rank1, "status", "PPid")
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap();
    assert!(
        pool_processes(child.id()).contains(&leader),
        "the leader is the pool's"
    );
    // SAFETY: kill(2) of the leader's pid, just read.
    unsafe { libc::kill(leader, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "a crash: {all}");
    assert!(
        all.contains("the warm pool's leader for this launch died"),
        "{all}"
    );
    none_left("the leader died", || processes_of("leaderless"));
}

/// A worker the pool forked and SIGKILL ends is reported as that worker's own failure, as for a
/// direct worker (its rank and `-9`); the others are stopped, and nothing of the launch is left.
#[test]
fn a_pool_worker_killed_with_sigkill_is_reported_as_its_own_failure() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let (child, rank1) = sleeping_pool_workers(&python, dir.path(), "sigkill");
    let pool = pool_processes(child.id());
    // SAFETY: kill(2) of the worker's pid, just read.
    unsafe { libc::kill(rank1, libc::SIGKILL) };
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "a crash: {all}");
    assert!(
        all.contains(&format!(
            "worker rank 1 failed\n  exitcode  : -9 (pid: {rank1})"
        )),
        "{all}"
    );
    assert!(
        all.contains("worker exit codes [-9"),
        "classified as rank 1's: {all}"
    );
    assert!(
        !all.contains("pool's leader"),
        "not blamed on the pool: {all}"
    );
    none_left("elastic-run ended", || {
        processes_of("sigkill")
            .into_iter()
            .chain(still_alive(&pool))
            .collect()
    });
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

/// The toy's `plan:` lines (one per launch), and the steps it saved when stopped, from its output.
fn launches_and_saves(output: &str) -> (Vec<String>, Vec<u64>) {
    let plans = output
        .lines()
        .filter_map(|l| l.strip_prefix("plan: "))
        .map(str::to_owned)
        .collect();
    let saved = output
        .lines()
        .filter_map(|l| l.strip_prefix("stop requested: saved step "))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .collect();
    (plans, saved)
}

/// A real job for the process executor: `elastic-run ARGS` in `dir`, logging to `dir/JOB.log`.
fn process_job(dir: &Path, job: &str, args: &[&str]) -> RunCommand {
    let checkpoint_dir = dir.join(job).display().to_string();
    let own = [
        "--job-id",
        job,
        "--grace",
        "30",
        "--checkpoint-dir",
        &checkpoint_dir,
    ];
    RunCommand {
        args: own.iter().chain(args).map(|a| a.to_string()).collect(),
        cwd: dir.to_path_buf(),
        env: std::env::vars().collect(),
        log: Some(dir.join(format!("{job}.log"))),
        user: None,
    }
}

fn launch_on(job: u32, attempt: u64, gpus: &[u32], run: &RunCommand) -> Launch {
    Launch {
        job: JobId(job),
        attempt,
        gpu_type: GpuTypeId(0),
        gpus: gpus.iter().map(|&g| GpuId(g)).collect(),
        steps_per_second: 1.0,
        pace: Vec::new(),
        startup_seconds: 0.0,
        remaining_steps: 1000.0,
        total_steps: 1000.0,
        resources: None,
        run: Some(run.clone()),
        batch: None,
        pp: None,
    }
}

/// Polls `exec` until the job's workers end; their event (progress reports on the way are passed).
fn wait_for_end(exec: &mut ProcessExecutor) -> WorkerEvent {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ending = exec
            .poll(0.0)
            .into_iter()
            .find(|event| !matches!(event, WorkerEvent::Progressed { .. }));
        if let Some(event) = ending {
            return event;
        }
        assert!(Instant::now() < deadline, "the workers did not end");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn executor(dir: &Path) -> ProcessExecutor {
    ProcessExecutor::new(
        PathBuf::from(env!("CARGO_BIN_EXE_elastic-run")),
        vec![0, 1, 2, 3],
        dir.join("runs"),
    )
    .unwrap()
}

#[test]
fn resizing_two_one_two_resumes_from_each_checkpoint_and_keeps_the_global_batch() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let run = process_job(
        dir.path(),
        "resized",
        &[
            "--gpus",
            "1:2",
            "--python",
            &python,
            "--global-batch",
            "8",
            "--max-micro-batch",
            "4",
            TOY,
            "--steps",
            "50",
            "--save-every",
            "10",
            "--step-sleep",
            "0.1",
        ],
    );
    let mut exec = executor(dir.path());
    // Each resize is what the control plane does: stop (checkpoint), then launch on the new GPUs.
    exec.launch(&launch_on(1, 0, &[0, 1], &run), 0.0).unwrap();
    let runs = dir.path().join("runs");
    wait_for_progress(|| attempt_progress_files(&runs), 12, || {});
    exec.stop(JobId(1), 1.0).unwrap();
    exec.launch(&launch_on(1, 1, &[0], &run), 1.0).unwrap();
    wait_for_progress(|| attempt_progress_files(&runs), 25, || {});
    exec.stop(JobId(1), 2.0).unwrap();
    exec.launch(&launch_on(1, 2, &[0, 1], &run), 2.0).unwrap();
    let end = wait_for_end(&mut exec);
    let log = std::fs::read_to_string(dir.path().join("resized.log")).unwrap();
    assert!(
        matches!(end, WorkerEvent::Finished { attempt: 2, .. }),
        "{end:?}\n{log}"
    );
    let (plans, saved) = launches_and_saves(&log);
    assert_eq!(
        saved.len(),
        2,
        "two stops, each saving a checkpoint:\n{log}"
    );
    assert!(saved[0] >= 12 && saved[1] >= 25, "{saved:?}");
    assert_eq!(
        plans,
        [
            "world=2 dp=2 global=8 micro=4 accum=1 devices=0,1; starting from scratch".to_owned(),
            format!(
                "world=1 dp=1 global=8 micro=4 accum=2 devices=0; resumed from step {}",
                saved[0]
            ),
            format!(
                "world=2 dp=2 global=8 micro=4 accum=1 devices=0,1; resumed from step {}",
                saved[1]
            ),
        ],
        "each launch resumes exactly where the last one saved, with the same global batch"
    );
    assert!(log.contains("final loss"), "{log}");
}

/// What the control plane does to move a job (stop it with a checkpoint, launch it on other GPUs),
/// through the warm pool: both attempts' workers are forked by the one pool the executor's jobs
/// share, and the moved job ends with the parameters of a run never stopped, bit for bit.
#[test]
fn under_the_executor_a_job_moved_through_the_warm_pool_resumes_bit_identically() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let training = [TOY, "--steps", "40", "--save-every", "15"];
    let reference = run(elastic_run(
        &python,
        dir.path(),
        "reference",
        &["--gpus", "2", "--spawn", "direct"],
    )
    .args(training)
    .args(["--out", "reference.json"]));
    assert!(reference.status.success(), "{}", text(&reference));
    let mut args = vec!["--gpus", "2", "--python", &python, "--spawn", "pool"];
    args.extend(training);
    args.extend(["--out", "moved.json", "--step-sleep", "0.1"]);
    let run = process_job(dir.path(), "moved", &args);
    let mut exec = executor(dir.path());
    exec.launch(&launch_on(1, 0, &[0, 1], &run), 0.0).unwrap();
    let runs = dir.path().join("runs");
    wait_for_progress(|| attempt_progress_files(&runs), 8, || {});
    let first = pool_workers("moved");
    assert_eq!(
        first.len(),
        2,
        "the first attempt's workers come from the pool"
    );
    // The executor is this process: the pool is its (the pool's parent is not one of the pool's).
    let pool = pool_processes(std::process::id());
    let parent = |pid: i32| -> Option<i32> {
        proc_field(pid, "status", "PPid")?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let zygotes: Vec<i32> = pool
        .iter()
        .copied()
        .filter(|&pid| parent(pid).is_some_and(|p| !pool.contains(&p)))
        .collect();
    assert_eq!(zygotes.len(), 1, "one pool: {pool:?}");
    exec.stop(JobId(1), 1.0).unwrap();
    exec.launch(&launch_on(1, 1, &[2, 3], &run), 1.0).unwrap();
    let second = eventually_value(Duration::from_secs(60), || match pool_workers("moved") {
        pids if pids.len() == 2 && pids.iter().all(|p| !first.contains(p)) => Ok(pids),
        pids => Err(format!("the second attempt's pool workers: {pids:?}")),
    });
    let end = wait_for_end(&mut exec);
    let log = std::fs::read_to_string(dir.path().join("moved.log")).unwrap();
    assert!(
        matches!(end, WorkerEvent::Finished { attempt: 1, .. }),
        "{end:?}\n{log}"
    );
    assert!(!log.contains("no warm pool"), "{log}");
    let (plans, saved) = launches_and_saves(&log);
    assert_eq!(saved.len(), 1, "{log}");
    assert!(
        plans[1].ends_with(&format!("resumed from step {}", saved[0])),
        "{plans:?}"
    );
    assert!(!second.is_empty());
    assert!(
        alive(zygotes[0]),
        "the pool that forked the first attempt's workers serves on after both"
    );
    let read = |name: &str| read_json(dir.path(), name);
    assert_eq!(
        read("reference.json")["params"],
        read("moved.json")["params"],
        "moved through the pool, bit-identical to the run never stopped"
    );
    // The executor's end is the daemon's: its pools end with it, through their cgroup. (Without
    // cgroups they end when their owner does, here this test's process.)
    let held = matches!(
        exec.cgroups(),
        gangway_launcher::confine::Cgroups::Made { .. }
    );
    drop(exec);
    if held {
        none_left("the executor ended", || pool_processes(std::process::id()));
    }
}

#[test]
fn a_tp2_job_on_four_gpus_only_ever_runs_at_world_size_two_or_four() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let probe = write_script(
        dir.path(),
        "probe.py",
        "import os\nif os.environ['RANK'] == '0':\n    open('worlds.txt', 'a').write(\
         os.environ['WORLD_SIZE'] + ' ' + os.environ['GANGWAY_PLAN'] + ' ' + os.environ['CUDA_VISIBLE_DEVICES'] + '\\n')\n",
    );
    let run = process_job(
        dir.path(),
        "tp2",
        &[
            "--gpus",
            "1:4",
            "--tp",
            "2",
            "--python",
            &python,
            probe.to_str().unwrap(),
        ],
    );
    let mut exec = executor(dir.path());
    let mut endings = Vec::new();
    for (attempt, gpus) in [&[0, 1, 2, 3][..], &[0, 1, 2], &[1, 3], &[2]]
        .into_iter()
        .enumerate()
    {
        exec.launch(&launch_on(2, attempt as u64, gpus, &run), 0.0)
            .unwrap();
        endings.push(wait_for_end(&mut exec));
    }
    let worlds = std::fs::read_to_string(dir.path().join("worlds.txt")).unwrap();
    assert_eq!(
        worlds.lines().collect::<Vec<_>>(),
        [
            "4 dp=2,tp=2,pp=1 0,1,2,3",
            "2 dp=1,tp=2,pp=1 0,1",
            "2 dp=1,tp=2,pp=1 1,3"
        ],
        "three GPUs give one tp group of two; one GPU gives none"
    );
    assert!(
        endings[..3]
            .iter()
            .all(|e| matches!(e, WorkerEvent::Finished { .. })),
        "{endings:?}"
    );
    match &endings[3] {
        WorkerEvent::Failed {
            error, retryable, ..
        } => {
            assert!(!retryable, "a plan that cannot fit is not retried");
            assert!(error.contains("tp"), "{error}");
        }
        other => panic!("one GPU cannot hold a tp=2 group, but {other:?}"),
    }
}

/// Kills a child (the daemon) when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn under_the_daemon_a_job_moves_off_cordoned_gpus_and_loses_no_work() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let _daemon = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args([
                "serve",
                "--fake-gpus",
                "4",
                "--workers",
                "processes",
                "--policy",
                "fifo",
            ])
            .args(["--round", "1", "--listen", &addr, "--journal"])
            .arg(dir.path().join("journal"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let base = format!("http://{addr}");
    support::wait_until_answering(&base);
    let toy = |job: &str, placement: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
        command
            .args(placement)
            .args([
                "--gpus", "2", "--python", &python, "--job-id", job, "--grace", "30",
            ])
            .arg("--checkpoint-dir")
            .arg(dir.path().join(job))
            .args([
                TOY,
                "--steps",
                "50",
                "--save-every",
                "10",
                "--out",
                &format!("{job}.json"),
            ])
            .current_dir(dir.path());
        command
    };
    let reference = run(&mut toy("reference", &["--fake-gpus", "2"]));
    assert!(reference.status.success(), "{}", text(&reference));

    let journal = dir.path().join("journal");
    let mut client = toy("moved", &["--daemon", &addr])
        .args(["--step-sleep", "0.1"])
        .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
        // Not cargo's library path for the tests: the job needs none (the daemon would check each
        // of its directories).
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = journal.join("runs");
    wait_for_progress(
        || attempt_progress_files(&runs),
        8,
        || {
            assert!(
                client.try_wait().unwrap().is_none(),
                "elastic-run ended early"
            )
        },
    );
    let http = support::Api::new(&base, &journal, Duration::from_secs(60));
    // What the workers measured of their training reaches the API (issue 20's first part).
    eventually(Duration::from_secs(30), || {
        let m = job_info(&http, 0)["measured"].clone();
        (m["replicas"] == 2 && m["replica_batch"] == 8 && m["noise_scale"].as_f64() > Some(0.0))
            .then_some(())
            .ok_or(format!("{m}"))
    });
    let refused = http
        .post("/gpus/cordon", &serde_json::json!({ "gpus": [9] }))
        .unwrap();
    assert_eq!(refused.status(), 422, "GPU 9 does not exist");
    let cordoned = http
        .post("/gpus/cordon", &serde_json::json!({ "gpus": [0, 1] }))
        .unwrap();
    assert_eq!(cordoned.status(), 200);
    let out = client.wait_with_output().unwrap();
    let output = text(&out);
    assert!(out.status.success(), "{output}");
    let (plans, saved) = launches_and_saves(&output);
    assert_eq!(saved.len(), 1, "{output}");
    assert_eq!(
        plans,
        [
            "world=2 dp=2 global=16 micro=4 accum=2 devices=0,1; starting from scratch".to_owned(),
            format!(
                "world=2 dp=2 global=16 micro=4 accum=2 devices=2,3; resumed from step {}",
                saved[0]
            ),
        ],
        "moved to GPUs 2,3, from the checkpoint"
    );
    assert!(output.contains("job 0 running on GPUs 2,3"), "{output}");
    let read = |name: &str| read_json(dir.path(), name);
    assert_eq!(
        read("reference.json")["params"],
        read("moved.json")["params"],
        "bit-identical to the run that never moved"
    );
}

/// Sia's per-GPU-type profiles, where the shared reference data is.
fn sia_profiles() -> Option<PathBuf> {
    support::shared_data("sia/profiles", "cifar10")
}

/// The world size of each launch in a toy's output, in order.
fn world_sizes(plans: &[String]) -> Vec<u32> {
    plans
        .iter()
        .filter_map(|p| p.strip_prefix("world=")?.split(' ').next()?.parse().ok())
        .collect()
}

#[test]
fn under_sia_a_real_elastic_job_grows_then_shrinks_to_the_gpus_left_and_its_loss_carries_on() {
    let Some((plans, info)) =
        a_real_elastic_job_fills_the_server_then_shrinks_to_the_gpus_left("sia")
    else {
        return;
    };
    let worlds = world_sizes(&plans);
    assert_eq!(worlds.first(), Some(&1), "it starts on one GPU: {plans:?}");
    let grown = worlds.iter().position(|&w| w == 4).expect("it grew to 4");
    assert!(
        worlds[..=grown].windows(2).all(|w| w[0] < w[1]),
        "it only grew while alone: {plans:?}"
    );
    // Growing is a restart the policy chose, timed from the decision to the first step after it.
    assert!(info["last_restart_seconds"].as_f64() > Some(0.0), "{info}");
    // Real workers take time to start: most of a restart is after their launch.
    let phases = &info["last_restart_phases"];
    let first_step = phases["first_step"].as_f64().unwrap_or(0.0);
    assert!(first_step > 0.0, "{info}");
    assert!(phases["stop"].as_f64() >= Some(0.0), "{info}");
}

#[test]
fn under_ramp_a_real_elastic_job_starts_wide_then_shrinks_to_the_gpus_left_and_its_loss_carries_on()
{
    let Some((plans, info)) =
        a_real_elastic_job_fills_the_server_then_shrinks_to_the_gpus_left("ramp")
    else {
        return;
    };
    // ramp lets a new job start on up to 8 GPUs where sia starts it on one: alone, this one starts on
    // the whole server, so that its one resize is the shrink.
    assert_eq!(world_sizes(&plans), [4, 2], "{plans:?}");
    assert_eq!(info["last_resize"]["from"], 4, "{info}");
}

/// Under `policy` (a goodput one), on 4 fake GPUs of Sia's `rtx` type: a real training job with
/// cifar10's profile comes to train on all 4, shrinks to the 2 left when half the server goes out of
/// service, finishes there, and every launch resumed from the last one's checkpoint with nothing lost.
/// Returns its launches' plans and its last view in the API (`None` without torch under a local run,
/// or without Sia's profiles).
fn a_real_elastic_job_fills_the_server_then_shrinks_to_the_gpus_left(
    policy: &str,
) -> Option<(Vec<String>, serde_json::Value)> {
    let python = support::torch_python()?;
    let profiles = sia_profiles()?;
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let journal = dir.path().join("journal");
    // The policy sizes the job 1, 2 or 4 by cifar10's profile, and charges what its restarts really
    // took.
    let daemon = goodput_daemon(policy, &profiles, &addr, &journal);
    let base = format!("http://{addr}");
    support::wait_until_answering(&base);
    let toy = |job: &str, placement: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
        command
            .args(placement)
            .args(["--python", &python, "--job-id", job, "--grace", "30"])
            .arg("--checkpoint-dir")
            .arg(dir.path().join(job))
            .args([TOY, "--steps", "240", "--save-every", "5"])
            .args(["--out", &format!("{job}.json")])
            .current_dir(dir.path());
        command
    };
    // The same training, uninterrupted, at the same global batch (the toy's 16: no --global-batch,
    // which would also make it the batch sia prices the job at, far below cifar10's, so that it
    // would hardly grow).
    let reference = run(&mut toy("reference", &["--fake-gpus", "1"]));
    assert!(reference.status.success(), "{}", text(&reference));
    // A quarter of the training (argparse takes the last --steps).
    let early = run(toy("early", &["--fake-gpus", "1"]).args(["--steps", "60"]));
    assert!(early.status.success(), "{}", text(&early));

    let client = toy(
        "elastic",
        &["--daemon", &addr, "--gpus", "1:4", "--job-type", "cifar10"],
    )
    .args(["--step-sleep", "0.2"])
    .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
    .env_remove("LD_LIBRARY_PATH")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let http = support::Api::new(&base, &journal, Duration::from_secs(60));
    // Alone, it grows to the whole server, and trains there (its workers measure 4 replicas).
    eventually(Duration::from_secs(150), || {
        let info = job_info(&http, 0);
        (placement_of(&info).len() == 4 && info["measured"]["replicas"] == 4)
            .then_some(())
            .ok_or(format!("not training on 4 GPUs yet: {info}"))
    });
    // Half the server goes out of service: it shrinks to what is left.
    let cordoned = http
        .post("/gpus/cordon", &serde_json::json!({ "gpus": [2, 3] }))
        .unwrap();
    assert_eq!(cordoned.status(), 200);
    let out = client.wait_with_output().unwrap();
    let output = text(&out);
    assert!(out.status.success(), "{output}");

    let (plans, saved) = launches_and_saves(&output);
    let worlds = world_sizes(&plans);
    let full = worlds
        .iter()
        .position(|&w| w == 4)
        .expect("it came to all 4");
    assert_eq!(
        worlds[full + 1..],
        [2],
        "{policy}: it shrank to the 2 GPUs left, and finished there: {plans:?}"
    );
    // Every launch resumed where the last one saved: the training never restarted.
    assert_eq!(saved.len(), plans.len() - 1, "{output}");
    for (plan, step) in plans[1..].iter().zip(&saved) {
        assert!(
            plan.ends_with(&format!("resumed from step {step}")),
            "{plan} after saving step {step}:\n{output}"
        );
        assert!(
            plan.contains("global=16"),
            "the global batch is kept: {plan}"
        );
    }
    // The same optimisation as the uninterrupted run but for float rounding and dropout draws
    // (which differ at each world size: RNG streams cannot be remapped). The draws alone move the
    // final loss by more than 2x (uninterrupted runs at world sizes 1, 2 and 4 end at 0.020, 0.015
    // and 0.037), so the loss only shows whether training was lost: a job that restarted from
    // scratch late, or lost most of its steps, ends near the loss after a quarter of the steps
    // (0.17), not below half of it.
    let loss = |name: &str| read_json(dir.path(), name)["final_loss"].as_f64().unwrap();
    let (ours, quarter) = (loss("elastic.json"), loss("early.json"));
    assert!(
        ours < quarter / 2.0,
        "final loss {ours} after resizing, {quarter} after a quarter of the steps \
         ({} uninterrupted): {plans:?}",
        loss("reference.json")
    );
    let info = job_info(&http, 0);
    assert_eq!(info["phase"], "finished", "{info}");
    assert_eq!(
        info["resizes"].as_u64(),
        Some(worlds.len() as u64 - 1),
        "{info}"
    );
    // Its workers came from the daemon's warm pool, which waits for the next job, and ends with
    // the daemon, leaving nothing.
    let daemon_pid = daemon.0.id();
    let pool = pool_processes(daemon_pid);
    assert!(!pool.is_empty(), "the daemon's pool serves on");
    assert!(!output.contains("no warm pool"), "{output}");
    drop(daemon);
    none_left("the daemon was killed", || still_alive(&pool).collect());
    Some((plans, info))
}

/// The attempts (`GANGWAY_ATTEMPT`) of job `job` that have processes now.
fn attempts_running(job: &str) -> std::collections::BTreeSet<String> {
    processes_of(job)
        .into_iter()
        .filter_map(|pid| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            environ
                .split(|&b| b == 0)
                .find_map(|kv| kv.strip_prefix(b"GANGWAY_ATTEMPT="))
                .map(|v| String::from_utf8_lossy(v).into_owned())
        })
        .collect()
}

/// `gangway serve` under `policy` (a goodput one) on 4 fake `rtx` GPUs, running real jobs, on
/// `journal`.
fn goodput_daemon(policy: &str, profiles: &Path, addr: &str, journal: &Path) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args(["serve", "--fake-gpus", "4", "--fake-gpu-type", "rtx"])
            .args(["--workers", "processes", "--policy", policy, "--round", "2"])
            .arg("--goodput-profiles")
            .arg(profiles)
            .args(["--listen", addr, "--journal"])
            .arg(journal)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn a_daemon_killed_during_a_resize_resumes_the_job_once_from_its_checkpoint_with_its_model() {
    let python = need_torch!();
    let Some(profiles) = sia_profiles() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", support::free_port());
    let journal = dir.path().join("journal");
    let mut daemon = goodput_daemon("sia", &profiles, &addr, &journal);
    let base = format!("http://{addr}");
    support::wait_until_answering(&base);
    let client = Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args(["--daemon", &addr, "--gpus", "1:4", "--job-type", "cifar10"])
        // A job id of its own: another test's job runs as `resized`, maybe at the same time.
        .args([
            "--python",
            &python,
            "--job-id",
            "killed-mid-resize",
            "--grace",
            "30",
        ])
        .arg("--checkpoint-dir")
        .arg(dir.path().join("killed-mid-resize"))
        .args([
            TOY,
            "--steps",
            "300",
            "--save-every",
            "5",
            "--step-sleep",
            "0.2",
        ])
        .current_dir(dir.path())
        .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let api = support::Api::new(&base, &journal, Duration::from_secs(30));
    // Once it trains on the whole server and its model knows a configuration, two GPUs go out of
    // service: it must shrink, and the daemon is killed on the way (its workers checkpointing, or
    // stopped and not yet started on the two GPUs left).
    eventually(Duration::from_secs(200), || {
        let info = job_info(&api, 0);
        (info["measured"]["replicas"] == 4
            && info["learned"][0]["configurations"].as_u64() >= Some(1))
        .then_some(())
        .ok_or(format!("not trained on 4 GPUs with a model yet: {info}"))
    });
    let cordoned = api
        .post("/gpus/cordon", &serde_json::json!({ "gpus": [2, 3] }))
        .unwrap();
    assert_eq!(cordoned.status(), 200);
    let learned = eventually_value(Duration::from_secs(60), || {
        let info = job_info(&api, 0);
        let phase = info["phase"].as_str().unwrap_or_default();
        ["checkpointing", "preempted", "resizing", "starting"]
            .contains(&phase)
            .then(|| info["learned"].clone())
            .ok_or(format!("not between its sizes: {info}"))
    });
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    let _daemon = goodput_daemon("sia", &profiles, &addr, &journal);
    support::wait_until_answering(&base);
    let api = support::Api::new(&base, &journal, Duration::from_secs(30));
    let after = job_info(&api, 0);
    assert_eq!(
        after["learned"], learned,
        "the model survived the kill: {after}"
    );
    // It runs once: never two attempts of it at a time, until it ends.
    let mut seen = std::collections::BTreeSet::new();
    let mut client = client;
    let status = loop {
        let attempts = attempts_running("killed-mid-resize");
        assert!(
            attempts.len() <= 1,
            "two attempts run at once: {attempts:?}"
        );
        seen.extend(attempts);
        if let Some(status) = client.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = client.wait_with_output().unwrap();
    let output = text(&out);
    assert!(status.success(), "{output}");
    let (plans, saved) = launches_and_saves(&output);
    assert_eq!(
        plans
            .iter()
            .filter(|p| p.contains("starting from scratch"))
            .count(),
        1,
        "{plans:?}"
    );
    // Every launch resumed where the last one saved: the kill lost no work.
    for (plan, step) in plans[1..].iter().zip(&saved) {
        assert!(
            plan.ends_with(&format!("resumed from step {step}")),
            "{plan} after saving step {step}:\n{output}"
        );
    }
    assert_eq!(job_info(&api, 0)["phase"], "finished");
}

/// The `KEY=VALUE` fields of the toy's `resources:` reports (one per rank), from its output.
fn resource_lines(output: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    output
        .split("resources: ")
        .skip(1)
        .map(|rest| rest.lines().next().unwrap_or(""))
        .map(|fields| {
            fields
                .split(' ')
                .filter_map(|f| f.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect()
        })
        .collect()
}

/// A line of `/proc/PID/status` (`Cpus_allowed_list`), or of `/proc/PID/cgroup` naming `memory`.
fn proc_field(pid: i32, file: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()?
        .lines()
        .find(|l| l.contains(key))
        .map(str::to_owned)
}

/// Synergy live: the daemon gives each job the CPUs it was allotted (the server's GPU-proportional
/// share here: 2 cores over 4 GPUs, so one core for each 2-GPU job), pins every process of the job
/// to it, tells the workers, and holds the job's memory (8 GB over 4 GPUs: 4 GB each) in a cgroup
/// of its own where the machine lets the daemon make one.
#[test]
fn under_the_daemon_each_job_runs_on_the_cores_it_was_allotted() {
    let python = need_torch!();
    if gangway_launcher::confine::usable_cores().len() < 2 {
        support::skip("this machine gives the tests fewer than 2 cores");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let addr = format!("127.0.0.1:{port}");
    let daemon_log = dir.path().join("daemon.log");
    let _daemon = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_gangway"))
            .args([
                "serve",
                "--fake-gpus",
                "4",
                "--cpus",
                "2",
                "--memory-gb",
                "8",
            ])
            .args(["--workers", "processes", "--policy", "fifo"])
            .args(["--round", "1", "--listen", &addr, "--journal"])
            .arg(dir.path().join("journal"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&daemon_log).unwrap())
            .spawn()
            .unwrap(),
    );
    support::wait_until_answering(&format!("http://{addr}"));
    let journal = dir.path().join("journal");
    let submit = |job: &str| {
        Command::new(env!("CARGO_BIN_EXE_elastic-run"))
            .args(["--daemon", &addr, "--gpus", "2", "--python", &python])
            .args(["--job-type", "res18"])
            .args(["--job-id", job, "--grace", "30", "--checkpoint-dir"])
            .arg(dir.path().join(job))
            // 20 s of steps: the two must overlap, and under load one job's workers took longer to
            // start than the other's 6 s of steps once did.
            .args([
                TOY,
                "--steps",
                "200",
                "--save-every",
                "0",
                "--step-sleep",
                "0.1",
            ])
            .current_dir(dir.path())
            .env("GANGWAY_TOKEN_FILE", journal.join("api-token"))
            .env_remove("LD_LIBRARY_PATH")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let clients = [submit("left"), submit("right")];
    // While both run: every process of each job is pinned to one core, and not the other's.
    let mut pinned = Vec::new();
    eventually(Duration::from_secs(120), || {
        pinned.clear();
        for job in ["left", "right"] {
            let pids = processes_of(job);
            let lists: std::collections::BTreeSet<String> = pids
                .iter()
                .filter_map(|&p| proc_field(p, "status", "Cpus_allowed_list"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("").to_owned())
                .collect();
            // torchrun and its two workers (and elastic-run), all on one core.
            if pids.len() < 3 || lists.len() != 1 {
                // What the daemon did, should it come to a timeout.
                let log = std::fs::read_to_string(&daemon_log).unwrap_or_default();
                let lines: Vec<&str> = log.lines().collect();
                let tail = &lines[lines.len().saturating_sub(20)..];
                return Err(format!(
                    "{job}: pids {pids:?} allowed on {lists:?}; the daemon's log ends: {tail:#?}"
                ));
            }
            pinned.push((job, pids, lists.into_iter().next().unwrap()));
        }
        Ok(())
    });
    assert_ne!(
        pinned[0].2, pinned[1].2,
        "each job on a core of its own: {pinned:?}"
    );
    for (_, _, cores) in &pinned {
        assert!(!cores.contains([',', '-']), "one core each: {pinned:?}");
    }
    let described = std::fs::read_to_string(&daemon_log).unwrap();
    let enforced = described.contains("holds its processes and its memory limit");
    assert!(
        enforced || described.contains("memory allotments are advisory"),
        "the daemon says how memory is held: {described}"
    );
    for (job, pids, _) in &pinned {
        for &pid in pids {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let environ = String::from_utf8_lossy(&environ);
            assert!(
                environ.split('\0').any(|v| v == "GANGWAY_MEMORY_GB=4.000"),
                "{job}: process {pid} is told its memory"
            );
        }
        if enforced {
            // Every process of the job in one memory cgroup of its own, limited to 4 GB (the kernel
            // rounds a limit down to whole pages).
            let cgroups: std::collections::BTreeSet<String> = pids
                .iter()
                .filter_map(|&p| proc_field(p, "cgroup", "memory"))
                .collect();
            assert_eq!(cgroups.len(), 1, "{job}: {cgroups:?}");
            let path = cgroups.into_iter().next().unwrap();
            let path = path.rsplit(':').next().unwrap().to_owned();
            assert!(path.contains("/gangway/"), "{job}: {path}");
            let limit = ["memory.max", "memory.limit_in_bytes"]
                .iter()
                .find_map(|file| {
                    let under = |mount: &str| format!("{mount}{path}/{file}");
                    ["/sys/fs/cgroup", "/sys/fs/cgroup/memory"]
                        .iter()
                        .find_map(|m| std::fs::read_to_string(under(m)).ok())
                })
                .unwrap_or_else(|| panic!("{job}: no memory limit under {path}"));
            let limit: u64 = limit.trim().parse().unwrap();
            assert!(
                limit <= 4_000_000_000 && limit > 4_000_000_000 - 65_536,
                "{job}: limit {limit}"
            );
        }
    }
    let http = support::Api::new(&format!("http://{addr}"), &journal, Duration::from_secs(60));
    let mut listed = http.get("/jobs").unwrap();
    let listed: serde_json::Value = listed.body_mut().read_json().unwrap();
    let types: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["res18", "res18"], "--job-type reaches the daemon");
    for (client, (job, _, cores)) in clients.into_iter().zip(&pinned) {
        let out = client.wait_with_output().unwrap();
        let output = text(&out);
        assert!(out.status.success(), "{job}: {output}");
        // The workers saw it too: both ranks, one core, the one the test found.
        let seen = resource_lines(&output);
        assert_eq!(seen.len(), 2, "{job}: {output}");
        for rank in &seen {
            assert_eq!(rank["cpus"], "1", "{job}: {output}");
            assert_eq!(&rank["affinity"], cores, "{job}: {output}");
            assert_eq!(rank["memory_gb"], "4.0", "{job}: {output}");
            assert_eq!(rank["loader_workers"], "0", "{job}: {output}");
        }
    }
}

/// Whether a local Slurm with four idle nodes answers (scripts/test starts one with
/// scripts/slurm-up); the Slurm tests skip, loudly, without it.
/// The Python with torch, for a test on the local Slurm; without both the test skips (fails in CI).
macro_rules! need_torch_and_slurm {
    () => {{
        let python = need_torch!();
        if !slurm_ready() {
            return;
        }
        python
    }};
}

fn slurm_ready() -> bool {
    let idle = Command::new("sinfo")
        .args(["-h", "-N", "-t", "idle", "-o", "%N"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0);
    if idle < 4 {
        support::skip(
            "no local Slurm with 4 idle nodes (run scripts/slurm-up and export SLURM_CONF)",
        );
    }
    idle >= 4
}

/// The Slurm job name of the elastic-run `child`: its run token.
fn slurm_job_name(child: &Child) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("elastic-run-{}-{}", host.trim(), child.id())
}

fn slurm_jobs_named(name: &str) -> usize {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim() == name)
        .count()
}

fn on_slurm(python: &str, dir: &Path, job: &str, nodelist: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
    command
        .args([
            "--backend",
            "slurm",
            "--nodes",
            "2",
            "--gpus",
            "2",
            "--nodelist",
            nodelist,
        ])
        .args([
            "--python",
            python,
            "--job-id",
            job,
            "--grace",
            "30",
            "--checkpoint-dir",
        ])
        .arg(dir.join(job))
        .current_dir(dir);
    command
}

#[test]
fn slurm_runs_one_agent_per_node_and_a_preempted_job_resumes_on_other_nodes() {
    let python = need_torch_and_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let probe = write_script(
        dir.path(),
        "probe.py",
        "import os\nrank = os.environ['RANK']\nopen(f'rank{rank}.txt', 'w').write(' '.join(\
         os.environ[v] for v in ['SLURMD_NODENAME', 'CUDA_VISIBLE_DEVICES', 'WORLD_SIZE', 'GANGWAY_PLAN']))\n",
    );
    let out = run(on_slurm(&python, dir.path(), "probe", "node[1-2]").arg(&probe));
    assert!(out.status.success(), "{}", text(&out));
    let mut seen: Vec<String> = (0..2)
        .map(|rank| std::fs::read_to_string(dir.path().join(format!("rank{rank}.txt"))).unwrap())
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        ["node1 0 2 dp=2,tp=1,pp=1", "node2 0 2 dp=2,tp=1,pp=1"],
        "one worker per node, on its GPU 0"
    );

    // Preempted on nodes 1-2, resumed on nodes 3-4: the same parameters as a run never interrupted.
    let mut reference = elastic_run(&python, dir.path(), "reference", &["--gpus", "2"]);
    let reference = run(preemptible_toy(&mut reference, "reference.json", "0"));
    assert!(reference.status.success(), "{}", text(&reference));
    let mut first = on_slurm(&python, dir.path(), "moved", "node[1-2]");
    let mut child = preemptible_toy(&mut first, "moved.json", "0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let name = slurm_job_name(&child);
    wait_for_step(dir.path(), "moved", 8, &mut child);
    assert_eq!(slurm_jobs_named(&name), 1, "the step runs under its name");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let preempted = child.wait_with_output().unwrap();
    assert_eq!(preempted.status.code(), Some(75), "{}", text(&preempted));
    let (_, saved) = launches_and_saves(&text(&preempted));
    assert_eq!(saved.len(), 1, "{}", text(&preempted));
    assert_eq!(
        slurm_jobs_named(&name),
        0,
        "nothing is left in Slurm's queue"
    );

    let mut second = on_slurm(&python, dir.path(), "moved", "node[3-4]");
    let resumed = run(preemptible_toy(&mut second, "moved.json", "0"));
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert!(
        text(&resumed).contains("node3:0 node4:0"),
        "{}",
        text(&resumed)
    );
    let (plans, _) = launches_and_saves(&text(&resumed));
    assert_eq!(
        plans,
        [format!(
            "world=2 dp=2 global=16 micro=4 accum=2 devices=0; resumed from step {}",
            saved[0]
        )]
    );
    let read = |name: &str| read_json(dir.path(), name);
    assert_eq!(
        read("reference.json")["params"],
        read("moved.json")["params"],
        "no step lost or repeated"
    );
}

#[test]
fn slurm_steps_are_cancelled_when_elastic_run_is_killed() {
    let python = need_torch_and_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_endless_toy(&mut on_slurm(&python, dir.path(), "killed", "node[1-2]"));
    let name = slurm_job_name(&child);
    wait_for_step(dir.path(), "killed", 2, &mut child);
    child.kill().unwrap(); // SIGKILL: only the guardian is left to clean up
    child.wait().unwrap();
    eventually(Duration::from_secs(30), || {
        let (steps, left) = (slurm_jobs_named(&name), processes_of("killed"));
        if steps == 0 && left.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "after kill -9: {steps} Slurm steps, processes {left:?}"
            ))
        }
    });
}

/// A `gangway serve --slurm` on the local Slurm cluster (scripts/slurm-up: node1..node4, 2 GPUs
/// each, GPU ids 0-1 on node1, 2-3 on node2, ...), with `extra` options, killed when the test ends.
fn slurm_daemon(dir: &Path, addr: &str, policy: &str, extra: &[&str]) -> KillOnDrop {
    let child = Command::new(env!("CARGO_BIN_EXE_gangway"))
        .args([
            "serve",
            "--slurm",
            "--workers",
            "processes",
            "--policy",
            policy,
        ])
        .args(extra)
        .args(["--round", "1", "--listen", addr, "--journal"])
        .arg(dir.join("journal"))
        .stdout(Stdio::null())
        .stderr(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join("daemon.log"))
                .unwrap(),
        )
        .spawn()
        .unwrap();
    support::wait_until_answering(&format!("http://{addr}"));
    KillOnDrop(child)
}

/// The Slurm node of a GPU id under [`slurm_daemon`].
fn slurm_node_of(gpu: u64) -> String {
    format!("node{}", gpu / 2 + 1)
}

/// The Slurm jobs whose name starts with `prefix`.
fn slurm_jobs_starting(prefix: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%j"])
        .output()
        .expect("squeue");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

/// Puts a node back in service when the test ends, however it ends.
struct ResumeNode(String);

impl Drop for ResumeNode {
    fn drop(&mut self) {
        let _ = Command::new("scontrol")
            .args(["update", &format!("nodename={}", self.0), "state=resume"])
            .status();
    }
}

/// The toy DDP job submitted to the daemon at `addr`, following it.
fn toy_under(python: &str, dir: &Path, addr: &str, job: &str, gpus: u32, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args([
            "--daemon",
            addr,
            "--gpus",
            &gpus.to_string(),
            "--python",
            python,
        ])
        .args(["--job-id", job, "--grace", "60", "--checkpoint-dir"])
        .arg(dir.join(job))
        .arg(TOY)
        .args(args)
        .arg("--out")
        .arg(format!("{job}.json"))
        .current_dir(dir)
        .env("GANGWAY_TOKEN_FILE", dir.join("journal").join("api-token"))
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What the daemon says of job `id`.
fn job_info(api: &support::Api, id: u32) -> serde_json::Value {
    api.get(&format!("/jobs/{id}"))
        .ok()
        .and_then(|mut r| r.body_mut().read_json().ok())
        .unwrap_or(serde_json::Value::Null)
}

fn placement_of(info: &serde_json::Value) -> Vec<u64> {
    info["placement"]
        .as_array()
        .map(|a| a.iter().filter_map(|g| g.as_u64()).collect())
        .unwrap_or_default()
}

fn nodes_of(placement: &[u64]) -> std::collections::BTreeSet<String> {
    placement.iter().map(|&g| slurm_node_of(g)).collect()
}

/// The jobs whose Slurm workers see each (node, GPU) right now, from every process's environment
/// (all the emulated nodes run on this machine): `SLURMD_NODENAME`, `CUDA_VISIBLE_DEVICES` and
/// `GANGWAY_JOB_ID`.
fn slurm_gpus_in_use()
-> std::collections::BTreeMap<(String, String), std::collections::BTreeSet<String>> {
    let mut in_use = std::collections::BTreeMap::<_, std::collections::BTreeSet<String>>::new();
    let pids = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    for pid in pids.filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok()) {
        let Ok(environ) = std::fs::read(pid.path().join("environ")) else {
            continue;
        };
        let vars: std::collections::HashMap<&str, &str> = environ
            .split(|&b| b == 0)
            .filter_map(|kv| std::str::from_utf8(kv).ok()?.split_once('='))
            .collect();
        let (Some(node), Some(devices), Some(job)) = (
            vars.get("SLURMD_NODENAME"),
            vars.get("CUDA_VISIBLE_DEVICES"),
            vars.get("GANGWAY_JOB_ID"),
        ) else {
            continue;
        };
        for device in devices.split(',').filter(|d| !d.is_empty()) {
            in_use
                .entry((node.to_string(), device.to_owned()))
                .or_default()
                .insert(job.to_string());
        }
    }
    in_use
}

/// No GPU is seen by two jobs' workers, and each of `jobs` has workers on some.
fn assert_no_gpu_is_shared(jobs: &[&str]) {
    eventually(Duration::from_secs(60), || {
        let in_use = slurm_gpus_in_use();
        let shared: Vec<_> = in_use.iter().filter(|(_, jobs)| jobs.len() > 1).collect();
        if !shared.is_empty() {
            panic!("GPUs seen by two jobs: {shared:?}");
        }
        let seen: std::collections::BTreeSet<&String> = in_use.values().flatten().collect();
        jobs.iter()
            .all(|job| seen.contains(&job.to_string()))
            .then_some(())
            .ok_or(format!("not every job's workers are up: {in_use:?}"))
    });
}

/// Issue 19: the daemon schedules a Slurm cluster under Tiresias. A 1-node job and a 2-node gang
/// (4 GPUs) run at once, each through Slurm on the nodes gangway chose. A third job (4 GPUs) arrives
/// in Tiresias' top queue: the gang, now lowest in line, is preempted (a checkpoint, then `scancel`
/// of its step) and the newcomer takes its nodes. When the first job is cancelled the gang resumes,
/// on nodes it did not have, from exactly the step it saved, and ends bit-identical to an
/// uninterrupted 4-rank run. No Slurm step is left behind.
#[test]
fn under_tiresias_a_preempted_slurm_gang_resumes_on_other_nodes_bit_identical() {
    let python = need_torch_and_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let gang_args = [
        "--steps",
        "150",
        "--save-every",
        "5",
        "--global-batch",
        "32",
        "--step-sleep",
        "0.3",
    ];
    let endless = [
        "--steps",
        "100000",
        "--global-batch",
        "32",
        "--step-sleep",
        "0.3",
    ];
    let addr = format!("127.0.0.1:{}", support::free_port());
    // Queues at 16.25, 36 and 90 GPU-seconds: a test's jobs move down them in seconds.
    let _daemon = slurm_daemon(dir.path(), &addr, "tiresias:queue_scale=0.005", &[]);
    let api = support::Api::new(
        &format!("http://{addr}"),
        &dir.path().join("journal"),
        Duration::from_secs(30),
    );
    let running = |id: u32| -> Result<serde_json::Value, String> {
        let info = job_info(&api, id);
        (info["phase"] == "running")
            .then(|| info.clone())
            .ok_or(format!("{info}"))
    };
    let first = toy_under(&python, dir.path(), &addr, "first", 2, &endless);
    eventually(Duration::from_secs(120), || running(0).map(drop));
    let gang = toy_under(&python, dir.path(), &addr, "gang", 4, &gang_args);
    // Both run at once: the gang on two whole nodes, the first job on a third.
    let mut seen = (Vec::new(), Vec::new());
    eventually(Duration::from_secs(240), || {
        let (f, g) = (running(0)?, running(1)?);
        seen = (placement_of(&f), placement_of(&g));
        (seen.0.len() == 2 && seen.1.len() == 4)
            .then_some(())
            .ok_or(format!("{f} {g}"))
    });
    let (first_nodes, gang_nodes) = (nodes_of(&seen.0), nodes_of(&seen.1));
    assert_eq!(first_nodes.len(), 1, "{seen:?}");
    assert_eq!(gang_nodes.len(), 2, "{seen:?}");
    assert!(first_nodes.is_disjoint(&gang_nodes), "{seen:?}");
    // Each through Slurm, under a name that says which attempt it is.
    eventually(Duration::from_secs(60), || {
        let steps = slurm_jobs_starting("gangway-");
        (steps.len() == 2).then_some(()).ok_or(format!("{steps:?}"))
    });

    // Once the gang has saved and has over 90 GPU-seconds (the last queue, where the first job,
    // with less service or the earlier arrival, is ahead of it), a newcomer preempts it.
    eventually(Duration::from_secs(240), || {
        let g = running(1)?;
        (g["progress"].as_f64().unwrap_or(0.0) >= 0.1)
            .then_some(())
            .ok_or(format!("{g}"))
    });
    std::thread::sleep(Duration::from_secs(25));
    let newcomer = toy_under(&python, dir.path(), &addr, "newcomer", 4, &endless);
    eventually(Duration::from_secs(240), || {
        let (g, n) = (job_info(&api, 1), running(2)?);
        (g["phase"] != "running" && g["preemptions"].as_u64() >= Some(1))
            .then_some(())
            .ok_or(format!("{g} {n}"))
    });
    // The first job leaves: the gang resumes beside the newcomer, on nodes that include the first
    // job's (the newcomer holds one of the gang's old ones).
    let cancelled = api.delete("/jobs/0").unwrap();
    assert_eq!(cancelled.status(), 200);
    eventually(Duration::from_secs(240), || {
        let g = running(1)?;
        let nodes = nodes_of(&placement_of(&g));
        (nodes.len() == 2 && !nodes.is_disjoint(&first_nodes))
            .then_some(())
            .ok_or(format!("{g}"))
    });
    let resumed_on = nodes_of(&placement_of(&job_info(&api, 1)));
    assert_ne!(resumed_on, gang_nodes, "resumed on other nodes");

    let out = gang.wait_with_output().unwrap();
    let output = text(&out);
    assert!(out.status.success(), "{output}");
    let (plans, saved) = launches_and_saves(&output);
    assert_eq!(saved.len(), 1, "one checkpoint on the way out: {output}");
    assert_eq!(plans.len(), 2, "{output}");
    assert!(plans[0].contains("starting from scratch"), "{plans:?}");
    assert!(
        plans[1].ends_with(&format!("resumed from step {}", saved[0])),
        "resumed from that checkpoint on other nodes: {plans:?}"
    );
    assert_eq!(output.matches("final loss").count(), 1, "{output}");
    let still = job_info(&api, 2);
    if still["phase"] != "running" {
        let out = newcomer.wait_with_output().unwrap();
        panic!("the newcomer stopped: {still}\n{}", text(&out));
    }
    assert_eq!(api.delete("/jobs/2").unwrap().status(), 200);
    for follower in [first, newcomer] {
        let _ = follower.wait_with_output();
    }
    eventually(Duration::from_secs(60), || {
        let left = slurm_jobs_starting("gangway-");
        left.is_empty()
            .then_some(())
            .ok_or(format!("left behind: {left:?}"))
    });

    // The same 4 ranks, never interrupted, on this machine.
    let reference = run(Command::new(env!("CARGO_BIN_EXE_elastic-run"))
        .args(["--fake-gpus", "4", "--gpus", "4", "--python", &python])
        .args(["--job-id", "reference", "--checkpoint-dir"])
        .arg(dir.path().join("reference"))
        .arg(TOY)
        .args(&gang_args[..6])
        .args(["--out", "reference.json"])
        .current_dir(dir.path()));
    assert!(reference.status.success(), "{}", text(&reference));
    assert_eq!(
        read_json(dir.path(), "reference.json")["params"],
        read_json(dir.path(), "gang.json")["params"],
        "bit-identical to the run that never moved"
    );
}

/// Issue 19: `kill -9` of a Slurm daemon mid-run, then a restart on its journal: the jobs' steps are
/// re-adopted (not relaunched), and a step under the daemon's name that no attempt accounts for is
/// cancelled. Then `scontrol update state=down` of one job's node moves it to another node, where it
/// resumes from its last checkpoint. Every job finishes once, no GPU is ever seen by two jobs'
/// workers, and no Slurm step is left behind.
#[test]
fn a_restarted_slurm_daemon_readopts_its_steps_and_moves_a_job_off_a_down_node() {
    let python = need_torch_and_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", support::free_port());
    // The placer scores sets on a topology file: two racks of two 2-GPU servers.
    let racks = dir.path().join("racks.toml");
    std::fs::write(
        &racks,
        "hosts_per_rack = 2\n[[servers]]\npreset = \"philly-2gpu\"\ncount = 4\n",
    )
    .unwrap();
    let racks = racks.to_str().unwrap();
    let placed = ["--topology", racks, "--placement", "consolidate"];
    let mut daemon = slurm_daemon(dir.path(), &addr, "fifo", &placed);
    let api = support::Api::new(
        &format!("http://{addr}"),
        &dir.path().join("journal"),
        Duration::from_secs(30),
    );
    let job = toy_under(
        &python,
        dir.path(),
        &addr,
        "survivor",
        2,
        &[
            "--steps",
            "150",
            "--save-every",
            "5",
            "--step-sleep",
            "0.25",
        ],
    );
    // Submitted once the survivor is job 0.
    eventually(Duration::from_secs(60), || {
        let info = job_info(&api, 0);
        (info["id"] == 0).then_some(()).ok_or(format!("{info}"))
    });
    let neighbour = toy_under(
        &python,
        dir.path(),
        &addr,
        "neighbour",
        2,
        &["--steps", "120", "--step-sleep", "0.25"],
    );
    eventually(Duration::from_secs(240), || {
        let info = job_info(&api, 0);
        (info["progress"].as_f64().unwrap_or(0.0) >= 0.2 && job_info(&api, 1)["phase"] == "running")
            .then_some(())
            .ok_or(format!("{info}"))
    });
    assert_no_gpu_is_shared(&["survivor", "neighbour"]);
    let steps = slurm_jobs_starting("gangway-");
    assert_eq!(steps.len(), 2, "{steps:?}");
    // `gangway-INSTANCE-JOB.ATTEMPT`: a stray step of this daemon's, for an attempt it never made.
    let (prefix, _) = steps[0].rsplit_once('-').unwrap();
    let stray = format!("{prefix}-77.0");
    let submitted = Command::new("sbatch")
        // Its output nowhere: by default Slurm writes `slurm-JOB.out` into the test's directory,
        // the checkout's root.
        .args([
            &format!("--job-name={stray}"),
            "--output=/dev/null",
            "--wrap",
            "sleep 300",
        ])
        .output()
        .unwrap();
    assert!(submitted.status.success(), "{submitted:?}");
    eventually(Duration::from_secs(30), || {
        (slurm_jobs_starting(&stray).len() == 1)
            .then_some(())
            .ok_or("the stray job is not queued".into())
    });

    // SIGKILL: no chance to clean up. The job's elastic-run lives on in its own process group.
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    let _daemon = slurm_daemon(dir.path(), &addr, "fifo", &placed);
    eventually(Duration::from_secs(60), || {
        slurm_jobs_starting(&stray)
            .is_empty()
            .then_some(())
            .ok_or("the stray step still runs".into())
    });
    // The restarted daemon wrote a new token.
    let api = support::Api::new(
        &format!("http://{addr}"),
        &dir.path().join("journal"),
        Duration::from_secs(30),
    );
    let before = job_info(&api, 0);
    assert_eq!(before["phase"], "running", "re-adopted: {before}");
    // What its workers measured before the kill is still its model (journaled).
    assert_eq!(before["learned"][0]["configurations"], 1, "{before}");
    assert_eq!(job_info(&api, 1)["phase"], "running", "re-adopted");
    assert_no_gpu_is_shared(&["survivor", "neighbour"]);
    let node = nodes_of(&placement_of(&before));
    assert_eq!(node.len(), 1, "{before}");
    let down = node.into_iter().next().unwrap();
    let _resume = ResumeNode(down.clone());
    let status = Command::new("scontrol")
        .args([
            "update",
            &format!("nodename={down}"),
            "state=down",
            "reason=gangway-test",
        ])
        .status()
        .unwrap();
    assert!(status.success());
    eventually(Duration::from_secs(120), || {
        let info = job_info(&api, 0);
        let nodes = nodes_of(&placement_of(&info));
        (info["phase"] == "running" && nodes.len() == 1 && !nodes.contains(&down))
            .then_some(())
            .ok_or(format!("{info}"))
    });
    // `gangway nodes` (GET /nodes) says why the node is out, and where the job runs now.
    let mut listed = api.get("/nodes").unwrap();
    let nodes: serde_json::Value = listed.body_mut().read_json().unwrap();
    let node = |name: &str| {
        nodes
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {nodes}"))
    };
    let gone = node(&down);
    assert_eq!(
        gone["out_of_service"].as_array().unwrap().len(),
        2,
        "{gone}"
    );
    assert!(
        gone["out_of_service"][0][1]
            .as_str()
            .unwrap()
            .starts_with(&format!("Slurm node {down} is DOWN")),
        "{gone}"
    );
    let now_on = nodes_of(&placement_of(&job_info(&api, 0)));
    let here = node(now_on.iter().next().unwrap());
    assert_eq!(here["jobs"], serde_json::json!([0]), "{nodes}");
    assert_no_gpu_is_shared(&["survivor"]);
    let out = job.wait_with_output().unwrap();
    let output = text(&out);
    assert!(out.status.success(), "{output}");
    let (plans, _) = launches_and_saves(&output);
    // Started once by the first daemon, re-adopted by the second, moved once by the down node.
    assert_eq!(
        plans
            .iter()
            .filter(|p| p.contains("starting from scratch"))
            .count(),
        1,
        "{output}"
    );
    assert!(
        plans
            .last()
            .is_some_and(|p| p.contains("resumed from step")),
        "{output}"
    );
    assert_eq!(output.matches("final loss").count(), 1, "{output}");
    let out = neighbour.wait_with_output().unwrap();
    let output = text(&out);
    assert!(out.status.success(), "{output}");
    let (plans, _) = launches_and_saves(&output);
    assert_eq!(plans.len(), 1, "started once, never relaunched: {output}");
    assert_eq!(output.matches("final loss").count(), 1, "{output}");
    eventually(Duration::from_secs(30), || {
        let left = slurm_jobs_starting("gangway-");
        left.is_empty()
            .then_some(())
            .ok_or(format!("left behind: {left:?}"))
    });
}

/// A daemon starts `elastic-run` in `/` and names the job's directory and log, which it enters and
/// opens itself, as the job's user: the launch never waits on a path of the job's. The log is
/// appended to, created readable by that user alone (a job may print its secrets), and never a
/// link or a FIFO (opened without blocking); what cannot be entered or opened is reported as the
/// job's error, where the daemon reads it.
#[test]
fn elastic_run_enters_the_directory_and_opens_the_log_a_daemon_names() {
    use gangway_launcher::executor::EXIT_FILE_VAR;
    use gangway_launcher::inherit::{LOG_VAR, WORKDIR_VAR};
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // A command line it refuses at once (no script): what it says goes to the log, and its report to the exit
    // file, named relative to the directory it was told to enter.
    let told = |workdir: &Path, log: &Path, exit: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_elastic-run"));
        command
            .arg("--no-such-option")
            .current_dir("/")
            .env(WORKDIR_VAR, workdir)
            .env(LOG_VAR, log)
            .env(EXIT_FILE_VAR, exit)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = command.spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("elastic-run waited on {}", log.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(status.code(), Some(2));
    };
    let log = work.join("job.log");
    told(&work, &log, Path::new("exit.json"));
    let report = std::fs::read_to_string(work.join("exit.json")).unwrap();
    assert!(report.contains("bad command line"), "{report}");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("elastic-run: no training script given"),
        "{said}"
    );
    let mode = std::fs::metadata(&log).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Appended to, not truncated.
    told(&work, &log, Path::new("exit.json"));
    assert_eq!(
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("no training script given")
            .count(),
        2
    );

    let exit = dir.path().join("exit-refused.json");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::write(&elsewhere, "").unwrap();
    std::os::unix::fs::symlink(&elsewhere, work.join("link.log")).unwrap();
    let made = Command::new("mkfifo")
        .arg(work.join("fifo.log"))
        .status()
        .unwrap();
    assert!(made.success());
    for (workdir, log, says) in [
        (work.clone(), work.join("link.log"), "cannot write its log"),
        (work.clone(), work.join("fifo.log"), "cannot write its log"),
        (
            dir.path().join("gone"),
            work.join("job.log"),
            "cannot enter its working directory",
        ),
    ] {
        told(&workdir, &log, &exit);
        let report = std::fs::read_to_string(&exit).unwrap();
        assert!(report.contains(says), "{}: {report}", log.display());
    }
    assert_eq!(
        std::fs::read_to_string(&elsewhere).unwrap(),
        "",
        "never followed"
    );
}

/// Under torchrun's `--no-python`, the script a daemon checked (named by its absolute path) runs,
/// not whatever its name finds first on the job's `PATH`: as the job's user, that search could
/// skip a directory only root may enter and run a file nobody checked.
#[test]
fn under_no_python_the_script_the_daemon_checked_runs() {
    let python = need_torch!();
    let dir = tempfile::tempdir().unwrap();
    for which in ["checked", "decoy"] {
        std::fs::create_dir(dir.path().join(which)).unwrap();
        let script = write_script(
            &dir.path().join(which),
            "job.sh",
            &format!("#!/bin/sh\necho {which} > ran.txt\n"),
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!("{}:/usr/bin:/bin", dir.path().join("decoy").display());
    let ran = |job: &str, checked: Option<PathBuf>| {
        let mut command = elastic_run(&python, dir.path(), job, &["--gpus", "1"]);
        command.args(["--no-python", "job.sh"]).env("PATH", &path);
        if let Some(checked) = checked {
            command.env(gangway_launcher::inherit::SCRIPT_VAR, checked);
        }
        let out = run(&mut command);
        assert!(out.status.success(), "{}", text(&out));
        std::fs::read_to_string(dir.path().join("ran.txt")).unwrap()
    };
    assert_eq!(
        ran("by-name", None),
        "decoy\n",
        "the name alone searches PATH"
    );
    let checked = dir.path().join("checked/job.sh");
    assert_eq!(ran("checked", Some(checked)), "checked\n");
}
