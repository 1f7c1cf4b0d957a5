//! `agent/trajectory.atif.json` from real trials through the model gateway (real engine,
//! network `none`, the scripted provider): valid against docs/atif.schema.json (Harbor's ATIF
//! models as JSON Schema) and Harbor's two cross-field rules, its totals equal to the record's
//! `usage`, its steps shown on the trial page. One agent speaks OpenAI Chat Completions without
//! streaming (tests/fixtures/agents/gateway-caller), one Anthropic Messages streaming (written
//! here).

mod common;

use common::*;
use serde_json::Value;

const TASK: &str = "exact-deliverable";

/// A minimal Anthropic Messages agent that streams: reassembles each reply from its events,
/// runs each `bash` tool call, sends the results back, stops at the first plain answer.
const ANTHROPIC_STREAMING_AGENT: &str = r#"
import json, os, subprocess, urllib.request
base, key, model = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"], os.environ["ARBITER_MODEL"]
tools = [{"name": "bash", "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]
messages = [{"role": "user", "content": open(os.environ["ARBITER_INSTRUCTION_FILE"]).read()}]
for _ in range(10):
    body = json.dumps({"model": model, "max_tokens": 1000, "system": "You are a test agent.",
                       "messages": messages, "tools": tools, "stream": True}).encode()
    req = urllib.request.Request(base + "/v1/messages", data=body, headers={
        "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"})
    blocks = {}
    with urllib.request.urlopen(req, timeout=60) as reply:
        for raw in reply:
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            e = json.loads(line[5:])
            if e.get("type") == "content_block_start":
                blocks[e["index"]] = dict(e["content_block"], _json="")
            elif e.get("type") == "content_block_delta":
                d, b = e["delta"], blocks[e["index"]]
                if d["type"] == "text_delta":
                    b["text"] = b.get("text", "") + d["text"]
                elif d["type"] == "input_json_delta":
                    b["_json"] += d["partial_json"]
    content = []
    for i in sorted(blocks):
        b = blocks[i]
        j = b.pop("_json")
        if b["type"] == "tool_use" and j:
            b["input"] = json.loads(j)
        content.append(b)
    messages.append({"role": "assistant", "content": content})
    calls = [b for b in content if b["type"] == "tool_use"]
    if not calls:
        break
    results = []
    for c in calls:
        out = subprocess.run(["bash", "-c", c["input"]["command"]], capture_output=True, text=True)
        results.append({"type": "tool_result", "tool_use_id": c["id"], "content": out.stdout + out.stderr})
    messages.append({"role": "user", "content": results})
"#;

/// Run the task with `agent` (a `command` agent's `run:` and mounts) on a priced scripted
/// provider; returns the job dir (and its guard) and the trial's id.
fn run_trial(
    tmp: &std::path::Path,
    name: &str,
    run: &str,
    agent_dir: &std::path::Path,
) -> (std::path::PathBuf, tempfile::TempDir, String) {
    std::fs::write(
        tmp.join("script.json"),
        r#"{"turns": [
            {"say": "Running the solution.", "run": "bash /opt/solution/solve.sh >/dev/null && echo solved", "usage": {"input_tokens": 120, "output_tokens": 12, "cache_read_tokens": 40}},
            {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 300, "output_tokens": 30}}
        ]}"#,
    )
    .expect("script");
    let repo = repo();
    let config = write_job(
        tmp,
        &format!(
            "tasks: [{task}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json, price: {{input_per_mtok: 3.0, output_per_mtok: 15.0, cache_read_per_mtok: 0.3}}}}\nagents:\n  - name: {name}\n    kind: command\n    run: {run}\n    model: {{provider: fake, name: scripted-model}}\n    mounts:\n      - {{host: {agent}, container: /opt/caller}}\n      - {{host: {solution}, container: /opt/solution}}\n",
            task = repo.join("tasks").join(TASK).display(),
            agent = agent_dir.display(),
            solution = repo.join("tasks").join(TASK).join("solution").display(),
        ),
    );
    let (out, job_dir, guard) = run_job(&["-c", config.to_str().expect("utf8")]);
    let trial = format!("{TASK}__{name}__default__1");
    let r = result(&job_dir, &trial);
    assert_eq!(out.status.code(), Some(0), "{} {r:#}", stderr(&out));
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    (job_dir, guard, trial)
}

/// The trajectory is valid, its totals are the record's usage, and the trial page shows it.
fn check(job_dir: &std::path::Path, trial: &str, api: &str, stream: bool) -> Value {
    let r = result(job_dir, trial);
    let dir = job_dir.join("trials").join(trial);
    let v: Value = serde_json::from_slice(
        &std::fs::read(dir.join("agent/trajectory.atif.json")).expect("trajectory.atif.json"),
    )
    .expect("JSON");
    let schema: Value =
        serde_json::from_str(include_str!("../docs/atif.schema.json")).expect("schema");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:#?}\n{v:#}");
    let broken = arbiter::gateway::atif::invariant_errors(&v);
    assert!(broken.is_empty(), "{broken:#?}\n{v:#}");

    let steps = v["steps"].as_array().expect("steps");
    let sources: Vec<&str> = steps.iter().filter_map(|s| s["source"].as_str()).collect();
    let want: &[&str] = if api == "anthropic_messages" {
        &["system", "user", "agent", "agent"]
    } else {
        &["user", "agent", "agent"]
    };
    assert_eq!(sources, want, "{v:#}");
    let first = &steps[want.len() - 2];
    assert_eq!(first["message"], "Running the solution.", "{v:#}");
    assert_eq!(first["extra"]["api"], api);
    assert_eq!(first["extra"]["stream"], stream);
    let call = &first["tool_calls"][0];
    assert_eq!(call["function_name"], "bash");
    assert!(
        call["arguments"]["command"]
            .as_str()
            .is_some_and(|c| c.contains("solve.sh")),
        "{call:#}"
    );
    let result0 = &first["observation"]["results"][0];
    assert_eq!(result0["source_call_id"], call["tool_call_id"]);
    assert_eq!(result0["content"], "solved\n", "{v:#}");
    assert!(
        steps[want.len() - 1]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Done:")),
        "{v:#}"
    );

    // Totals equal the record's usage, field by field.
    let usage = &r["usage"];
    let fm = &v["final_metrics"];
    let n = |x: &Value| x.as_u64().expect("a count");
    assert_eq!(n(&usage["requests"]), 2, "{r:#}");
    assert_eq!(fm["extra"]["requests"], usage["requests"]);
    for k in [
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
    ] {
        assert_eq!(fm["extra"][k], usage[k], "{k}: {fm:#} {usage:#}");
    }
    assert_eq!(
        n(&fm["total_prompt_tokens"]),
        n(&usage["input_tokens"])
            + n(&usage["cache_read_tokens"])
            + n(&usage["cache_write_tokens"])
    );
    assert_eq!(fm["total_completion_tokens"], usage["output_tokens"]);
    assert_eq!(fm["total_cached_tokens"], usage["cache_read_tokens"]);
    assert_eq!(n(&fm["total_cached_tokens"]), 40);
    assert_eq!(n(&fm["total_completion_tokens"]), 42);
    let (got, want) = (
        fm["total_cost_usd"].as_f64().expect("priced"),
        usage["cost_usd"].as_f64().expect("priced"),
    );
    assert!((got - want).abs() < 1e-12, "{got} {want}");
    // The steps' own metrics add up to the totals.
    let sum = |k: &str| -> u64 { steps.iter().filter_map(|s| s["metrics"][k].as_u64()).sum() };
    assert_eq!(sum("prompt_tokens"), n(&fm["total_prompt_tokens"]));
    assert_eq!(sum("completion_tokens"), n(&fm["total_completion_tokens"]));
    assert_eq!(n(&fm["total_steps"]), steps.len() as u64);

    // The trial page reads it first and shows its steps.
    let out = arbiter(&["report", job_dir.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = std::fs::read_to_string(dir.join("trial.html")).expect("trial.html");
    assert!(
        page.contains("From <a href=\"agent/trajectory.atif.json\">"),
        "the page does not read the ATIF file"
    );
    assert!(page.contains("Running the solution."), "no agent step text");
    assert!(page.contains("→ <b>bash</b>"), "no tool call");
    assert!(page.contains("← output of "), "no observation");
    assert!(page.contains("final metrics"), "no totals");
    v
}

#[test]
fn a_chat_completions_trial_exports_a_valid_atif_trajectory_whose_totals_are_its_usage() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (job_dir, _g, trial) = run_trial(
        tmp.path(),
        "caller",
        "[python3, /opt/caller/agent.py]",
        &repo().join("tests/fixtures/agents/gateway-caller"),
    );
    let v = check(&job_dir, &trial, "chat_completions", false);
    assert_eq!(v["session_id"], trial.as_str());
    assert_eq!(v["agent"]["name"], "caller");
    assert_eq!(v["agent"]["extra"]["kind"], "command");
    assert_eq!(v["agent"]["model_name"], "scripted-model");
}

#[test]
fn an_anthropic_streaming_trial_exports_a_valid_atif_trajectory_whose_totals_are_its_usage() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let agent = tmp.path().join("agent");
    std::fs::create_dir_all(&agent).expect("agent dir");
    std::fs::write(agent.join("agent.py"), ANTHROPIC_STREAMING_AGENT).expect("agent.py");
    let (job_dir, _g, trial) = run_trial(
        tmp.path(),
        "streamer",
        "[python3, /opt/caller/agent.py]",
        &agent,
    );
    let v = check(&job_dir, &trial, "anthropic_messages", true);
    assert_eq!(v["steps"][0]["message"], "You are a test agent.");
}
