//! Real tasks as their authors meant them (issue 23), on the real engine: a task shaped like
//! Terminal-Bench 2's — no network keys in task.toml, its working dir set only by the
//! Dockerfile's `WORKDIR`, a test.sh that downloads its runner when it runs and refuses to run
//! from `/` — under Harbor's network default (`public`).
//!
//! This machine's engine has no default bridge (the network rule of ENVIRONMENT.md), so
//! `public` cannot be given here: arbiter refuses such a job, and the tests reach "the
//! internet" — a server on the host's loopback — through the job's `--network host`
//! override, the mechanism a user without a bridge would use.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::*;

/// What the verifier downloads: a test runner that checks the answer.
const RUNNER: &str = "import sys\nok = open('answer.txt').read().strip() == '42'\nprint('1 passed' if ok else '1 failed')\nsys.exit(0 if ok else 1)\n";

/// A TB2-shaped task: the runner is fetched from `127.0.0.1:port` when the verifier runs.
fn tb2_task(root: &Path, name: &str, port: u16) -> PathBuf {
    let dir = root.join(name);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    std::fs::write(
        dir.join("task.toml"),
        "version = \"1.0\"\n[metadata]\ndifficulty = \"easy\"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 512\n",
    )
    .expect("task.toml");
    std::fs::write(
        dir.join("environment/Dockerfile"),
        "FROM arbiter/debian:bookworm\nWORKDIR /app\n",
    )
    .expect("Dockerfile");
    std::fs::write(dir.join("instruction.md"), "Write 42 to answer.txt.\n").expect("instruction");
    std::fs::write(
        dir.join("solution/solve.sh"),
        "#!/bin/bash\necho 42 > answer.txt\n",
    )
    .expect("solve.sh");
    // Like TB2's: fetch the runner, refuse `/`, write 1 or 0 — also when the fetch failed.
    std::fs::write(
        dir.join("tests/test.sh"),
        format!(
            "#!/bin/bash\npython3 -c 'import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(\"http://127.0.0.1:{port}/runner.py\", timeout=10).read().decode())' > /tmp/runner.py\nif [ \"$PWD\" = \"/\" ]; then echo 'Error: No working directory set.'; exit 1; fi\ntest -s /tmp/runner.py && python3 /tmp/runner.py\nif [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
        ),
    )
    .expect("test.sh");
    dir
}

/// Serve [`RUNNER`] on a loopback port until the test ends; the port.
fn runner_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{RUNNER}",
                RUNNER.len()
            );
            let _ = stream.write_all(reply.as_bytes());
        }
    });
    port
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn a_task_that_asks_for_public_on_an_engine_without_a_bridge_is_refused_and_runs_offline_when_told()
{
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = tb2_task(tmp.path(), "needs-public", closed_port());
    let task_s = task.display().to_string();
    let (out, job_dir, _t) = run_job(&[&task_s, "--agent", "oracle"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].contains("needs-public/task.toml"), "{err}");
    assert!(lines[0].contains("\"public\" (Harbor's default"), "{err}");
    assert!(lines[0].contains("--network none"), "{err}");
    assert!(!job_dir.join("trials").exists(), "nothing started");

    // Offline, as the error says: it runs; the download fails, and that is no agent failure.
    let (out, job_dir, _t) = run_job(&[&task_s, "--agent", "oracle", "--network", "none"]);
    let r = result(&job_dir, "needs-public__oracle__default__1");
    assert_ne!(out.status.code(), Some(2), "{}", stderr(&out));
    let overrides = &r["harness_overrides"];
    assert!(
        overrides
            .as_array()
            .expect("list")
            .iter()
            .any(|o| o["key"] == "network.verifier"
                && o["value"] == "none"
                && o["source"] == "job"),
        "{overrides}"
    );
    assert_eq!(r["limits"]["network"], "no-network");
}

#[test]
fn a_verifier_that_fetches_its_runner_scores_and_one_that_cannot_is_an_infra_error_not_a_zero() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let up = tb2_task(tmp.path(), "runner-up", runner_server());
    let down = tb2_task(tmp.path(), "runner-down", closed_port());
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [oracle, nop]\nnetwork: host\nretries: {{max: 1, backoff_sec: 0}}\nconcurrency: 2\n",
            up.display(),
            down.display()
        ),
    );
    let (out, job_dir, _t) = run_job(&["-c", config.to_str().expect("utf8")]);
    let err = stderr(&out);

    // Reached: the oracle passes, nop fails with reward 0 — a real verdict on each.
    let oracle = result(&job_dir, "runner-up__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}\n{err}");
    assert!(oracle["infra_error"].is_null(), "{oracle:#}");
    let nop = result(&job_dir, "runner-up__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    assert_eq!(nop["verifier"]["reward"]["reward"], 0.0, "{nop:#}");
    // The verifier's egress went through arbiter's observer and is in the record.
    let egress = nop["network"]["egress"].to_string();
    assert!(
        egress.contains("127.0.0.1"),
        "verifier egress recorded: {egress}"
    );

    // Unreachable: whatever the script wrote (it writes 0), the verifier is an `error` with
    // the failing host and the command, no reward, an infrastructure error of the verify
    // phase, retried once — for the agent that solved the task and the one that did nothing.
    for agent in ["oracle", "nop"] {
        let r = result(&job_dir, &format!("runner-down__{agent}__default__1"));
        assert_eq!(r["verifier"]["status"], "error", "{agent}: {r:#}");
        assert!(
            r["verifier"]["reward"].is_null(),
            "{agent}: no reward: {r:#}"
        );
        let detail = r["verifier"]["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("could not fetch its tools"), "{detail}");
        assert!(detail.contains("127.0.0.1:"), "{detail}");
        assert!(
            detail.contains("tests/test.sh: python3 -c"),
            "the command: {detail}"
        );
        assert_eq!(r["infra_error"]["phase"], "verify", "{agent}: {r:#}");
        assert_eq!(r["retries"], 1, "{agent}: retried as infra: {r:#}");
    }
    // Reported apart: the job ends with infra errors (exit 3), not as agent failures.
    assert_eq!(out.status.code(), Some(3), "{err}");
}

// ------------------------------------------------------------- offline verifiers ---
// Issue 37, item 4: with `--network none` a TB2 verifier that tries to fetch its runner must
// not be scored `failed`: its proxy admits nothing, records the attempt, and the verifier is
// an `error` naming the host, an infrastructure error of the verify phase, with no reward.

/// curl and the libraries `arbiter/debian:bookworm` (minbase) lacks for it, as TB2's images
/// have it (`apt-get install -y curl`; image builds here have no network).
const CURL_DEBS: &[&str] = &[
    "curl",
    "libcurl4",
    "libnghttp2-14",
    "librtmp1",
    "libssh2-1",
    "libpsl5",
    "libldap-2.5-0",
    "libsasl2-2",
    "libsasl2-modules-db",
    "libbrotli1",
];

/// [`CURL_DEBS`], fetched once on the host with `apt-get download` into
/// `~/.cache/arbiter/debs/curl-bookworm/`; `None` (a skip, or a failure under
/// `ARBITER_REQUIRE_DOCKER=1`) when they cannot be fetched.
fn curl_debs() -> Option<PathBuf> {
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?
        .join("arbiter/debs/curl-bookworm");
    let done = dir.join(".complete");
    if done.is_file() {
        return Some(dir);
    }
    std::fs::create_dir_all(&dir).ok()?;
    let fetched = std::process::Command::new("apt-get")
        .args(["download", "-q"])
        .args(CURL_DEBS)
        .current_dir(&dir)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if fetched && std::fs::write(&done, "").is_ok() {
        return Some(dir);
    }
    assert!(
        std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "could not fetch curl's .debs with apt-get download into {}",
        dir.display()
    );
    eprintln!("skipping: could not fetch curl's .debs with apt-get download");
    None
}

/// TB2's test.sh, word for word but for the test file's name: apt installs curl, curl
/// installs uv, uvx runs pytest, the reward is 1 or 0 — 0 also when nothing could be fetched.
const TB2_TEST_SH: &str = r#"#!/bin/bash

apt-get update
apt-get install -y curl

curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

source $HOME/.local/bin/env

# Check if we're in a valid working directory
if [ "$PWD" = "/" ]; then
    echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
    exit 1
fi

uvx \
  -p 3.13 \
  -w pytest==8.4.1 \
  -w pytest-json-ctrf==0.3.5 \
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA

if [ $? -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"#;

/// A task asking for 42 in `answer.txt` whose verifier is `test_sh`, its image
/// `arbiter/debian:bookworm` with curl (from `debs`) when given, `WORKDIR /app`.
fn offline_task(root: &Path, name: &str, test_sh: &str, debs: Option<&Path>) -> PathBuf {
    let dir = root.join(name);
    for sub in ["environment", "tests", "solution"] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    std::fs::write(
        dir.join("task.toml"),
        "version = \"1.0\"\n[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 60.0\n[environment]\nbuild_timeout_sec = 600.0\ncpus = 1\nmemory_mb = 512\n",
    )
    .expect("task.toml");
    let mut dockerfile = "FROM arbiter/debian:bookworm\n".to_string();
    if let Some(debs) = debs {
        copy_dir(debs, &dir.join("environment/debs"));
        dockerfile.push_str(
            "COPY debs/ /tmp/debs/\nRUN dpkg -i --force-depends /tmp/debs/*.deb >/dev/null 2>&1; rm -rf /tmp/debs; curl --version\n",
        );
    }
    dockerfile.push_str("WORKDIR /app\n");
    std::fs::write(dir.join("environment/Dockerfile"), dockerfile).expect("Dockerfile");
    std::fs::write(dir.join("instruction.md"), "Write 42 to answer.txt.\n").expect("instruction");
    std::fs::write(
        dir.join("solution/solve.sh"),
        "#!/bin/bash\necho 42 > answer.txt\n",
    )
    .expect("solve.sh");
    std::fs::write(dir.join("tests/test.sh"), test_sh).expect("test.sh");
    std::fs::write(
        dir.join("tests/test_outputs.py"),
        "def test_answer():\n    assert open('/app/answer.txt').read().strip() == '42'\n",
    )
    .expect("test_outputs.py");
    dir
}

/// A verifier that makes no network attempt: it checks the answer with the image's python.
const QUIET_TEST_SH: &str = "#!/bin/bash\nif python3 -c \"import sys; sys.exit(open('answer.txt').read().strip() != '42')\"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n";

/// The offline TB2 task's trial: `error` naming astral.sh and the curl line, no reward, an
/// infrastructure error of the verify phase, retried `retries` times; the refused attempt in
/// the record.
fn assert_download_error(r: &serde_json::Value, retries: u64) {
    assert_eq!(r["verifier"]["status"], "error", "{r:#}");
    assert!(r["verifier"]["reward"].is_null(), "no reward: {r:#}");
    let detail = r["verifier"]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("astral.sh:443 unreachable (the verifier has no network)"),
        "{detail}"
    );
    assert!(
        detail.contains("tests/test.sh: curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh"),
        "the command: {detail}"
    );
    assert_eq!(r["infra_error"]["phase"], "verify", "{r:#}");
    assert_eq!(r["retries"], retries, "retried as infra: {r:#}");
    assert_eq!(r["limits"]["network"], "no-network", "{r:#}");
    let egress = r["network"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        egress.contains(&serde_json::json!(
            {"phase": "verify", "host": "astral.sh", "port": 443, "allowed": false}
        )),
        "the refused attempt is recorded: {egress:?}"
    );
}

#[test]
fn offline_a_tb2_verifier_that_fetches_its_runner_is_an_infra_error_naming_the_host_and_one_that_fetches_nothing_keeps_its_verdict()
 {
    if !docker_available() {
        return;
    }
    let Some(debs) = curl_debs() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let fetching = offline_task(tmp.path(), "tb2-offline", TB2_TEST_SH, Some(&debs));
    let quiet = offline_task(tmp.path(), "quiet-offline", QUIET_TEST_SH, None);
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [oracle, nop]\nretries: {{max: 1, backoff_sec: 0}}\nconcurrency: 2\n",
            fetching.display(),
            quiet.display()
        ),
    );
    let (out, job_dir, _t) = run_job(&["-c", config.to_str().expect("utf8"), "--network", "none"]);
    let err = stderr(&out);
    // Whether the agent solved it or did nothing, the verifier measured only the missing
    // network: never a reward, whatever reward.txt says (TB2's script writes 0).
    for agent in ["oracle", "nop"] {
        let r = result(&job_dir, &format!("tb2-offline__{agent}__default__1"));
        assert_download_error(&r, 1);
        let written = std::fs::read_to_string(job_dir.join(format!(
            "trials/tb2-offline__{agent}__default__1/verifier/reward.txt"
        )))
        .unwrap_or_default();
        assert_eq!(
            written.trim(),
            "0",
            "the script's own verdict, not recorded"
        );
    }
    // No network attempt: the tests' verdict stands, for a pass and a failure alike.
    let oracle = result(&job_dir, "quiet-offline__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}\n{err}");
    let nop = result(&job_dir, "quiet-offline__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    assert_eq!(nop["verifier"]["reward"]["reward"], 0.0, "{nop:#}");
    for r in [&oracle, &nop] {
        assert!(r["infra_error"].is_null(), "{r:#}");
        assert_eq!(r["retries"], 0, "{r:#}");
        assert!(r["network"].is_null(), "no attempt recorded: {r:#}");
    }
    // Reported apart: the job ends with infra errors (exit 3).
    assert_eq!(out.status.code(), Some(3), "{err}");
}

#[test]
fn offline_on_kubernetes_a_tb2_verifier_that_fetches_its_runner_is_an_infra_error_naming_the_host()
{
    let Some(backend) = common::k8s::kubernetes_flags() else {
        return;
    };
    let Some(debs) = curl_debs() else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let fetching = offline_task(tmp.path(), "tb2-offline-k8s", TB2_TEST_SH, Some(&debs));
    let quiet = offline_task(tmp.path(), "quiet-offline-k8s", QUIET_TEST_SH, None);
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [nop]\nretries: {{max: 1, backoff_sec: 0}}\nconcurrency: 2\n",
            fetching.display(),
            quiet.display()
        ),
    );
    let mut args = vec!["-c", config.to_str().expect("utf8"), "--network", "none"];
    args.extend_from_slice(&backend);
    let (out, job_dir, _t) = run_job(&args);
    let err = stderr(&out);
    let r = result(&job_dir, "tb2-offline-k8s__nop__default__1");
    assert_eq!(r["sandbox"]["backend"], "kubernetes", "{r:#}");
    assert_download_error(&r, 1);
    let nop = result(&job_dir, "quiet-offline-k8s__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}\n{err}");
    assert_eq!(nop["verifier"]["reward"]["reward"], 0.0, "{nop:#}");
    assert!(nop["infra_error"].is_null(), "{nop:#}");
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(
        common::k8s::pods_of(&job_dir),
        Vec::<String>::new(),
        "pods left"
    );
}
