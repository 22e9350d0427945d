//! What `elastic-run` costs, with real torch on CPU (gloo): needs GANGWAY_TEST_PYTHON (a Python with
//! torch), and skips without it.
//!
//! - `launch/…`: from spawning the launcher to the end of the first training step, for bare
//!   `torchrun --standalone` and for `elastic-run`, both running the toy DDP job on 2 workers; then
//!   the median ratio of the two over alternating pairs.
//! - `resize/2_to_1`: from the decision to resize a running 2-worker job to the end of its first step
//!   at 1 worker. The run also prints the median split of that time into checkpoint, teardown,
//!   relaunch, rendezvous (with the workers' torch import) and restore plus first step.
//! - `…_direct`: the same with `elastic-run --spawn direct` (no torchrun agent), and the median ratios
//!   of direct to torchrun over alternating pairs.
//! - `…_pool`: the same with `--spawn pool`, the bench owning the warm pool (as a daemon would), so
//!   that it stays warm between launches; and the median ratios of pool to direct.
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

fn start(mut command: Command) -> (Child, impl Iterator<Item = String>) {
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

/// What starts the workers: `elastic-run --spawn`'s value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Spawn {
    Torchrun,
    Direct,
    Pool,
}

impl Spawn {
    fn arg(self) -> &'static str {
        match self {
            Spawn::Torchrun => "torchrun",
            Spawn::Direct => "direct",
            Spawn::Pool => "pool",
        }
    }
}

fn elastic_run(python: &str, dir: &Path, gpus: &str, spawn: Spawn, toy_args: &[&str]) -> Command {
    let mut command = Command::new(ELASTIC_RUN);
    // The bench owns the pool, as a daemon would: it stays warm from one launch to the next.
    command
        .env("GANGWAY_POOL_OWNER", std::process::id().to_string())
        .args(["--spawn", spawn.arg()])
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
    let (mut child, mut lines) = start(command);
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

static SPLITS: Mutex<Vec<(Spawn, Split)>> = Mutex::new(Vec::new());

/// Runs a job on 2 workers, resizes it to 1 (stop with a checkpoint, relaunch), and returns the time
/// from the decision to the first step at 1 worker.
fn resize_two_to_one(python: &str, spawn: Spawn) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = ["--steps", "100000", "--step-sleep", "0.02"];
    let (mut running, mut lines) = start(elastic_run(python, dir.path(), "2", spawn, &long));
    wait_for_timing(&mut lines, "first_step");
    std::thread::sleep(Duration::from_millis(300));
    let decided = unix_now();
    // SAFETY: signals the child we started.
    unsafe { libc::kill(running.id() as i32, libc::SIGTERM) };
    let saved = wait_for_timing(&mut lines, "checkpoint_saved");
    lines.for_each(drop);
    running.wait().expect("wait");
    let exited = unix_now();
    let (mut resized, mut lines) = start(elastic_run(python, dir.path(), "1", spawn, &long));
    let started = wait_for_timing(&mut lines, "worker_started");
    let rendezvous = wait_for_timing(&mut lines, "rendezvous_done");
    let first = wait_for_timing(&mut lines, "first_step");
    let _ = resized.kill();
    // The guardian sweeps the workers once elastic-run is gone.
    let _ = resized.wait();
    std::thread::sleep(Duration::from_millis(300));
    SPLITS.lock().expect("splits").push((
        spawn,
        Split {
            checkpoint: saved - decided,
            teardown: exited - saved,
            relaunch: started - exited,
            rendezvous: rendezvous - started,
            first_step: first - rendezvous,
        },
    ));
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

/// `a` and `b` alternately, `pairs` times: their medians, and the median ratio of `b` to `a`, free of
/// the order effects (a warming page cache) of two separate benchmarks.
fn paired(pairs: usize, mut a: impl FnMut() -> f64, mut b: impl FnMut() -> f64) -> (f64, f64, f64) {
    let (mut first, mut second, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pairs {
        let (x, y) = (a(), b());
        first.push(x);
        second.push(y);
        ratios.push(y / x);
    }
    (median(first), median(second), median(ratios))
}

/// Launch to first step of elastic-run with `spawn`, in seconds.
fn elastic_launch(python: &str, spawn: Spawn) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    launch_to_first_step(elastic_run(
        python,
        dir.path(),
        "2",
        spawn,
        &["--steps", "1"],
    ))
    .as_secs_f64()
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
    for (name, spawn) in [
        ("elastic-run", Spawn::Torchrun),
        ("elastic-run_direct", Spawn::Direct),
        ("elastic-run_pool", Spawn::Pool),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| Duration::from_secs_f64(elastic_launch(&python, spawn)))
                    .sum()
            })
        });
    }
    group.finish();
    let (bare, ours, ratio) = paired(
        8,
        || launch_to_first_step(bare_torchrun(&python)).as_secs_f64(),
        || elastic_launch(&python, Spawn::Torchrun),
    );
    println!(
        "launch to first step, 8 alternating pairs, medians: torchrun {bare:.3} s, elastic-run \
         {ours:.3} s, ratio elastic-run / torchrun {ratio:.3}"
    );
    for (before, after) in [
        (Spawn::Torchrun, Spawn::Direct),
        (Spawn::Direct, Spawn::Pool),
    ] {
        let (a, b, ratio) = paired(
            8,
            || elastic_launch(&python, before),
            || elastic_launch(&python, after),
        );
        let (before, after) = (before.arg(), after.arg());
        println!(
            "launch to first step, 8 alternating pairs, medians: --spawn {before} {a:.3} s, \
             --spawn {after} {b:.3} s, ratio {after} / {before} {ratio:.3}"
        );
    }

    let mut group = c.benchmark_group("resize");
    slow(&mut group, 90);
    for (name, spawn) in [
        ("2_to_1", Spawn::Torchrun),
        ("2_to_1_direct", Spawn::Direct),
        ("2_to_1_pool", Spawn::Pool),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| resize_two_to_one(&python, spawn)).sum())
        });
    }
    group.finish();
    for (before, after) in [
        (Spawn::Torchrun, Spawn::Direct),
        (Spawn::Direct, Spawn::Pool),
    ] {
        let (a, b, ratio) = paired(
            5,
            || resize_two_to_one(&python, before).as_secs_f64(),
            || resize_two_to_one(&python, after).as_secs_f64(),
        );
        let (before, after) = (before.arg(), after.arg());
        println!(
            "resize 2 -> 1, 5 alternating pairs, medians: --spawn {before} {a:.3} s, --spawn \
             {after} {b:.3} s, ratio {after} / {before} {ratio:.3}"
        );
    }

    let splits = SPLITS.lock().expect("splits").clone();
    for spawn in [Spawn::Torchrun, Spawn::Direct, Spawn::Pool] {
        let splits: Vec<Split> = splits
            .iter()
            .filter(|(s, _)| *s == spawn)
            .map(|(_, s)| *s)
            .collect();
        if splits.is_empty() {
            continue; // filtered out
        }
        let phase = |f: fn(&Split) -> f64| median(splits.iter().map(f).collect());
        println!(
            "resize 2 -> 1 (--spawn {}), median of {} (s): checkpoint {:.3}, teardown {:.3}, \
             relaunch {:.3}, rendezvous with torch import {:.3}, restore and first step {:.3}",
            spawn.arg(),
            splits.len(),
            phase(|s| s.checkpoint),
            phase(|s| s.teardown),
            phase(|s| s.relaunch),
            phase(|s| s.rendezvous),
            phase(|s| s.first_step),
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
