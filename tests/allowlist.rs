//! `network_mode = "allowlist"` on a real engine: the agent's (and the verifier's) container
//! has network `none` plus arbiter's egress proxy on its own loopback. A listed host — a tiny
//! HTTP server this test runs on the host's 127.0.0.1, which the proxy (in arbiter's process,
//! in the host's network namespace) can reach — is reached; any other destination is answered
//! 403 by the proxy before any name lookup or connection, and recorded. The agent-level
//! `network:` override of job.yaml is applied, recorded and locked; bad values are refused.
//!
//! No traffic leaves the machine: refused destinations are `.invalid` names and the
//! host's own loopback, which the proxy never connects to.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::*;
use serde_json::Value;

/// A tiny HTTP/1.1 server on the host's 127.0.0.1: answers every request with 200 and
/// remembers each request line.
fn host_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let mut header = String::new();
            while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                header.clear();
            }
            log.lock().expect("lock").push(line.trim_end().to_string());
            let body = "hello from the host";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, seen)
}

/// The agent: reports what its network lets it do as one JSON line on stdout.
const PROBE: &str = r#"
import json, os, socket, sys, urllib.error, urllib.request
port = int(sys.argv[1])
# The interfaces that are up (a pod's eth0 is there but down on Kubernetes).
out = {"interfaces": sorted(i for i in os.listdir("/sys/class/net")
                            if int(open("/sys/class/net/%s/flags" % i).read(), 16) & 1)}
for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY"]:
    out[k] = os.environ.get(k)

def fetch(opener, url):
    try:
        r = opener.open(url, timeout=20)
        return {"status": r.status, "body": r.read().decode()}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read().decode()}
    except Exception as e:
        return {"error": repr(e)}

base = os.environ.get("OPENAI_BASE_URL")
if base:
    # The model gateway, with the proxy variables set: NO_PROXY sends it direct.
    req = urllib.request.Request(base + "/models",
                                 headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    out["models"] = fetch(urllib.request.build_opener(), req)
proxy = os.environ.get("HTTP_PROXY")
# NO_PROXY sends 127.0.0.1 direct (the container's own loopback, where the model gateway
# would be); this probe wants the host's 127.0.0.1, through the proxy.
os.environ.pop("NO_PROXY", None)
os.environ.pop("no_proxy", None)
if proxy:
    via = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    out["allowed"] = fetch(via, "http://127.0.0.1:%d/allowed" % port)
    out["by_name"] = fetch(via, "http://localhost:%d/by-name" % port)
    # The env's proxy, as any client that honours HTTP_PROXY uses it.
    out["invalid"] = fetch(urllib.request.build_opener(), "http://example.invalid/x")
    s = socket.create_connection(("127.0.0.1", int(proxy.rsplit(":", 1)[1])), timeout=20)
    s.sendall(b"CONNECT example.invalid:443 HTTP/1.1\r\nHost: example.invalid:443\r\n\r\n")
    out["connect"] = s.recv(200).decode(errors="replace")
    s.close()
# Without the proxy nothing is reachable: 127.0.0.1 is the container's own loopback.
out["direct"] = fetch(urllib.request.build_opener(urllib.request.ProxyHandler({})),
                      "http://127.0.0.1:%d/direct" % port)
print(json.dumps(out))
"#;

/// The verifier: reward 1 when the listed host answers through its proxy.
fn verifier_script(port: u16) -> String {
    format!(
        r#"#!/bin/bash
python3 - <<'EOF'
import os, urllib.request
proxy = os.environ.get("HTTP_PROXY")
os.environ.pop("NO_PROXY", None)
os.environ.pop("no_proxy", None)
ok = False
if proxy:
    via = urllib.request.build_opener(urllib.request.ProxyHandler({{"http": proxy}}))
    ok = via.open("http://127.0.0.1:{port}/verifier", timeout=20).status == 200
open("/logs/verifier/reward.txt", "w").write("1" if ok else "0")
EOF
"#
    )
}

fn task(root: &Path, name: &str, toml: &str, test_sh: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tests")).expect("mkdir");
    // Built from a Dockerfile (not named), so the Kubernetes backend pushes it to the test
    // cluster's registry; on Docker the build is a tag of the local base image.
    std::fs::create_dir_all(dir.join("environment")).expect("mkdir");
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM arbiter/debian:bookworm\n",
    )
    .expect("Dockerfile");
    std::fs::write(dir.join("task.toml"), format!("[environment]\n{toml}")).expect("task.toml");
    std::fs::write(dir.join("instruction.md"), "Probe the network.\n").expect("instruction");
    std::fs::write(dir.join("tests/test.sh"), test_sh).expect("test.sh");
    dir
}

fn probe(job_dir: &Path, trial: &str) -> Value {
    let path = job_dir.join("trials").join(trial).join("agent/stdout.log");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON line in {text}"));
    serde_json::from_str(line).expect("probe JSON")
}

/// `(phase, host, port, allowed, error)` of each egress attempt in a record.
fn egress(r: &Value) -> Vec<(String, String, u64, bool, Option<String>)> {
    r["network"]["egress"]
        .as_array()
        .unwrap_or_else(|| panic!("no network.egress in {r:#}"))
        .iter()
        .map(|e| {
            (
                e["phase"].as_str().expect("phase").to_string(),
                e["host"].as_str().expect("host").to_string(),
                e["port"].as_u64().expect("port"),
                e["allowed"].as_bool().expect("allowed"),
                e["error"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn allowlisted_hosts_are_reached_through_the_proxy_and_everything_else_is_refused_unconnected() {
    if docker_available() {
        allowlisted_hosts_only(&[]);
    }
}

/// The same on Kubernetes: the proxy reaches the pod through the loopback relay.
#[test]
fn allowlisted_hosts_only_on_kubernetes() {
    if let Some(backend) = common::k8s::kubernetes_flags() {
        allowlisted_hosts_only(&backend);
    }
}

fn allowlisted_hosts_only(backend: &[&str]) {
    let (port, seen) = host_server();
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let pass = "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n";
    task(
        root,
        "agent-allowlist",
        "network_mode = \"allowlist\"\nallowed_hosts = [\"127.0.0.1\"]\n",
        pass,
    );
    task(
        root,
        "verifier-allowlist",
        "network_mode = \"no-network\"\n[verifier]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"127.0.0.1\"]\n",
        &verifier_script(port),
    );
    let probe_dir = root.join("probe");
    std::fs::create_dir_all(&probe_dir).expect("mkdir");
    std::fs::write(probe_dir.join("probe.py"), PROBE).expect("probe.py");
    let job = |override_network: &str| {
        write_job(
            root,
            &format!(
                "tasks: [agent-allowlist, verifier-allowlist]\nagents:\n  - name: probe\n    kind: command\n    run: [python3, /opt/probe/probe.py, \"{port}\"]\n    mounts: [{{host: probe, container: /opt/probe}}]\n  - name: override\n    kind: command\n    run: [python3, /opt/probe/probe.py, \"{port}\"]\n    mounts: [{{host: probe, container: /opt/probe}}]\n{override_network}"
            ),
        )
    };
    let config = job("    network: allowlist\n    allowed_hosts: [127.0.0.1]\n");
    let mut args = vec!["-c", config.to_str().expect("utf8"), "-n", "2"];
    args.extend_from_slice(backend);
    let (out, job_dir, _g) = run_job(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // The task's own allowlist: the listed host is reached, nothing else.
    let trial = "agent-allowlist__probe__default__1";
    let r = result(&job_dir, trial);
    let p = probe(&job_dir, trial);
    assert_eq!(r["limits"]["network"], "allowlist", "{r:#}");
    assert_eq!(p["interfaces"], serde_json::json!(["lo"]), "{p:#}");
    for key in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        assert_eq!(p[key], "http://127.0.0.1:3128", "{key}: {p:#}");
    }
    assert_eq!(p["NO_PROXY"], "127.0.0.1,localhost");
    assert_eq!(p["allowed"]["status"], 200, "{p:#}");
    assert_eq!(p["allowed"]["body"], "hello from the host");
    for refused in ["by_name", "invalid"] {
        assert_eq!(p[refused]["status"], 403, "{refused}: {p:#}");
        let body = p[refused]["body"].as_str().expect("body");
        assert!(body.contains("is not in allowed_hosts"), "{body}");
    }
    let connect = p["connect"].as_str().expect("connect");
    assert!(connect.starts_with("HTTP/1.1 403 Forbidden"), "{connect}");
    assert!(p["direct"]["error"].is_string(), "{p:#}");
    assert_eq!(
        egress(&r),
        [
            (
                "agent".to_string(),
                "127.0.0.1".to_string(),
                u64::from(port),
                true,
                None
            ),
            (
                "agent".to_string(),
                "localhost".to_string(),
                u64::from(port),
                false,
                None
            ),
            (
                "agent".to_string(),
                "example.invalid".to_string(),
                80,
                false,
                None
            ),
            (
                "agent".to_string(),
                "example.invalid".to_string(),
                443,
                false,
                None
            ),
        ],
        "refused attempts carry no error: nothing was resolved or connected"
    );

    // The agent-level override on a task whose agent has no network.
    let trial = "verifier-allowlist__override__default__1";
    let r = result(&job_dir, trial);
    let p = probe(&job_dir, trial);
    assert_eq!(r["limits"]["network"], "allowlist", "{r:#}");
    assert_eq!(p["allowed"]["status"], 200, "{p:#}");
    assert_eq!(p["interfaces"], serde_json::json!(["lo"]));
    let overrides = &r["harness_overrides"];
    assert_eq!(
        overrides,
        &serde_json::json!([
            {"key": "network", "value": "allowlist", "source": "agent_config"},
            {"key": "allowed_hosts", "value": "127.0.0.1", "source": "agent_config"}
        ]),
        "{r:#}"
    );

    // The verifier's own allowlist: its proxy reaches the host; the agent had no network.
    let trial = "verifier-allowlist__probe__default__1";
    let r = result(&job_dir, trial);
    let p = probe(&job_dir, trial);
    assert_eq!(p["HTTP_PROXY"], Value::Null, "{p:#}");
    assert!(p["direct"]["error"].is_string(), "{p:#}");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(
        egress(&r),
        [(
            "verify".to_string(),
            "127.0.0.1".to_string(),
            u64::from(port),
            true,
            None
        )]
    );

    // Exactly the admitted requests reached the server: a refused one never connects.
    let mut lines = seen.lock().expect("lock").clone();
    lines.sort();
    let paths: Vec<String> = lines
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap_or_default().to_string())
        .map(|target| target.rsplit('/').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        paths,
        // Both agents on the allowlist task, the override on the other; both verifiers there.
        ["allowed", "allowed", "allowed", "verifier", "verifier"],
        "{lines:?}"
    );

    // Resuming with another network for an agent is refused like any agent change.
    let changed = job("    network: none\n");
    let job_s = job_dir.to_string_lossy().into_owned();
    let mut args = vec![
        "run",
        "--quiet",
        "-c",
        changed.to_str().expect("utf8"),
        "--job-dir",
        &job_s,
    ];
    args.extend_from_slice(backend);
    let out = arbiter(&args);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("agents.override: definition changed"), "{err}");
}

#[test]
fn the_model_gateway_and_the_proxy_serve_one_offline_container() {
    if docker_available() {
        gateway_and_proxy(&[]);
    }
}

/// The same in one pod: two relays on its loopback, one per endpoint.
#[test]
fn the_model_gateway_and_the_proxy_serve_one_offline_pod() {
    if let Some(backend) = common::k8s::kubernetes_flags() {
        gateway_and_proxy(&backend);
    }
}

fn gateway_and_proxy(backend: &[&str]) {
    let (port, seen) = host_server();
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    task(
        root,
        "both",
        "network_mode = \"allowlist\"\nallowed_hosts = [\"127.0.0.1\"]\n",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    );
    let probe_dir = root.join("probe");
    std::fs::create_dir_all(&probe_dir).expect("mkdir");
    std::fs::write(probe_dir.join("probe.py"), PROBE).expect("probe.py");
    std::fs::write(root.join("script.json"), r#"{"turns": []}"#).expect("script");
    let config = write_job(
        root,
        &format!(
            "tasks: [both]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: caller\n    kind: command\n    run: [python3, /opt/probe/probe.py, \"{port}\"]\n    mounts: [{{host: probe, container: /opt/probe}}]\n    model: {{provider: fake, name: scripted-model}}\n"
        ),
    );
    let mut args = vec!["-c", config.to_str().expect("utf8")];
    args.extend_from_slice(backend);
    let (out, job_dir, _g) = run_job(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "both__caller__default__1";
    let r = result(&job_dir, trial);
    let p = probe(&job_dir, trial);
    assert_eq!(p["models"]["status"], 200, "the gateway, direct: {p:#}");
    assert!(
        p["models"]["body"]
            .as_str()
            .is_some_and(|b| b.contains("scripted-model")),
        "{p:#}"
    );
    assert_eq!(
        p["allowed"]["status"], 200,
        "the host, through the proxy: {p:#}"
    );
    assert_eq!(p["invalid"]["status"], 403, "{p:#}");
    assert_eq!(p["interfaces"], serde_json::json!(["lo"]));
    assert_eq!(r["infra_error"], Value::Null, "{r:#}");
    assert_eq!(
        egress(&r)
            .iter()
            .map(|(_, host, _, allowed, _)| (host.as_str(), *allowed))
            .collect::<Vec<_>>(),
        [
            ("127.0.0.1", true),
            ("localhost", false),
            ("example.invalid", false),
            ("example.invalid", false)
        ],
        "the gateway call did not go through the proxy"
    );
    assert_eq!(seen.lock().expect("lock").len(), 1);
}

#[test]
fn bad_agent_network_overrides_are_refused_with_one_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    task(
        root,
        "ok",
        "network_mode = \"no-network\"\n",
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
    );
    let c = root.join("job.yaml").to_string_lossy().into_owned();
    let agent = "tasks: [ok]\nagents:\n  - name: x\n    kind: command\n    run: [echo]\n";
    let cases = [
        (
            "    network: wifi\n",
            format!(
                "error: {c}:agents: network: unknown value \"wifi\" (expected none, host, bridge or allowlist) at line 3 column 3"
            ),
        ),
        (
            "    network: host\n    allowed_hosts: [pypi.org]\n",
            format!(
                "error: {c}:agents[0].allowed_hosts: only used with network: allowlist (network is \"host\")"
            ),
        ),
        (
            "    network: allowlist\n",
            format!(
                "error: {c}:agents[0].allowed_hosts: required with network: allowlist (the hosts the agent may reach)"
            ),
        ),
        (
            "    allowed_hosts: [pypi.org, \"https://x.org\"]\n",
            format!(
                "error: {c}:agents[0].allowed_hosts[1]: must be a host name, IP address or CIDR range, not a URL (got \"https://x.org\")"
            ),
        ),
    ];
    for (extra, expected) in cases {
        let config = write_job(root, &format!("{agent}{extra}"));
        let job = root.join("job");
        let job_s = job.to_string_lossy().into_owned();
        let out = arbiter(&[
            "run",
            "-c",
            config.to_str().expect("utf8"),
            "--job-dir",
            &job_s,
        ]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra}: {err}");
        assert_eq!(err.trim_end(), expected, "{extra}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(!job.exists(), "nothing may be started");
    }
}
