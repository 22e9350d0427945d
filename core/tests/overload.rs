//! Overload (issue 28, item 10): with a backlog far beyond what the cluster can run, a round costs
//! what it can start and what runs, not the backlog; and a policy that keeps its own queue decides
//! exactly as it does when shown every job.

use std::cell::Cell;
use std::sync::Arc;

use gangway_core::cluster::Cluster;
use gangway_core::engine::{Engine, EngineConfig};
use gangway_core::job::{Job, JobId, Names, Trace, WorkUnit};
use gangway_core::placement::PackingPlacer;
use gangway_core::policy::{self, Backlog, Grant, JobView, Policy, PolicyConfig, RoundInput};
use gangway_core::sim::{SimConfig, SimResult, Simulation};
use gangway_core::throughput::DurationModel;

/// What one call to the policy was given and looked at.
#[derive(Clone, Copy, Debug)]
struct Work {
    /// Active jobs in all.
    active: usize,
    /// Jobs in `RoundInput::jobs`, and how many of them run.
    shown: usize,
    running: usize,
    /// Views the policy asked the backlog for.
    looked_up: usize,
    /// Jobs granted that `RoundInput::jobs` did not show (more than `looked_up`: running jobs it
    /// granted without a view, left out until it looks at them again).
    granted_unshown: usize,
}

/// Counts the views a backlog hands out.
struct CountingBacklog<'a> {
    inner: &'a dyn Backlog,
    looked_up: &'a Cell<usize>,
}

impl Backlog for CountingBacklog<'_> {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn left(&self) -> &[JobId] {
        self.inner.left()
    }

    fn view(&self, id: JobId) -> Option<JobView<'_>> {
        self.looked_up.set(self.looked_up.get() + 1);
        self.inner.view(id)
    }

    fn views(&self) -> Vec<JobView<'_>> {
        let views = self.inner.views();
        self.looked_up.set(self.looked_up.get() + views.len());
        views
    }
}

/// Wraps a policy, recording each call's [`Work`]. With `queue` off it does not pass on the policy's
/// own queue, so that the engine shows the policy every job, every round (the way it ran before).
struct Counting {
    inner: Box<dyn Policy>,
    queue: bool,
    calls: Vec<Work>,
}

impl Policy for Counting {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let looked_up = Cell::new(0);
        let counting = input.backlog.map(|inner| CountingBacklog {
            inner,
            looked_up: &looked_up,
        });
        let counted = RoundInput {
            now: input.now,
            round_length: input.round_length,
            cluster: input.cluster,
            capacity: input.capacity,
            jobs: input.jobs,
            backlog: counting.as_ref().map(|b| b as &dyn Backlog),
            placement: input.placement,
            jobs_changed: input.jobs_changed,
            type_order: input.type_order,
            model: input.model,
            usage: input.usage,
            paused: input.paused,
        };
        let grants = self.inner.allocate(&counted);
        self.calls.push(Work {
            active: input.backlog.map_or(input.jobs.len(), |b| b.len()),
            shown: input.jobs.len(),
            running: input.jobs.iter().filter(|v| v.running.is_some()).count(),
            looked_up: looked_up.get(),
            granted_unshown: (grants.iter())
                .filter(|g| input.jobs.iter().all(|v| v.id() != g.job))
                .count(),
        });
        grants
    }

    fn changes_with_time(&self) -> bool {
        self.inner.changes_with_time()
    }

    fn keeps_queue(&self) -> bool {
        self.queue && self.inner.keeps_queue()
    }

    fn look_again_at(&self, view: &JobView<'_>, now: f64) -> f64 {
        self.inner.look_again_at(view, now)
    }
}

/// `jobs` one-GPU jobs of `seconds(k)` seconds each, arriving every `every` seconds.
fn trace(jobs: u32, every: f64, gpus: impl Fn(u32) -> u32, seconds: impl Fn(u32) -> f64) -> Trace {
    let mut trace = Trace::new("overload", WorkUnit::Seconds);
    let job_type = trace.intern_job_type("toy");
    let tenant = trace.intern_tenant("default");
    for k in 0..jobs {
        trace.jobs.push(
            Job::new(JobId(k), f64::from(k) * every, gpus(k), seconds(k))
                .with_type(job_type)
                .with_tenant(tenant),
        );
    }
    trace
}

/// `spec`, built, counting its calls; with `queue` off it does not pass on its own queue.
fn counting(spec: &str, queue: bool) -> Counting {
    Counting {
        inner: policy::builtin()
            .build(spec, &PolicyConfig::default(), &policy::Capabilities::ALL)
            .unwrap(),
        queue,
        calls: Vec::new(),
    }
}

/// Runs `spec` on `cluster`, with the policy's own queue or without; returns the run and each call's
/// work.
fn run(spec: &str, cluster: &str, trace: &Trace, queue: bool) -> (SimResult, Vec<Work>) {
    run_in_rounds(
        spec,
        cluster,
        trace,
        queue,
        SimConfig::default().engine.round_length,
    )
}

/// [`run`] with rounds of `round_length` seconds.
fn run_in_rounds(
    spec: &str,
    cluster: &str,
    trace: &Trace,
    queue: bool,
    round_length: f64,
) -> (SimResult, Vec<Work>) {
    let cluster = Cluster::parse_spec(cluster, 1).unwrap();
    let model = DurationModel::uniform(cluster.num_gpu_types());
    let mut sim = Simulation::new(trace, &cluster, &model);
    sim.config = SimConfig {
        log_changes: true,
        ..SimConfig::default()
    };
    sim.config.engine.audit = true;
    sim.config.engine.round_length = round_length;
    let mut policy = counting(spec, queue);
    let result = sim.run(&mut policy, &mut PackingPlacer, &mut |_, _| {});
    (result, policy.calls)
}

#[test]
fn a_round_under_a_growing_backlog_costs_what_it_can_start_not_the_backlog() {
    // 6 GPUs and 360 s rounds start at most 6 one-GPU jobs of 1-5 s a round; 60 arrive each round,
    // so the backlog grows by about 54 a round for 50 rounds, then drains for hundreds.
    let trace = trace(3000, 6.0, |_| 1, |k| f64::from(1 + k % 5));
    for spec in ["tiresias", "fifo", "srtf", "tiresias_pollux"] {
        let (result, calls) = run(spec, "v100=2,p100=2,k80=2", &trace, true);
        assert!(
            result.records.iter().all(|r| r.finish.is_some()),
            "{spec}: every job finishes"
        );
        let deepest = calls.iter().map(|w| w.active).max().unwrap();
        assert!(deepest > 2000, "{spec}: the backlog reached only {deepest}");
        let mut previous_running = 0;
        for (round, w) in calls.iter().enumerate() {
            // Shown: what runs, and what arrived or stopped since the last call (about 60 arrivals
            // a round, and the 6 jobs that ran and finished or were preempted).
            assert!(
                w.shown <= w.running + 60 + previous_running + 1,
                "{spec}: call {round} was shown {} jobs of {} ({w:?})",
                w.shown,
                w.active
            );
            // Looked up: no more than the waiting jobs that can start on 6 GPUs.
            assert!(
                w.looked_up <= 6,
                "{spec}: call {round} looked up {} of {} jobs ({w:?})",
                w.looked_up,
                w.active
            );
            previous_running = w.running;
        }
    }
}

#[test]
fn a_policy_that_keeps_its_queue_decides_as_when_shown_every_job() {
    // Gangs of 1 to 8 GPUs, runs longer than a round (preemptions between queues, and starved jobs
    // promoted back to the top), arrivals faster than the cluster runs them.
    let gpus = |k: u32| [1, 2, 1, 4, 1, 8, 2, 1][k as usize % 8];
    let seconds = |k: u32| f64::from(200 + (k * 7919) % 9000);
    let trace = trace(400, 90.0, gpus, seconds);
    for spec in [
        "tiresias",
        "tiresias:promote=2",
        "dlas",
        "tiresias_pollux",
        "fifo",
        "fifo_perf",
        "yarn_cs",
        "sjf",
        "srtf",
    ] {
        let (queued, calls) = run(spec, "v100=8,p100=4,k80=4", &trace, true);
        let (shown_all, _) = run(spec, "v100=8,p100=4,k80=4", &trace, false);
        assert!(
            calls.iter().any(|w| w.shown < w.active),
            "{spec}: the policy kept its own queue"
        );
        // Tiresias's running jobs are left out until their service could move them to another
        // queue; the others' keys move all the time, or their rules need every running job.
        let left_out = calls.iter().any(|w| w.granted_unshown > w.looked_up);
        assert_eq!(
            left_out,
            ["tiresias", "dlas"].iter().any(|p| spec.starts_with(p)),
            "{spec}: running jobs granted unseen"
        );
        same(spec, "start or stop", &queued.changes, &shown_all.changes);
        same(spec, "record", &queued.records, &shown_all.records);
    }
}

#[test]
fn running_jobs_left_out_are_looked_at_again_in_the_pass_their_queue_changes() {
    // Rounds of 7 s: a running job looked at again even a few seconds after its service crossed
    // a threshold would be decided on a round late. Jobs of 1 to 8 GPUs cross at every pace.
    let gpus = |k: u32| [1, 2, 1, 4, 1, 8, 2, 1][k as usize % 8];
    let seconds = |k: u32| f64::from(200 + (k * 7919) % 4000);
    let trace = trace(120, 40.0, gpus, seconds);
    for spec in ["tiresias", "dlas", "tiresias_pollux"] {
        let (queued, calls) = run_in_rounds(spec, "v100=8,p100=4", &trace, true, 7.0);
        let (shown_all, _) = run_in_rounds(spec, "v100=8,p100=4", &trace, false, 7.0);
        assert!(
            calls.iter().any(|w| w.granted_unshown > w.looked_up),
            "{spec}: running jobs granted unseen"
        );
        same(spec, "start or stop", &queued.changes, &shown_all.changes);
        same(spec, "record", &queued.records, &shown_all.records);
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Any trace, any round length: with running jobs left out until their queue can change, the
    /// same starts, stops and records as when shown every job.
    #[test]
    fn leaving_running_jobs_out_never_changes_a_decision(
        jobs in proptest::collection::vec((0.0f64..300.0, 0usize..4, 1.0f64..5000.0), 5..60),
        round_length in proptest::sample::select(vec![3.0, 45.0, 360.0]),
        spec in proptest::sample::select(vec!["tiresias", "tiresias:promote=2", "dlas", "tiresias_pollux"]),
    ) {
        let mut trace = Trace::new("random", WorkUnit::Seconds);
        let job_type = trace.intern_job_type("toy");
        let tenant = trace.intern_tenant("default");
        let mut arrival = 0.0;
        for (k, &(gap, size, seconds)) in jobs.iter().enumerate() {
            arrival += gap;
            trace.jobs.push(
                Job::new(JobId(k as u32), arrival, [1, 2, 4, 8][size], seconds)
                    .with_type(job_type)
                    .with_tenant(tenant),
            );
        }
        let (queued, _) = run_in_rounds(spec, "v100=8,p100=4", &trace, true, round_length);
        let (shown_all, _) = run_in_rounds(spec, "v100=8,p100=4", &trace, false, round_length);
        same(spec, "start or stop", &queued.changes, &shown_all.changes);
        same(spec, "record", &queued.records, &shown_all.records);
    }
}

/// One pass of `policy` on `engine` at `now`; what it was shown.
fn pass(engine: &mut Engine<'_>, policy: &mut Counting, now: f64) -> Work {
    engine.schedule(policy, &mut PackingPlacer, now);
    *policy.calls.last().unwrap()
}

/// An engine on 8 GPUs with `jobs` one-GPU jobs of days of work.
fn busy_engine(jobs: u32) -> Engine<'static> {
    let cluster = Arc::new(Cluster::parse_spec("v100=8", 8).unwrap());
    let model = Arc::new(DurationModel::uniform(1));
    let config = EngineConfig {
        round_length: 60.0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(cluster, model, config, Names::default(), 0.0);
    engine.intern_job_type("model");
    for k in 0..jobs {
        engine.submit(Job::new(JobId(k), 0.0, 1, 1e6), 0.0).unwrap();
    }
    engine
}

#[test]
fn a_policy_is_shown_every_running_job_after_another_ran_or_once_it_lost_track() {
    let mut engine = busy_engine(16);
    let mut tiresias = counting("tiresias", true);
    pass(&mut engine, &mut tiresias, 0.0);
    assert_eq!(
        pass(&mut engine, &mut tiresias, 60.0).running,
        8,
        "new runs are shown"
    );
    assert_eq!(
        pass(&mut engine, &mut tiresias, 120.0).running,
        0,
        "then left out until their service nears 3,250 GPU-seconds"
    );
    // Another policy is shown every running job (FIFO sets them aside before its walk: hidden,
    // they would be preempted).
    let mut fifo = counting("fifo", true);
    assert_eq!(pass(&mut engine, &mut fifo, 180.0).running, 8);
    assert_eq!(engine.busy_gpus(), 8, "FIFO preempts nothing");
    // Back to the first: what it said of them was said before another policy ran, and what it
    // knows of the waiting jobs is what it was shown before (FIFO's pass heard of their changes).
    let back = pass(&mut engine, &mut tiresias, 240.0);
    assert_eq!((back.running, back.shown), (8, 16));
    assert_eq!(pass(&mut engine, &mut tiresias, 300.0).running, 0);
    // It runs a pass on another engine, and comes back having lost track of this one's jobs: it
    // rebuilds its queue from every view, and is shown every running job at the next pass.
    let mut other = busy_engine(4);
    pass(&mut other, &mut tiresias, 300.0);
    pass(&mut engine, &mut tiresias, 360.0);
    assert_eq!(pass(&mut engine, &mut tiresias, 420.0).running, 8);
    assert_eq!(engine.busy_gpus(), 8);
}

/// Passes a policy's calls on, and panics after the one it is cursed on (its state changed).
struct Cursed {
    inner: Counting,
    curse_at: usize,
}

impl Policy for Cursed {
    fn allocate(&mut self, input: &RoundInput<'_>) -> Vec<Grant> {
        let grants = self.inner.allocate(input);
        assert!(self.inner.calls.len() != self.curse_at, "cursed call");
        grants
    }

    fn keeps_queue(&self) -> bool {
        self.inner.keeps_queue()
    }

    fn look_again_at(&self, view: &JobView<'_>, now: f64) -> f64 {
        self.inner.look_again_at(view, now)
    }
}

#[test]
fn after_a_pass_whose_policy_panicked_it_is_shown_every_running_job() {
    let mut engine = busy_engine(16);
    let mut tiresias = Cursed {
        inner: counting("tiresias", true),
        curse_at: 4,
    };
    for now in [0.0, 60.0, 120.0] {
        engine.schedule(&mut tiresias, &mut PackingPlacer, now);
    }
    assert_eq!(
        tiresias.inner.calls[2].running, 0,
        "left out until they near 3,250"
    );
    let failed = engine.try_schedule(&mut tiresias, &mut PackingPlacer, 180.0);
    assert!(failed.is_err(), "the fourth call panics");
    engine.schedule(&mut tiresias, &mut PackingPlacer, 240.0);
    assert_eq!(tiresias.inner.calls[4].running, 8);
    assert_eq!(engine.busy_gpus(), 8, "the failed pass changed no run");
}

/// Asserts that two lists agree, naming the first place they differ.
fn same<T: PartialEq + std::fmt::Debug>(spec: &str, what: &str, got: &[T], expected: &[T]) {
    if let Some(k) = (0..got.len().max(expected.len())).find(|&k| got.get(k) != expected.get(k)) {
        panic!(
            "{spec}: {what} {k} differs: {:?} with its own queue, {:?} shown every job",
            got.get(k),
            expected.get(k)
        );
    }
}
