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
