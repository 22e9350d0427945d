//! The HTTP/JSON API (axum), on a Unix socket or on TCP (loopback unless the operator allows more).
//!
//! | method and path | does | answers |
//! |---|---|---|
//! | `POST /jobs` | submits a [`JobRequest`]; an `Idempotency-Key` header makes retries safe | 201 `{"id": N}` (the same N for the same key); 400, 401, 403, 408, 411, 413, 415 or 422 with `{"error": ...}` |
//! | `GET /jobs` | lists every job, or with `?phase=running,pending&after=ID&limit=N` a page of them (a `Link: <..>; rel="next"` header when more remain) | 200 `[JobInfo]`; 400 for a bad parameter |
//! | `GET /jobs/{id}` | shows one | 200 `JobInfo`; 404 |
//! | `DELETE /jobs/{id}` | cancels it (its submitter, the daemon's user or root) | 200 `{"cancelled": N}`; 403; 404; 409 when it already ended |
//! | `POST /gpus/cordon` | takes `{"gpus": [..]}` out of service: their jobs checkpoint and move (the daemon's user or root) | 200; 403; 422 for an unknown GPU |
//! | `POST /gpus/uncordon` | puts them back | 200; 403; 422 |
//! | `GET /events` | job transitions as server-sent events | `data: {"job":..,"from":..,"to":..,"at":..}` |
//! | `GET /metrics` | Prometheus text format | queue length, running jobs, GPUs, round latency, preemptions |
//! | `GET /history` | the cluster over the last hour: busy GPUs, queue, round latency, GPUs per tenant | 200 `[ClusterSample]` |
//! | `GET /queue` | the waiting jobs in the policy's order (arrival order for a policy that keeps none), the first 1,000 | 200 `{"by": "policy"\|"arrival", "jobs": [ID]}` |
//! | `GET /gpu-history?jobs=ID,..` | the GPUs each job held over time (its last 32 changes), up to 1,000 jobs | 200 `{"ID": [{"at": .., "gpus": ..}]}`; 400 |
//! | `GET /about` | the daemon's version and policy | 200 `{"version": .., "policy": ..}` |
//! | `GET /healthz` | liveness (needs no token) | 200 `ok` |
//! | `GET /` | the dashboard ([`crate::dashboard`]); `/login` and its files need no token | HTML |
//!
//! Every error has a JSON body `{"error": "..."}` that names the field or header at fault: 400 (bad
//! JSON, unknown fields, a bad header, a request hyper could not parse), 401 (no token over TCP), 403
//! (a command this submitter may not run, another user's job to cancel, GPUs to cordon), 404, 405, 408 (a body too slow), 409, 411 (a body without
//! `Content-Length`), 413 (a body over 1 MiB), 415 (not JSON), 422 (a value out of range, a key given
//! twice), 431 (too many header fields). Malformed request heads are answered by the listener's
//! [`Gate`](crate::listener::Gate). A refused request changes nothing.
//!
//! Over TCP every request but `/healthz` and the dashboard's login needs `Authorization: Bearer TOKEN`
//! ([`crate::auth`]) or a dashboard session's cookie ([`crate::dashboard`]: a change made with the
//! cookie must also come from the daemon's own page), and a loopback `Host` (or one the operator
//! allows); a Unix socket is guarded by its file's permissions.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use actix::Addr;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, FromRef, Path, RawQuery, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use futures::StreamExt;
use gangway_core::job::JobId;
use serde_json::json;
use tokio_stream::wrappers::BroadcastStream;

use crate::auth::{HostCheck, Token};
use crate::cluster::{
    Cancel, ClusterActor, Cordon, GetViews, JobPage, JobRequest, Refusal, RunsAs, Submit,
    Subscribe, Views,
};
use crate::dashboard::{self, Credential, Sessions};
use crate::lifecycle::Phase;
use crate::listener::{BodyTimeout, Bound, Limits};
use crate::request::{self, BodyError, RunPolicy, RunRefusal, Submitter};
use crate::stats::{LATENCY_BUCKETS, StatsSnapshot};
use crate::tenants::{TenantRefusal, Tenants};

/// The largest request body.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Where the API listens.
#[derive(Clone, Debug, PartialEq)]
pub enum Listen {
    /// A TCP address (`HOST:PORT`); needs the bearer token and the `Host` check.
    Tcp(std::net::SocketAddr),
    /// A Unix socket's path (`unix:PATH`); its file's permissions decide who connects.
    Unix(PathBuf),
}

impl std::str::FromStr for Listen {
    type Err = String;

    /// `HOST:PORT`, or `unix:PATH`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.strip_prefix("unix:") {
            Some(path) if !path.is_empty() => Ok(Listen::Unix(path.into())),
            Some(_) => Err("`unix:` needs a socket path".into()),
            None => s
                .parse()
                .map(Listen::Tcp)
                .map_err(|e| format!("`{s}` is not HOST:PORT or unix:PATH ({e})")),
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listen::Tcp(addr) => write!(f, "{addr}"),
            Listen::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

/// Who may use the API and what a submitted command may do.
#[derive(Clone, Debug)]
pub struct ApiConfig {
    /// The bearer token every TCP request but `/healthz` must carry; required on TCP.
    pub token: Option<Token>,
    /// Where clients find the token (said in a 401, to help them).
    pub token_file: Option<PathBuf>,
    /// The `Host` check (TCP; `None` on a Unix socket).
    pub hosts: Option<HostCheck>,
    /// What a submitted command may do, and whom it runs as.
    pub run_policy: RunPolicy,
    /// The tenants each user other than the operator may submit under.
    pub tenants: Tenants,
    /// Bounds on connections and the time a request may take.
    pub limits: Limits,
    /// The policy's spec, as `GET /about` and the dashboard show it.
    pub policy: Option<String>,
}

impl ApiConfig {
    /// A configuration for a Unix socket, or for TCP with `token`: loopback names only, commands run
    /// as this process's user.
    pub fn new(token: Option<Token>) -> Self {
        ApiConfig {
            token,
            token_file: None,
            hosts: None,
            run_policy: RunPolicy::new(Submitter::this_process()),
            tenants: Tenants::own_names(),
            limits: Limits::default(),
            policy: None,
        }
    }
}

/// An error answer: a status and `{"error": message}`.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> Self {
        let status = match r {
            Refusal::Invalid { .. } | Refusal::KeyReused { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Refusal::NoSuchJob(_) => StatusCode::NOT_FOUND,
            Refusal::Ended(_) | Refusal::Exists(_) => StatusCode::CONFLICT,
            Refusal::TooMany { .. } | Refusal::TooLarge { .. } => StatusCode::TOO_MANY_REQUESTS,
        };
        ApiError(status, r.to_string())
    }
}

impl From<actix::MailboxError> for ApiError {
    fn from(e: actix::MailboxError) -> Self {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the control plane is not answering: {e}"),
        )
    }
}

impl From<TenantRefusal> for ApiError {
    fn from(refusal: TenantRefusal) -> Self {
        match refusal {
            TenantRefusal::NotTheirs(why) => ApiError(StatusCode::FORBIDDEN, why),
            TenantRefusal::Unanswered(why) => ApiError(StatusCode::SERVICE_UNAVAILABLE, why),
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        let status = match e {
            BodyError::Malformed(_) => StatusCode::BAD_REQUEST,
            BodyError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        };
        ApiError(status, e.to_string())
    }
}

/// What the handlers share.
#[derive(Clone)]
struct ApiState {
    cluster: Addr<ClusterActor>,
    /// What reads are answered from: never a message queued behind a round.
    views: Views,
    runs: Arc<RunPolicy>,
    tenants: Arc<Tenants>,
    checking: Arc<Checking>,
    sessions: Arc<Sessions>,
    policy: Option<String>,
}

/// Submissions checked at once, in all: each check holds a thread of tokio's blocking pool, which
/// the control plane's own calls (stopping and launching workers) share, for as long as the file
/// systems its paths are on (or the directory server its account is in) take to answer. The
/// operator's (the daemon's user's and root's) are not counted against it, only against their own
/// share: users whose paths hang can refuse each other's submissions, never the operator's.
const CHECKS_AT_ONCE: usize = 64;

/// Submissions of one user checked at once.
const CHECKS_PER_USER: usize = 16;

/// Submissions being checked, by user id (users with none are not kept).
#[derive(Default)]
struct Checking(std::sync::Mutex<crate::IdMap<u32, usize>>);

impl Checking {
    /// A place for a check of `uid`'s submission, or why there is none (503 when every place is
    /// taken, unless `operator`; 429 when theirs are).
    fn enter(self: &Arc<Self>, uid: u32, operator: bool) -> Result<CheckPlace, ApiError> {
        let mut by_user = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if by_user
            .get(&uid)
            .is_some_and(|&theirs| theirs >= CHECKS_PER_USER)
        {
            return Err(ApiError(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "uid {uid} has {CHECKS_PER_USER} submissions being checked already (their \
                     paths' file systems may not be answering); try again once they are"
                ),
            ));
        }
        if !operator && by_user.values().sum::<usize>() >= CHECKS_AT_ONCE {
            return Err(ApiError(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{CHECKS_AT_ONCE} submissions are being checked already (their paths' file \
                     systems may not be answering); try again"
                ),
            ));
        }
        *by_user.entry(uid).or_default() += 1;
        Ok(CheckPlace(Arc::clone(self), uid))
    }
}

/// A check's place, given back when dropped (when the check ends, whether or not its client still
/// waits for it).
struct CheckPlace(Arc<Checking>, u32);

impl Drop for CheckPlace {
    fn drop(&mut self) {
        let mut by_user = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(theirs) = by_user.get_mut(&self.1) {
            *theirs -= 1;
            if *theirs == 0 {
                by_user.remove(&self.1);
            }
        }
    }
}

impl FromRef<ApiState> for Arc<Sessions> {
    fn from_ref(state: &ApiState) -> Self {
        Arc::clone(&state.sessions)
    }
}

impl ApiState {
    /// Whether `who` operates the daemon (its own user, or root): they may cancel any job and cordon
    /// GPUs; everyone else may cancel only the jobs that run as them.
    fn operates(&self, who: &Submitter) -> bool {
        who.uid == 0 || who.uid == self.runs.daemon.uid
    }
}

/// Who may reach the handlers (TCP).
struct Access {
    token: Option<Token>,
    token_file: Option<PathBuf>,
    hosts: Option<HostCheck>,
    sessions: Arc<Sessions>,
}

/// The API's routes over a running cluster actor and the views it publishes, behind `config`'s
/// token and `Host` checks.
pub fn router(cluster: Addr<ClusterActor>, views: Views, config: &ApiConfig) -> Router {
    let sessions = Arc::new(Sessions::default());
    let state = ApiState {
        cluster,
        views,
        runs: Arc::new(config.run_policy.clone()),
        tenants: Arc::new(config.tenants.clone()),
        checking: Arc::default(),
        sessions: Arc::clone(&sessions),
        policy: config.policy.clone(),
    };
    let access = Arc::new(Access {
        token: config.token.clone(),
        token_file: config.token_file.clone(),
        hosts: config.hosts.clone(),
        sessions,
    });
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/", get(dashboard::index))
        .route("/login", get(dashboard::login_page).post(dashboard::redeem))
        .route("/logout", post(dashboard::logout))
        .route("/ui/login-codes", post(dashboard::new_code))
        .route("/ui/{file}", get(dashboard::asset))
        .route("/history", get(history))
        .route("/queue", get(queue))
        .route("/gpu-history", get(gpu_history))
        .route("/about", get(about))
        .route("/jobs", get(list).post(submit))
        .route("/jobs/{id}", get(show).delete(cancel))
        .route("/nodes", get(nodes))
        .route("/gpus/cordon", post(cordon))
        .route("/gpus/uncordon", post(uncordon))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .route("/stats", get(stats))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(access, guard))
        .layer(axum::middleware::map_response(json_errors))
        .layer(axum::middleware::map_response(dashboard::security_headers))
}

/// Serves the API on `bound` until the process ends. TCP needs a token.
pub async fn serve(
    bound: Bound,
    cluster: Addr<ClusterActor>,
    mut config: ApiConfig,
) -> std::io::Result<()> {
    if let Bound::Tcp(_) = &bound {
        if config.token.is_none() {
            return Err(std::io::Error::other(
                "the API needs a token on TCP (see gangway_actors::auth)",
            ));
        }
        if config.hosts.is_none() {
            config.hosts = Some(HostCheck::new(bound.port().unwrap_or(0), Vec::new()));
        }
    }
    let views = cluster
        .send(GetViews)
        .await
        .map_err(|e| std::io::Error::other(format!("the control plane stopped: {e}")))?;
    let app = router(cluster, views, &config);
    crate::listener::serve(bound, app, config.limits).await
}

/// The `Host` check, then the token or a dashboard session.
async fn guard(State(access): State<Arc<Access>>, mut request: Request, next: Next) -> Response {
    if let Some(hosts) = &access.hosts {
        let host = request
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        if !hosts.admits(host) {
            let shown = host.map_or("none".into(), request::escape);
            return ApiError(
                StatusCode::BAD_REQUEST,
                format!(
                    "Host: `{shown}` is not a name of this daemon (it answers to localhost, 127.0.0.1 \
                     and [::1] on port {}, and to names its operator allows with --allow-host)",
                    hosts.port
                ),
            )
            .into_response();
        }
    }
    let path = request.uri().path();
    if let Some(token) = &access.token
        && path != "/healthz"
        && !dashboard::is_public(path)
    {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|h| h.as_bytes());
        let credential = if token.admits(authorization) {
            Some(Credential::Token)
        } else {
            access
                .sessions
                .admits(request.headers())
                .then_some(Credential::Session)
        };
        let changes = !matches!(*request.method(), Method::GET | Method::HEAD);
        if credential == Some(Credential::Session)
            && changes
            && !dashboard::same_origin(request.headers())
        {
            return ApiError(
                StatusCode::FORBIDDEN,
                format!(
                    "a change made with the dashboard's cookie must come from its own page (an \
                     `Origin` of this daemon and `{}`); other clients use the token",
                    dashboard::CSRF_HEADER
                ),
            )
            .into_response();
        }
        if let Some(credential) = credential {
            request.extensions_mut().insert(credential);
        } else if path == "/" {
            return dashboard::login_needed();
        } else {
            let file = access.token_file.as_ref().map_or(String::new(), |f| {
                format!(" (the daemon wrote it to {})", f.display())
            });
            let mut response = ApiError(
                StatusCode::UNAUTHORIZED,
                format!(
                    "Authorization: this API needs `Authorization: Bearer TOKEN` with the daemon's token{file}; \
                     gangway's clients read it from $GANGWAY_TOKEN_FILE or .gangway/journal/api-token"
                ),
            )
            .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
    } else {
        request.extensions_mut().insert(Credential::Token);
    }
    next.run(request).await
}

/// Gives every error answer a JSON body: those axum makes itself (a bad path parameter, a body over
/// the limit) carry their text as `{"error": ...}`.
async fn json_errors(response: Response) -> Response {
    let status = response.status();
    // The dashboard's own answers (a page asking for a login) are HTML.
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| {
            t.as_bytes().starts_with(b"application/json") || t.as_bytes().starts_with(b"text/html")
        });
    if !(status.is_client_error() || status.is_server_error()) || json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        text
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    let body = serde_json::to_vec(&json!({ "error": message })).unwrap_or_default();
    Response::from_parts(parts, Body::from(body))
}

async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError(
        StatusCode::NOT_FOUND,
        format!(
            "no {method} {} here (the API's paths: /jobs, /jobs/ID, /nodes, /gpus/cordon, \
             /gpus/uncordon, /events, /metrics, /stats, /history, /queue, /gpu-history, /about, /healthz; the dashboard: /)",
            request::escape(uri.path())
        ),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} does not take {method}", request::escape(uri.path())),
    )
}

/// A JSON body: `Content-Type: application/json` (415 otherwise), at most [`MAX_BODY_BYTES`] (413),
/// arriving within the listener's body timeout (408).
async fn json_body(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .unwrap_or("");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if !(essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")) {
        return Err(ApiError(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "Content-Type: expected application/json, got `{}`",
                request::escape(content_type)
            ),
        ));
    }
    // A body declared over the limit is refused before any of it is read.
    if http_body::Body::size_hint(&body).lower() > MAX_BODY_BYTES as u64 {
        return Err(too_large());
    }
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(c) = cause {
                if c.is::<http_body_util::LengthLimitError>() {
                    return too_large();
                }
                if let Some(late) = c.downcast_ref::<BodyTimeout>() {
                    return ApiError(StatusCode::REQUEST_TIMEOUT, late.to_string());
                }
                cause = c.source();
            }
            ApiError(StatusCode::BAD_REQUEST, format!("reading the body: {e}"))
        })
}

fn too_large() -> ApiError {
    ApiError(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is over the limit of {MAX_BODY_BYTES} bytes"),
    )
}

/// The `Idempotency-Key` header, scoped to its submitter: 1 to 255 printable ASCII characters.
fn idempotency_key(headers: &HeaderMap, submitter: &Submitter) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > request::limits::MAX_KEY_BYTES
        || !bytes.iter().all(|b| (0x20..0x7f).contains(b))
    {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!(
                "Idempotency-Key: must be 1 to {} printable ASCII characters",
                request::limits::MAX_KEY_BYTES
            ),
        ));
    }
    Ok(Some(format!(
        "{}:{}",
        submitter.uid,
        String::from_utf8_lossy(bytes)
    )))
}

/// The checks of a submission that look outside the daemon: the tenant `submitter` may name (their
/// account's name, unless the operator gave them others; `operates`: they name any), and the
/// command's paths and arguments. Answers the request as it is to be journaled.
fn check_submitter(
    mut request: JobRequest,
    submitter: &Submitter,
    operates: bool,
    tenants: &Tenants,
    runs: &RunPolicy,
) -> Result<JobRequest, ApiError> {
    // A tenant is a share: another user draws on their own (or those the operator gave them); a
    // request that names none goes under theirs.
    if !operates {
        if request.tenant == gangway_protocol::api::DEFAULT_NAME
            && let Some(theirs) = tenants.default_for(submitter.uid)?
        {
            request.tenant = theirs;
        }
        tenants.check(submitter.uid, &request.tenant)?;
    }
    match &mut request.run {
        Some(run) => runs
            .check(run, submitter)
            .map_err(|refusal| match refusal {
                RunRefusal::Invalid(i) => ApiError::from(Refusal::from(i)),
                RunRefusal::Forbidden(why) => ApiError(StatusCode::FORBIDDEN, why),
                RunRefusal::Unanswered(why) => ApiError(StatusCode::SERVICE_UNAVAILABLE, why),
            })?,
        None if runs.command_required => {
            return Err(ApiError::from(Refusal::from(request::Invalid {
                field: "run",
                problem: "this daemon's workers are processes: a job needs a command to run \
                          (elastic-run --daemon sends one)"
                    .into(),
            })));
        }
        // Another user's jobs are bounded (how many, how large, the job types they name) by the
        // user their command runs as: one without a command (simulated workers) would escape
        // every bound, so such jobs are the operator's.
        None if !operates => {
            return Err(ApiError::from(Refusal::from(request::Invalid {
                field: "run",
                problem: format!(
                    "uid {} is not this daemon's operator: another user's job brings a command, \
                     which runs as them (elastic-run --daemon sends one); jobs without one are \
                     the operator's",
                    submitter.uid
                ),
            })));
        }
        None => {}
    }
    Ok(request)
}

async fn submit(
    State(state): State<ApiState>,
    Extension(submitter): Extension<Submitter>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let bytes = json_body(&headers, body).await?;
    let request: JobRequest = request::parse_job_request(&bytes)?;
    if request.id.is_some() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "id: the control plane numbers jobs; leave it out".into(),
        ));
    }
    request::validate(&request).map_err(Refusal::from)?;
    // A weight above the default is a claim on every other job's share: the operator's to give.
    if request.weight > 1.0 && !state.operates(&submitter) {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "weight: only the daemon's operator (its user, or root) may give a job more than \
                 the default weight of 1; uid {} asked for {}",
                submitter.uid, request.weight
            ),
        ));
    }
    // The submitter's account and the command's paths are looked up on the blocking pool: a
    // directory server that answers slowly, or a path on a file system that never answers, holds
    // one of its threads (a bounded number of them), not one of the API's, which answer everyone.
    let request = {
        let operates = state.operates(&submitter);
        let place = state.checking.enter(submitter.uid, operates)?;
        let (tenants, runs) = (Arc::clone(&state.tenants), Arc::clone(&state.runs));
        let who = submitter;
        let checked = tokio::task::spawn_blocking(move || {
            let _place = place;
            check_submitter(request, &who, operates, &tenants, &runs)
        });
        checked.await.map_err(|e| {
            ApiError(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("checking the submission failed: {e}"),
            )
        })??
    };
    let key = idempotency_key(&headers, &submitter)?;
    let sent = state
        .cluster
        .send(Submit {
            request,
            at: None,
            key,
        })
        .await?;
    let id = sent.map_err(|refusal| match refusal {
        Refusal::KeyReused { job, .. } => ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "Idempotency-Key: `{}` was used for job {job} with a different request",
                headers
                    .get("idempotency-key")
                    .map_or(String::new(), |v| String::from_utf8_lossy(v.as_bytes())
                        .into_owned())
            ),
        ),
        other => other.into(),
    })?;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))))
}

/// A JSON body already serialized.
fn json_bytes(bytes: bytes::Bytes) -> Response {
    ([("content-type", "application/json")], bytes).into_response()
}

/// The most jobs one page of `GET /jobs` holds.
pub const MAX_PAGE: usize = 10_000;

/// Every job, streamed from the view in pieces with its length told first (so that a client need
/// not decode chunks); or, with a query, one page of them.
async fn list(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let view = state.views.latest();
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        let length = view.jobs_json_len().to_string();
        let pieces = view.jobs_json_pieces().map(Ok::<_, Infallible>);
        let body = Body::from_stream(futures::stream::iter(pieces));
        let headers = [
            ("content-type", "application/json"),
            ("content-length", &length),
        ];
        return Ok((headers, body).into_response());
    };
    let page = job_page(&query)?;
    let (json, more_after) = view.jobs_page_json(&page);
    let mut response = json_bytes(json);
    if let Some(last) = more_after {
        let mut next = format!("/jobs?after={last}");
        if let Some(limit) = page.limit {
            next += &format!("&limit={limit}");
        }
        if !page.phases.is_empty() {
            let phases: Vec<String> = page.phases.iter().map(Phase::to_string).collect();
            next += &format!("&phase={}", phases.join(","));
        }
        let link = format!("<{next}>; rel=\"next\"");
        let link = header::HeaderValue::from_str(&link).expect("ASCII");
        response.headers_mut().insert(header::LINK, link);
    }
    Ok(response)
}

/// A query parameter's comma-separated list, its commas decoded if a client percent-encoded them.
fn list_value(value: &str) -> String {
    value.replace("%2C", ",").replace("%2c", ",")
}

/// The page of the job list `query` asks for (`phase=a,b`, `after=ID`, `limit=N`).
fn job_page(query: &str) -> Result<JobPage, ApiError> {
    let mut page = JobPage::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = list_value(value);
        let bad = |problem: String| {
            let name = request::escape(name);
            ApiError(StatusCode::BAD_REQUEST, format!("`{name}`: {problem}"))
        };
        match name {
            "phase" => {
                for name in value.split(',') {
                    let phase = Phase::ALL.iter().find(|p| p.to_string() == name);
                    let known = || Phase::ALL.map(|p| p.to_string()).join(", ");
                    let phase = phase.ok_or_else(|| {
                        let name = request::escape(name);
                        bad(format!("`{name}` is not a phase (one of {})", known()))
                    })?;
                    // Each phase once: a page's cost is its jobs times this list.
                    if !page.phases.contains(phase) {
                        page.phases.push(*phase);
                    }
                }
            }
            "after" => {
                let id = value.parse().map_err(|_| {
                    bad(format!(
                        "`{}` is not a job id (a number)",
                        request::escape(&value)
                    ))
                })?;
                page.after = Some(JobId(id));
            }
            "limit" => {
                let limit = (value.parse().ok())
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| bad(format!("must be a whole number from 1 to {MAX_PAGE}")))?;
                page.limit = Some(limit);
            }
            _ => {
                return Err(ApiError(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown query parameter `{}` (`GET /jobs` takes phase, after and limit)",
                        request::escape(name)
                    ),
                ));
            }
        }
    }
    Ok(page)
}

async fn nodes(State(state): State<ApiState>) -> Response {
    Json(state.views.latest().nodes()).into_response()
}

fn job_id(text: &str) -> Result<JobId, ApiError> {
    text.parse().map(JobId).map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("`{}` is not a job id (a number)", request::escape(text)),
        )
    })
}

async fn show(State(state): State<ApiState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    match state.views.latest().job_json(id) {
        Some(json) => Ok(json_bytes(json)),
        None => Err(Refusal::NoSuchJob(id).into()),
    }
}

async fn cancel(
    State(state): State<ApiState>,
    Extension(submitter): Extension<Submitter>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    if !state.operates(&submitter) {
        let runs_as = state.cluster.send(RunsAs(id)).await??;
        if runs_as != Some(submitter.uid) {
            return Err(ApiError(
                StatusCode::FORBIDDEN,
                format!(
                    "job {id} is not yours (uid {}): only its submitter, the daemon's user and root \
                     may cancel it",
                    submitter.uid
                ),
            ));
        }
    }
    state.cluster.send(Cancel(id)).await??;
    Ok(Json(json!({ "cancelled": id })).into_response())
}

/// The body of `/gpus/cordon` and `/gpus/uncordon`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuList {
    gpus: Vec<u32>,
}

async fn cordon(
    State(state): State<ApiState>,
    Extension(submitter): Extension<Submitter>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    set_cordon(state, &submitter, headers, body, true).await
}

async fn uncordon(
    State(state): State<ApiState>,
    Extension(submitter): Extension<Submitter>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    set_cordon(state, &submitter, headers, body, false).await
}

async fn set_cordon(
    state: ApiState,
    submitter: &Submitter,
    headers: HeaderMap,
    body: Body,
    cordoned: bool,
) -> Result<Response, ApiError> {
    // The body is read first: a client still writing it when the answer comes would see its
    // connection closed instead.
    let bytes = json_body(&headers, body).await?;
    if !state.operates(submitter) {
        return Err(ApiError(
            StatusCode::FORBIDDEN,
            format!(
                "uid {} may not take GPUs in or out of service: only the daemon's user and root may",
                submitter.uid
            ),
        ));
    }
    let GpuList { gpus } = serde_json::from_slice(&bytes).map_err(|e| {
        let status = if e.is_data() && !e.to_string().starts_with("unknown field") {
            StatusCode::UNPROCESSABLE_ENTITY
        } else {
            StatusCode::BAD_REQUEST
        };
        ApiError(status, e.to_string())
    })?;
    state
        .cluster
        .send(Cordon {
            gpus: gpus.clone(),
            cordoned,
        })
        .await??;
    Ok(Json(json!({ "gpus": gpus, "cordoned": cordoned })).into_response())
}

async fn events(
    State(state): State<ApiState>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let receiver = state.cluster.send(Subscribe).await?.subscribe();
    let stream = BroadcastStream::new(receiver).filter_map(|item| async move {
        // A slow reader that fell behind skips what it missed.
        let event = item.ok()?;
        Event::default().json_data(&event).ok().map(Ok)
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The cluster's samples over the last hour (see [`crate::cluster::View::history`]).
async fn history(State(state): State<ApiState>) -> Response {
    Json(state.views.latest().history()).into_response()
}

/// The waiting jobs in the order they are to be served.
async fn queue(State(state): State<ApiState>) -> Response {
    Json(state.views.latest().queue()).into_response()
}

/// The most jobs one `GET /gpu-history` asks for.
pub const MAX_HISTORIES: usize = 1_000;

/// `GET /gpu-history?jobs=1,2,3`: the GPUs each of those jobs held over time, by id (jobs the
/// control plane does not know are left out).
async fn gpu_history(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiError> {
    let bad = |why: String| ApiError(StatusCode::BAD_REQUEST, why);
    let query = query.unwrap_or_default();
    let Some(list) = query.strip_prefix("jobs=").filter(|l| !l.contains('&')) else {
        return Err(bad(
            "`GET /gpu-history` takes one parameter, jobs=ID,ID,...".into(),
        ));
    };
    let list = list_value(list);
    let ids: Vec<JobId> = (list.split(',').filter(|s| !s.is_empty()))
        .map(job_id)
        .collect::<Result<_, _>>()?;
    if ids.len() > MAX_HISTORIES {
        return Err(bad(format!(
            "`jobs`: at most {MAX_HISTORIES} jobs at once (got {})",
            ids.len()
        )));
    }
    let view = state.views.latest();
    let histories: serde_json::Map<String, serde_json::Value> = (ids.iter())
        .filter_map(|&id| {
            let history = view.gpu_history(id)?;
            Some((id.to_string(), json!(history)))
        })
        .collect();
    Ok(Json(histories).into_response())
}

/// What the dashboard's title shows.
async fn about(State(state): State<ApiState>) -> Response {
    Json(json!({ "version": env!("CARGO_PKG_VERSION"), "policy": state.policy })).into_response()
}

async fn metrics(State(state): State<ApiState>) -> Response {
    let text = prometheus_text(state.views.latest().stats());
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

/// The control plane's counters and gauges as JSON ([`StatsSnapshot`]): among them the rounds whose
/// policy failed, and the last failure's message.
async fn stats(State(state): State<ApiState>) -> Json<StatsSnapshot> {
    Json(state.views.latest().stats().clone())
}

/// The Prometheus text exposition of `stats`.
pub fn prometheus_text(s: &StatsSnapshot) -> String {
    let c = &s.counters;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: String| {
        out += &format!("# HELP gangway_{name} {help}\n# TYPE gangway_{name} {kind}\n");
        out += &format!("gangway_{name} {value}\n");
    };
    metric(
        "queued_jobs",
        "gauge",
        "Jobs waiting for GPUs.",
        s.queued_jobs.to_string(),
    );
    metric(
        "running_jobs",
        "gauge",
        "Jobs running.",
        s.running_jobs.to_string(),
    );
    metric("gpus", "gauge", "GPUs in the cluster.", s.gpus.to_string());
    metric(
        "busy_gpus",
        "gauge",
        "GPUs held by jobs.",
        s.busy_gpus.to_string(),
    );
    metric(
        "gpus_out_of_service",
        "gauge",
        "GPUs out of service: cordoned, unhealthy by their probe, or held by workers still stopping.",
        s.gpus_out_of_service.to_string(),
    );
    metric(
        "stops_in_background",
        "gauge",
        "Stops whose workers outlasted the executor's patience: they go on without holding the rounds.",
        s.stops_in_background.to_string(),
    );
    metric(
        "gpus_unwatched",
        "gauge",
        "GPUs whose health probe failed and is no longer called.",
        s.gpus_unwatched.to_string(),
    );
    let utilization = if s.gpus == 0 {
        0.0
    } else {
        f64::from(s.busy_gpus) / f64::from(s.gpus)
    };
    metric(
        "gpu_utilization",
        "gauge",
        "Share of GPUs held by jobs.",
        utilization.to_string(),
    );
    metric(
        "jobs_submitted_total",
        "counter",
        "Jobs submitted.",
        c.submitted.to_string(),
    );
    metric(
        "jobs_finished_total",
        "counter",
        "Jobs finished.",
        c.finished.to_string(),
    );
    metric(
        "jobs_cancelled_total",
        "counter",
        "Jobs cancelled.",
        c.cancelled.to_string(),
    );
    metric(
        "jobs_failed_total",
        "counter",
        "Jobs failed.",
        c.failed.to_string(),
    );
    metric(
        "starts_total",
        "counter",
        "Gang starts.",
        c.starts.to_string(),
    );
    metric(
        "preemptions_total",
        "counter",
        "Jobs preempted.",
        c.preemptions.to_string(),
    );
    metric(
        "migrations_total",
        "counter",
        "Jobs moved to other GPUs at the same size.",
        c.migrations.to_string(),
    );
    metric(
        "resizes_total",
        "counter",
        "Starts on another number of GPUs than the job's last run (a resize, or a resume at another size).",
        c.resizes.to_string(),
    );
    metric(
        "restart_seconds_total",
        "counter",
        "Seconds resizes and moves took, from the decision to the first step after.",
        c.restart_seconds.to_string(),
    );
    metric(
        "invariant_violations_total",
        "counter",
        "Decisions that broke a ledger invariant (a bug if not 0).",
        c.violations.to_string(),
    );
    metric(
        "views_published_total",
        "counter",
        "Views of jobs, servers and counters published for the API's reads.",
        c.views_published.to_string(),
    );
    metric(
        "view_publish_seconds_total",
        "counter",
        "Wall seconds the control plane spent publishing views (after rounds, not in their latency).",
        c.publish_seconds.to_string(),
    );
    metric(
        "illegal_transitions_total",
        "counter",
        "Job phase moves the state machine refused (a bug if not 0).",
        c.illegal_transitions.to_string(),
    );
    metric(
        "leases_in_order_total",
        "counter",
        "Started gangs whose batched lease was refused and that leased GPU by GPU instead.",
        c.leases_in_order.to_string(),
    );
    metric(
        "round_failures_total",
        "counter",
        "Rounds whose policy failed (panicked); nothing of them was applied.",
        c.round_failures.to_string(),
    );
    metric(
        "recovery_seconds",
        "gauge",
        "Seconds the last start spent recovering the journal.",
        c.recovery_seconds.to_string(),
    );
    // Both count every round (`Stats::note_round` notes the two together).
    let mut histogram = |name: &str, help: &str, buckets: &[u64], sum: f64| {
        out += &format!("# HELP gangway_{name} {help}\n# TYPE gangway_{name} histogram\n");
        for (bound, count) in LATENCY_BUCKETS.iter().zip(buckets) {
            out += &format!("gangway_{name}_bucket{{le=\"{bound}\"}} {count}\n");
        }
        out += &format!("gangway_{name}_bucket{{le=\"+Inf\"}} {}\n", c.rounds);
        out += &format!(
            "gangway_{name}_sum {sum}\ngangway_{name}_count {}\n",
            c.rounds
        );
    };
    histogram(
        "round_latency_seconds",
        "Scheduling round latency.",
        &s.round_latency_buckets,
        s.round_latency_sum,
    );
    histogram(
        "round_solve_seconds",
        "Seconds of each round the policy and the placer took to decide (the rest commits and carries out the decision).",
        &s.round_solve_buckets,
        s.round_solve_sum,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A round's latency and its solve are told apart: each in its own histogram, and as
    /// percentiles in the JSON.
    #[test]
    fn metrics_tell_a_rounds_solve_from_the_whole_round() {
        let mut stats = crate::stats::Stats::default();
        for solve_ms in [1, 3] {
            stats.note_round(Duration::from_millis(30), Duration::from_millis(solve_ms));
        }
        let s = stats.snapshot(0, 0, 0, 8);
        assert_eq!((s.round_latency_p50, s.round_latency_p99), (0.03, 0.03));
        assert_eq!(s.round_solve_p50, 0.002);
        assert!((s.round_solve_sum - 0.004).abs() < 1e-12);
        let text = prometheus_text(&s);
        for line in [
            "gangway_round_latency_seconds_bucket{le=\"0.02\"} 0",
            "gangway_round_latency_seconds_bucket{le=\"0.05\"} 2",
            "gangway_round_latency_seconds_count 2",
            "gangway_round_solve_seconds_bucket{le=\"0.001\"} 1",
            "gangway_round_solve_seconds_bucket{le=\"0.002\"} 1",
            "gangway_round_solve_seconds_bucket{le=\"0.005\"} 2",
            "gangway_round_solve_seconds_bucket{le=\"+Inf\"} 2",
            "gangway_round_solve_seconds_count 2",
        ] {
            assert!(text.lines().any(|l| l == line), "no `{line}` in:\n{text}");
        }
    }

    #[test]
    fn a_page_lists_each_phase_once_however_often_the_query_repeats_it() {
        let page = job_page("phase=running,running,pending&phase=running")
            .ok()
            .unwrap();
        assert_eq!(page.phases, [Phase::Running, Phase::Pending]);
    }

    #[test]
    fn submissions_checked_at_once_are_bounded_per_user_and_in_all_but_the_operators() {
        let checking = Arc::new(Checking::default());
        let status = |entered: Result<CheckPlace, ApiError>| entered.err().map(|e| e.0);
        let mut places: Vec<CheckPlace> = (0..CHECKS_PER_USER)
            .map(|_| checking.enter(7, false).ok().unwrap())
            .collect();
        assert_eq!(
            status(checking.enter(7, false)),
            Some(StatusCode::TOO_MANY_REQUESTS)
        );
        // Others fill the rest.
        for uid in 100.. {
            match checking.enter(uid, false) {
                Ok(place) => places.push(place),
                Err(e) => {
                    assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
                    break;
                }
            }
        }
        assert_eq!(places.len(), CHECKS_AT_ONCE);
        // The operator still has their own share, and no more.
        let operators: Vec<CheckPlace> = (0..CHECKS_PER_USER)
            .map(|_| checking.enter(0, true).ok().unwrap())
            .collect();
        assert_eq!(
            status(checking.enter(0, true)),
            Some(StatusCode::TOO_MANY_REQUESTS)
        );
        drop(operators);
        // A check that ends gives its place back, to anyone.
        places.truncate(CHECKS_AT_ONCE - 1);
        assert!(checking.enter(8, false).is_ok());
        places.clear();
        assert!(checking.0.lock().unwrap().is_empty(), "none left counted");
    }
}
