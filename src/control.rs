//! `gangway serve` and its clients: `gangway submit`, `gangway jobs`, `gangway cancel`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use gangway_actors::api::{self, Listen};
use gangway_actors::cluster::{ClusterActor, JobInfo, JobRequest, Parts, Settings, TimeSource};
use gangway_actors::executor::{Executor, SimExecutor};
use gangway_actors::health::{HealthProbe, NvmlProbe};
use gangway_core::cluster::Cluster;
use gangway_core::job::Trace;
use gangway_core::policy::{self, PolicyConfig};
use gangway_core::sim::{PackingPlacer, SimConfig};
use gangway_core::throughput::DurationModel;
use gangway_launcher::daemon::{self, agent};
use gangway_launcher::executor::ProcessExecutor;

use crate::scenario;

/// Where clients find the daemon unless told.
pub const DEFAULT_DAEMON: &str = "127.0.0.1:7878";

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("gpus").args(["fake_gpus", "preset", "topology", "cluster"])))]
pub struct ServeArgs {
    /// Listen on `HOST:PORT` or `unix:PATH`.
    #[arg(long, default_value = DEFAULT_DAEMON, value_name = "ADDR")]
    pub listen: Listen,
    /// N fake GPUs on this machine (simulated workers, unless --workers processes). Without any of --fake-gpus, --preset,
    /// --topology and --cluster, the GPUs come from NVML discovery.
    #[arg(long, value_name = "N")]
    pub fake_gpus: Option<u32>,
    /// Servers of a preset design (`gangway topology --list`), run by simulated workers.
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,
    /// Servers of the preset, with --preset.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub servers: usize,
    /// A topology file, run by simulated workers.
    #[arg(long, value_name = "PATH")]
    pub topology: Option<PathBuf>,
    /// A cluster as `TYPE=NxG,...` (as for `simulate`), run by simulated workers.
    #[arg(long, value_name = "SPEC")]
    pub cluster: Option<String>,
    /// The policy, with knobs (`--policy help` with `simulate` lists them).
    #[arg(long, default_value = "tiresias", value_name = "SPEC")]
    pub policy: String,
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
    /// Who runs the jobs: real `processes` (through `elastic-run`; the default on NVML GPUs), or
    /// `simulated` workers in virtual time (the default otherwise).
    #[arg(long, value_enum, value_name = "KIND")]
    pub workers: Option<Workers>,
    /// The `elastic-run` that process workers run (default: the one beside this `gangway`).
    #[arg(long, value_name = "PATH")]
    pub elastic_run: Option<PathBuf>,
}

impl ServeArgs {
    fn listen_text(&self) -> String {
        match &self.listen {
            Listen::Tcp(addr) => addr.to_string(),
            Listen::Unix(path) => format!("unix:{}", path.display()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workers {
    Processes,
    Simulated,
}

/// The cluster to serve, with the device index of each GPU when they are all on this machine, and
/// whether they are real (NVML) ones.
struct Served {
    cluster: Cluster,
    devices: Option<Vec<u32>>,
    real: bool,
}

fn serve_cluster(args: &ServeArgs) -> Result<Served> {
    let elsewhere = |cluster| Served {
        cluster,
        devices: None,
        real: false,
    };
    if let Some(n) = args.fake_gpus {
        if n == 0 {
            bail!("--fake-gpus must be at least 1");
        }
        // The cluster first: it refuses a count beyond its limit before any per-GPU list is made.
        let cluster = Cluster::parse_spec(&format!("fake=1x{n}"), n)?;
        return Ok(Served {
            cluster,
            devices: Some((0..n).collect()),
            real: false,
        });
    }
    if let Some(name) = &args.preset {
        let spec = scenario::preset_cluster(name, args.servers, 16)?;
        return Ok(elsewhere(Cluster::from_topology(&spec.build())?));
    }
    if let Some(path) = &args.topology {
        return Ok(elsewhere(Cluster::from_topology(
            &scenario::topology_file(path)?.build(),
        )?));
    }
    if let Some(spec) = &args.cluster {
        return Ok(elsewhere(scenario::load_cluster(spec, None, 1)?));
    }
    match gangway_topology::discover::discover() {
        Ok(found) => {
            let count = found.gpus.len() as u32;
            if count == 0 {
                bail!(
                    "NVML found no GPUs here; pass --fake-gpus N, --preset NAME or --topology FILE"
                );
            }
            let model = found.gpus[0].name.to_ascii_lowercase().replace(' ', "-");
            Ok(Served {
                cluster: Cluster::parse_spec(&format!("{model}=1x{count}"), count)?,
                devices: Some(found.gpus.iter().map(|g| g.index).collect()),
                real: true,
            })
        }
        Err(e) => bail!(
            "no GPUs discovered ({e}); pass --fake-gpus N, --preset NAME, --topology FILE or --cluster SPEC"
        ),
    }
}

/// Runs the control plane until interrupted.
pub fn serve(args: ServeArgs) -> Result<()> {
    if !(args.round.is_finite() && args.round > 0.0) {
        bail!("--round must be a positive number of seconds");
    }
    if !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        bail!("--time-scale must be positive");
    }
    let Served {
        cluster,
        devices,
        real: real_gpus,
    } = serve_cluster(&args)?;
    let workers = args.workers.unwrap_or(if real_gpus {
        Workers::Processes
    } else {
        Workers::Simulated
    });
    let executor: Box<dyn Executor> = match (workers, devices) {
        (Workers::Simulated, _) => Box::new(SimExecutor::default()),
        (Workers::Processes, None) => bail!(
            "process workers run on this machine's GPUs (NVML discovery or --fake-gpus N); \
             these GPUs are on other servers"
        ),
        (Workers::Processes, Some(devices)) => {
            if args.time_scale != 1.0 {
                bail!("--time-scale must be 1 with process workers: real jobs run in real time");
            }
            let elastic_run = match &args.elastic_run {
                Some(path) => path.clone(),
                None => std::env::current_exe()
                    .context("locating gangway")?
                    .with_file_name("elastic-run"),
            };
            if !elastic_run.is_file() {
                bail!(
                    "{} not found: build it (cargo build --bin elastic-run) or pass --elastic-run PATH",
                    elastic_run.display()
                );
            }
            if matches!(args.listen, Listen::Tcp(_)) {
                eprintln!(
                    "gangway serve: WARNING: with process workers, whoever reaches {} runs commands \
                     as this user; prefer --listen unix:PATH (a socket only this user can open)",
                    args.listen_text()
                );
            }
            let runs = args.journal.join("runs");
            Box::new(
                ProcessExecutor::new(elastic_run, devices, runs.clone())
                    .with_context(|| format!("creating {}", runs.display()))?,
            )
        }
    };
    let policy = policy::build(&args.policy, &PolicyConfig::default())?;
    std::fs::create_dir_all(&args.journal)
        .with_context(|| format!("creating {}", args.journal.display()))?;
    let probes: Vec<Box<dyn HealthProbe>> = match NvmlProbe::for_all_gpus() {
        Some(probes) if real_gpus => probes.into_iter().map(|p| Box::new(p) as _).collect(),
        _ => Vec::new(),
    };
    let types = cluster.num_gpu_types();
    eprintln!(
        "gangway serve: {} GPUs ({}), {} workers, policy {}, journal {}, listening on {}",
        cluster.num_gpus(),
        cluster.describe(),
        match workers {
            Workers::Processes => "process",
            Workers::Simulated => "simulated",
        },
        args.policy,
        args.journal.display(),
        args.listen_text()
    );
    let parts = Parts {
        cluster: Arc::new(cluster),
        model: Arc::new(DurationModel::uniform(types)),
        names: Trace::default(),
        policy,
        placer: Box::new(PackingPlacer),
        executor,
        probes,
        health_every: Duration::from_secs(5),
    };
    let sim = SimConfig {
        round_length: args.round,
        schedule_on_arrival: true,
        schedule_on_completion: true,
        ..SimConfig::default()
    };
    let mut settings = Settings::new(
        sim,
        TimeSource::Wall {
            time_scale: args.time_scale,
        },
    );
    settings.journal = Some(args.journal.clone());
    settings.snapshot_every = args.snapshot_every;
    settings.max_restarts = args.max_restarts;
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    });
    system.block_on(async move {
        let cluster = ClusterActor::start(parts, settings)?;
        tokio::select! {
            served = api::serve(&args.listen, cluster) => served.context("serving the API")?,
            _ = tokio::signal::ctrl_c() => eprintln!("gangway serve: interrupted; the journal has everything"),
        }
        Ok(())
    })
}

#[derive(clap::Args)]
pub struct DaemonArg {
    /// The daemon's `HOST:PORT` (default: $GANGWAY_DAEMON, else 127.0.0.1:7878).
    #[arg(long, value_name = "ADDR")]
    pub daemon: Option<String>,
}

impl DaemonArg {
    fn url(&self, path: &str) -> String {
        let addr = self
            .daemon
            .clone()
            .or_else(|| std::env::var("GANGWAY_DAEMON").ok())
            .unwrap_or_else(|| DEFAULT_DAEMON.to_owned());
        format!("http://{addr}{path}")
    }
}

#[derive(clap::Args)]
pub struct SubmitArgs {
    /// GPUs the job needs, all at once.
    #[arg(long, value_name = "N")]
    pub gpus: u32,
    /// Work: seconds of running time at that many GPUs.
    #[arg(long, value_name = "SECONDS")]
    pub work: f64,
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub job_type: String,
    #[arg(long, default_value = "default", value_name = "NAME")]
    pub tenant: String,
    #[arg(long, default_value_t = 1.0, value_name = "W")]
    pub weight: f64,
    #[command(flatten)]
    pub daemon: DaemonArg,
}

#[derive(clap::Args)]
pub struct JobsArgs {
    #[arg(long, value_enum, default_value = "table")]
    pub format: crate::report::OutputFormat,
    #[command(flatten)]
    pub daemon: DaemonArg,
}

#[derive(clap::Args)]
pub struct CancelArgs {
    /// The job's id.
    pub id: u32,
    #[command(flatten)]
    pub daemon: DaemonArg,
}

#[derive(clap::Args)]
pub struct CordonArgs {
    /// GPU ids (as `gangway jobs` shows them).
    #[arg(required = true, value_name = "GPU")]
    pub gpus: Vec<u32>,
    #[command(flatten)]
    pub daemon: DaemonArg,
}

/// The daemon's JSON answer at `url`, or its error.
fn answer(
    url: &str,
    response: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<serde_json::Value> {
    daemon::answer(url, response).map_err(anyhow::Error::msg)
}

pub fn submit(args: SubmitArgs) -> Result<()> {
    let url = args.daemon.url("/jobs");
    let request = JobRequest {
        id: None,
        job_type: args.job_type,
        tenant: args.tenant,
        gpus: args.gpus,
        work: args.work,
        weight: args.weight,
        run: None,
    };
    let body = answer(&url, agent().post(&url).send_json(&request))?;
    println!("{}", body["id"]);
    Ok(())
}

pub fn jobs(args: JobsArgs) -> Result<()> {
    let url = args.daemon.url("/jobs");
    let body = answer(&url, agent().get(&url).call())?;
    let jobs: Vec<JobInfo> = serde_json::from_value(body).context("reading the job list")?;
    match args.format {
        crate::report::OutputFormat::Json => {
            println!("{}", serde_json::to_string_pretty(&jobs)?)
        }
        crate::report::OutputFormat::Table => {
            println!(
                "{:>6}  {:<13} {:>4}  {:>8}  {:<12} {:<12} GPUS",
                "ID", "PHASE", "GPUS", "PROGRESS", "TYPE", "TENANT"
            );
            for j in &jobs {
                let gpus: Vec<String> = j.placement.iter().map(u32::to_string).collect();
                println!(
                    "{:>6}  {:<13} {:>4}  {:>7.1}%  {:<12} {:<12} {}",
                    j.id,
                    j.phase.to_string(),
                    j.gpus,
                    j.progress * 100.0,
                    j.job_type,
                    j.tenant,
                    gpus.join(",")
                );
            }
        }
    }
    Ok(())
}

pub fn cancel(args: CancelArgs) -> Result<()> {
    let url = args.daemon.url(&format!("/jobs/{}", args.id));
    answer(&url, agent().delete(&url).call())?;
    println!("cancelled {}", args.id);
    Ok(())
}

pub fn cordon(args: CordonArgs, cordoned: bool) -> Result<()> {
    let path = if cordoned {
        "/gpus/cordon"
    } else {
        "/gpus/uncordon"
    };
    let url = args.daemon.url(path);
    let body = serde_json::json!({ "gpus": args.gpus });
    answer(&url, agent().post(&url).send_json(&body))?;
    let gpus: Vec<String> = args.gpus.iter().map(u32::to_string).collect();
    println!(
        "{} GPUs {}",
        if cordoned { "cordoned" } else { "uncordoned" },
        gpus.join(",")
    );
    Ok(())
}
