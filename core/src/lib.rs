//! gangway-core: the scheduling model that both the simulator and the live control plane use.
//!
//! - [`cluster`]: servers with GPUs of one type, CPUs and memory.
//! - [`job`] and [`trace`]: jobs and the trace formats they come from.
//! - [`throughput`]: how fast a job runs on an allocation.
//! - [`policy`]: the [`policy::Policy`] trait, its single input struct, and the policies.
//! - [`engine`]: the scheduling state that the simulator and the live control plane both drive.
//! - [`sim`]: the deterministic discrete-event simulator.
//! - [`metrics`]: JCT, fairness and utilization over a job-id window.

pub mod cluster;
pub mod engine;
pub mod error;
pub mod job;
pub mod metrics;
pub mod policy;
pub mod sim;
pub mod solver;
pub mod throughput;
pub mod trace;
