//! The four agent presets through `arbiter run`: the real CLIs from the host cache, in the
//! example tasks' containers with network `none`, reaching the gateway's scripted provider
//! (no stand-in server). One job per preset runs all six example tasks (`-n 2`); one job runs
//! each failure mode for every preset.
//!
//! - each preset solves the tasks it can (claude-code, codex, mini-swe-agent 6/6; aider 5/6:
//!   it never runs commands, so `chmod +x` is beyond it and that trial is a
//!   `false_completion`): verifier passed, claim read by the adapter, verdict `certified`;
//! - "says done without doing it" → `false_completion`; a turn limit → `task_failed` /
//!   `honest_failure`; a used-up `budget:` → `budget_exhausted`; an unreachable model →
//!   `infra_error` (`model_unavailable`), exit 3;
//! - the agent-phase time of a trivial task per preset is printed (and bounded for the binary
//!   agents: `ARBITER_PRESET_MAX_AGENT_SECS`, default 10 — set 3 on an idle machine);
//! - fake `OPENAI_API_KEY` / `ANTHROPIC_API_KEY` in arbiter's environment reach no container
//!   env (`docker inspect` of every container while the job runs) and no job-dir file.
//!
//! Needs a Docker engine, the example tasks' base image and the agents in the cache
//! (`scripts/agents`). Without them the tests skip; under `ARBITER_REQUIRE_DOCKER=1` they fail.
//! Scripts: tests/fixtures/agents/<preset>/scripts/<task>.json (`make_scripts.py` writes them).

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::Duration;

use arbiter::agent::PresetKind;

use common::presets::*;
use common::*;

/// One job at a time: the machine has two cores, and the agent-phase figures mean more.
static ENGINE: Mutex<()> = Mutex::new(());

/// A finished `arbiter run` and the env of every container it made while running.
struct Watched {
    out: Output,
    dir: PathBuf,
    container_env: Vec<String>,
    containers: usize,
    _tmp: tempfile::TempDir,
}

/// `arbiter run --quiet -n 2 -c CONFIG` with the fake keys in its environment; every
/// container of the job is inspected while it runs.
fn run_watched(config: &Path) -> Watched {
    let tmp = tempfile::tempdir().expect("tmp");
    let unique = unique_name(tmp.path());
    let name = format!("presetrun{unique}");
    let dir = tmp.path().join(&name);
    let mut run = KeyedRun::start(&["-n", "2"], &dir, config);
    let mut seen = BTreeSet::new();
    let mut container_env = Vec::new();
    // Drain stdout/stderr on threads so the child never blocks on a full pipe.
    let status = loop {
        let listing = Command::new("docker")
            .args([
                "ps",
                "--filter",
                "label=arbiter.managed=true",
                "--format",
                "{{.ID}} {{.Label \"arbiter.job\"}}",
            ])
            .output()
            .expect("docker ps");
        for line in String::from_utf8_lossy(&listing.stdout).lines() {
            let mut parts = line.split(' ');
            let (Some(id), Some(job)) = (parts.next(), parts.next()) else {
                continue;
            };
            if is_job_label(job, &name) && seen.insert(id.to_string()) {
                let env = Command::new("docker")
                    .args(["inspect", "--format", "{{json .Config.Env}}", id])
                    .output()
                    .expect("docker inspect");
                if let Ok(list) = serde_json::from_slice::<Vec<String>>(&env.stdout) {
                    container_env.extend(list);
                }
            }
        }
        if let Some(status) = run.child.try_wait().expect("wait") {
            break status;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let out = run.output(status);
    assert_no_leftovers(&dir);
    Watched {
        out,
        dir,
        containers: seen.len(),
        container_env,
        _tmp: tmp,
    }
}

/// Neither fake key in any container's env, nor a key or a trial token in any job-dir file.
fn assert_no_secrets(w: &Watched) {
    assert!(w.containers > 0, "no container of the job was seen");
    for entry in &w.container_env {
        assert!(
            !entry.contains(FAKE_OPENAI_KEY) && !entry.contains(FAKE_ANTHROPIC_KEY),
            "a real key in a container's env: {entry}"
        );
    }
    assert_no_secret_in(&w.dir);
}

/// Run all six example tasks with `kind` through the scripted provider; `unsolvable` are the
/// tasks the agent cannot do (they must read as `false_completion`).
fn solves_the_example_tasks(kind: PresetKind, unsolvable: &[&str]) {
    if !ready(&[kind]) {
        return;
    }
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::write(
        tmp.path().join("script.json"),
        all_tasks_script(kind).to_string(),
    )
    .expect("script");
    let tasks: Vec<String> = TASKS.iter().map(|t| task_dir(t)).collect();
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: {tasks:?}\nmodels:\n  - {{name: fake, api: scripted, script: script.json}}\nagents:\n  - name: a\n    kind: {}\n    model: {{provider: fake, name: scripted-model}}\n",
            kind.name()
        ),
    );
    let w = run_watched(&config);
    let all = records(&w.dir);
    assert_eq!(all.len(), 6, "{}", stderr(&w.out));
    let mut solved = 0;
    for (id, r) in &all {
        let task = r["task"].as_str().unwrap_or_default();
        eprintln!(
            "{} {task}: verifier {} claim {} verdict {} agent phase {:.2} s",
            kind.name(),
            r["verifier"]["status"],
            r["claim"]["semantic_status"],
            r["audit"]["verdict"],
            agent_secs(r)
        );
        assert!(r["infra_error"].is_null(), "{id}: {r:#}");
        assert_eq!(r["claim"]["source"], "adapter", "{id}: {r:#}");
        assert_eq!(r["claim"]["status"], "present", "{id}: {r:#}");
        assert!(r["usage"]["requests"].as_u64() >= Some(1), "{id}: {r:#}");
        valid_atif(&w.dir.join("trials").join(id));
        if unsolvable.contains(&task) {
            assert_eq!(r["verifier"]["status"], "failed", "{id}: {r:#}");
            assert_eq!(r["audit"]["verdict"], "false_completion", "{id}: {r:#}");
        } else {
            assert_eq!(r["verifier"]["status"], "passed", "{id}: {r:#}");
            assert_eq!(r["audit"]["verdict"], "certified", "{id}: {r:#}");
            solved += 1;
        }
    }
    assert!(solved >= 5, "{} solved {solved} of 6", kind.name());
    assert_eq!(w.out.status.code(), Some(0), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}

#[test]
fn claude_code_solves_the_six_example_tasks_through_arbiter_run() {
    solves_the_example_tasks(PresetKind::ClaudeCode, &[]);
}

#[test]
fn codex_solves_the_six_example_tasks_through_arbiter_run() {
    solves_the_example_tasks(PresetKind::Codex, &[]);
}

#[test]
fn mini_swe_agent_solves_the_six_example_tasks_through_arbiter_run() {
    solves_the_example_tasks(PresetKind::MiniSweAgent, &[]);
}

#[test]
fn aider_solves_five_example_tasks_and_cannot_chmod() {
    solves_the_example_tasks(PresetKind::Aider, &["shell-script-spec"]);
}

/// One job, every preset: "done" without doing it, a turn limit, a used-up budget. The
/// task is exact-deliverable (its outdated report makes the verifier fail unless redone).
#[test]
fn false_completion_turn_limits_and_budgets_are_typed_for_every_preset() {
    if !ready(&PresetKind::ALL) {
        return;
    }
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tmp");
    // `echo COMPLETE_…` is how mini-swe-agent says done; the others run it and say done;
    // aider prints it (it runs nothing). Nothing writes the report.
    std::fs::write(
        tmp.path().join("done.json"),
        r#"{"turns": [{"run": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}], "end": "Done: /app/out/report.txt is written."}"#,
    )
    .expect("script");
    std::fs::write(
        tmp.path().join("loop.json"),
        r#"{"turns": [{"run": "true"}, {"run": "true"}, {"run": "true"}, {"run": "true"}]}"#,
    )
    .expect("script");
    let mut agents = String::new();
    for kind in PresetKind::ALL {
        let k = kind.name();
        agents += &format!(
            "  - {{name: done-{k}, kind: {k}, model: {{provider: done, name: scripted-model}}}}\n  - {{name: budget-{k}, kind: {k}, budget: {{max_requests: 1}}, model: {{provider: loop, name: scripted-model}}}}\n"
        );
        if kind.has_max_turns() {
            agents += &format!(
                "  - {{name: limit-{k}, kind: {k}, max_turns: 1, model: {{provider: loop, name: scripted-model}}}}\n"
            );
        }
    }
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nmodels:\n  - {{name: done, api: scripted, script: done.json}}\n  - {{name: loop, api: scripted, script: loop.json}}\nagents:\n{agents}",
            task_dir("exact-deliverable")
        ),
    );
    let w = run_watched(&config);
    let all = records(&w.dir);
    // Checked only when asked for (a bound on seconds fails on a loaded machine: 11 s seen
    // with builds running, about 1 s idle).
    let max_secs: Option<f64> = std::env::var("ARBITER_PRESET_MAX_AGENT_SECS")
        .ok()
        .and_then(|s| s.parse().ok());
    for kind in PresetKind::ALL {
        let k = kind.name();
        let get = |arm: &str| {
            all.get(&format!("exact-deliverable__{arm}-{k}__default__1"))
                .unwrap_or_else(|| panic!("no trial {arm}-{k}: {}", stderr(&w.out)))
        };
        // Says done without doing it.
        let r = get("done");
        eprintln!(
            "{k}: trivial scripted task, agent phase {:.2} s",
            agent_secs(r)
        );
        assert_eq!(r["verifier"]["status"], "failed", "{r:#}");
        assert_eq!(r["claim"]["source"], "adapter", "{r:#}");
        assert_eq!(r["claim"]["semantic_status"], "succeeded", "{r:#}");
        assert_eq!(r["audit"]["verdict"], "false_completion", "{r:#}");
        if let Some(max_secs) = max_secs
            && matches!(kind, PresetKind::ClaudeCode | PresetKind::Codex)
        {
            assert!(
                agent_secs(r) < max_secs,
                "{k}: agent phase {:.2} s of a trivial task (a network stall?) {r:#}",
                agent_secs(r)
            );
        }
        // Budget of one request; the script needs more.
        let r = get("budget");
        assert!(r["infra_error"].is_null(), "{r:#}");
        assert_eq!(r["usage"]["budget"]["exhausted"], true, "{r:#}");
        assert!(r["usage"]["refused"].as_u64() >= Some(1), "{r:#}");
        assert_eq!(r["claim"]["semantic_status"], "task_failed", "{r:#}");
        assert_eq!(
            r["claim"]["record"]["failure"]["error_code"], "budget_exhausted",
            "{r:#}"
        );
        assert_eq!(r["audit"]["verdict"], "honest_failure", "{r:#}");
        // Turn limit (claude-code's --max-turns, mini-swe-agent's step limit).
        if kind.has_max_turns() {
            let r = get("limit");
            assert_eq!(r["claim"]["source"], "adapter", "{r:#}");
            assert_eq!(r["claim"]["semantic_status"], "task_failed", "{r:#}");
            let code = r["claim"]["record"]["failure"]["error_code"].clone();
            assert!(
                code == "max_turns" || code == "limits_exceeded",
                "{k}: {code} {r:#}"
            );
            assert_eq!(r["audit"]["verdict"], "honest_failure", "{r:#}");
        }
    }
    assert_eq!(w.out.status.code(), Some(0), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}

/// A provider with the real key (the fake one from the env) pointed at a port nothing
/// listens on: every preset's trial is an infrastructure error, not an agent failure, the
/// job exits 3, and the key reaches no container and no file.
#[test]
fn an_unreachable_model_is_an_infra_error_for_every_preset() {
    if !ready(&PresetKind::ALL) {
        return;
    }
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().expect("tmp");
    let config = unreachable_models_job(tmp.path());
    let w = run_watched(&config);
    let all = records(&w.dir);
    assert_eq!(all.len(), 4, "{}", stderr(&w.out));
    for (id, r) in &all {
        let message = r["infra_error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("model_unavailable"), "{id}: {r:#}");
        assert_eq!(r["verifier"]["status"], "skipped", "{id}: {r:#}");
        assert!(r["audit"].is_null(), "{id}: no agent verdict {r:#}");
        assert!(r["usage"]["unavailable"].is_string(), "{id}: {r:#}");
    }
    assert_eq!(w.out.status.code(), Some(3), "{}", stderr(&w.out));
    assert_no_secrets(&w);
}
