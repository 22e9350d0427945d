//! Serving the API's connections, with bounds, so that idle, slow or greedy clients cannot starve
//! the others.
//!
//! - **Header timeout**: a connection that has not sent a whole request head within
//!   [`Limits::header_timeout`] of connecting, or of its previous answer (keep-alive), is closed. This
//!   covers idle connections and slow-header ("slowloris") clients alike.
//! - **Body timeout**: a request's whole body must arrive within [`Limits::body_timeout`] of its
//!   head, however it is cut into reads; past it, reading the body fails with [`BodyTimeout`] (the
//!   API answers 408) and the connection closes after the answer.
//! - **A share per peer**: one peer (a Unix socket's user, a TCP address) holds at most
//!   [`Limits::per_peer`] connections. Beyond it, a new connection of its own closes one of its
//!   others, so a peer that floods the daemon competes only with itself.
//! - **Connection limit**: at most [`Limits::max_connections`] at once. A new connection beyond it
//!   closes one of the peer that holds the most: the one that has waited longest among those that
//!   lose no answer, that is, idle ones and ones still sending a body (a client trickling a body is
//!   no better than an idle one). Connections whose answer is being written (event streams) are
//!   never closed; if all are, the new connection is.
//! - **Malformed heads** get a JSON answer ([`Gate`]), not hyper's empty one.
//! - **Accept errors** (out of file descriptors) close a connection as above, back off up to a
//!   second, and are logged once a minute with a count, not on every retry.
//!
//! Every request carries, as an extension, the [`Submitter`] of its connection: the peer's user on
//! a Unix socket (from the kernel), the daemon's own user on TCP (only the token's reader gets in).

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;
use tokio::time::Sleep;
use tower::ServiceExt;

mod gate;

pub use gate::{Gate, MAX_HEAD_BYTES, MAX_HEADERS};

use crate::api::Listen;
use crate::request::Submitter;

/// How many connections, and how long a client may take.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections one peer may hold at once; `None`: half of `max_connections`, rounded up.
    pub max_per_peer: Option<usize>,
    /// Time a connection has to send a whole request head, from connecting or from its previous
    /// answer.
    pub header_timeout: Duration,
    /// Time a request has to send its whole body, from the end of its head.
    pub body_timeout: Duration,
}

impl Limits {
    /// The connections one peer may hold: at least 1, at most `max_connections`.
    pub fn per_peer(&self) -> usize {
        let all = self.max_connections.max(1);
        self.max_per_peer.unwrap_or(all.div_ceil(2)).clamp(1, all)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            max_per_peer: None,
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
    /// A TCP listener.
    Tcp(TcpListener),
    /// A Unix socket's listener, and the socket file's path.
    Unix(UnixListener, PathBuf),
}

/// Binds a Unix socket at `path` with `mode`, with no moment at which it has another mode or its
/// name could be swapped for a link: it is bound and given its mode in a new directory only this
/// user may enter, beside `path`, then linked into place (link(2) never replaces anything there)
/// and unlinked from the directory. (Bound at `path` and then changed, it was open to every user for
/// a moment under a loose umask, and the change followed a link someone in a directory they could
/// write put at its name.) The directory's name is short: a socket's path is limited to 107 bytes.
fn bind_private(path: &Path, mode: u32) -> io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let staging = parent.join(format!(".gw{:x}", nanos ^ std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&staging)?;
    let staged = staging.join("s");
    let bound = std::os::unix::net::UnixListener::bind(&staged).and_then(|socket| {
        std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(mode))?;
        std::fs::hard_link(&staged, path).map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "{} exists: another daemon's socket, or a file that is not one",
                    path.display()
                ),
            ),
            _ => e,
        })?;
        Ok(socket)
    });
    let _ = std::fs::remove_file(&staged);
    let _ = std::fs::remove_dir(&staging);
    bound
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
                use std::os::unix::fs::FileTypeExt;
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                    std::fs::remove_file(path)?;
                }
                let socket = bind_private(path, socket_mode)?;
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

    /// Where it listens, for logs: the TCP address, or `unix:PATH`.
    pub fn describe(&self) -> String {
        match self {
            Bound::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "TCP".into(), |a| a.to_string()),
            Bound::Unix(_, path) => format!("unix:{}", path.display()),
        }
    }

    /// The socket file's path, if on a Unix socket.
    pub fn unix_path(&self) -> Option<&Path> {
        match self {
            Bound::Unix(_, path) => Some(path),
            Bound::Tcp(_) => None,
        }
    }
}

/// Who a connection comes from: each peer may hold only its share of the connections
/// ([`Limits::per_peer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A Unix socket's peer user, from the kernel.
    User(u32),
    /// A TCP peer's address: an IPv6 one by its /64 network, which one host usually holds whole.
    Address(IpAddr),
}

impl Peer {
    /// The peer at `ip`.
    pub fn at(ip: IpAddr) -> Peer {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Peer::Address(v4.into()),
                None => {
                    let s = v6.segments();
                    Peer::Address(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0).into())
                }
            },
            v4 => Peer::Address(v4),
        }
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::User(uid) => write!(f, "uid {uid}"),
            Peer::Address(IpAddr::V6(net)) => write!(f, "{net}/64"),
            Peer::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// One connection's standing.
struct Slot {
    peer: Peer,
    /// Requests whose head has arrived and whose answer is still being written.
    requests: u32,
    /// Of those, the ones whose body is still arriving.
    receiving: u32,
    /// When its present wait began (a tick of [`Slots::clock`]): connecting or its last answer
    /// while idle, its head while a body arrives.
    since: u64,
    evict: Arc<Notify>,
}

impl Slot {
    /// Whether closing it loses no answer: it is idle, or still sending a body (so that clients
    /// trickling bodies hold slots no better than idle ones).
    fn evictable(&self) -> bool {
        self.requests == 0 || self.receiving > 0
    }
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Full {
    /// Its peer holds its share, every one of them answering.
    Peer(Peer, usize),
    /// Every connection is answering.
    All(usize),
}

impl std::fmt::Display for Full {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Full::Peer(peer, share) => write!(
                f,
                "{peer} holds its share of {share} connections, all answering; a new one was closed"
            ),
            Full::All(limit) => write!(
                f,
                "all {limit} connections are answering; a new one was closed"
            ),
        }
    }
}

/// The open connections, and how many each peer holds.
#[derive(Default)]
struct Slots {
    conns: BTreeMap<u64, Slot>,
    peers: HashMap<Peer, usize>,
    next: u64,
    clock: u64,
}

impl Slots {
    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn held_by(&self, peer: Peer) -> usize {
        self.peers.get(&peer).copied().unwrap_or(0)
    }

    /// The connection to close for room (of `peer`'s, if given): an evictable one of the peer that
    /// holds the most, the one waiting longest.
    fn victim(&self, peer: Option<Peer>) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, s)| s.evictable() && peer.is_none_or(|p| p == s.peer))
            .min_by_key(|(_, s)| (Reverse(self.held_by(s.peer)), s.since))
            .map(|(&id, _)| id)
    }

    /// Closes connection `id`.
    fn evict(&mut self, id: u64) {
        if let Some(slot) = self.remove(id) {
            slot.evict.notify_one();
        }
    }

    fn remove(&mut self, id: u64) -> Option<Slot> {
        let slot = self.conns.remove(&id)?;
        if let Some(held) = self.peers.get_mut(&slot.peer) {
            *held -= 1;
            if *held == 0 {
                self.peers.remove(&slot.peer);
            }
        }
        Some(slot)
    }

    /// With every connection answering, the longest-answering one of the peer that holds the most,
    /// when it holds at least two more than `newcomer` does: answers are lost only to even the
    /// peers' holdings out, so that peers holding every slot with answers they never finish
    /// reading (event streams, a list read a byte at a time) cannot shut everyone else out.
    fn hog(&self, newcomer: Peer) -> Option<u64> {
        let (&hog, &held) = self.peers.iter().max_by_key(|&(_, &held)| held)?;
        if held < self.held_by(newcomer) + 2 {
            return None;
        }
        self.conns
            .iter()
            .filter(|(_, s)| s.peer == hog)
            .min_by_key(|(_, s)| s.since)
            .map(|(&id, _)| id)
    }

    /// Closes the connection [`Slots::victim`] names; false when none may be closed.
    fn evict_one(&mut self, peer: Option<Peer>) -> bool {
        let Some(id) = self.victim(peer) else {
            return false;
        };
        self.evict(id);
        true
    }

    /// Admits a connection from `peer`, closing one of its own beyond its share, and one of the
    /// largest holder's at the limit (an answering one only as [`Slots::hog`] says).
    fn admit(&mut self, peer: Peer, limits: &Limits) -> Result<(u64, Arc<Notify>), Full> {
        let share = limits.per_peer();
        while self.held_by(peer) >= share {
            if !self.evict_one(Some(peer)) {
                return Err(Full::Peer(peer, share));
            }
        }
        let limit = limits.max_connections.max(1);
        while self.conns.len() >= limit {
            if !self.evict_one(None) {
                let Some(id) = self.hog(peer) else {
                    return Err(Full::All(limit));
                };
                self.evict(id);
            }
        }
        let id = self.next;
        self.next += 1;
        let evict = Arc::new(Notify::new());
        let since = self.tick();
        self.conns.insert(
            id,
            Slot {
                peer,
                requests: 0,
                receiving: 0,
                since,
                evict: evict.clone(),
            },
        );
        *self.peers.entry(peer).or_default() += 1;
        Ok((id, evict))
    }
}

/// The connection table shared by the accept loop and the connections.
#[derive(Clone, Default)]
struct Table(Arc<Mutex<Slots>>);

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request's head arrived on connection `id`; `receiving` if its body is still to come.
    fn begin(&self, id: u64, receiving: bool) -> (Busy, Option<Receiving>) {
        let mut slots = self.lock();
        let now = slots.tick();
        if let Some(slot) = slots.conns.get_mut(&id) {
            slot.requests += 1;
            slot.receiving += u32::from(receiving);
            slot.since = now;
        }
        let busy = Busy {
            table: self.clone(),
            id,
        };
        let receiving = receiving.then(|| Receiving {
            table: self.clone(),
            id,
        });
        (busy, receiving)
    }

    fn remove(&self, id: u64) {
        self.lock().remove(id);
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
            slot.requests = slot.requests.saturating_sub(1);
            if slot.requests == 0 {
                slot.since = now;
            }
        }
    }
}

/// A request body still arriving on connection `id` (dropped once it has all arrived, or is
/// dropped unread).
struct Receiving {
    table: Table,
    id: u64,
}

impl Drop for Receiving {
    fn drop(&mut self) {
        if let Some(slot) = self.table.lock().conns.get_mut(&self.id) {
            slot.receiving = slot.receiving.saturating_sub(1);
        }
    }
}

/// A request body that must arrive whole within the body timeout of its head: past it, reading
/// fails with [`BodyTimeout`].
struct Metered {
    inner: Incoming,
    /// While the body arrives: its slot's mark, and the deadline.
    arriving: Option<(Receiving, Pin<Box<Sleep>>)>,
    timeout: Duration,
}

/// A request body did not arrive within the body timeout (a 408).
#[derive(Clone, Copy, Debug, thiserror::Error)]
#[error("the body did not arrive within {} s", .0.as_secs_f64())]
pub struct BodyTimeout(pub Duration);

impl HttpBody for Metered {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let Some((_, deadline)) = &mut this.arriving else {
            return Pin::new(&mut this.inner)
                .poll_frame(cx)
                .map_err(axum::BoxError::from);
        };
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if deadline.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.arriving = None;
                // The connection closes after the answer: hyper does not read what is left.
                Poll::Ready(Some(Err(BodyTimeout(this.timeout).into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.arriving = None;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            done => {
                this.arriving = None;
                done.map_err(axum::BoxError::from)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
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
        per_peer = limits.per_peer(),
        "API listening"
    );
    let table = Table::default();
    let daemon = Submitter::this_process();
    let mut errors = AcceptErrors::default();
    let mut refusals = AcceptErrors::default();
    let mut backoff = Duration::from_millis(5);
    loop {
        let accepted = match &bound {
            Bound::Tcp(listener) => listener.accept().await.map(|(stream, addr)| {
                let _ = stream.set_nodelay(true);
                Some((Stream::Tcp(stream), Peer::at(addr.ip()), daemon))
            }),
            Bound::Unix(listener, _) => listener.accept().await.map(|(stream, _)| {
                let cred = stream.peer_cred().ok()?;
                let submitter = Submitter {
                    uid: cred.uid(),
                    gid: cred.gid(),
                };
                Some((Stream::Unix(stream), Peer::User(cred.uid()), submitter))
            }),
        };
        let (stream, peer, submitter) = match accepted {
            Ok(Some(accepted)) => {
                backoff = Duration::from_millis(5);
                accepted
            }
            Ok(None) => continue,
            Err(e) if per_connection(&e) => continue,
            Err(e) => {
                // Out of descriptors (or memory): make room, and wait a little.
                table.lock().evict_one(None);
                errors.note(&e);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        let admitted = table.lock().admit(peer, &limits);
        let (id, evict) = match admitted {
            Ok(admitted) => admitted,
            Err(full) => {
                refusals.note(&io::Error::other(full.to_string()));
                continue;
            }
        };
        let (app, table, limits) = (app.clone(), table.clone(), limits.clone());
        tokio::spawn(async move {
            let body_timeout = limits.body_timeout;
            let service = {
                let table = table.clone();
                hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(submitter);
                    let (busy, receiving) = table.begin(id, !request.body().is_end_stream());
                    let request = request.map(|inner| {
                        Body::new(Metered {
                            inner,
                            arriving: receiving
                                .map(|r| (r, Box::pin(tokio::time::sleep(body_timeout)))),
                            timeout: body_timeout,
                        })
                    });
                    let app = app.clone();
                    async move {
                        let response = app
                            .oneshot(request)
                            .await
                            .unwrap_or_else(|never: Infallible| match never {});
                        Ok::<_, Infallible>(response.map(|inner| Tracked { inner, _busy: busy }))
                    }
                })
            };
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
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

/// Serves one connection until it closes, or until it is evicted. Its bytes pass through a
/// [`Gate`]: a malformed request head ends the connection gracefully with a JSON answer.
async fn serve_one<I, Svc>(
    http: &hyper::server::conn::http1::Builder,
    stream: I,
    service: Svc,
    evict: &Notify,
) -> Result<(), hyper::Error>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    Svc: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<Tracked>,
            Error = Infallible,
        >,
{
    let refused = Arc::new(Notify::new());
    let gate = Gate::new(stream, refused.clone());
    let connection = http.serve_connection(TokioIo::new(gate), service);
    tokio::pin!(connection);
    let mut ending = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => return served,
            () = evict.notified() => return Ok(()),
            () = refused.notified(), if !ending => {
                // hyper finishes the answer in progress, then shuts down: the gate answers then.
                connection.as_mut().graceful_shutdown();
                ending = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket is bound with its mode from the start and linked into place: never over a file
    /// that is not a socket, over a stale socket, and leaving nothing beside it.
    #[test]
    fn a_socket_is_bound_with_its_mode_and_never_over_another_file() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("api.sock");
        let socket = bind_private(&path, 0o660).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        let connected = std::os::unix::net::UnixStream::connect(&path);
        assert!(connected.is_ok(), "it listens at its name");
        drop(socket);
        // The socket left behind (as by a crashed daemon) is replaced; a regular file is not ours.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let again = runtime.block_on(async { Bound::bind(&Listen::Unix(path.clone()), 0o600) });
        assert!(again.is_ok(), "a stale socket is replaced");
        drop(again);
        let file = dir.path().join("notes.txt");
        std::fs::write(&file, "mine").unwrap();
        let err = bind_private(&file, 0o600).unwrap_err();
        assert!(
            err.to_string()
                .contains("exists: another daemon's socket, or a file that is not one"),
            "{err}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 2, "no staging directory left: {left:?}");
    }

    fn limits(max_connections: usize, max_per_peer: Option<usize>) -> Limits {
        Limits {
            max_connections,
            max_per_peer,
            ..Limits::default()
        }
    }

    fn ip(text: &str) -> Peer {
        Peer::at(text.parse().unwrap())
    }

    #[test]
    fn a_share_is_half_the_slots_unless_told_and_always_one_to_all() {
        assert_eq!(limits(8, None).per_peer(), 4);
        assert_eq!(limits(7, None).per_peer(), 4);
        assert_eq!(limits(1, None).per_peer(), 1);
        assert_eq!(limits(8, Some(20)).per_peer(), 8);
        assert_eq!(limits(8, Some(0)).per_peer(), 1);
        // IPv6 peers by their /64, mapped IPv4 as IPv4.
        assert_eq!(ip("2001:db8::1"), ip("2001:db8::ffff:2"));
        assert_ne!(ip("2001:db8::1"), ip("2001:db8:0:1::1"));
        assert_eq!(ip("::ffff:127.0.0.2"), ip("127.0.0.2"));
    }

    #[test]
    fn a_peer_trickling_bodies_competes_only_with_itself() {
        let table = Table::default();
        let limits = limits(8, None);
        let (flood, other) = (ip("127.0.0.2"), Peer::User(1000));
        let mut held = Vec::new();
        // Each of the flood's connections sends a head, then trickles its body.
        for _ in 0..20 {
            let (id, _) = table.lock().admit(flood, &limits).unwrap();
            held.push((id, table.begin(id, true)));
        }
        assert_eq!(table.lock().held_by(flood), 4, "its share of 8");
        let (evicted, kept) = held.split_at(16);
        assert!(
            evicted
                .iter()
                .all(|(id, _)| !table.lock().conns.contains_key(id))
        );
        assert!(
            kept.iter()
                .all(|(id, _)| table.lock().conns.contains_key(id))
        );
        // Another peer fills the rest, and the table is full: the flood's newcomer closes its own.
        let mine: Vec<_> = (0..4)
            .map(|_| table.lock().admit(other, &limits).unwrap().0)
            .collect();
        let (id, _) = table.lock().admit(flood, &limits).unwrap();
        let slots = table.lock();
        assert!(slots.conns.contains_key(&id));
        assert!(mine.iter().all(|id| slots.conns.contains_key(id)));
        assert_eq!((slots.held_by(flood), slots.conns.len()), (4, 8));
    }

    #[test]
    fn at_the_limit_the_largest_holder_loses_its_longest_wait_then_an_answer_to_a_smaller_peer() {
        let table = Table::default();
        let limits = limits(4, Some(4));
        let (big, small, new) = (Peer::User(1), Peer::User(2), Peer::User(3));
        let admit = |peer| table.lock().admit(peer, &limits).map(|(id, _)| id);
        let answering = admit(big).unwrap();
        let (busy, receiving) = table.begin(answering, true);
        drop(receiving); // its whole body arrived: it is answering
        let trickling = admit(big).unwrap();
        let _trickle = table.begin(trickling, true);
        let idle = admit(big).unwrap();
        let small_idle = admit(small).unwrap();
        // The trickler has waited longer than the idle one (whose wait began after).
        let first = admit(new).unwrap();
        let slots = table.lock();
        assert!(
            !slots.conns.contains_key(&trickling),
            "the longest wait of the largest holder"
        );
        assert!(slots.conns.contains_key(&idle) && slots.conns.contains_key(&small_idle));
        drop(slots);
        let second = admit(new).unwrap();
        assert!(!table.lock().conns.contains_key(&idle));
        // Once every connection answers, a newcomer closes the longest answer of a peer that holds
        // two more than it (`new`, two), and none when the holdings are even.
        let mut answers: Vec<_> = [small_idle, first, second]
            .into_iter()
            .map(|id| table.begin(id, false))
            .collect();
        let ninth = admit(Peer::User(9)).unwrap();
        assert!(
            !table.lock().conns.contains_key(&first),
            "new's longest answer"
        );
        assert!(table.lock().conns.contains_key(&second));
        answers.push(table.begin(ninth, false));
        assert_eq!(admit(Peer::User(10)), Err(Full::All(4)));
        // An answer written makes its connection idle, and closable, again.
        drop(busy);
        assert!(admit(Peer::User(10)).is_ok());
        assert!(!table.lock().conns.contains_key(&answering));
    }

    #[test]
    fn a_peer_whose_share_is_all_answering_is_refused() {
        let table = Table::default();
        let limits = limits(8, Some(2));
        let peer = ip("10.0.0.1");
        let ids: Vec<_> = (0..2)
            .map(|_| table.lock().admit(peer, &limits).unwrap().0)
            .collect();
        let _busy: Vec<_> = ids.iter().map(|&id| table.begin(id, false)).collect();
        assert_eq!(
            table.lock().admit(peer, &limits).map(|(id, _)| id),
            Err(Full::Peer(peer, 2))
        );
        assert!(table.lock().admit(ip("10.0.0.2"), &limits).is_ok());
        // A closed connection frees its peer's share.
        table.remove(ids[0]);
        assert!(table.lock().admit(peer, &limits).is_ok());
    }
}
