//! gangway schedules deep-learning training jobs onto shared GPU clusters.
//!
//! This facade re-exports the workspace's crates and adds what the `gangway` binary shares with
//! examples and tests: assembling a scenario from user input, running several policies, and reports.
//!
//! ```
//! use gangway::core::{cluster::Cluster, metrics::Window, placement, policy, sim};
//! use gangway::scenario;
//!
//! // Gavel's bundled trace at 2 jobs/hour on 12 V100s, under LAS.
//! let table = scenario::load_throughputs(None).unwrap();
//! let options = gangway::core::trace::TraceOptions { rate: Some(2.0), ..Default::default() };
//! let mut trace = scenario::load_trace(None, &options, &table).unwrap();
//! trace.jobs.truncate(200);
//! let cluster = Cluster::parse_spec("v100=12", 1).unwrap();
//! let model = scenario::model_for(&trace, &cluster, &table).unwrap();
//! let simulation = sim::Simulation::new(&trace, &cluster, model.as_ref());
//! let mut las = policy::build("las", &policy::PolicyConfig::seeded(0)).unwrap();
//! let result = simulation.run(las.as_mut(), &mut placement::PackingPlacer, &mut |_, _| {});
//! let summary = result.summary("las", None);
//! assert_eq!(summary.measured_jobs, 200);
//! assert!(summary.avg_jct_h > 0.0);
//! ```

//!
//! Features, all but `lp-pure` on by default:
//!
//! - `simulate`: the simulator and its reports; `plots`: SVG pictures;
//! - `serve`: the live control plane, its HTTP API and clients (actix, tokio; implies `simulate` and
//!   `launcher`); `launcher`: `elastic-run`;
//! - `lp`: HiGHS (C++, built by cmake), the LP/MILP solver of the policies that optimize (Gavel's LP
//!   policies, `sia`, `pollux`, `+opt`); `lp-pure`: the same policies on microlp, a pure-Rust solver
//!   whose results differ from HiGHS's where many allocations are optimal. Without either,
//!   [`core::solver::available`] is `None` and those policies cannot solve;
//! - `nvml`: GPU discovery and health through NVML.
//!
//! `cargo build --no-default-features --features simulate` builds the simulator alone: no actix, tokio,
//! HTTP, NVML or C++ toolchain; add `lp-pure` for the LP policies. `scripts/features` checks every
//! combination named here.

#[cfg(feature = "serve")]
pub use gangway_actors as actors;
pub use gangway_core as core;
#[cfg(feature = "launcher")]
pub use gangway_elastic as elastic;
#[cfg(feature = "serve")]
pub use gangway_journal as journal;
#[cfg(feature = "launcher")]
pub use gangway_launcher as launcher;
pub use gangway_protocol as protocol;
pub use gangway_topology as topology;

pub mod cli;
#[cfg(feature = "simulate")]
pub mod compare;
#[cfg(feature = "serve")]
pub mod control;
#[cfg(feature = "simulate")]
pub mod fidelity;
#[cfg(feature = "serve")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(all(feature = "simulate", feature = "plots"))]
pub mod plots;
#[cfg(feature = "simulate")]
pub mod report;
#[cfg(feature = "simulate")]
pub mod scenario;
#[cfg(feature = "serve")]
pub mod slurm_nodes;
#[cfg(feature = "plots")]
pub mod topology_view;
