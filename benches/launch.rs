//! What `elastic-run` costs, with real torch on CPU (gloo): needs GANGWAY_TEST_PYTHON (a Python with
//! torch), and skips without it.
//!
//! - `launch/…`: from spawning the launcher to the end of the first training step, for bare
//!   `torchrun --standalone` and for `elastic-run`, both running the toy DDP job on 2 workers; then
//!   the median ratio of the two over alternating pairs.
//! - `resize/2_to_1`: from the decision to resize a running 2-worker job to the end of its first step
//!   at 1 worker. The run also prints the median split of that time into checkpoint, teardown,
//!   relaunch, rendezvous (with the workers' torch import) and restore plus first step.
//!
//! `cargo bench --bench launch`

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, SamplingMode, criterion_group, criterion_main};

const TOY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/python/examples/toy_ddp.py");
const ELASTIC_RUN: &str = env!("CARGO_BIN_EXE_elastic-run");

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// Reads the child's stdout until the toy's `timing: EVENT=T` line for `event`; its time.
fn wait_for_timing(lines: &mut impl Iterator<Item = String>, event: &str) -> f64 {
    let prefix = format!("timing: {event}=");
    for line in lines {
        if let Some(t) = line.strip_prefix(&prefix) {
            return t.trim().parse().expect("a unix time");
        }
    }
    panic!("the job ended before `{event}`");
}

fn spawn(mut command: Command) -> (Child, impl Iterator<Item = String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let lines = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok);
    (child, lines)
}

fn elastic_run(python: &str, dir: &Path, gpus: &str, toy_args: &[&str]) -> Command {
    let mut command = Command::new(ELASTIC_RUN);
    command
        .args(["--fake-gpus", "2", "--gpus", gpus, "--python", python])
        .args(["--job-id", "bench", "--grace", "30", "--checkpoint-dir"])
        .arg(dir)
        .arg(TOY)
        .args(["--timing", "--save-every", "0"])
        .args(toy_args);
    command
}

/// Seconds from spawning `command` to the end of the toy's first step.
fn launch_to_first_step(command: Command) -> Duration {
    let began = unix_now();
    let (mut child, mut lines) = spawn(command);
    let first = wait_for_timing(&mut lines, "first_step");
    lines.for_each(drop);
    assert!(child.wait().expect("wait").success());
    Duration::from_secs_f64(first - began)
}

/// One resize's phases, in seconds.
#[derive(Clone, Copy, Default)]
struct Split {
    checkpoint: f64,
    teardown: f64,
    relaunch: f64,
    rendezvous: f64,
    first_step: f64,
}

static SPLITS: Mutex<Vec<Split>> = Mutex::new(Vec::new());

/// Runs a job on 2 workers, resizes it to 1 (stop with a checkpoint, relaunch), and returns the time
/// from the decision to the first step at 1 worker.
fn resize_two_to_one(python: &str) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = ["--steps", "100000", "--step-sleep", "0.02"];
    let (mut running, mut lines) = spawn(elastic_run(python, dir.path(), "2", &long));
    wait_for_timing(&mut lines, "first_step");
    std::thread::sleep(Duration::from_millis(300));
    let decided = unix_now();
    // SAFETY: signals the child we started.
    unsafe { libc::kill(running.id() as i32, libc::SIGTERM) };
    let saved = wait_for_timing(&mut lines, "checkpoint_saved");
    lines.for_each(drop);
    running.wait().expect("wait");
    let exited = unix_now();
    let (mut resized, mut lines) = spawn(elastic_run(python, dir.path(), "1", &long));
    let started = wait_for_timing(&mut lines, "worker_started");
    let rendezvous = wait_for_timing(&mut lines, "rendezvous_done");
    let first = wait_for_timing(&mut lines, "first_step");
    let _ = resized.kill();
    // The guardian sweeps the workers once elastic-run is gone.
    let _ = resized.wait();
    std::thread::sleep(Duration::from_millis(300));
    SPLITS.lock().expect("splits").push(Split {
        checkpoint: saved - decided,
        teardown: exited - saved,
        relaunch: started - exited,
        rendezvous: rendezvous - started,
        first_step: first - rendezvous,
    });
    Duration::from_secs_f64(first - decided)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn bare_torchrun(python: &str) -> Command {
    let mut command = Command::new(python);
    command
        .args(["-m", "torch.distributed.run", "--standalone"])
        .args(["--nproc-per-node=2", TOY, "--timing", "--steps", "1"]);
    command
}

/// The two launchers alternately, `pairs` times: the median ratio of elastic-run's launch-to-first-step
/// to bare torchrun's, free of the order effects (a warming page cache) of two separate benchmarks.
fn paired_ratio(python: &str, pairs: usize) -> (f64, f64, f64) {
    let (mut bare, mut ours, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        let b = launch_to_first_step(bare_torchrun(python)).as_secs_f64();
        let dir = tempfile::tempdir().expect("tempdir");
        let o = launch_to_first_step(elastic_run(python, dir.path(), "2", &["--steps", "1"]))
            .as_secs_f64();
        bare.push(b);
        ours.push(o);
        ratios.push(o / b);
    }
    (median(bare), median(ours), median(ratios))
}

/// Seconds per iteration: 10 samples of one iteration each, within about `seconds`.
fn slow(group: &mut BenchmarkGroup<'_, WallTime>, seconds: u64) {
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(seconds));
}

fn bench(c: &mut Criterion) {
    let Ok(python) = std::env::var("GANGWAY_TEST_PYTHON") else {
        eprintln!("skipped: set GANGWAY_TEST_PYTHON to a Python with torch");
        return;
    };
    let mut group = c.benchmark_group("launch");
    slow(&mut group, 60);
    group.bench_function("torchrun", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| launch_to_first_step(bare_torchrun(&python)))
                .sum()
        })
    });
    group.bench_function("elastic-run", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let dir = tempfile::tempdir().expect("tempdir");
                    launch_to_first_step(elastic_run(&python, dir.path(), "2", &["--steps", "1"]))
                })
                .sum()
        })
    });
    group.finish();
    let (bare, ours, ratio) = paired_ratio(&python, 8);
    println!(
        "launch to first step, 8 alternating pairs, medians: torchrun {bare:.3} s, elastic-run \
         {ours:.3} s, ratio elastic-run / torchrun {ratio:.3}"
    );

    let mut group = c.benchmark_group("resize");
    slow(&mut group, 90);
    group.bench_function("2_to_1", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| resize_two_to_one(&python)).sum())
    });
    group.finish();

    let splits = SPLITS.lock().expect("splits").clone();
    if splits.is_empty() {
        return; // filtered out
    }
    let phase = |f: fn(&Split) -> f64| median(splits.iter().map(f).collect());
    println!(
        "resize 2 -> 1, median of {} (s): checkpoint {:.3}, teardown {:.3}, relaunch {:.3}, \
         rendezvous with torch import {:.3}, restore and first step {:.3}",
        splits.len(),
        phase(|s| s.checkpoint),
        phase(|s| s.teardown),
        phase(|s| s.relaunch),
        phase(|s| s.rendezvous),
        phase(|s| s.first_step),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
