//! The gateway server: one per job, serving any number of listeners (one per trial, opened in
//! the trial container's own network namespace by [`super::netns::listen_in_netns`]).
//!
//! A call: token → trial; budget admission; provider concurrency permit; upstream tries with
//! backoff; the answer is passed to the agent as it arrives (SSE streams chunk by chunk) while
//! it is metered; at its end one ledger line is written and the trial's [`Usage`] updated.
//!
//! Invariants: the real key is only ever in the upstream request's auth header; a token is
//! valid from [`Gateway::register_trial`] until [`Gateway::finish_trial`]; every admitted call
//! ends in exactly one ledger line and one [`Usage::add`].
//!
//! Over 600 lines: the three protocols' routes share token checks, budgets, retries and metering; the protocol-specific parts are small functions here.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::config::{Budget, MAX_BACKOFF, ProviderApi, ResolvedModel, Upstream};
use super::ledger::{BODY_CAP, BodyRecord, CallOutcome, CallRecord, LEDGER_SCHEMA, Ledger, Usage};
use super::scripted;
use super::usage::{Metered, Protocol, SseMeter, meter_json};

/// Largest request body accepted from an agent.
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// How long [`Gateway::finish_trial`] waits for calls still in flight.
const FINISH_GRACE: Duration = Duration::from_secs(10);
/// Connect timeout of upstream calls (a stream itself has no overall timeout).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// Headers never forwarded in either direction (hop-by-hop, credentials, framing).
const DROPPED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "authorization",
    "x-api-key",
    "api-key",
    // The gateway reads bodies to meter them: ask for identity encoding.
    "accept-encoding",
    "content-encoding",
];

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot build the upstream HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    #[error("cannot serve on the given listener: {0}")]
    Listener(#[source] std::io::Error),
    #[error("trial {trial_id}: unknown model provider {provider:?}")]
    UnknownProvider { trial_id: String, provider: String },
    #[error("trial {trial_id}: cannot open the model-call ledger {path}: {source}")]
    Ledger {
        trial_id: String,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create a trial token: {0}")]
    Random(String),
    #[error("unknown or finished trial token")]
    UnknownToken,
}

/// What a trial may use: given by the trial to [`Gateway::register_trial`].
#[derive(Debug, Clone)]
pub struct TrialGrant {
    pub trial_id: String,
    /// A `models[].name`.
    pub provider: String,
    /// The model the agent is configured with (reported by `GET /v1/models`).
    pub model: String,
    pub budget: Budget,
    /// Where the ledger goes: the trial's `agent/model-calls.jsonl`.
    pub ledger_path: PathBuf,
}

/// A trial's credential for the gateway, used as the API key inside its container.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TrialToken(String);

impl TrialToken {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TrialToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TrialToken(***)")
    }
}

struct Provider {
    model: ResolvedModel,
    permits: Arc<Semaphore>,
}

#[derive(Default)]
struct Counters {
    usage: Usage,
    /// Calls admitted whose ledger line is not written yet.
    open_calls: u64,
    seq: u64,
    /// Scripted provider: requests seen per turn (fault `times`).
    script_tries: HashMap<usize, u32>,
}

struct TrialState {
    grant: TrialGrant,
    provider: Arc<Provider>,
    ledger: Ledger,
    counters: Mutex<Counters>,
    in_flight: AtomicUsize,
    idle: Notify,
    /// Shut-down signals of the listeners bound to this trial.
    listeners: Mutex<Vec<oneshot::Sender<()>>>,
    secrets: Arc<Vec<String>>,
}

impl TrialState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Counters> {
        // A panic while holding the lock cannot leave counters half-updated in a way that
        // matters more than losing the trial's usage; recover the data.
        self.counters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Keeps a trial's in-flight count while a call runs (including its streaming tail).
struct InFlight(Arc<TrialState>);

impl InFlight {
    fn new(t: &Arc<TrialState>) -> Self {
        t.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(t.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

struct Inner {
    providers: HashMap<String, Arc<Provider>>,
    trials: Mutex<HashMap<String, Arc<TrialState>>>,
    client: reqwest::Client,
    secrets: Arc<Vec<String>>,
}

impl Inner {
    fn trial(&self, token: &str) -> Option<Arc<TrialState>> {
        self.trials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(token)
            .cloned()
    }
}

/// The per-job model gateway. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

/// A running listener; dropping it leaves the server running, [`ServerHandle::shutdown`]
/// stops it.
#[derive(Debug)]
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// Stop accepting, let requests in progress finish, and wait for the server to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

#[derive(Clone)]
struct App {
    inner: Arc<Inner>,
    /// A trial-bound listener accepts only this token.
    only: Option<String>,
}

impl fmt::Debug for Gateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut providers: Vec<&String> = self.inner.providers.keys().collect();
        providers.sort();
        f.debug_struct("Gateway")
            .field("providers", &providers)
            .finish_non_exhaustive()
    }
}

impl Gateway {
    /// One gateway for a job's resolved `models:`.
    pub fn start(models: Vec<ResolvedModel>) -> Result<Gateway, GatewayError> {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(GatewayError::Client)?;
        let secrets: Vec<String> = models
            .iter()
            .filter_map(|m| m.secret().map(str::to_string))
            .collect();
        let providers = models
            .into_iter()
            .map(|m| {
                let permits = Arc::new(Semaphore::new(m.max_concurrency.max(1) as usize));
                (m.name.clone(), Arc::new(Provider { model: m, permits }))
            })
            .collect();
        Ok(Gateway {
            inner: Arc::new(Inner {
                providers,
                trials: Mutex::new(HashMap::new()),
                client,
                secrets: Arc::new(secrets),
            }),
        })
    }

    /// Serve every registered trial's token on `listener` (must be called in a tokio runtime).
    pub fn serve(&self, listener: std::net::TcpListener) -> Result<ServerHandle, GatewayError> {
        self.spawn_server(listener, None)
    }

    /// Serve only `token` on `listener` (the trial's own loopback); the server stops when the
    /// trial is finished.
    pub fn serve_trial(
        &self,
        listener: std::net::TcpListener,
        token: &TrialToken,
    ) -> Result<ServerHandle, GatewayError> {
        let trial = self
            .inner
            .trial(token.as_str())
            .ok_or(GatewayError::UnknownToken)?;
        let mut handle = self.spawn_server(listener, Some(token.0.clone()))?;
        // The trial holds the stop signal; the handle keeps only the task and address.
        if let Some(stop) = handle.stop.take() {
            trial
                .listeners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(stop);
        }
        Ok(handle)
    }

    fn spawn_server(
        &self,
        listener: std::net::TcpListener,
        only: Option<String>,
    ) -> Result<ServerHandle, GatewayError> {
        listener
            .set_nonblocking(true)
            .map_err(GatewayError::Listener)?;
        let addr = listener.local_addr().map_err(GatewayError::Listener)?;
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(GatewayError::Listener)?;
        let app = App {
            inner: self.inner.clone(),
            only,
        };
        let router = Router::new()
            .route("/v1/messages", endpoint(Protocol::AnthropicMessages))
            .route("/v1/chat/completions", endpoint(Protocol::ChatCompletions))
            .route("/v1/responses", endpoint(Protocol::Responses))
            .route("/v1/models", get(list_models))
            .fallback(not_found)
            .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
            .with_state(app);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    // A dropped handle is not a stop signal: only an explicit one is.
                    if stopped.await.is_err() {
                        std::future::pending::<()>().await;
                    }
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(%addr, error = %e, "gateway listener ended with an error");
            }
        });
        Ok(ServerHandle {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// Admit a trial: a fresh random token, an open ledger, an empty [`Usage`].
    pub fn register_trial(&self, grant: TrialGrant) -> Result<TrialToken, GatewayError> {
        let provider = self
            .inner
            .providers
            .get(&grant.provider)
            .cloned()
            .ok_or_else(|| GatewayError::UnknownProvider {
                trial_id: grant.trial_id.clone(),
                provider: grant.provider.clone(),
            })?;
        let ledger =
            Ledger::open(&grant.ledger_path, self.inner.secrets.to_vec()).map_err(|source| {
                GatewayError::Ledger {
                    trial_id: grant.trial_id.clone(),
                    path: grant.ledger_path.display().to_string(),
                    source,
                }
            })?;
        let mut raw = [0u8; 24];
        getrandom::fill(&mut raw).map_err(|e| GatewayError::Random(e.to_string()))?;
        let token = format!("arb-{}", crate::digest::hex(&raw));
        let usage = Usage::new(&grant.budget, provider.model.price.is_some());
        let state = Arc::new(TrialState {
            grant,
            provider,
            ledger,
            counters: Mutex::new(Counters {
                usage,
                ..Counters::default()
            }),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
            listeners: Mutex::new(Vec::new()),
            secrets: self.inner.secrets.clone(),
        });
        self.inner
            .trials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), state);
        Ok(TrialToken(token))
    }

    /// The usage of the trial whose token is `token`, while it runs (`None` once finished).
    pub fn usage_by_str(&self, token: &str) -> Option<Usage> {
        self.inner.trial(token).map(|t| t.lock().usage.clone())
    }

    /// The trial's usage so far.
    pub fn usage(&self, token: &TrialToken) -> Option<Usage> {
        self.inner
            .trial(token.as_str())
            .map(|t| t.lock().usage.clone())
    }

    /// End a trial: its token stops working at once, its listeners stop, calls still in
    /// flight get a few seconds to end, the ledger is synced and closed. Returns the totals.
    pub async fn finish_trial(&self, token: &TrialToken) -> Result<Usage, GatewayError> {
        let trial = self
            .inner
            .trials
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(token.as_str())
            .ok_or(GatewayError::UnknownToken)?;
        for stop in trial
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = stop.send(());
        }
        let deadline = tokio::time::Instant::now() + FINISH_GRACE;
        loop {
            let idle = trial.idle.notified();
            if trial.in_flight.load(Ordering::SeqCst) == 0 {
                break;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                tracing::warn!(trial = %trial.grant.trial_id, "model calls still running when the trial finished; their lines are dropped");
                break;
            }
        }
        if let Err(e) = trial.ledger.close() {
            tracing::warn!(trial = %trial.grant.trial_id, error = %e, "cannot sync the model-call ledger");
        }
        Ok(trial.lock().usage.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers

/// `POST` of `protocol`'s endpoint: the call is proxied as that protocol.
fn endpoint(protocol: Protocol) -> axum::routing::MethodRouter<App> {
    post(
        move |State(app): State<App>, uri: Uri, headers: HeaderMap, body: Bytes| {
            proxy(app, protocol, uri, headers, body)
        },
    )
}

async fn not_found(headers: HeaderMap, uri: Uri) -> Response {
    let shape = if headers.contains_key("x-api-key") || headers.contains_key("anthropic-version") {
        Protocol::AnthropicMessages
    } else {
        Protocol::ChatCompletions
    };
    error_response(
        shape,
        StatusCode::NOT_FOUND,
        "not_found_error",
        &format!("arbiter gateway: no route for {}", uri.path()),
    )
}

fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(v.trim());
    }
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}

fn authorise(app: &App, headers: &HeaderMap) -> Option<Arc<TrialState>> {
    let token = presented_token(headers)?;
    if app.only.as_deref().is_some_and(|only| only != token) {
        return None;
    }
    app.inner.trial(token)
}

async fn list_models(State(app): State<App>, headers: HeaderMap) -> Response {
    let shape = if headers.contains_key("x-api-key") {
        Protocol::AnthropicMessages
    } else {
        Protocol::ChatCompletions
    };
    let Some(trial) = authorise(&app, &headers) else {
        return unauthorised(shape);
    };
    let m = &trial.grant.model;
    // One body both SDK families read: OpenAI's list and Anthropic's page.
    let body = json!({
        "object": "list",
        "data": [{"id": m, "object": "model", "type": "model", "display_name": m,
                  "created": 0, "created_at": "1970-01-01T00:00:00Z", "owned_by": "arbiter"}],
        "has_more": false, "first_id": m, "last_id": m,
    });
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn error_response(protocol: Protocol, status: StatusCode, kind: &str, message: &str) -> Response {
    let body = match protocol {
        Protocol::AnthropicMessages => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Protocol::ChatCompletions | Protocol::Responses => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": kind}})
        }
    };
    (status, axum::Json(body)).into_response()
}

fn unauthorised(protocol: Protocol) -> Response {
    let kind = match protocol {
        Protocol::AnthropicMessages => "authentication_error",
        _ => "invalid_api_key",
    };
    error_response(
        protocol,
        StatusCode::UNAUTHORIZED,
        kind,
        "arbiter gateway: unknown or expired trial token",
    )
}

fn speaks(api: ProviderApi, protocol: Protocol) -> bool {
    match api {
        ProviderApi::Scripted => true,
        ProviderApi::Anthropic => protocol == Protocol::AnthropicMessages,
        ProviderApi::Openai => protocol != Protocol::AnthropicMessages,
    }
}

fn scrub(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if !s.is_empty() {
            out = out.replace(s.as_str(), "***");
        }
    }
    out
}

/// The pieces of a ledger line known when a call starts.
struct CallStart {
    trial: Arc<TrialState>,
    protocol: Protocol,
    seq: u64,
    time: String,
    started: Instant,
    model: Option<String>,
    stream: bool,
    request: BodyRecord,
    /// The ledger line is written; set by [`CallStart::finish`].
    done: bool,
}

/// How a call ended.
struct CallEnd {
    status: u16,
    outcome: CallOutcome,
    attempts: u32,
    metered: Metered,
    upstream_errors: Vec<String>,
    detail: Option<String>,
    response: BodyRecord,
}

impl Drop for CallStart {
    /// The agent hung up before the call ended (the handler future was dropped): the call
    /// still gets its ledger line, so none is lost.
    fn drop(&mut self) {
        if !self.done {
            self.write(CallEnd::unanswered(
                499,
                CallOutcome::ClientClosed,
                "the agent closed the connection before the response".into(),
            ));
        }
    }
}

impl CallEnd {
    /// A call that ended before any upstream reply was metered, for the reason `detail`.
    fn unanswered(status: u16, outcome: CallOutcome, detail: String) -> CallEnd {
        CallEnd {
            status,
            outcome,
            attempts: 0,
            metered: Metered::default(),
            upstream_errors: Vec::new(),
            detail: Some(detail),
            response: BodyRecord::default(),
        }
    }

    /// The model cannot be reached (502 `unavailable`), for the reason `why`.
    fn unavailable(why: String) -> CallEnd {
        CallEnd::unanswered(502, CallOutcome::Unavailable, why)
    }
}

impl CallStart {
    fn finish(mut self, end: CallEnd) {
        self.write(end);
    }

    /// Ends the call as `end` (built on [`CallEnd::unavailable`]) and answers the agent with
    /// the matching 502.
    fn unavailable(self, end: CallEnd) -> Response {
        let resp = unavailable_response(self.protocol, end.detail.as_deref().unwrap_or_default());
        self.finish(end);
        resp
    }

    fn write(&mut self, end: CallEnd) {
        self.done = true;
        let price = self.trial.provider.model.price;
        let cost = match (&end.metered.tokens, &price) {
            (Some(t), Some(p)) => Some(t.cost(p)),
            _ => None,
        };
        let record = CallRecord {
            schema: LEDGER_SCHEMA.to_string(),
            seq: self.seq,
            time: std::mem::take(&mut self.time),
            api: self.protocol,
            provider: self.trial.grant.provider.clone(),
            model: self.model.take(),
            stream: self.stream,
            status: end.status,
            outcome: end.outcome,
            attempts: end.attempts,
            latency_ms: self.started.elapsed().as_millis() as u64,
            tokens: end.metered.tokens,
            cost_usd: cost,
            stop_reason: end.metered.stop_reason,
            upstream_errors: end.upstream_errors,
            detail: end.detail.map(|d| scrub(&d, &self.trial.secrets)),
            request: std::mem::take(&mut self.request),
            response: end.response,
        };
        // Ledger line and usage under one lock, so they never disagree.
        let mut c = self.trial.lock();
        if let Err(e) = self.trial.ledger.append(&record) {
            tracing::warn!(trial = %self.trial.grant.trial_id, error = %e, "cannot append to the model-call ledger");
        }
        if end.outcome != CallOutcome::BudgetExhausted {
            c.open_calls = c.open_calls.saturating_sub(1);
        }
        if end.outcome == CallOutcome::Unavailable && c.usage.unavailable.is_none() {
            c.usage.unavailable = record.detail.clone();
        }
        c.usage.add(&record, price.as_ref());
    }
}

/// An upstream answer with its body still to come.
struct UpstreamReply {
    status: u16,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: BoxStream<'static, Result<Bytes, String>>,
}

impl UpstreamReply {
    fn is_sse(&self) -> bool {
        self.headers.iter().any(|(k, v)| {
            k == "content-type"
                && v.to_str()
                    .is_ok_and(|v| v.trim_start().starts_with("text/event-stream"))
        })
    }

    fn retry_after(&self) -> Option<Duration> {
        let v = self
            .headers
            .iter()
            .find(|(k, _)| k == "retry-after")?
            .1
            .to_str()
            .ok()?;
        let secs: f64 = v.trim().parse().ok()?;
        (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
    }

    async fn read_all(mut self) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        while let Some(chunk) = self.body.next().await {
            out.extend_from_slice(&chunk?);
        }
        Ok(out)
    }
}

fn is_retryable(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

async fn proxy(
    app: App,
    protocol: Protocol,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(trial) = authorise(&app, &headers) else {
        return unauthorised(protocol);
    };
    let api = trial.provider.model.api;
    if !speaks(api, protocol) {
        return error_response(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            &format!(
                "arbiter gateway: provider {:?} speaks the {} API, not {}",
                trial.grant.provider,
                api.as_str(),
                protocol.as_str()
            ),
        );
    }
    let Ok(request_json) = serde_json::from_slice::<Value>(&body) else {
        return error_response(
            protocol,
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "arbiter gateway: the request body is not JSON",
        );
    };
    let stream = request_json.get("stream").and_then(Value::as_bool) == Some(true);
    let model = request_json
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_string);
    let _in_flight = InFlight::new(&trial);

    // Budget admission and sequence number, in one step.
    let (seq, refusal, unavailable) = {
        let mut c = trial.lock();
        c.seq += 1;
        let refusal = c.usage.over_budget(c.open_calls);
        if refusal.is_none() {
            c.open_calls += 1;
        }
        (c.seq, refusal, c.usage.unavailable.clone())
    };
    let start = CallStart {
        trial: trial.clone(),
        protocol,
        seq,
        time: crate::timefmt::now_rfc3339_micros(),
        started: Instant::now(),
        model,
        stream,
        request: BodyRecord::of(&body),
        done: false,
    };
    if let Some(limit) = refusal {
        let message = format!(
            "arbiter gateway: this trial's model budget is used up ({limit}); no further calls are served"
        );
        let resp = error_response(
            protocol,
            StatusCode::BAD_REQUEST,
            "budget_exhausted",
            &message,
        );
        start.finish(CallEnd::unanswered(
            400,
            CallOutcome::BudgetExhausted,
            limit.to_string(),
        ));
        return resp;
    }
    if let Some(why) = unavailable {
        // The upstream already failed for this trial: the trial is an infra error anyway.
        return start.unavailable(CallEnd::unavailable(why));
    }

    // What goes upstream: the agent's body, except that a streaming chat call always asks for
    // the final usage chunk (otherwise nothing could be metered).
    let (upstream_json, upstream_body) = if protocol == Protocol::ChatCompletions
        && stream
        && request_json
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            != Some(true)
    {
        let mut v = request_json;
        v["stream_options"]["include_usage"] = json!(true);
        let bytes = Bytes::from(v.to_string());
        (v, bytes)
    } else {
        (request_json, body.clone())
    };

    let permit = match trial.provider.permits.clone().acquire_owned().await {
        Ok(p) => p,
        Err(_) => {
            return start.unavailable(CallEnd::unavailable("provider closed".into()));
        }
    };

    let retry = trial.provider.model.retry;
    let mut errors = Vec::new();
    let mut attempts = 0u32;
    let reply = loop {
        attempts += 1;
        let last_try = attempts > retry.max;
        match send(
            &app.inner,
            &trial,
            protocol,
            &uri,
            &headers,
            &upstream_body,
            &upstream_json,
        )
        .await
        {
            Ok(reply) if matches!(reply.status, 401 | 403) => {
                errors.push(reply.status.to_string());
                let why = format!(
                    "upstream refused arbiter's credentials for provider {:?} (HTTP {})",
                    trial.grant.provider, reply.status
                );
                let response = BodyRecord::of(&reply.read_all().await.unwrap_or_default());
                return start.unavailable(CallEnd {
                    attempts,
                    upstream_errors: errors,
                    response,
                    ..CallEnd::unavailable(why)
                });
            }
            Ok(reply) if is_retryable(reply.status) && !last_try => {
                errors.push(reply.status.to_string());
                let wait = reply
                    .retry_after()
                    .map_or(retry.backoff(attempts), |ra| {
                        ra.max(retry.backoff(attempts))
                    })
                    .min(MAX_BACKOFF);
                let _ = reply.read_all().await;
                tracing::debug!(trial = %trial.grant.trial_id, attempt = attempts, ?wait, "retrying upstream");
                tokio::time::sleep(wait).await;
            }
            Ok(reply) => break reply,
            Err(e) if !last_try => {
                errors.push("connect".to_string());
                tracing::debug!(trial = %trial.grant.trial_id, attempt = attempts, error = %scrub(&e, &trial.secrets), "upstream unreachable, retrying");
                tokio::time::sleep(retry.backoff(attempts)).await;
            }
            Err(e) => {
                errors.push("connect".to_string());
                let why = format!(
                    "upstream of provider {:?} unreachable after {attempts} tries: {e}",
                    trial.grant.provider
                );
                let why = scrub(&why, &trial.secrets);
                return start.unavailable(CallEnd {
                    attempts,
                    upstream_errors: errors,
                    ..CallEnd::unavailable(why)
                });
            }
        }
    };

    let status = reply.status;
    let mut builder = Response::builder().status(status);
    for (k, v) in &reply.headers {
        if !DROPPED_HEADERS.contains(&k.as_str()) {
            builder = builder.header(k, v);
        }
    }
    if status < 300 && reply.is_sse() {
        return stream_through(builder, reply, start, attempts, errors, permit, _in_flight);
    }

    // A whole body: read, meter, pass on.
    match reply.read_all().await {
        Ok(bytes) => {
            let metered = meter_json(protocol, &bytes);
            let ok = (200..300).contains(&status);
            if !ok {
                errors.push(status.to_string());
            } else if !metered.complete {
                errors.push("malformed_body".to_string());
            }
            let outcome = if ok && metered.complete {
                CallOutcome::Ok
            } else {
                CallOutcome::UpstreamError
            };
            let response = BodyRecord::of(&bytes);
            start.finish(CallEnd {
                status,
                outcome,
                attempts,
                metered,
                upstream_errors: errors,
                detail: None,
                response,
            });
            drop(permit);
            builder
                .body(Body::from(bytes))
                .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
        }
        Err(e) => {
            errors.push("stream_cut".to_string());
            let why = scrub(&format!("upstream body broke off: {e}"), &trial.secrets);
            start.finish(CallEnd {
                attempts,
                upstream_errors: errors,
                ..CallEnd::unanswered(502, CallOutcome::StreamCut, why.clone())
            });
            error_response(protocol, StatusCode::BAD_GATEWAY, "api_error", &why)
        }
    }
}

fn unavailable_response(protocol: Protocol, why: &str) -> Response {
    error_response(
        protocol,
        StatusCode::BAD_GATEWAY,
        "model_unavailable",
        &format!("arbiter gateway: {why}"),
    )
}

/// Running sha256 and a capped copy of a body as it passes.
struct Tap {
    hasher: Sha256,
    kept: Vec<u8>,
    bytes: u64,
}

impl Tap {
    fn new() -> Self {
        Tap {
            hasher: Sha256::new(),
            kept: Vec::new(),
            bytes: 0,
        }
    }

    fn feed(&mut self, chunk: &[u8]) {
        self.hasher.update(chunk);
        self.bytes += chunk.len() as u64;
        let room = BODY_CAP.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }

    fn record(self) -> BodyRecord {
        BodyRecord {
            sha256: crate::digest::hex(&self.hasher.finalize()),
            truncated: self.bytes > self.kept.len() as u64,
            bytes: self.bytes,
            body: String::from_utf8_lossy(&self.kept).into_owned(),
        }
    }
}

/// Pass an SSE stream to the agent chunk by chunk, metering it; the ledger line is written
/// when the stream ends (or breaks, or the agent hangs up).
fn stream_through(
    builder: axum::http::response::Builder,
    mut reply: UpstreamReply,
    start: CallStart,
    attempts: u32,
    mut errors: Vec<String>,
    permit: OwnedSemaphorePermit,
    in_flight: InFlight,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let status = reply.status;
    let protocol = start.protocol;
    tokio::spawn(async move {
        let _permit = permit;
        let _in_flight = in_flight;
        let mut meter = SseMeter::new(protocol);
        let mut tap = Tap::new();
        let mut outcome = CallOutcome::Ok;
        let mut detail = None;
        while let Some(item) = reply.body.next().await {
            match item {
                Ok(chunk) => {
                    meter.feed(&chunk);
                    tap.feed(&chunk);
                    if tx.send(Ok(chunk)).await.is_err() {
                        outcome = CallOutcome::ClientClosed;
                        break;
                    }
                }
                Err(e) => {
                    outcome = CallOutcome::StreamCut;
                    detail = Some(format!("upstream stream broke off: {e}"));
                    let _ = tx
                        .send(Err(std::io::Error::other("upstream stream broke off")))
                        .await;
                    break;
                }
            }
        }
        drop(tx);
        let metered = meter.finish();
        if let Some(e) = &metered.error_type {
            errors.push(e.clone());
            if outcome == CallOutcome::Ok {
                outcome = CallOutcome::UpstreamError;
            }
        }
        if outcome == CallOutcome::Ok && !metered.complete {
            outcome = CallOutcome::StreamCut;
            detail = Some("the stream ended without the protocol's end event".into());
        }
        if outcome == CallOutcome::StreamCut {
            errors.push("stream_cut".to_string());
        }
        start.finish(CallEnd {
            status,
            outcome,
            attempts,
            metered,
            upstream_errors: errors,
            detail,
            response: tap.record(),
        });
    });
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }));
    builder
        .body(body)
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// One try upstream: HTTP for real providers, in-process for the scripted one.
async fn send(
    inner: &Inner,
    trial: &TrialState,
    protocol: Protocol,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
    request_json: &Value,
) -> Result<UpstreamReply, String> {
    let model = &trial.provider.model;
    match &model.upstream {
        Upstream::Scripted(script) => {
            let r = scripted::respond(script, protocol, request_json, |turn| {
                let mut c = trial.lock();
                let n = c.script_tries.entry(turn).or_insert(0);
                let before = *n;
                *n += 1;
                before
            });
            if !r.delay.is_zero() {
                tokio::time::sleep(r.delay).await;
            }
            let cut_after = r.cut_after;
            let chunks: Vec<Result<Bytes, String>> = r
                .chunks
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    if cut_after.is_some_and(|n| i >= n) {
                        Err("scripted fault: stream cut".to_string())
                    } else {
                        Ok(Bytes::from(c))
                    }
                })
                .collect();
            // Stop at the first error, as a broken connection would.
            let body = futures_util::stream::iter(chunks)
                .scan(false, |failed, item| {
                    let out = if *failed { None } else { Some(item) };
                    if matches!(out, Some(Err(_))) {
                        *failed = true;
                    }
                    futures_util::future::ready(out)
                })
                .boxed();
            Ok(UpstreamReply {
                status: r.status,
                headers: vec![(
                    HeaderName::from_static("content-type"),
                    HeaderValue::from_static(r.content_type),
                )],
                body,
            })
        }
        Upstream::Http { base_url, api_key } => {
            // OpenAI's base ends in /v1 already; Anthropic's does not.
            let path = uri.path();
            let tail = match model.api {
                ProviderApi::Openai => path.strip_prefix("/v1").unwrap_or(path),
                _ => path,
            };
            let mut url = format!("{base_url}{tail}");
            if let Some(q) = uri.query() {
                url.push('?');
                url.push_str(q);
            }
            let mut req = inner.client.request(Method::POST, &url);
            for (k, v) in headers {
                if !DROPPED_HEADERS.contains(&k.as_str()) {
                    req = req.header(k, v);
                }
            }
            if let Some(key) = api_key {
                req = match model.api {
                    ProviderApi::Anthropic => req.header("x-api-key", key),
                    _ => req.bearer_auth(key),
                };
            }
            let resp = req
                .body(body.clone())
                .send()
                .await
                .map_err(|e| error_chain(&e))?;
            let status = resp.status().as_u16();
            let headers = resp
                .headers()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let body = resp
                .bytes_stream()
                .map(|r| r.map_err(|e| error_chain(&e)))
                .boxed();
            Ok(UpstreamReply {
                status,
                headers,
                body,
            })
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
