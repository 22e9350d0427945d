//! gangway schedules deep-learning training jobs onto shared GPU clusters.
//!
//! This facade re-exports the workspace's crates and adds what the `gangway` binary shares with
//! examples and tests: assembling a scenario from user input, reports, and (feature `serve`) the
//! `ControlPlaneBuilder`, which starts the live control plane in-process (`plane`'s docs show one).
//! The simulator's entry point is `core::sim::Simulation::builder`:
//!
//! ```
//! use gangway::core::{cluster::Cluster, sim::Simulation, trace::TraceOptions};
//! use gangway::scenario;
//!
//! // Gavel's bundled trace at 2 jobs/hour on 12 V100s: LAS against FIFO.
//! let table = scenario::load_throughputs(None)?;
//! let options = TraceOptions { rate: Some(2.0), ..Default::default() };
//! let mut trace = scenario::load_trace(None, &options, &table)?;
//! trace.jobs.truncate(200);
//! let report = Simulation::builder()
//!     .trace(trace)
//!     .table(table)
//!     .cluster(Cluster::parse_spec("v100=12", 1)?)
//!     .policies(["las", "fifo"])
//!     .run()?;
//! let las = &report.get("las").unwrap().summary;
//! assert_eq!(las.measured_jobs, 200);
//! assert!(las.avg_jct_h > 0.0 && las.avg_ftf.is_some());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A policy of one's own joins through `core::policy::Registry` (the call every built-in policy is
//! entered by) and runs wherever a built-in one does: in the simulator's builder
//! (`SimulationBuilder::registry`), in the live control plane (`ControlPlaneBuilder::registry`), and
//! on the command line of a binary of one's own (`cli::main`). `examples/custom_policy.rs` does all
//! three, and `docs/EMBEDDING.md` walks through it.
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

#![deny(missing_docs)]

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

#[cfg(feature = "serve")]
pub use plane::ControlPlaneBuilder;

pub mod cli;
#[cfg(feature = "serve")]
pub mod control;
#[cfg(feature = "simulate")]
pub mod fidelity;
#[cfg(feature = "serve")]
#[doc(hidden)]
pub mod fuzzing;
#[cfg(feature = "serve")]
pub mod plane;
#[cfg(all(feature = "simulate", feature = "plots"))]
pub mod plots;
#[cfg(feature = "simulate")]
pub mod report;
#[cfg(feature = "simulate")]
pub mod scenario;
#[cfg(feature = "simulate")]
pub mod simulate;
#[cfg(feature = "serve")]
pub mod slurm_nodes;
#[cfg(feature = "plots")]
pub mod topology_view;
