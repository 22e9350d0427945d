//! What `gangway simulate` assembles before it runs, as a library call: a typed
//! [`SimulateRequest`] (the command line's options) is checked and assembled by
//! [`SimulateRequest::prepare`] into a [`Prepared`] run (the trace, the scenario, the throughput
//! model, the window), and [`Prepared::builder`] hands it to the simulator's builder exactly as the
//! command does. The command line and the Python package both go through here, so that the same
//! input gives the same numbers whichever way it came in.
//!
//! ```
//! use gangway::core::policy::Registry;
//! use gangway::simulate::{SimulateRequest, TraceInput};
//!
//! let registry = Registry::with_builtins();
//! let request = SimulateRequest {
//!     trace: TraceInput::Spec("synthetic:jobs=20,seed=1,rate=4".into()),
//!     cluster: Some("v100=4,k80=4".into()),
//!     policies: vec!["fifo".into(), "las".into()],
//!     ..SimulateRequest::default()
//! };
//! let mut notes = Vec::new();
//! let prepared = request.prepare(&registry, &mut |note| notes.push(note))?;
//! assert_eq!(prepared.trace.jobs.len(), 20);
//! let report = prepared.builder(&registry).run()?;
//! assert_eq!(report.runs.len(), 2);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};

use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::error::Source;
use gangway_core::job::{MAX_ARRIVAL_SECONDS, Trace};
use gangway_core::limits;
use gangway_core::metrics::Window;
use gangway_core::policy::Registry;
use gangway_core::sim::builder::SimulationBuilder;
use gangway_core::sim::{SimConfig, Simulation};
use gangway_core::throughput::ThroughputModel;
use gangway_core::trace::{self, TraceFormat, TraceOptions};

use crate::scenario::{self, Scenario, ScenarioArgs};

/// Gavel's simulated cluster, the default when neither the request nor the workload names one.
pub const GAVEL_CLUSTER: &str = "v100=36,p100=36,k80=36";
/// Gavel's round length in seconds, the default when neither the request nor the workload names one.
pub const GAVEL_ROUND_SECONDS: f64 = 360.0;
/// The job rate (jobs/hour) the bundled trace is replayed at unless the request names one.
pub const BUNDLED_RATE: f64 = 2.0;
/// The job ids measured on the bundled trace unless the request names a window.
pub const BUNDLED_WINDOW: std::ops::Range<u32> = 4000..5000;

/// Where a simulation's jobs come from.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum TraceInput {
    /// The bundled Gavel trace (continuous-single, seed 0, 6,000 jobs): replayed at
    /// [`BUNDLED_RATE`] jobs/hour and measured over [`BUNDLED_WINDOW`] unless told otherwise.
    #[default]
    Bundled,
    /// A trace file's path, or `synthetic:jobs=N,seed=S[,rate=R][,multi=true]` (`--trace`).
    Spec(String),
    /// A trace's text in one of the formats gangway reads (header line first), named `source` in
    /// error messages, which count its lines from 1 as a file's.
    Text {
        /// What messages call it, in place of a file's path.
        source: String,
        /// The trace itself.
        text: String,
    },
}

/// What `gangway simulate` is asked: its options, typed. [`SimulateRequest::default`] is the
/// command with no option given (the bundled trace on Gavel's cluster under the default policies).
#[derive(Clone, Debug)]
pub struct SimulateRequest {
    /// The jobs (`--trace`).
    pub trace: TraceInput,
    /// The trace's format, when it cannot be told from the first line (`--trace-format`).
    pub trace_format: Option<TraceFormat>,
    /// Jobs per hour for Gavel's continuous traces and synthetic ones (`--rate`).
    pub rate: Option<f64>,
    /// The cluster as `TYPE=N` or `TYPE=NxG` items (`--cluster`); default: the workload's own, or
    /// [`GAVEL_CLUSTER`].
    pub cluster: Option<String>,
    /// A TOML file of `[[nodes]]` groups (`--cluster-file`); overrides `cluster`.
    pub cluster_file: Option<PathBuf>,
    /// A topology file (`--topology`); overrides `cluster` and `cluster_file`.
    pub topology: Option<PathBuf>,
    /// Arrivals made this many times denser (`--load-factor`).
    pub load_factor: f64,
    /// GPUs per node for `TYPE=N` items (`--gpus-per-node`).
    pub gpus_per_node: u32,
    /// Policy specs to compare (`--policy`).
    pub policies: Vec<String>,
    /// Round length in seconds (`--round`); default: the workload's own, or
    /// [`GAVEL_ROUND_SECONDS`].
    pub round: Option<f64>,
    /// The job ids to measure (`--window`); default: all, or [`BUNDLED_WINDOW`] on the bundled
    /// trace.
    pub window: Option<Window>,
    /// Also schedule when a job arrives (`--schedule-on-arrival`).
    pub schedule_on_arrival: bool,
    /// Also schedule when a job finishes (`--schedule-on-completion`).
    pub schedule_on_completion: bool,
    /// Measure finish-time fairness (rho); `--no-ftf` turns it off.
    pub fairness: bool,
    /// Keep every job's allocations over time (what `--out` writes as `allocations_POLICY.csv`).
    pub log_changes: bool,
    /// Pollux's, Sia's or Synergy's application profiles (`--profiles`).
    pub profiles: Option<PathBuf>,
    /// What `simulate` and `serve` share: throughputs, placement, costs, seed, Gittins.
    pub scenario: ScenarioArgs,
}

impl Default for SimulateRequest {
    fn default() -> Self {
        SimulateRequest {
            trace: TraceInput::Bundled,
            trace_format: None,
            rate: None,
            cluster: None,
            cluster_file: None,
            topology: None,
            load_factor: 1.0,
            gpus_per_node: 1,
            policies: scenario::DEFAULT_POLICIES
                .split(',')
                .map(str::to_owned)
                .collect(),
            round: None,
            window: None,
            schedule_on_arrival: false,
            schedule_on_completion: false,
            fairness: true,
            log_changes: false,
            profiles: None,
            scenario: ScenarioArgs::default(),
        }
    }
}

/// A request checked and assembled, ready to run: see [`Prepared::builder`].
pub struct Prepared {
    /// The jobs, their arrivals scaled by the load factor.
    pub trace: Trace,
    /// How the trace was read (its rate and profiles, defaults included).
    pub options: TraceOptions,
    /// The cluster, table, placer, costs and policy configuration.
    pub scenario: Scenario,
    /// The throughput model the trace calls for on the cluster.
    pub model: Box<dyn ThroughputModel>,
    /// The cluster spec in effect when the cluster came from one (the request's, the workload's own,
    /// or Gavel's).
    pub cluster_spec: String,
    /// The job ids measured.
    pub window: Window,
    /// The runs' settings: the engine's, the seed, whether changes are logged.
    pub config: SimConfig,
    /// The policy specs, checked against the registry.
    pub policies: Vec<String>,
    /// Whether finish-time fairness is measured.
    pub fairness: bool,
}

impl SimulateRequest {
    /// Checks the request against `registry` and assembles it as `gangway simulate` does: policy
    /// names first, then every number against its range, then the cluster (the workload's own for
    /// Pollux's and Sia's workloads unless one is named), the scenario, the trace and its model, and
    /// that every job can run on the cluster. What the command says on stderr along the way (the
    /// setup a workload was made for, the trace it replays) goes to `note`.
    pub fn prepare(&self, registry: &Registry, note: &mut dyn FnMut(String)) -> Result<Prepared> {
        // Check policy names before loading anything, so that a typo fails fast.
        for name in &self.policies {
            registry.resolve(name)?;
        }
        if self.policies.is_empty() {
            bail!("no policy given");
        }
        // Numbers first, each against its range, before any input is read.
        if let Some(rate) = self.rate {
            limits::RATE
                .check_option("--rate", rate)
                .map_err(anyhow::Error::msg)?;
        }
        limits::LOAD_FACTOR
            .check_option("--load-factor", self.load_factor)
            .map_err(anyhow::Error::msg)?;
        let bundled = self.trace == TraceInput::Bundled;
        let options = TraceOptions {
            format: self.trace_format,
            rate: self.rate.or(bundled.then_some(BUNDLED_RATE)),
            profiles: self.profiles.clone(),
        };
        let topology_spec = match &self.topology {
            Some(path) => Some(scenario::topology_file(path)?),
            None => None,
        };
        // A Pollux or Sia workload runs, unless told otherwise, in the setup it was made for.
        let native = match &self.trace {
            TraceInput::Spec(path) => trace::native_setup(Path::new(path), &options),
            _ => None,
        };
        let own_cluster =
            self.cluster.is_some() || self.cluster_file.is_some() || topology_spec.is_some();
        if let Some(setup) = native {
            match (own_cluster, self.round.is_some()) {
                (false, false) => note(format!(
                    "on {} ({}) with {} s rounds, as the workload was made for (--cluster and --round choose others)",
                    setup.origin, setup.cluster, setup.round_seconds
                )),
                (false, true) => note(format!(
                    "on {} ({}), as the workload was made for (--cluster chooses another)",
                    setup.origin, setup.cluster
                )),
                (true, false) => note(format!(
                    "with {} s rounds, as the workload was made for (--round chooses another)",
                    setup.round_seconds
                )),
                (true, true) => {}
            }
        }
        let cluster_spec = match (&self.cluster, native) {
            (Some(spec), _) => spec.clone(),
            (None, Some(setup)) if !own_cluster => setup.cluster.to_owned(),
            (None, _) => GAVEL_CLUSTER.to_owned(),
        };
        let cluster = match &topology_spec {
            Some(spec) => Cluster::from_topology(&spec.build())?,
            None => scenario::load_cluster(
                &cluster_spec,
                self.cluster_file.as_deref(),
                self.gpus_per_node,
            )?,
        };
        let round = self
            .round
            .unwrap_or_else(|| native.map_or(GAVEL_ROUND_SECONDS, |setup| setup.round_seconds));
        let engine = EngineConfig {
            round_length: round,
            schedule_on_arrival: self.schedule_on_arrival,
            schedule_on_completion: self.schedule_on_completion,
            ..EngineConfig::default()
        };
        let scenario = Scenario::assemble(&self.scenario, cluster, topology_spec, engine, true)?;
        let table = scenario
            .table
            .as_ref()
            .expect("simulate always has a table");
        let mut trace = match &self.trace {
            TraceInput::Bundled => scenario::load_trace(None, &options, table)?,
            TraceInput::Spec(spec) => scenario::load_trace(Some(spec), &options, table)?,
            TraceInput::Text { source, text } => {
                trace::parse(&Source(source.clone()), text, &options)?
            }
        };
        trace.scale_load(self.load_factor);
        if let Some(last) = trace.jobs.iter().map(|j| j.arrival).reduce(f64::max)
            && last > MAX_ARRIVAL_SECONDS
        {
            bail!(
                "--load-factor {}: the last job would arrive at {last:e} s, after the latest gangway simulates ({MAX_ARRIVAL_SECONDS:e} s)",
                self.load_factor,
            );
        }
        let model = scenario.model_for(&trace)?;
        // A job that could never run here is the trace's error, at its line: a run would leave it
        // waiting for ever.
        trace::check_runnable(&trace, &scenario.cluster, model.as_ref())?;
        let window = self.window.clone().unwrap_or_else(|| {
            if bundled {
                Window(Some(BUNDLED_WINDOW))
            } else {
                Window::default()
            }
        });
        if bundled {
            note(format!(
                "no --trace given: replaying the bundled Gavel trace (continuous-single, seed 0, {} jobs) at {} jobs/hour, measuring jobs {window}",
                trace.jobs.len(),
                options.rate.unwrap_or_default()
            ));
        }
        note(format!(
            "{} jobs from {} on {} GPUs: {}",
            trace.jobs.len(),
            trace.source,
            scenario.cluster.num_gpus(),
            scenario.cluster.describe()
        ));
        let config = SimConfig {
            engine: scenario.engine.clone(),
            seed: scenario.seed,
            log_changes: self.log_changes,
        };
        Ok(Prepared {
            trace,
            options,
            scenario,
            model,
            cluster_spec,
            window,
            config,
            policies: self.policies.clone(),
            fairness: self.fairness,
        })
    }
}

impl Prepared {
    /// The simulator's builder for this run, with `registry`'s policies: the trace, cluster, model,
    /// policies, their configuration, the placer, the engine's settings, the window and fairness,
    /// as `gangway simulate` runs them. Add progress reports, then [`SimulationBuilder::run`].
    pub fn builder(self, registry: &Registry) -> SimulationBuilder<'_> {
        let Prepared {
            trace,
            scenario,
            model,
            window,
            config,
            policies,
            fairness,
            ..
        } = self;
        Simulation::builder()
            .registry(registry)
            .trace(trace)
            .cluster((*scenario.cluster).clone())
            .model(Arc::from(model))
            .policies(policies)
            .policy_config(scenario.policy_config.clone())
            .config(config)
            .window(window)
            .fairness(fairness)
            .placer(move || scenario.placer())
    }
}
