//! gangway-actors: the live control plane.
//!
//! Actors (actix on tokio) cooperate by message passing:
//! - [`cluster::ClusterActor`] owns the scheduling state (the same [`gangway_core::engine::Engine`],
//!   policy and placer the simulator runs) and runs the rounds, solving on a blocking thread; it
//!   holds each job's lifecycle, an explicit state machine ([`lifecycle::Phase`]) whose moves are
//!   published as [`job::JobEvent`]s, and publishes read-only [`cluster::View`]s for the API;
//! - gangs lease their GPUs all-or-nothing ([`gang`]): all at once when nothing contends, otherwise
//!   through a [`gang::GangActor`], in two phases;
//! - [`gpu::GpuActor`] holds one GPU's lease and health (NVML when present, see [`health`]).
//!
//! Workers are reached only through the [`executor::Executor`] trait. Every decision is journaled
//! ([`ledger`], on `gangway-journal`) before it is acted on, and a restart recovers from the journal.
//! [`api`] serves the HTTP API: [`request`] checks what a submission may say and run, [`auth`] holds
//! the token and the `Host` check, [`tenants`] which tenants a user may name, [`listener`] bounds
//! connections and timeouts. [`driver`] replays a
//! trace in virtual time.
//!
//! [`plane::ControlPlane`] runs them in-process, on a thread of their own, behind typed blocking
//! methods (the facade's `ControlPlaneBuilder` assembles one from a cluster, a policy spec and an
//! executor):
//!
//! ```
//! use std::sync::Arc;
//! use gangway_actors::cluster::{JobRequest, Parts, Settings, TimeSource};
//! use gangway_actors::executor::SimExecutor;
//! use gangway_actors::plane::ControlPlane;
//! use gangway_core::{cluster::Cluster, engine::EngineConfig, job::Names, placement, policy};
//! use gangway_core::throughput::DurationModel;
//!
//! let parts = Parts {
//!     cluster: Arc::new(Cluster::parse_spec("v100=4", 4)?),
//!     model: Arc::new(DurationModel::uniform(1)),
//!     names: Names::default(),
//!     policy: policy::build("fifo", &Default::default(), &DurationModel::uniform(1))?,
//!     placer: Box::new(placement::PackingPlacer),
//!     executor: Box::new(SimExecutor::default()),
//!     probes: Vec::new(),
//!     health_every: std::time::Duration::from_secs(10),
//! };
//! // Simulated workers, an hour of work a wall second.
//! let settings = Settings::new(EngineConfig::default(), TimeSource::Wall { time_scale: 3600.0 });
//! let plane = ControlPlane::spawn(parts, settings, None)?;
//! let request = JobRequest { tenant: "a".into(), ..JobRequest::new("toy", 2, 60.0) };
//! let id = plane.submit(request)?;
//! assert_eq!(id.0, 0);
//! assert_eq!(plane.list()?[0].tenant, "a");
//! plane.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod clock;
pub mod cluster;
pub mod dashboard;
pub mod driver;
pub mod executor;
pub mod gang;
pub mod gpu;
pub mod health;
pub mod job;
pub mod ledger;
pub mod listener;
pub mod plane;
pub mod request;
pub mod stats;
pub mod tenants;

pub use gangway_protocol::lifecycle;

pub use gangway_core::job::{IdMap, IdSet};
