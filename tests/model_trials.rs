//! `command` agents reaching the model gateway from a real container with network `none`:
//! the scripted provider drives a small agent to solve an example task; usage is exact, the
//! ledger has a line per call, the token is in no file; an upstream that is down is an
//! infrastructure error (`model_unavailable`), retried, and the job exits 3.

mod common;

use common::presets::{assert_no_token_in, claude_code_cached};
use common::*;

const TASK: &str = "exact-deliverable";
const TRIAL: &str = "exact-deliverable__caller__default__1";

/// A job file in `dir`: the gateway-caller agent, the solution mounted read-only (the script
/// tells the agent to run it), and `models` as given.
fn job(dir: &std::path::Path, models: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
            {"run": "bash /opt/solution/solve.sh >/dev/null", "usage": {"input_tokens": 120, "output_tokens": 12}},
            {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 300, "output_tokens": 30}}
        ]}"#,
    )
    .expect("script");
    let repo = repo();
    write_job(
        dir,
        &format!(
            "tasks: [{task}]\nretries: {{max: 1, backoff_sec: 0}}\nmodels:\n{models}\nagents:\n  - name: caller\n    kind: command\n    run: [python3, /opt/caller/agent.py]\n    model: {{provider: fake, name: scripted-model}}\n    mounts:\n      - {{host: {agent}, container: /opt/caller}}\n      - {{host: {solution}, container: /opt/solution}}\n",
            task = repo.join("tasks").join(TASK).display(),
            agent = repo.join("tests/fixtures/agents/gateway-caller").display(),
            solution = repo.join("tasks").join(TASK).join("solution").display(),
        ),
    )
}

#[test]
fn a_command_agent_solves_a_task_through_the_gateway_with_exact_usage() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        "  - {name: fake, api: scripted, script: script.json}",
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    let r = result(&job_dir, TRIAL);
    assert_eq!(out.status.code(), Some(0), "{} {r:#}", stderr(&out));
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(r["limits"]["network"], "no-network", "{r:#}");
    let usage = &r["usage"];
    assert_eq!(usage["requests"], 2, "{r:#}");
    assert_eq!(usage["input_tokens"], 420);
    assert_eq!(usage["output_tokens"], 42);
    let ledger = std::fs::read_to_string(
        job_dir
            .join("trials")
            .join(TRIAL)
            .join("agent/model-calls.jsonl"),
    )
    .expect("ledger");
    assert_eq!(ledger.lines().count(), 2, "{ledger}");
    // The token (arb-…) is never written anywhere in the job dir.
    assert_no_token_in(&job_dir);
}

#[test]
fn an_upstream_that_is_down_is_model_unavailable_retried_and_exit_3() {
    if !docker_available() {
        return;
    }
    // A port on the host's loopback that nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let tmp = tempfile::tempdir().expect("tmp");
    let config = job(
        tmp.path(),
        &format!(
            "  - {{name: fake, api: openai, base_url: 'http://127.0.0.1:{port}/v1', retry: {{max: 0}}}}"
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    let r = result(&job_dir, TRIAL);
    assert_eq!(out.status.code(), Some(3), "{} {r:#}", stderr(&out));
    let message = r["infra_error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("model_unavailable"), "{r:#}");
    assert_eq!(r["retries"], 1, "{r:#}");
    assert!(r["usage"]["unavailable"].is_string(), "{r:#}");
}

/// Claude Code from the host cache (`scripts/agents` fills it) through `arbiter run` with the
/// scripted provider: the reference solution sent as its Bash tool call, its claim read by the
/// adapter, its usage counted by the gateway. Skips when the cache has no claude-code.
#[test]
fn claude_code_solves_a_task_through_the_gateway_and_its_adapter_reads_the_claim() {
    if !docker_available() {
        return;
    }
    if !claude_code_cached() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = repo().join("tasks").join(TASK);
    let solve = std::fs::read_to_string(task.join("solution/solve.sh")).expect("solve.sh");
    let script = serde_json::json!({"turns": [
        {"run": solve, "usage": {"input_tokens": 100, "output_tokens": 10}},
        {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 200, "output_tokens": 20}}
    ]});
    std::fs::write(tmp.path().join("script.json"), script.to_string()).expect("script");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: cc\n    kind: claude-code\n    model: {{provider: fake, name: claude-sonnet-4-5}}\n",
            task.display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    let r = result(&job_dir, "exact-deliverable__cc__default__1");
    assert_eq!(out.status.code(), Some(0), "{} {r:#}", stderr(&out));
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(r["claim"]["source"], "adapter", "{r:#}");
    assert_eq!(r["claim"]["status"], "present", "{r:#}");
    assert_eq!(r["audit"]["verdict"], "certified", "{r:#}");
    assert_eq!(r["usage"]["requests"], 2, "{r:#}");
    assert_eq!(r["usage"]["input_tokens"], 300, "{r:#}");
    assert_no_token_in(&job_dir);
}
