//! The simulator's entry point: a trace (from a file, or made in code), a cluster, a throughput model
//! and one or more policies in, typed results out.
//!
//! [`SimulationBuilder`] checks everything it is given before any run starts (every policy spec, the
//! costs and round, that every job can run on the cluster), then runs the policies in parallel, each
//! on its own thread, and measures finish-time fairness (rho) when asked: against the
//! [`REFERENCE_POLICY`] run, or on goodput workloads each job alone on its share ([`super::alone`]).
//!
//! ```
//! use gangway_core::cluster::Cluster;
//! use gangway_core::job::{Trace, WorkUnit};
//! use gangway_core::sim::Simulation;
//!
//! // Twelve jobs made in code, their work in seconds at their GPUs.
//! let mut trace = Trace::builder(WorkUnit::Seconds);
//! for k in 0..12 {
//!     trace = trace.job("toy", f64::from(k) * 600.0, 1 + k % 4, 3600.0);
//! }
//! let report = Simulation::builder()
//!     .trace(trace.build()?)
//!     .cluster(Cluster::parse_spec("v100=2x4", 4)?)
//!     .policies(["fifo", "tiresias"])
//!     .round(60.0)
//!     .run()?;
//! let fifo = report.get("fifo").unwrap();
//! assert_eq!(fifo.jobs().len(), 12);
//! assert!(fifo.unfinished().is_empty());
//! assert!(fifo.summary.avg_ftf.is_some(), "rho against the isolated reference");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::cluster::Cluster;
use crate::engine::EngineConfig;
use crate::error::{InputError, SimError};
use crate::job::{JobId, Trace, WorkUnit};
use crate::limits;
use crate::metrics::{JobRecord, Summary, Window};
use crate::placement::{PackingPlacer, Placer};
use crate::policy::{self, Capabilities, Policy, PolicyConfig, Registry};
use crate::throughput::goodput::ProfiledWorkload;
use crate::throughput::resources::{ResourceModel, ResourceProfiles};
use crate::throughput::{DurationModel, TableModel, ThroughputModel, ThroughputTable};
use crate::trace::TraceOptions;

use super::alone::jcts_alone;
use super::{SimConfig, SimResult, Simulation};

/// The policy that finish-time fairness (rho) is measured against, on traces that are not goodput
/// workloads: each job's JCT under it stands for the JCT the job would have alone on 1/N of the cluster.
pub const REFERENCE_POLICY: &str = "isolated";

/// Most simulations that run at the same time.
const MAX_RUNS_AT_ONCE: usize = 8;

/// Jobs that the runs at once may hold between them: each run keeps an engine and a record per job
/// (about 0.6 to 0.8 kB), so on a trace of a million jobs the runs take turns instead of doubling the
/// memory a comparison needs.
const JOBS_IN_FLIGHT: usize = 600_000;

/// How many runs go at once on a trace of `jobs` jobs: as many as the runs, up to
/// [`MAX_RUNS_AT_ONCE`], while their jobs stay within [`JOBS_IN_FLIGHT`]; always at least one.
fn runs_at_once(runs: usize, jobs: usize) -> usize {
    (JOBS_IN_FLIGHT / jobs.max(1))
        .clamp(1, MAX_RUNS_AT_ONCE)
        .min(runs)
}

/// One run's progress callback: called with (jobs finished, jobs in the trace).
pub type RunProgress<'a> = Box<dyn FnMut(usize, usize) + Send + 'a>;

/// Makes each run's progress callback, given the run's policy spec.
type ProgressFactory<'a> = Box<dyn Fn(&str) -> RunProgress<'a> + Send + Sync + 'a>;

/// Makes a fresh placer for each run.
type PlacerFactory<'a> = Box<dyn Fn() -> Box<dyn Placer> + Send + Sync + 'a>;

/// Why a simulation could not run. Nothing has run when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum SimulationError {
    /// A required part was not given: `trace`, `cluster` or `policy`.
    #[error("the simulation has no {0}: give one with SimulationBuilder::{0}")]
    Missing(&'static str),
    /// The trace counts work in steps and neither a throughput table nor a model says how fast.
    #[error(
        "{trace} counts work in steps: give a throughput table of steps per second (SimulationBuilder::table) or a model"
    )]
    NoTable {
        /// Where the trace came from.
        trace: String,
    },
    /// The trace, a profile or a table is wrong, or a job can never run on the cluster.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A policy spec or a setting is wrong.
    #[error(transparent)]
    Config(#[from] SimError),
    /// The run was stopped before its end ([`SimulationBuilder::stop_when`]).
    #[error("the simulation was stopped before its end")]
    Stopped,
}

/// Where the trace comes from.
enum TraceInput {
    Given(Trace),
    File(PathBuf, TraceOptions),
}

/// Configures and runs simulations: see the [module docs](self).
///
/// Defaults: best-fit packing ([`PackingPlacer`]), Gavel's 360 s rounds with no costs
/// ([`SimConfig::default`]), seed 0, every job measured, rho measured, no progress reports.
pub struct SimulationBuilder<'a> {
    trace: Option<TraceInput>,
    cluster: Option<Cluster>,
    table: Option<ThroughputTable>,
    model: Option<Arc<dyn ThroughputModel>>,
    policies: Vec<String>,
    registry: Option<&'a Registry>,
    policy_config: PolicyConfig,
    placer: Option<PlacerFactory<'a>>,
    config: SimConfig,
    window: Window,
    fairness: bool,
    progress: Option<ProgressFactory<'a>>,
    stop: Option<Arc<AtomicBool>>,
}

impl Default for SimulationBuilder<'_> {
    fn default() -> Self {
        SimulationBuilder {
            trace: None,
            cluster: None,
            table: None,
            model: None,
            policies: Vec::new(),
            registry: None,
            policy_config: PolicyConfig::default(),
            placer: None,
            config: SimConfig::default(),
            window: Window::default(),
            fairness: true,
            progress: None,
            stop: None,
        }
    }
}

impl Simulation<'_> {
    /// Starts configuring simulations: see [`SimulationBuilder`].
    pub fn builder<'b>() -> SimulationBuilder<'b> {
        SimulationBuilder::default()
    }
}

impl<'a> SimulationBuilder<'a> {
    /// The same as [`Simulation::builder`].
    pub fn new() -> Self {
        SimulationBuilder::default()
    }

    /// The jobs to replay: read from a file, or made in code ([`Trace::builder`]).
    pub fn trace(mut self, trace: Trace) -> Self {
        self.trace = Some(TraceInput::Given(trace));
        self
    }

    /// The jobs to replay, read from `path` when the simulation runs (its format detected unless
    /// `options` names it).
    pub fn trace_file(mut self, path: impl Into<PathBuf>, options: TraceOptions) -> Self {
        self.trace = Some(TraceInput::File(path.into(), options));
        self
    }

    /// The cluster to run on.
    pub fn cluster(mut self, cluster: Cluster) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// The throughput table that says how fast a trace counted in steps runs (Gavel's).
    pub fn table(mut self, table: ThroughputTable) -> Self {
        self.table = Some(table);
        self
    }

    /// The throughput model to run with, instead of the one the trace calls for ([`model_for`]).
    pub fn model(mut self, model: Arc<dyn ThroughputModel>) -> Self {
        self.model = Some(model);
        self
    }

    /// The registry the policies are found in (default: the built-in policies'): a user's own, with
    /// their policies entered beside the built-ins, to compare them side by side.
    pub fn registry(mut self, registry: &'a Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// Adds a policy to run, by spec: a name or alias, with knobs (`themis:f=0.5`) and optionally a
    /// `+MECHANISM` (see [`Registry::resolve`]).
    pub fn policy(mut self, spec: impl Into<String>) -> Self {
        self.policies.push(spec.into());
        self
    }

    /// Adds each of `specs` ([`SimulationBuilder::policy`]).
    pub fn policies<S: Into<String>>(self, specs: impl IntoIterator<Item = S>) -> Self {
        specs.into_iter().fold(self, |b, spec| b.policy(spec))
    }

    /// What policies are built with (a service distribution, GPU prices); its seed is replaced by the
    /// simulation's ([`SimulationBuilder::seed`]).
    pub fn policy_config(mut self, config: PolicyConfig) -> Self {
        self.policy_config = config;
        self
    }

    /// Makes each run's placer (default: best-fit packing with no topology).
    pub fn placer(mut self, factory: impl Fn() -> Box<dyn Placer> + Send + Sync + 'a) -> Self {
        self.placer = Some(Box::new(factory));
        self
    }

    /// Every setting of the runs at once: the engine's, the seed, whether changes are logged.
    pub fn config(mut self, config: SimConfig) -> Self {
        self.config = config;
        self
    }

    /// The engine's settings: round length, costs, when to schedule between rounds.
    pub fn engine(mut self, engine: EngineConfig) -> Self {
        self.config.engine = engine;
        self
    }

    /// Seconds per scheduling round.
    pub fn round(mut self, seconds: f64) -> Self {
        self.config.engine.round_length = seconds;
        self
    }

    /// Seconds to checkpoint a preempted job, to restore it, and lost when a job moves.
    pub fn costs(mut self, preempt: f64, restore: f64, migrate: f64) -> Self {
        let engine = &mut self.config.engine;
        (
            engine.preempt_cost,
            engine.restore_cost,
            engine.migrate_cost,
        ) = (preempt, restore, migrate);
        self
    }

    /// Seeds every random choice of the policies.
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = seed;
        self
    }

    /// Keep every start and stop in [`SimResult::changes`].
    pub fn log_changes(mut self, on: bool) -> Self {
        self.config.log_changes = on;
        self
    }

    /// The jobs the summaries measure, by id (default: all).
    pub fn window(mut self, window: Window) -> Self {
        self.window = window;
        self
    }

    /// Whether to measure finish-time fairness (default: on). It costs a run of
    /// [`REFERENCE_POLICY`] unless one is named, or, on goodput workloads, each job's runs alone.
    pub fn fairness(mut self, on: bool) -> Self {
        self.fairness = on;
        self
    }

    /// Reports each run's progress: called with (policy spec, jobs finished, jobs in the trace), from
    /// the run's thread.
    pub fn progress(self, report: impl Fn(&str, usize, usize) + Send + Sync + 'a) -> Self {
        let report = Arc::new(report);
        self.progress_per_run(move |spec| {
            let (report, spec) = (Arc::clone(&report), spec.to_owned());
            Box::new(move |done, total| report(&spec, done, total))
        })
    }

    /// Reports each run's progress through a callback of its own, made from the run's policy spec
    /// before the run starts (a progress bar per run).
    pub fn progress_per_run(
        mut self,
        factory: impl Fn(&str) -> RunProgress<'a> + Send + Sync + 'a,
    ) -> Self {
        self.progress = Some(Box::new(factory));
        self
    }

    /// Stops every run at its next event once `flag` is set (by another thread: a front end's
    /// Ctrl-C); [`SimulationBuilder::run`] then answers [`SimulationError::Stopped`].
    pub fn stop_when(mut self, flag: Arc<AtomicBool>) -> Self {
        self.stop = Some(flag);
        self
    }

    /// Checks everything, then runs every policy to the end of the trace (in parallel) and
    /// summarizes each run, in the order the policies were named.
    pub fn run(self) -> Result<Report, SimulationError> {
        if self.policies.is_empty() {
            return Err(SimulationError::Missing("policy"));
        }
        let trace = match self.trace {
            Some(TraceInput::Given(trace)) => trace,
            Some(TraceInput::File(path, options)) => crate::trace::load(&path, &options)?,
            None => return Err(SimulationError::Missing("trace")),
        };
        let cluster = Arc::new(self.cluster.ok_or(SimulationError::Missing("cluster"))?);
        check_engine(&self.config.engine)?;
        let model: Arc<dyn ThroughputModel> = match self.model {
            Some(model) => model,
            None => Arc::from(model_for(&trace, &cluster, self.table.as_ref())?),
        };
        // A job that could never run here would wait for ever: the trace's error, at its line.
        crate::trace::check_runnable(&trace, &cluster, model.as_ref())?;
        let mut simulation = Simulation::new(&trace, &cluster, model.as_ref());
        simulation.config = self.config;
        simulation.window = self.window;
        simulation.stop = self.stop.clone();
        let policy_config = PolicyConfig {
            seed: simulation.config.seed,
            ..self.policy_config
        };
        let placer = self
            .placer
            .unwrap_or_else(|| Box::new(|| Box::new(PackingPlacer)));
        let progress = self
            .progress
            .unwrap_or_else(|| Box::new(|_| Box::new(|_, _| {})));
        let runs = run_policies(
            &simulation,
            self.registry.unwrap_or_else(|| policy::builtin()),
            &policy_config,
            &self.policies,
            self.fairness,
            placer.as_ref(),
            progress.as_ref(),
        )?;
        if (self.stop.as_ref()).is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Err(SimulationError::Stopped);
        }
        Ok(Report { runs })
    }
}

/// What a slot holds, taken out: each run's policy and progress are taken once, by its thread.
fn taken<T>(slot: &Mutex<Option<T>>) -> T {
    slot.lock()
        .expect("not poisoned")
        .take()
        .expect("each run taken once")
}

/// Checks the round and the costs against their ranges.
fn check_engine(engine: &EngineConfig) -> Result<(), SimError> {
    for (name, value, range) in [
        ("round length", engine.round_length, limits::ROUND_SECONDS),
        ("preemption cost", engine.preempt_cost, limits::COST_SECONDS),
        ("restore cost", engine.restore_cost, limits::COST_SECONDS),
        ("migration cost", engine.migrate_cost, limits::COST_SECONDS),
    ] {
        range.check_option(name, value).map_err(SimError::Config)?;
    }
    Ok(())
}

/// The throughput model a trace calls for on `cluster`: `table` for a trace counted in steps
/// (Gavel's), the applications' goodput profiles for one counted in progress (Pollux's and Sia's),
/// and durations for one counted in seconds, scaled by the CPUs and memory a run gets when the trace
/// comes with Synergy's profiles.
pub fn model_for(
    trace: &Trace,
    cluster: &Cluster,
    table: Option<&ThroughputTable>,
) -> Result<Box<dyn ThroughputModel>, SimulationError> {
    Ok(match (trace.work_unit(), table) {
        (WorkUnit::Steps, Some(table)) => Box::new(TableModel::new(table, trace, cluster)?),
        (WorkUnit::Steps, None) => {
            return Err(SimulationError::NoTable {
                trace: trace.source.clone(),
            });
        }
        (WorkUnit::Progress, _) => Box::new(ProfiledWorkload::for_trace(trace, cluster)?),
        (WorkUnit::Seconds, _) => {
            let durations = DurationModel::uniform(cluster.num_gpu_types());
            match &trace.profiles {
                Some(path) => Box::new(ResourceModel::new(
                    durations,
                    Arc::new(ResourceProfiles::load(path, "models")?),
                    &trace.names,
                    cluster,
                )),
                None => Box::new(durations),
            }
        }
    })
}

/// The policy a spec names in `registry`, built with `config` for a run with `model`. Every policy a
/// simulation runs is built here.
fn build_policy(
    registry: &Registry,
    spec: &str,
    config: &PolicyConfig,
    model: &dyn ThroughputModel,
) -> Result<Box<dyn Policy>, SimError> {
    Ok(registry.build(spec, config, &Capabilities::of(model))?)
}

/// Whether `spec` names the [`REFERENCE_POLICY`] (by name or alias, with any knobs).
fn is_reference(registry: &Registry, spec: &str) -> Result<bool, SimError> {
    Ok(registry.resolve(spec)?.entry.name() == REFERENCE_POLICY)
}

/// Runs each of `specs` (and the reference, when rho needs it) with placers from `placer`: their
/// results and summaries in the order of `specs`.
fn run_policies<'p>(
    simulation: &Simulation<'_>,
    registry: &Registry,
    config: &PolicyConfig,
    specs: &[String],
    fairness: bool,
    placer: &(dyn Fn() -> Box<dyn Placer> + Send + Sync),
    progress: &(dyn Fn(&str) -> RunProgress<'p> + Send + Sync + 'p),
) -> Result<Vec<PolicyRun>, SimError> {
    // Goodput workloads measure rho as Sia does, each job alone on its share, not by a reference.
    let by_share = fairness && simulation.trace.work_unit() == WorkUnit::Progress;
    let mut to_run: Vec<&str> = specs.iter().map(String::as_str).collect();
    let mut reference_at = None;
    for (k, spec) in specs.iter().enumerate() {
        if is_reference(registry, spec)? {
            reference_at = Some(k);
        }
    }
    if fairness && !by_share && reference_at.is_none() {
        reference_at = Some(to_run.len());
        to_run.push(REFERENCE_POLICY);
    }
    // Every policy built before any run, so that a bad spec fails before time is spent.
    let policies: Vec<Mutex<Option<Box<dyn Policy>>>> = to_run
        .iter()
        .map(|spec| {
            let policy = build_policy(registry, spec, config, simulation.model)?;
            Ok(Mutex::new(Some(policy)))
        })
        .collect::<Result<_, SimError>>()?;
    let reports: Vec<Mutex<Option<RunProgress<'p>>>> = to_run
        .iter()
        .map(|spec| Mutex::new(Some(progress(spec))))
        .collect();
    let slots: Vec<Mutex<Option<SimResult>>> = to_run.iter().map(|_| Mutex::new(None)).collect();
    // Every run at once (within runs_at_once): the operating system shares the cores, so the whole
    // comparison takes about as long as its longest run or its total work over the cores, whichever is
    // more, whatever order the runs are named in. (Runs in fixed batches of one per core waited for
    // each batch's slowest, and an LP policy named late ran alone at the end.)
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..runs_at_once(to_run.len(), simulation.trace.jobs.len()))
            .map(|_| {
                scope.spawn(|| {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= to_run.len() {
                            return;
                        }
                        let mut policy = taken(&policies[k]);
                        let mut report = taken(&reports[k]);
                        let result = simulation.run(
                            policy.as_mut(),
                            placer().as_mut(),
                            &mut |done, total| report(done, total),
                        );
                        *slots[k].lock().expect("not poisoned") = Some(result);
                    }
                })
            })
            .collect();
        for worker in workers {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    let mut results: Vec<SimResult> = slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("not poisoned")
                .expect("every run finished")
        })
        .collect();
    // The reference run was added for rho only (the last): it is not reported, so it is moved out
    // rather than copied.
    let reference = reference_at.filter(|_| fairness && !by_share).map(|k| {
        if k == specs.len() {
            results.pop().expect("the reference ran")
        } else {
            results[k].clone()
        }
    });
    results.truncate(specs.len());
    specs
        .iter()
        .zip(results)
        .map(|(spec, result)| {
            let summary = if by_share {
                let alone = jcts_alone(
                    &result,
                    simulation.trace,
                    simulation.cluster,
                    &simulation.config,
                    &|| build_policy(registry, spec, config, simulation.model),
                )?;
                result.summary_against(spec, Some(&alone))
            } else {
                result.summary(spec, reference.as_ref())
            };
            Ok(PolicyRun {
                spec: spec.clone(),
                summary,
                result,
            })
        })
        .collect()
}

/// What a simulation produced: one run per policy, in the order they were named.
#[derive(Clone, Debug)]
pub struct Report {
    /// Each policy's run.
    pub runs: Vec<PolicyRun>,
}

impl Report {
    /// The run of the policy named by `spec`, as it was given.
    pub fn get(&self, spec: &str) -> Option<&PolicyRun> {
        self.runs.iter().find(|r| r.spec == spec)
    }

    /// Every run's summary, in order.
    pub fn summaries(&self) -> Vec<Summary> {
        self.runs.iter().map(|r| r.summary.clone()).collect()
    }
}

/// One policy's run.
#[derive(Clone, Debug)]
pub struct PolicyRun {
    /// The policy's spec, as it was given.
    pub spec: String,
    /// Its figures over the window (named by its spec).
    pub summary: Summary,
    /// Everything the run produced.
    pub result: SimResult,
}

impl PolicyRun {
    /// Each job's record: arrival, first start, finish, GPU-seconds by type, preemptions.
    pub fn jobs(&self) -> &[JobRecord] {
        &self.result.records
    }

    /// The jobs that never finished (the policy stalled), leaving out those too large for the
    /// cluster.
    pub fn unfinished(&self) -> Vec<JobId> {
        self.result.unfinished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        let mut trace = Trace::builder(WorkUnit::Seconds);
        for k in 0..20u32 {
            trace = trace.job("toy", f64::from(k) * 300.0, 1 + k % 3, 1800.0);
        }
        trace.build().unwrap()
    }

    fn cluster() -> Cluster {
        Cluster::parse_spec("v100=1x4", 4).unwrap()
    }

    #[test]
    fn runs_take_turns_only_when_their_jobs_would_not_fit_in_memory_together() {
        assert_eq!(runs_at_once(2, 1_000), 2, "small traces run at once");
        assert_eq!(runs_at_once(20, 1_000), MAX_RUNS_AT_ONCE);
        assert_eq!(
            runs_at_once(2, 1_000_000),
            1,
            "a million jobs: one run at a time"
        );
        assert_eq!(runs_at_once(4, 200_000), 3);
        assert_eq!(runs_at_once(3, 0), 3, "an empty trace holds nothing");
    }

    #[test]
    fn the_builder_runs_what_the_low_level_simulation_runs_job_for_job() {
        let report = Simulation::builder()
            .trace(trace())
            .cluster(cluster())
            .policies(["fifo", "las"])
            .round(60.0)
            .fairness(false)
            .run()
            .unwrap();
        assert_eq!(
            report.runs.iter().map(|r| &r.spec[..]).collect::<Vec<_>>(),
            ["fifo", "las"],
            "in order"
        );
        let (trace, cluster) = (trace(), cluster());
        let model = DurationModel::uniform(1);
        let mut simulation = Simulation::new(&trace, &cluster, &model);
        simulation.config.engine.round_length = 60.0;
        for spec in ["fifo", "las"] {
            let mut policy = policy::build(spec, &PolicyConfig::default(), &model).unwrap();
            let alone = simulation.run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {});
            let run = report.get(spec).unwrap();
            assert_eq!(run.jobs(), &alone.records[..], "{spec}");
            // Every figure but the wall time the run took.
            let wall = |mut s: Summary| {
                s.wall_s = 0.0;
                s
            };
            assert_eq!(
                wall(run.summary.clone()),
                wall(alone.summary(spec, None)),
                "{spec}"
            );
            assert!(run.unfinished().is_empty());
        }
    }

    #[test]
    fn rho_is_measured_against_the_reference_which_is_not_reported() {
        let seen = Mutex::new(Vec::new());
        let report = Simulation::builder()
            .trace(trace())
            .cluster(cluster())
            .policy("fifo")
            .round(60.0)
            .progress(|spec, done, total| seen.lock().unwrap().push((spec.to_owned(), done, total)))
            .run()
            .unwrap();
        assert_eq!(report.runs.len(), 1);
        let fifo = &report.runs[0];
        assert!(fifo.summary.avg_ftf.is_some(), "{:?}", fifo.summary);
        let seen = seen.into_inner().unwrap();
        for spec in ["fifo", REFERENCE_POLICY] {
            assert!(
                seen.contains(&(spec.to_owned(), 20, 20)),
                "{spec} reported its end: {seen:?}"
            );
        }
    }

    #[test]
    fn what_is_wrong_is_said_before_anything_runs() {
        let err = |b: SimulationBuilder<'_>| b.run().unwrap_err().to_string();
        let given = || {
            Simulation::builder()
                .trace(trace())
                .cluster(cluster())
                .policy("fifo")
        };
        assert_eq!(
            err(Simulation::builder().trace(trace()).cluster(cluster())),
            "the simulation has no policy: give one with SimulationBuilder::policy"
        );
        assert_eq!(
            err(Simulation::builder().cluster(cluster()).policy("fifo")),
            "the simulation has no trace: give one with SimulationBuilder::trace"
        );
        let unknown = err(given().policy("fifoo"));
        assert!(unknown.starts_with("unknown policy `fifoo`"), "{unknown}");
        let round = err(given().round(0.0));
        assert!(
            round.starts_with("invalid configuration: round length must be at least 1 second"),
            "{round}"
        );
        let cost = err(given().costs(f64::NAN, 0.0, 0.0));
        assert!(cost.contains("preemption cost"), "{cost}");
        // A gang larger than the cluster: named at its place in the trace made in code.
        let big = Trace::builder(WorkUnit::Seconds)
            .job("toy", 0.0, 1, 60.0)
            .job("toy", 0.0, 8, 60.0)
            .build()
            .unwrap();
        let too_big = err(given().trace(big));
        assert!(
            too_big.starts_with("code:2: field `gpus`: job 1 can never run"),
            "{too_big}"
        );
        let steps = Trace::builder(WorkUnit::Steps)
            .source("mine")
            .job("toy", 0.0, 1, 60.0)
            .build()
            .unwrap();
        assert_eq!(
            err(given().trace(steps)),
            "mine counts work in steps: give a throughput table of steps per second (SimulationBuilder::table) or a model"
        );
    }
}
