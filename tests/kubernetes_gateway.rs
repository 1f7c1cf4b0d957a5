//! The loopback relay of the Kubernetes backend against a real cluster (`scripts/k8s up`,
//! then `eval "$(scripts/k8s env)"`): a pod with network `none` reaches exactly one endpoint
//! on its own loopback, carried to this host over the pods/exec API. Bytes, half-closes and
//! EOF both ways; the model gateway through it (Anthropic and OpenAI style, streaming and
//! not) with usage exact and the real key nowhere in the pod. Skipped when `KUBECONFIG` is
//! unset; a failure when `ARBITER_REQUIRE_K8S=1`.

mod common;

use arbiter::gateway::{Budget, Gateway, ModelConfig, ResolvedModel, TrialGrant};
use arbiter::sandbox::{Network, Sandbox};
use common::k8s::*;
use common::k8s_pod::*;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The host side of the byte test: reads until the pod half-closes, answers the length and
/// sha256 of what it read, then [`BODY`] bytes of a pattern, then ends its side.
async fn digest_server(listener: std::net::TcpListener) {
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut got = Vec::new();
            // A client that vanished is no answer's business (the pod checks what it got).
            if conn.read_to_end(&mut got).await.is_err() {
                return;
            }
            let head = format!("{} {}\n", got.len(), sha256(&got));
            let _ = conn.write_all(head.as_bytes()).await;
            let _ = conn.write_all(&pattern(BODY)).await;
            let _ = conn.shutdown().await;
        });
    }
}

const BODY: usize = 1 << 20;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Sixteen connections at once: each sends its own bytes, half-closes, reads to EOF.
const CLIENT: &str = r#"
import hashlib, json, socket, sys, threading
port = int(sys.argv[1])
out = [None] * 16
def one(i):
    data = bytes((i * 7 + k) % 256 for k in range(100000 + i * 4099))
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = bytearray()
    while True:
        b = s.recv(65536)
        if not b:
            break
        got += b
    s.close()
    head, _, body = bytes(got).partition(b"\n")
    out[i] = {"sent": "%d %s" % (len(data), hashlib.sha256(data).hexdigest()),
              "head": head.decode(), "body": [len(body), hashlib.sha256(body).hexdigest()]}
ts = [threading.Thread(target=one, args=(i,)) for i in range(16)]
[t.start() for t in ts]
[t.join() for t in ts]
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_relay_carries_bytes_half_closes_and_eof_both_ways_and_survives_vanishing_clients() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let image = python_image(&sb, tmp.path()).await;
    let id = sb
        .create(&container(&image, "relay-bytes", Network::None))
        .await
        .expect("create");
    let _pod = PodGuard(&sb, id.clone());
    sb.start(&id).await.expect("start");

    let listener = sb.loopback_listener(&id, 4141).await.expect("relay");
    assert_eq!(listener.local_addr().unwrap().port(), 4141, "the same port");
    tokio::spawn(digest_server(listener));

    let want_body = json!([BODY, sha256(&pattern(BODY))]);
    let check = |out: &str| {
        let calls: Vec<Value> =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(calls.len(), 16);
        for c in &calls {
            assert_eq!(c["head"], c["sent"], "the host read all the pod sent: {c}");
            assert_eq!(c["body"], want_body, "the pod read all the host sent: {c}");
        }
    };
    let (code, out, err) = exec(&sb, &id, &["python3", "-c", CLIENT, "4141"]).await;
    assert_eq!(code, 0, "{err}");
    check(&out);

    // Clients that vanish mid-connection (reset without a word, half a request) do not
    // disturb the relay: the next sixteen are carried whole.
    let vanish = "import socket\nfor i in range(20):\n    s = socket.create_connection(('127.0.0.1', 4141))\n    if i % 2: s.sendall(b'half a request')\n    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00')\n    s.close()\n";
    let (code, _, err) = exec(&sb, &id, &["python3", "-c", vanish]).await;
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = exec(&sb, &id, &["python3", "-c", CLIENT, "4141"]).await;
    assert_eq!(code, 0, "{err}");
    check(&out);
    // The relay runs from the read-only toolbox: the agent (root here) cannot swap it.
    let (code, _, _) = exec(&sb, &id, &["sh", "-c", "echo x > /.arbiter/toolbox/relay"]).await;
    assert_ne!(code, 0, "the toolbox's relay was writable");
    // A second relay on a port the pod already listens on waits for the pod's next
    // command, which is refused, typed, and runs nothing.
    let _second = sb
        .loopback_listener(&id, 4141)
        .await
        .expect("a relay waits for the next command");
    let spec = common::exec_spec(
        &["sh", "-c", "echo ran > /tmp/ran"],
        Duration::from_secs(60),
        Duration::from_secs(1),
    );
    let err = sb
        .exec(&id, &spec)
        .await
        .expect_err("a relay on a taken port");
    assert!(
        err.to_string().contains("port 4141 is taken inside pod"),
        "{err}"
    );
    let (_, out, _) = exec(&sb, &id, &["sh", "-c", "cat /tmp/ran 2>/dev/null; true"]).await;
    assert_eq!(out, "", "the refused command ran");
    // Nothing but loopback is up: the relay needs no interface of the pod.
    let (_, out, _) = exec(
        &sb,
        &id,
        &["sh", "-c", "for i in /sys/class/net/*; do [ \"$(cat $i/operstate)\" = up ] && echo ${i##*/}; done; true"],
    )
    .await;
    assert_eq!(out.trim(), "", "interfaces up besides lo");
}

const REAL_KEY: &str = "sk-test-REAL-key-relay-0123456789abcdef";

fn model(yaml: &str, dir: &std::path::Path) -> ResolvedModel {
    let cfg: ModelConfig = serde_yaml::from_str(yaml).unwrap();
    cfg.resolve_with(0, dir, |name| {
        (name == "TEST_KEY").then(|| REAL_KEY.to_string())
    })
    .unwrap()
}

/// The agent: Anthropic-style calls on `$1` and OpenAI-style ones on `$2`, streaming and
/// not, a new connection each, then three calls on one kept-alive connection.
const AGENT: &str = r#"
import http.client, json, os, sys, urllib.request
a_port, o_port = sys.argv[1], sys.argv[2]
a_tok, o_tok = os.environ["ANTHROPIC_API_KEY"], os.environ["OPENAI_API_KEY"]
def post(port, path, body, headers):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        return [r.status, r.read().decode()]
a = {"x-api-key": a_tok, "anthropic-version": "2023-06-01", "content-type": "application/json"}
o = {"authorization": "Bearer " + o_tok, "content-type": "application/json"}
msgs = [{"role": "user", "content": "hi"}]
out = {"calls": []}
for stream in (False, True):
    out["calls"].append(post(a_port, "/v1/messages", {"model": "m", "max_tokens": 9, "stream": stream, "messages": msgs}, a))
    out["calls"].append(post(o_port, "/v1/chat/completions", {"model": "m", "stream": stream, "messages": msgs}, o))
c = http.client.HTTPConnection("127.0.0.1", int(a_port), timeout=60)
kept = []
for _ in range(3):
    c.request("POST", "/v1/messages", body=json.dumps({"model": "m", "max_tokens": 9, "messages": msgs}), headers=a)
    r = c.getresponse()
    kept.append([r.status, r.read().decode(), r.getheader("connection")])
c.close()
out["kept"] = kept
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gateway_through_the_relay_meters_exactly_and_the_key_stays_out_of_the_pod() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (url, seen) = fake_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = Gateway::start(vec![
        model(
            &format!("{{name: anth, api: anthropic, base_url: '{url}', api_key: '${{TEST_KEY}}'}}"),
            dir.path(),
        ),
        model(
            &format!("{{name: oai, api: openai, base_url: '{url}/v1', api_key: '${{TEST_KEY}}'}}"),
            dir.path(),
        ),
    ])
    .unwrap();
    let grant = |trial: &str, provider: &str| TrialGrant {
        trial_id: trial.to_string(),
        provider: provider.to_string(),
        model: "test-model".to_string(),
        budget: Budget::default(),
        ledger_path: dir.path().join(trial).join("model-calls.jsonl"),
    };
    let a_token = gateway.register_trial(grant("anth-trial", "anth")).unwrap();
    let o_token = gateway.register_trial(grant("oai-trial", "oai")).unwrap();

    let image = python_image(&sb, tmp.path()).await;
    let id = sb
        .create(&container(&image, "relay-gateway", Network::None))
        .await
        .expect("create");
    let _pod = PodGuard(&sb, id.clone());
    sb.start(&id).await.expect("start");
    // Two relays in one pod, one per trial token.
    let a_listener = sb.loopback_listener(&id, 4141).await.expect("relay 4141");
    let o_listener = sb.loopback_listener(&id, 4142).await.expect("relay 4142");
    let _a = gateway.serve_trial(a_listener, &a_token).unwrap();
    let _o = gateway.serve_trial(o_listener, &o_token).unwrap();

    let env = vec![
        (
            "ANTHROPIC_API_KEY".to_string(),
            a_token.as_str().to_string(),
        ),
        ("OPENAI_API_KEY".to_string(), o_token.as_str().to_string()),
    ];
    let (code, out, err) = exec_env(&sb, &id, &["python3", "-c", AGENT, "4141", "4142"], env).await;
    assert_eq!(code, 0, "{err}");
    let result: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    let calls = result["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 4);
    for call in calls {
        assert_eq!(call[0], 200, "{call}");
    }
    assert_eq!(calls[2][1], anthropic_sse(472, 89), "streamed unchanged");
    assert!(
        calls[3][1].as_str().unwrap().ends_with("data: [DONE]\n\n"),
        "{}",
        calls[3][1]
    );
    let kept = result["kept"].as_array().unwrap();
    assert_eq!(kept.len(), 3);
    for k in kept {
        assert_eq!(k[0], 200, "{k}");
    }

    let a_usage = gateway.finish_trial(&a_token).await.unwrap();
    let o_usage = gateway.finish_trial(&o_token).await.unwrap();
    // What the upstream served: 4 non-streaming Anthropic bodies and one stream; one
    // OpenAI body and one stream (usage asked for by the gateway).
    assert_eq!(a_usage.requests, 5);
    assert_eq!(
        (a_usage.input_tokens, a_usage.output_tokens),
        (4 * 2095 + 472, 4 * 503 + 89)
    );
    assert_eq!(o_usage.requests, 2);
    assert_eq!(
        (o_usage.input_tokens, o_usage.output_tokens),
        (300 + 900, 40 + 12)
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 7);
    for (path, key) in &seen {
        assert!(
            key.contains(REAL_KEY),
            "{path}: the upstream got the real key"
        );
    }

    // The real key is in no pod spec, event, process environment or file of the pod.
    let spec = serde_json::to_string(&pod_object(&id).await).unwrap();
    assert!(!spec.contains(REAL_KEY));
    assert!(spec.contains("main"), "the spec was read");
    let events = pod_events(&id).await;
    assert!(!events.contains(REAL_KEY), "{events}");
    sb.stop(&id).await.expect("stop");
    let found = grep_pod(&id, REAL_KEY).await;
    assert_eq!(found, "", "files or environments holding the key");
    // The grep can find: a token is in the stopped pod nowhere either but in what we
    // planted, which proves the search reads files.
    let (code, _, _) = exec(&sb, &id, &["sh", "-c", "echo needle-0f9e > /tmp/planted"]).await;
    assert_eq!(code, 0);
    assert_eq!(grep_pod(&id, "needle-0f9e").await.trim(), "/tmp/planted");
}

/// Times 200 small gateway calls (`GET /v1/models`) from inside a container: a new
/// connection each, then on one kept-alive connection. Prints p50 / p90 in ms.
const TIMER: &str = r#"
import http.client, json, os, sys, time
port, tok = int(sys.argv[1]), os.environ["OPENAI_API_KEY"]
h = {"authorization": "Bearer " + tok}
def pct(xs):
    xs = sorted(xs)
    return [round(xs[len(xs) // 2] * 1000, 2), round(xs[int(len(xs) * 0.9)] * 1000, 2)]
fresh, kept = [], []
for _ in range(200):
    t = time.perf_counter()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", "/v1/models", headers=h)
    r = c.getresponse(); r.read(); c.close()
    assert r.status == 200, r.status
    fresh.append(time.perf_counter() - t)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
for _ in range(200):
    t = time.perf_counter()
    c.request("GET", "/v1/models", headers=h)
    r = c.getresponse(); r.read()
    assert r.status == 200, r.status
    kept.append(time.perf_counter() - t)
print(json.dumps({"new_connection_p50_p90_ms": pct(fresh), "keep_alive_p50_p90_ms": pct(kept)}))
"#;

/// Not a check: the latency a call pays through the relay against Docker's listener in the
/// container's namespace. `cargo test --test kubernetes_gateway -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "a measurement; run by hand"]
async fn bench_gateway_latency_relay_vs_docker_netns() {
    let Some(sb) = cluster().await else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (url, _) = fake_upstream().await;
    let gateway = Gateway::start(vec![model(
        &format!("{{name: oai, api: openai, base_url: '{url}/v1', api_key: '${{TEST_KEY}}'}}"),
        tmp.path(),
    )])
    .unwrap();
    let grant = |trial: &str| TrialGrant {
        trial_id: trial.to_string(),
        provider: "oai".to_string(),
        model: "m".to_string(),
        budget: Budget::default(),
        ledger_path: tmp.path().join(trial).join("model-calls.jsonl"),
    };

    // Kubernetes: through the relay.
    let k_token = gateway.register_trial(grant("bench-k8s")).unwrap();
    let image = python_image(&sb, tmp.path()).await;
    let id = sb
        .create(&container(&image, "relay-bench", Network::None))
        .await
        .expect("create");
    let _pod = PodGuard(&sb, id.clone());
    sb.start(&id).await.expect("start");
    let listener = sb.loopback_listener(&id, 4141).await.expect("relay");
    let _served = gateway.serve_trial(listener, &k_token).unwrap();
    let env = vec![("OPENAI_API_KEY".to_string(), k_token.as_str().to_string())];
    let (code, out, err) = exec_env(&sb, &id, &["python3", "-c", TIMER, "4141"], env).await;
    assert_eq!(code, 0, "{err}");
    eprintln!("kubernetes relay: {}", out.trim());

    // Docker: the listener inside the container's network namespace (root only).
    // SAFETY: no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("docker netns: skipped (not root)");
        return;
    }
    let d_token = gateway.register_trial(grant("bench-docker")).unwrap();
    let name = format!("arbiter-relay-bench-{}", std::process::id());
    let docker = |args: &[&str]| {
        std::process::Command::new("docker")
            .args(args)
            .output()
            .expect("docker")
    };
    let run = common::offline_container(&name, "arbiter/debian:bookworm", "600");
    assert!(run.status.success(), "{run:?}");
    let pid: u32 =
        String::from_utf8_lossy(&docker(&["inspect", "-f", "{{.State.Pid}}", &name]).stdout)
            .trim()
            .parse()
            .unwrap();
    let listener = arbiter::gateway::listen_in_netns(pid, 4141).unwrap();
    let _served = gateway.serve_trial(listener, &d_token).unwrap();
    let env = format!("OPENAI_API_KEY={}", d_token.as_str());
    let (name2, env2) = (name.clone(), env.clone());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("docker")
            .args(["exec", "-e", &env2, &name2, "python3", "-c", TIMER, "4141"])
            .output()
            .expect("docker exec")
    })
    .await
    .unwrap();
    let _ = docker(&["rm", "-f", &name]);
    assert!(out.status.success(), "{out:?}");
    eprintln!(
        "docker netns: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
}
