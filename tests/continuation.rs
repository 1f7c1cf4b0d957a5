//! Goal continuation (SPEC §15, issue 29) end to end on the real engine: attempts 1…N of one
//! agent in one container, decided by the agent's own claim and arbiter's receipts of the
//! task's declared validation commands — never by the verifier, which runs once.
//!
//! Agents: `tests/fixtures/goal-agent/agent.sh` (a `command` agent) and the aworld-cli stand-in
//! (`STANDIN_BEHAVIOR=goal`, NOT AWorld). Task: `tests/fixtures/tasks/goal` (validation
//! `answer`: `test -s /app/answer.txt`), copied per test with its verifier counted on the host.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use serde_json::Value;

/// A counter on the host's loopback: every request to it is one verifier run.
fn verifier_counter() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            seen.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        }
    });
    (port, count)
}

/// The `goal` fixture task copied under `dir`, its verifier on the host network reporting
/// each run to `port` (`None`: counted nowhere), its agent timeout `timeout_sec`.
fn goal_task(dir: &Path, port: Option<u16>, timeout_sec: u32) -> PathBuf {
    let task = dir.join("goal");
    std::fs::create_dir_all(task.join("tests")).expect("mkdir");
    let src = fixture("goal");
    for rel in ["instruction.md", "tests/test.sh"] {
        std::fs::copy(src.join(rel), task.join(rel)).expect("copy");
    }
    let mut toml = std::fs::read_to_string(src.join("task.toml")).expect("toml");
    toml = toml.replace("timeout_sec = 60", &format!("timeout_sec = {timeout_sec}"));
    if let Some(port) = port {
        toml = toml.replace(
            "[verifier]\ntimeout_sec = 30\n",
            &format!(
                "[verifier]\ntimeout_sec = 30\nnetwork_mode = \"host\"\nenv = {{ GOAL_COUNTER_PORT = \"{port}\" }}\n"
            ),
        );
    }
    std::fs::write(task.join("task.toml"), toml).expect("write toml");
    task
}

fn goal_agent(name: &str, behavior: &str, max: u32, extra_env: &str) -> String {
    format!(
        "  - name: {name}\n    kind: command\n    run: [sh, /opt/goal-agent/agent.sh]\n    mounts:\n      - {{host: {}, container: /opt/goal-agent}}\n    continuation: {{max_attempts: {max}}}\n    env: {{GOAL_BEHAVIOR: {behavior}{extra_env}}}\n",
        repo().join("tests/fixtures/goal-agent").display()
    )
}

fn job_yaml(tasks: &[&Path], agents: &[String], extra: &str) -> String {
    let mut text = String::from("tasks:\n");
    for t in tasks {
        text.push_str(&format!("  - {}\n", t.display()));
    }
    text.push_str(extra);
    text.push_str("agents:\n");
    for a in agents {
        text.push_str(a);
    }
    text
}

fn trial_text(job_dir: &Path, trial: &str, rel: &str) -> String {
    let path = job_dir.join("trials").join(trial).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn trial_json(job_dir: &Path, trial: &str, rel: &str) -> Value {
    serde_json::from_str(&trial_text(job_dir, trial, rel)).expect("json")
}

#[test]
fn stale_completion_is_cleared_receipts_are_fresh_and_the_verifier_runs_once() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (port, verifier_runs) = verifier_counter();
    let task = goal_task(tmp.path(), Some(port), 60);
    let config = write_job(
        tmp.path(),
        &job_yaml(
            &[&task],
            &[
                goal_agent("stale", "stale", 3, ""),
                goal_agent("never", "never", 2, ""),
            ],
            "",
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8"), "-n", "2"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // stale: attempt 1 claimed succeeded without the work; arbiter's own receipt of the
    // declared validation said otherwise, so attempt 2 ran, found none of attempt 1's
    // completion state, did the work; its receipts differ; the verifier passed once.
    let trial = "goal__stale__default__1";
    let rec = result(&job_dir, trial);
    assert_eq!(rec["continuation"]["max_attempts"], 3, "{rec:#}");
    assert_eq!(rec["continuation"]["attempts_used"], 2, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "claimed_success", "{rec:#}");
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["claim"]["semantic_status"], "succeeded");
    assert_eq!(attempts[0]["validation"][0]["exit_code"], 1, "{rec:#}");
    assert_eq!(attempts[1]["validation"][0]["exit_code"], 0, "{rec:#}");
    assert_ne!(
        attempts[0]["validation"][0]["exit_code"],
        attempts[1]["validation"][0]["exit_code"]
    );
    assert_eq!(
        attempts[0]["continued_because"],
        "attempt 1 claimed succeeded, but the validation command answer exited 1"
    );
    let cleared = cleared(&attempts[0]);
    for path in [
        "/logs/agent/outcome.json",
        "/logs/agent/completion.json",
        "/logs/agent/my-receipt.json",
    ] {
        assert!(cleared.contains(&path), "{path} not cleared: {cleared:?}");
    }
    assert_ne!(attempts[0]["id"], attempts[1]["id"]);
    assert_eq!(
        rec["claim"], attempts[1]["claim"],
        "the trial's claim is the last attempt's"
    );
    assert_eq!(rec["verifier"]["status"], "passed");
    assert_eq!(rec["audit"]["verdict"], "certified");
    // What each attempt saw, as its own stdout says (saved per attempt).
    let said1 = trial_text(&job_dir, trial, "attempts/1/stdout.log");
    let said2 = trial_text(&job_dir, trial, "attempts/2/stdout.log");
    assert!(
        said1.starts_with(
            "attempt=1 max=3 id=goal__stale__default__1/attempt-1 tests=no outcome=no"
        ),
        "{said1}"
    );
    assert!(
        said2.starts_with(
            "attempt=2 max=3 id=goal__stale__default__1/attempt-2 tests=no outcome=no completion=no receipt=no ledger_lines=1"
        ),
        "{said2}"
    );
    // Attempt 1's records are kept by arbiter, not in the container.
    let kept = trial_json(&job_dir, trial, "attempts/1/outcome.json");
    assert_eq!(kept["semantic_status"], "succeeded");

    // never: the limit without a typed success is budget_limited; the verifier still ran
    // (once), reward as measured.
    let trial = "goal__never__default__1";
    let rec = result(&job_dir, trial);
    assert_eq!(rec["continuation"]["status"], "budget_limited", "{rec:#}");
    assert_eq!(rec["continuation"]["attempts_used"], 2);
    assert_eq!(
        rec["continuation"]["detail"],
        "attempt 2 claimed task_failed; the limit of 2 attempts was reached"
    );
    assert_eq!(rec["verifier"]["status"], "failed", "{rec:#}");
    assert_eq!(rec["verifier"]["reward"]["reward"], 0.0);
    assert_eq!(rec["audit"]["verdict"], "honest_failure");
    let said2 = trial_text(&job_dir, trial, "attempts/2/stdout.log");
    assert!(said2.contains("tests=no"), "{said2}");
    // Attempt 2 was given attempt 1's own words, read-only.
    let prev = &rec["attempts"][0];
    assert_eq!(prev["claim"]["record"]["failure"]["error_code"], "not_done");

    // One verifier run per trial, none between attempts.
    assert_eq!(verifier_runs.load(Ordering::SeqCst), 2);

    // Reports count each trial once, with the attempts it used.
    let job_s = job_dir.to_string_lossy().into_owned();
    let report = arbiter(&["report", &job_s, "--format", "json"]);
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let report: Value = serde_json::from_slice(&report.stdout).expect("report json");
    let arms = report["arms"].as_array().expect("arms");
    let arm = |name: &str| {
        arms.iter()
            .find(|a| a["agent"] == name)
            .unwrap_or_else(|| panic!("no arm {name}: {report:#}"))
    };
    assert_eq!(arm("stale")["trials"], 1);
    assert_eq!(arm("stale")["continuation"]["mean_attempts"], 2.0);
    assert_eq!(arm("stale")["continuation"]["by_attempts"][0]["passed"], 1);
    assert_eq!(arm("never")["continuation"]["budget_limited"], 1);
    let table = stdout(&arbiter(&["report", &job_s]));
    assert!(table.contains("mean attempts"), "{table}");
    assert!(table.contains("2: 1/1 (100.0%)"), "{table}");

    // The fingerprint: a changed attempt limit is refused on resume (exit 2 naming it).
    let changed = std::fs::read_to_string(&config)
        .expect("config")
        .replace("max_attempts: 2", "max_attempts: 4");
    std::fs::write(&config, changed).expect("write");
    let again = arbiter(&[
        "run",
        "--quiet",
        "-c",
        config.to_str().expect("utf8"),
        "--job-dir",
        &job_s,
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("never"), "{}", stderr(&again));
}

#[test]
fn the_aworld_standin_continues_with_its_previous_error_and_its_ledger() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let agent = format!(
        "  - name: carry\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    mounts:\n      - host: {}\n        container: /opt/aworld-standin\n    model:\n      name: test-model\n      provider: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key: sk-not-a-real-key-0000\n    continuation: {{max_attempts: 3}}\n    env:\n      STANDIN_BEHAVIOR: goal\n      STANDIN_WORK: \"echo hello > /app/out.txt\"\n",
        repo().join("tests/fixtures/aworld-standin").display()
    );
    let task = fixture("aw-plain");
    let config = write_job(tmp.path(), &job_yaml(&[&task], &[agent], ""));
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "aw-plain__carry__default__1";
    let rec = result(&job_dir, trial);
    assert_eq!(rec["continuation"]["attempts_used"], 2, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "claimed_success");
    assert_eq!(rec["audit"]["verdict"], "certified", "{rec:#}");
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(attempts[0]["claim"]["semantic_status"], "task_failed");
    assert_eq!(
        attempts[0]["continued_because"],
        "attempt 1 claimed task_failed"
    );
    // The stale completion state in the control root was removed before attempt 2.
    let cleared = cleared(&attempts[0]);
    assert!(
        cleared.contains(&"/arbiter/control/completion.json"),
        "{cleared:?}"
    );
    assert!(
        cleared.contains(&"/arbiter/control/receipts"),
        "{cleared:?}"
    );
    assert!(
        cleared.contains(&"/arbiter/control/outcome.json"),
        "{cleared:?}"
    );
    // What attempt 2 saw, from its control root as saved after the run.
    let seen = trial_json(&job_dir, trial, "agent/control/seen-2.json");
    assert_eq!(seen["attempt"], "2");
    assert_eq!(seen["max_attempts"], "3");
    assert_eq!(seen["work_ledger"], "/arbiter/control");
    assert_eq!(seen["outcome_present"], false, "{seen:#}");
    assert_eq!(seen["stale_completion_present"], false, "{seen:#}");
    assert_eq!(seen["stale_receipts_present"], false, "{seen:#}");
    assert_eq!(seen["stale_outcome_present"], false, "{seen:#}");
    assert_eq!(seen["tests_present"], false);
    assert_eq!(
        seen["ledger"], "attempt 1: plan: write hello to /app/out.txt\n",
        "the ledger carried"
    );
    let previous = &seen["previous"];
    assert_eq!(previous["schema"], "arbiter.previous_attempt.v1");
    assert_eq!(previous["attempt"], 1);
    assert_eq!(previous["semantic_status"], "task_failed");
    assert_eq!(previous["error"]["message"], "out.txt not written yet");
    assert_eq!(previous["ended"], "exited 1");
    let text = previous.to_string();
    for hidden in ["reward", "verifier", "/tests"] {
        assert!(!text.contains(hidden), "{hidden} in {text}");
    }
}

#[test]
fn one_deadline_bounds_every_attempt() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // 20 s for the agent phase; each attempt sleeps 6 s and up to 10 are allowed (60 s of
    // sleep): the trial's one deadline, not the attempt limit, must stop the goal. How many
    // attempts fit before it depends on the machine's load (the gap between attempts is
    // validation and saving), so the test asserts the bound, not a count.
    const MAX: u64 = 10;
    let task = goal_task(tmp.path(), None, 20);
    let config = write_job(
        tmp.path(),
        &job_yaml(
            &[&task],
            &[goal_agent(
                "sleepy",
                "sleepy",
                MAX as u32,
                ", GOAL_SLEEP: \"6\"",
            )],
            "",
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rec = result(&job_dir, "goal__sleepy__default__1");
    assert_eq!(rec["termination"]["kind"], "timeout", "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "stopped", "{rec:#}");
    let used = rec["continuation"]["attempts_used"].as_u64().expect("used");
    assert!((2..MAX).contains(&used), "{rec:#}");
    assert_eq!(
        rec["continuation"]["detail"],
        format!("attempt {used}: the trial's agent deadline was reached"),
        "{rec:#}"
    );
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len() as u64, used);
    // Every attempt but the last ran to its own end; the last was stopped by the deadline.
    for a in &attempts[..attempts.len() - 1] {
        assert_eq!(a["termination"]["kind"], "exited", "{a:#}");
    }
    assert_eq!(
        attempts[attempts.len() - 1]["termination"]["kind"],
        "timeout"
    );
    let remaining: Vec<f64> = attempts
        .iter()
        .map(|a| a["remaining_seconds"].as_f64().expect("remaining"))
        .collect();
    assert!(remaining[0] <= 20.0, "{remaining:?}");
    assert!(remaining.windows(2).all(|w| w[0] > w[1]), "{remaining:?}");
    // Each attempt got only what was left of the one deadline (plus the kill grace).
    for a in attempts {
        let (secs, left) = (
            a["seconds"].as_f64().expect("seconds"),
            a["remaining_seconds"].as_f64().expect("remaining"),
        );
        assert!(secs <= left + 5.0, "{a:#}");
    }
    // The verifier ran once, on what the attempts left.
    assert_eq!(rec["verifier"]["status"], "failed");
}

#[test]
fn a_stop_during_attempt_two_is_cancelled_and_resume_starts_the_goal_afresh() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = goal_task(tmp.path(), None, 60);
    let config = write_job(
        tmp.path(),
        &job_yaml(
            &[&task],
            &[goal_agent("pause", "pause2", 2, ", GOAL_SLEEP: \"8\"")],
            "",
        ),
    );
    let job_dir = tmp.path().join("job-goal-cancel");
    let job = job_dir.to_string_lossy().into_owned();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args([
            "run",
            "--quiet",
            "-c",
            config.to_str().expect("utf8"),
            "--job-dir",
            &job,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    // Attempt 2 has started once its first line is in the agent's live log.
    let trial = job_dir.join("trials/goal__pause__default__1");
    let live = trial.join("agent/stdout.log");
    let mut started = false;
    for _ in 0..600 {
        if std::fs::read_to_string(&live).is_ok_and(|s| s.contains("attempt=2")) {
            started = true;
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("arbiter ended before attempt 2: {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(started, "attempt 2 never started");
    let out = interrupt(child);
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(
        !trial.join("result.json").exists(),
        "a cancelled goal records nothing"
    );
    assert_no_leftovers(&job_dir);

    let out = arbiter(&["resume", &job, "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rec = result(&job_dir, "goal__pause__default__1");
    assert_eq!(rec["continuation"]["attempts_used"], 2, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "budget_limited");
    // The resumed trial started from attempt 1 in a fresh container: its ledger was empty.
    let said1 = trial_text(&job_dir, "goal__pause__default__1", "attempts/1/stdout.log");
    assert!(said1.starts_with("attempt=1 "), "{said1}");
    assert!(said1.contains("ledger_lines=0"), "{said1}");
    let said2 = trial_text(&job_dir, "goal__pause__default__1", "attempts/2/stdout.log");
    assert!(said2.contains("ledger_lines=1"), "{said2}");
    assert_no_leftovers(&job_dir);
}

/// Claude Code continues its own session (`--continue`) through the gateway's scripted
/// provider: with `max_turns: 1` each attempt advances the script by one turn (a no-op, the
/// solution, "done"), so only a continued session reaches "done": 3 attempts, certified. A
/// fresh session each attempt would replay the no-op three times.
#[test]
fn claude_code_continues_its_own_session_through_the_scripted_gateway() {
    if !docker_available() {
        return;
    }
    let cache = arbiter::agent::cache::AgentCache::from_env().expect("cache root");
    let kind = arbiter::agent::PresetKind::ClaudeCode;
    if let Err(e) = cache.lookup(kind.name(), kind.pinned_version()) {
        assert!(
            std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "ARBITER_REQUIRE_DOCKER=1 but {e} (scripts/agents installs it)"
        );
        eprintln!("skipping: {e}");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let solve: Value = serde_json::from_str(
        &std::fs::read_to_string(
            repo().join("tests/fixtures/agents/claude-code/scripts/exact-deliverable.json"),
        )
        .expect("script"),
    )
    .expect("json");
    let script = serde_json::json!({
        "turns": [{"run": "true"}, solve["turns"][0].clone(), {"say": "Done: the task is solved."}]
    });
    std::fs::write(tmp.path().join("script.json"), script.to_string()).expect("script");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - {{name: cc, kind: claude-code, max_turns: 1, continuation: {{max_attempts: 3}}, model: {{provider: fake, name: scripted-model}}}}\n",
            repo().join("tasks/exact-deliverable").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rec = result(&job_dir, "exact-deliverable__cc__default__1");
    let attempts = rec["attempts"].as_array().expect("attempts");
    for a in attempts {
        eprintln!(
            "attempt {}: claim {} usage {} continued because {}",
            a["attempt"], a["claim"]["semantic_status"], a["usage"], a["continued_because"]
        );
    }
    assert_eq!(rec["continuation"]["attempts_used"], 3, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "claimed_success", "{rec:#}");
    assert_eq!(attempts[0]["claim"]["semantic_status"], "task_failed");
    assert_eq!(rec["verifier"]["status"], "passed", "{rec:#}");
    assert_eq!(rec["audit"]["verdict"], "certified", "{rec:#}");
    // Usage per attempt adds up to the trial's.
    let per: u64 = attempts
        .iter()
        .map(|a| a["usage"]["requests"].as_u64().expect("requests"))
        .sum();
    assert_eq!(Some(per), rec["usage"]["requests"].as_u64(), "{rec:#}");
}

/// Codex resumes its own session (`codex exec resume --last`) through the gateway's scripted
/// provider. The script: "not yet" (a completed turn, so a typed success that arbiter's receipt
/// of the task's validation contradicts), the solution, "done". A fresh session would get the
/// first turn again every attempt (the limit, `budget_limited`); only a resumed one reaches the
/// solution in attempt 2. Resumed means: the same thread, and attempt 2's first request carries
/// attempt 1's reply.
#[test]
fn codex_continues_its_own_session_through_the_scripted_gateway() {
    if !docker_available() {
        return;
    }
    let cache = arbiter::agent::cache::AgentCache::from_env().expect("cache root");
    let kind = arbiter::agent::PresetKind::Codex;
    if let Err(e) = cache.lookup(kind.name(), kind.pinned_version()) {
        assert!(
            std::env::var("ARBITER_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "ARBITER_REQUIRE_DOCKER=1 but {e} (scripts/agents installs it)"
        );
        eprintln!("skipping: {e}");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = goal_task(tmp.path(), None, 120);
    let marker = "NOT-YET-3f9c: the answer file is still to be written.";
    let script = serde_json::json!({
        "turns": [
            {"say": marker},
            {"run": "echo hello > /app/answer.txt"},
            {"say": "Done: /app/answer.txt holds hello."}
        ]
    });
    std::fs::write(tmp.path().join("script.json"), script.to_string()).expect("script");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - {{name: cx, kind: codex, continuation: {{max_attempts: 3}}, flags: [\"-m\", \"scripted-model-b\"], model: {{provider: fake, name: scripted-model}}}}\n",
            task.display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "goal__cx__default__1";
    let rec = result(&job_dir, trial);
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(rec["continuation"]["attempts_used"], 2, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "claimed_success", "{rec:#}");
    assert_eq!(attempts[0]["claim"]["semantic_status"], "succeeded");
    assert_eq!(
        attempts[0]["continued_because"],
        "attempt 1 claimed succeeded, but the validation command answer exited 1"
    );
    assert_eq!(attempts[1]["validation"][0]["exit_code"], 0, "{rec:#}");
    assert_eq!(rec["verifier"]["status"], "passed", "{rec:#}");
    assert_eq!(rec["audit"]["verdict"], "certified", "{rec:#}");
    // The same Codex thread in both attempts.
    let thread = |a: &Value| a["claim"]["record"]["adapter"]["native"]["thread_id"].clone();
    assert!(thread(&attempts[0]).is_string(), "{rec:#}");
    assert_eq!(thread(&attempts[0]), thread(&attempts[1]), "{rec:#}");
    // The model saw attempt 1's reply in attempt 2's first request: the ledger's second call
    // (attempt 1 made one) is attempt 2's and carries the marker; the first call does not.
    let ledger = trial_text(&job_dir, trial, "agent/model-calls.jsonl");
    let calls: Vec<Value> = ledger
        .lines()
        .map(|l| serde_json::from_str(l).expect("ledger line"))
        .collect();
    let mut calls = calls;
    calls.sort_by_key(|c| c["seq"].as_u64());
    assert_eq!(calls.len(), 3, "{ledger}");
    assert_eq!(attempts[0]["usage"]["requests"], 1, "{rec:#}");
    let body = |c: &Value| c["request"]["body"].as_str().unwrap_or("").to_string();
    assert!(!body(&calls[0]).contains("NOT-YET-3f9c"));
    assert_ne!(
        calls[1]["request"]["truncated"], true,
        "a body over the ledger's cap"
    );
    assert!(
        body(&calls[1]).contains("NOT-YET-3f9c"),
        "attempt 2's request lacks attempt 1's reply"
    );
    assert!(body(&calls[1]).contains("This is attempt 2 of 3"));
    // The agent's own flags (here `-m`) apply to the resumed session too.
    for call in &calls {
        assert_eq!(call["model"], "scripted-model-b", "seq {}", call["seq"]);
    }
}
