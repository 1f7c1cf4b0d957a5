//! The model gateway end to end: a real server on 127.0.0.1, real HTTP clients, a fake
//! upstream (an axum server playing Anthropic / OpenAI) and the scripted provider.
//! No traffic leaves the machine.

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter::gateway::{
    Budget, CallOutcome, CallRecord, Gateway, ModelConfig, ResolvedModel, TrialGrant, TrialToken,
    Usage,
};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

const REAL_KEY: &str = "sk-test-REAL-key-0123456789abcdef";

// ---------------------------------------------------------------------------------------------
// Fake upstream

#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Value,
}

#[derive(Clone)]
struct FakeReply {
    status: u16,
    content_type: &'static str,
    body: String,
    delay: Duration,
}

fn reply(status: u16, content_type: &'static str, body: impl Into<String>) -> FakeReply {
    FakeReply {
        status,
        content_type,
        body: body.into(),
        delay: Duration::ZERO,
    }
}

type Behaviour = dyn Fn(usize, &Seen) -> FakeReply + Send + Sync;

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Vec<Seen>>>,
    calls: Arc<AtomicUsize>,
    current: Arc<AtomicUsize>,
    max_concurrent: Arc<AtomicUsize>,
    behaviour: Arc<Behaviour>,
}

impl Fake {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn fake_handler(
    axum::extract::State(fake): axum::extract::State<Fake>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = fake.current.fetch_add(1, Ordering::SeqCst) + 1;
    fake.max_concurrent.fetch_max(now, Ordering::SeqCst);
    let seen = Seen {
        path: uri.to_string(),
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let n = fake.calls.fetch_add(1, Ordering::SeqCst);
    let r = (fake.behaviour)(n, &seen);
    fake.seen.lock().unwrap().push(seen);
    tokio::time::sleep(r.delay).await;
    fake.current.fetch_sub(1, Ordering::SeqCst);
    (
        StatusCode::from_u16(r.status).unwrap(),
        [("content-type", r.content_type)],
        r.body,
    )
        .into_response()
}

async fn fake_upstream(
    behaviour: impl Fn(usize, &Seen) -> FakeReply + Send + Sync + 'static,
) -> (String, Fake) {
    let fake = Fake {
        seen: Arc::default(),
        calls: Arc::default(),
        current: Arc::default(),
        max_concurrent: Arc::default(),
        behaviour: Arc::new(behaviour),
    };
    let app = axum::Router::new()
        .fallback(fake_handler)
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), fake)
}

// Canned bodies, shaped as the public API references show them.

fn anthropic_body(input: u64, output: u64, cache_read: u64, cache_write: u64) -> String {
    json!({"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
           "stop_sequence": null,
           "usage": {"input_tokens": input, "output_tokens": output,
                     "cache_creation_input_tokens": cache_write,
                     "cache_read_input_tokens": cache_read}})
    .to_string()
}

fn anthropic_sse(input: u64, output: u64, cache_read: u64, cache_write: u64) -> String {
    let start = json!({"type": "message_start", "message": {"id": "msg_02", "type": "message",
        "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": 1,
        "cache_creation_input_tokens": cache_write, "cache_read_input_tokens": cache_read}}});
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
        "stop_sequence": null}, "usage": {"output_tokens": output}});
    format!(
        "event: message_start\ndata: {start}\n\n\
         event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
         event: ping\ndata: {{\"type\": \"ping\"}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hello\"}}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
         event: message_delta\ndata: {delta}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    )
}

fn chat_sse(prompt: u64, completion: u64, cached: u64, with_usage: bool) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-4o", "choices": [{"index": 0, "delta": delta,
               "finish_reason": finish}]})
    };
    let mut s = format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\n",
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Hello"}), Value::Null),
        chunk(json!({}), json!("stop"))
    );
    if with_usage {
        let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
            "model": "gpt-4o", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion,
                      "prompt_tokens_details": {"cached_tokens": cached}}});
        s.push_str(&format!("data: {usage}\n\n"));
    }
    s.push_str("data: [DONE]\n\n");
    s
}

// ---------------------------------------------------------------------------------------------
// Gateway set-up

fn model(yaml: &str, dir: &Path) -> ResolvedModel {
    let cfg: ModelConfig = serde_yaml::from_str(yaml).unwrap();
    cfg.resolve_with(0, dir, |name| {
        (name == "TEST_KEY").then(|| REAL_KEY.to_string())
    })
    .unwrap()
}

struct Rig {
    gateway: Gateway,
    base: String,
    dir: tempfile::TempDir,
    client: reqwest::Client,
}

impl Rig {
    async fn new(models: Vec<ResolvedModel>, dir: tempfile::TempDir) -> Rig {
        let gateway = Gateway::start(models).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let handle = gateway.serve(listener).unwrap();
        Rig {
            gateway,
            base: format!("http://{}", handle.addr),
            dir,
            client: reqwest::Client::new(),
        }
    }

    fn ledger_path(&self, trial: &str) -> PathBuf {
        self.dir
            .path()
            .join("trials")
            .join(trial)
            .join("agent/model-calls.jsonl")
    }

    fn trial(&self, trial: &str, provider: &str, budget: Budget) -> TrialToken {
        let grant = grant(trial, provider, "test-model", self.ledger_path(trial));
        self.gateway
            .register_trial(TrialGrant { budget, ..grant })
            .unwrap()
    }

    /// A trial of `provider` without a budget.
    fn open(&self, trial: &str, provider: &str) -> TrialToken {
        self.trial(trial, provider, Budget::default())
    }

    /// [`Rig::post`] with the trial's token.
    async fn call(&self, token: &TrialToken, path: &str, body: &Value) -> reqwest::Response {
        self.post(token.as_str(), path, body).await
    }

    async fn finish(&self, token: &TrialToken) -> Usage {
        self.gateway.finish_trial(token).await.unwrap()
    }

    /// POST as an agent would: Anthropic with `x-api-key`, OpenAI with a bearer token.
    async fn post(&self, token: &str, path: &str, body: &Value) -> reqwest::Response {
        let mut req = self.client.post(format!("{}{path}", self.base)).json(body);
        req = if path == "/v1/messages" {
            req.header("x-api-key", token)
                .header("anthropic-version", "2023-06-01")
        } else {
            req.bearer_auth(token)
        };
        req.send().await.unwrap()
    }

    fn ledger(&self, trial: &str) -> Vec<CallRecord> {
        std::fs::read_to_string(self.ledger_path(trial))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn ledger_text(&self, trial: &str) -> String {
        std::fs::read_to_string(self.ledger_path(trial)).unwrap()
    }
}

/// A trial's grant without a budget.
fn grant(trial: &str, provider: &str, model: &str, ledger_path: PathBuf) -> TrialGrant {
    TrialGrant {
        trial_id: trial.to_string(),
        provider: provider.to_string(),
        model: model.to_string(),
        budget: Budget::default(),
        ledger_path,
    }
}

/// A gateway serving the one model `yaml` (resolved in a fresh dir).
async fn rig(yaml: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let m = model(yaml, dir.path());
    Rig::new(vec![m], dir).await
}

/// The scripted provider `fake` playing `script` (written to `dir/script.json`), with the
/// model settings `extra` (`, key: value` pairs) besides.
fn scripted_model(dir: &Path, script: &Value, extra: &str) -> ResolvedModel {
    std::fs::write(dir.join("script.json"), script.to_string()).unwrap();
    model(
        &format!("{{name: fake, api: scripted, script: script.json{extra}}}"),
        dir,
    )
}

/// A gateway serving [`scripted_model`].
async fn scripted_rig(script: &Value, extra: &str) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let m = scripted_model(dir.path(), script, extra);
    Rig::new(vec![m], dir).await
}

/// `r`, answered after `delay`.
fn delayed(mut r: FakeReply, delay: Duration) -> FakeReply {
    r.delay = delay;
    r
}

fn conversation(assistant_turns: usize) -> Vec<Value> {
    let mut msgs = vec![json!({"role": "user", "content": "go"})];
    for i in 0..assistant_turns {
        msgs.push(json!({"role": "assistant", "content": format!("turn {i}")}));
        msgs.push(json!({"role": "user", "content": "ok"}));
    }
    msgs
}

fn tokens(u: &Usage) -> (u64, u64, u64, u64) {
    (
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
    )
}

// ---------------------------------------------------------------------------------------------
// Scripted provider through every protocol

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_every_protocol_streaming_and_not_meters_exactly() {
    let script = json!({"turns": [
        {"say": "Looking.", "run": "ls /app",
         "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_tokens": 1000}},
        {"write": {"path": "/app/out.txt", "content": "hello\n"},
         "usage": {"input_tokens": 200, "output_tokens": 20, "cache_read_tokens": 2000}},
        {"say": "Done, the file is written.",
         "usage": {"input_tokens": 300, "output_tokens": 30, "cache_read_tokens": 3000}}
    ]});
    let rig = scripted_rig(&script, "").await;
    let token = rig.open("t1", "fake");
    let tok = token.as_str();

    let bash_tool = json!([{"name": "Bash", "description": "run",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]);
    let fn_tool = json!([{"type": "function", "function": {"name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]);
    let resp_tool = json!([{"type": "function", "name": "shell",
        "parameters": {"type": "object", "properties": {"command": {"type": "array"}}}}]);

    let mut expected = (0, 0, 0, 0);
    for stream in [false, true] {
        // Anthropic, turn 0: a Bash tool_use.
        let r = rig
            .post(
                tok,
                "/v1/messages",
                &json!({"model": "claude-x", "max_tokens": 100, "stream": stream,
                        "messages": conversation(0), "tools": bash_tool}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        if stream {
            assert!(text.contains("event: message_stop"), "{text}");
            assert!(text.contains("input_json_delta"), "{text}");
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["content"][1]["name"], "Bash");
            assert_eq!(v["content"][1]["input"]["command"], "ls /app");
        }
        // Chat, turn 1: a bash function call that writes the file.
        let r = rig
            .post(
                tok,
                "/v1/chat/completions",
                &json!({"model": "gpt-x", "stream": stream, "messages": conversation(1),
                        "tools": fn_tool}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("printf"), "{text}");
        if stream {
            // The gateway asked for the usage chunk on the agent's behalf.
            assert!(text.contains("\"usage\""), "{text}");
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        }
        // Responses, turn 2: the final text.
        let r = rig
            .post(
                tok,
                "/v1/responses",
                &json!({"model": "gpt-y", "stream": stream, "tools": resp_tool, "input": [
                    {"role": "user", "content": "go"},
                    {"type": "function_call", "call_id": "a", "name": "shell", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "a", "output": ""},
                    {"type": "function_call", "call_id": "b", "name": "shell", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "b", "output": ""}]}),
            )
            .await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        assert!(text.contains("Done, the file is written."), "{text}");
        if stream {
            assert!(text.contains("event: response.completed"), "{text}");
        }
        expected.0 += 600;
        expected.1 += 60;
        expected.2 += 6000;
    }

    let live = rig.gateway.usage(&token).unwrap();
    let usage = rig.finish(&token).await;
    assert_eq!(live, usage);
    assert_eq!(usage.requests, 6);
    assert_eq!(tokens(&usage), expected);
    assert!(usage.upstream_errors.is_empty(), "{usage:?}");
    assert_eq!(usage.cost_usd, None);
    assert_eq!(usage.calls_without_usage, 0);

    let ledger = rig.ledger("t1");
    assert_eq!(ledger.len(), 6);
    let seqs: Vec<u64> = ledger.iter().map(|c| c.seq).collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5, 6]);
    let apis: Vec<&str> = ledger.iter().map(|c| c.api.as_str()).collect();
    assert_eq!(
        apis,
        [
            "anthropic_messages",
            "chat_completions",
            "responses",
            "anthropic_messages",
            "chat_completions",
            "responses"
        ]
    );
    for c in &ledger {
        assert_eq!(c.outcome, CallOutcome::Ok, "{c:?}");
        assert_eq!((c.status, c.attempts), (200, 1));
        assert_eq!(c.provider, "fake");
        assert_eq!(c.request.sha256.len(), 64);
        assert!(c.response.bytes > 0);
        assert!(c.tokens.is_some());
    }
    assert_eq!(ledger[0].stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(ledger[1].stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(ledger[2].stop_reason.as_deref(), Some("completed"));
    assert_eq!(ledger[3].stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(ledger[0].model.as_deref(), Some("claude-x"));
    assert!(ledger[3].stream && !ledger[0].stream);

    // The token is useless once the trial is finished.
    let r = rig
        .post(tok, "/v1/messages", &json!({"messages": conversation(0)}))
        .await;
    assert_eq!(r.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_checked_and_errors_are_protocol_shaped() {
    let rig = scripted_rig(&json!({"turns": [{"say": "hi"}]}), "").await;
    let a = rig.open("a", "fake");
    let b = rig.open("b", "fake");
    assert_ne!(a, b);
    assert!(a.as_str().len() >= 40);
    assert!(!format!("{a:?}").contains(a.as_str()));

    let r = rig
        .post("nope", "/v1/messages", &json!({"messages": []}))
        .await;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "authentication_error");

    for path in ["/v1/chat/completions", "/v1/responses"] {
        let r = rig.post("nope", path, &json!({"messages": []})).await;
        assert_eq!(r.status(), 401);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "invalid_api_key", "{path}");
    }
    // No credentials at all.
    let r = rig
        .client
        .post(format!("{}/v1/chat/completions", rig.base))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // /v1/models answers with the trial's model, for both SDK families.
    let r = rig
        .client
        .get(format!("{}/v1/models", rig.base))
        .bearer_auth(a.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["data"][0]["id"], "test-model");
    assert_eq!(v["object"], "list");
    let r = rig
        .client
        .get(format!("{}/v1/models", rig.base))
        .header("x-api-key", "wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    // A trial-bound listener serves its own token only.
    let own = rig
        .gateway
        .serve_trial(TcpListener::bind("127.0.0.1:0").unwrap(), &a)
        .unwrap();
    let own_url = format!("http://{}/v1/messages", own.addr);
    let ask = |token: &str| {
        rig.client
            .post(&own_url)
            .header("x-api-key", token.to_string())
            .json(&json!({"messages": []}))
            .send()
    };
    assert_eq!(ask(a.as_str()).await.unwrap().status(), 200);
    assert_eq!(ask(b.as_str()).await.unwrap().status(), 401);
    // Finishing the trial stops its listener.
    rig.finish(&a).await;
    own.shutdown().await;
    assert!(ask(a.as_str()).await.is_err());
    // b's calls: none; a's: one (the two 401s were never admitted).
    assert_eq!(rig.finish(&b).await.requests, 0);
    assert_eq!(rig.ledger("a").len(), 1);
    assert!(rig.gateway.finish_trial(&b).await.is_err());

    // Unknown route: a 404 in the protocol's shape.
    let r = rig
        .client
        .post(format!("{}/v1/embeddings", rig.base))
        .bearer_auth("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/embeddings")
    );
}

// ---------------------------------------------------------------------------------------------
// Pass-through to an HTTP upstream

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_passthrough_replaces_the_key_and_counts_cache_tokens() {
    let (url, fake) = fake_upstream(|_, seen| {
        if seen.body["stream"] == json!(true) {
            reply(200, "text/event-stream", anthropic_sse(472, 89, 3000, 12))
        } else {
            reply(
                200,
                "application/json",
                anthropic_body(2095, 503, 1800, 100),
            )
        }
    })
    .await;
    let rig = rig(&format!(
        "{{name: anth, api: anthropic, base_url: '{url}', api_key: '${{TEST_KEY}}',
           price: {{input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3,
                    cache_write_per_mtok: 3.75}}}}"
    ))
    .await;
    let token = rig.open("t", "anth");

    let body = json!({"model": "claude-sonnet-4-5", "max_tokens": 10,
                      "messages": [{"role": "user", "content": "hi"}]});
    let r = rig
        .client
        .post(format!("{}/v1/messages?beta=true", rig.base))
        .header("x-api-key", token.as_str())
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "prompt-caching-2024-07-31")
        .header("connection", "keep-alive")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["usage"]["cache_read_input_tokens"], 1800);

    let mut streaming = body.clone();
    streaming["stream"] = json!(true);
    let r = rig.call(&token, "/v1/messages", &streaming).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = r.text().await.unwrap();
    assert_eq!(text, anthropic_sse(472, 89, 3000, 12), "passed unchanged");

    let usage = rig.finish(&token).await;
    assert_eq!(usage.requests, 2);
    assert_eq!(
        tokens(&usage),
        (2095 + 472, 503 + 89, 1800 + 3000, 100 + 12)
    );
    let want_cost = (2567.0 * 3.0 + 592.0 * 15.0 + 4800.0 * 0.3 + 112.0 * 3.75) / 1e6;
    assert!((usage.cost_usd.unwrap() - want_cost).abs() < 1e-12);

    // The upstream saw the real key and the agent's other headers, never the trial token.
    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/messages?beta=true");
    assert_eq!(seen[1].path, "/v1/messages");
    for s in &seen {
        assert_eq!(s.headers["x-api-key"], REAL_KEY);
        assert_eq!(s.headers["anthropic-version"], "2023-06-01");
        assert!(s.headers.get("authorization").is_none());
        for (_, v) in s.headers.iter() {
            assert!(!v.to_str().unwrap_or("").contains(token.as_str()));
        }
    }
    assert_eq!(
        seen[0].headers["anthropic-beta"],
        "prompt-caching-2024-07-31"
    );
    assert_eq!(seen[0].body, body);

    // The real key is nowhere in what arbiter writes.
    let ledger = rig.ledger_text("t");
    assert!(!ledger.contains(REAL_KEY));
    assert!(!serde_json::to_string(&usage).unwrap().contains(REAL_KEY));
    let calls = rig.ledger("t");
    assert_eq!(calls[1].response.body, anthropic_sse(472, 89, 3000, 12));
    assert_eq!(calls[1].stop_reason.as_deref(), Some("end_turn"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_passthrough_asks_for_stream_usage_and_uses_bearer_key() {
    let (url, fake) = fake_upstream(|_, seen| {
        let b = &seen.body;
        if seen.path.ends_with("/responses") {
            let resp = json!({"id": "resp_1", "object": "response", "status": "completed",
                "output": [], "usage": {"input_tokens": 328,
                "input_tokens_details": {"cached_tokens": 128}, "output_tokens": 52,
                "total_tokens": 380}});
            return reply(200, "application/json", resp.to_string());
        }
        let with_usage = b["stream_options"]["include_usage"] == json!(true);
        reply(200, "text/event-stream", chat_sse(900, 12, 512, with_usage))
    })
    .await;
    let rig = rig(&format!(
        "{{name: oai, api: openai, base_url: '{url}/v1', api_key: '${{TEST_KEY}}'}}"
    ))
    .await;
    let token = rig.open("t", "oai");

    let chat = json!({"model": "gpt-4o", "stream": true, "messages": conversation(0)});
    let r = rig.call(&token, "/v1/chat/completions", &chat).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().ends_with("data: [DONE]\n\n"));
    let responses = json!({"model": "gpt-4o", "input": "hi"});
    let r = rig.call(&token, "/v1/responses", &responses).await;
    assert_eq!(r.status(), 200);
    // Anthropic's route on an OpenAI provider is refused, not forwarded.
    let messages = json!({"messages": conversation(0)});
    let r = rig.call(&token, "/v1/messages", &messages).await;
    assert_eq!(r.status(), 400);

    let usage = rig.finish(&token).await;
    assert_eq!(tokens(&usage), (388 + 200, 12 + 52, 512 + 128, 0));
    assert_eq!(usage.requests, 2);

    let seen = fake.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[1].path, "/v1/responses");
    assert_eq!(seen[0].body["stream_options"]["include_usage"], true);
    for s in &seen {
        assert_eq!(s.headers["authorization"], format!("Bearer {REAL_KEY}"));
    }
    assert!(!rig.ledger_text("t").contains(REAL_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_then_200_is_retried_and_counted() {
    let (url, fake) = fake_upstream(|n, _| {
        if n < 2 {
            let body =
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
            delayed(
                reply(429, "application/json", body),
                Duration::from_millis(1),
            )
        } else {
            reply(200, "application/json", anthropic_body(10, 5, 0, 0))
        }
    })
    .await;
    let rig = rig(&format!(
        "{{name: a, api: anthropic, base_url: '{url}', api_key: '${{TEST_KEY}}',
           retry: {{max: 3, backoff_sec: 0.01}}}}"
    ))
    .await;
    let token = rig.open("t", "a");
    let r = rig
        .call(&token, "/v1/messages", &json!({"messages": []}))
        .await;
    assert_eq!(r.status(), 200);
    let usage = rig.finish(&token).await;
    assert_eq!(usage.requests, 1);
    assert_eq!(usage.upstream_errors, BTreeMap::from([("429".into(), 2)]));
    assert_eq!(tokens(&usage), (10, 5, 0, 0));
    assert_eq!(usage.unavailable, None);
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
    let calls = rig.ledger("t");
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].attempts, 3);
    assert_eq!(calls[0].upstream_errors, vec!["429", "429"]);
    assert_eq!(calls[0].outcome, CallOutcome::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_500s_and_overloaded_are_passed_on_after_the_retries() {
    let (url, fake) = fake_upstream(|n, _| {
        let (status, body) = if n % 2 == 0 {
            (500, r#"{"error":{"type":"server_error"}}"#)
        } else {
            (
                529,
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            )
        };
        reply(status, "application/json", body)
    })
    .await;
    let rig = rig(&format!(
        "{{name: a, api: anthropic, base_url: '{url}', retry: {{max: 2, backoff_sec: 0.001}}}}"
    ))
    .await;
    let token = rig.open("t", "a");
    let r = rig
        .call(&token, "/v1/messages", &json!({"messages": []}))
        .await;
    // Three tries: 500, 529, 500 — the last answer is the agent's.
    assert_eq!(r.status(), 500);
    let usage = rig.finish(&token).await;
    assert_eq!(fake.calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        usage.upstream_errors,
        BTreeMap::from([("500".into(), 2), ("529".into(), 1)])
    );
    assert_eq!(usage.requests, 1);
    assert_eq!(
        usage.unavailable, None,
        "an overloaded upstream is reachable"
    );
    assert_eq!(rig.ledger("t")[0].outcome, CallOutcome::UpstreamError);
    // No key configured: none is sent.
    assert!(fake.seen()[0].headers.get("x-api-key").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_model_unavailable() {
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let rig = rig(&format!(
        "{{name: o, api: openai, base_url: 'http://{closed}/v1', api_key: '${{TEST_KEY}}',
           retry: {{max: 2, backoff_sec: 0.001}}}}"
    ))
    .await;
    let token = rig.open("t", "o");
    let empty = json!({"messages": []});
    let r = rig.call(&token, "/v1/chat/completions", &empty).await;
    assert_eq!(r.status(), 502);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "model_unavailable");
    // Later calls of the trial fail at once, without more upstream tries.
    let r = rig.call(&token, "/v1/chat/completions", &empty).await;
    assert_eq!(r.status(), 502);
    let usage = rig.finish(&token).await;
    let why = usage.unavailable.clone().unwrap();
    assert!(why.contains("unreachable after 3 tries"), "{why}");
    assert_eq!(
        usage.upstream_errors,
        BTreeMap::from([("connect".into(), 3)])
    );
    let calls = rig.ledger("t");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].outcome, CallOutcome::Unavailable);
    assert_eq!((calls[0].attempts, calls[1].attempts), (3, 0));
    let json = serde_json::to_value(&usage).unwrap();
    assert!(json["unavailable"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_model_unavailable_and_never_echoed() {
    // An upstream that echoes the key it was given (as some do, partly) in its 401.
    let (url, fake) = fake_upstream(|_, seen| {
        let key = seen.headers["authorization"].to_str().unwrap().to_string();
        reply(
            401,
            "application/json",
            json!({"error": {"message": format!("Incorrect API key provided: {key}")}}).to_string(),
        )
    })
    .await;
    let rig = rig(&format!(
        "{{name: o, api: openai, base_url: '{url}/v1', api_key: '${{TEST_KEY}}', retry: {{max: 4, backoff_sec: 0.001}}}}"
    ))
    .await;
    let token = rig.open("t", "o");
    let r = rig
        .call(&token, "/v1/responses", &json!({"input": "hi"}))
        .await;
    assert_eq!(r.status(), 502);
    let text = r.text().await.unwrap();
    assert!(!text.contains(REAL_KEY), "{text}");
    let usage = rig.finish(&token).await;
    assert_eq!(fake.calls.load(Ordering::SeqCst), 1, "a 401 is not retried");
    assert!(
        usage
            .unavailable
            .unwrap()
            .contains("refused arbiter's credentials")
    );
    assert_eq!(usage.upstream_errors, BTreeMap::from([("401".into(), 1)]));
    let ledger = rig.ledger_text("t");
    assert!(
        ledger.contains("Incorrect API key provided: Bearer ***"),
        "{ledger}"
    );
    assert!(!ledger.contains(REAL_KEY));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrency_bounds_calls_to_one_provider() {
    let (url, fake) = fake_upstream(|_, _| {
        // Long enough that the calls overlap upstream however slowly a loaded machine
        // delivers them (the bound must be reached, not only kept).
        let ok = reply(200, "application/json", anthropic_body(1, 1, 0, 0));
        delayed(ok, Duration::from_millis(300))
    })
    .await;
    let yaml = format!("{{name: a, api: anthropic, base_url: '{url}', max_concurrency: 2}}");
    let rig = Arc::new(rig(&yaml).await);
    let tokens: Vec<TrialToken> = (0..3).map(|i| rig.open(&format!("t{i}"), "a")).collect();
    let mut calls = Vec::new();
    for i in 0..8 {
        let rig = rig.clone();
        let tok = tokens[i % 3].as_str().to_string();
        calls.push(tokio::spawn(async move {
            rig.post(&tok, "/v1/messages", &json!({"messages": []}))
                .await
                .status()
        }));
    }
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    assert_eq!(fake.calls.load(Ordering::SeqCst), 8);
    assert_eq!(fake.max_concurrent.load(Ordering::SeqCst), 2);
    let mut total = 0;
    for t in &tokens {
        total += rig.finish(t).await.requests;
    }
    assert_eq!(total, 8);
}

// ---------------------------------------------------------------------------------------------
// Budgets and faults

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_refuse_further_calls_with_a_typed_error() {
    let script = json!({"usage": {"input_tokens": 400, "output_tokens": 100},
                        "turns": [{"say": "a"}, {"say": "b"}, {"say": "c"}]});
    let price = ", price: {input_per_mtok: 1000, output_per_mtok: 1000}";
    let rig = scripted_rig(&script, price).await;

    // max_requests: 2 calls served, the third refused.
    let t = rig.trial(
        "req",
        "fake",
        Budget {
            max_requests: Some(2),
            ..Budget::default()
        },
    );
    for i in 0..2 {
        let turn = json!({"messages": conversation(i)});
        let r = rig.call(&t, "/v1/messages", &turn).await;
        assert_eq!(r.status(), 200);
    }
    let turn = json!({"messages": conversation(2)});
    let r = rig.call(&t, "/v1/messages", &turn).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "budget_exhausted");
    let r = rig
        .call(&t, "/v1/chat/completions", &json!({"messages": []}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "budget_exhausted");
    let u = rig.finish(&t).await;
    assert_eq!((u.requests, u.refused), (2, 2));
    let b = u.budget.unwrap();
    assert!(b.exhausted);
    assert_eq!(b.max_requests, Some(2));
    let calls = rig.ledger("req");
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[2].outcome, CallOutcome::BudgetExhausted);
    assert_eq!(calls[2].attempts, 0);

    // max_tokens: 500 per call, limit 800 → the second call crosses it, the third is refused.
    let t = rig.trial(
        "tok",
        "fake",
        Budget {
            max_tokens: Some(800),
            ..Budget::default()
        },
    );
    let input = json!({"input": "x"});
    let statuses = [
        rig.call(&t, "/v1/responses", &input).await.status(),
        rig.call(&t, "/v1/responses", &input).await.status(),
        rig.call(&t, "/v1/responses", &input).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [200, 200, 400]);
    let u = rig.finish(&t).await;
    assert_eq!(u.total_tokens(), 1000);
    assert!(u.budget.unwrap().exhausted);

    // max_cost_usd: each call costs 0.5 $; a budget of 2 $ serves four calls.
    let t = rig.trial(
        "cost",
        "fake",
        Budget {
            max_cost_usd: Some(2.0),
            ..Budget::default()
        },
    );
    let mut served = 0;
    for _ in 0..6 {
        let s = rig
            .call(&t, "/v1/chat/completions", &json!({"messages": []}))
            .await
            .status();
        if s == 200 {
            served += 1;
        }
    }
    let u = rig.finish(&t).await;
    assert_eq!((served, u.requests, u.refused), (4, 4, 2));
    assert!((u.cost_usd.unwrap() - 2.0).abs() < 1e-9);
    let v = serde_json::to_value(&u).unwrap();
    assert_eq!(v["budget"], json!({"max_cost_usd": 2.0, "exhausted": true}));

    // An unlimited trial has no budget field.
    let t = rig.open("free", "fake");
    let v = serde_json::to_value(rig.finish(&t).await).unwrap();
    assert!(v.get("budget").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripted_faults_429_cut_stream_and_malformed_body() {
    let script = json!({"turns": [
        {"say": "after two 429s", "fault": {"status": 429, "times": 2}},
        {"say": "this stream breaks", "fault": {"cut": true}},
        {"say": "slow", "fault": {"delay_ms": 30}},
        {"say": "garbage", "fault": {"malformed": true}}
    ]});
    let rig = scripted_rig(&script, ", retry: {max: 1, backoff_sec: 0.001}").await;
    let t = rig.open("t", "fake");
    let turn = |n: usize| json!({"messages": conversation(n)});

    // Turn 0: two 429s but only one retry: the agent sees the second 429 ...
    let r = rig.call(&t, "/v1/messages", &turn(0)).await;
    assert_eq!(r.status(), 429);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "rate_limit_error");
    // ... and its own retry is served.
    let r = rig.call(&t, "/v1/messages", &turn(0)).await;
    assert_eq!(r.status(), 200);

    // Turn 1, streaming: the stream breaks off halfway.
    let streaming = json!({"stream": true, "messages": conversation(1)});
    let r = rig.call(&t, "/v1/messages", &streaming).await;
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.is_err(), "the agent sees a broken stream");

    // Turn 2: slow but fine.
    let started = std::time::Instant::now();
    let r = rig.call(&t, "/v1/chat/completions", &turn(2)).await;
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() >= Duration::from_millis(30));

    // Turn 3: a 200 whose body is not JSON.
    let r = rig.call(&t, "/v1/chat/completions", &turn(3)).await;
    assert_eq!(r.status(), 200);

    let u = rig.finish(&t).await;
    assert_eq!(u.requests, 5);
    assert_eq!(
        u.upstream_errors,
        BTreeMap::from([
            ("429".into(), 2),
            ("malformed_body".into(), 1),
            ("stream_cut".into(), 1)
        ])
    );
    let outcomes: Vec<CallOutcome> = rig.ledger("t").iter().map(|c| c.outcome).collect();
    assert_eq!(
        outcomes,
        [
            CallOutcome::UpstreamError,
            CallOutcome::Ok,
            CallOutcome::StreamCut,
            CallOutcome::Ok,
            CallOutcome::UpstreamError
        ]
    );
    // The cut stream's message_start was metered; its output count never arrived.
    let cut = &rig.ledger("t")[2];
    assert_eq!(cut.tokens.unwrap().input, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_streaming_trials_lose_and_double_count_nothing() {
    let turns: Vec<Value> = (0..5)
        .map(|i| {
            json!({"run": format!("echo {i}"),
                        "usage": {"input_tokens": 100 + i, "output_tokens": 10 + i,
                                  "cache_read_tokens": 1000 + i, "cache_write_tokens": i}})
        })
        .collect();
    let script = json!({ "turns": turns });
    let rig = Arc::new(scripted_rig(&script, ", max_concurrency: 8").await);
    let mut jobs = Vec::new();
    for n in 0..32 {
        let rig = rig.clone();
        jobs.push(tokio::spawn(async move {
            let id = format!("t{n}");
            let t = rig.open(&id, "fake");
            for turn in 0..5 {
                let streaming = json!({"stream": true, "messages": conversation(turn)});
                let r = rig.call(&t, "/v1/messages", &streaming).await;
                assert_eq!(r.status(), 200);
                assert!(r.text().await.unwrap().contains("message_stop"));
            }
            (id, rig.finish(&t).await)
        }));
    }
    for j in jobs {
        let (id, u) = j.await.unwrap();
        assert_eq!(u.requests, 5, "{id}");
        assert_eq!(tokens(&u), (510, 60, 5010, 10), "{id}");
        assert_eq!(rig.ledger(&id).len(), 5, "{id}");
    }
}

// ---------------------------------------------------------------------------------------------
// A listener inside another network namespace

/// Root only (CI is root): a netns made by `unshare --net`, the gateway listening on its
/// loopback, reached from inside and not from the host's loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_in_a_network_namespace_answers_only_there() {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: opening a listener in another network namespace needs root");
        return;
    }
    if which("unshare").is_none() || which("nsenter").is_none() {
        eprintln!("skipped: util-linux unshare/nsenter not installed");
        return;
    }
    let mut child = std::process::Command::new("unshare")
        .args(["--net", "sleep", "30"])
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = child.id();
    // `unshare` execs sleep in the new namespace; wait until it has (its netns differs).
    let own = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut ready = false;
    for _ in 0..200 {
        if std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|ns| ns != own) {
            ready = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if !ready {
        let _ = child.kill();
        panic!("unshare --net did not make a namespace");
    }
    let _guard = Kill(child);
    let ns = format!("--net=/proc/{pid}/ns/net");
    // A fresh namespace's loopback is down (a container's is up).
    let up = std::process::Command::new("nsenter")
        .args([ns.as_str(), "ip", "link", "set", "lo", "up"])
        .status()
        .unwrap();
    assert!(up.success());

    let dir = tempfile::tempdir().unwrap();
    let m = scripted_model(dir.path(), &json!({"turns": [{"say": "hi"}]}), "");
    let gateway = Gateway::start(vec![m]).unwrap();
    let ledger_path = dir.path().join("calls.jsonl");
    let token = gateway
        .register_trial(grant("ns", "fake", "netns-model", ledger_path))
        .unwrap();
    let listener = arbiter::gateway::listen_in_netns(pid, 0).unwrap();
    let port = listener.local_addr().unwrap().port();
    let _server = gateway.serve_trial(listener, &token).unwrap();

    // From inside the namespace: the gateway answers.
    let tok = token.as_str().to_string();
    let inside = tokio::task::spawn_blocking(move || {
        std::process::Command::new("nsenter")
            .args([
                ns.as_str(),
                "curl",
                "-s",
                "--max-time",
                "10",
                "-H",
                &format!("Authorization: Bearer {tok}"),
                &format!("http://127.0.0.1:{port}/v1/models"),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let body = String::from_utf8_lossy(&inside.stdout);
    assert!(inside.status.success(), "{inside:?}");
    assert!(body.contains("netns-model"), "{body}");

    // From the host's loopback: not our gateway.
    let host = std::net::TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    );
    if let Ok(stream) = host {
        // Something else of the host happens to use that port: it must not be the gateway.
        drop(stream);
        let r = reqwest::Client::new()
            .get(format!("http://127.0.0.1:{port}/v1/models"))
            .bearer_auth(token.as_str())
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if let Ok(r) = r {
            assert!(!r.text().await.unwrap_or_default().contains("netns-model"));
        }
    }
    gateway.finish_trial(&token).await.unwrap();
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_hangs_up_still_gets_its_ledger_line() {
    let (url, _fake) = fake_upstream(|_, _| {
        let ok = reply(200, "application/json", anthropic_body(1, 1, 0, 0));
        delayed(ok, Duration::from_secs(5))
    })
    .await;
    let rig = rig(&format!("{{name: a, api: anthropic, base_url: '{url}'}}")).await;
    let t = rig.open("t", "a");
    let r = rig
        .client
        .post(format!("{}/v1/messages", rig.base))
        .header("x-api-key", t.as_str())
        .json(&json!({"messages": []}))
        // Long enough for the request to reach the gateway on a loaded machine, well short of
        // the upstream's 5 s.
        .timeout(Duration::from_secs(1))
        .send()
        .await;
    assert!(r.is_err());
    // The gateway notices the hang-up when the connection closes (waited for up to 20 s).
    for _ in 0..1000 {
        let text = std::fs::read_to_string(rig.ledger_path("t")).unwrap_or_default();
        if !text.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let u = rig.finish(&t).await;
    assert_eq!(u.requests, 1);
    let calls = rig.ledger("t");
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].status, calls[0].outcome),
        (499, CallOutcome::ClientClosed)
    );
}

// ---------------------------------------------------------------------------------------------
// Egress allowlist proxy

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allowlist_proxy_admits_listed_hosts_only_and_never_connects_elsewhere() {
    use arbiter::gateway::{Allowlist, serve_allowlist};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let (allowed_url, allowed) =
        fake_upstream(|_, _| reply(200, "text/plain", "hello from the allowed host")).await;
    let allowed_port: u16 = allowed_url.rsplit(':').next().unwrap().parse().unwrap();
    // A host that is not listed: a bare listener that counts connections.
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other_port = other.local_addr().unwrap().port();
    let other_hits = Arc::new(AtomicUsize::new(0));
    let hits = other_hits.clone();
    tokio::spawn(async move {
        while other.accept().await.is_ok() {
            hits.fetch_add(1, Ordering::SeqCst);
        }
    });

    let list = Allowlist::parse(&[format!("127.0.0.1:{allowed_port}")]).unwrap();
    let proxy = serve_allowlist(TcpListener::bind("127.0.0.1:0").unwrap(), list).unwrap();
    let proxy_url = format!("http://{}", proxy.addr);

    // Plain HTTP through the proxy (absolute-form), as HTTP_PROXY clients do.
    let client = reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(&proxy_url).unwrap())
        .build()
        .unwrap();
    let r = client.get(format!("{allowed_url}/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello from the allowed host");
    let r = client
        .get(format!("http://127.0.0.1:{other_port}/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("not in allowed_hosts"));

    // A CONNECT tunnel (what HTTPS clients use), then HTTP inside it.
    let connect = |port: u16| {
        let addr = proxy.addr;
        async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
            let mut head = vec![0u8; 39];
            s.read_exact(&mut head).await.unwrap();
            (s, String::from_utf8_lossy(&head).into_owned())
        }
    };
    let (mut tunnel, head) = connect(allowed_port).await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    tunnel
        .write_all(b"GET /t HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello from the allowed host"), "{answer}");

    let (mut refused, head) = connect(other_port).await;
    assert!(head.starts_with("HTTP/1.1 403 Forbidden"), "{head}");
    let mut rest = String::new();
    refused.read_to_string(&mut rest).await.unwrap();

    // A name that is not listed is refused before any lookup.
    let r = client
        .get("http://not-listed.invalid/")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);

    let events = proxy.shutdown().await;
    assert_eq!(
        other_hits.load(Ordering::SeqCst),
        0,
        "no connection to a refused host"
    );
    assert_eq!(allowed.calls.load(Ordering::SeqCst), 2);
    let summary: Vec<(String, u16, bool)> = events
        .iter()
        .map(|e| (e.host.clone(), e.port, e.allowed))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("127.0.0.1".to_string(), allowed_port, true),
            ("127.0.0.1".to_string(), other_port, false),
            ("127.0.0.1".to_string(), allowed_port, true),
            ("127.0.0.1".to_string(), other_port, false),
            ("not-listed.invalid".to_string(), 80, false),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_cannot_overshoot_max_requests() {
    let script = json!({"turns": [{"say": "slow", "fault": {"delay_ms": 100, "times": 1000}}]});
    let rig = Arc::new(scripted_rig(&script, "").await);
    let t = rig.trial(
        "t",
        "fake",
        Budget {
            max_requests: Some(3),
            ..Budget::default()
        },
    );
    let mut calls = Vec::new();
    for _ in 0..10 {
        let rig = rig.clone();
        let tok = t.as_str().to_string();
        calls.push(tokio::spawn(async move {
            rig.post(&tok, "/v1/messages", &json!({"messages": []}))
                .await
                .status()
                .as_u16()
        }));
    }
    let mut statuses = Vec::new();
    for c in calls {
        statuses.push(c.await.unwrap());
    }
    statuses.sort();
    assert_eq!(statuses, [200, 200, 200, 400, 400, 400, 400, 400, 400, 400]);
    let u = rig.finish(&t).await;
    assert_eq!((u.requests, u.refused), (3, 7));
    assert_eq!(rig.ledger("t").len(), 10);
}

// ---------------------------------------------------------------------------------------------
// A real container with network `none` (root and a Docker engine; skipped otherwise)

/// Removes the container on every path.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}

fn docker(args: &[&str]) -> std::process::Output {
    std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI")
}

/// A small agent in a network-`none` container calls every protocol (streaming and not)
/// through the gateway on its own loopback; the usage equals what the script served. The
/// container has only `lo`, reaches nothing on the host's 127.0.0.1, and never sees the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_container_reaches_the_gateway_and_nothing_else() {
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (listener in the container's network namespace)");
        return;
    }
    let image = "arbiter/debian:bookworm";
    if which("docker").is_none() || !docker(&["image", "inspect", image]).status.success() {
        eprintln!("skipped: no Docker engine with {image}");
        return;
    }
    let name = format!("arbiter-gateway-test-{}", std::process::id());
    let out = common::offline_container(&name, image, "120");
    assert!(out.status.success(), "{out:?}");
    let _container = Container(name.clone());
    let out = docker(&["inspect", "-f", "{{.State.Pid}}", &name]);
    let pid: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();

    // A server on the host's loopback that the container must not reach.
    let host_only = TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host_only.local_addr().unwrap().port();

    let dir = tempfile::tempdir().unwrap();
    let script = json!({"turns": [
        {"run": "ls", "usage": {"input_tokens": 11, "output_tokens": 1, "cache_read_tokens": 100}},
        {"run": "ls", "usage": {"input_tokens": 22, "output_tokens": 2, "cache_read_tokens": 200}},
        {"say": "done", "usage": {"input_tokens": 33, "output_tokens": 3, "cache_read_tokens": 300}}
    ]});
    let scripted = scripted_model(dir.path(), &script, "");
    // A second provider with a real-looking key, so there is a key that must not leak.
    let keyed = model(
        "{name: keyed, api: openai, base_url: 'http://127.0.0.1:9/v1', api_key: '${TEST_KEY}'}",
        dir.path(),
    );
    let gateway = Gateway::start(vec![scripted, keyed]).unwrap();
    let ledger_path = dir.path().join("trial/agent/model-calls.jsonl");
    let offline = grant("offline", "fake", "scripted-model", ledger_path.clone());
    let token = gateway.register_trial(offline).unwrap();
    let listener = arbiter::gateway::listen_in_netns(pid, 4141).unwrap();
    let _server = gateway.serve_trial(listener, &token).unwrap();

    // The "agent": Python's urllib, one call per protocol and mode, turns 0..2 each time.
    let agent = format!(
        r#"
import json, os, socket, urllib.request
base = "http://127.0.0.1:4141"
tok = os.environ["ANTHROPIC_API_KEY"]
def post(path, body, headers):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read().decode()
def conv(n):
    m = [{{"role": "user", "content": "go"}}]
    for i in range(n):
        m += [{{"role": "assistant", "content": "x"}}, {{"role": "user", "content": "ok"}}]
    return m
out = {{"calls": []}}
for stream in (False, True):
    a = {{"x-api-key": tok, "anthropic-version": "2023-06-01", "content-type": "application/json"}}
    o = {{"authorization": "Bearer " + tok, "content-type": "application/json"}}
    out["calls"].append(post("/v1/messages", {{"model": "m", "stream": stream, "messages": conv(0)}}, a))
    out["calls"].append(post("/v1/chat/completions", {{"model": "m", "stream": stream, "messages": conv(1)}}, o))
    out["calls"].append(post("/v1/responses", {{"model": "m", "stream": stream, "input": [
        {{"type": "function_call", "call_id": "a", "name": "shell", "arguments": "{{}}"}},
        {{"type": "function_call_output", "call_id": "a", "output": ""}},
        {{"type": "message", "role": "assistant", "content": []}},
        {{"role": "user", "content": "ok"}}]}}, o))
out["interfaces"] = sorted(os.listdir("/sys/class/net"))
try:
    socket.create_connection(("127.0.0.1", {host_port}), timeout=2)
    out["host_loopback"] = "reached"
except OSError as e:
    out["host_loopback"] = "refused"
try:
    socket.getaddrinfo("example.com", 443)
    out["dns"] = "resolved"
except OSError:
    out["dns"] = "failed"
print(json.dumps(out))
"#
    );
    let env_tok = format!("ANTHROPIC_API_KEY={}", token.as_str());
    let name2 = name.clone();
    let out = tokio::task::spawn_blocking(move || {
        docker(&["exec", "-e", &env_tok, &name2, "python3", "-c", &agent])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    for call in result["calls"].as_array().unwrap() {
        assert_eq!(call[0], 200, "{call}");
    }
    assert!(
        result["calls"][3][1]
            .as_str()
            .unwrap()
            .contains("message_stop")
    );
    assert!(
        result["calls"][5][1]
            .as_str()
            .unwrap()
            .contains("response.completed")
    );
    assert_eq!(result["interfaces"], json!(["lo"]));
    assert_eq!(result["host_loopback"], "refused");
    assert_eq!(result["dns"], "failed");

    let usage = gateway.finish_trial(&token).await.unwrap();
    assert_eq!(usage.requests, 6);
    assert_eq!(tokens(&usage), (2 * 66, 2 * 6, 2 * 600, 0));

    // The key is in no container env and no file arbiter wrote.
    let env = docker(&["exec", &name, "cat", "/proc/1/environ"]);
    assert!(!String::from_utf8_lossy(&env.stdout).contains(REAL_KEY));
    let inspect = docker(&["inspect", &name]);
    assert!(!String::from_utf8_lossy(&inspect.stdout).contains(REAL_KEY));
    let ledger = std::fs::read_to_string(&ledger_path).unwrap();
    assert_eq!(ledger.lines().count(), 6);
    assert!(!ledger.contains(REAL_KEY));
}
