//! One round of Synergy's mechanisms (Mohan et al., OSDI'22): `cargo bench --bench synergy`. Figures go
//! in docs/PERFORMANCE.md.
//!
//! 500 waiting jobs of the Philly-like load (`testdata/synergy_philly_multi_500.csv`: Synergy's model
//! mix, 1 to 8 GPUs) on Synergy's 128-GPU default cluster (16 servers of 8 GPUs, 24 CPUs, 500 GB). One
//! `fifo+tune` round (FIFO's grants, then tune's greedy sizing) and one `fifo+opt` round (phase 1 and
//! phase 2 on HiGHS), beside `fifo` alone. Every round starts from a fresh policy.

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::core::cluster::GpuTypeId;
use gangway::core::policy::{self, JobView, PolicyConfig, RoundInput};
use gangway::core::trace::TraceOptions;
use gangway::scenario;

fn bench_round(c: &mut Criterion) {
    let root = env!("CARGO_MANIFEST_DIR");
    let profiles = Path::new(root).join("../shared/data/synergy/synergy_model_profiles.json");
    if !profiles.is_file() {
        eprintln!("SKIPPED: {} not found", profiles.display());
        return;
    }
    let table = scenario::load_throughputs(None).unwrap();
    let options = TraceOptions {
        profiles: Some(profiles),
        ..TraceOptions::default()
    };
    let trace_path = format!("{root}/testdata/synergy_philly_multi_500.csv");
    let trace = scenario::load_trace(Some(&trace_path), &options, &table).unwrap();
    let cluster = scenario::load_cluster(
        "",
        Some(Path::new(&format!(
            "{root}/testdata/synergy_default_cluster.toml"
        ))),
        1,
    )
    .unwrap();
    let model = scenario::model_for(&trace, &cluster, &table).unwrap();
    let rates: Vec<Vec<f64>> = trace
        .jobs
        .iter()
        .map(|j| {
            vec![
                model
                    .steps_per_second(j, GpuTypeId(0), j.gpus)
                    .unwrap_or(0.0),
            ]
        })
        .collect();
    let views: Vec<JobView<'_>> = trace
        .jobs
        .iter()
        .zip(&rates)
        .map(|(job, rates)| JobView::arrived(job, rates))
        .collect();
    let input = RoundInput {
        now: 0.0,
        round_length: 300.0,
        cluster: &cluster,
        capacity: cluster.capacity(),
        jobs: &views,
        backlog: None,
        placement: &gangway::core::placement::PackingProbe::new(&cluster),
        jobs_changed: true,
        type_order: &[GpuTypeId(0)],
        model: model.as_ref(),
        usage: &[],
        paused: &[],
    };
    let mut group = c.benchmark_group("synergy_round");
    group.sample_size(20);
    group.measurement_time(Duration::from_secs(10));
    for name in ["fifo", "fifo+tune", "fifo+opt", "srtf+tune", "srtf+opt"] {
        group.bench_with_input(BenchmarkId::new(name, 500), &input, |b, input| {
            b.iter(|| {
                let mut p = policy::builtin()
                    .build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
                    .unwrap();
                black_box(p.allocate(input).len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_round);
criterion_main!(benches);
