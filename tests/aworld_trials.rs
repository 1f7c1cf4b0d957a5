//! The `aworld` agent kind end to end: the real binary, a real engine, and a contract-faithful
//! stand-in for aworld-cli (`tests/fixtures/aworld-standin/`, NOT AWorld) mounted read-only
//! into `arbiter/debian:bookworm` task containers.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn standin_dir() -> PathBuf {
    repo().join("tests/fixtures/aworld-standin")
}

/// One `aworld` agent definition for the stand-in, with extra env lines.
fn standin_agent(name: &str, env: &[(&str, &str)], extra: &str) -> String {
    let mut text = format!(
        "  - name: {name}\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    mounts:\n      - host: {}\n        container: /opt/aworld-standin\n    model:\n      name: test-model\n      provider: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key: sk-not-a-real-key-0000\n",
        standin_dir().display()
    );
    text.push_str(extra);
    text.push_str(&common::env_lines(env));
    text
}

fn write_job(dir: &Path, tasks: &[&str], agents: &[String]) -> PathBuf {
    let config = dir.join("job.yaml");
    let mut text = String::from("tasks:\n");
    for t in tasks {
        text.push_str(&format!("  - {}\n", fixture(t).display()));
    }
    text.push_str("agents:\n");
    for a in agents {
        text.push_str(a);
    }
    std::fs::write(&config, text).expect("write job.yaml");
    config
}

fn trial_file(job_dir: &Path, trial: &str, rel: &str) -> String {
    let path = job_dir.join("trials").join(trial).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const HELLO: &str = "echo hello > /app/out.txt";

#[test]
fn verdicts_claim_sources_and_the_exit_zero_without_record_rule() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let b = |behavior: &str, work: &str| {
        vec![
            ("STANDIN_BEHAVIOR", behavior.to_string()),
            ("STANDIN_WORK", work.to_string()),
        ]
    };
    let scenarios: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("certified", b("succeed", HELLO)),
        ("liar", b("lie", HELLO)),
        ("honest", b("fail", HELLO)),
        ("modest", b("modest", HELLO)),
        ("noreward", b("succeed", "touch /app/no-reward")),
        ("stderronly", b("stderr-only", HELLO)),
        ("both", b("both", HELLO)),
        ("malformed", b("malformed", HELLO)),
        ("omit", b("omit", HELLO)),
        ("crash", b("crash", HELLO)),
        (
            "oldcli",
            vec![
                ("STANDIN_BEHAVIOR", "succeed".to_string()),
                ("STANDIN_OLD_CLI", "1".to_string()),
                ("STANDIN_WORK", HELLO.to_string()),
            ],
        ),
    ];
    let agents: Vec<String> = scenarios
        .iter()
        .map(|(name, env)| {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            standin_agent(name, &env, "")
        })
        .collect();
    let config = write_job(tmp.path(), &["aw-plain"], &agents);
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs()
    };
    let before = unix_now();
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8"), "-n", "4"]);
    let after = unix_now();
    assert_eq!(
        out.status.code(),
        Some(3),
        "omit is an infra error → exit 3: {}",
        stderr(&out)
    );
    let r = |agent: &str| result(&job_dir, &format!("aw-plain__{agent}__default__1"));

    let verdict = |agent: &str| r(agent)["audit"]["verdict"].as_str().map(str::to_string);
    assert_eq!(
        verdict("certified").as_deref(),
        Some("certified"),
        "{:#}",
        r("certified")
    );
    assert_eq!(
        verdict("liar").as_deref(),
        Some("false_completion"),
        "{:#}",
        r("liar")
    );
    assert_eq!(
        verdict("honest").as_deref(),
        Some("honest_failure"),
        "{:#}",
        r("honest")
    );
    assert_eq!(
        verdict("modest").as_deref(),
        Some("unclaimed_success"),
        "{:#}",
        r("modest")
    );
    assert_eq!(
        verdict("noreward").as_deref(),
        Some("unverifiable"),
        "{:#}",
        r("noreward")
    );

    // The claim, its source, and the stand-in's view of what arbiter passed it.
    let certified = r("certified");
    assert_eq!(certified["claim"]["status"], "present");
    assert_eq!(certified["claim"]["source"], "file");
    assert_eq!(certified["termination"]["kind"], "exited");
    assert_eq!(certified["trajectory"]["status"], "ok", "{certified:#}");
    let trial = "aw-plain__certified__default__1";
    assert!(
        job_dir
            .join("trials")
            .join(trial)
            .join("agent/trajectory.json")
            .is_file()
    );
    assert!(
        job_dir
            .join("trials")
            .join(trial)
            .join("agent/outcome.json")
            .is_file()
    );
    let seen: Value = serde_json::from_str(&trial_file(
        &job_dir,
        trial,
        "agent/control/state/env-seen.json",
    ))
    .expect("env-seen.json");
    assert_eq!(seen["require_finish_reason"], "true");
    assert_eq!(seen["model"], "test-model");
    assert_eq!(seen["provider"], "openai");
    assert_eq!(seen["base_url"], "http://127.0.0.1:9/v1");
    assert_eq!(seen["env_file"], "/nonexistent/.env");
    assert_eq!(seen["env_file_exists"], false);
    assert_eq!(
        seen["completion_mode"],
        Value::Null,
        "aw-plain has no [completion]"
    );
    let deadline: u64 = seen["deadline"]
        .as_str()
        .and_then(|d| d.parse().ok())
        .expect("deadline passed as Unix seconds");
    assert_eq!(Some(deadline), certified["agent_deadline_epoch"].as_u64());
    // The agent's start plus its 60 s limit: the start lies within the job's run (how long
    // the job takes after it depends on the machine's load, so "now" after the job is no
    // bound).
    assert!(
        before + 60 <= deadline && deadline <= after + 60,
        "deadline {deadline} is 60 s after a moment of the job's run ({before}..={after})"
    );

    let stderr_only = r("stderronly");
    assert_eq!(stderr_only["claim"]["status"], "present", "{stderr_only:#}");
    assert_eq!(stderr_only["claim"]["source"], "stderr");
    assert_eq!(
        stderr_only["claim"]["agent_termination"]["reason"],
        "task_deadline_exhausted"
    );
    assert_eq!(stderr_only["audit"]["verdict"], "certified");

    let both = r("both");
    assert_eq!(both["claim"]["source"], "file", "file wins: {both:#}");
    assert_eq!(both["claim"]["semantic_status"], "task_failed");

    let malformed = r("malformed");
    assert_eq!(malformed["claim"]["status"], "invalid", "{malformed:#}");
    assert!(
        malformed["claim"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("not valid JSON"))
    );
    assert_eq!(malformed["audit"]["verdict"], "unclaimed_success");

    let honest = r("honest");
    assert_eq!(honest["claim"]["run_failure"]["error_code"], "task_failed");
    assert_eq!(honest["termination"]["exit_code"], 1);

    let crash = r("crash");
    assert_eq!(crash["claim"]["status"], "missing", "{crash:#}");
    assert_ne!(crash["termination"]["exit_code"], 0);
    assert!(
        crash["infra_error"].is_null(),
        "a crash is the agent's result: {crash:#}"
    );

    let omit = r("omit");
    assert_eq!(omit["termination"]["kind"], "exited", "{omit:#}");
    assert_eq!(omit["termination"]["exit_code"], 0);
    assert_eq!(omit["claim"]["status"], "missing");
    assert_eq!(omit["infra_error"]["phase"], "agent");
    assert!(
        omit["infra_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exited 0 without an outcome record")),
        "{omit:#}"
    );
    assert!(
        omit["audit"].is_null(),
        "infra-class results are not scored"
    );
    assert!(
        job_dir
            .join("trials/aw-plain__omit__default__1/agent/trajectory.json")
            .is_file(),
        "the trajectory is kept"
    );

    // An aworld-cli without --outcome-output (every release so far) runs without the output
    // flags: no claim, with the reason; the verifier's result stands (not an infra error that
    // would retry every trial of such a CLI).
    let old = r("oldcli");
    assert!(old["infra_error"].is_null(), "{old:#}");
    assert_eq!(old["termination"]["kind"], "exited", "{old:#}");
    assert_eq!(old["termination"]["exit_code"], 0);
    assert_eq!(old["claim"]["status"], "missing", "{old:#}");
    let why = old["claim"]["error"].as_str().unwrap_or_default();
    assert!(why.contains("has no --outcome-output"), "{why}");
    assert_eq!(old["verifier"]["status"], "passed", "{old:#}");
    assert_eq!(old["audit"]["verdict"], "unclaimed_success", "{old:#}");
    let stdout_log = trial_file(&job_dir, "aw-plain__oldcli__default__1", "agent/stdout.log");
    assert!(
        stdout_log.contains("final answer"),
        "it ran without the flags it would refuse: {stdout_log}"
    );

    // The verifier never sees a control root.
    for agent in ["certified", "liar", "modest"] {
        let listing = trial_file(
            &job_dir,
            &format!("aw-plain__{agent}__default__1"),
            "verifier/logs/control-listing.txt",
        );
        assert_eq!(listing.trim(), "", "{agent}: the verifier saw {listing:?}");
    }
}

#[test]
fn completion_contract_deliverables_receipts_and_typed_violations() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let lying_record = r#"{"goal":{"deliverable":"/app/report.md","operation":"write report"},"attempts":[{"command":"write-report","exit_code":1,"error":"disk full"}],"status":"completed","final_answer":"Done! The report is complete, finished and verified."}"#;
    let agents = vec![
        standin_agent(
            "missing",
            &[
                ("STANDIN_BEHAVIOR", "lie"),
                ("STANDIN_COMPLETION", lying_record),
            ],
            "",
        ),
        standin_agent(
            "empty",
            &[
                ("STANDIN_BEHAVIOR", "succeed"),
                ("STANDIN_WORK", ": > /app/report.md"),
            ],
            "",
        ),
        standin_agent(
            "good",
            &[
                ("STANDIN_BEHAVIOR", "succeed"),
                ("STANDIN_WORK", "echo '# Report' > /app/report.md"),
            ],
            "",
        ),
    ];
    let config = write_job(tmp.path(), &["aw-contract"], &agents);
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8"), "-n", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = |agent: &str| result(&job_dir, &format!("aw-contract__{agent}__default__1"));

    let missing = r("missing");
    assert_eq!(missing["verifier"]["status"], "passed", "{missing:#}");
    assert_eq!(
        missing["audit"]["verdict"], "false_completion",
        "{missing:#}"
    );
    assert_eq!(missing["deliverables"][0]["status"], "missing");
    let evidence = missing["audit"]["evidence"].to_string();
    assert!(
        evidence.contains("/app/report.md"),
        "the deliverable is named: {evidence}"
    );
    let kinds: Vec<&str> = missing["audit"]["violations"]
        .as_array()
        .expect("violations")
        .iter()
        .filter_map(|v| v["kind"].as_str())
        .collect();
    assert!(
        kinds.contains(&"certificate_without_admissibility"),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"residual_certificate"), "{kinds:?}");
    assert_eq!(missing["completion"]["status"], "present");
    assert!(
        job_dir
            .join("trials/aw-contract__missing__default__1/agent/completion.json")
            .is_file()
    );

    let empty = r("empty");
    assert_eq!(empty["audit"]["verdict"], "false_completion", "{empty:#}");
    assert_eq!(empty["deliverables"][0]["status"], "empty");
    assert!(
        empty["audit"]["evidence"]
            .to_string()
            .contains("/app/report.md (goal: a markdown report) is empty")
    );

    let good = r("good");
    assert_eq!(good["audit"]["verdict"], "certified", "{good:#}");
    assert_eq!(good["deliverables"][0]["status"], "ok");
    assert!(
        good["audit"]["violations"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    let saved = job_dir.join("trials/aw-contract__good__default__1/artifacts/app/report.md");
    assert_eq!(
        std::fs::read_to_string(&saved).expect("saved deliverable"),
        "# Report\n"
    );
    let manifest = trial_file(
        &job_dir,
        "aw-contract__good__default__1",
        "artifacts/manifest.json",
    );
    assert!(manifest.contains("/app/report.md"), "{manifest}");

    // The contract reached the agent.
    let seen: Value = serde_json::from_str(&trial_file(
        &job_dir,
        "aw-contract__good__default__1",
        "agent/control/state/env-seen.json",
    ))
    .expect("env-seen");
    assert_eq!(seen["completion_mode"], "observe");
    assert_eq!(seen["required_artifacts"], r#"["/app/report.md"]"#);
    let commands: Value =
        serde_json::from_str(seen["validation_commands"].as_str().expect("commands"))
            .expect("json");
    assert_eq!(commands[0]["command_id"], "pipefail");
    assert_eq!(
        commands[0]["argv"],
        serde_json::json!(["bash", "-o", "pipefail", "-c", "false | true"])
    );
    assert_eq!(commands[1]["cwd"], "/app");
    assert_eq!(commands[2]["timeout_seconds"], 1);

    // Receipts of arbiter's own runs.
    let receipts = good["validation"].as_array().expect("receipts");
    let by_id = |id: &str| {
        receipts
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no receipt {id}: {receipts:?}"))
    };
    assert_eq!(
        by_id("pipefail")["exit_code"],
        1,
        "false | true fails under pipefail"
    );
    assert_eq!(by_id("report")["exit_code"], 0);
    assert_eq!(
        by_id("report")["stdout_sha256"].as_str().map(str::len),
        Some(64)
    );
    let slow = by_id("slow");
    assert_eq!(slow["timed_out"], true, "{slow}");
    let secs = slow["seconds"].as_f64().expect("seconds");
    // 1 s limit + 3 s grace (the child ignores SIGTERM) + the engine's time for the exec, the
    // SIGTERM broadcast and the kill (1-3 s apiece on a loaded machine); had any process of
    // the command survived the kill, its stdout would have stayed open for 31337 s and the
    // exec would have been waited on for 10 s more: at least 1 + 3 + 10 = 14 s.
    assert!(
        secs < 14.0,
        "the timed-out command and its children were killed: {secs}s"
    );
    assert_eq!(
        by_id("after")["exit_code"],
        0,
        "the next command gets a fresh container"
    );
    assert_eq!(
        trial_file(
            &job_dir,
            "aw-contract__good__default__1",
            "validation/04-after.stdout.log"
        ),
        "after the timeout\n"
    );
    assert_eq!(
        r("missing")["validation"][1]["exit_code"],
        1,
        "test -s fails without the report"
    );
}

#[test]
fn control_roots_are_per_trial_and_templates_are_copied() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let template = tmp.path().join("template");
    std::fs::create_dir_all(&template).expect("mkdir");
    std::fs::write(template.join("seed.txt"), "seed").expect("seed");
    let agent = standin_agent(
        "iso",
        &[("STANDIN_BEHAVIOR", "succeed"), ("STANDIN_WORK", HELLO)],
        &format!("    control_template: {}\n", template.display()),
    );
    let config = write_job(tmp.path(), &["aw-plain"], &[agent]);
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8"), "-k", "3", "-n", "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let mut run_files = Vec::new();
    for attempt in 1..=3 {
        let trial = format!("aw-plain__iso__default__{attempt}");
        let r = result(&job_dir, &trial);
        assert_eq!(r["audit"]["verdict"], "certified", "{r:#}");
        assert_eq!(r["control_root"]["container_path"], "/arbiter/control");
        let state = job_dir
            .join("trials")
            .join(&trial)
            .join("agent/control/state");
        let runs: Vec<String> = std::fs::read_dir(&state)
            .expect("state dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("run-"))
            .collect();
        assert_eq!(runs.len(), 1, "{trial} sees only its own run: {runs:?}");
        run_files.extend(runs);
        assert_eq!(
            trial_file(&job_dir, &trial, "agent/control/seed.txt"),
            "seed+changed by a trial",
            "each trial starts from its own copy of the template"
        );
        assert!(
            !job_dir
                .join("trials")
                .join(&trial)
                .join(".control")
                .exists(),
            "the mounted directory is removed after the trial"
        );
    }
    run_files.sort();
    run_files.dedup();
    assert_eq!(run_files.len(), 3, "three distinct runs: {run_files:?}");
    assert_eq!(
        std::fs::read_to_string(template.join("seed.txt")).expect("template"),
        "seed",
        "no trial changed the template"
    );
}

fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|path| {
            std::fs::read(path).is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle))
        })
        .collect()
}

#[test]
fn llm_api_key_reaches_the_agent_but_no_file_and_no_argv() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let secret = format!("sk-arbiter-test-{}", std::process::id());
    let literal = format!("tok-literal-{}", std::process::id());
    // In this agent's argv only (other tests of this binary run aworld-cli beside it).
    let marker = format!("Secretive{}", std::process::id());
    let mut agent = format!(
        "  - name: secretive\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    run_args: [--non-interactive, --agent, {marker}]\n    mounts:\n      - host: {}\n        container: /opt/aworld-standin\n    model:\n      name: test-model\n      api_key: ${{ARBITER_TEST_LLM_KEY}}\n",
        standin_dir().display()
    );
    agent.push_str(&format!(
        "    env:\n      STANDIN_BEHAVIOR: succeed\n      STANDIN_WORK: {HELLO:?}\n      STANDIN_SLEEP: \"4\"\n      STANDIN_LEAK_KEY: \"1\"\n      EXTRA_TOKEN: {literal}\n"
    ));
    let config = write_job(tmp.path(), &["aw-plain"], &[agent]);
    let job_dir = tmp.path().join("job-secret");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .arg("-c")
        .arg(&config)
        .env("ARBITER_TEST_LLM_KEY", &secret)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn arbiter");
    let mut saw_agent = false;
    let status = loop {
        for line in host_cmdlines() {
            assert!(
                !line.contains(&secret) && !line.contains(&literal),
                "a secret is in a host process argv: {line}"
            );
            if line.contains("aworld-cli")
                && line.contains("--outcome-output")
                && line.contains(&marker)
            {
                saw_agent = true;
            }
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    assert_eq!(
        status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        saw_agent,
        "the scan ran while the agent's process was alive"
    );
    assert_no_leftovers(&job_dir);
    let r = result(&job_dir, "aw-plain__secretive__default__1");
    assert_eq!(r["audit"]["verdict"], "certified", "{r:#}");
    // The key did reach the agent (it records only a hash of it).
    let seen: Value = serde_json::from_str(&trial_file(
        &job_dir,
        "aw-plain__secretive__default__1",
        "agent/control/state/env-seen.json",
    ))
    .expect("env-seen");
    let digest = {
        use sha2::Digest;
        let d = sha2::Sha256::digest(secret.as_bytes());
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!(seen["api_key_sha256"], digest);
    // The stand-in printed the key to stderr; arbiter scrubbed it.
    let stderr_log = trial_file(
        &job_dir,
        "aw-plain__secretive__default__1",
        "agent/stderr.log",
    );
    assert!(stderr_log.contains("debug: using key ***"), "{stderr_log}");
    for needle in [&secret, &literal] {
        let found = files_containing(&job_dir, needle.as_bytes());
        assert!(found.is_empty(), "{needle} written to {found:?}");
    }
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The recommended form: `model: {provider: <models: entry>, name}`. The stand-in (mode
/// `model`) follows the scripted provider's tool calls over Chat Completions at
/// `LLM_BASE_URL` — the gateway on the container's own loopback, the task on network `none`
/// — and solves an example task with its reference solution; usage is exact and the host's
/// key is nowhere.
#[test]
fn a_gateway_model_solves_a_task_on_network_none_with_exact_usage_and_no_host_key() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(
        tmp.path().join("script.json"),
        r#"{"turns": [
            {"run": "bash /opt/solution/solve.sh >/dev/null", "usage": {"input_tokens": 150, "output_tokens": 15}},
            {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 400, "output_tokens": 40}}
        ]}"#,
    )
    .expect("script");
    let task = repo().join("tasks/exact-deliverable");
    let config = tmp.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{task}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: aw\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    model: {{provider: fake, name: scripted-model}}\n    budget: {{max_requests: 10}}\n    mounts:\n      - {{host: {standin}, container: /opt/aworld-standin}}\n      - {{host: {solution}, container: /opt/solution}}\n    env: {{STANDIN_BEHAVIOR: model}}\n",
            task = task.display(),
            standin = standin_dir().display(),
            solution = task.join("solution").display(),
        ),
    )
    .expect("job.yaml");
    // The host holds a real-looking key under the names an agent would read; none may travel.
    let host_key = format!("sk-host-real-key-{}", std::process::id());
    let job_dir = tmp.path().join("job-aw-gateway");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .arg("-c")
        .arg(&config)
        .env("LLM_API_KEY", &host_key)
        .env("OPENAI_API_KEY", &host_key)
        .output()
        .expect("run arbiter");
    assert_no_leftovers(&job_dir);
    let trial = "exact-deliverable__aw__default__1";
    let r = result(&job_dir, trial);
    assert_eq!(out.status.code(), Some(0), "{} {r:#}", stderr(&out));
    assert_eq!(r["limits"]["network"], "no-network", "{r:#}");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(r["claim"]["source"], "file", "{r:#}");
    assert_eq!(r["claim"]["semantic_status"], "succeeded", "{r:#}");
    assert_eq!(r["audit"]["verdict"], "certified", "{r:#}");
    // Usage is what the script served: two calls, their tokens exactly.
    let usage = &r["usage"];
    assert_eq!(usage["requests"], 2, "{r:#}");
    assert_eq!(usage["input_tokens"], 550, "{r:#}");
    assert_eq!(usage["output_tokens"], 55, "{r:#}");
    assert_eq!(usage["budget"]["max_requests"], 10, "{r:#}");
    let ledger = trial_file(&job_dir, trial, "agent/model-calls.jsonl");
    assert_eq!(ledger.lines().count(), 2, "{ledger}");
    // The claim's own count agrees with the gateway's, so the audit has nothing to say on it.
    let evidence = r["audit"]["evidence"].to_string();
    assert!(!evidence.contains("model calls"), "{evidence}");

    // What the stand-in saw: the gateway on its loopback, a per-trial token, the model name.
    let seen: Value = serde_json::from_str(&trial_file(
        &job_dir,
        trial,
        "agent/control/state/env-seen.json",
    ))
    .expect("env-seen.json");
    assert_eq!(seen["base_url"], "http://127.0.0.1:4141/v1", "{seen:#}");
    assert_eq!(seen["provider"], "openai");
    assert_eq!(seen["model"], "scripted-model");
    assert_eq!(seen["api_key_shape"], "arb-<52 chars>", "{seen:#}");
    let host_digest = sha256_hex(&host_key);
    assert_ne!(seen["api_key_sha256"], host_digest.as_str());
    let env_digests = seen["env_value_sha256"].as_array().expect("digests");
    assert!(
        !env_digests.iter().any(|d| d == host_digest.as_str()),
        "the host's key is in the agent's environment"
    );
    let found = files_containing(&job_dir, host_key.as_bytes());
    assert!(found.is_empty(), "the host's key is written to {found:?}");
    // Nor is the trial token (arb-<48 hex>) kept in any file.
    for file in files_under(&job_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).expect("read")).into_owned();
        let holds = text
            .split("arb-")
            .skip(1)
            .any(|rest| rest.len() >= 48 && rest[..48].chars().all(|c| c.is_ascii_hexdigit()));
        assert!(!holds, "{} holds a trial token", file.display());
    }
}

/// The real aworld-cli, built from AWorld's source by
/// `docker/agents/aworld/build-from-source.sh <src> <dir>`, at `ARBITER_AWORLD_DIST=<dir>`
/// (opt-in: GitHub is not reachable from CI, so CI cannot build it). Without the variable the
/// test is skipped — unless `ARBITER_REQUIRE_AWORLD=1`, when a missing tree is a failure.
fn aworld_dist() -> Option<PathBuf> {
    let dir = std::env::var_os("ARBITER_AWORLD_DIST").map(PathBuf::from);
    let found = dir.filter(|d| d.join("bin/aworld-cli").is_file());
    if found.is_none() {
        if std::env::var("ARBITER_REQUIRE_AWORLD").as_deref() == Ok("1") {
            panic!(
                "ARBITER_REQUIRE_AWORLD=1 but ARBITER_AWORLD_DIST does not name a built aworld-cli tree (<dir>/bin/aworld-cli; build it with docker/agents/aworld/build-from-source.sh)"
            );
        }
        eprintln!(
            "skipping: set ARBITER_AWORLD_DIST to a tree built by docker/agents/aworld/build-from-source.sh (ARBITER_REQUIRE_AWORLD=1 to fail instead)"
        );
    }
    found
}

/// The real aworld-cli solves an example task offline through the gateway: its Aworld agent
/// runs the scripted provider's shell call with its terminal tool. A CLI without
/// `--outcome-output` (every one so far) gives no claim, with the reason; one with it gives a
/// claim read from the record.
#[test]
fn the_real_aworld_cli_solves_a_task_through_the_gateway() {
    let Some(dist) = aworld_dist() else {
        return;
    };
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(
        tmp.path().join("script.json"),
        r#"{"turns": [
            {"run": "bash /opt/solution/solve.sh >/dev/null && echo solved", "usage": {"input_tokens": 150, "output_tokens": 15}},
            {"say": "Done: /app/out/report.txt is written.", "usage": {"input_tokens": 400, "output_tokens": 40}}
        ]}"#,
    )
    .expect("script");
    let task = repo().join("tasks/exact-deliverable");
    let config = tmp.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{task}]\nretries: {{max: 0}}\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: aworld\n    kind: aworld\n    binary: /opt/aworld/bin/aworld-cli\n    extra_args: [--max-runs, '1']\n    model: {{provider: fake, name: scripted-model}}\n    mounts:\n      - {{host: {dist}, container: /opt/aworld}}\n      - {{host: {solution}, container: /opt/solution}}\n",
            task = task.display(),
            dist = dist.display(),
            solution = task.join("solution").display(),
        ),
    )
    .expect("job.yaml");
    let host_key = format!("sk-host-real-key-{}", std::process::id());
    let job_dir = tmp.path().join("job-real-aworld");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .arg("-c")
        .arg(&config)
        .env("LLM_API_KEY", &host_key)
        .env("OPENAI_API_KEY", &host_key)
        .output()
        .expect("run arbiter");
    assert_no_leftovers(&job_dir);
    let trial = "exact-deliverable__aworld__default__1";
    let r = result(&job_dir, trial);
    assert_eq!(out.status.code(), Some(0), "{} {r:#}", stderr(&out));
    assert_eq!(r["limits"]["network"], "no-network", "{r:#}");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert_eq!(
        r["usage"]["requests"], 2,
        "one run: the tool call, then the answer {r:#}"
    );
    assert_eq!(r["usage"]["input_tokens"], 550, "{r:#}");
    let stdout_log = trial_file(&job_dir, trial, "agent/stdout.log");
    assert!(
        stdout_log.contains("terminal"),
        "ran its terminal tool: {stdout_log}"
    );
    let help = trial_file(&job_dir, trial, "agent/cli-check.stdout.log");
    if help.contains("--outcome-output") {
        assert_eq!(r["claim"]["status"], "present", "{r:#}");
        assert_eq!(r["audit"]["verdict"], "certified", "{r:#}");
    } else {
        assert_eq!(r["claim"]["status"], "missing", "{r:#}");
        let why = r["claim"]["error"].as_str().unwrap_or_default();
        assert!(why.contains("has no --outcome-output"), "{why}");
        assert_eq!(r["audit"]["verdict"], "unclaimed_success", "{r:#}");
    }
    let found = files_containing(&job_dir, host_key.as_bytes());
    assert!(found.is_empty(), "the host's key is written to {found:?}");
}

/// A `model:` naming a `models:` entry and also carrying a key is refused before anything
/// runs, naming the field (no engine needed).
#[test]
fn a_gateway_model_with_a_literal_key_is_a_config_error_naming_the_field() {
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(tmp.path().join("s.json"), r#"{"turns": []}"#).expect("script");
    let config = tmp.path().join("job.yaml");
    std::fs::write(
        &config,
        format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: s.json}}\nagents:\n  - name: aw\n    kind: aworld\n    model: {{provider: fake, name: m, api_key: sk-literal}}\n",
            fixture("aw-plain").display()
        ),
    )
    .expect("job.yaml");
    let out = arbiter(&["run", "--quiet", "-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("agents[0].model.api_key"), "{err}");
    assert!(err.contains("gateway"), "{err}");
    assert!(!err.contains("sk-literal"), "{err}");
}
