//! gangway schedules deep-learning training jobs onto shared GPU clusters.
//!
//! This facade re-exports the workspace's crates and adds what the `gangway` binary shares with
//! examples and tests: assembling a scenario from user input, running several policies, and reports.
//!
//! ```
//! use gangway::core::{cluster::Cluster, metrics::Window, policy, sim};
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
//! let result = simulation.run(las.as_mut(), &mut sim::PackingPlacer, &mut |_, _| {});
//! let summary = result.summary("las", None);
//! assert_eq!(summary.measured_jobs, 200);
//! assert!(summary.avg_jct_h > 0.0);
//! ```

pub use gangway_actors as actors;
pub use gangway_core as core;
pub use gangway_topology as topology;

pub mod cli;
pub mod compare;
pub mod control;
pub mod fidelity;
#[doc(hidden)]
pub mod fuzzing;
pub mod report;
pub mod scenario;
pub mod topology_view;
