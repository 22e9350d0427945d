//! One scheduling pass of the engine alone at 16,384 GPUs and 50,000 jobs: `cargo bench --bench
//! round_solve`. Figures go in docs/PERFORMANCE.md.
//!
//! What a control plane's round spends in its solve (the policy's decision and the engine's
//! reconciling), without the actor, the journal or the executor that `control_plane` and
//! `examples/control_plane_scale.rs` add: 50,000 jobs (gangs of 1 to 8, days of work) on 2,048
//! servers of 8 GPUs over three types, every job submitted before the first pass. Between passes,
//! as in a live cluster, 60 s go by, 10 running jobs finish and 10 new jobs arrive; only the pass
//! itself is timed.
//!
//! Criterion's samples each run on a later state of the cluster, so its estimates wander between
//! runs of one binary. With `PASSES=N` in the environment, each policy instead runs N passes from
//! the same start and prints their mean (`PASSES=400 cargo bench --bench round_solve`, or `-- las`
//! for the policies whose benchmark's name holds `las` alone): the figures docs/PERFORMANCE.md pairs
//! between builds.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::core::cluster::Cluster;
use gangway::core::engine::{Change, Engine, EngineConfig};
use gangway::core::job::{Job, JobId, Names};
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::{self, PolicyConfig};
use gangway::core::throughput::DurationModel;

/// The allocator `gangway serve` uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JOBS: u32 = 50_000;
const CLUSTER: &str = "v100=683x8,p100=683x8,k80=682x8";
/// Jobs that finish, and jobs that arrive, between two passes.
const CHURN: usize = 10;

/// Gang sizes as `examples/control_plane_scale.rs` submits them: mostly 1 GPU, some 2, 4 and 8.
fn job(k: u32, arrival: f64) -> Job {
    let gpus = [1, 1, 1, 1, 1, 1, 1, 2, 4, 8][(k % 10) as usize];
    // Days of work: nothing ends but the jobs this benchmark finishes.
    Job::new(JobId(k), arrival, gpus, 1e6 + f64::from(k))
}

fn passes(c: &mut Criterion) {
    let fixed = fixed_passes();
    let only = filter();
    let mut group = c.benchmark_group("pass_50000_jobs_16384_gpus");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(20));
    for name in ["fifo", "tiresias", "las"] {
        let id = format!("pass_50000_jobs_16384_gpus/{name}");
        if fixed.is_some()
            && only
                .as_ref()
                .is_some_and(|only| !id.contains(only.as_str()))
        {
            continue;
        }
        let cluster = Arc::new(Cluster::parse_spec(CLUSTER, 8).unwrap());
        assert_eq!(cluster.num_gpus(), 16_384);
        let model = Arc::new(DurationModel::uniform(cluster.num_gpu_types()));
        let config = EngineConfig {
            round_length: 60.0,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(cluster, model, config, Names::default(), 0.0);
        engine.intern_job_type("model");
        let mut policy = policy::builtin()
            .build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
            .unwrap();
        let mut placer = PackingPlacer;
        for k in 0..JOBS {
            engine.submit(job(k, 0.0), 0.0).unwrap();
        }
        engine.record_changes();
        let mut now = 0.0;
        let mut next_id = JOBS;
        // The jobs running now, as the changes said, in the order they started.
        let mut running: Vec<JobId> = Vec::new();
        let follow = |engine: &mut Engine<'_>, running: &mut Vec<JobId>| {
            let mut stopped = HashSet::new();
            let mut started = Vec::new();
            for change in engine.take_changes() {
                match change {
                    Change::Started { job, .. } => started.push(job),
                    Change::Stopped { job, .. } => {
                        stopped.insert(job);
                    }
                    _ => {}
                }
            }
            running.retain(|j| !stopped.contains(j));
            running.extend(started);
        };
        // The first pass places thousands of gangs at once; the benchmark measures the later ones.
        engine.schedule(&mut *policy, &mut placer, now);
        follow(&mut engine, &mut running);
        // A round's churn, then its pass, timed.
        let mut pass = || {
            now += 60.0;
            for job in running.drain(..CHURN.min(running.len())) {
                engine.finish(job, now).unwrap();
            }
            for _ in 0..CHURN {
                engine.submit(job(next_id, now), now).unwrap();
                next_id += 1;
            }
            let began = Instant::now();
            engine.schedule(&mut *policy, &mut placer, now);
            let spent = began.elapsed();
            follow(&mut engine, &mut running);
            spent
        };
        if let Some(n) = fixed {
            let spent: Duration = (0..n).map(|_| pass()).sum();
            let mean = spent.as_secs_f64() * 1e3 / f64::from(n);
            println!("{id}: {n} passes, mean {mean:.3} ms");
            continue;
        }
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| pass()).sum())
        });
    }
    group.finish();
}

/// `PASSES`, when set: how many passes to time from the same start, instead of criterion's samples.
fn fixed_passes() -> Option<u32> {
    let n = std::env::var("PASSES").ok()?;
    let n = n.parse().ok().filter(|&n| n > 0);
    Some(n.expect("PASSES is a number of passes, at least 1"))
}

/// The filter on the command line (`cargo bench --bench round_solve -- las`), which criterion
/// applies to its own samples: its first argument that is not an option (so given before any option
/// that takes a value).
fn filter() -> Option<String> {
    std::env::args().skip(1).find(|arg| !arg.starts_with('-'))
}

criterion_group!(benches, passes);
criterion_main!(benches);
