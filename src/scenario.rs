//! Assembling a simulation from user input: a trace, a cluster and a throughput model, with the
//! bundled Gavel data as the default.

use std::path::Path;

use anyhow::{Context, Result, bail};

use gangway_core::cluster::Cluster;
use gangway_core::error::{Source, read_text};
use gangway_core::job::{Trace, WorkUnit};
use gangway_core::throughput::{DurationModel, TableModel, ThroughputModel, ThroughputTable};
use gangway_core::trace::{self, SyntheticSpec, TraceOptions};

/// Gavel's continuous-single trace, seed 0 (6,000 jobs), bundled in the binary.
pub const EMBEDDED_TRACE: &str = include_str!("../data/gavel/continuous_single_seed0.csv");
/// Gavel's simulation throughput table (k80, p100, v100), bundled in the binary.
pub const EMBEDDED_THROUGHPUTS: &str = include_str!("../data/gavel/simulation_throughputs.json");
pub const EMBEDDED_TRACE_NAME: &str = "embedded:gavel/continuous_single_seed0.csv";
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

/// The throughput model a trace needs: Gavel's table for step-counted traces, durations otherwise.
pub fn model_for(
    trace: &Trace,
    cluster: &Cluster,
    table: &ThroughputTable,
) -> Result<Box<dyn ThroughputModel>> {
    Ok(match trace.work_unit() {
        WorkUnit::Steps => Box::new(TableModel::new(table, trace, cluster)?),
        WorkUnit::Seconds => Box::new(DurationModel::uniform(cluster.num_gpu_types())),
    })
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
pub fn preset_cluster(
    name: &str,
    servers: usize,
    per_rack: usize,
) -> Result<gangway_topology::topology::ClusterSpec> {
    use gangway_topology::presets::Preset;
    let preset = Preset::parse(name).with_context(|| {
        let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        format!("unknown preset `{name}`; known: {}", known.join(", "))
    })?;
    if servers == 0 {
        bail!("--servers must be at least 1");
    }
    let spec = gangway_topology::topology::ClusterSpec::of(preset, servers, per_rack);
    spec.check()
        .map_err(|why| anyhow::anyhow!("--servers {servers}: {why}"))?;
    Ok(spec)
}

/// Reads a topology file (TOML or JSON).
pub fn topology_file(path: &Path) -> Result<gangway_topology::topology::ClusterSpec> {
    let text = read_text(path)?;
    Ok(gangway_topology::file::parse(
        &path.display().to_string(),
        &text,
    )?)
}

/// A topology for a cluster given only as node sizes: Philly's 2-, 4- and 8-GPU server designs, in racks
/// of 16. Other node sizes need a topology file.
pub fn topology_for(cluster: &Cluster) -> Result<gangway_topology::topology::ClusterSpec> {
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
    Ok(gangway_topology::topology::ClusterSpec {
        groups,
        hosts_per_rack: 16,
        uplink_factor: 4.0,
    })
}

/// Reads a distribution of job service (GPU-seconds) from a CSV: the column named `duration`, or the
/// first one. Errors name the file, line and field.
pub fn load_service_distribution(path: &Path) -> Result<Vec<f64>> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("reading {}", path.display()))?;
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
            Ok(v) if v.is_finite() && v >= 0.0 => values.push(v),
            _ => bail!(
                "{}:{line}: field `{field}`: `{text}` is not a service time >= 0",
                path.display()
            ),
        }
    }
    if values.is_empty() {
        bail!("{}: the distribution has no values", path.display());
    }
    Ok(values)
}
