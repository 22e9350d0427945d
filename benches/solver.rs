//! One allocation solve of the LP policies: `cargo bench --bench solver`. Figures go in
//! docs/PERFORMANCE.md.
//!
//! 32, 256 and 2,048 active jobs from Gavel's job model (single-GPU, 26 job types), on 3 GPU types with
//! N/4 GPUs each (oversubscribed, so the program is not trivial), for `max_min_fairness_perf` and
//! `max_min_fairness_packed` (pairs from Gavel's throughput table). Every solve starts from scratch.
//!
//! It measures the LP backend the build has: HiGHS by default, microlp with `--no-default-features
//! --features simulate,lp-pure`; the two share benchmark names, so that `--save-baseline` on one and
//! `--baseline` on the other compares them. A build without a backend has nothing to measure.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::core::cluster::{Cluster, GpuTypeId};
use gangway::core::policy::{self, JobView, PolicyConfig, RoundInput};
use gangway::core::trace::TraceOptions;
use gangway::scenario;

fn bench_solves(c: &mut Criterion) {
    let Some(backend) = gangway::core::solver::available() else {
        eprintln!(
            "bench solver: this build has no LP solver (features lp or lp-pure); nothing to measure"
        );
        return;
    };
    eprintln!("bench solver: LP backend {backend}");
    let table = scenario::load_throughputs(None).unwrap();
    let mut group = c.benchmark_group("allocation_solve");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for jobs in [32usize, 256, 2048] {
        let spec = format!("synthetic:jobs={jobs},seed=7");
        let trace = scenario::load_trace(Some(&spec), &TraceOptions::default(), &table).unwrap();
        let per_type = jobs / 4;
        let cluster = Cluster::parse_spec(
            &format!("v100={per_type},p100={per_type},k80={per_type}"),
            1,
        )
        .unwrap();
        let model = scenario::model_for(&trace, &cluster, &table).unwrap();
        let rates: Vec<Vec<f64>> = trace
            .jobs
            .iter()
            .map(|j| {
                (0..3u16)
                    .map(|t| {
                        model
                            .steps_per_second(j, GpuTypeId(t), j.gpus)
                            .unwrap_or(0.0)
                    })
                    .collect()
            })
            .collect();
        let views: Vec<JobView<'_>> = trace
            .jobs
            .iter()
            .zip(&rates)
            .map(|(job, rates)| JobView::arrived(job, rates))
            .collect();
        let type_order: Vec<GpuTypeId> =
            (0..cluster.num_gpu_types() as u16).map(GpuTypeId).collect();
        let input = RoundInput {
            now: 0.0,
            round_length: 360.0,
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
        for name in ["max_min_fairness_perf", "max_min_fairness_packed"] {
            group.bench_with_input(BenchmarkId::new(name, jobs), &input, |b, input| {
                b.iter(|| {
                    let mut p = policy::builtin()
                        .build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
                        .unwrap();
                    // The solve, then the round mechanism's (cheap) grants.
                    black_box(p.allocate(input).len())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_solves);
criterion_main!(benches);
