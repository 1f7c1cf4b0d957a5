//! Harbor's ENTRYPOINT semantics and compose sidecars, through the real binary on the real
//! engine (offline, network none, no bridge): an image's ENTRYPOINT prepares the agent's and
//! the verifier's containers; one that exits is the task's failure, said in one line; a
//! compose sidecar the agent must query runs in the agent container's network namespace and
//! is gone after the job; `[environment.healthcheck]` waits for what the ENTRYPOINT starts,
//! and one that never passes is an environment error before the agent runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;

/// `arbiter run --quiet --job-dir <tmp>/job-<unique> <extra>`.
fn run_in(tmp: &Path, extra: &[&str]) -> (Output, PathBuf) {
    run_in_with(tmp, extra, |cmd| cmd)
}

#[test]
fn an_image_entrypoint_prepares_the_agent_and_verifier_containers() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("entrypoint");
    let (out, job_dir) = run_in(tmp.path(), &oracle_and_nop(&task));
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let oracle = result(&job_dir, "entrypoint__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    assert!(oracle["infra_error"].is_null(), "{oracle:#}");
    let nop = result(&job_dir, "entrypoint__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
}

#[test]
fn an_entrypoint_that_exits_is_a_one_line_environment_error() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("entrypoint-exits");
    let config = nop_without_retries(tmp.path(), &task);
    let (out, job_dir) = run_in(tmp.path(), &["-c", config.to_str().expect("utf8")]);
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    let r = result(&job_dir, "entrypoint-exits__nop__default__1");
    assert_eq!(r["infra_error"]["phase"], "environment", "{r:#}");
    let message = r["infra_error"]["message"].as_str().expect("message");
    assert_eq!(
        message,
        "the image's ENTRYPOINT [\"sh\", \"-c\", \"echo cannot find the database; exit 3\", \"--\"] exited with code 3 before running its arguments; an ENTRYPOINT must end with `exec \"$@\"` (Harbor runs it with a keep-alive command as its arguments) (last output: cannot find the database)",
    );
    assert_eq!(r["termination"]["kind"], "infra_error");
}

#[test]
fn a_compose_sidecar_serves_the_agent_and_is_gone_after_the_job() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let task = harbor_task("compose-http");
    let (out, job_dir) = run_in(tmp.path(), &oracle_and_nop(&task));
    assert_eq!(
        job_containers(&job_dir, "{{.Label \"arbiter.role\"}}"),
        Vec::<String>::new()
    );
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let oracle = result(&job_dir, "compose-http__oracle__default__1");
    assert_eq!(oracle["verifier"]["status"], "passed", "{oracle:#}");
    let nop = result(&job_dir, "compose-http__nop__default__1");
    assert_eq!(nop["verifier"]["status"], "failed", "{nop:#}");
    assert!(nop["infra_error"].is_null(), "{nop:#}");
}

/// A task whose ENTRYPOINT makes `/tmp/ready` 2 s after the start, checked by `healthcheck`.
fn healthcheck_task(root: &Path, name: &str, healthcheck: &str) -> PathBuf {
    let dir = root.join(name);
    let files = [
        (
            "task.toml",
            format!("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n{healthcheck}"),
        ),
        ("instruction.md", "Write /app/answer.\n".to_string()),
        (
            "environment/Dockerfile",
            "FROM arbiter/busybox:latest\nRUN printf '#!/bin/sh\\n(sleep 2; touch /tmp/ready) &\\nexec \"$@\"\\n' > /entrypoint.sh && chmod 755 /entrypoint.sh\nENTRYPOINT [\"/entrypoint.sh\"]\n".to_string(),
        ),
        (
            "solution/solve.sh",
            "#!/bin/sh\nmkdir -p /app\ntest -f /tmp/ready && echo ready > /app/answer\n".to_string(),
        ),
        (
            "tests/test.sh",
            "#!/bin/sh\nif [ \"$(cat /app/answer 2>/dev/null)\" = ready ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n".to_string(),
        ),
    ];
    for (rel, content) in files {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, content).expect("write");
    }
    dir
}

#[test]
fn the_environment_healthcheck_gates_the_agent_on_the_real_engine() {
    if !docker_available() {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    // Passes once the ENTRYPOINT's background job is done: the oracle finds /tmp/ready.
    let ready = healthcheck_task(
        tmp.path(),
        "hc-ready",
        "[environment.healthcheck]\ncommand = \"test -f /tmp/ready\"\nstart_period_sec = 20\nstart_interval_sec = 0.5\n",
    );
    // Never passes: an environment error, the agent never runs.
    let never = healthcheck_task(
        tmp.path(),
        "hc-never",
        "[environment.healthcheck]\ncommand = \"test -f /tmp/never\"\ninterval_sec = 0.2\nretries = 2\n",
    );
    let config = write_job(
        tmp.path(),
        &format!(
            "tasks: [{}, {}]\nagents: [oracle]\nretries: {{max: 0}}\nnetwork: none\n",
            ready.display(),
            never.display()
        ),
    );
    let (out, job_dir) = run_in(tmp.path(), &["-c", config.to_str().expect("utf8")]);
    assert_no_leftovers(&job_dir);
    assert_eq!(out.status.code(), Some(3), "stderr: {}", stderr(&out));
    let r = result(&job_dir, "hc-ready__oracle__default__1");
    assert_eq!(r["verifier"]["status"], "passed", "{r:#}");
    assert!(r["infra_error"].is_null(), "{r:#}");
    let r = result(&job_dir, "hc-never__oracle__default__1");
    assert_eq!(r["infra_error"]["phase"], "environment", "{r:#}");
    assert_eq!(
        r["infra_error"]["message"],
        "[environment.healthcheck] failed: `test -f /tmp/never` failed 2 times in a row"
    );
    assert_eq!(r["termination"]["kind"], "infra_error");
}
