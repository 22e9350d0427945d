//! The live control plane, assembled: [`ControlPlaneBuilder`] turns a cluster (given, a preset, a
//! topology, this machine's GPUs, fake or found by NVML, or a Slurm partition's), a policy spec, an
//! executor (simulated workers, process workers through `elastic-run`, Slurm, or one of the user's
//! own) and optionally a journal directory and an HTTP listener into a running
//! [`ControlPlane`]. `gangway serve` is a thin command line over it.
//!
//! ```
//! use gangway::ControlPlaneBuilder;
//! use gangway::actors::cluster::JobRequest;
//! use gangway::core::cluster::Cluster;
//!
//! // Simulated workers on 8 GPUs, an hour of work a wall second, in memory (no journal).
//! let plane = ControlPlaneBuilder::new()
//!     .cluster(Cluster::parse_spec("v100=2x4", 4)?)
//!     .policy("tiresias")
//!     .simulated_workers()
//!     .time_scale(3600.0)
//!     .start()?;
//! let id = plane.submit(JobRequest::new("toy", 4, 1800.0))?;
//! let done = plane.wait(&[id])?;
//! assert!(done[0].finished.is_some());
//! plane.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Errors name each setting by the `gangway serve` option that sets it, as the command line says
//! them.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gangway_actors::api::{ApiConfig, Listen};
use gangway_actors::auth::{Token, TokenError};
use gangway_actors::cluster::{Parts, Settings, StartError, TimeSource};
use gangway_actors::executor::{Executor, SimExecutor};
use gangway_actors::health::{HealthProbe, NvmlProbe};
use gangway_actors::listener::Limits;
use gangway_actors::plane::{Api, ControlError, ControlPlane};
use gangway_actors::request::{RunPolicy, Submitter, check_name, escape, startup_variable};
use gangway_actors::tenants::Tenants;
use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::error::{InputError, SimError, Source, read_text};
use gangway_core::job::Names;
use gangway_core::placement::Placer;
use gangway_core::policy::{self, BuildError, Registry};
use gangway_core::throughput::ThroughputModel;
use gangway_core::throughput::goodput::Reports;
use gangway_launcher::confine::{Cgroups, CorePool};
use gangway_launcher::executor::{
    DEFAULT_MAX_GRACE, DEFAULT_STOP_PATIENCE, Hosts, ProcessExecutor, check_command,
};
use gangway_protocol::command::{LIBRARY_PATH_VAR, account_uid, can_take_rights, env_allowed_by};
use gangway_topology::topology::ClusterSpec;

use crate::scenario::{self, Scenario, ScenarioArgs};

/// Why a control plane could not start. Nothing runs when one is returned.
#[derive(Debug, thiserror::Error)]
pub enum PlaneError {
    /// A setting is wrong, or settings contradict each other (said as `gangway serve`'s options).
    #[error("{0}")]
    Setting(String),
    /// The cluster, topology, profiles or tables could not be read or assembled (the whole chain
    /// of causes, each said once).
    #[error("{0}")]
    Scenario(String),
    /// A file or cluster read as input is wrong.
    #[error(transparent)]
    Input(#[from] InputError),
    /// The policy spec is wrong, names no registered policy, or needs what this control plane lacks.
    #[error(transparent)]
    Policy(#[from] BuildError),
    /// The simulation's configuration is wrong.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A file or directory the control plane keeps could not be made or written.
    #[error("{what}: {error}")]
    Io {
        /// What was being done, and where.
        what: String,
        /// Why it failed.
        error: std::io::Error,
    },
    /// The API token could not be made or written.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// The actors could not start (the journal, the listener).
    #[error(transparent)]
    Control(#[from] ControlError),
}

impl PlaneError {
    /// An error of the facade's scenario assembly, said whole.
    fn scenario(error: anyhow::Error) -> PlaneError {
        PlaneError::Scenario(crate::cli::error_report(&error))
    }
}

/// A setting's error, said as `gangway serve` says it.
fn setting(message: impl Into<String>) -> PlaneError {
    PlaneError::Setting(message.into())
}

/// Where this machine's GPUs come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Gpus {
    /// `count` GPUs that do not exist, of type `gpu_type` (as the models name types).
    Fake {
        /// How many.
        count: u32,
        /// Their type's name.
        gpu_type: String,
    },
    /// The GPUs NVML finds.
    Nvml,
}

/// Where the cluster comes from.
enum ClusterSource {
    Given(Cluster),
    Spec(String),
    Topology(ClusterSpec),
    TopologyFile(PathBuf),
    Preset {
        name: String,
        servers: usize,
    },
    ThisMachine(Gpus),
    Slurm {
        partition: Option<String>,
        topology: Option<PathBuf>,
    },
}

/// Who runs the jobs.
enum WorkerChoice {
    Simulated,
    Processes,
    Own(Box<dyn Executor>),
}

/// The most unfinished jobs a user other than the daemon's may have, unless the operator says
/// otherwise ([`ApiOptions::max_jobs_per_user`]): the daemon keeps about 7 KiB for each.
pub const DEFAULT_MAX_JOBS_PER_USER: u32 = 10_000;
/// The largest [`ApiOptions::max_jobs_per_user`] accepted.
const MAX_JOBS_PER_USER: u32 = 10_000_000;
/// The most MiB the commands of a user's unfinished jobs may hold, unless the operator says
/// otherwise ([`ApiOptions::max_command_mib_per_user`]): a command may hold up to 256 KiB, and a
/// typical one (a training environment's variables) 4 to 50 KiB (an HPC site's modules): 5,000
/// unfinished jobs of 50 KiB each.
pub const DEFAULT_MAX_COMMAND_MIB_PER_USER: u64 = 256;
/// The largest [`ApiOptions::max_command_mib_per_user`] accepted (1 TiB).
const MAX_COMMAND_MIB_PER_USER: u64 = 1 << 20;
/// The fewest tasks `--max-tasks-per-job` may allow: elastic-run, torchrun and one worker with the
/// threads a Python interpreter with torch starts.
const MIN_TASKS_PER_JOB: u64 = 64;

/// What the HTTP API serves and whom it lets in: see [`ControlPlaneBuilder::listen`].
#[derive(Clone, Debug)]
pub struct ApiOptions {
    /// `HOST:PORT` (a loopback address unless `allow_remote`) or `unix:PATH`.
    pub listen: Listen,
    /// Allow a TCP address that is not loopback.
    pub allow_remote: bool,
    /// Names the `Host` header may give besides the loopback ones (`*`: any).
    pub allow_hosts: Vec<String>,
    /// Where the API token is written on TCP (default: the journal's `api-token`).
    pub token_file: Option<PathBuf>,
    /// The permissions of a Unix socket, in octal digits' value (0o600: this user only).
    pub socket_mode: u32,
    /// Start-up variables (LD_*, BASH_ENV, ...) submitted jobs may set, unchecked; a trailing `*`
    /// allows a prefix. Without it, `LD_LIBRARY_PATH` is let through where its directories pass
    /// [`gangway_protocol::command::check_library_path`].
    pub allow_env: Vec<String>,
    /// The longest `--grace`, in seconds, a submitted command may give its workers to checkpoint
    /// when stopped, and the most of it a stop waits for before killing them (rounds wait for
    /// stops only up to the builder's stop patience).
    pub max_grace: f64,
    /// The most unfinished jobs a user other than the daemon's may have (jobs that run as them, on a
    /// root daemon): a bound on what one local user can make the daemon keep.
    pub max_jobs_per_user: u32,
    /// The most MiB the commands of those jobs may hold in all (their arguments, environments and
    /// paths, which the daemon keeps in memory and in its journal while each job lives).
    pub max_command_mib_per_user: u64,
    /// A CSV file of `user,tenant` rows: the tenants each user other than the operator may submit
    /// under (a user may have several rows). A user it does not name, or every user without one,
    /// submits under their account's name.
    pub tenants: Option<PathBuf>,
    /// Connections open at once (default: from the open-files limit, at most 1024).
    pub max_connections: Option<usize>,
    /// Connections one peer may hold (default: half of `max_connections`).
    pub max_connections_per_peer: Option<usize>,
    /// Seconds a client has to send a request's headers.
    pub header_timeout: f64,
    /// Seconds a client has to send a request's body.
    pub body_timeout: f64,
}

impl ApiOptions {
    /// Listening on `listen`, with `gangway serve`'s defaults for the rest.
    pub fn new(listen: Listen) -> Self {
        ApiOptions {
            listen,
            allow_remote: false,
            allow_hosts: Vec::new(),
            token_file: None,
            socket_mode: 0o600,
            allow_env: Vec::new(),
            max_grace: DEFAULT_MAX_GRACE.as_secs_f64(),
            max_jobs_per_user: DEFAULT_MAX_JOBS_PER_USER,
            max_command_mib_per_user: DEFAULT_MAX_COMMAND_MIB_PER_USER,
            tenants: None,
            max_connections: None,
            max_connections_per_peer: None,
            header_timeout: 10.0,
            body_timeout: 30.0,
        }
    }

    /// Refuses what would expose the daemon or could not hold: bad timeouts and limits, variable
    /// names that are not names, a non-loopback address without `allow_remote`.
    fn check(&self, note: &mut dyn FnMut(&str)) -> Result<(), PlaneError> {
        for (flag, seconds) in [
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
        ] {
            if !(seconds.is_finite() && (0.1..=3600.0).contains(&seconds)) {
                return Err(setting(format!("{flag} must be from 0.1 to 3600 seconds")));
            }
        }
        if !(self.max_grace.is_finite() && (1.0..=604_800.0).contains(&self.max_grace)) {
            return Err(setting("--max-grace must be from 1 to 604800 seconds"));
        }
        if !(1..=MAX_JOBS_PER_USER).contains(&self.max_jobs_per_user) {
            return Err(setting(format!(
                "--max-jobs-per-user must be from 1 to {MAX_JOBS_PER_USER}"
            )));
        }
        if !(1..=MAX_COMMAND_MIB_PER_USER).contains(&self.max_command_mib_per_user) {
            return Err(setting(format!(
                "--max-command-mib-per-user must be from 1 to {MAX_COMMAND_MIB_PER_USER}"
            )));
        }
        if self.max_connections == Some(0) || self.max_connections_per_peer == Some(0) {
            return Err(setting(
                "--max-connections and --max-connections-per-peer must be at least 1",
            ));
        }
        if let Some(name) = self.allow_env.iter().find(|n| {
            let n = n.strip_suffix('*').unwrap_or(n);
            n.is_empty() || n.contains(['=', '\0'])
        }) {
            return Err(setting(format!(
                "--allow-env `{}` is not a variable name",
                escape(name)
            )));
        }
        for name in self
            .allow_env
            .iter()
            .filter(|n| !n.ends_with('*') && !startup_variable(n))
        {
            note(&format!(
                "note: --allow-env {name} changes nothing: jobs may set it anyway"
            ));
        }
        match &self.listen {
            Listen::Tcp(addr) if !addr.ip().is_loopback() && !self.allow_remote => {
                Err(setting(format!(
                    "--listen {addr} is not a loopback address: anyone who can reach it could use the API \
                     (with process workers, run commands). Pass --allow-remote to serve other machines \
                     (they need the token, and --allow-host for the names they use), or listen on \
                     127.0.0.1 or unix:PATH"
                )))
            }
            Listen::Unix(_) if self.allow_remote || !self.allow_hosts.is_empty() => Err(setting(
                "--allow-remote and --allow-host are for TCP; a Unix socket is local",
            )),
            _ => Ok(()),
        }
    }
}

/// Assembles and starts a control plane: see the [module docs](self).
///
/// Defaults: policy `tiresias`, `gangway serve`'s scenario (best-fit packing, no costs, seed 0),
/// 60 s rounds, no journal (nothing survives the process), real time, no HTTP API, simulated workers
/// unless the GPUs are real (NVML's or Slurm's), and this machine's NVML GPUs when no cluster is
/// given.
pub struct ControlPlaneBuilder {
    cluster: ClusterSource,
    cpus: Option<u32>,
    memory_gb: Option<f64>,
    policy: String,
    registry: Option<Registry>,
    placer: Option<Box<dyn Placer>>,
    model: Option<(Arc<dyn ThroughputModel>, Names)>,
    scenario: ScenarioArgs,
    round: f64,
    profiles: Option<PathBuf>,
    goodput_profiles: Option<PathBuf>,
    workers: Option<WorkerChoice>,
    elastic_run: Option<PathBuf>,
    journal: Option<PathBuf>,
    snapshot_every: u64,
    max_restarts: u32,
    stop_patience: f64,
    max_tasks_per_job: Option<u64>,
    time_scale: f64,
    api: Option<ApiOptions>,
    notes: Box<dyn FnMut(&str) + Send>,
}

impl Default for ControlPlaneBuilder {
    fn default() -> Self {
        ControlPlaneBuilder {
            cluster: ClusterSource::ThisMachine(Gpus::Nvml),
            cpus: None,
            memory_gb: None,
            policy: "tiresias".into(),
            registry: None,
            placer: None,
            model: None,
            scenario: ScenarioArgs::default(),
            round: 60.0,
            profiles: None,
            goodput_profiles: None,
            workers: None,
            elastic_run: None,
            journal: None,
            snapshot_every: 100_000,
            max_restarts: 3,
            stop_patience: DEFAULT_STOP_PATIENCE.as_secs_f64(),
            max_tasks_per_job: None,
            time_scale: 1.0,
            api: None,
            notes: Box::new(|note| tracing::info!("{note}")),
        }
    }
}

impl ControlPlaneBuilder {
    /// A builder with the defaults.
    pub fn new() -> Self {
        ControlPlaneBuilder::default()
    }

    /// Runs on `cluster`'s servers, with simulated workers.
    pub fn cluster(mut self, cluster: Cluster) -> Self {
        self.cluster = ClusterSource::Given(cluster);
        self
    }

    /// Runs on a cluster given as `TYPE=NxG,...` (read when it starts), with simulated workers.
    pub fn cluster_spec(mut self, spec: impl Into<String>) -> Self {
        self.cluster = ClusterSource::Spec(spec.into());
        self
    }

    /// Runs on a topology's servers (scored on its hardware graph), with simulated workers.
    pub fn topology(mut self, spec: ClusterSpec) -> Self {
        self.cluster = ClusterSource::Topology(spec);
        self
    }

    /// Runs on the servers of a topology file (TOML or JSON, read when it starts).
    pub fn topology_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.cluster = ClusterSource::TopologyFile(path.into());
        self
    }

    /// Runs on `servers` servers of a preset design (`gangway topology --list`), simulated workers.
    pub fn preset(mut self, name: impl Into<String>, servers: usize) -> Self {
        self.cluster = ClusterSource::Preset {
            name: name.into(),
            servers,
        };
        self
    }

    /// Runs on this machine's GPUs: fake ones, or those NVML finds.
    pub fn this_machine(mut self, gpus: Gpus) -> Self {
        self.cluster = ClusterSource::ThisMachine(gpus);
        self
    }

    /// On this machine: the CPUs jobs may be allotted (the first `cpus` cores this process may use;
    /// default all) and the GB of memory (default the machine's).
    pub fn machine_resources(mut self, cpus: Option<u32>, memory_gb: Option<f64>) -> Self {
        (self.cpus, self.memory_gb) = (cpus, memory_gb);
        self
    }

    /// Runs on a Slurm cluster's nodes (of `partition`, or all), every start through Slurm; with
    /// `topology`, the links inside and between its nodes.
    pub fn slurm(mut self, partition: Option<String>, topology: Option<PathBuf>) -> Self {
        self.cluster = ClusterSource::Slurm {
            partition,
            topology,
        };
        self
    }

    /// The policy, by spec (`themis:f=0.5`, `srtf+tune`).
    pub fn policy(mut self, spec: impl Into<String>) -> Self {
        self.policy = spec.into();
        self
    }

    /// The registry the policy is found in (default: the built-in policies'): a user's own, with
    /// their policies entered beside the built-ins (`Registry::with_builtins`, then
    /// `Registry::register`).
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// A placer of the caller's own, instead of the one `scenario`'s placement names: the same
    /// [`Placer`] the simulator's builder takes. On Slurm it is made even, as the control plane's own
    /// is (`gangway_core::placement::even::Even`).
    pub fn placer(mut self, placer: impl Placer + 'static) -> Self {
        self.placer = Some(Box::new(placer));
        self
    }

    /// A throughput model of the caller's own, with the job types and tenants its ids name (a
    /// request's job type not among them is entered as a new one), instead of the one the scenario
    /// and profiles make: the same [`ThroughputModel`] the simulator's builder takes.
    pub fn model(mut self, model: Arc<dyn ThroughputModel>, names: Names) -> Self {
        self.model = Some((model, names));
        self
    }

    /// What `gangway simulate` would run with: placement, costs, even gangs, seed, a throughput
    /// table, Gittins' service distribution.
    pub fn scenario(mut self, scenario: ScenarioArgs) -> Self {
        self.scenario = scenario;
        self
    }

    /// Seconds per scheduling round (control-plane time).
    pub fn round(mut self, seconds: f64) -> Self {
        self.round = seconds;
        self
    }

    /// Synergy's profiles: jobs of a profiled type are given the CPUs and memory a `+tune` or `+opt`
    /// mechanism sizes.
    pub fn resource_profiles(mut self, path: impl Into<PathBuf>) -> Self {
        self.profiles = Some(path.into());
        self
    }

    /// Pollux's or Sia's application profiles: jobs of a profiled type have goodput.
    pub fn goodput_profiles(mut self, dir: impl Into<PathBuf>) -> Self {
        self.goodput_profiles = Some(dir.into());
        self
    }

    /// Simulated workers: jobs progress in control-plane time, nothing runs.
    pub fn simulated_workers(mut self) -> Self {
        self.workers = Some(WorkerChoice::Simulated);
        self
    }

    /// Real workers through `elastic-run`, on this machine's GPUs or Slurm's nodes (the default
    /// there).
    pub fn process_workers(mut self) -> Self {
        self.workers = Some(WorkerChoice::Processes);
        self
    }

    /// The `elastic-run` process workers run (default: the one beside this executable). `start`
    /// refuses one that anyone but root and this process's user could change, or that speaks
    /// another hand-over ([`gangway_launcher::inherit::check_elastic_run`]).
    pub fn elastic_run(mut self, path: impl Into<PathBuf>) -> Self {
        self.elastic_run = Some(path.into());
        self
    }

    /// Workers of the caller's own: see [`Executor`].
    pub fn executor(mut self, executor: impl Executor + 'static) -> Self {
        self.workers = Some(WorkerChoice::Own(Box::new(executor)));
        self
    }

    /// Journals every decision in `dir` first; a control plane started on it again recovers.
    pub fn journal(mut self, dir: impl Into<PathBuf>) -> Self {
        self.journal = Some(dir.into());
        self
    }

    /// Journal records between snapshots.
    pub fn snapshot_every(mut self, records: u64) -> Self {
        self.snapshot_every = records;
        self
    }

    /// Worker crashes retried per job before it fails.
    pub fn max_restarts(mut self, restarts: u32) -> Self {
        self.max_restarts = restarts;
        self
    }

    /// Seconds a batch of stops waits for process workers to checkpoint and exit before those still
    /// at it go on in the background, their GPUs out of service and their jobs waiting until they
    /// have (default 10): a job that takes its whole grace, or ignores the stop, holds no other
    /// job's start.
    pub fn stop_patience(mut self, seconds: f64) -> Self {
        self.stop_patience = seconds;
        self
    }

    /// The most tasks (processes and threads) one attempt of a job may have, where cgroups bound
    /// them (process workers on this machine; `None`: a quarter of what the daemon's cgroup may
    /// hold, see [`gangway_launcher::confine::Cgroups::default_max_tasks`]). All attempts together
    /// have at most half, and no attempt more than that.
    pub fn max_tasks_per_job(mut self, tasks: Option<u64>) -> Self {
        self.max_tasks_per_job = tasks;
        self
    }

    /// Control-plane time runs this many times faster than the wall clock (simulated workers).
    pub fn time_scale(mut self, factor: f64) -> Self {
        self.time_scale = factor;
        self
    }

    /// Serves the HTTP API too.
    pub fn listen(mut self, options: ApiOptions) -> Self {
        self.api = Some(options);
        self
    }

    /// Where what the operator should know goes (the workers, the cores jobs are pinned to, where the
    /// token is): default `tracing` at info level.
    pub fn notes(mut self, notes: impl FnMut(&str) + Send + 'static) -> Self {
        self.notes = Box::new(notes);
        self
    }

    /// Checks every setting, assembles the scenario, the executor and the model, and starts the
    /// actors (binding the API's address first).
    pub fn start(mut self) -> Result<ControlPlane, PlaneError> {
        let note = &mut *self.notes;
        if let Some(api) = &self.api {
            api.check(note)?;
        }
        gangway_core::limits::TIME_SCALE
            .check_option("--time-scale", self.time_scale)
            .map_err(setting)?;
        if !(self.stop_patience.is_finite() && (0.0..=3600.0).contains(&self.stop_patience)) {
            return Err(setting("--stop-patience must be from 0 to 3600 seconds"));
        }
        let all_tasks = gangway_launcher::confine::machine_tasks() / 2;
        if let Some(tasks) = self.max_tasks_per_job
            && !(MIN_TASKS_PER_JOB..=all_tasks).contains(&tasks)
        {
            return Err(setting(format!(
                "--max-tasks-per-job must be from {MIN_TASKS_PER_JOB} to {all_tasks} (half the \
                 machine's pids, what all jobs together may have)"
            )));
        }
        // The journal's directory before anything is put there (the workers' runs, the API's
        // token): made private, or refused if another user could change it.
        if let Some(journal) = &self.journal {
            gangway_journal::prepare_dir(journal)
                .map_err(|e| ControlError::Start(StartError::Journal(e)))?;
        }
        let Served {
            cluster,
            topology,
            hosts,
            cores,
            real: real_gpus,
            slurm,
        } = served(self.cluster, self.cpus, self.memory_gb)?;
        let node_names: Vec<String> = match (&slurm, &hosts) {
            (Some((nodes, _)), _) => nodes.iter().map(|n| n.name.clone()).collect(),
            (None, Some(Hosts::Local(_))) => {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                vec![host.trim().to_owned()]
            }
            _ => Vec::new(),
        };
        // What runs live is what `gangway simulate` runs: the same model, placer, knobs and costs;
        // live, arrivals and completions also trigger a round.
        let engine = EngineConfig {
            round_length: self.round,
            schedule_on_arrival: true,
            schedule_on_completion: true,
            ..EngineConfig::default()
        };
        // One torchrun agent per Slurm node starts as many workers on each.
        let mut scenario_args = self.scenario;
        scenario_args.even_gangs |= slurm.is_some();
        let scenario = Scenario::assemble(&scenario_args, cluster, topology, engine, false)
            .map_err(PlaneError::scenario)?;
        let node_of = match &hosts {
            Some(Hosts::Slurm(node_of)) => Some(node_of.clone()),
            _ => None,
        };
        let workers = self.workers.unwrap_or(if real_gpus {
            WorkerChoice::Processes
        } else {
            WorkerChoice::Simulated
        });
        // Workers that run something report what they measure, which goodput models learn from.
        let simulated = matches!(workers, WorkerChoice::Simulated);
        let processes = matches!(workers, WorkerChoice::Processes);
        // The model and the policy before anything is made: a policy that needs what the model lacks
        // is refused first.
        let reports = Reports::default();
        let (model, names) = match (self.model, &self.goodput_profiles) {
            (Some(own), _) => own,
            (None, Some(dir)) => {
                let real = (!simulated).then(|| reports.clone());
                scenario::live_goodput(dir, &scenario.cluster, real)
                    .map_err(PlaneError::scenario)?
            }
            (None, None) => scenario
                .live_model(self.profiles.as_deref())
                .map_err(PlaneError::scenario)?,
        };
        let registry = self.registry.as_ref().unwrap_or_else(|| policy::builtin());
        let policy = scenario.policy(registry, &self.policy, model.as_ref())?;
        let (executor, described): (Box<dyn Executor>, &str) = match (workers, hosts) {
            (WorkerChoice::Simulated, _) => (Box::new(SimExecutor::default()), "simulated"),
            (WorkerChoice::Own(executor), _) => (executor, "the caller's own"),
            (WorkerChoice::Processes, None) => {
                return Err(setting(
                    "process workers run on this machine's GPUs (NVML discovery or --fake-gpus N) or, \
                     through Slurm, on its nodes' (--slurm); these GPUs are on servers no process can reach",
                ));
            }
            (WorkerChoice::Processes, Some(hosts)) => {
                let mut executor = process_executor(
                    hosts,
                    cores,
                    self.time_scale,
                    self.elastic_run,
                    self.journal.as_deref(),
                    note,
                )?;
                if let Some(api) = &self.api {
                    executor.max_grace = Duration::from_secs_f64(api.max_grace);
                    executor.library_path_checked =
                        !env_allowed_by(&api.allow_env, LIBRARY_PATH_VAR);
                }
                executor.stop_patience = Duration::from_secs_f64(self.stop_patience);
                if let Some(tasks) = self.max_tasks_per_job {
                    executor.max_tasks = tasks;
                }
                (Box::new(executor), "process")
            }
        };
        if let Some(journal) = &self.journal {
            std::fs::create_dir_all(journal).map_err(|error| PlaneError::Io {
                what: format!("creating {}", journal.display()),
                error,
            })?;
        }
        let probes: Vec<Box<dyn HealthProbe>> = match (slurm, &node_of) {
            (Some((nodes, partition)), Some(node_of)) => {
                let states = crate::slurm_nodes::watch(&nodes, partition, Duration::from_secs(2));
                crate::slurm_nodes::SlurmProbe::for_all_gpus(&states, node_of)
                    .into_iter()
                    .map(|p| Box::new(p) as _)
                    .collect()
            }
            _ => match NvmlProbe::for_all_gpus() {
                Some(probes) if real_gpus => probes.into_iter().map(|p| Box::new(p) as _).collect(),
                _ => Vec::new(),
            },
        };
        let cluster = &scenario.cluster;
        note(&format!(
            "{} GPUs ({}), {described} workers, policy {}, journal {}, listening on {}",
            cluster.num_gpus(),
            cluster.describe(),
            self.policy,
            self.journal
                .as_ref()
                .map_or("none".into(), |j| j.display().to_string()),
            self.api
                .as_ref()
                .map_or("nothing".into(), |a| a.listen.to_string()),
        ));
        let parts = Parts {
            cluster: Arc::clone(&scenario.cluster),
            model,
            names,
            policy,
            placer: scenario.placer_around(self.placer),
            executor,
            probes,
            health_every: Duration::from_secs(5),
        };
        let mut settings = Settings::new(
            scenario.engine.clone(),
            TimeSource::Wall {
                time_scale: self.time_scale,
            },
        );
        settings.journal = self.journal.clone();
        settings.snapshot_every = self.snapshot_every;
        settings.max_restarts = self.max_restarts;
        settings.node_names = node_names;
        settings.reports = reports;
        let api = match self.api {
            Some(options) => {
                settings.max_jobs_per_user = options.max_jobs_per_user;
                settings.max_command_bytes_per_user = options.max_command_mib_per_user << 20;
                let mut api = api(options, self.journal.as_deref(), processes, note)?;
                api.config.policy = Some(self.policy.clone());
                Some(api)
            }
            None => None,
        };
        Ok(ControlPlane::spawn(parts, settings, api)?)
    }
}

/// The cluster to serve, with its hardware graph when it came from one, where its GPUs are when
/// processes can run on them (this machine's devices, or Slurm's nodes), the cores jobs may be pinned
/// to on this machine, and whether the GPUs are real (NVML or Slurm) ones.
struct Served {
    cluster: Cluster,
    topology: Option<ClusterSpec>,
    hosts: Option<Hosts>,
    cores: Vec<usize>,
    real: bool,
    /// With Slurm: its nodes and the partition they are of, for their watcher.
    slurm: Option<(Vec<gangway_launcher::slurm::SlurmNode>, Option<String>)>,
}

/// This machine as one server of `gpus` GPUs of `model`: with the cores and memory jobs may be
/// allotted (`cpus`, `memory_gb`, or what this process may use).
fn this_machine(
    model: &str,
    gpus: u32,
    cpus: Option<u32>,
    memory_gb: Option<f64>,
) -> Result<(Cluster, Vec<usize>), PlaneError> {
    use gangway_launcher::confine::{machine_memory_gb, usable_cores};
    let mut cores = usable_cores();
    if let Some(n) = cpus {
        if n == 0 || n as usize > cores.len() {
            return Err(setting(format!(
                "--cpus {n}: this process may use {} cores ({})",
                cores.len(),
                gangway_launcher::confine::core_list(&cores)
            )));
        }
        cores.truncate(n as usize);
    }
    let memory_gb = match memory_gb {
        Some(gb) if gb.is_finite() && gb > 0.0 => gb,
        Some(gb) => {
            return Err(setting(format!(
                "--memory-gb {gb}: must be a positive number of GB"
            )));
        }
        None => machine_memory_gb()
            .ok_or_else(|| setting("reading this machine's memory from /proc/meminfo"))?,
    };
    let cluster = Cluster::try_from_nodes([(model, gpus, cores.len() as u32, memory_gb)])?;
    Ok((cluster, cores))
}

/// The cluster a source names.
fn served(
    source: ClusterSource,
    cpus: Option<u32>,
    memory_gb: Option<f64>,
) -> Result<Served, PlaneError> {
    let elsewhere = |spec: ClusterSpec| -> Result<Served, PlaneError> {
        Ok(Served {
            cluster: Cluster::from_topology(&spec.build())?,
            topology: Some(spec),
            hosts: None,
            cores: Vec::new(),
            real: false,
            slurm: None,
        })
    };
    match source {
        ClusterSource::Slurm {
            partition,
            topology,
        } => {
            let (cluster, nodes, node_of) =
                crate::slurm_nodes::cluster(partition.as_deref()).map_err(PlaneError::scenario)?;
            let topology = match &topology {
                Some(path) => Some(
                    crate::slurm_nodes::matching_topology(path, &nodes)
                        .map_err(PlaneError::scenario)?,
                ),
                None => None,
            };
            Ok(Served {
                cluster,
                topology,
                hosts: Some(Hosts::Slurm(node_of)),
                cores: Vec::new(),
                real: true,
                slurm: Some((nodes, partition)),
            })
        }
        ClusterSource::ThisMachine(Gpus::Fake { count, gpu_type }) => {
            if count == 0 {
                return Err(setting("--fake-gpus must be at least 1"));
            }
            // The cluster first: it refuses a count beyond its limit before any per-GPU list is made.
            let (cluster, cores) = this_machine(&gpu_type, count, cpus, memory_gb)?;
            Ok(Served {
                cluster,
                topology: None,
                hosts: Some(Hosts::Local((0..count).collect())),
                cores,
                real: false,
                slurm: None,
            })
        }
        ClusterSource::Preset { name, servers } => {
            elsewhere(scenario::preset_cluster(&name, servers, 16).map_err(PlaneError::scenario)?)
        }
        ClusterSource::Topology(spec) => elsewhere(spec),
        ClusterSource::TopologyFile(path) => {
            elsewhere(scenario::topology_file(&path).map_err(PlaneError::scenario)?)
        }
        ClusterSource::Spec(spec) => Ok(Served {
            cluster: scenario::load_cluster(&spec, None, 1).map_err(PlaneError::scenario)?,
            topology: None,
            hosts: None,
            cores: Vec::new(),
            real: false,
            slurm: None,
        }),
        ClusterSource::Given(cluster) => Ok(Served {
            cluster,
            topology: None,
            hosts: None,
            cores: Vec::new(),
            real: false,
            slurm: None,
        }),
        ClusterSource::ThisMachine(Gpus::Nvml) => match gangway_topology::discover::discover() {
            Ok(found) => {
                let count = found.gpus.len() as u32;
                if count == 0 {
                    return Err(setting(
                        "NVML found no GPUs here; pass --fake-gpus N, --preset NAME or --topology FILE",
                    ));
                }
                let model = found.gpus[0].name.to_ascii_lowercase().replace(' ', "-");
                let (cluster, cores) = this_machine(&model, count, cpus, memory_gb)?;
                Ok(Served {
                    cluster,
                    topology: None,
                    hosts: Some(Hosts::Local(found.gpus.iter().map(|g| g.index).collect())),
                    cores,
                    real: true,
                    slurm: None,
                })
            }
            Err(e) => Err(setting(format!(
                "no GPUs discovered ({e}); pass --fake-gpus N, --preset NAME, --topology FILE or --cluster SPEC"
            ))),
        },
    }
}

/// Process workers through `elastic-run` on `hosts`, their runs kept under the journal.
fn process_executor(
    hosts: Hosts,
    cores: Vec<usize>,
    time_scale: f64,
    elastic_run: Option<PathBuf>,
    journal: Option<&std::path::Path>,
    note: &mut dyn FnMut(&str),
) -> Result<ProcessExecutor, PlaneError> {
    if time_scale != 1.0 {
        return Err(setting(
            "--time-scale must be 1 with process workers: real jobs run in real time",
        ));
    }
    let elastic_run = match elastic_run {
        // Where the operator meant it, from here: the checks and the launches read it from `/`.
        Some(path) => std::path::absolute(&path).unwrap_or(path),
        None => std::env::current_exe()
            .map_err(|error| PlaneError::Io {
                what: "locating gangway".into(),
                error,
            })?
            .with_file_name("elastic-run"),
    };
    if !elastic_run.is_file() {
        return Err(setting(format!(
            "{} not found: build it (cargo build --bin elastic-run) or pass --elastic-run PATH",
            elastic_run.display()
        )));
    }
    gangway_launcher::inherit::check_elastic_run(&elastic_run).map_err(setting)?;
    // Said once here rather than at each launch it puts off (jobs recovered from the journal too).
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } == 0
        && let Err(why) = can_take_rights()
    {
        tracing::warn!(
            %why,
            "running as root without the rights to check other users' paths: their submissions \
             are answered 503 and their launches put off until the daemon runs with CAP_SETUID \
             and CAP_SETGID"
        );
    }
    let journal = journal.ok_or_else(|| {
        setting("process workers keep their runs in the journal's directory: give one (--journal)")
    })?;
    let runs = journal.join("runs");
    let local = matches!(hosts, Hosts::Local(_));
    let executor = ProcessExecutor::on(elastic_run, hosts, runs.clone())
        .map_err(|error| PlaneError::Io {
            what: format!("creating {}", runs.display()),
            error,
        })?
        .with_cores(CorePool::new(cores.clone()));
    if local {
        note(&format!(
            "jobs pinned to their share of cores {}; {}",
            gangway_launcher::confine::core_list(&cores),
            executor.cgroups().describe()
        ));
        if let Cgroups::Unavailable(why) = executor.cgroups() {
            tracing::warn!(
                %why,
                "no cgroup can be made for jobs: a process of a job that clears its \
                 environment can outlive the job; run the daemon as root or in a delegated \
                 cgroup"
            );
        }
    }
    Ok(executor)
}

/// The API to serve: who may use it and what jobs may run; on TCP a new token, written where clients
/// find it.
fn api(
    options: ApiOptions,
    journal: Option<&std::path::Path>,
    processes: bool,
    note: &mut dyn FnMut(&str),
) -> Result<Api, PlaneError> {
    let token = match &options.listen {
        Listen::Tcp(_) => {
            let file = match (&options.token_file, journal) {
                (Some(file), _) => file.clone(),
                (None, Some(journal)) => journal.join("api-token"),
                (None, None) => {
                    return Err(setting(
                        "an API on TCP needs a token file (--token-file) or a journal to keep it in",
                    ));
                }
            };
            let token = Token::generate()?;
            token.write(&file)?;
            note(&format!(
                "API token in {} (readable by this user only; gangway's clients read it \
                 from there or from $GANGWAY_TOKEN_FILE; curl -H \"Authorization: Bearer $(cat FILE)\")",
                file.display()
            ));
            Some((token, file))
        }
        Listen::Unix(_) => None,
    };
    let tenants = match &options.tenants {
        Some(path) => read_tenants(path)?,
        None => Tenants::own_names(),
    };
    let mut run_policy = RunPolicy::new(Submitter::this_process());
    run_policy.allowed_env = options.allow_env.clone();
    if processes {
        run_policy.command_required = true;
        let max_grace = Duration::from_secs_f64(options.max_grace);
        run_policy.args = Some(Arc::new(move |run, runs_as| {
            check_command(run, runs_as, max_grace)
        }));
    }
    let open_files = gangway_actors::listener::raise_open_files_limit();
    let limits = Limits {
        // Room for the journal, the workers' logs and NVML beside the connections.
        max_connections: options.max_connections.unwrap_or_else(|| {
            usize::try_from(open_files.saturating_sub(128).clamp(16, 1024)).unwrap_or(1024)
        }),
        max_per_peer: options.max_connections_per_peer,
        header_timeout: Duration::from_secs_f64(options.header_timeout),
        body_timeout: Duration::from_secs_f64(options.body_timeout),
    };
    Ok(Api {
        listen: options.listen,
        socket_mode: options.socket_mode,
        config: ApiConfig {
            token_file: token.as_ref().map(|(_, file)| file.clone()),
            token: token.map(|(token, _)| token),
            hosts: None,
            run_policy,
            tenants,
            limits,
            policy: None,
        },
        allowed_hosts: options.allow_hosts,
    })
}

/// The tenants the operator gives users ([`ApiOptions::tenants`]): `user,tenant` rows under that
/// header, `user` an account's name or a user id. A bad row is refused naming the file, line and
/// field.
fn read_tenants(path: &std::path::Path) -> Result<Tenants, InputError> {
    let source = Source::path(path);
    let text = read_text(path)?;
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let header = reader
        .headers()
        .map_err(|e| InputError::row(&source, 1, e.to_string()))?
        .clone();
    let column = |name: &str| {
        (header.iter().position(|h| h.trim() == name)).ok_or_else(|| {
            InputError::whole(
                &source,
                format!("needs a `user,tenant` header (no `{name}` column)"),
            )
        })
    };
    let (user_at, tenant_at) = (column("user")?, column("tenant")?);
    let mut pairs = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line());
            InputError::row(&source, line, e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line());
        let field = |at: usize| record.get(at).map_or("", str::trim);
        let user = field(user_at);
        let bad_user = |problem: String| InputError::field(&source, line, "user", problem);
        let uid = match user.parse::<u32>() {
            Ok(uid) => uid,
            Err(_) => account_uid(user)
                .map_err(|e| bad_user(format!("looking up the account `{}`: {e}", escape(user))))?
                .ok_or_else(|| bad_user(format!("no account is named `{}`", escape(user))))?,
        };
        let tenant = field(tenant_at);
        check_name("tenant", tenant)
            .map_err(|e| InputError::field(&source, line, "tenant", e.problem))?;
        pairs.push((uid, tenant.to_owned()));
    }
    Ok(Tenants::given(pairs))
}
