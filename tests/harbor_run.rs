//! Harbor task features at run time, through the real binary on the real engine (offline):
//! env tables, `/logs/artifacts`, a base image that cannot be got, GPUs, datasets.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

const TOKEN: &str = "harbor-run-token-5f2c9e";

/// `arbiter run --quiet --job-dir <tmp>/job-<unique> <extra>` with the token the env-tables
/// task references set in arbiter's environment.
fn run_in(tmp: &Path, extra: &[&str]) -> (Output, PathBuf) {
    run_in_with(tmp, extra, |cmd| {
        cmd.env("ARBITER_HARBOR_RUN_TOKEN", TOKEN)
            .env_remove("ARBITER_HARBOR_RUN_UNSET")
    })
}

#[test]
fn env_tables_reach_the_oracle_and_the_verifier_and_artifacts_are_collected() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("env-tables");
    let (out, job_dir) = run_in(tmp.path(), &oracle_and_nop(&task));
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let oracle = result(&job_dir, "env-tables__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    let nop = result(&job_dir, "env-tables__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");

    // `/logs/artifacts` is writable by the agent's user (nobody) and collected.
    let trial = job_dir.join("trials/env-tables__oracle__default__1");
    let mode = std::fs::read_to_string(trial.join("artifacts/logs/artifacts/mode.txt"))
        .expect("/logs/artifacts collected");
    assert_eq!(mode, "777\nnobody\n");
    let entry = oracle["artifacts"]
        .as_array()
        .expect("artifacts")
        .iter()
        .find(|a| a["path"] == "/logs/artifacts")
        .unwrap_or_else(|| panic!("{oracle:#}"));
    assert_eq!(entry["status"], "ok");
    assert!(
        nop["artifacts"].as_array().expect("artifacts").is_empty(),
        "an empty /logs/artifacts adds nothing: {nop:#}"
    );

    // The resolved `${ARBITER_HARBOR_RUN_TOKEN}` is a secret: scrubbed from every file.
    let stdout_log = std::fs::read_to_string(trial.join("agent/stdout.log")).expect("stdout");
    assert_eq!(stdout_log, "token seen by the agent: ***\n");
    for file in files_under(&job_dir) {
        let bytes = std::fs::read(&file).expect("read");
        assert!(
            !String::from_utf8_lossy(&bytes).contains(TOKEN),
            "{} holds the secret",
            file.display()
        );
    }
}

#[test]
fn a_missing_base_image_fails_fast_and_is_named() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("missing-base");
    let config = nop_without_retries(tmp.path(), &task);
    let started = Instant::now();
    let (out, job_dir) = run_in(tmp.path(), &["-c", config.to_str().expect("utf8")]);
    let took = started.elapsed();
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    assert!(
        took < Duration::from_secs(60),
        "nothing waits on a registry: {took:?}"
    );
    let r = result(&job_dir, "missing-base__nop__default__1");
    assert_eq!(r["infra_error"]["phase"], "environment", "{r:#}");
    let message = r["infra_error"]["message"].as_str().expect("message");
    assert!(message.starts_with("image build "), "{message}");
    assert!(
        message.ends_with(
            "(base image: arbiter/does-not-exist:1 — is it available locally? arbiter cannot pull from a registry it cannot reach; pull or build it before the run)"
        ),
        "{message}"
    );
    assert_eq!(r["termination"]["kind"], "infra_error");
}

/// Whether the engine lists a GPU runtime (then the refusal cannot be tested here).
fn engine_has_gpu_runtime() -> bool {
    Command::new("docker")
        .args(["info", "--format", "{{json .Runtimes}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("nvidia"))
        .unwrap_or(false)
}

#[test]
fn a_gpu_task_on_an_engine_without_gpus_is_refused_before_anything_starts() {
    if !docker_available() || engine_has_gpu_runtime() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("gpu-task");
    let cpu_task = fixture("quick");
    let (out, job_dir) = run_in(
        tmp.path(),
        &[
            cpu_task.to_str().expect("utf8"),
            task.to_str().expect("utf8"),
            "--agent",
            "nop",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {}:environment.gpus: the task needs 1 GPU (H100), but the container engine has none (no GPU runtime or GPU device is registered with it); run it on a machine with GPUs",
            task.join("task.toml").display()
        )
    );
    assert!(
        !job_dir.exists(),
        "no trial may start, not even the CPU task's"
    );
}

#[test]
fn a_dataset_dir_runs_each_of_its_tasks() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let dataset = repo().join("tests/fixtures/harbor-tasks/dataset-mini");
    let (out, job_dir) = run_in(
        tmp.path(),
        &[&format!("{}/", dataset.display()), "--agent", "nop"],
    );
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let lines = std::fs::read_to_string(job_dir.join("trials.jsonl")).expect("trials.jsonl");
    let mut tasks: Vec<String> = lines
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json line");
            v["task"].as_str().expect("task").to_string()
        })
        .collect();
    tasks.sort();
    assert_eq!(tasks, ["arbiter-fixtures/second", "task-10"]);
}

#[test]
fn an_unset_reference_in_the_task_env_is_refused_before_anything_starts() {
    // No engine needed: the job is refused while it is resolved.
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("env-tables");
    let job_dir = tmp.path().join("job");
    let out = Command::new(env!("CARGO_BIN_EXE_arbiter"))
        .args(["run", "--quiet", "--job-dir"])
        .arg(&job_dir)
        .arg(&task)
        .args(["--agent", "nop"])
        .env_remove("ARBITER_HARBOR_RUN_TOKEN")
        .output()
        .expect("run arbiter");
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(
        err.trim_end(),
        format!(
            "error: {}:environment.env.TOKEN: ${{ARBITER_HARBOR_RUN_TOKEN}} is not set in arbiter's environment",
            task.join("task.toml").display()
        )
    );
    assert!(!job_dir.exists(), "nothing may be started");
}
