//! Finish-time fairness against LAS and FIFO, with rho measured against the `isolated` reference:
//! `cargo run --release --example finish_time_fairness`.
//!
//! rho is a job's JCT divided by its JCT alone on 1/N of the cluster; FTF minimizes the worst rho.

use anyhow::Result;
use gangway::core::cluster::Cluster;
use gangway::core::sim::Simulation;
use gangway::core::trace::TraceOptions;
use gangway::scenario;

fn main() -> Result<()> {
    let table = scenario::load_throughputs(None)?;
    let trace = scenario::load_trace(
        Some("synthetic:jobs=1200,seed=5,rate=5,multi=true"),
        &TraceOptions::default(),
        &table,
    )?;
    let cluster = Cluster::parse_spec("v100=12,p100=12,k80=12", 1)?;
    let report = Simulation::builder()
        .trace(trace)
        .cluster(cluster)
        .table(table)
        .policies(["fifo", "max_min_fairness", "finish_time_fairness"])
        .run()?;
    for s in report.summaries() {
        println!(
            "{:>21}: average JCT {:6.2} h, average rho {:.2}, worst rho {:.2}, rho > 1 for {:.0}% of jobs",
            s.policy,
            s.avg_jct_h,
            s.avg_ftf.unwrap_or(f64::NAN),
            s.max_ftf.unwrap_or(f64::NAN),
            100.0 * s.ftf_over_1.unwrap_or(0.0)
        );
    }
    Ok(())
}
