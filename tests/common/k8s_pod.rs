//! Helpers for tests of pods on the cluster: a pod with Python, execs, kubectl reads, and a
//! fake model upstream on this host's loopback.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbiter::sandbox::kubernetes::KubernetesSandbox;
use arbiter::sandbox::{
    Base, ContainerId, ContainerSpec, ExecEnd, ExecSpec, ImageRef, Network, Owner, Resource, Role,
    Sandbox,
};
use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// `arbiter/debian:bookworm` (Python 3) built here and pushed to the cluster's registry.
pub async fn python_image(sb: &KubernetesSandbox, dir: &Path) -> ImageRef {
    let ctx = dir.join("python-ctx");
    let spec = super::dockerfile_spec(&ctx, "relay-python", "1", "FROM arbiter/debian:bookworm\n");
    sb.prepare_image(&spec).await.expect("prepare")
}

pub fn container(image: &ImageRef, trial: &str, network: Network) -> ContainerSpec {
    let owner = Owner {
        job: "k8s-relay-test".to_string(),
        trial: format!("{trial}-{}", std::process::id()),
        role: Role::Agent,
        extra: BTreeMap::new(),
    };
    super::agent_container(Base::Image(image.clone()), owner, network, (0.2, 512, 512))
}

/// Removes its pod when dropped (a test that fails leaves nothing behind).
pub struct PodGuard<'a>(pub &'a KubernetesSandbox, pub ContainerId);

impl Drop for PodGuard<'_> {
    fn drop(&mut self) {
        let id = self.1.clone();
        let sb = self.0;
        let _ = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(sb.remove(&Resource::Container(id)))
        });
    }
}

/// Run `argv` in the pod as root: (exit code, stdout, stderr).
pub async fn exec(
    sb: &KubernetesSandbox,
    id: &ContainerId,
    argv: &[&str],
) -> (i64, String, String) {
    exec_env(sb, id, argv, Vec::new()).await
}

pub async fn exec_env(
    sb: &KubernetesSandbox,
    id: &ContainerId,
    argv: &[&str],
    env: Vec<(String, String)>,
) -> (i64, String, String) {
    let tmp = tempfile::tempdir().unwrap();
    let (out, err) = (tmp.path().join("out"), tmp.path().join("err"));
    let spec = ExecSpec {
        argv: argv.iter().map(|a| a.to_string()).collect(),
        env,
        user: None,
        workdir: None,
        stdout: Some(out.clone()),
        stderr: Some(err.clone()),
        cap_bytes: 16 << 20,
        timeout: Some(Duration::from_secs(300)),
        grace: Duration::from_secs(2),
    };
    let done = sb.exec(id, &spec).await.expect("exec");
    let code = match done.end {
        ExecEnd::Exited(code) => code,
        other => panic!("{argv:?}: {other:?}"),
    };
    (
        code,
        std::fs::read_to_string(out).unwrap_or_default(),
        std::fs::read_to_string(err).unwrap_or_default(),
    )
}

fn kubectl_ns() -> Command {
    let bin = std::env::var("ARBITER_K8S_KUBECTL").unwrap_or_else(|_| "kubectl".to_string());
    let mut cmd = Command::new(bin);
    if let Ok(ns) = std::env::var("ARBITER_K8S_NAMESPACE") {
        cmd.args(["-n", &ns]);
    }
    cmd
}

/// `kubectl get pod -o json`.
pub async fn pod_object(id: &ContainerId) -> Value {
    let name = id.as_str().to_string();
    tokio::task::spawn_blocking(move || {
        let out = kubectl_ns()
            .args(["get", "pod", &name, "-o", "json"])
            .output()
            .expect("kubectl");
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).expect("pod JSON")
    })
    .await
    .unwrap()
}

/// The pod's events, as `kubectl get events -o json` lists them.
pub async fn pod_events(id: &ContainerId) -> String {
    let name = id.as_str().to_string();
    tokio::task::spawn_blocking(move || {
        let selector = format!("involvedObject.name={name}");
        let out = kubectl_ns()
            .args(["get", "events", "--field-selector", &selector, "-o", "json"])
            .output()
            .expect("kubectl");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// Every regular file of the pod's filesystem and every process environment that holds
/// `needle` (sent on stdin, never in an argv or a file), one path a line.
pub async fn grep_pod(id: &ContainerId, needle: &str) -> String {
    const SCRIPT: &str = r#"B=/.arbiter/toolbox/busybox; read -r k
$B find / \( -path /proc -o -path /sys -o -path /dev \) -prune -o -type f -exec $B grep -lsF -e "$k" {} +
for p in /proc/[0-9]*; do $B grep -qsF -e "$k" "$p/environ" && echo "$p/environ"; done
exit 0"#;
    let name = id.as_str().to_string();
    let needle = format!("{needle}\n");
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = kubectl_ns()
            .args(["exec", "-i", &name, "-c", "main", "--"])
            .args(["/.arbiter/toolbox/busybox", "sh", "-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(needle.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// Requests the fake upstream saw: (path, the key it was given).
pub type Seen = Arc<Mutex<Vec<(String, String)>>>;

pub fn anthropic_body(input: u64, output: u64) -> String {
    json!({"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-x",
           "content": [{"type": "text", "text": "Hi"}], "stop_reason": "end_turn",
           "stop_sequence": null,
           "usage": {"input_tokens": input, "output_tokens": output}})
    .to_string()
}

pub fn anthropic_sse(input: u64, output: u64) -> String {
    let start = json!({"type": "message_start", "message": {"id": "msg_02", "type": "message",
        "role": "assistant", "content": [], "model": "claude-x", "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": input, "output_tokens": 1}}});
    let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn",
        "stop_sequence": null}, "usage": {"output_tokens": output}});
    format!(
        "event: message_start\ndata: {start}\n\n\
         event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"Hello\"}}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
         event: message_delta\ndata: {delta}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    )
}

pub fn chat_body(prompt: u64, completion: u64) -> String {
    json!({"id": "chatcmpl-0", "object": "chat.completion", "created": 1, "model": "gpt-x",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi"},
                        "finish_reason": "stop"}],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}})
    .to_string()
}

pub fn chat_sse(prompt: u64, completion: u64) -> String {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
               "model": "gpt-x", "choices": [{"index": 0, "delta": delta,
               "finish_reason": finish}]})
    };
    let usage = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1,
        "model": "gpt-x", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}});
    format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: {usage}\n\ndata: [DONE]\n\n",
        chunk(json!({"role": "assistant", "content": ""}), Value::Null),
        chunk(json!({"content": "Hello"}), Value::Null),
        chunk(json!({}), json!("stop"))
    )
}

async fn fake_handler(
    axum::extract::State(seen): axum::extract::State<Seen>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let key = ["x-api-key", "authorization"]
        .iter()
        .filter_map(|h| headers.get(*h)?.to_str().ok())
        .collect::<Vec<_>>()
        .join(" ");
    let path = uri.path().to_string();
    seen.lock().unwrap().push((path.clone(), key));
    let stream = body["stream"] == json!(true);
    let (ctype, text) = match (path.ends_with("/messages"), stream) {
        (true, false) => ("application/json", anthropic_body(2095, 503)),
        (true, true) => ("text/event-stream", anthropic_sse(472, 89)),
        (false, false) => ("application/json", chat_body(300, 40)),
        (false, true) => ("text/event-stream", chat_sse(900, 12)),
    };
    ([("content-type", ctype)], text).into_response()
}

/// A fake Anthropic + OpenAI upstream on this host's 127.0.0.1: (base URL, what it saw).
pub async fn fake_upstream() -> (String, Seen) {
    let seen = Seen::default();
    let app = axum::Router::new()
        .fallback(fake_handler)
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), seen)
}
