//! Goodput policies' speed: `cargo bench --bench elastic`. Figures go in docs/PERFORMANCE.md. Needs the
//! shared reference data (`../shared/data/pollux` and `../shared/data/sia`); without it, nothing runs.
//!
//! - `elastic_round`: the mean time of one `allocate` over a whole run of a 160-job workload on its
//!   64-GPU cluster (Pollux's workload-1 on 16 x 4 T4; Sia's philly workload-1 on its heterogeneous
//!   cluster), so that the rounds are the ones the run really meets;
//! - `sia_solve`: one Sia solve of every job of a workload waiting at once, after a few rounds on the
//!   same input have let each job take every configuration up to whole servers (the largest program
//!   Sia meets): 160 jobs on 64 GPUs, and 5,000 jobs (philly workload-1 repeated) on 2,048 GPUs (the
//!   same cluster, 32 times over);
//! - `elastic_workload`: a whole 160-job workload, end to end, and Sia's newtrace workload-1 (960
//!   jobs) under `sia` and `ramp`;
//! - `elastic_scale`: a whole `sia` run of Sia's philly workloads resampled (`gangway workload`,
//!   seed 1) to 5,000 jobs on 2,048 GPUs (Sia's cluster 32 times over) at Sia's load per GPU. Before
//!   it, one run of that and one of a whole day of arrivals (15,899 jobs) print their rounds' median
//!   and slowest.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::core::cluster::{Cluster, GpuTypeId};
use gangway::core::job::{Job, JobId, Trace};
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::{self, Grant, JobView, Policy, PolicyConfig, RoundInput};
use gangway::core::sim::Simulation;
use gangway::core::throughput::ThroughputModel;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

const SIA_CLUSTER: &str = "aws=6x4,rtx=3x8,dgx-ext=2x8";

fn shared(path: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(path);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("{} not found: skipped", path.display());
        None
    }
}

/// The workload at `path`, its goodput model on `cluster`, and a simulation of both with 60 s rounds.
fn setup(path: &Path, cluster: &str) -> (Trace, Cluster) {
    let table = scenario::load_throughputs(None).unwrap();
    let trace = scenario::load_trace(
        Some(path.to_str().unwrap()),
        &TraceOptions::default(),
        &table,
    )
    .unwrap();
    (trace, Cluster::parse_spec(cluster, 1).unwrap())
}

fn model(trace: &Trace, cluster: &Cluster) -> Box<dyn ThroughputModel> {
    let table = scenario::load_throughputs(None).unwrap();
    scenario::model_for(trace, cluster, &table).unwrap()
}

/// A policy that keeps the time its inner policy spends deciding each round.
struct Timed {
    inner: Box<dyn Policy>,
    rounds: Vec<Duration>,
}

impl Timed {
    fn new(inner: Box<dyn Policy>) -> Self {
        Self {
            inner,
            rounds: Vec::new(),
        }
    }

    /// The mean round.
    fn mean(&self) -> Duration {
        self.rounds.iter().sum::<Duration>() / (self.rounds.len().max(1) as u32)
    }
}

impl Policy for Timed {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let start = Instant::now();
        let grants = self.inner.allocate(input);
        self.rounds.push(start.elapsed());
        grants
    }
}

/// Sia's heterogeneous cluster `copies` times over.
fn sia_cluster(copies: u32) -> Cluster {
    let spec = format!(
        "aws={}x4,rtx={}x8,dgx-ext={}x8",
        6 * copies,
        3 * copies,
        2 * copies
    );
    Cluster::parse_spec(&spec, 1).unwrap()
}

fn run(simulation: &Simulation<'_>, policy: &mut dyn Policy) -> usize {
    let result = simulation.run(policy, &mut PackingPlacer, &mut |_, _| {});
    result.records.iter().filter(|r| r.finish.is_some()).count()
}

/// The 160-job workloads each goodput policy is compared on.
fn workloads() -> Vec<(&'static str, PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Some(p) = shared("pollux/workloads/workload-1.csv") {
        out.push(("pollux", p, "t4=16x4"));
    }
    if let Some(p) = shared("sia/workloads/philly/workload-1.csv") {
        out.push(("sia", p.clone(), SIA_CLUSTER));
        out.push(("ramp", p, SIA_CLUSTER));
    }
    out
}

fn rounds(c: &mut Criterion) {
    let mut group = c.benchmark_group("elastic_round");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30));
    for (policy_name, path, cluster) in workloads() {
        let (trace, cluster) = setup(&path, cluster);
        let model = model(&trace, &cluster);
        let mut simulation = Simulation::new(&trace, &cluster, model.as_ref());
        simulation.config.engine.round_length = 60.0;
        group.bench_function(BenchmarkId::new(policy_name, "64_gpus"), |b| {
            b.iter_custom(|iters| {
                let mut per_round = Duration::ZERO;
                for _ in 0..iters {
                    let mut timed = Timed::new(
                        policy::builtin()
                            .build(
                                policy_name,
                                &PolicyConfig::seeded(0),
                                &policy::Capabilities::ALL,
                            )
                            .unwrap(),
                    );
                    black_box(run(&simulation, &mut timed));
                    per_round += timed.mean();
                }
                per_round
            })
        });
    }
    group.finish();
}

/// `trace`'s jobs repeated until there are `jobs`, all arrived.
fn repeated(trace: &Trace, jobs: usize) -> Trace {
    let mut out = trace.clone();
    out.jobs = (0..jobs)
        .map(|i| Job {
            id: JobId(i as u32),
            arrival: 0.0,
            ..trace.jobs[i % trace.jobs.len()].clone()
        })
        .collect();
    out
}

fn sia_solves(c: &mut Criterion) {
    let Some(path) = shared("sia/workloads/philly/workload-1.csv") else {
        return;
    };
    let mut group = c.benchmark_group("sia_solve");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    let (base, _) = setup(&path, SIA_CLUSTER);
    for (jobs, copies) in [(160usize, 1u32), (5000, 32)] {
        let cluster = sia_cluster(copies);
        let trace = repeated(&base, jobs);
        let model = model(&trace, &cluster);
        let rates = vec![0.0; cluster.num_gpu_types()];
        let views: Vec<JobView<'_>> = trace
            .jobs
            .iter()
            .map(|job| JobView::arrived(job, &rates))
            .collect();
        let type_order: Vec<GpuTypeId> =
            (0..cluster.num_gpu_types() as u16).map(GpuTypeId).collect();
        let input = RoundInput {
            now: 3600.0,
            round_length: 60.0,
            cluster: &cluster,
            capacity: cluster.capacity(),
            jobs: &views,
            backlog: None,
            placement: &gangway::core::placement::PackingProbe::new(&cluster),
            jobs_changed: true,
            type_order: &type_order,
            model: model.as_ref(),
            usage: &[],
            paused: &[],
        };
        let mut sia = policy::builtin()
            .build("sia", &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
            .unwrap();
        // Each round lets a job double the most GPUs it has held: six reach whole servers.
        for _ in 0..6 {
            sia.allocate(&input);
        }
        group.bench_with_input(
            BenchmarkId::new("gpus", format!("{}_jobs_{jobs}", cluster.num_gpus())),
            &input,
            |b, input| b.iter(|| black_box(sia.allocate(input).len())),
        );
    }
    group.finish();
}

fn whole(c: &mut Criterion) {
    let mut group = c.benchmark_group("elastic_workload");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30));
    // Sia's largest workloads too, where `ramp`'s programs (jobs may grow threefold) cost the most.
    let newtrace = shared("sia/workloads/newtrace/workload-1.csv")
        .into_iter()
        .flat_map(|p| {
            [("sia", p.clone()), ("ramp", p)]
                .map(|(policy, p)| (policy, p, SIA_CLUSTER, "newtrace_960_jobs"))
        });
    let runs = workloads()
        .into_iter()
        .map(|(policy, p, cluster)| (policy, p, cluster, "160_jobs"))
        .chain(newtrace);
    for (policy_name, path, cluster, jobs) in runs {
        let (trace, cluster) = setup(&path, cluster);
        let model = model(&trace, &cluster);
        let mut simulation = Simulation::new(&trace, &cluster, model.as_ref());
        simulation.config.engine.round_length = 60.0;
        group.bench_function(BenchmarkId::new(policy_name, jobs), |b| {
            b.iter(|| {
                let mut policy = policy::builtin()
                    .build(
                        policy_name,
                        &PolicyConfig::seeded(0),
                        &policy::Capabilities::ALL,
                    )
                    .unwrap();
                black_box(run(&simulation, policy.as_mut()))
            })
        });
    }
    group.finish();
}

/// Sia's philly workloads resampled for Sia's cluster `copies` times over, `jobs` jobs or (`None`) a
/// day of arrivals, written to `dir`; and that cluster.
fn resampled(dir: &Path, jobs: Option<u32>, copies: u32) -> Option<(Trace, Cluster)> {
    use gangway::core::trace::resample::{Reference, write_csv};
    let references: Vec<PathBuf> = (1..=4)
        .map(|w| shared(&format!("sia/workloads/philly/workload-{w}.csv")))
        .collect::<Option<_>>()?;
    let paths: Vec<&Path> = references.iter().map(PathBuf::as_path).collect();
    let reference = Reference::read(&paths, 64).unwrap();
    let gpus = 64 * copies;
    let jobs =
        jobs.unwrap_or_else(|| (reference.jobs_per_gpu_hour() * f64::from(gpus) * 24.0) as u32);
    let path = dir.join(format!("philly-{jobs}-{gpus}.csv"));
    write_csv(
        &reference.resample(jobs, gpus, 1),
        std::fs::File::create(&path).unwrap(),
    )
    .unwrap();
    let options = TraceOptions {
        profiles: shared("sia/profiles"),
        ..TraceOptions::default()
    };
    let table = scenario::load_throughputs(None).unwrap();
    let trace = scenario::load_trace(Some(path.to_str().unwrap()), &options, &table).unwrap();
    Some((trace, sia_cluster(copies)))
}

/// A 60 s-round simulation of `trace` on `cluster`, run under `sia` by `with`.
fn with_sia<T>(
    trace: &Trace,
    cluster: &Cluster,
    with: impl FnOnce(&Simulation<'_>, &dyn Fn() -> Box<dyn Policy>) -> T,
) -> T {
    let model = model(trace, cluster);
    let mut simulation = Simulation::new(trace, cluster, model.as_ref());
    simulation.config.engine.round_length = 60.0;
    let build = || policy::build("sia", &PolicyConfig::seeded(0), model.as_ref()).unwrap();
    with(&simulation, &build)
}

fn scale(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    for jobs in [Some(5000), None] {
        let Some((trace, cluster)) = resampled(dir.path(), jobs, 32) else {
            return;
        };
        with_sia(&trace, &cluster, |simulation, build| {
            let start = Instant::now();
            let mut each = Timed::new(build());
            run(simulation, &mut each);
            each.rounds.sort();
            eprintln!(
                "sia, {} jobs on 2,048 GPUs: whole run {:.1?}, {} rounds, median {:.1?}, slowest {:.1?}",
                trace.jobs.len(),
                start.elapsed(),
                each.rounds.len(),
                each.rounds[each.rounds.len() / 2],
                each.rounds.last().unwrap()
            );
        });
    }
    let Some((trace, cluster)) = resampled(dir.path(), Some(5000), 32) else {
        return;
    };
    let mut group = c.benchmark_group("elastic_scale");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(220));
    with_sia(&trace, &cluster, |simulation, build| {
        group.bench_function(BenchmarkId::new("sia", "2048_gpus_5000_jobs"), |b| {
            b.iter(|| black_box(run(simulation, build().as_mut())))
        });
    });
    group.finish();
}

criterion_group!(benches, rounds, sia_solves, whole, scale);
criterion_main!(benches);
