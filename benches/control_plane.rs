//! Control-plane round latency: `cargo bench --bench control_plane`. Figures go in docs/PERFORMANCE.md.
//!
//! 10,000 jobs wait or run on a simulated 4,096-GPU cluster (512 servers of 8 GPUs, three GPU types);
//! one measured iteration is one scheduling round through the cluster actor: the policy's solve on a
//! blocking thread, the journal append (fsynced, on the machine's disk), and the gang leases and
//! launches of whatever changed. Virtual time advances one 60 s round per iteration.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use gangway::actors::clock::VirtualClock;
use gangway::actors::cluster::{
    ClusterActor, JobRequest, Parts, Round, Settings, Submit, TimeSource,
};
use gangway::actors::executor::SimExecutor;
use gangway::core::cluster::Cluster;
use gangway::core::engine::EngineConfig;
use gangway::core::job::Names;
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::{self, PolicyConfig};
use gangway::core::throughput::DurationModel;

/// The allocator `gangway serve` uses.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const JOBS: u32 = 10_000;
const CLUSTER: &str = "v100=171x8,p100=171x8,k80=170x8";

/// Gang sizes in Philly's proportions, roughly: mostly 1 GPU, some 2, 4 and 8.
fn gang(k: u32) -> u32 {
    match k % 20 {
        0..=13 => 1,
        14..=16 => 2,
        17..=18 => 4,
        _ => 8,
    }
}

fn rounds(c: &mut Criterion) {
    let mut group = c.benchmark_group("round_10000_jobs_4096_gpus");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(20));
    for name in ["fifo", "tiresias", "las"] {
        let system = actix::System::new();
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(VirtualClock::new(0.0));
        let cluster = system.block_on(async {
            let cluster = Cluster::parse_spec(CLUSTER, 8).unwrap();
            assert_eq!(cluster.num_gpus(), 4096);
            let types = cluster.num_gpu_types();
            let parts = Parts {
                cluster: Arc::new(cluster),
                model: Arc::new(DurationModel::uniform(types)),
                names: Names::default(),
                policy: policy::builtin()
                    .build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)
                    .unwrap(),
                placer: Box::new(PackingPlacer),
                executor: Box::new(SimExecutor::new(f64::INFINITY)),
                probes: Vec::new(),
                health_every: Duration::from_secs(60),
            };
            let mut settings = Settings::new(
                EngineConfig::default(),
                TimeSource::Virtual(Arc::clone(&clock)),
            );
            settings.journal = Some(dir.path().join("journal"));
            let cluster = ClusterActor::start(parts, settings).unwrap();
            for k in 0..JOBS {
                // Days of work: nothing finishes during the benchmark.
                let request = JobRequest {
                    tenant: format!("team-{}", k % 8),
                    ..JobRequest::new(format!("model-{}", k % 16), gang(k), 1e6 + f64::from(k))
                };
                cluster
                    .send(Submit {
                        request,
                        at: Some(0.0),
                        key: None,
                    })
                    .await
                    .unwrap()
                    .unwrap();
            }
            // The first round places thousands of gangs at once; the benchmark measures steady rounds.
            cluster.send(Round).await.unwrap();
            cluster
        });
        let mut now = 0.0;
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_custom(|iters| {
                system.block_on(async {
                    let began = Instant::now();
                    for _ in 0..iters {
                        now += 60.0;
                        clock.set(now);
                        cluster.send(Round).await.unwrap();
                    }
                    began.elapsed()
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, rounds);
criterion_main!(benches);
