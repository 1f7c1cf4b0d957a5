//! Trials through the real binary on a real Docker engine: how agents end, what the verifier
//! can and cannot be fooled by, and that nothing is left behind.

mod common;

use common::*;

fn run_task(
    task: &str,
    agent: &str,
) -> Option<(serde_json::Value, std::path::PathBuf, tempfile::TempDir)> {
    if !docker_available() {
        return None;
    }
    let dir = fixture(task);
    let (out, job_dir, guard) = run_job(&[dir.to_str().expect("utf8"), "--agent", agent]);
    let trial = format!("{task}__{agent}__default__1");
    assert!(
        has_record(&job_dir, &trial),
        "no record; stdout: {} stderr: {}",
        stdout(&out),
        stderr(&out)
    );
    Some((result(&job_dir, &trial), job_dir, guard))
}

#[test]
fn agent_past_its_timeout_is_a_timeout_and_the_verifier_still_runs() {
    let Some((r, _, _g)) = run_task("sleepy", "oracle") else {
        return;
    };
    assert_eq!(r["termination"]["kind"], "timeout", "{r:#}");
    // 2 s limit + 3 s grace (the agent ignores SIGTERM) + the engine's time for the exec, the
    // SIGTERM broadcast and the kill (each an engine request: 1-3 s apiece on a loaded
    // machine). An exec whose stream outlived the kill would be waited on for 10 s more, so
    // under 15 s the kill ended it; and the agent's 300 s sleep was cut short.
    let agent_secs = r["phases"]["agent"]["seconds"]
        .as_f64()
        .expect("agent seconds");
    assert!(
        (2.0..15.0).contains(&agent_secs),
        "agent phase took {agent_secs}s"
    );
    assert_eq!(
        r["verifier"]["status"], "passed",
        "the verifier runs on what the agent left: {r:#}"
    );
}

#[test]
fn agent_over_its_memory_limit_is_oom() {
    let Some((r, _, _g)) = run_task("memhog", "oracle") else {
        return;
    };
    assert_eq!(r["termination"]["kind"], "oom", "{r:#}");
    assert_eq!(r["limits"]["memory_mb"], 64);
}

#[test]
fn forged_reward_files_do_not_pass_an_unsolved_task() {
    let Some((r, job_dir, _g)) = run_task("forge", "oracle") else {
        return;
    };
    assert_eq!(r["termination"]["kind"], "exited");
    assert_eq!(r["verifier"]["status"], "failed", "{r:#}");
    assert_eq!(r["verifier"]["reward"]["reward"], 0.0);
    let reward = std::fs::read_to_string(
        job_dir.join("trials/forge__oracle__default__1/verifier/reward.txt"),
    )
    .expect("reward");
    assert_eq!(reward.trim(), "0");
}

#[test]
fn agent_finds_nothing_of_the_tests() {
    let Some((r, job_dir, _g)) = run_task("snoop", "oracle") else {
        return;
    };
    assert_eq!(r["termination"]["exit_code"], 0, "{r:#}");
    let logs = job_dir.join("trials/snoop__oracle__default__1/agent/logs");
    for file in ["ls.txt", "find.txt", "grep.txt", "dirs.txt"] {
        let text =
            std::fs::read_to_string(logs.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(text.trim(), "", "{file} found verifier files: {text}");
    }
}

#[test]
fn background_process_cannot_touch_the_snapshot_verifier() {
    let Some((r, job_dir, _g)) = run_task("daemon", "oracle") else {
        return;
    };
    let alive = std::fs::read_to_string(
        job_dir.join("trials/daemon__oracle__default__1/agent/logs/daemon.txt"),
    )
    .expect("daemon.txt");
    assert_eq!(
        alive.trim(),
        "1",
        "the tampering daemon must have been running when the agent exited"
    );
    assert_eq!(r["verifier"]["mode"], "snapshot");
    assert_eq!(
        r["verifier"]["status"], "passed",
        "the daemon died with the agent container: {r:#}"
    );
}

#[test]
fn live_verifier_sees_the_agents_running_service() {
    let Some((r, _, _g)) = run_task("service", "oracle") else {
        return;
    };
    assert_eq!(r["verifier"]["mode"], "live");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
}

#[test]
fn verifier_without_reward_is_an_error_not_a_zero() {
    let Some((r, _, _g)) = run_task("noreward", "oracle") else {
        return;
    };
    assert_eq!(r["verifier"]["status"], "error", "{r:#}");
    assert!(
        r["verifier"].get("reward").is_none(),
        "no reward must be recorded: {r:#}"
    );
    assert_eq!(r["audit"]["verdict"], "unverifiable");
}

#[test]
fn command_agent_installs_runs_and_sees_its_env() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{task}]\nagents:\n  - name: scripted\n    kind: command\n    install: touch /app/installed\n    run: [sh, -c, 'test -s \"$ARBITER_INSTRUCTION_FILE\" && echo \"$GREETING\" > /app/greeting']\n    env:\n      GREETING: hello from the job config\n      API_KEY: sk-test-literal-secret\n",
            task = fixture("envcheck").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&job_dir, "envcheck__scripted__default__1");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    let saved = std::fs::read_to_string(job_dir.join("job.yaml")).expect("job.yaml");
    assert!(
        saved.contains("GREETING: hello from the job config"),
        "{saved}"
    );
    assert!(
        !saved.contains("sk-test-literal-secret"),
        "secret leaked into job.yaml: {saved}"
    );
}

#[test]
fn oracle_passes_and_nop_fails_every_example_task() {
    if !docker_available() {
        return;
    }
    let tasks = repo().join("tasks");
    let mut dirs: Vec<String> = std::fs::read_dir(&tasks)
        .expect("tasks/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("task.toml").is_file())
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 5, "at least five example tasks");
    let mut args: Vec<&str> = dirs.iter().map(String::as_str).collect();
    args.extend(["--agent", "oracle", "--agent", "nop", "-n", "2"]);
    let (out, job_dir, _g) = run_job(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for dir in &dirs {
        let name = std::path::Path::new(dir)
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let oracle = result(&job_dir, &format!("{name}__oracle__default__1"));
        assert_eq!(
            oracle["verifier"]["status"], "passed",
            "oracle on {name}: {oracle:#}"
        );
        let nop = result(&job_dir, &format!("{name}__nop__default__1"));
        assert_eq!(
            nop["verifier"]["status"], "failed",
            "nop on {name}: {nop:#}"
        );
    }
    let table = stdout(&out);
    assert!(
        table.contains("100.0%") && table.contains("0.0%"),
        "{table}"
    );
    let lines = std::fs::read_to_string(job_dir.join("trials.jsonl")).expect("trials.jsonl");
    assert_eq!(lines.lines().count(), dirs.len() * 2);
}

#[test]
fn failed_image_build_is_an_infra_error_not_an_agent_failure() {
    if !docker_available() {
        return;
    }
    let (out, job_dir, _g) = run_job(&[
        fixture("badbuild").to_str().expect("utf8"),
        "--agent",
        "oracle",
        "--agent",
        "nop",
    ]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "infra errors remain → exit 3: {}",
        stderr(&out)
    );
    for agent in ["oracle", "nop"] {
        let r = result(&job_dir, &format!("badbuild__{agent}__default__1"));
        assert_eq!(r["termination"]["kind"], "infra_error", "{r:#}");
        assert_eq!(r["infra_error"]["phase"], "environment");
        assert!(
            r["infra_error"]["message"]
                .as_str()
                .expect("message")
                .contains("exit"),
            "{r:#}"
        );
        assert!(r["audit"].is_null(), "an infra error is not scored: {r:#}");
    }
    let table = stdout(&out);
    let oracle_row = table
        .lines()
        .find(|l| l.starts_with("oracle"))
        .expect("oracle row");
    let cells: Vec<&str> = oracle_row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["oracle", "default", "1", "0", "0", "1", "-"],
        "{table}"
    );
}

#[test]
fn chatty_agent_output_is_capped_and_counted() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{task}]\nlog_cap_mb: 1\nagents:\n  - name: chatty\n    kind: command\n    run: [sh, -c, 'head -c 60000000 /dev/zero; head -c 3000000 /dev/zero >&2']\n",
            task = fixture("noreward").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let r = result(&job_dir, "noreward__chatty__default__1");
    assert_eq!(r["output"]["stdout_bytes"], 60_000_000, "{r:#}");
    assert_eq!(r["output"]["stderr_bytes"], 3_000_000, "{r:#}");
    assert_eq!(r["output"]["truncated"], true);
    let agent = job_dir.join("trials/noreward__chatty__default__1/agent");
    for log in ["stdout.log", "stderr.log"] {
        let size = std::fs::metadata(agent.join(log)).expect("log").len();
        assert!(size <= 1024 * 1024 + 200, "{log} is {size} bytes");
    }
}
