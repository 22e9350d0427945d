//! Assembling a scenario from user input, the same way for `gangway simulate` and `gangway serve`: the
//! cluster, the throughput model, the placer (and the topology it scores on), the policy's
//! configuration and the engine's costs. What runs live is what was simulated.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};

use gangway_core::cluster::Cluster;
use gangway_core::engine::EngineConfig;
use gangway_core::error::{Source, read_text};
use gangway_core::job::{Names, Trace};
use gangway_core::limits;
use gangway_core::placement::even::Even;
use gangway_core::placement::{PackingPlacer, PlacementMode, Placer, TopologyPlacer};
use gangway_core::policy::{self, Policy, PolicyConfig};
use gangway_core::sim::{self, SimulationError};
use gangway_core::throughput::goodput::{ProfiledWorkload, Reported, Reports};
use gangway_core::throughput::resources::{ResourceModel, ResourceProfiles};
use gangway_core::throughput::{DurationModel, TableModel, ThroughputModel, ThroughputTable};
use gangway_core::trace::{self, SyntheticSpec, TraceOptions};
use gangway_topology::topology::{ClusterSpec, Topology};

/// The options `gangway simulate` and `gangway serve` share.
#[derive(clap::Args, Clone, Debug)]
pub struct ScenarioArgs {
    /// Gavel-format throughput table (JSON): job types' steps per second by GPU type and gang size.
    /// `simulate` uses the bundled Gavel table without it; `serve` then counts work in seconds.
    #[arg(long, value_name = "PATH")]
    pub throughputs: Option<PathBuf>,
    /// Placement: `packing` (best fit, no topology), or on the topology: `consolidate`, `relaxed`,
    /// `relax-after:SECONDS`, `sensitive` (consolidate placement-sensitive models only), `random`.
    /// Poorly placed gangs run slower (see core/src/throughput/locality.rs).
    #[arg(long, default_value = "packing", value_name = "MODE")]
    pub placement: String,
    /// Seconds to checkpoint a preempted job.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub preempt_cost: f64,
    /// Seconds to restore a job from its checkpoint.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub restore_cost: f64,
    /// Seconds lost when a running job moves to other GPUs.
    #[arg(
        long,
        default_value_t = 0.0,
        value_name = "SECONDS",
        allow_negative_numbers = true
    )]
    pub migrate_cost: f64,
    /// Spread a gang over servers only evenly (as many GPUs on each), as torchrun needs when it
    /// starts one agent per node; an uneven gang waits. `serve --slurm` always does.
    #[arg(long)]
    pub even_gangs: bool,
    /// Seed for every random choice (policies and placers).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A CSV of job service in GPU-seconds (first column, or one named `duration`), such as Tiresias'
    /// `yarn-gput*.csv`, for `tiresias_gittins`; without it the distribution is learned from finished jobs.
    #[arg(long, value_name = "PATH")]
    pub gittins_distribution: Option<PathBuf>,
}

impl Default for ScenarioArgs {
    /// What the command line gives when no option is passed: no table, best-fit packing, no costs,
    /// gangs spread any way, seed 0, Gittins' distribution learned.
    fn default() -> Self {
        ScenarioArgs {
            throughputs: None,
            placement: "packing".into(),
            preempt_cost: 0.0,
            restore_cost: 0.0,
            migrate_cost: 0.0,
            even_gangs: false,
            seed: 0,
            gittins_distribution: None,
        }
    }
}

/// A cluster with everything needed to run policies on it, simulated or live.
pub struct Scenario {
    /// The GPUs, their servers and types.
    pub cluster: Arc<Cluster>,
    /// The throughput table, when work is counted in steps.
    pub table: Option<ThroughputTable>,
    /// Where and how the topology-aware placer scores sets; `None`: best-fit packing.
    placement: Option<(Arc<Topology>, PlacementMode)>,
    /// Round length and the costs of preempting, restoring and migrating.
    pub engine: EngineConfig,
    /// What every policy is built with: its seed, service distribution and GPU prices.
    pub policy_config: PolicyConfig,
    /// The seed of every random choice: policies', placers' and synthetic traces'.
    pub seed: u64,
    /// Gangs spread over servers only evenly.
    pub even_gangs: bool,
}

impl Scenario {
    /// Assembles `args` on `cluster`. `topology` is the hardware graph when the cluster came from one;
    /// otherwise a topology-aware placement uses Philly's server designs. `engine` carries the round
    /// length and when to schedule between rounds; the costs come from `args`. Without
    /// `--throughputs`, the bundled table is used when `bundled_table`, and durations otherwise.
    pub fn assemble(
        args: &ScenarioArgs,
        cluster: Cluster,
        topology: Option<ClusterSpec>,
        engine: EngineConfig,
        bundled_table: bool,
    ) -> Result<Self> {
        for (name, value, range) in [
            ("--preempt-cost", args.preempt_cost, limits::COST_SECONDS),
            ("--restore-cost", args.restore_cost, limits::COST_SECONDS),
            ("--migrate-cost", args.migrate_cost, limits::COST_SECONDS),
            ("--round", engine.round_length, limits::ROUND_SECONDS),
        ] {
            range
                .check_option(name, value)
                .map_err(anyhow::Error::msg)?;
        }
        let placement = match args.placement.as_str() {
            "packing" => None,
            other => {
                let mode: PlacementMode = other.parse().map_err(anyhow::Error::msg)?;
                let spec = match topology {
                    Some(spec) => spec,
                    None => topology_for(&cluster)?,
                };
                let topology = Arc::new(spec.build());
                // Fail now, not inside a run, if the topology does not match the cluster.
                TopologyPlacer::new(Arc::clone(&topology), &cluster, mode, args.seed)
                    .map_err(anyhow::Error::msg)?;
                Some((topology, mode))
            }
        };
        let table = match (&args.throughputs, bundled_table) {
            (Some(path), _) => Some(load_throughputs(Some(path))?),
            (None, true) => Some(load_throughputs(None)?),
            (None, false) => None,
        };
        let policy_config = PolicyConfig {
            seed: args.seed,
            service_distribution: match &args.gittins_distribution {
                Some(path) => Some(Arc::new(load_service_distribution(path)?)),
                None => None,
            },
            ..PolicyConfig::default()
        };
        Ok(Scenario {
            cluster: Arc::new(cluster),
            table,
            placement,
            engine: EngineConfig {
                preempt_cost: args.preempt_cost,
                restore_cost: args.restore_cost,
                migrate_cost: args.migrate_cost,
                ..engine
            },
            policy_config,
            seed: args.seed,
            even_gangs: args.even_gangs,
        })
    }

    /// A fresh placer for one run.
    pub fn placer(&self) -> Box<dyn Placer> {
        self.placer_around(None)
    }

    /// A placer for one run: `own`, a caller's, or else a fresh one of those the placement names;
    /// either way made even where gangs must be (`even_gangs`: under Slurm a caller's placer keeps
    /// the rule torchrun's one agent per node needs too).
    pub fn placer_around(&self, own: Option<Box<dyn Placer>>) -> Box<dyn Placer> {
        let placer: Box<dyn Placer> = own.unwrap_or_else(|| match &self.placement {
            None => Box::new(PackingPlacer),
            Some((topology, mode)) => Box::new(
                TopologyPlacer::new(Arc::clone(topology), &self.cluster, *mode, self.seed)
                    .expect("checked when assembled"),
            ),
        });
        if self.even_gangs {
            Box::new(Even::new(placer))
        } else {
            placer
        }
    }

    /// The policy a spec names in `registry`, with this scenario's configuration, for a run with
    /// `model` (an error if it needs what `model` lacks).
    pub fn policy(
        &self,
        registry: &policy::Registry,
        spec: &str,
        model: &dyn ThroughputModel,
    ) -> Result<Box<dyn Policy>, policy::BuildError> {
        registry.build(spec, &self.policy_config, &policy::Capabilities::of(model))
    }

    /// The model for a trace: the table for step-counted traces, durations otherwise.
    pub fn model_for(&self, trace: &Trace) -> Result<Box<dyn ThroughputModel>> {
        match sim::builder::model_for(trace, &self.cluster, self.table.as_ref()) {
            Err(SimulationError::NoTable { trace }) => bail!(
                "{trace} counts work in steps: pass --throughputs with a table of steps per second"
            ),
            model => Ok(model?),
        }
    }

    /// The model for jobs submitted live, and the job-type names it knows: every job type of the table
    /// (work in steps), or durations (work in seconds at the requested GPU count). With Synergy's
    /// `profiles`, jobs whose type names a profiled model run faster or slower with the CPUs and
    /// memory they are allotted, which a `+tune` or `+opt` mechanism sizes.
    pub fn live_model(&self, profiles: Option<&Path>) -> Result<(Arc<dyn ThroughputModel>, Names)> {
        let profiles = match profiles {
            Some(path) => Some(Arc::new(load_resource_profiles(path)?)),
            None => None,
        };
        let cluster = &self.cluster;
        Ok(match (&self.table, profiles) {
            (Some(table), profiles) => {
                let (model, names) = TableModel::for_every_job_type(table, cluster);
                match profiles {
                    Some(p) => (
                        Arc::new(ResourceModel::new(model, p, &names, cluster)),
                        names,
                    ),
                    None => (Arc::new(model), names),
                }
            }
            (None, Some(p)) => {
                let mut names = Names::default();
                for profile in &p.profiles {
                    names.intern_job_type(&profile.name);
                }
                let durations = DurationModel::uniform(cluster.num_gpu_types());
                (
                    Arc::new(ResourceModel::new(durations, p, &names, cluster)),
                    names,
                )
            }
            (None, None) => (
                Arc::new(DurationModel::uniform(cluster.num_gpu_types())),
                Names::default(),
            ),
        })
    }
}

/// The goodput model for jobs submitted live: the applications profiled in `dir` (Pollux's or Sia's
/// profiles), each a job type, whose work is counted in progress (iterations at its initial batch).
/// With `reports`, what the jobs' workers measured is the truth the policies learn from (real
/// workers); without, the profiles are (simulated workers).
pub fn live_goodput(
    dir: &Path,
    cluster: &Cluster,
    reports: Option<Reports>,
) -> Result<(Arc<dyn ThroughputModel>, Names)> {
    let (workload, names) = ProfiledWorkload::for_profiles(dir, cluster)?;
    Ok(match reports {
        Some(reports) => (Arc::new(Reported::new(workload, reports)), names),
        None => (Arc::new(workload), names),
    })
}

/// Synergy's profiles: its `synergy_model_profiles.json`, or a folder holding it.
pub fn load_resource_profiles(path: &Path) -> Result<ResourceProfiles> {
    let file = if path.is_dir() {
        path.join(gangway_core::trace::synergy::PROFILES_FILE)
    } else {
        path.to_path_buf()
    };
    // Anything there is read as inputs are (a FIFO or a device is refused, naming what it is).
    if !file.exists() {
        bail!(
            "{}: no such file (Synergy's {} or a folder holding it)",
            file.display(),
            gangway_core::trace::synergy::PROFILES_FILE
        );
    }
    Ok(ResourceProfiles::load(&file, "models")?)
}

/// Gavel's continuous-single trace, seed 0 (6,000 jobs), bundled in the binary.
pub const EMBEDDED_TRACE: &str = include_str!("../data/gavel/continuous_single_seed0.csv");
/// Gavel's simulation throughput table (k80, p100, v100), bundled in the binary.
pub const EMBEDDED_THROUGHPUTS: &str = include_str!("../data/gavel/simulation_throughputs.json");
/// The bundled trace's name in messages and reports (it has no path).
pub const EMBEDDED_TRACE_NAME: &str = "embedded:gavel/continuous_single_seed0.csv";
/// The bundled throughput table's name in messages and reports.
pub const EMBEDDED_THROUGHPUTS_NAME: &str = "embedded:gavel/simulation_throughputs.json";
/// The policies `gangway simulate` compares when `--policy` is not given: FIFO and LAS as baselines
/// beside the systems gangway exists for: Tiresias, Gandiva, Themis, and Gavel's heterogeneity-aware LAS
/// (`max_min_fairness_perf`, on HiGHS). The one list: the CLI's default, the README and the tests read it.
pub const DEFAULT_POLICIES: &str =
    "fifo,max_min_fairness,tiresias,gandiva,themis,max_min_fairness_perf";

/// The GPU type that Gavel's durations are measured on.
pub const REFERENCE_GPU: &str = "v100";

/// Reads a throughput table from a file, or the bundled one.
pub fn load_throughputs(path: Option<&Path>) -> Result<ThroughputTable> {
    Ok(match path {
        Some(p) => ThroughputTable::parse(&Source::path(p), &read_text(p)?)?,
        None => ThroughputTable::parse(
            &Source(EMBEDDED_THROUGHPUTS_NAME.into()),
            EMBEDDED_THROUGHPUTS,
        )?,
    })
}

/// Reads a trace: a file, `synthetic:...`, or the bundled one (`None`).
pub fn load_trace(
    spec: Option<&str>,
    options: &TraceOptions,
    table: &ThroughputTable,
) -> Result<Trace> {
    Ok(match spec {
        None => trace::parse(&Source(EMBEDDED_TRACE_NAME.into()), EMBEDDED_TRACE, options)?,
        Some(s) if s.starts_with("synthetic:") => {
            SyntheticSpec::parse(s, options.rate)?.generate(table, REFERENCE_GPU)?
        }
        Some(path) => trace::load(Path::new(path), options)?,
    })
}

/// The throughput model a trace needs: Gavel's table for step-counted traces, durations otherwise (for
/// callers with a table in hand; a [`Scenario`] does the same).
pub fn model_for(
    trace: &Trace,
    cluster: &Cluster,
    table: &ThroughputTable,
) -> Result<Box<dyn ThroughputModel>> {
    Ok(sim::builder::model_for(trace, cluster, Some(table))?)
}

/// Reads `--cluster-file` or parses `--cluster`.
pub fn load_cluster(spec: &str, file: Option<&Path>, gpus_per_node: u32) -> Result<Cluster> {
    match file {
        Some(p) => Ok(Cluster::parse_toml(&Source::path(p), &read_text(p)?)?),
        None if spec.trim().is_empty() => bail!("--cluster is empty"),
        None => Ok(Cluster::parse_spec(spec, gpus_per_node)?),
    }
}

/// `servers` servers of the preset design `name`, `per_rack` to a rack.
pub fn preset_cluster(name: &str, servers: usize, per_rack: usize) -> Result<ClusterSpec> {
    use gangway_topology::presets::Preset;
    let preset = Preset::parse(name).with_context(|| {
        let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        format!("unknown preset `{name}`; known: {}", known.join(", "))
    })?;
    if servers == 0 {
        bail!("--servers must be at least 1");
    }
    let spec = ClusterSpec::of(preset, servers, per_rack);
    spec.check()
        .map_err(|why| anyhow::anyhow!("--servers {servers}: {why}"))?;
    Ok(spec)
}

/// Reads a topology file (TOML or JSON).
pub fn topology_file(path: &Path) -> Result<ClusterSpec> {
    let text = read_text(path)?;
    Ok(gangway_topology::file::parse(
        &path.display().to_string(),
        &text,
    )?)
}

/// A topology for a cluster given only as node sizes: Philly's 2-, 4- and 8-GPU server designs, in racks
/// of 16. Other node sizes need a topology file.
pub fn topology_for(cluster: &Cluster) -> Result<ClusterSpec> {
    use gangway_topology::presets::Preset;
    let mut groups: Vec<(gangway_topology::presets::Design, usize)> = Vec::new();
    for (i, node) in cluster.nodes().iter().enumerate() {
        let preset = match node.gpus {
            2 => Preset::Philly2Gpu,
            4 => Preset::Philly4Gpu,
            8 => Preset::Philly8Gpu,
            n => bail!(
                "node {i} has {n} GPUs: only 2-, 4- and 8-GPU servers have a default topology; pass --topology FILE"
            ),
        };
        match groups.last_mut() {
            Some((d, count)) if d.name == preset.name() => *count += 1,
            _ => groups.push((preset.design(), 1)),
        }
    }
    Ok(ClusterSpec {
        groups,
        hosts_per_rack: 16,
        uplink_factor: 4.0,
    })
}

/// Reads a distribution of job service (GPU-seconds) from a CSV: the column named `duration`, or the
/// first one. Errors name the file, line and field.
pub fn load_service_distribution(path: &Path) -> Result<Vec<f64>> {
    let contents = read_text(path)?;
    let mut reader = csv::Reader::from_reader(contents.as_bytes());
    let headers = reader
        .headers()
        .with_context(|| format!("{}: no header line", path.display()))?
        .clone();
    let column = headers
        .iter()
        .position(|h| h.trim() == "duration")
        .unwrap_or(0);
    let field = headers.get(column).unwrap_or("").trim().to_owned();
    let mut values = Vec::new();
    for record in reader.records() {
        let record = record.with_context(|| format!("reading {}", path.display()))?;
        let line = record.position().map_or(0, |p| p.line());
        let text = record.get(column).unwrap_or("").trim();
        match text.parse::<f64>() {
            Ok(v) if limits::SERVICE_GPU_SECONDS.contains(v) => values.push(v),
            _ => bail!(
                "{}:{line}: field `{field}`: `{text}` is not a service time: it {}",
                path.display(),
                limits::SERVICE_GPU_SECONDS
            ),
        }
    }
    if values.is_empty() {
        bail!("{}: the distribution has no values", path.display());
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::cluster::{GpuId, GpuTypeId};
    use gangway_core::job::{Job, JobId};
    use gangway_core::placement::PlaceRequest;

    /// A caller's placer is held to even gangs where the scenario wants them (a control plane on
    /// Slurm), and left as it is elsewhere.
    #[test]
    fn a_callers_placer_keeps_gangs_even_where_they_must_be() {
        let accepts_three_and_one = |even_gangs: bool| {
            let args = ScenarioArgs {
                even_gangs,
                ..ScenarioArgs::default()
            };
            let cluster = Cluster::parse_spec("gpu=2x4", 4).unwrap();
            let scenario =
                Scenario::assemble(&args, cluster, None, EngineConfig::default(), false).unwrap();
            let placer = scenario.placer_around(Some(Box::new(PackingPlacer)));
            let job = Job::new(JobId(0), 0.0, 4, 1.0);
            let request = PlaceRequest {
                job: &job,
                gpu_type: GpuTypeId(0),
                gpus: 4,
                previous: &[],
                waited: 0.0,
                sensitivity: 0.0,
                consolidate: false,
            };
            let three_and_one = [0, 1, 2, 4].map(GpuId);
            placer.accepts(&scenario.cluster, &request, &three_and_one)
        };
        assert!(!accepts_three_and_one(true));
        assert!(accepts_three_and_one(false));
    }
}
