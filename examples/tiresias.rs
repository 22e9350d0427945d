//! Tiresias against FIFO and YARN-CS on a multi-GPU synthetic trace:
//! `cargo run --release --example tiresias`.
//!
//! Tiresias (2DAS) orders jobs by the GPU-seconds they have received, discretized into queues, so short
//! jobs overtake long ones without knowing any job's length in advance.

use anyhow::Result;
use gangway::core::cluster::Cluster;
use gangway::core::engine::EngineConfig;
use gangway::core::placement::PackingPlacer;
use gangway::core::policy::{self, PolicyConfig};
use gangway::core::sim::{SimConfig, Simulation};
use gangway::core::trace::TraceOptions;
use gangway::scenario;

fn main() -> Result<()> {
    let table = scenario::load_throughputs(None)?;
    let trace = scenario::load_trace(
        Some("synthetic:jobs=1500,seed=3,rate=9,multi=true"),
        &TraceOptions::default(),
        &table,
    )?;
    let cluster = Cluster::parse_spec("v100=8x4,p100=8x4", 1)?;
    let model = scenario::model_for(&trace, &cluster, &table)?;
    let mut simulation = Simulation::new(&trace, &cluster, model.as_ref());
    // Checkpointing costs 30 s and restoring 30 s: Tiresias pays for every preemption.
    simulation.config = SimConfig {
        engine: EngineConfig {
            preempt_cost: 30.0,
            restore_cost: 30.0,
            ..EngineConfig::default()
        },
        ..SimConfig::default()
    };
    for name in ["yarn_cs", "fifo", "tiresias", "tiresias_gittins"] {
        let mut policy =
            policy::builtin().build(name, &PolicyConfig::seeded(0), &policy::Capabilities::ALL)?;
        let summary = simulation
            .run(policy.as_mut(), &mut PackingPlacer, &mut |_, _| {})
            .summary(name, None);
        println!(
            "{name:>17}: average JCT {:6.2} h, p99 {:7.2} h, {} preemptions",
            summary.avg_jct_h, summary.p99_jct_h, summary.preemptions
        );
    }
    Ok(())
}
