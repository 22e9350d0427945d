//! The live control plane against the simulator: the actors, driving the simulated executor in virtual
//! time, must make the simulator's decisions and reach its JCTs.

use std::sync::Arc;

use gangway::scenario;
use gangway_actors::clock::VirtualClock;
use gangway_actors::cluster::{ClusterActor, GetStats, Parts, Settings, TimeSource};
use gangway_actors::driver::replay;
use gangway_actors::executor::SimExecutor;
use gangway_actors::ledger::Record;
use gangway_core::cluster::Cluster;
use gangway_core::engine::Change;
use gangway_core::engine::EngineConfig;
use gangway_core::job::{JobId, Trace};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::{SimConfig, Simulation};
use gangway_core::throughput::ThroughputModel;
use gangway_core::trace::TraceOptions;

const CLUSTER: &str = "v100=4x4,p100=4x4,k80=4x4";

fn scenario_of(jobs: u32) -> (Trace, Cluster, Arc<dyn ThroughputModel>) {
    let table = scenario::load_throughputs(None).unwrap();
    let spec = format!("synthetic:jobs={jobs},seed=3,rate=8,multi=true");
    let trace = scenario::load_trace(Some(&spec), &TraceOptions::default(), &table).unwrap();
    let cluster = Cluster::parse_spec(CLUSTER, 4).unwrap();
    let model = scenario::model_for(&trace, &cluster, &table).unwrap();
    (trace, cluster, Arc::from(model))
}

fn config() -> SimConfig {
    SimConfig {
        engine: EngineConfig {
            preempt_cost: 20.0,
            restore_cost: 10.0,
            migrate_cost: 15.0,
            ..EngineConfig::default()
        },
        log_changes: true,
        ..SimConfig::default()
    }
}

/// (time, job, GPU ids) of every start.
type Starts = Vec<(f64, JobId, Vec<u32>)>;

/// (job, first start, finish) of every job.
type Timeline = Vec<(JobId, Option<f64>, Option<f64>)>;

/// Runs the trace through the actors; returns per-job (first start, finish), the starts from the
/// journal, and the number of invariant violations the ledger saw.
fn live(
    policy_spec: &str,
    trace: &Trace,
    cluster: &Cluster,
    model: Arc<dyn ThroughputModel>,
) -> (Timeline, Starts, u64) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let mut settings = Settings::new(config().engine, TimeSource::Virtual(Arc::clone(&clock)));
    settings.journal = Some(journal.clone());
    // Keep every record, to compare them all.
    settings.snapshot_every = u64::MAX;
    let parts = Parts {
        cluster: Arc::new(cluster.clone()),
        model,
        names: trace.names.clone(),
        policy: policy::build(policy_spec, &PolicyConfig::default()).unwrap(),
        placer: Box::new(PackingPlacer),
        executor: Box::new(SimExecutor::new(f64::INFINITY)),
        probes: Vec::new(),
        health_every: std::time::Duration::from_secs(60),
    };
    let (timeline, violations) = actix::System::new().block_on(async {
        let addr = ClusterActor::start(parts, settings).unwrap();
        let report = replay(&addr, &clock, trace, &config().engine)
            .await
            .unwrap();
        assert!(!report.stalled && report.refused.is_empty(), "{report:?}");
        let timeline = addr.send(gangway_actors::cluster::Timeline).await.unwrap();
        let stats = addr.send(GetStats).await.unwrap();
        (timeline, stats.violations)
    });
    let (_journal, recovered) = gangway_actors::ledger::open_journal(&journal).unwrap();
    let starts = recovered
        .records
        .into_iter()
        .filter_map(|(_, r)| match r {
            Record::Started { job, gpus, at, .. } => {
                Some((at, job, gpus.iter().map(|g| g.0).collect()))
            }
            _ => None,
        })
        .collect();
    let timeline = timeline
        .into_iter()
        .map(|(id, (start, finish))| (id, start, finish))
        .collect();
    (timeline, starts, violations)
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-6 * a.abs().max(1.0),
        (None, None) => true,
        _ => false,
    }
}

#[test]
fn the_actors_make_the_simulators_decisions_and_reach_its_jcts() {
    let (trace, cluster, model) = scenario_of(200);
    let mut restarts = 0;
    for spec in [
        "fifo",
        "tiresias",
        "las",
        "gandiva",
        "max_min_fairness_perf",
    ] {
        let mut sim = Simulation::new(&trace, &cluster, model.as_ref());
        sim.config = config();
        let mut policy = policy::build(spec, &PolicyConfig::default()).unwrap();
        let expected = sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
        let sim_starts: Starts = expected
            .changes
            .iter()
            .filter_map(|(at, c)| match c {
                Change::Started { job, gpus, .. } => {
                    Some((*at, *job, gpus.iter().map(|g| g.0).collect()))
                }
                _ => None,
            })
            .collect();

        let (timeline, live_starts, violations) = live(spec, &trace, &cluster, Arc::clone(&model));
        assert_eq!(
            violations, 0,
            "{spec}: the ledger saw a GPU held twice or a job run twice"
        );
        restarts += sim_starts.len() - trace.jobs.len();
        assert_eq!(
            live_starts.len(),
            sim_starts.len(),
            "{spec}: number of starts"
        );
        for (live, sim) in live_starts.iter().zip(&sim_starts) {
            assert!(
                live.1 == sim.1 && live.2 == sim.2 && close(Some(live.0), Some(sim.0)),
                "{spec}: the first different placement: live {live:?}, simulated {sim:?}"
            );
        }
        assert_eq!(timeline.len(), expected.records.len());
        for ((id, start, finish), record) in timeline.iter().zip(&expected.records) {
            assert_eq!(*id, record.id);
            assert!(finish.is_some(), "{spec}: job {id} did not finish");
            assert!(
                close(*start, record.first_start) && close(*finish, record.finish),
                "{spec}: job {id}: live start/finish {start:?}/{finish:?}, simulated {:?}/{:?}",
                record.first_start,
                record.finish
            );
        }
    }
    assert!(
        restarts > 100,
        "the scenario should make the preemptive policies preempt and move jobs ({restarts} restarts)"
    );
}
