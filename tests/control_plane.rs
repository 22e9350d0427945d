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
use gangway_core::policy::{self, Capabilities, PolicyConfig, PolicyEntry, Registry};
use gangway_core::sim::{SimConfig, Simulation};
use gangway_core::throughput::ThroughputModel;
use gangway_core::trace::TraceOptions;

mod support;

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

/// What the journal of a live run shows beside its starts.
#[derive(Debug)]
struct Journaled {
    /// Records the ledger refused (a GPU held twice, a job run twice).
    violations: u64,
    /// Moves journaled as one record each.
    moves: usize,
}

/// Runs the trace through the actors; returns per-job (first start, finish), the starts from the
/// journal, and the number of invariant violations the ledger saw.
fn live(
    policy_spec: &str,
    trace: &Trace,
    cluster: &Cluster,
    model: Arc<dyn ThroughputModel>,
) -> (Timeline, Starts, Journaled) {
    live_with(policy_spec, trace, cluster, model, &config().engine)
}

/// [`live`] with the engine configured as `engine`.
fn live_with(
    policy_spec: &str,
    trace: &Trace,
    cluster: &Cluster,
    model: Arc<dyn ThroughputModel>,
    engine: &EngineConfig,
) -> (Timeline, Starts, Journaled) {
    live_from(
        policy::builtin(),
        policy_spec,
        trace,
        cluster,
        model,
        engine,
    )
}

/// [`live_with`] with the policy built from `registry`.
fn live_from(
    registry: &Registry,
    policy_spec: &str,
    trace: &Trace,
    cluster: &Cluster,
    model: Arc<dyn ThroughputModel>,
    engine: &EngineConfig,
) -> (Timeline, Starts, Journaled) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let clock = Arc::new(VirtualClock::new(0.0));
    let mut settings = Settings::new(engine.clone(), TimeSource::Virtual(Arc::clone(&clock)));
    settings.journal = Some(journal.clone());
    // Keep every record, to compare them all.
    settings.snapshot_every = u64::MAX;
    let has = Capabilities::of(model.as_ref());
    let parts = Parts {
        cluster: Arc::new(cluster.clone()),
        model,
        names: trace.names.clone(),
        policy: registry
            .build(policy_spec, &PolicyConfig::default(), &has)
            .unwrap(),
        placer: Box::new(PackingPlacer),
        executor: Box::new(SimExecutor::new(f64::INFINITY)),
        probes: Vec::new(),
        health_every: std::time::Duration::from_secs(60),
    };
    let (timeline, violations) = actix::System::new().block_on(async {
        let addr = ClusterActor::start(parts, settings).unwrap();
        let report = replay(&addr, &clock, trace, engine).await.unwrap();
        assert!(!report.stalled && report.refused.is_empty(), "{report:?}");
        let timeline = addr.send(gangway_actors::cluster::Timeline).await.unwrap();
        let stats = addr.send(GetStats).await.unwrap();
        (timeline, stats.counters.violations)
    });
    let (_journal, recovered) = gangway_actors::ledger::open_journal(&journal).unwrap();
    let moves = (recovered.records.iter())
        .filter(|(_, r)| matches!(r, Record::Moved(_)))
        .count();
    let starts = recovered
        .records
        .into_iter()
        .filter_map(|(_, r)| match r {
            Record::Started(start) | Record::Moved(start) => Some((
                start.at,
                start.job,
                start.gpus.iter().map(|g| g.0).collect(),
            )),
            _ => None,
        })
        .collect();
    let timeline = timeline
        .into_iter()
        .map(|(id, (start, finish))| (id, start, finish))
        .collect();
    (timeline, starts, Journaled { violations, moves })
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
    let (mut restarts, mut moves) = (0, 0);
    for spec in [
        "fifo",
        "tiresias",
        "las",
        "gandiva",
        "max_min_fairness_perf",
        // Rigid jobs: Gavel's packed throughput program, re-solved every round.
        "ramp",
    ] {
        let mut sim = Simulation::new(&trace, &cluster, model.as_ref());
        sim.config = config();
        let mut policy = policy::build(spec, &PolicyConfig::default(), model.as_ref()).unwrap();
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

        let (timeline, live_starts, journaled) = live(spec, &trace, &cluster, Arc::clone(&model));
        let (live_starts, sim_starts) = (by_time(&live_starts), by_time(&sim_starts));
        assert_eq!(
            journaled.violations, 0,
            "{spec}: the ledger saw a GPU held twice or a job run twice"
        );
        moves += journaled.moves;
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
    // Each journaled as one record (a ring of moves keeps a stop and a start for one of them).
    assert!(moves > 20, "{moves} moves journaled as one record each");
}

#[test]
fn a_user_policy_that_delegates_to_tiresias_runs_as_tiresias_does_simulated_and_live() {
    let mut registry = Registry::with_builtins();
    registry
        .register(PolicyEntry::new("my_tiresias", |config| {
            let inner = policy::builtin()
                .build("tiresias", config, &Capabilities::ALL)
                .expect("tiresias is built in");
            Box::new(support::Delegating(inner))
        }))
        .unwrap();
    let (trace, cluster, model) = scenario_of(200);

    // Simulated, side by side in one comparison.
    let report = Simulation::builder()
        .registry(&registry)
        .trace(trace.clone())
        .cluster(cluster.clone())
        .model(Arc::clone(&model))
        .config(config())
        .policies(["tiresias", "my_tiresias"])
        .run()
        .unwrap();
    let (builtin, user) = (&report.runs[0], &report.runs[1]);
    assert!(
        builtin.result.records.iter().any(|r| r.preemptions > 0),
        "the trace should make tiresias preempt"
    );
    assert_eq!(builtin.jobs(), user.jobs(), "per-job records");
    assert_eq!(
        builtin.result.changes, user.result.changes,
        "every start and stop"
    );
    let mut summary = user.summary.clone();
    summary.policy = builtin.summary.policy.clone();
    summary.wall_s = builtin.summary.wall_s;
    assert_eq!(builtin.summary, summary);

    // Live, each through the actors in virtual time.
    let engine = config().engine;
    let tiresias = live_from(
        &registry,
        "tiresias",
        &trace,
        &cluster,
        Arc::clone(&model),
        &engine,
    );
    let mine = live_from(&registry, "my_tiresias", &trace, &cluster, model, &engine);
    assert_eq!(
        tiresias.2.violations + mine.2.violations,
        0,
        "invariant violations"
    );
    assert_eq!(tiresias.1, mine.1, "every start: time, job, GPUs");
    assert_eq!(tiresias.0, mine.0, "every job's first start and finish");
    assert!(tiresias.0.iter().all(|(_, _, finish)| finish.is_some()));
}

/// Starts in time order, and at the same instant in job order (the journal writes a decision's starts
/// in the order the ledger can take them: a move after the moves that free its GPUs).
fn by_time(starts: &Starts) -> Starts {
    let mut sorted = starts.clone();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    sorted
}

/// The start of every run the simulator made, as (time, job, GPU ids).
fn simulated_starts(changes: &[(f64, Change)]) -> Starts {
    changes
        .iter()
        .filter_map(|(at, c)| match c {
            Change::Started { job, gpus, .. } => {
                Some((*at, *job, gpus.iter().map(|g| g.0).collect()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn under_sia_the_actors_resize_elastic_jobs_as_the_simulator_does() {
    resize_live_as_simulated("sia");
}

#[test]
fn under_ramp_the_actors_resize_elastic_jobs_as_the_simulator_does() {
    resize_live_as_simulated("ramp");
}

/// Under `spec`, a goodput policy, the actors start, resize and finish the first jobs of Sia's philly
/// workload as the simulator does, start for start.
fn resize_live_as_simulated(spec: &str) {
    let Some(workloads) = support::shared_data("sia/workloads/philly", "workload-1.csv") else {
        return;
    };
    // Sia's first 20 jobs of its philly workload, on its heterogeneous cluster, 60 s rounds.
    let trace_file = workloads.join("workload-1.csv");
    let mut trace = gangway_core::trace::load(&trace_file, &TraceOptions::default()).unwrap();
    trace.jobs.truncate(20);
    let cluster = Cluster::parse_spec("aws=6x4,rtx=3x8,dgx-ext=2x8", 4).unwrap();
    let model: Arc<dyn ThroughputModel> = Arc::new(
        gangway_core::throughput::goodput::ProfiledWorkload::for_trace(&trace, &cluster).unwrap(),
    );
    let engine = EngineConfig {
        round_length: 60.0,
        ..EngineConfig::default()
    };
    let mut sim = Simulation::new(&trace, &cluster, model.as_ref());
    sim.config = SimConfig {
        engine: engine.clone(),
        log_changes: true,
        ..SimConfig::default()
    };
    let mut policy = policy::build(spec, &PolicyConfig::default(), model.as_ref()).unwrap();
    let expected = sim.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    let sim_starts = simulated_starts(&expected.changes);

    let (timeline, live_starts, journaled) =
        live_with(spec, &trace, &cluster, Arc::clone(&model), &engine);
    assert_eq!(journaled.violations, 0);
    // A resize is a move: one record, as the other moves are.
    assert!(journaled.moves > 0, "{spec}: {journaled:?}");
    // It resizes: more starts than jobs, and jobs on several sizes.
    assert!(
        sim_starts.len() > trace.jobs.len() + 10,
        "{spec}: {} starts of {} jobs",
        sim_starts.len(),
        trace.jobs.len()
    );
    let mut sizes: std::collections::BTreeMap<JobId, std::collections::BTreeSet<usize>> =
        Default::default();
    for (_, job, gpus) in &sim_starts {
        sizes.entry(*job).or_default().insert(gpus.len());
    }
    assert!(
        sizes.values().filter(|s| s.len() > 1).count() >= 5,
        "{spec}: jobs resized: {sizes:?}"
    );
    let (live_starts, sim_starts) = (by_time(&live_starts), by_time(&sim_starts));
    for (live, sim) in live_starts.iter().zip(&sim_starts) {
        assert!(
            live.1 == sim.1 && live.2 == sim.2 && close(Some(live.0), Some(sim.0)),
            "{spec}: the first different start: live {live:?}, simulated {sim:?}"
        );
    }
    assert_eq!(live_starts.len(), sim_starts.len(), "number of starts");
    assert_eq!(timeline.len(), expected.records.len());
    for ((id, start, finish), record) in timeline.iter().zip(&expected.records) {
        assert_eq!(*id, record.id);
        assert!(
            close(*start, record.first_start) && close(*finish, record.finish),
            "job {id}: live start/finish {start:?}/{finish:?}, simulated {:?}/{:?}",
            record.first_start,
            record.finish
        );
    }
}
