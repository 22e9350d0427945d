//! Serving the API's connections, with bounds, so that idle or slow clients cannot starve it.
//!
//! - **Header timeout**: a connection that has not sent a whole request head within
//!   [`Limits::header_timeout`] of connecting, or of its previous answer (keep-alive), is closed. This
//!   covers idle connections and slow-header ("slowloris") clients alike.
//! - **Body timeout**: a request body must arrive within [`Limits::body_timeout`] (the API's handlers
//!   read bodies with it; 408 otherwise).
//! - **Connection limit**: at most [`Limits::max_connections`] at once. A new connection beyond it
//!   closes the connection that has been idle longest (connected, with no request in progress), so
//!   that a flood of idle sockets never locks out `/healthz`; if every connection is busy (event
//!   streams), the new one is closed.
//! - **Accept errors** (out of file descriptors) close the oldest idle connection, back off up to a
//!   second, and are logged once a minute with a count, not on every retry.
//!
//! Every request carries, as an extension, the [`Submitter`] of its connection: the peer's user on
//! a Unix socket (from the kernel), the daemon's own user on TCP (only the token's reader gets in).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;
use tower::ServiceExt;

use crate::api::Listen;
use crate::request::Submitter;

/// How many connections, and how long a client may take.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
        }
    }
}

/// Raises this process's soft limit on open files to its hard limit (as Go programs do at start),
/// and returns the soft limit now in force.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) and setrlimit(2) with a valid pointer to an rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 1024;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    limit.rlim_cur
}

/// A listener, bound before anything else starts (so that a port in use fails at once).
pub enum Bound {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Bound {
    /// Binds `listen`; a Unix socket gets `socket_mode` (0o600: this user only).
    pub fn bind(listen: &Listen, socket_mode: u32) -> io::Result<Bound> {
        match listen {
            Listen::Tcp(addr) => {
                let socket = std::net::TcpListener::bind(addr)?;
                socket.set_nonblocking(true)?;
                Ok(Bound::Tcp(TcpListener::from_std(socket)?))
            }
            Listen::Unix(path) => {
                // A socket left by a crashed daemon would make bind fail; anything else is not ours.
                use std::os::unix::fs::{FileTypeExt, PermissionsExt};
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    std::fs::remove_file(path)?;
                }
                let socket = std::os::unix::net::UnixListener::bind(path)?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(socket_mode))?;
                socket.set_nonblocking(true)?;
                Ok(Bound::Unix(UnixListener::from_std(socket)?, path.clone()))
            }
        }
    }

    /// The TCP port, if on TCP.
    pub fn port(&self) -> Option<u16> {
        match self {
            Bound::Tcp(l) => l.local_addr().ok().map(|a| a.port()),
            Bound::Unix(..) => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Bound::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "TCP".into(), |a| a.to_string()),
            Bound::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }

    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            Bound::Unix(_, path) => Some(path),
            Bound::Tcp(_) => None,
        }
    }
}

/// One connection's standing.
struct Slot {
    /// Requests whose answer is still being written.
    busy: u32,
    /// When it last finished or began a request (a tick of [`Slots::clock`]).
    active: u64,
    evict: Arc<Notify>,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Slots {
    conns: BTreeMap<u64, Slot>,
    next: u64,
    clock: u64,
}

impl Slots {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Closes the connection idle longest; false when every connection is busy.
    fn evict_idle(&mut self) -> bool {
        let Some((&id, _)) = self
            .conns
            .iter()
            .filter(|(_, s)| s.busy == 0)
            .min_by_key(|(_, s)| s.active)
        else {
            return false;
        };
        let slot = self.conns.remove(&id).expect("found");
        slot.evict.notify_one();
        true
    }
}

/// The connection table shared by the accept loop and the connections.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<Slots>>);

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits a connection (evicting an idle one at the limit); `None` when all are busy.
    fn admit(&self, limit: usize) -> Option<(u64, Arc<Notify>)> {
        let mut slots = self.lock();
        while slots.conns.len() >= limit.max(1) {
            if !slots.evict_idle() {
                return None;
            }
        }
        let id = slots.next;
        slots.next += 1;
        let evict = Arc::new(Notify::new());
        let active = slots.tick();
        slots.conns.insert(
            id,
            Slot {
                busy: 0,
                active,
                evict: evict.clone(),
            },
        );
        Some((id, evict))
    }

    fn begin(&self, id: u64) -> Busy {
        let mut slots = self.lock();
        let now = slots.tick();
        if let Some(slot) = slots.conns.get_mut(&id) {
            slot.busy += 1;
            slot.active = now;
        }
        Busy {
            table: self.clone(),
            id,
        }
    }

    fn remove(&self, id: u64) {
        self.lock().conns.remove(&id);
    }
}

/// A request in progress on connection `id`, until its answer is written (dropped with the body).
struct Busy {
    table: Table,
    id: u64,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut slots = self.table.lock();
        let now = slots.tick();
        if let Some(slot) = slots.conns.get_mut(&self.id) {
            slot.busy = slot.busy.saturating_sub(1);
            slot.active = now;
        }
    }
}

/// An answer's body that keeps its connection busy until it is written.
struct Tracked {
    inner: Body,
    _busy: Busy,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Logs accept errors at most once a minute, with how many there were.
#[derive(Default)]
struct AcceptErrors {
    last_logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptErrors {
    fn note(&mut self, error: &io::Error) {
        if self
            .last_logged
            .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            self.unlogged += 1;
            return;
        }
        tracing::error!(
            %error,
            since_last_report = self.unlogged,
            "cannot accept API connections (retrying with backoff; idle connections are closed to make room)"
        );
        self.last_logged = Some(Instant::now());
        self.unlogged = 0;
    }
}

/// Whether an accept error concerns only the connection being accepted (retry at once).
fn per_connection(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Serves `app` on `bound` until the process ends.
pub async fn serve(bound: Bound, app: Router, limits: Limits) -> io::Result<()> {
    tracing::info!(
        listen = %bound.describe(),
        max_connections = limits.max_connections,
        "API listening"
    );
    let table = Table::default();
    let daemon = Submitter::this_process();
    let mut errors = AcceptErrors::default();
    let mut refusals = AcceptErrors::default();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = match &bound {
            Bound::Tcp(listener) => listener.accept().await.map(|(stream, _)| {
                let _ = stream.set_nodelay(true);
                (Stream::Tcp(stream), Some(daemon))
            }),
            Bound::Unix(listener, _) => listener.accept().await.map(|(stream, _)| {
                let peer = stream.peer_cred().ok().map(|c| Submitter {
                    uid: c.uid(),
                    gid: c.gid(),
                });
                (Stream::Unix(stream), peer)
            }),
        };
        let (stream, submitter) = match accepted {
            Ok(accepted) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Err(e) if per_connection(&e) => continue,
            Err(e) => {
                // Out of descriptors (or memory): make room, and wait a little.
                table.lock().evict_idle();
                errors.note(&e);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let Some(submitter) = submitter else {
            continue;
        };
        let Some((id, evict)) = table.admit(limits.max_connections) else {
            refusals.note(&io::Error::other(format!(
                "all {} connections are busy; a new one was closed",
                limits.max_connections
            )));
            continue;
        };
        let (app, table, header_timeout) = (app.clone(), table.clone(), limits.header_timeout);
        tokio::spawn(async move {
            let service = {
                let table = table.clone();
                hyper::service::service_fn(
                    move |mut request: hyper::Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(submitter);
                        let busy = table.begin(id);
                        let app = app.clone();
                        async move {
                            let response = app
                                .oneshot(request.map(Body::new))
                                .await
                                .unwrap_or_else(|never: Infallible| match never {});
                            Ok::<_, Infallible>(
                                response.map(|inner| Tracked { inner, _busy: busy }),
                            )
                        }
                    },
                )
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let served = match stream {
                Stream::Tcp(s) => serve_one(&http, s, service, &evict).await,
                Stream::Unix(s) => serve_one(&http, s, service, &evict).await,
            };
            if let Err(e) = served {
                tracing::debug!(error = %e, "API connection ended with an error");
            }
            table.remove(id);
        });
    }
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

/// Serves one connection until it closes, or until it is evicted.
async fn serve_one<I, Svc>(
    http: &hyper::server::conn::http1::Builder,
    stream: I,
    service: Svc,
    evict: &Notify,
) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<Tracked>,
            Error = Infallible,
        >,
{
    let connection = http.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        served = connection.as_mut() => served,
        () = evict.notified() => Ok(()),
    }
}
