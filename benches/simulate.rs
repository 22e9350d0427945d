//! Simulator speed: `cargo bench --bench simulate`. Figures go in docs/PERFORMANCE.md.
//!
//! - the bundled Gavel trace (6,000 jobs, 2 jobs/hour, 36 V100 + 36 P100 + 36 K80) under fifo and LAS;
//! - the whole Philly-derived trace (82,247 jobs) on a 2,490-GPU cluster, when ../shared/data is present;
//! - growth with jobs (1,500 / 3,000 / 6,000 synthetic jobs) and with GPUs (54 / 108 / 216, load kept equal);
//! - overload: 800,000 one-GPU jobs of 1-5 s at 10 jobs/s on the same 108 GPUs (a round starts 108 of
//!   the 3,600 that arrive), as `scripts/overload_trace.py` writes them (issue 28, item 10).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::core::cluster::Cluster;
use gangway::core::job::{Job, JobId, Trace, WorkUnit};
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::{self, PolicyConfig};
use gangway::core::sim::Simulation;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

/// One whole simulation; the throughput model is resolved once, outside the measurement.
fn run(simulation: &Simulation<'_>, name: &str) -> usize {
    let mut policy = policy::builtin()
        .build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
        .unwrap();
    let result = simulation.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    result.records.iter().filter(|r| r.finish.is_some()).count()
}

/// Benchmarks `policies` on one scenario under `id`.
fn bench_policies(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    trace: &Trace,
    cluster: &Cluster,
    policies: &[&str],
    id: impl Fn(&str) -> BenchmarkId,
) {
    let table = scenario::load_throughputs(None).unwrap();
    let model = scenario::model_for(trace, cluster, &table).unwrap();
    let simulation = Simulation::new(trace, cluster, model.as_ref());
    for &name in policies {
        group.bench_function(id(name), |b| b.iter(|| black_box(run(&simulation, name))));
    }
}

fn gavel(c: &mut Criterion) {
    let table = scenario::load_throughputs(None).unwrap();
    let options = TraceOptions {
        rate: Some(2.0),
        ..TraceOptions::default()
    };
    let trace = scenario::load_trace(None, &options, &table).unwrap();
    let cluster = Cluster::parse_spec("v100=36,p100=36,k80=36", 1).unwrap();
    let mut group = c.benchmark_group("gavel_6000_jobs");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    bench_policies(&mut group, &trace, &cluster, &["fifo", "las"], |n| {
        BenchmarkId::from_parameter(n)
    });
    group.finish();
}

fn philly(c: &mut Criterion) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/data/philly/philly_jobs_pollux_derived.csv"
    );
    if !Path::new(path).is_file() {
        eprintln!("skipping the Philly benchmark: {path} not found");
        return;
    }
    let table = scenario::load_throughputs(None).unwrap();
    let trace = scenario::load_trace(Some(path), &TraceOptions::default(), &table).unwrap();
    let cluster_file = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/philly_cluster.toml");
    let cluster = scenario::load_cluster("", Some(Path::new(cluster_file)), 1).unwrap();
    let mut group = c.benchmark_group("philly_82247_jobs_2490_gpus");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    bench_policies(&mut group, &trace, &cluster, &["fifo", "las"], |n| {
        BenchmarkId::from_parameter(n)
    });
    group.finish();
}

fn scaling(c: &mut Criterion) {
    let table = scenario::load_throughputs(None).unwrap();
    let mut group = c.benchmark_group("las_scaling");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for jobs in [1500, 3000, 6000] {
        let spec = format!("synthetic:jobs={jobs},seed=1,rate=2");
        let trace = scenario::load_trace(Some(&spec), &TraceOptions::default(), &table).unwrap();
        let cluster = Cluster::parse_spec("v100=36,p100=36,k80=36", 1).unwrap();
        bench_policies(&mut group, &trace, &cluster, &["las"], |_| {
            BenchmarkId::new("jobs", jobs)
        });
    }
    for per_type in [18u32, 36, 72] {
        // Keep the load equal: the arrival rate grows with the cluster.
        let rate = 2.0 * f64::from(per_type) / 36.0;
        let spec = format!("synthetic:jobs=3000,seed=1,rate={rate}");
        let trace = scenario::load_trace(Some(&spec), &TraceOptions::default(), &table).unwrap();
        let cluster = Cluster::parse_spec(
            &format!("v100={per_type},p100={per_type},k80={per_type}"),
            1,
        )
        .unwrap();
        bench_policies(&mut group, &trace, &cluster, &["las"], |_| {
            BenchmarkId::new("gpus", per_type * 3)
        });
    }
    group.finish();
}

/// `jobs` one-GPU jobs arriving at 10 jobs/s, each lasting 1 to 5 s (by a fixed stride, not drawn).
fn overloaded(jobs: u32) -> Trace {
    let mut trace = Trace::new("overload", WorkUnit::Seconds);
    let job_type = trace.intern_job_type("resnet50");
    let tenant = trace.intern_tenant("default");
    for k in 0..jobs {
        trace.jobs.push(
            Job::new(JobId(k), f64::from(k) / 10.0, 1, f64::from(1 + (k * 7) % 5))
                .with_type(job_type)
                .with_tenant(tenant),
        );
    }
    trace
}

fn overload(c: &mut Criterion) {
    let trace = overloaded(800_000);
    let cluster = Cluster::parse_spec("v100=36,p100=36,k80=36", 1).unwrap();
    let mut group = c.benchmark_group("overload_800000_jobs");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    bench_policies(&mut group, &trace, &cluster, &["tiresias", "fifo"], |n| {
        BenchmarkId::from_parameter(n)
    });
    group.finish();
}

criterion_group!(benches, gavel, philly, scaling, overload);
criterion_main!(benches);
