//! The routes of `arbiter serve` (docs/serve.md). Every refusal is a 4xx/5xx with one line of
//! JSON, `{"error": "..."}`; with a token set, every POST carries `Authorization: Bearer`.

use std::convert::Infallible;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use crate::job::RunArgs;

use super::dirs;
use super::error::ApiError;
use super::feed::Event;
use super::jobs::{App, Start};

type Shared = Arc<App>;

pub(crate) fn router(app: Shared) -> Router {
    Router::new()
        .route("/api/jobs", get(list).post(submit))
        .route("/api/jobs/{id}", get(read))
        .route("/api/jobs/{id}/events", get(events))
        .route("/api/jobs/{id}/files/{*path}", get(file))
        .route("/api/jobs/{id}/cancel", post(cancel))
        .route("/api/jobs/{id}/trials/{trial}/cancel", post(cancel_trial))
        .route("/api/jobs/{id}/resume", post(resume))
        .route("/api/jobs/{id}/retry-infra", post(retry_infra))
        .route("/api/query", post(query))
        .merge(super::web::routes())
        .fallback(|| async { ApiError::not_found("no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(app.clone(), authorize))
        .with_state(app)
}

/// With a token set, anything but a read needs `Authorization: Bearer <token>`.
async fn authorize(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let reads = [Method::GET, Method::HEAD];
    if let Some(token) = &app.token
        && !reads.contains(request.method())
    {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.as_bytes(), token.as_bytes())) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "this request needs the server's token: Authorization: Bearer <token>",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Equal bytes, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `POST /api/jobs`: what `arbiter run` takes, as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Submit {
    /// A job.yaml's content (paths in it relative to the root).
    config: Option<String>,
    #[serde(default)]
    tasks: Vec<String>,
    #[serde(default)]
    agents: Vec<String>,
    #[serde(default)]
    variants: Vec<String>,
    attempts: Option<u32>,
    concurrency: Option<usize>,
    /// Relative to the root (default `jobs/<UTC timestamp>` under it).
    job_dir: Option<PathBuf>,
    pass_threshold: Option<f64>,
    network: Option<String>,
    model: Option<String>,
}

async fn submit(State(app): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let submit: Submit =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("request body: {e}")))?;
    let network = match &submit.network {
        Some(raw) => Some(crate::job::PhaseNetwork::parse(raw).ok_or_else(|| {
            ApiError::bad(format!(
                "network: expected {} (got {raw:?})",
                crate::job::PhaseNetwork::NAMES
            ))
        })?),
        None => None,
    };
    let mut job_dir = match &submit.job_dir {
        Some(d) => Some(dirs::under_root(&app.root, "job_dir", d)?),
        None => None,
    };
    // The config as a file beside the job dirs, so its relative paths are the root's.
    let staged = match &submit.config {
        Some(text) => {
            let parsed: Value =
                serde_yaml::from_str(text).map_err(|e| ApiError::bad(format!("job.yaml: {e}")))?;
            if job_dir.is_none() && parsed.get("job_dir").is_none() {
                job_dir = Some(default_job_dir(&app.root));
            }
            Some(Staged::write(&app.root, text)?)
        }
        None => None,
    };
    if job_dir.is_none() && staged.is_none() {
        job_dir = Some(default_job_dir(&app.root));
    }
    let root = app.root.to_string_lossy().into_owned();
    let args = RunArgs {
        tasks: submit
            .tasks
            .iter()
            .map(|t| {
                if FsPath::new(t).is_absolute() {
                    t.clone()
                } else {
                    format!("{root}/{t}")
                }
            })
            .collect(),
        config: staged.as_ref().map(|s| s.path.clone()),
        agents: submit.agents,
        attempts: submit.attempts,
        concurrency: submit.concurrency,
        job_dir,
        pass_threshold: submit.pass_threshold,
        variants: submit.variants,
        model: submit.model,
        network,
        retry_infra: false,
        backend: Default::default(),
        // The config's `otlp:`, when it has one.
        otlp: None,
    };
    let started = app.start(Start::Submit(Box::new(args))).await;
    let run = match (started, &staged) {
        (Ok(run), _) => run,
        (Err(mut e), Some(staged)) => {
            // The config is named as the user wrote it, not as the server staged it.
            e.message = e
                .message
                .replace(&staged.path.display().to_string(), "job.yaml");
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    drop(staged);
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({
            "id": run.id,
            "dir": relative(&app.root, &run.dir),
            "events": format!("/api/jobs/{}/events", run.id),
        })),
    )
        .into_response())
}

fn default_job_dir(root: &FsPath) -> PathBuf {
    root.join("jobs").join(crate::timefmt::now_compact())
}

/// A submitted config written under the root while it is resolved; removed on drop.
struct Staged {
    path: PathBuf,
}

impl Staged {
    fn write(root: &FsPath, text: &str) -> Result<Staged, ApiError> {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).map_err(|e| ApiError::internal(e.to_string()))?;
        let path = root.join(format!(".submitted-{}.yaml", crate::digest::hex(&bytes)));
        std::fs::write(&path, text).map_err(ApiError::internal)?;
        Ok(Staged { path })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn relative(root: &FsPath, dir: &FsPath) -> String {
    dir.strip_prefix(root)
        .unwrap_or(dir)
        .to_string_lossy()
        .into_owned()
}

/// One job in brief.
fn brief(app: &App, job: &dirs::JobDir) -> Value {
    let records = dirs::records(&job.dir);
    let counts = dirs::counts(&job.dir, &records);
    let status = app.status(&job.dir, &counts);
    let cancelled = app
        .run_of(&job.dir)
        .is_some_and(|r| r.cancelled.load(std::sync::atomic::Ordering::SeqCst));
    let mut out = json!({
        "id": job.id,
        "dir": relative(&app.root, &job.dir),
        "status": status,
        "cancelled": cancelled,
        "counts": counts,
    });
    if status == "interrupted" {
        out["resume"] = json!(format!("/api/jobs/{}/resume", job.id));
    }
    out
}

async fn list(State(app): State<Shared>) -> Result<Response, ApiError> {
    let jobs = tokio::task::spawn_blocking(move || {
        app.list()
            .iter()
            .map(|job| brief(&app, job))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(ApiError::internal)?;
    Ok(axum::Json(json!({ "jobs": jobs })).into_response())
}

async fn read(State(app): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    let out = tokio::task::spawn_blocking(move || {
        let mut out = brief(&app, &job);
        let records = dirs::records(&job.dir);
        let briefs: Vec<_> = records
            .iter()
            .map(|(_, r)| crate::job::Brief::of(r))
            .collect();
        out["arms"] = crate::job::summarize(&briefs)
            .iter()
            .map(|a| {
                json!({
                    "agent": a.agent,
                    "variant": a.variant,
                    "trials": a.trials,
                    "passed": a.passed,
                    "failed": a.failed,
                    "infra": a.infra,
                    "cancelled": a.cancelled,
                    "pass_rate": a.pass_rate(),
                })
            })
            .collect();
        out["running"] = app
            .run_of(&job.dir)
            .map(|run| {
                let trials = run.trials.lock().unwrap_or_else(|e| e.into_inner());
                trials
                    .iter()
                    .map(|(trial, phase)| json!({ "trial": trial, "phase": phase }))
                    .collect()
            })
            .unwrap_or_else(|| json!([]));
        out["config"] = std::fs::read_to_string(job.dir.join("job.yaml"))
            .map(Value::from)
            .unwrap_or(Value::Null);
        out["trials"] = records.into_iter().map(|(value, _)| value).collect();
        out
    })
    .await
    .map_err(ApiError::internal)?;
    Ok(axum::Json(out).into_response())
}

/// Server-sent events: the job's events as they come (its earlier ones first), `ended` last.
async fn events(State(app): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    let (tx, rx) = mpsc::channel::<Event>(256);
    match app.run_of(&job.dir) {
        Some(run) => {
            let (history, live) = run.feed.subscribe();
            tokio::spawn(relay(history, live, tx));
        }
        None => {
            tokio::spawn(super::follow::follow(job.dir.clone(), tx));
        }
    }
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        let sse = axum::response::sse::Event::default()
            .event(event.name)
            .data(event.data.to_string());
        Some((Ok::<_, Infallible>(sse), rx))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// A run's events so far, then its live ones, up to `ended`.
async fn relay(history: Vec<Event>, mut live: broadcast::Receiver<Event>, tx: mpsc::Sender<Event>) {
    for event in history {
        let end = event.is_end();
        if tx.send(event).await.is_err() || end {
            return;
        }
    }
    loop {
        match live.recv().await {
            Ok(event) => {
                let end = event.is_end();
                if tx.send(event).await.is_err() || end {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!(missed = n, "an event stream fell behind");
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A file of a job dir; nothing outside it (canonicalized; `..` and symlinks out refused).
async fn file(
    State(app): State<Shared>,
    Path((id, rel)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    let path = dirs::file(&job.dir, &rel)?;
    let bytes = tokio::fs::read(&path).await.map_err(ApiError::internal)?;
    let kind = if path.extension().is_some_and(|e| e == "json") {
        "application/json"
    } else if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, kind.parse().expect("a header value"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        "nosniff".parse().expect("a header value"),
    );
    Ok((headers, bytes).into_response())
}

fn accepted(what: Value) -> Response {
    (StatusCode::ACCEPTED, axum::Json(what)).into_response()
}

async fn cancel(State(app): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    let run = app
        .run_of(&job.dir)
        .filter(|r| r.ended().is_none())
        .ok_or_else(|| ApiError::conflict(format!("{id}: not running in this server")))?;
    run.cancel();
    Ok(accepted(json!({ "id": id, "cancelling": true })))
}

async fn cancel_trial(
    State(app): State<Shared>,
    Path((id, trial)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    let run = app
        .run_of(&job.dir)
        .filter(|r| r.ended().is_none())
        .ok_or_else(|| ApiError::conflict(format!("{id}: not running in this server")))?;
    if !run.cancel_trial(&trial) {
        return Err(ApiError::conflict(format!("{trial}: not running")));
    }
    Ok(accepted(
        json!({ "id": id, "trial": trial, "cancelling": true }),
    ))
}

async fn resume(State(app): State<Shared>, Path(id): Path<String>) -> Result<Response, ApiError> {
    again(app, id, false).await
}

async fn retry_infra(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    again(app, id, true).await
}

/// `arbiter resume DIR [--retry-infra]`, in this server.
async fn again(app: Shared, id: String, retry_infra: bool) -> Result<Response, ApiError> {
    let job = app.find(&id)?;
    if crate::job::imported_marker(&job.dir).is_some() {
        return Err(ApiError::bad(format!("{id}: an imported job is read-only")));
    }
    let run = app
        .start(Start::Resume {
            dir: job.dir.clone(),
            retry_infra,
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({
            "id": run.id,
            "dir": relative(&app.root, &run.dir),
            "events": format!("/api/jobs/{}/events", run.id),
        })),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Query {
    sql: String,
}

/// Read-only SQL over the results store, as `arbiter query` runs it.
async fn query(State(app): State<Shared>, body: Bytes) -> Result<Response, ApiError> {
    let q: Query =
        serde_json::from_slice(&body).map_err(|e| ApiError::bad(format!("request body: {e}")))?;
    let location = app
        .store
        .as_ref()
        .ok_or_else(|| ApiError::bad("the results store is off (start serve with --db)"))?;
    let refused = |e: crate::results::ResultsError| {
        if e.is_usage() {
            ApiError::bad(e)
        } else {
            ApiError::internal(e)
        }
    };
    let mut store = crate::results::Store::open_read_only(location)
        .await
        .map_err(refused)?;
    let answer = store.query(&q.sql).await.map_err(refused)?;
    let rows: Value = serde_json::from_str(&crate::results::render(
        &answer,
        crate::results::Format::Json,
    ))
    .map_err(ApiError::internal)?;
    Ok(axum::Json(json!({ "columns": answer.columns, "rows": rows })).into_response())
}
