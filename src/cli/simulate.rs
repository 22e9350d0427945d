//! `gangway simulate`: replays a trace under one or more policies of a registry and compares them.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::core::job::Trace;
use crate::core::metrics::Summary;
use crate::core::metrics::Window;
use crate::core::policy::{self, Registry};
use crate::core::sim::SimResult;
use crate::core::sim::builder::RunProgress;
use crate::core::trace::{TraceFormat, TraceOptions};
use crate::report::{self, OutputFormat as Format, Parameters};
use crate::scenario;
use crate::simulate::{SimulateRequest, TraceInput};

#[derive(clap::Parser)]
pub(super) struct SimulateArgs {
    /// Trace file, or `synthetic:jobs=N,seed=S[,rate=R][,multi=true]`. Default: the bundled Gavel trace.
    #[arg(long, value_name = "PATH")]
    trace: Option<String>,
    /// Trace format, when it cannot be told from the first line.
    #[arg(long, value_name = "FORMAT", value_parser = clap::value_parser!(TraceFormatArg))]
    trace_format: Option<TraceFormatArg>,
    /// Input job rate in jobs/hour, for Gavel's continuous traces and synthetic ones. Default with the
    /// bundled trace: 2.0.
    #[arg(long, value_name = "JOBS_PER_HOUR", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Cluster as `TYPE=N` (N GPUs, --gpus-per-node each node) or `TYPE=NxG` (N nodes of G GPUs), comma-separated.
    /// Default: Gavel's 36 V100 + 36 P100 + 36 K80; for Pollux's workloads, its 16 servers of 4 T4
    /// (`t4=16x4`); for Sia's, its 6x4 T4 + 3x8 RTX 2080Ti + 2x8 A100 (`aws=6x4,rtx=3x8,dgx-ext=2x8`).
    #[arg(long, value_name = "SPEC")]
    cluster: Option<String>,
    /// Cluster as a TOML file of `[[nodes]]` groups (gpu_type, count, gpus, cpus, memory_gb); overrides --cluster.
    #[arg(long, value_name = "PATH")]
    cluster_file: Option<PathBuf>,
    /// Cluster as a topology file (servers of preset designs under racks; see `gangway topology`);
    /// overrides --cluster, and scores placements on the hardware graph.
    #[arg(long, value_name = "PATH")]
    topology: Option<PathBuf>,
    /// Make arrivals this many times denser (divides every arrival time), to raise a trace's load.
    #[arg(
        long,
        default_value_t = 1.0,
        value_name = "X",
        allow_negative_numbers = true
    )]
    load_factor: f64,
    /// GPUs per node for `TYPE=N` items.
    #[arg(long, default_value_t = 1, value_name = "N")]
    gpus_per_node: u32,
    /// Policies to compare, comma-separated, each optionally with knobs (`themis:f=0.5`) and Synergy's
    /// CPU and memory mechanism (`srtf+tune`, `fifo+opt`, `las+proportional`); `help` lists them.
    #[arg(
        long,
        default_value = scenario::DEFAULT_POLICIES,
        value_delimiter = ',',
        value_name = "NAMES"
    )]
    policy: Vec<String>,
    /// Round length in seconds. Default: 360 (Gavel's); 60 for Pollux's and Sia's workloads.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    round: Option<f64>,
    /// Job ids to measure, as START..END (END excluded). Default: all jobs; 4000..5000 with the bundled trace.
    #[arg(long, value_name = "A..B", value_parser = Window::parse)]
    window: Option<Window>,
    /// Also schedule when a job arrives, not only at round boundaries.
    #[arg(long)]
    schedule_on_arrival: bool,
    /// Also schedule when a job finishes, not only at round boundaries.
    #[arg(long)]
    schedule_on_completion: bool,
    /// Skip finish-time fairness (rho): the `isolated` reference run, or on goodput workloads (Pollux's,
    /// Sia's) each job's runs alone on its share of the cluster, under the same policy, as Sia measures it.
    #[arg(long)]
    no_ftf: bool,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write here: per-job CSVs (`jobs_POLICY.csv`), every job's allocations over time
    /// (`allocations_POLICY.csv`: starts with GPU type, GPUs and batch, stops, changes of pace),
    /// summary.json, SVG plots (`jct_cdf.svg`, `utilization.svg`, `comparison.svg`, `gpus_POLICY.svg`;
    /// feature `plots`) and report.html, one self-contained page of the run's parameters, the
    /// comparison and the plots.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The application profiles of a Pollux or Sia workload (default: the `profiles/` folder beside its
    /// folder of workloads, or beside the one above), or Synergy's `synergy_model_profiles.json` for its
    /// traces (default: beside the trace or up to two folders above).
    #[arg(long, value_name = "DIR")]
    profiles: Option<PathBuf>,
    #[command(flatten)]
    scenario: scenario::ScenarioArgs,
}

#[derive(Clone, Copy, Debug)]
struct TraceFormatArg(TraceFormat);

impl std::str::FromStr for TraceFormatArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.parse().map(TraceFormatArg)
    }
}

/// The policies of `registry` as `gangway simulate --policy help` lists them: each with its summary,
/// aliases, needs and knobs (default, meaning, range), then the mechanisms any may add.
pub fn policy_listing(registry: &Registry) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "Policies (use their names, comma-separated, with --policy; set knobs as name:knob=value):\n",
    );
    let needs = |needs: policy::Needs| {
        if needs.is_empty() {
            String::new()
        } else {
            format!(" [needs {needs}]")
        }
    };
    for p in registry.entries() {
        let aliases = if p.aliases().is_empty() {
            String::new()
        } else {
            format!(" (alias: {})", p.aliases().join(", "))
        };
        let needs = needs(p.requirements());
        let _ = writeln!(
            out,
            "  {:<20} {}{aliases}{needs}",
            p.name(),
            p.summary_line()
        );
        for k in p.knobs() {
            let _ = writeln!(
                out,
                "  {:<20}   :{}={} {} ({})",
                "", k.name, k.default, k.help, k.range
            );
        }
    }
    out.push_str(
        "Any policy may end in +MECHANISM to size CPUs and memory beside GPUs (Synergy):\n",
    );
    for m in policy::resourced::Mechanism::ALL {
        let name = format!("+{}", m.name());
        let _ = writeln!(out, "  {name:<20} {}{}", m.summary(), needs(m.needs()));
    }
    out
}

/// What `report.html` says the run was asked to do: the values in effect, defaults included.
fn run_parameters(
    args: &SimulateArgs,
    registry: &Registry,
    trace: &Trace,
    options: &TraceOptions,
    setup: &scenario::Scenario,
    cluster_spec: &str,
    window: &Window,
) -> Result<Parameters> {
    let mut p = Parameters::new();
    p.add(
        "trace",
        format!("{} ({} jobs)", trace.source, trace.jobs.len()),
    );
    if let Some(format) = args.trace_format {
        p.add("trace format", format.0.name());
    }
    if let Some(rate) = options.rate {
        p.add("rate", format!("{rate} jobs/hour"));
    }
    if args.load_factor != 1.0 {
        p.add("load factor", args.load_factor);
    }
    let source = match (&args.topology, &args.cluster_file) {
        (Some(path), _) => format!("topology {}", path.display()),
        (None, Some(path)) => path.display().to_string(),
        (None, None) if args.gpus_per_node == 1 => cluster_spec.to_owned(),
        (None, None) => format!("{cluster_spec}, {} GPUs per node", args.gpus_per_node),
    };
    let cluster = &setup.cluster;
    p.add(
        "cluster",
        format!(
            "{source}: {} GPUs, {}",
            cluster.num_gpus(),
            cluster.describe()
        ),
    );
    for spec in &args.policy {
        // Every knob with its value in effect, given or default.
        let knobs: Vec<String> = registry
            .resolve(spec)?
            .knobs
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect();
        if knobs.is_empty() {
            p.add("policy", spec);
        } else {
            p.add("policy", format!("{spec} ({})", knobs.join(", ")));
        }
    }
    let mut when = String::from("every round");
    if args.schedule_on_arrival {
        when.push_str(", on arrival");
    }
    if args.schedule_on_completion {
        when.push_str(", on completion");
    }
    p.add(
        "round",
        format!("{} s; scheduling {when}", setup.engine.round_length),
    );
    p.add("measured jobs", window);
    p.add(
        "finish-time fairness",
        if args.no_ftf { "skipped" } else { "computed" },
    );
    let s = &args.scenario;
    p.add(
        "throughputs",
        s.throughputs.as_ref().map_or_else(
            || scenario::EMBEDDED_THROUGHPUTS_NAME.to_owned(),
            |path| path.display().to_string(),
        ),
    );
    if let Some(path) = &args.profiles {
        p.add("profiles", path.display());
    }
    p.add("placement", &s.placement);
    p.add(
        "costs",
        format!(
            "preempt {} s, restore {} s, migrate {} s",
            s.preempt_cost, s.restore_cost, s.migrate_cost
        ),
    );
    if s.even_gangs {
        p.add("gangs", "spread over servers evenly");
    }
    if let Some(path) = &s.gittins_distribution {
        p.add("Gittins distribution", path.display());
    }
    p.add("seed", setup.seed);
    Ok(p)
}

/// The typed request these arguments make (the library's, which the Python package also uses).
fn request(args: &SimulateArgs) -> SimulateRequest {
    SimulateRequest {
        trace: args
            .trace
            .clone()
            .map_or(TraceInput::Bundled, TraceInput::Spec),
        trace_format: args.trace_format.map(|f| f.0),
        rate: args.rate,
        cluster: args.cluster.clone(),
        cluster_file: args.cluster_file.clone(),
        topology: args.topology.clone(),
        load_factor: args.load_factor,
        gpus_per_node: args.gpus_per_node,
        policies: args.policy.clone(),
        round: args.round,
        window: args.window.clone(),
        schedule_on_arrival: args.schedule_on_arrival,
        schedule_on_completion: args.schedule_on_completion,
        fairness: !args.no_ftf,
        // The allocations over time are written with the other outputs.
        log_changes: args.out.is_some(),
        profiles: args.profiles.clone(),
        scenario: args.scenario.clone(),
    }
}

/// Runs `gangway simulate` with the policies of `registry`.
pub(super) fn simulate(args: SimulateArgs, registry: &Registry) -> Result<()> {
    if args.policy.iter().any(|p| p == "help") {
        print!("{}", policy_listing(registry));
        return Ok(());
    }
    let prepared = request(&args).prepare(registry, &mut |note| eprintln!("gangway: {note}"))?;
    let window = prepared.window.clone();
    let parameters = run_parameters(
        &args,
        registry,
        &prepared.trace,
        &prepared.options,
        &prepared.scenario,
        &prepared.cluster_spec,
        &window,
    )?;

    let bars = Mutex::new(MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
    let factory = |name: &str| -> RunProgress<'_> {
        let bar = bars
            .lock()
            .expect("progress lock")
            .add(ProgressBar::hidden());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>20} [{bar:30}] {pos}/{len} jobs {elapsed}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        bar.set_prefix(name.to_owned());
        let started = std::time::Instant::now();
        let mut shown = false;
        Box::new(move |done, total| {
            // Only runs longer than a second get a bar.
            if !shown && started.elapsed() > Duration::from_secs(1) {
                bar.set_length(total as u64);
                bar.enable_steady_tick(Duration::from_millis(200));
                shown = true;
            }
            if shown && (done % 64 == 0 || done == total) {
                bar.set_position(done as u64);
            }
            if done == total {
                bar.finish_and_clear();
            }
        })
    };
    let report = prepared.builder(registry).progress_per_run(factory).run()?;
    let results: Vec<(SimResult, Summary)> = report
        .runs
        .into_iter()
        .map(|run| (run.result, run.summary))
        .collect();
    let mut stalled = Vec::new();
    let mut refused = Vec::new();
    for (result, summary) in &results {
        // Checked before the runs; a run that still refused a job is incomplete all the same.
        if let Some(first) = result.unschedulable.first() {
            eprintln!(
                "gangway: {}: {} jobs could never run on this cluster (first: job {first}); its figures cover the others only",
                summary.policy,
                result.unschedulable.len(),
            );
            refused.push(summary.policy.clone());
        }
        let unfinished = result.unfinished();
        if let Some(first) = unfinished.first() {
            eprintln!(
                "gangway: {}: {} jobs never finished: the policy stalled: no job progressed for 1,000 scheduling passes, because GPUs idled while jobs waited or jobs restarted faster than they ran (first: job {first}); its figures cover finished jobs only",
                summary.policy,
                unfinished.len(),
            );
            stalled.push(summary.policy.clone());
        }
    }
    let summaries: Vec<_> = results.iter().map(|(_, s)| s.clone()).collect();
    if summaries
        .iter()
        .all(|s| s.measured_jobs + s.unfinished_jobs == 0)
    {
        eprintln!(
            "gangway: warning: no job of the trace falls in --window {window}: every figure below is empty"
        );
    }
    match args.format {
        Format::Table => print!("{}", report::table(&summaries)),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&summaries).context("encoding JSON")?
        ),
    }
    if let Some(dir) = &args.out {
        report::write_outputs(dir, &results, &parameters)?;
        let resized = results.iter().any(|(r, _)| !r.changes.is_empty());
        let plots = if cfg!(feature = "plots") {
            if resized {
                ", jct_cdf.svg, utilization.svg, comparison.svg, gpus_POLICY.svg"
            } else {
                ", jct_cdf.svg, utilization.svg, comparison.svg"
            }
        } else {
            ""
        };
        eprintln!(
            "gangway: wrote per-job CSVs{}, summary.json{plots} and report.html to {}",
            if resized {
                ", allocations_POLICY.csv"
            } else {
                ""
            },
            dir.display()
        );
    }
    if !refused.is_empty() {
        bail!(
            "{} left jobs that could never run (see above); the results are incomplete",
            refused.join(", ")
        );
    }
    if !stalled.is_empty() {
        bail!(
            "{} stalled with jobs unfinished (see above); the results are incomplete",
            stalled.join(", ")
        );
    }
    Ok(())
}
