//! Themis' fairness knob f, against LAS, Tiresias and FIFO, with rho measured against the `isolated`
//! reference: `cargo run --release --example themis [TRACE] [LOAD]`.
//!
//! Without arguments it replays a synthetic multi-GPU Gavel-model trace on 36 GPUs. Given the Philly
//! trace (`../shared/data/philly/philly_jobs_pollux_derived.csv`) and a load factor, it uses the
//! Philly-like cluster in `testdata/philly_cluster.toml`, as `docs/POLICIES.md` does. Leases are 30
//! minutes, so that the auction's hidden payments (shorter leases) matter.

use anyhow::Result;
use gangway::core::cluster::Cluster;
use gangway::core::error::Source;
use gangway::core::sim::Simulation;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let trace_arg = args.next();
    let load: f64 = args.next().map_or(Ok(1.0), |a| a.parse())?;
    let table = scenario::load_throughputs(None)?;
    let options = TraceOptions::default();
    let (mut trace, cluster) = match &trace_arg {
        Some(path) => {
            let text = std::fs::read_to_string("testdata/philly_cluster.toml")?;
            let cluster =
                Cluster::parse_toml(&Source("testdata/philly_cluster.toml".into()), &text)?;
            (scenario::load_trace(Some(path), &options, &table)?, cluster)
        }
        None => (
            scenario::load_trace(
                Some("synthetic:jobs=1200,seed=5,rate=5,multi=true"),
                &options,
                &table,
            )?,
            Cluster::parse_spec("v100=12,p100=12,k80=12", 1)?,
        ),
    };
    trace.scale_load(load);
    let report = Simulation::builder()
        .trace(trace)
        .cluster(cluster)
        .table(table)
        .policies([
            "fifo",
            "max_min_fairness",
            "tiresias",
            "themis:f=0:lease=1800",
            "themis:f=0.5:lease=1800",
            "themis:f=0.8:lease=1800",
            "themis:f=1:lease=1800",
        ])
        .run()?;
    println!("| policy | avg JCT h | avg rho | worst rho | rho > 1 |");
    println!("|---|---|---|---|---|");
    for s in report.summaries() {
        println!(
            "| {} | {:.2} | {:.2} | {:.2} | {:.1}% |",
            s.policy,
            s.avg_jct_h,
            s.avg_ftf.unwrap_or(f64::NAN),
            s.max_ftf.unwrap_or(f64::NAN),
            100.0 * s.ftf_over_1.unwrap_or(0.0)
        );
    }
    Ok(())
}
