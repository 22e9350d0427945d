//! gangway-protocol: the types that cross process boundaries, and nothing heavier.
//!
//! - [`ids`]: jobs, GPUs and GPU types, as every other crate numbers them;
//! - [`lifecycle`]: a job's phases, as an explicit state machine;
//! - [`api`]: the bodies of the control plane's HTTP API (what `gangway submit` and `elastic-run --daemon`
//!   send, what `gangway jobs` shows);
//! - [`worker`]: the worker contract: what a job's workers are launched with, what they report, and the
//!   [`worker::Executor`] trait through which the control plane reaches them;
//! - [`command`]: the checks on a submitted command that both the control plane and the launcher
//!   apply (who submitted it, which programs it may start);
//! - [`token`]: the API's bearer token, as the daemon writes it and its clients send it.
//!
//! The launcher (`elastic-run`) and the control plane both depend on this crate, so that the launcher
//! needs neither the actors nor the solver.
//!
//! ```
//! use gangway_protocol::api::JobRequest;
//! let request: JobRequest = serde_json::from_str(r#"{"gpus": 2, "work": 600}"#).unwrap();
//! assert_eq!((request.gpus, request.job_type.as_str()), (2, "default"));
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod command;
pub mod ids;
pub mod lifecycle;
pub mod token;
pub mod worker;
