//! gangway-core: the scheduling model that both the simulator and the live control plane use.
//!
//! - [`cluster`]: servers with GPUs of one type, CPUs and memory.
//! - [`job`] and [`trace`]: jobs and the trace formats they come from; [`limits`]: the ranges every
//!   number read from input must fall in.
//! - [`throughput`]: how fast a job runs on an allocation.
//! - [`resources`]: CPUs and memory beside GPUs (Synergy).
//! - [`policy`]: the [`policy::Policy`] trait, its single input struct, and the policies.
//! - [`placement`]: free GPUs, placers, and the placement steps grants ask for.
//! - [`engine`]: the scheduling state that the simulator and the live control plane both drive.
//! - [`sim`]: the deterministic discrete-event simulator, a driver of the engine.
//!
//! Dependencies point one way: `sim -> engine -> placement`, and both use `policy` and `throughput`.
//! - [`metrics`]: JCT, fairness and utilization over a job-id window.

#![deny(missing_docs)]

pub mod cluster;
pub mod engine;
pub mod error;
pub mod job;
pub mod limits;
pub mod metrics;
pub mod placement;
pub mod policy;
pub mod resources;
pub mod sim;
pub mod solver;
pub mod throughput;
pub mod trace;
