//! Run time depends on events, not on simulated time: the simulator skips the rounds between events
//! for policies that time alone does not move, and refuses work no cluster could finish.

use gangway_core::cluster::Cluster;
use gangway_core::job::{Job, JobId, Trace, WorkUnit};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, Grant, Policy, PolicyConfig, RoundInput};
use gangway_core::sim::Simulation;
use gangway_core::throughput::DurationModel;

/// A policy that counts how often it is asked.
struct Counting {
    inner: Box<dyn Policy>,
    calls: usize,
}

impl Policy for Counting {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        self.calls += 1;
        self.inner.allocate(input)
    }

    fn changes_with_time(&self) -> bool {
        self.inner.changes_with_time()
    }
}

fn trace(work: &[(f64, f64)]) -> Trace {
    let mut trace = Trace::new("test", WorkUnit::Seconds);
    let job_type = trace.intern_job_type("toy");
    let tenant = trace.intern_tenant("default");
    for (k, &(arrival, seconds)) in work.iter().enumerate() {
        trace.jobs.push(
            Job::new(JobId(k as u32), arrival, 1, seconds)
                .with_type(job_type)
                .with_tenant(tenant),
        );
    }
    trace
}

/// Runs `spec` on one GPU; returns its calls and the jobs' finish times.
fn run(spec: &str, trace: &Trace) -> (usize, Vec<Option<f64>>) {
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let model = DurationModel::uniform(1);
    let sim = Simulation::new(trace, &cluster, &model);
    let mut policy = Counting {
        inner: policy::build(spec, &PolicyConfig::default(), &model).unwrap(),
        calls: 0,
    };
    let result = sim.run(&mut policy, &mut PackingPlacer, &mut |_, _| {});
    (
        policy.calls,
        result.records.iter().map(|r| r.finish).collect(),
    )
}

#[test]
fn a_policy_time_does_not_move_is_asked_only_at_events() {
    // A year of work, then a second job: about 87,600 rounds of 360 s in between.
    let trace = trace(&[(0.0, 3.15e7), (10.0, 100.0)]);
    let (fifo_calls, fifo) = run("fifo", &trace);
    let (las_calls, las) = run("las", &trace);
    assert!(fifo_calls < 10, "FIFO was asked {fifo_calls} times");
    assert!(las_calls > 80_000, "LAS is asked every round: {las_calls}");
    // FIFO finishes the long job first (on a round boundary), then starts the short one there.
    assert_eq!(fifo, [Some(3.15e7), Some(3.15e7 + 100.0)]);
    // LAS shares the GPU: the short job is done within its first rounds.
    assert!(las[1].unwrap() < 1000.0, "{las:?}");
}

#[test]
fn work_longer_than_the_horizon_is_refused_not_simulated() {
    let trace = trace(&[(0.0, 1e13), (0.0, 50.0)]);
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let model = DurationModel::uniform(1);
    let sim = Simulation::new(&trace, &cluster, &model);
    let mut las = policy::build("las", &PolicyConfig::default(), &model).unwrap();
    let result = sim.run(las.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    assert_eq!(result.unschedulable, vec![JobId(0)]);
    assert_eq!(result.records[1].finish, Some(50.0));
}

/// Durations, but every (re)start costs `restart` seconds of no progress.
struct SlowRestarts {
    inner: DurationModel,
    restart: f64,
}

impl gangway_core::throughput::ThroughputModel for SlowRestarts {
    fn steps_per_second(
        &self,
        job: &Job,
        gpu_type: gangway_core::cluster::GpuTypeId,
        gpus: u32,
    ) -> Option<f64> {
        self.inner.steps_per_second(job, gpu_type, gpus)
    }

    fn restart_seconds(&self, _: &Job) -> f64 {
        self.restart
    }
}

#[test]
fn a_policy_that_restarts_jobs_faster_than_they_run_stops_as_stalled() {
    // LAS time-slices one GPU between two jobs every 360 s round; each start costs 1,000 s, so neither
    // ever progresses. The run must end (reporting both unfinished), not spin to the horizon.
    let trace = trace(&[(0.0, 5000.0), (0.0, 5000.0)]);
    let cluster = Cluster::parse_spec("v100=1", 1).unwrap();
    let model = SlowRestarts {
        inner: DurationModel::uniform(1),
        restart: 1000.0,
    };
    let sim = Simulation::new(&trace, &cluster, &model);
    let mut las = policy::build("las", &PolicyConfig::default(), &model).unwrap();
    let result = sim.run(las.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    assert!(
        result.records.iter().all(|r| r.finish.is_none()),
        "{:?}",
        result.records
    );
    // It stops after about a thousand rounds without progress, not at the 1e9 s horizon.
    assert!(
        result.rounds < 1100,
        "{} rounds, to {} s",
        result.rounds,
        result.span_seconds
    );
    // Under FIFO the first job pays its restart once and runs to the end; so does the second.
    let mut fifo = policy::build("fifo", &PolicyConfig::default(), &model).unwrap();
    let result = sim.run(fifo.as_mut(), &mut PackingPlacer, &mut |_, _| {});
    assert!(result.records.iter().all(|r| r.finish.is_some()));
}

#[test]
fn short_jobs_that_finish_between_rounds_are_progress_not_a_stall() {
    // 1,500 jobs of 100 s on one GPU, all there at the start: LAS runs one per 360 s round (there is no
    // pass at completions), so at every pass no job is running, yet one finished since the last pass.
    let work: Vec<(f64, f64)> = (0..1500).map(|_| (0.0, 100.0)).collect();
    let trace = trace(&work);
    let (_, finishes) = run("las", &trace);
    assert!(
        finishes.iter().all(Option::is_some),
        "{} of 1500 unfinished",
        finishes.iter().filter(|f| f.is_none()).count()
    );
}
