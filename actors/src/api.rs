//! The local HTTP/JSON API (axum), on 127.0.0.1 or a Unix socket.
//!
//! | method and path | does | answers |
//! |---|---|---|
//! | `POST /jobs` | submits a [`JobRequest`] | 201 `{"id": N}`; 400 or 422 with `{"error": ...}` |
//! | `GET /jobs` | lists every job | 200 `[JobInfo]` |
//! | `GET /jobs/{id}` | shows one | 200 `JobInfo`; 404 |
//! | `DELETE /jobs/{id}` | cancels it | 200 `{"cancelled": N}`; 404; 409 when it already ended |
//! | `POST /gpus/cordon` | takes `{"gpus": [..]}` out of service: their jobs checkpoint and move | 200; 422 for an unknown GPU |
//! | `POST /gpus/uncordon` | puts them back | 200; 422 |
//! | `GET /events` | job transitions as server-sent events | `data: {"job":..,"from":..,"to":..,"at":..}` |
//! | `GET /metrics` | Prometheus text format | queue length, running jobs, GPUs, round latency, preemptions |
//! | `GET /healthz` | liveness | 200 `ok` |
//!
//! A refused request changes nothing.

use std::convert::Infallible;
use std::path::PathBuf;

use actix::Addr;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::Stream;
use futures::StreamExt;
use gangway_core::job::JobId;
use serde_json::json;
use tokio_stream::wrappers::BroadcastStream;

use crate::cluster::{
    Cancel, ClusterActor, Cordon, GetStats, JobRequest, ListJobs, Refusal, ShowJob, Submit,
    Subscribe,
};
use crate::stats::{LATENCY_BUCKETS, StatsSnapshot};

/// Where the API listens.
#[derive(Clone, Debug, PartialEq)]
pub enum Listen {
    Tcp(std::net::SocketAddr),
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
            Refusal::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Refusal::NoSuchJob(_) => StatusCode::NOT_FOUND,
            Refusal::Ended(_) | Refusal::Exists(_) => StatusCode::CONFLICT,
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

/// The API's routes over a running cluster actor.
pub fn router(cluster: Addr<ClusterActor>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/jobs", get(list).post(submit))
        .route("/jobs/{id}", get(show).delete(cancel))
        .route("/gpus/cordon", post(cordon))
        .route("/gpus/uncordon", post(uncordon))
        .route("/events", get(events))
        .route("/metrics", get(metrics))
        .with_state(cluster)
}

/// Serves the API until the process ends.
pub async fn serve(listen: &Listen, cluster: Addr<ClusterActor>) -> std::io::Result<()> {
    let app = router(cluster);
    match listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "API listening");
            axum::serve(listener, app).await
        }
        Listen::Unix(path) => {
            // A socket left by a crashed daemon would make bind fail; anything else is not ours.
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                std::fs::remove_file(path)?;
            }
            let listener = tokio::net::UnixListener::bind(path)?;
            tracing::info!(path = %path.display(), "API listening");
            axum::serve(listener, app).await
        }
    }
}

async fn submit(
    State(cluster): State<Addr<ClusterActor>>,
    request: Result<Json<JobRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let Json(request) = request.map_err(|e| ApiError(e.status(), e.body_text()))?;
    if request.id.is_some() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "id: the control plane numbers jobs; leave it out".into(),
        ));
    }
    let id = cluster.send(Submit { request, at: None }).await??;
    Ok((StatusCode::CREATED, Json(json!({ "id": id }))))
}

async fn list(State(cluster): State<Addr<ClusterActor>>) -> Result<Response, ApiError> {
    Ok(Json(cluster.send(ListJobs).await?).into_response())
}

fn job_id(text: &str) -> Result<JobId, ApiError> {
    text.parse().map(JobId).map_err(|_| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("`{text}` is not a job id (a number)"),
        )
    })
}

async fn show(
    State(cluster): State<Addr<ClusterActor>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    match cluster.send(ShowJob(id)).await? {
        Some(info) => Ok(Json(info).into_response()),
        None => Err(Refusal::NoSuchJob(id).into()),
    }
}

async fn cancel(
    State(cluster): State<Addr<ClusterActor>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let id = job_id(&id)?;
    cluster.send(Cancel(id)).await??;
    Ok(Json(json!({ "cancelled": id })).into_response())
}

/// The body of `/gpus/cordon` and `/gpus/uncordon`.
#[derive(serde::Deserialize)]
struct GpuList {
    gpus: Vec<u32>,
}

async fn cordon(
    State(cluster): State<Addr<ClusterActor>>,
    request: Result<Json<GpuList>, JsonRejection>,
) -> Result<Response, ApiError> {
    set_cordon(cluster, request, true).await
}

async fn uncordon(
    State(cluster): State<Addr<ClusterActor>>,
    request: Result<Json<GpuList>, JsonRejection>,
) -> Result<Response, ApiError> {
    set_cordon(cluster, request, false).await
}

async fn set_cordon(
    cluster: Addr<ClusterActor>,
    request: Result<Json<GpuList>, JsonRejection>,
    cordoned: bool,
) -> Result<Response, ApiError> {
    let Json(GpuList { gpus }) = request.map_err(|e| ApiError(e.status(), e.body_text()))?;
    cluster
        .send(Cordon {
            gpus: gpus.clone(),
            cordoned,
        })
        .await??;
    Ok(Json(json!({ "gpus": gpus, "cordoned": cordoned })).into_response())
}

async fn events(
    State(cluster): State<Addr<ClusterActor>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let receiver = cluster.send(Subscribe).await?.subscribe();
    let stream = BroadcastStream::new(receiver).filter_map(|item| async move {
        // A slow reader that fell behind skips what it missed.
        let event = item.ok()?;
        Event::default().json_data(&event).ok().map(Ok)
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

async fn metrics(State(cluster): State<Addr<ClusterActor>>) -> Result<Response, ApiError> {
    let stats = cluster.send(GetStats).await?;
    Ok((
        [("content-type", "text/plain; version=0.0.4")],
        prometheus_text(&stats),
    )
        .into_response())
}

/// The Prometheus text exposition of `stats`.
pub fn prometheus_text(s: &StatsSnapshot) -> String {
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
        s.submitted.to_string(),
    );
    metric(
        "jobs_finished_total",
        "counter",
        "Jobs finished.",
        s.finished.to_string(),
    );
    metric(
        "jobs_cancelled_total",
        "counter",
        "Jobs cancelled.",
        s.cancelled.to_string(),
    );
    metric(
        "jobs_failed_total",
        "counter",
        "Jobs failed.",
        s.failed.to_string(),
    );
    metric(
        "starts_total",
        "counter",
        "Gang starts.",
        s.starts.to_string(),
    );
    metric(
        "preemptions_total",
        "counter",
        "Jobs preempted.",
        s.preemptions.to_string(),
    );
    metric(
        "migrations_total",
        "counter",
        "Jobs moved or resized.",
        s.migrations.to_string(),
    );
    metric(
        "invariant_violations_total",
        "counter",
        "Decisions that broke a ledger invariant (a bug if not 0).",
        s.violations.to_string(),
    );
    metric(
        "recovery_seconds",
        "gauge",
        "Seconds the last start spent recovering the journal.",
        s.recovery_seconds.to_string(),
    );
    out += "# HELP gangway_round_latency_seconds Scheduling round latency.\n";
    out += "# TYPE gangway_round_latency_seconds histogram\n";
    for (bound, count) in LATENCY_BUCKETS.iter().zip(&s.round_latency_buckets) {
        out += &format!("gangway_round_latency_seconds_bucket{{le=\"{bound}\"}} {count}\n");
    }
    out += &format!(
        "gangway_round_latency_seconds_bucket{{le=\"+Inf\"}} {}\n",
        s.rounds
    );
    out += &format!(
        "gangway_round_latency_seconds_sum {}\n",
        s.round_latency_sum
    );
    out += &format!("gangway_round_latency_seconds_count {}\n", s.rounds);
    out
}
