//! A control plane in-process: the actors on a thread and runtime of their own, driven through a
//! handle with typed, blocking methods.
//!
//! [`ControlPlane::spawn`] starts actix on a multi-thread tokio runtime on its own thread, starts the
//! [`ClusterActor`] (recovering from the journal when there is one) and, when asked, serves the HTTP
//! API. Its methods send the actors messages and wait for the answers, from any thread that is not
//! itself running async code (such code uses [`ControlPlane::cluster`] and awaits the messages);
//! refusals and a stopped plane are one [`ControlError`]. [`ControlPlane::shutdown`], or dropping
//! the handle, stops the actors and joins the thread.
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
//! // An hour of work a second: rounds of 60 s every 1/60 s of wall time.
//! let engine = EngineConfig { round_length: 60.0, ..EngineConfig::default() };
//! let settings = Settings::new(engine, TimeSource::Wall { time_scale: 3600.0 });
//! let plane = ControlPlane::spawn(parts, settings, None)?;
//! let id = plane.submit(JobRequest::new("toy", 2, 600.0))?;
//! let done = plane.wait(&[id])?;
//! assert!(done[0].finished.is_some());
//! plane.shutdown()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use actix::prelude::*;
use gangway_core::job::JobId;
use tokio::sync::{broadcast, oneshot};

use crate::api::{self, ApiConfig, Listen};
use crate::auth::HostCheck;
use crate::cluster::{
    Cancel, ClusterActor, Cordon, GetViews, JobInfo, JobRequest, NodeInfo, Parts, Refusal,
    Settings, StartError, Submit, Subscribe, View, Views,
};
use crate::job::JobEvent;
use crate::listener::Bound;
use crate::stats::StatsSnapshot;

/// Why a control plane could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The control plane refused the request; nothing changed.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The control plane has stopped (shut down, or its actors ended).
    #[error("the control plane has stopped")]
    Stopped,
    /// The cluster actor could not start (its journal could not be opened or recovered).
    #[error(transparent)]
    Start(#[from] StartError),
    /// The runtime the actors run on could not be made.
    #[error("starting the control plane's runtime: {0}")]
    Runtime(std::io::Error),
    /// The API's address could not be bound.
    #[error("listening on {listen}: {error}")]
    Listen {
        /// The address, as given.
        listen: String,
        /// Why it could not be bound.
        error: std::io::Error,
    },
    /// The API stopped serving with an error.
    #[error("serving the API: {0}")]
    Serve(std::io::Error),
    /// A subscriber read events more slowly than they came, and missed some.
    #[error("the event subscriber fell behind and missed {0} events")]
    Lagged(u64),
    /// A wait ended before what it waited for happened.
    #[error("timed out after {0:?}")]
    TimedOut(Duration),
}

impl From<MailboxError> for ControlError {
    fn from(_: MailboxError) -> Self {
        ControlError::Stopped
    }
}

/// The HTTP API a control plane serves beside its handle.
pub struct Api {
    /// Where it listens.
    pub listen: Listen,
    /// The permissions of a Unix socket (0o600: this user only).
    pub socket_mode: u32,
    /// Who may use it and what jobs may run.
    pub config: ApiConfig,
    /// On TCP, the names the `Host` header may give besides the loopback ones (`*`: any), checked
    /// with the port actually bound.
    pub allowed_hosts: Vec<String>,
}

/// A running control plane: see the [module docs](self).
pub struct ControlPlane {
    cluster: Addr<ClusterActor>,
    /// Reads are answered from these, never by a message queued behind a round.
    views: Views,
    system: actix::System,
    runtime: tokio::runtime::Handle,
    /// The actors' thread: what the API ended with, when it served one.
    thread: Option<JoinHandle<Result<(), ControlError>>>,
    /// Hears when that thread ends.
    ended: oneshot::Receiver<()>,
}

/// What the actors' thread hands back once the control plane is up.
type Started = (Addr<ClusterActor>, actix::System, tokio::runtime::Handle);

impl ControlPlane {
    /// Starts the actors on their own thread (actix on a multi-thread tokio runtime): `api` first
    /// binds its address (a port in use fails here, with nothing started), then the cluster actor
    /// recovers from the journal when `settings` names one, then the API serves. Returns once the
    /// control plane answers.
    pub fn spawn(
        parts: Parts,
        settings: Settings,
        api: Option<Api>,
    ) -> Result<ControlPlane, ControlError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(ControlError::Runtime)?;
        let (ready, started) = std::sync::mpsc::sync_channel::<Result<Started, ControlError>>(1);
        let (ended_tx, ended) = oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("gangway-control-plane".into())
            .spawn(move || run(runtime, parts, settings, api, ready, ended_tx))
            .map_err(ControlError::Runtime)?;
        match started.recv() {
            Ok(Ok((cluster, system, runtime))) => Ok(ControlPlane {
                views: futures::executor::block_on(cluster.send(GetViews))?,
                cluster,
                system,
                runtime,
                thread: Some(thread),
                ended,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            // The thread ended without a word: it panicked.
            Err(_) => match thread.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(outcome) => Err(outcome.err().unwrap_or(ControlError::Stopped)),
            },
        }
    }

    /// The cluster actor's address, to send it any message from async code.
    pub fn cluster(&self) -> &Addr<ClusterActor> {
        &self.cluster
    }

    /// Sends `message` and waits for the answer.
    fn ask<M>(&self, message: M) -> Result<M::Result, ControlError>
    where
        M: Message + Send + 'static,
        M::Result: Send,
        ClusterActor: Handler<M>,
    {
        Ok(futures::executor::block_on(self.cluster.send(message))?)
    }

    /// Submits a job, arriving now; answers its id once it is journaled.
    pub fn submit(&self, request: JobRequest) -> Result<JobId, ControlError> {
        self.submit_keyed(request, None)
    }

    /// Submits a job with an idempotency key: submitted again with the same key, the same job's id
    /// comes back (and a different request under it is refused).
    pub fn submit_keyed(
        &self,
        request: JobRequest,
        key: Option<String>,
    ) -> Result<JobId, ControlError> {
        Ok(self.ask(Submit {
            request,
            at: None,
            key,
        })??)
    }

    /// What the control plane published last (after its last round, event batch or submission
    /// batch): jobs, servers and counters, read without waiting for the control plane.
    pub fn view(&self) -> Arc<View> {
        self.views.latest()
    }

    /// Every job the control plane knows, ended ones included (from [`ControlPlane::view`]).
    pub fn list(&self) -> Result<Vec<JobInfo>, ControlError> {
        Ok(self.view().jobs().cloned().collect())
    }

    /// One job, or `None` if there is no such job (from [`ControlPlane::view`]).
    pub fn job(&self, id: JobId) -> Result<Option<JobInfo>, ControlError> {
        Ok(self.view().job(id).cloned())
    }

    /// The servers, their GPUs, those out of service and the jobs on them (from
    /// [`ControlPlane::view`]).
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, ControlError> {
        Ok(self
            .view()
            .nodes()
            .iter()
            .map(|n| NodeInfo::clone(n))
            .collect())
    }

    /// Counters and latencies since the control plane started (from [`ControlPlane::view`]).
    pub fn stats(&self) -> Result<StatsSnapshot, ControlError> {
        Ok(self.view().stats().clone())
    }

    /// Cancels a job: it stops (its workers are told to) and never runs again.
    pub fn cancel(&self, id: JobId) -> Result<(), ControlError> {
        Ok(self.ask(Cancel(id))??)
    }

    /// Takes GPUs out of service (`cordoned`), or puts them back: the jobs on them checkpoint and
    /// move, and nothing new lands on them.
    pub fn cordon(&self, gpus: &[u32], cordoned: bool) -> Result<(), ControlError> {
        Ok(self.ask(Cordon {
            gpus: gpus.to_vec(),
            cordoned,
        })??)
    }

    /// Every job's moves from now on, as they happen.
    pub fn subscribe(&self) -> Result<Events, ControlError> {
        Ok(Events {
            receiver: self.ask(Subscribe)?.subscribe(),
            runtime: self.runtime.clone(),
        })
    }

    /// Waits until every job of `ids` has ended (finished, failed or cancelled); answers them in the
    /// order of `ids`. An id the control plane does not know is refused.
    pub fn wait(&self, ids: &[JobId]) -> Result<Vec<JobInfo>, ControlError> {
        self.wait_for(ids, None)
    }

    /// [`ControlPlane::wait`], for at most `timeout` (of wall time) when given.
    pub fn wait_for(
        &self,
        ids: &[JobId],
        timeout: Option<Duration>,
    ) -> Result<Vec<JobInfo>, ControlError> {
        let deadline = timeout.map(|t| (std::time::Instant::now() + t, t));
        // Subscribed before looking: no move between the look and the subscription is missed.
        let mut events = self.subscribe()?;
        loop {
            let jobs = ids
                .iter()
                .map(|&id| self.job(id)?.ok_or(Refusal::NoSuchJob(id).into()))
                .collect::<Result<Vec<JobInfo>, ControlError>>()?;
            let mut waiting: BTreeSet<JobId> = jobs
                .iter()
                .filter(|j| !j.phase.is_terminal())
                .map(|j| j.id)
                .collect();
            if waiting.is_empty() {
                return Ok(jobs);
            }
            // Until the last of them ends; if events were missed, look again.
            loop {
                let event = match deadline {
                    None => events.recv(),
                    Some((at, timeout)) => {
                        let left = at.saturating_duration_since(std::time::Instant::now());
                        events
                            .recv_timeout(left)
                            .and_then(|e| e.ok_or(ControlError::TimedOut(timeout)))
                    }
                };
                match event {
                    Ok(event) if event.to.is_terminal() => {
                        waiting.remove(&event.job);
                        if waiting.is_empty() {
                            break;
                        }
                    }
                    Ok(_) => {}
                    Err(ControlError::Lagged(_)) => break,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// Runs until `until` completes (a daemon's Ctrl-C) or the control plane ends by itself (its API
    /// failed), then shuts down. `until` runs on the control plane's runtime.
    pub fn serve_until(mut self, until: impl Future<Output = ()>) -> Result<(), ControlError> {
        let ended = &mut self.ended;
        self.runtime.block_on(async {
            tokio::select! {
                _ = until => {}
                _ = ended => {}
            }
        });
        self.stop()
    }

    /// Stops the actors (and the API) and waits for their thread to end. What the journal holds
    /// stays: a control plane started on it again recovers every job.
    pub fn shutdown(mut self) -> Result<(), ControlError> {
        self.stop()
    }

    /// Stops the system and joins its thread, once.
    fn stop(&mut self) -> Result<(), ControlError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        self.system.stop();
        match thread.join() {
            Ok(outcome) => outcome,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // A handle dropped while a panic unwinds must not panic again.
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "the control plane ended with an error");
        }
    }
}

/// The actors' thread: binds, starts the cluster actor, says it is up, then serves (or idles) until
/// the system is stopped.
fn run(
    runtime: tokio::runtime::Runtime,
    parts: Parts,
    settings: Settings,
    api: Option<Api>,
    ready: std::sync::mpsc::SyncSender<Result<Started, ControlError>>,
    // Dropped when the thread ends, which its receiver hears.
    _ended: oneshot::Sender<()>,
) -> Result<(), ControlError> {
    let handle = runtime.handle().clone();
    let system = actix::System::with_tokio_rt(move || runtime);
    let stopped = system.stop_future();
    system.block_on(async move {
        let started = async {
            // Before anything starts: a port in use fails here, with nothing to undo.
            let api = match api {
                Some(api) => {
                    let bound = Bound::bind(&api.listen, api.socket_mode).map_err(|error| {
                        ControlError::Listen {
                            listen: api.listen.to_string(),
                            error,
                        }
                    })?;
                    let mut config = api.config;
                    if let Bound::Tcp(_) = &bound {
                        let port = bound.port().unwrap_or(0);
                        config.hosts = Some(HostCheck::new(port, api.allowed_hosts));
                    }
                    Some((bound, config))
                }
                None => None,
            };
            let cluster = ClusterActor::start(parts, settings)?;
            Ok::<_, ControlError>((cluster, api))
        };
        let (cluster, api) = match started.await {
            Ok(started) => started,
            Err(e) => {
                let _ = ready.send(Err(e));
                return Ok(());
            }
        };
        if ready
            .send(Ok((cluster.clone(), actix::System::current(), handle)))
            .is_err()
        {
            return Ok(());
        }
        match api {
            Some((bound, config)) => tokio::select! {
                served = api::serve(bound, cluster, config) => served.map_err(ControlError::Serve),
                _ = stopped => Ok(()),
            },
            None => {
                let _ = stopped.await;
                Ok(())
            }
        }
    })
}

/// Every job's moves, from when it was subscribed: see [`ControlPlane::subscribe`].
pub struct Events {
    receiver: broadcast::Receiver<JobEvent>,
    runtime: tokio::runtime::Handle,
}

impl Events {
    /// The next move, waiting for it. [`ControlError::Lagged`] says that the subscriber fell behind
    /// (the next call goes on from the oldest move kept); [`ControlError::Stopped`], that the
    /// control plane has stopped.
    pub fn recv(&mut self) -> Result<JobEvent, ControlError> {
        futures::executor::block_on(self.next())
    }

    /// [`Events::recv`], for at most `timeout`: `None` when nothing moved in that time.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Option<JobEvent>, ControlError> {
        // The timer is the control plane's runtime's.
        let _context = self.runtime.enter();
        match futures::executor::block_on(tokio::time::timeout(timeout, self.next())) {
            Ok(event) => event.map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The next move, for async code.
    pub async fn next(&mut self) -> Result<JobEvent, ControlError> {
        self.receiver.recv().await.map_err(|e| match e {
            broadcast::error::RecvError::Lagged(missed) => ControlError::Lagged(missed),
            broadcast::error::RecvError::Closed => ControlError::Stopped,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gangway_core::cluster::Cluster;
    use gangway_core::engine::EngineConfig;
    use gangway_core::job::Names;
    use gangway_core::placement::PackingPlacer;
    use gangway_core::policy::{self, PolicyConfig};
    use gangway_core::throughput::DurationModel;

    use super::*;
    use crate::cluster::TimeSource;
    use crate::executor::SimExecutor;
    use crate::lifecycle::Phase;

    /// Long enough for anything here to happen, short enough that a hang fails the test.
    const PATIENCE: Option<Duration> = Some(Duration::from_secs(60));

    /// FIFO on one server of 4 GPUs with simulated workers, an hour of work a wall second.
    fn plane() -> ControlPlane {
        let parts = Parts {
            cluster: Arc::new(Cluster::parse_spec("v100=4", 4).unwrap()),
            model: Arc::new(DurationModel::uniform(1)),
            names: Names::default(),
            policy: policy::build("fifo", &PolicyConfig::default(), &DurationModel::uniform(1))
                .unwrap(),
            placer: Box::new(PackingPlacer),
            executor: Box::new(SimExecutor::default()),
            probes: Vec::new(),
            health_every: Duration::from_secs(60),
        };
        let engine = EngineConfig {
            round_length: 60.0,
            schedule_on_arrival: true,
            schedule_on_completion: true,
            ..EngineConfig::default()
        };
        let settings = Settings::new(engine, TimeSource::Wall { time_scale: 3600.0 });
        ControlPlane::spawn(parts, settings, None).unwrap()
    }

    #[test]
    fn a_control_plane_is_driven_through_its_handle() {
        let plane = plane();
        let mut events = plane.subscribe().unwrap();
        // FIFO: the short job runs first; the whole-server one waits for it, then runs for ever.
        let short = plane.submit(JobRequest::new("toy", 2, 600.0)).unwrap();
        let long = plane.submit(JobRequest::new("toy", 4, 1e9)).unwrap();
        let listed: Vec<JobId> = plane.list().unwrap().iter().map(|j| j.id).collect();
        assert_eq!(listed, [short, long]);

        let done = plane.wait_for(&[short], PATIENCE).unwrap();
        assert_eq!(done[0].phase, Phase::Finished);
        assert!(done[0].finished.is_some());
        // The long job takes the whole server once the short one is gone.
        let mut moves = Vec::new();
        while moves.last() != Some(&(long, Phase::Running)) {
            let event = events.recv_timeout(PATIENCE.unwrap()).unwrap();
            let event = event.expect("the long job never started");
            moves.push((event.job, event.to));
        }
        // A move is published after the view that shows it.
        assert_eq!(plane.job(long).unwrap().unwrap().phase, Phase::Running);
        let node = &plane.nodes().unwrap()[0];
        assert_eq!((node.free, &node.jobs[..]), (0, &[long][..]));

        plane.cancel(long).unwrap();
        let cancelled = plane.wait_for(&[long], PATIENCE).unwrap();
        assert_eq!(cancelled[0].phase, Phase::Cancelled);
        // Refusals are typed.
        assert!(matches!(
            plane.cancel(long),
            Err(ControlError::Refused(Refusal::Ended(id))) if id == long
        ));
        assert!(matches!(
            plane.wait(&[JobId(99)]),
            Err(ControlError::Refused(Refusal::NoSuchJob(JobId(99))))
        ));
        assert!(matches!(
            plane.cordon(&[7], true),
            Err(ControlError::Refused(Refusal::Invalid { .. }))
        ));
        plane.cordon(&[3], true).unwrap();
        assert_eq!(plane.nodes().unwrap()[0].out_of_service.len(), 1);
        assert_eq!(plane.stats().unwrap().counters.finished, 1);

        plane.shutdown().unwrap();
        // Every move was published, in order; then the stream ends.
        let stopped = loop {
            match events.recv() {
                Ok(event) => moves.push((event.job, event.to)),
                Err(e) => break e,
            }
        };
        assert!(matches!(stopped, ControlError::Stopped), "{stopped}");
        let of = |job| -> Vec<Phase> {
            moves
                .iter()
                .filter(|(j, _)| *j == job)
                .map(|(_, p)| *p)
                .collect()
        };
        assert_eq!(of(short).last(), Some(&Phase::Finished), "{moves:?}");
        assert!(of(short).contains(&Phase::Running), "{moves:?}");
        assert_eq!(of(long).last(), Some(&Phase::Cancelled), "{moves:?}");
    }

    #[test]
    fn a_dropped_handle_stops_its_control_plane() {
        let plane = plane();
        let mut events = plane.subscribe().unwrap();
        let cluster = plane.cluster().clone();
        drop(plane);
        assert!(!cluster.connected(), "the actors outlived their handle");
        assert!(matches!(events.recv(), Err(ControlError::Stopped)));
    }
}
