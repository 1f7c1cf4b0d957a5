//! Goal continuation (SPEC §15, issue 29) on a real cluster, through the real binary
//! (`scripts/k8s up`, then `eval "$(scripts/k8s env)"`). On Kubernetes the control root is a
//! volume of the pod that the host reads back only when the trial collects it, so the
//! previous attempt's completion state must be found and removed inside the pod.
//!
//! The aworld-cli stand-in (`STANDIN_BEHAVIOR=goal`, NOT AWorld): attempt 1 writes its plan
//! to the ledger, plants stale completion state in the control root (`completion.json`, a
//! "succeeded" `outcome.json`, `receipts/`) and claims `task_failed`; attempt 2 records what
//! it found, does the work and claims `succeeded`. The verifier runs `live` in the agent's pod
//! and appends one line to a file there per run, so a verifier run between the attempts would
//! be seen by attempt 2 and counted at the end.
//!
//! Skipped with a message when `KUBECONFIG` is unset; a failure when `ARBITER_REQUIRE_K8S=1`.

mod common;

use std::path::Path;

use common::k8s::{configured, pods_of};
use common::*;
use serde_json::Value;

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, content).expect("write");
        if rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }
}

const VERIFIER: &str = r#"#!/bin/sh
# Counts its own runs in the agent's pod (live): more than one line means it ran twice.
echo run >> /var/tmp/verifier-runs.log
cp /var/tmp/verifier-runs.log /logs/verifier/runs.txt
if [ "$(cat /app/out.txt 2>/dev/null)" = "hello" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"#;

#[test]
fn the_aworld_standin_continues_on_kubernetes_without_stale_completion_state() {
    if !configured() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // Built from a Dockerfile: the cluster pulls only from its registry.
    let task = tmp.path().join("aw-goal");
    write_files(
        &task,
        &[
            (
                "task.toml",
                "version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\nenvironment_mode = \"live\"\n[environment]\nnetwork_mode = \"no-network\"\ncpus = 1\nmemory_mb = 256\npids_limit = 256\nworkdir = \"/app\"\n",
            ),
            (
                "environment/Dockerfile",
                "FROM arbiter/debian:bookworm\nRUN mkdir -p /app\n",
            ),
            ("instruction.md", "Write the word hello to /app/out.txt.\n"),
            ("tests/test.sh", VERIFIER),
        ],
    );
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}]\nagents:\n  - name: carry\n    kind: aworld\n    binary: /opt/aworld-standin/aworld-cli\n    mounts:\n      - host: {}\n        container: /opt/aworld-standin\n    model:\n      name: test-model\n      provider: openai\n      base_url: http://127.0.0.1:9/v1\n      api_key: sk-not-a-real-key-0000\n    continuation: {{max_attempts: 3}}\n    env:\n      STANDIN_BEHAVIOR: goal\n      STANDIN_WORK: \"echo hello > /app/out.txt\"\nbackend: {{kind: kubernetes}}\n",
            task.display(),
            repo().join("tests/fixtures/aworld-standin").display()
        ),
    );
    let (out, job_dir, _g) = run_job(&["-c", config.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let trial = "aw-goal__carry__default__1";
    let rec = result(&job_dir, trial);
    assert_eq!(rec["sandbox"]["backend"], "kubernetes", "{rec:#}");
    assert_eq!(rec["continuation"]["attempts_used"], 2, "{rec:#}");
    assert_eq!(rec["continuation"]["status"], "claimed_success", "{rec:#}");
    assert_eq!(rec["verifier"]["status"], "passed", "{rec:#}");
    assert_eq!(rec["audit"]["verdict"], "certified", "{rec:#}");
    let attempts = rec["attempts"].as_array().expect("attempts");
    assert_eq!(attempts[0]["claim"]["semantic_status"], "task_failed");
    assert_eq!(attempts[1]["claim"]["semantic_status"], "succeeded");
    assert_eq!(rec["claim"], attempts[1]["claim"]);
    let cleared = cleared(&attempts[0]);
    for path in [
        "/arbiter/control/outcome.json",
        "/arbiter/control/completion.json",
        "/arbiter/control/receipts",
    ] {
        assert!(cleared.contains(&path), "{path} not cleared: {cleared:?}");
    }
    assert!(
        !cleared.contains(&"/arbiter/control/ledger.md"),
        "{cleared:?}"
    );

    // What attempt 2 saw in the pod, from the control root as collected after the trial.
    let control = job_dir.join("trials").join(trial).join("agent/control");
    let seen: Value =
        serde_json::from_slice(&std::fs::read(control.join("seen-2.json")).expect("seen-2.json"))
            .expect("json");
    assert_eq!(seen["attempt"], "2", "{seen:#}");
    assert_eq!(seen["stale_outcome_present"], false, "{seen:#}");
    assert_eq!(seen["stale_completion_present"], false, "{seen:#}");
    assert_eq!(seen["stale_receipts_present"], false, "{seen:#}");
    assert_eq!(seen["outcome_present"], false, "{seen:#}");
    assert_eq!(seen["tests_present"], false, "{seen:#}");
    assert_eq!(seen["verifier_trace_present"], false, "{seen:#}");
    assert_eq!(
        seen["ledger"], "attempt 1: plan: write hello to /app/out.txt\n",
        "the ledger carried"
    );
    assert_eq!(
        seen["previous"]["error"]["message"],
        "out.txt not written yet"
    );
    // Nothing of attempt 1's completion state came back with the control root; attempt 1's
    // records are kept by arbiter instead.
    for stale in ["outcome.json", "completion.json", "receipts"] {
        assert!(!control.join(stale).exists(), "{stale} came back");
    }
    assert!(control.join("ledger.md").is_file());
    // The verifier ran exactly once.
    let runs = std::fs::read_to_string(
        job_dir
            .join("trials")
            .join(trial)
            .join("verifier/logs/runs.txt"),
    )
    .expect("runs.txt");
    assert_eq!(runs, "run\n", "verifier runs: {runs:?}");
    assert_eq!(pods_of(&job_dir), Vec::<String>::new(), "pods left");
}
