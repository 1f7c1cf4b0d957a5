//! Harbor multi-step tasks (`[[steps]]`) through the real binary on the real engine
//! (offline), and the same job on the Kubernetes test cluster: each step's instruction, setup
//! and tests in order in one container; the oracle passes every step, nop none, and an agent
//! that only does the first step gets Harbor's partial reward (the mean of the steps' rewards).

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn fixture() -> PathBuf {
    repo().join("tests/fixtures/harbor-run/two-step")
}

const TRIAL: &str = "arbiter-fixtures-two-step";

fn steps(rec: &Value) -> Vec<(String, Option<f64>, bool)> {
    rec["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps: {rec:#}"))
        .iter()
        .map(|s| {
            (
                s["name"].as_str().expect("name").to_string(),
                s["reward"].as_f64(),
                s["passed"].as_bool().expect("passed"),
            )
        })
        .collect()
}

fn reward(rec: &Value) -> Option<f64> {
    rec["verifier"]["reward"]["reward"].as_f64()
}

fn write_config(dir: &Path, task: &Path) -> PathBuf {
    let config = dir.join("job.yaml");
    std::fs::write(
        &config,
        format!(
            r#"tasks: ["{}"]
agents:
  - oracle
  - nop
  - name: first-only
    kind: command
    run: [bash, -c, "cat /arbiter/instruction.md >> /logs/agent/instructions.log; echo hello > /app/greet.txt"]
"#,
            task.display()
        ),
    )
    .expect("job.yaml");
    config
}

#[test]
fn oracle_passes_both_steps_nop_neither_and_a_first_step_solver_gets_half() {
    if docker_available() {
        two_steps(&fixture(), &[]);
    }
}

/// The same job on the Kubernetes test cluster: the same steps, rewards, files and reports.
/// The task is a copy of the fixture built from a Dockerfile, so its image is in the
/// registry the nodes pull from.
#[test]
fn the_two_step_task_on_kubernetes() {
    if let Some(backend) = common::k8s::kubernetes_flags() {
        let tmp = tempfile::tempdir().expect("tmp");
        let task = common::k8s::built_copy(&fixture(), tmp.path(), "arbiter/debian:bookworm");
        let (job_dir, _guard) = two_steps(&task, &backend);
        for agent in ["oracle", "nop", "first-only"] {
            let rec = result(&job_dir, &format!("{TRIAL}__{agent}__default__1"));
            assert_eq!(rec["sandbox"]["backend"], "kubernetes", "{rec:#}");
        }
        assert_eq!(common::k8s::pods_of(&job_dir), Vec::<String>::new());
    }
}

/// Run the job and check every record and report; the job dir (kept until the caller ends).
fn two_steps(task: &Path, backend: &[&str]) -> (PathBuf, tempfile::TempDir) {
    let tmp = tempfile::tempdir().expect("tmp");
    let config = write_config(tmp.path(), task);
    let mut args = vec!["-c", config.to_str().expect("utf8")];
    args.extend_from_slice(backend);
    let (out, job_dir, guard) = run_job(&args);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));

    let oracle = result(&job_dir, &format!("{TRIAL}__oracle__default__1"));
    assert_eq!(
        steps(&oracle),
        [
            ("scaffold".to_string(), Some(1.0), true),
            ("extend".to_string(), Some(1.0), true)
        ],
        "{oracle:#}"
    );
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    assert_eq!(reward(&oracle), Some(1.0));
    let trial = job_dir.join(format!("trials/{TRIAL}__oracle__default__1"));
    // Step one's verifier ran with its own env and the task's shared tests/lib.sh.
    let said = std::fs::read_to_string(trial.join("steps/scaffold/verifier/stdout.log"))
        .expect("step one's verifier log");
    assert_eq!(said.trim(), "step scaffold: reward 1");
    assert_eq!(
        std::fs::read_to_string(trial.join("steps/scaffold/artifacts/app/greet.txt"))
            .expect("step one's artifact"),
        "hello\n"
    );
    assert_eq!(
        std::fs::read_to_string(trial.join("artifacts/app/both.txt")).expect("step artifact"),
        "hello\nworld\n"
    );

    let nop = result(&job_dir, &format!("{TRIAL}__nop__default__1"));
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    assert_eq!(reward(&nop), Some(0.0));
    assert_eq!(
        steps(&nop),
        [
            ("scaffold".to_string(), Some(0.0), false),
            ("extend".to_string(), Some(0.0), false)
        ],
        "no min_reward: a failed step does not stop the next (Harbor)"
    );

    let first = result(&job_dir, &format!("{TRIAL}__first-only__default__1"));
    assert_eq!(
        steps(&first),
        [
            ("scaffold".to_string(), Some(1.0), true),
            ("extend".to_string(), Some(0.0), false)
        ],
        "{first:#}"
    );
    assert_eq!(reward(&first), Some(0.5), "Harbor's mean over the steps");
    assert_eq!(first["verifier"]["status"], "failed");
    // The agent got each step's own instruction, in order.
    let seen = std::fs::read_to_string(job_dir.join(format!(
        "trials/{TRIAL}__first-only__default__1/agent/logs/instructions.log"
    )))
    .expect("the agent's log");
    let scaffold = seen
        .find("Write the line `hello`")
        .expect("step one's instruction");
    let extend = seen
        .find("Write /app/both.txt")
        .expect("step two's instruction");
    assert!(scaffold < extend, "{seen}");

    // Reports: a per-step table per task and arm, in the terminal, report.md and report.json.
    let job = job_dir.to_str().expect("utf8");
    let json = arbiter(&["report", job, "--format", "json"]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let report: Value = serde_json::from_slice(&json.stdout).expect("report.json");
    let rows: Vec<(String, String, u64, u64, f64)> = report["steps"]
        .as_array()
        .unwrap_or_else(|| panic!("no steps in the report: {report:#}"))
        .iter()
        .map(|r| {
            (
                r["step"].as_str().expect("step").to_string(),
                r["arm"].as_str().expect("arm").to_string(),
                r["ran"].as_u64().expect("ran"),
                r["passed"].as_u64().expect("passed"),
                r["mean_reward"].as_f64().expect("mean"),
            )
        })
        .collect();
    assert!(
        rows.contains(&("scaffold".into(), "first-only/default".into(), 1, 1, 1.0)),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("extend".into(), "first-only/default".into(), 1, 0, 0.0)),
        "{rows:?}"
    );
    assert!(
        rows.contains(&("extend".into(), "oracle/default".into(), 1, 1, 1.0)),
        "{rows:?}"
    );
    assert_eq!(rows.len(), 6, "2 steps x 3 arms: {rows:?}");
    let table = arbiter(&["report", job]);
    assert!(
        stdout(&table).contains("per-step results"),
        "{}",
        stdout(&table)
    );
    let md = arbiter(&["report", job, "--format", "md"]);
    assert!(
        stdout(&md).contains("## Steps (multi-step tasks)"),
        "{}",
        stdout(&md)
    );
    (job_dir, guard)
}
