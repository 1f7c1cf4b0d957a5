//! Harbor task features at run time, on the in-memory backend under paused time: the task's
//! `[environment] env` in every exec of the task container, `[solution] env` in the oracle's
//! only, their secrets scrubbed; `/logs/artifacts` collected; a failed build naming its base
//! image.

use std::sync::Arc;

use crate::sandbox::{FakeExec, FakeSandbox, GPUS_UNCOUNTED, Op, Sandbox};
use crate::testing::{job_spec, task_dir};

use super::record::ArtifactStatus;
use super::test_support::{finish, plan_in};
use super::*;

/// The env of the first exec whose argv contains `pattern`.
fn env_of(fake: &FakeSandbox, pattern: &str) -> Vec<(String, String)> {
    fake.exec_envs()
        .into_iter()
        .find(|(argv, _)| argv.contains(pattern))
        .unwrap_or_else(|| panic!("no exec of {pattern}: {:?}", fake.exec_envs()))
        .1
}

fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

const ENV_TABLES: &str = r#"env = { MODE = "task", TOOL_HOME = "/opt/tool", LEVEL = "${ARBITER_HARBOR_SURELY_UNSET:-info}" }
[solution.env]
ANSWER = "42"
MODE = "solution"
[verifier.env]
MODE = "verify"
[[completion.validation]]
id = "env-check"
shell = "check-env"
"#;

#[tokio::test(start_paused = true)]
async fn the_task_env_reaches_every_exec_of_the_task_container_and_the_solution_env_only_the_oracle()
 {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), ENV_TABLES);
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");

    let solve = env_of(&fake, "/solution/solve.sh");
    assert_eq!(get(&solve, "TOOL_HOME"), Some("/opt/tool"));
    assert_eq!(get(&solve, "LEVEL"), Some("info"), "${{VAR:-default}}");
    assert_eq!(get(&solve, "ANSWER"), Some("42"));
    assert_eq!(
        get(&solve, "MODE"),
        Some("solution"),
        "[solution] env over [environment] env"
    );

    let verify = env_of(&fake, "/tests/test.sh");
    assert_eq!(get(&verify, "TOOL_HOME"), Some("/opt/tool"));
    assert_eq!(get(&verify, "LEVEL"), Some("info"));
    assert_eq!(
        get(&verify, "MODE"),
        Some("verify"),
        "[verifier] env over [environment] env"
    );
    assert_eq!(
        get(&verify, "ANSWER"),
        None,
        "the solution env is the oracle's"
    );

    let validation = env_of(&fake, "check-env");
    assert_eq!(get(&validation, "TOOL_HOME"), Some("/opt/tool"));
    assert_eq!(get(&validation, "MODE"), Some("task"));
    assert_eq!(get(&validation, "ANSWER"), None);

    // The harness's own commands (preparing /tests) run without the task's env.
    let prep = env_of(&fake, "rm -rf -- /tests /logs/verifier");
    assert!(prep.is_empty(), "{prep:?}");
    // Nothing resolved from the env tables is written into the record.
    let json = serde_json::to_string(&rec).expect("json");
    assert!(!json.contains("/opt/tool"), "{json}");
}

#[tokio::test(start_paused = true)]
async fn variant_overrides_win_over_the_task_env() {
    let root = tempfile::tempdir().expect("tmp");
    let mut plan = plan_in(root.path(), ENV_TABLES);
    plan.overrides
        .insert("TOOL_HOME".to_string(), "/variant".to_string());
    let fake = Arc::new(FakeSandbox::new());
    finish(&fake, &plan).await;
    let solve = env_of(&fake, "/solution/solve.sh");
    assert_eq!(get(&solve, "TOOL_HOME"), Some("/variant"));
    assert_eq!(get(&solve, "ANSWER"), Some("42"));
    // Variant overrides are the agent's: the verifier keeps the task's value.
    let verify = env_of(&fake, "/tests/test.sh");
    assert_eq!(get(&verify, "TOOL_HOME"), Some("/opt/tool"));
}

#[tokio::test(start_paused = true)]
async fn values_resolved_from_the_task_env_are_scrubbed_from_the_trial_files() {
    let root = tempfile::tempdir().expect("tmp");
    // `PATH` is set wherever tests run; a `${NAME}` value is a secret.
    let secret = std::env::var("PATH").expect("PATH is set");
    assert!(secret.len() >= 4);
    let plan = plan_in(
        root.path(),
        "env = { SEARCH = \"${PATH}\" }\n[solution.env]\nPLAIN = \"plain-value\"\n",
    );
    let fake = Arc::new(FakeSandbox::new());
    let mut said = secret.clone().into_bytes();
    said.extend_from_slice(b"\nplain-value\n");
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec {
            stdout: said,
            ..FakeExec::exits(0)
        },
    );
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(
        get(&env_of(&fake, "/solution/solve.sh"), "SEARCH"),
        Some(secret.as_str())
    );
    let stdout = std::fs::read_to_string(plan.dir.join("agent/stdout.log")).expect("stdout");
    assert!(!stdout.contains(&secret), "{stdout}");
    assert!(stdout.contains("***"), "{stdout}");
    assert!(
        stdout.contains("plain-value"),
        "a literal value is no secret"
    );
    let json = serde_json::to_string(&rec).expect("json");
    assert!(!json.contains(&secret));
}

#[tokio::test(start_paused = true)]
async fn files_left_in_logs_artifacts_are_collected_like_artifacts() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(root.path(), "");
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).writes("/logs/artifacts/report.txt", b"done\n"),
    );
    let rec = finish(&fake, &plan).await;
    let entry = rec
        .artifacts
        .iter()
        .find(|a| a.path == "/logs/artifacts")
        .unwrap_or_else(|| panic!("{:?}", rec.artifacts));
    assert_eq!(entry.status, ArtifactStatus::Ok);
    assert_eq!(entry.size, Some(5));
    let saved = plan.dir.join("artifacts/logs/artifacts/report.txt");
    assert_eq!(std::fs::read(&saved).expect("collected"), b"done\n");
    let manifest =
        std::fs::read_to_string(plan.dir.join("artifacts/manifest.json")).expect("manifest");
    assert!(manifest.contains("/logs/artifacts"), "{manifest}");

    // An empty (or absent) /logs/artifacts adds nothing to the record.
    let other = tempfile::tempdir().expect("tmp");
    let plan = plan_in(other.path(), "");
    let rec = finish(&Arc::new(FakeSandbox::new()), &plan).await;
    assert!(rec.artifacts.is_empty(), "{:?}", rec.artifacts);

    // Listed in the task's `artifacts`, it is collected once.
    let listed = tempfile::tempdir().expect("tmp");
    let task = task_dir(listed.path(), "hello", "");
    std::fs::write(
        task.join("task.toml"),
        "artifacts = [\"/logs/artifacts/\"]\n[environment]\ndocker_image = \"fake/image\"\n",
    )
    .expect("task.toml");
    let spec = job_spec(listed.path(), &[task], &["oracle"], 1);
    let plan = spec.trials(Default::default(), "fake").remove(0);
    std::fs::create_dir_all(&plan.dir).expect("trial dir");
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec(
        "/solution/solve.sh",
        FakeExec::exits(0).writes("/logs/artifacts/report.txt", b"done\n"),
    );
    let rec = finish(&fake, &plan).await;
    let paths: Vec<&str> = rec.artifacts.iter().map(|a| a.path.as_str()).collect();
    assert_eq!(paths, ["/logs/artifacts/"]);
    assert!(
        plan.dir
            .join("artifacts/logs/artifacts/report.txt")
            .is_file()
    );
}

#[test]
fn a_failed_build_names_the_base_images_it_could_not_get() {
    use super::phases::environment::base_image_note;
    let dockerfile = "ARG BASE=python:3.12-slim\nFROM ${BASE} AS build\nRUN true\nFROM build\nFROM arbiter/tools:1\n";
    let pull = "Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host";
    assert_eq!(
        base_image_note(dockerfile, pull).as_deref(),
        Some(
            "(base images: python:3.12-slim, arbiter/tools:1 — are they available locally? arbiter cannot pull from a registry it cannot reach; pull or build them before the run)"
        )
    );
    assert_eq!(
        base_image_note("FROM arbiter/does-not-exist:1\n", pull).as_deref(),
        Some(
            "(base image: arbiter/does-not-exist:1 — is it available locally? arbiter cannot pull from a registry it cannot reach; pull or build it before the run)"
        )
    );
    // A step that failed had its base image.
    for step in [
        "The command '/bin/sh -c exit 3' returned a non-zero code: 3",
        "process \"/bin/sh -c exit 3\" did not complete successfully: exit code: 3",
    ] {
        assert_eq!(base_image_note("FROM arbiter/busybox:latest\n", step), None);
    }
    assert_eq!(base_image_note("FROM scratch\nCOPY x /x\n", pull), None);
}

#[tokio::test(start_paused = true)]
async fn the_fake_backend_answers_its_scripted_gpu_count() {
    let fake = FakeSandbox::new();
    assert_eq!(fake.gpus().await.expect("gpus"), 0);
    fake.set_gpus(GPUS_UNCOUNTED);
    assert_eq!(fake.gpus().await.expect("gpus"), GPUS_UNCOUNTED);
    fake.fail(Op::Gpus, 3);
    assert!(fake.gpus().await.is_err());
    assert_eq!(fake.count(Op::Gpus), 3);
}

/// A GPU task's containers ask the backend for its GPUs (the agent's and the verifier's; a
/// verifier on another network than the agent's gets a container of its own, otherwise it
/// runs in the agent's, which has them).
#[tokio::test(start_paused = true)]
async fn a_gpu_tasks_containers_request_its_gpus() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(
        root.path(),
        "gpus = 2\n[verifier]\nnetwork_mode = \"no-network\"\n",
    );
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec("/solution/solve.sh", FakeExec::exits(0));
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    fake.set_gpus(2);
    let rec = finish(&fake, &plan).await;
    assert!(rec.passed(), "{rec:#?}");
    let specs = fake.specs();
    let gpus_of = |role: &str| {
        specs
            .iter()
            .filter(|s| s.owner.role.as_str() == role)
            .map(|s| s.limits.gpus)
            .collect::<Vec<_>>()
    };
    assert_eq!(gpus_of("agent"), vec![2]);
    assert_eq!(gpus_of("verifier"), vec![2]);
}

/// Index in the call log of the first exec whose detail contains `pattern`.
fn first_exec(fake: &FakeSandbox, pattern: &str) -> Option<usize> {
    fake.calls()
        .iter()
        .position(|(op, d)| *op == Op::Exec && d.contains(pattern))
}

#[tokio::test(start_paused = true)]
async fn the_environment_healthcheck_runs_in_the_task_container_before_the_agent() {
    let root = tempfile::tempdir().expect("tmp");
    let plan = plan_in(
        root.path(),
        "env = { PORT = \"8000\" }\n[environment.healthcheck]\ncommand = \"probe-ready\"\n",
    );
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec("probe-ready", FakeExec::exits(0));
    fake.on_exec(
        "/tests/test.sh",
        FakeExec::exits(0).writes("/logs/verifier/reward.txt", b"1\n"),
    );
    let rec = finish(&fake, &plan).await;
    assert_eq!(rec.verifier.status, VerifierStatus::Passed, "{rec:#?}");
    let probe = first_exec(&fake, "probe-ready").expect("the healthcheck ran");
    let solve = first_exec(&fake, "/solution/solve.sh").expect("the agent ran");
    assert!(probe < solve, "{:?}", fake.calls());
    assert_eq!(get(&env_of(&fake, "probe-ready"), "PORT"), Some("8000"));
}

#[tokio::test(start_paused = true)]
async fn a_failing_environment_healthcheck_is_an_environment_error_and_the_agent_never_runs() {
    let root = tempfile::tempdir().expect("tmp");
    // Harbor's semantics: failures in the 10 s start period do not count (a probe every 2 s),
    // then 2 failures in a row 3 s apart fail it.
    let plan = plan_in(
        root.path(),
        "[environment.healthcheck]\ncommand = \"probe-ready\"\nstart_period_sec = 10\nstart_interval_sec = 2\ninterval_sec = 3\nretries = 2\n",
    );
    let fake = Arc::new(FakeSandbox::new());
    fake.on_exec("probe-ready", FakeExec::exits(1));
    let started = tokio::time::Instant::now();
    let rec = finish(&fake, &plan).await;
    let probes = fake
        .calls()
        .iter()
        .filter(|(op, d)| *op == Op::Exec && d.contains("probe-ready"))
        .count();
    assert_eq!(probes, 7, "5 in the start period, then 2 counted");
    assert_eq!(started.elapsed(), std::time::Duration::from_secs(13));
    let infra = rec.infra_error.as_ref().expect("an infrastructure error");
    assert_eq!(infra.phase, Phase::Environment);
    assert_eq!(
        infra.message,
        "[environment.healthcheck] failed: `probe-ready` failed 2 times in a row"
    );
    assert_eq!(first_exec(&fake, "/solution/solve.sh"), None);
    assert!(fake.live().is_empty());
}
