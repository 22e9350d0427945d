//! `gangway serve` and its clients: `gangway submit`, `gangway jobs`, `gangway cancel`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use gangway_actors::api::Listen;
use gangway_actors::cluster::{JobInfo, JobRequest, NodeInfo};
use gangway_actors::request::escape;
use gangway_core::policy::Registry;
use gangway_launcher::client::{Client, new_idempotency_key};

use crate::plane::{ApiOptions, ControlPlaneBuilder, Gpus};
use crate::scenario;

/// Where clients find the daemon unless told.
pub const DEFAULT_DAEMON: &str = "127.0.0.1:7878";

/// `gangway serve`'s options: the cluster, the policy, the workers, the journal and the API.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("gpus").args(["fake_gpus", "preset", "topology", "cluster"])))]
pub struct ServeArgs {
    /// Listen on `HOST:PORT` (a loopback address unless --allow-remote) or `unix:PATH`.
    #[arg(long, default_value = DEFAULT_DAEMON, value_name = "ADDR")]
    pub listen: Listen,
    /// Allow a --listen address that is not loopback. Every TCP request but /healthz needs the
    /// token anyway; add the names clients use with --allow-host.
    #[arg(long)]
    pub allow_remote: bool,
    /// A name the `Host` header may give besides localhost, 127.0.0.1 and `[::1]` (repeatable; `*`
    /// allows any). The check keeps web pages out through DNS rebinding.
    #[arg(long, value_name = "NAME")]
    pub allow_host: Vec<String>,
    /// Where to write the API token, a new one at every start, readable by this user only
    /// (default: JOURNAL/api-token).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// The permissions of a --listen unix: socket, in octal (who may connect: 600 is this user
    /// only). Commands from another user run as that user when the daemon runs as root, and are
    /// refused otherwise.
    #[arg(long, default_value = "600", value_name = "MODE", value_parser = parse_mode)]
    pub socket_mode: u32,
    /// Let submitted jobs set this start-up variable (LD_*, BASH_ENV, ENV, ...: variables that
    /// change how a shell or the dynamic loader starts programs), refused otherwise
    /// (LD_LIBRARY_PATH is let through where nobody but root and the submitter can change its
    /// directories; named here, it is not checked). Repeatable; a trailing `*` allows a prefix.
    #[arg(long, value_name = "NAME")]
    pub allow_env: Vec<String>,
    /// The longest `--grace` a submitted command may give its workers to checkpoint when stopped,
    /// in seconds; a stop waits at most this (and a minute more) before killing them, its GPUs out
    /// of service meanwhile.
    #[arg(
        long,
        default_value_t = gangway_launcher::executor::DEFAULT_MAX_GRACE.as_secs_f64(),
        value_name = "SECONDS"
    )]
    pub max_grace: f64,
    /// The most unfinished jobs another user may have on a root daemon (jobs that run as them); more
    /// are refused with a 429 until some end. The daemon's user and root are not limited.
    #[arg(long, default_value_t = crate::plane::DEFAULT_MAX_JOBS_PER_USER, value_name = "N")]
    pub max_jobs_per_user: u32,
    /// The most MiB the commands of those jobs may hold in all (their arguments, environments and
    /// paths, which the daemon keeps while each job lives); more are refused with a 429.
    #[arg(
        long,
        default_value_t = crate::plane::DEFAULT_MAX_COMMAND_MIB_PER_USER,
        value_name = "MIB"
    )]
    pub max_command_mib_per_user: u64,
    /// A CSV file of `user,tenant` rows (`user` a user id, or an account's name; all digits is read
    /// as a user id): the tenants each user other than the daemon's and root may submit under, in
    /// place of their own name. Without it, or for a user it does not name, a user submits under
    /// their account's name only (a tenant is a share).
    #[arg(long, value_name = "FILE")]
    pub tenants: Option<PathBuf>,
    /// Connections open at once; beyond it, one of the peer holding the most is closed, idle or
    /// still sending its body (default: from the open-files limit, at most 1024).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Connections one peer (a socket's user, a TCP address) may hold; beyond it, its own
    /// connection waiting longest is closed (default: half of --max-connections).
    #[arg(long, value_name = "N")]
    pub max_connections_per_peer: Option<usize>,
    /// Seconds a client has to send a request's headers (after connecting, or between requests on
    /// a kept-alive connection).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub header_timeout: f64,
    /// Seconds a client has to send a request's whole body, from the end of its headers (408).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub body_timeout: f64,
    /// N fake GPUs on this machine (simulated workers, unless --workers processes). Without any of --fake-gpus, --preset,
    /// --topology and --cluster, the GPUs come from NVML discovery.
    #[arg(long, value_name = "N")]
    pub fake_gpus: Option<u32>,
    /// The GPU type the fake GPUs are, as the models name types (`rtx`, for Sia's profiles).
    #[arg(
        long,
        default_value = "fake",
        value_name = "NAME",
        requires = "fake_gpus"
    )]
    pub fake_gpu_type: String,
    /// Servers of a preset design (`gangway topology --list`), run by simulated workers.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Servers of the preset, with --preset.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub servers: usize,
    /// A topology file, run by simulated workers; with --slurm, the links inside and between its
    /// nodes (one server per node, in Slurm's order), for the placer.
    #[arg(long, value_name = "PATH")]
    pub topology: Option<PathBuf>,
    /// A cluster as `TYPE=NxG,...` (as for `simulate`), run by simulated workers.
    #[arg(long, value_name = "SPEC")]
    pub cluster: Option<String>,
    /// The GPUs of a Slurm cluster's nodes (their GRES; types from `gpu:TYPE:N`): every start runs
    /// through Slurm on the nodes gangway chose (`elastic-run --backend slurm`). gangway must own
    /// them: give it a partition of its own. Nodes down, drained or reserved are out of service.
    #[arg(long, conflicts_with_all = ["fake_gpus", "preset", "cluster"])]
    pub slurm: bool,
    /// With --slurm: only this partition's nodes.
    #[arg(long, value_name = "NAME", requires = "slurm")]
    pub partition: Option<String>,
    /// CPUs of this machine that jobs may be allotted (pinned to, with process workers): the first N
    /// cores this process may use (default: all of them). With --fake-gpus or NVML GPUs only.
    #[arg(long, value_name = "N")]
    pub cpus: Option<u32>,
    /// GB of this machine's memory that jobs may be allotted (a cgroup limit per job where the daemon
    /// may make cgroups; advice to the workers otherwise). Default: the machine's memory. With
    /// --fake-gpus or NVML GPUs only.
    #[arg(long, value_name = "GB", allow_negative_numbers = true)]
    pub memory_gb: Option<f64>,
    /// The policy, with knobs (`--policy help` with `simulate` lists them), and optionally a
    /// `+MECHANISM` sizing CPUs and memory (`srtf+tune`; needs --profiles).
    #[arg(long, default_value = "tiresias", value_name = "SPEC")]
    pub policy: String,
    /// Synergy's `synergy_model_profiles.json` (or a folder holding it): a job whose job type names one
    /// of its models (`--job-type resnet18`) is given the CPUs and memory a +tune or +opt mechanism
    /// sizes for it; others get their GPUs' proportional share.
    #[arg(long, value_name = "PATH")]
    pub profiles: Option<PathBuf>,
    /// Pollux's or Sia's application profiles (a folder of them, as their traces name): jobs whose
    /// job type names an application (`--job-type cifar10`) have goodput, and `--policy sia` or
    /// `pollux` resizes the elastic ones (`--gpus MIN:MAX`). Work is counted in progress (iterations
    /// at the application's initial batch). With real workers, what they measure is what the
    /// policies learn from.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["profiles", "throughputs"])]
    pub goodput_profiles: Option<PathBuf>,
    /// Journal directory: every decision is written here first, and a restart recovers from it.
    #[arg(long, default_value = ".gangway/journal", value_name = "DIR")]
    pub journal: PathBuf,
    /// Seconds per scheduling round (control-plane time).
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    pub round: f64,
    /// Run control-plane time this many times faster than the wall clock (simulated workers only).
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    pub time_scale: f64,
    /// Journal records between snapshots (each snapshot compacts the journal).
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub snapshot_every: u64,
    /// Worker crashes retried per job before it fails. (With process workers, `elastic-run` keeps
    /// each job's own budget; this one counts launches that died without reporting, e.g. killed.)
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub max_restarts: u32,
    /// Seconds a round waits for the workers it stops to checkpoint and exit; those still at it
    /// then go on in the background, their GPUs out of service and their jobs waiting until they
    /// have, so that a job that takes its whole grace (or ignores the stop) holds no other job's
    /// start.
    #[arg(
        long,
        default_value_t = gangway_launcher::executor::DEFAULT_STOP_PATIENCE.as_secs_f64(),
        value_name = "SECONDS"
    )]
    pub stop_patience: f64,
    /// The most processes and threads one job's attempt may have, where cgroups bound them
    /// (default: a quarter of what the daemon's cgroup may hold; all jobs together have at most
    /// half).
    #[arg(long, value_name = "N")]
    pub max_tasks_per_job: Option<u64>,
    /// Who runs the jobs: real `processes` (through `elastic-run`; the default on NVML GPUs), or
    /// `simulated` workers in virtual time (the default otherwise).
    #[arg(long, value_enum, value_name = "KIND")]
    pub workers: Option<Workers>,
    /// The `elastic-run` that process workers run (default: the one beside this `gangway`).
    #[arg(long, value_name = "PATH")]
    pub elastic_run: Option<PathBuf>,
    /// The policy, round and costs, as `gangway simulate` takes them.
    #[command(flatten)]
    pub scenario: scenario::ScenarioArgs,
}

/// An octal file mode, as `chmod` takes it.
fn parse_mode(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text, 8)
        .ok()
        .filter(|&m| m <= 0o777)
        .ok_or_else(|| format!("`{text}` is not a file mode in octal (600, 660, 666)"))
}

/// What runs a job's workers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workers {
    /// Real processes (`elastic-run` and the job's command), as the job's user.
    Processes,
    /// No processes: each job's work runs down at its model's rate, in scaled time.
    Simulated,
}

/// Runs the control plane until interrupted, with the policies of `registry`.
pub fn serve(args: ServeArgs, registry: Registry) -> Result<()> {
    let plane = builder(args)?.registry(registry).start()?;
    plane.serve_until(async {
        let _ = tokio::signal::ctrl_c().await;
        eprintln!("gangway serve: interrupted; the journal has everything");
    })?;
    Ok(())
}

/// The control plane `gangway serve`'s options describe.
fn builder(args: ServeArgs) -> Result<ControlPlaneBuilder> {
    if (args.cpus.is_some() || args.memory_gb.is_some())
        && (args.preset.is_some()
            || args.topology.is_some()
            || args.cluster.is_some()
            || args.slurm)
    {
        bail!(
            "--cpus and --memory-gb describe this machine (--fake-gpus or NVML GPUs); a --preset, \
             --topology, --cluster or --slurm gives its servers' own"
        );
    }
    let mut plane = ControlPlaneBuilder::new();
    plane = if args.slurm {
        plane.slurm(args.partition, args.topology)
    } else if let Some(count) = args.fake_gpus {
        plane.this_machine(Gpus::Fake {
            count,
            gpu_type: args.fake_gpu_type,
        })
    } else if let Some(name) = args.preset {
        plane.preset(name, args.servers)
    } else if let Some(path) = args.topology {
        plane.topology_file(path)
    } else if let Some(spec) = args.cluster {
        plane.cluster_spec(spec)
    } else {
        plane.this_machine(Gpus::Nvml)
    };
    plane = match args.workers {
        Some(Workers::Processes) => plane.process_workers(),
        Some(Workers::Simulated) => plane.simulated_workers(),
        None => plane,
    };
    if let Some(path) = args.elastic_run {
        plane = plane.elastic_run(path);
    }
    if let Some(path) = args.profiles {
        plane = plane.resource_profiles(path);
    }
    if let Some(dir) = args.goodput_profiles {
        plane = plane.goodput_profiles(dir);
    }
    let api = ApiOptions {
        listen: args.listen,
        allow_remote: args.allow_remote,
        allow_hosts: args.allow_host,
        token_file: args.token_file,
        socket_mode: args.socket_mode,
        allow_env: args.allow_env,
        max_grace: args.max_grace,
        max_jobs_per_user: args.max_jobs_per_user,
        max_command_mib_per_user: args.max_command_mib_per_user,
        tenants: args.tenants,
        max_connections: args.max_connections,
        max_connections_per_peer: args.max_connections_per_peer,
        header_timeout: args.header_timeout,
        body_timeout: args.body_timeout,
    };
    Ok(plane
        .machine_resources(args.cpus, args.memory_gb)
        .policy(args.policy)
        .scenario(args.scenario)
        .round(args.round)
        .journal(args.journal)
        .snapshot_every(args.snapshot_every)
        .max_restarts(args.max_restarts)
        .stop_patience(args.stop_patience)
        .max_tasks_per_job(args.max_tasks_per_job)
        .time_scale(args.time_scale)
        .listen(api)
        .notes(|note| eprintln!("gangway serve: {note}")))
}

/// Where a client finds the daemon and its token.
#[derive(clap::Args)]
pub struct DaemonArg {
    /// The daemon's `HOST:PORT` or `unix:PATH` (default: $GANGWAY_DAEMON, else 127.0.0.1:7878).
    #[arg(long, value_name = "ADDR")]
    pub daemon: Option<String>,
    /// The file that holds the daemon's API token (default: $GANGWAY_TOKEN_FILE, else
    /// .gangway/journal/api-token here or in the nearest parent directory that has one;
    /// $GANGWAY_TOKEN gives the token itself).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
}

impl DaemonArg {
    fn client(&self) -> Result<Client> {
        let addr = self
            .daemon
            .clone()
            .or_else(|| std::env::var("GANGWAY_DAEMON").ok())
            .unwrap_or_else(|| DEFAULT_DAEMON.to_owned());
        Client::new(&addr, self.token_file.clone()).map_err(anyhow::Error::msg)
    }
}

/// A number of seconds (or a weight): finite and positive. (NaN would travel as JSON null.)
fn positive(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("`{text}` is not a positive number")),
    }
}

/// `gangway submit`'s options: the job's shape, its work and the daemon.
#[derive(clap::Args)]
pub struct SubmitArgs {
    /// GPUs the job needs, all at once: `N`, or `MIN:MAX` for an elastic job, which policies that
    /// resize jobs (`sia`, `pollux`) run on any count in the range; others run it on MAX.
    #[arg(long, value_name = "N|MIN:MAX", value_parser = gangway_launcher::cli::parse_gpus)]
    pub gpus: (u32, u32),
    /// Tensor-parallel degree: the job runs only on multiples of tp x pp GPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub tp: u32,
    /// Pipeline-parallel degree.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub pp: u32,
    /// Pipeline stages on each GPU type where they differ from --pp (`rtx=8,a100=2`): there the job
    /// runs on multiples of tp x that many GPUs.
    #[arg(long, value_name = "TYPE=PP,...", value_parser = gangway_launcher::cli::parse_pp_by_type)]
    pub pp_by_type: Option<std::collections::BTreeMap<String, u32>>,
    /// The global batch the job is tuned for, which goodput policies (`sia`, `pollux`) price it at
    /// (default: its application's): `N`, or `MIN:MAX` for a job that adapts its batch, which they
    /// choose within.
    #[arg(long, value_name = "N|MIN:MAX", value_parser = gangway_launcher::cli::parse_batch)]
    pub batch: Option<(u32, u32)>,
    /// Work: seconds of running time at that many GPUs.
    #[arg(long, value_name = "SECONDS", value_parser = positive, allow_negative_numbers = true)]
    pub work: f64,
    /// The job's type (its application, for throughput and goodput profiles).
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub job_type: String,
    /// The team or user it counts against, for fairness (default: this user's account name, as
    /// `elastic-run --daemon` sends; a daemon lets another user than its own submit under their
    /// account's name, or the tenants its operator gave them).
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// Its priority weight: a fair share this many times a weight-1 job's.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "W",
        value_parser = positive,
        allow_negative_numbers = true
    )]
    pub weight: f64,
    /// The daemon to submit to.
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// `gangway jobs` and `gangway nodes`: how to print, and the daemon.
#[derive(clap::Args)]
pub struct JobsArgs {
    /// A table for people, or JSON for programs.
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::report::OutputFormat,
    /// The daemon to ask.
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// `gangway cancel`: the job and the daemon.
#[derive(clap::Args)]
pub struct CancelArgs {
    /// The job's id.
    pub id: u32,
    /// The daemon that runs it.
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// `gangway cordon` and `gangway uncordon`: the GPUs and the daemon.
#[derive(clap::Args)]
pub struct CordonArgs {
    /// GPU ids (as `gangway jobs` shows them).
    #[arg(required = true, value_name = "GPU")]
    pub gpus: Vec<u32>,
    /// The daemon they belong to.
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// `gangway submit`: submits a job and prints its id.
pub fn submit(args: SubmitArgs) -> Result<()> {
    let client = args.daemon.client()?;
    let tenant = gangway_protocol::command::tenant_to_submit(
        args.tenant,
        gangway_protocol::command::Submitter::this_process().uid,
    )
    .map_err(anyhow::Error::msg)?;
    let request = JobRequest {
        id: None,
        job_type: args.job_type,
        tenant,
        gpus: args.gpus.1,
        min_gpus: (args.gpus.0 < args.gpus.1).then_some(args.gpus.0),
        tp: args.tp,
        pp: args.pp,
        pp_by_type: args.pp_by_type.unwrap_or_default(),
        batch: args.batch.map(|(_, max)| max),
        min_batch: args.batch.and_then(|(min, max)| (min < max).then_some(min)),
        work: args.work,
        weight: args.weight,
        run: None,
    };
    let body = client
        .post("/jobs", &request, Some(&new_idempotency_key()))
        .map_err(anyhow::Error::msg)?;
    println!("{}", body["id"]);
    Ok(())
}

/// `gangway jobs`: prints the daemon's jobs.
pub fn jobs(args: JobsArgs) -> Result<()> {
    let body = args
        .daemon
        .client()?
        .get("/jobs")
        .map_err(anyhow::Error::msg)?;
    let jobs: Vec<JobInfo> = serde_json::from_value(body).context("reading the job list")?;
    match args.format {
        crate::report::OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&jobs)?)
        }
        crate::report::OutputFormat::Table => {
            println!(
                "{:>6}  {:<13} {:>9}  {:>8}  {:>5}  {:>8}  {:>6}  {:>7}  {:>6}  {:<12} {:<12} PLACEMENT (or why it waits)",
                "ID",
                "PHASE",
                "GPUS",
                "PROGRESS",
                "CPUS",
                "MEM_GB",
                "STEP_S",
                "B_NOISE",
                "BATCH",
                "TYPE",
                "TENANT"
            );
            for j in &jobs {
                // GPUs held, of those asked for: `2/1-8` for an elastic job on 2 of 1 to 8.
                let asked = match &j.sizes {
                    // Groups by type after the default one: `1-16x1,8@rtx,2@dgx-ext`.
                    Some(s) if !s.multiple_by_type.is_empty() => {
                        let groups: Vec<String> = (s.multiple_by_type.iter())
                            .map(|(t, g)| format!("{g}@{t}"))
                            .collect();
                        format!("{}-{}x{},{}", s.min, s.max, s.multiple, groups.join(","))
                    }
                    Some(s) if s.multiple > 1 => format!("{}-{}x{}", s.min, s.max, s.multiple),
                    Some(s) => format!("{}-{}", s.min, s.max),
                    None => j.gpus.to_string(),
                };
                let held = format!("{}/{asked}", j.placement.len());
                let gpus: Vec<String> = j.placement.iter().map(u32::to_string).collect();
                let placement = match &j.waiting {
                    Some(why) if gpus.is_empty() => format!("waits: {why}"),
                    _ => gpus.join(","),
                };
                let (cpus, memory) = match j.resources {
                    Some(r) => (format!("{:.2}", r.cpus), format!("{:.1}", r.memory_gb)),
                    None => ("-".into(), "-".into()),
                };
                // What the workers measured: seconds per step, and the gradient noise scale.
                let step = j
                    .measured
                    .map_or("-".into(), |m| format!("{:.3}", m.step_seconds));
                let noise = j
                    .measured
                    .and_then(|m| m.noise_scale)
                    .map_or("-".into(), |b| format!("{b:.0}"));
                // The global batch: its policy's choice, for a job that adapts it; else what its
                // workers measured.
                let batch = j
                    .batch
                    .or(j
                        .measured
                        .map(|m| m.replica_batch.saturating_mul(m.replicas)))
                    .map_or("-".into(), |b| b.to_string());
                println!(
                    "{:>6}  {:<13} {:>9}  {:>7.1}%  {:>5}  {:>8}  {:>6}  {:>7}  {:>6}  {:<12} {:<12} {}",
                    j.id,
                    j.phase.to_string(),
                    held,
                    j.progress * 100.0,
                    cpus,
                    memory,
                    step,
                    noise,
                    batch,
                    // Names never reach a terminal raw (a journal may hold ones from before they
                    // were checked).
                    escape(&j.job_type),
                    escape(&j.tenant),
                    placement
                );
            }
        }
    }
    Ok(())
}

/// `gangway nodes`: prints the daemon's servers, their GPUs out of service or whose health is no
/// longer checked, and their jobs.
pub fn nodes(args: JobsArgs) -> Result<()> {
    let body = args
        .daemon
        .client()?
        .get("/nodes")
        .map_err(anyhow::Error::msg)?;
    let nodes: Vec<NodeInfo> = serde_json::from_value(body).context("reading the node list")?;
    match args.format {
        crate::report::OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&nodes)?)
        }
        crate::report::OutputFormat::Table => {
            println!(
                "{:<16} {:<10} {:>4} {:>4}  {:<12} JOBS",
                "NODE", "TYPE", "GPUS", "FREE", "STATE"
            );
            for n in &nodes {
                let state = match n.out_of_service.first() {
                    None => "in service".to_owned(),
                    Some((_, why)) if n.out_of_service.len() == n.gpus.len() => {
                        format!("out: {}", escape(why))
                    }
                    Some((_, why)) => format!(
                        "{} of {} out: {}",
                        n.out_of_service.len(),
                        n.gpus.len(),
                        escape(why)
                    ),
                };
                let state = match n.unwatched.len() {
                    0 => state,
                    k => format!("{state}; {k} unwatched"),
                };
                let jobs: Vec<String> = n.jobs.iter().map(|j| j.0.to_string()).collect();
                println!(
                    "{:<16} {:<10} {:>4} {:>4}  {:<12} {}",
                    escape(&n.name),
                    escape(&n.gpu_type),
                    n.gpus.len(),
                    n.free,
                    state,
                    if jobs.is_empty() {
                        "-".into()
                    } else {
                        jobs.join(",")
                    }
                );
            }
            // Why each unwatched GPU is: the table has no room for it.
            for n in &nodes {
                for (gpu, why) in &n.unwatched {
                    println!("GPU {gpu} on {}: {}", escape(&n.name), escape(why));
                }
            }
        }
    }
    Ok(())
}

/// `gangway cancel`: cancels a job.
pub fn cancel(args: CancelArgs) -> Result<()> {
    args.daemon
        .client()?
        .delete(&format!("/jobs/{}", args.id))
        .map_err(anyhow::Error::msg)?;
    println!("cancelled {}", args.id);
    Ok(())
}

/// `gangway cordon` (`cordoned`) or `gangway uncordon`: takes GPUs out of service or puts them back.
pub fn cordon(args: CordonArgs, cordoned: bool) -> Result<()> {
    let path = if cordoned {
        "/gpus/cordon"
    } else {
        "/gpus/uncordon"
    };
    let body = serde_json::json!({ "gpus": args.gpus });
    args.daemon
        .client()?
        .post(path, &body, None)
        .map_err(anyhow::Error::msg)?;
    let gpus: Vec<String> = args.gpus.iter().map(u32::to_string).collect();
    println!(
        "{} GPUs {}",
        if cordoned { "cordoned" } else { "uncordoned" },
        gpus.join(",")
    );
    Ok(())
}

/// `gangway ui`: the daemon to open the dashboard of.
#[derive(clap::Args)]
pub struct UiArgs {
    /// The daemon (over TCP: a browser cannot reach a Unix socket).
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// `gangway ui`: prints a link that logs a browser into the dashboard, once, within a minute. The
/// code rides in the link's fragment, which browsers never send to a server: it is in no log.
pub fn ui(args: UiArgs) -> Result<()> {
    let client = args.daemon.client()?;
    if matches!(client.address(), gangway_launcher::client::Address::Unix(_)) {
        bail!(
            "the dashboard is served over TCP (a browser cannot reach a Unix socket): start \
             `gangway serve --listen 127.0.0.1:PORT` and pass --daemon 127.0.0.1:PORT"
        );
    }
    let answer = client
        .post("/ui/login-codes", &serde_json::json!({}), None)
        .map_err(anyhow::Error::msg)?;
    let path = answer["path"]
        .as_str()
        .context("the daemon's answer has no login path")?;
    let seconds = answer["expires_in"].as_u64().unwrap_or(60);
    println!("{}", client.url(path));
    eprintln!(
        "gangway ui: open this link in a browser within {seconds} s; it logs in once (a session \
         of 12 h in that browser) and is worthless afterwards"
    );
    Ok(())
}
