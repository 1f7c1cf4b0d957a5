//! The real-shaped Harbor tasks under `tests/fixtures/harbor-tasks/` load
//! with every key carried into the model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::*;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/harbor-tasks")
}

fn load_fixture(name: &str) -> Task {
    match load(&fixtures().join(name)) {
        Ok(task) => task,
        Err(e) => panic!("{name}: {e}"),
    }
}

/// Warnings with the fixture directory shown as `harbor-tasks`.
fn warnings(task: &Task) -> Vec<String> {
    let root = fixtures().display().to_string();
    task.warnings
        .iter()
        .map(|w| w.replace(&root, "harbor-tasks"))
        .collect()
}

#[test]
fn multi_step_task_loads_its_steps_in_order() {
    let task = load_fixture("multi-step");
    assert!(task.is_multi_step());
    assert_eq!(task.instruction, "", "no task-level instruction.md");
    assert_eq!(task.multi_step_reward, MultiStepReward::Final);
    let names: Vec<&str> = task.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["scaffold", "implement"]);

    let scaffold = &task.steps[0];
    assert_eq!(scaffold.dir, task.dir.join("steps/scaffold"));
    assert_eq!(
        scaffold.instruction,
        "Create /app/hello.txt containing the word hello.\n"
    );
    assert_eq!(scaffold.agent.timeout_sec, 30.0);
    assert_eq!(scaffold.verifier.timeout_sec, 20.0);
    assert_eq!(
        scaffold.verifier.env,
        BTreeMap::from([
            ("MODE".to_string(), "strict".to_string()),
            ("STEP".to_string(), "scaffold".to_string()),
        ])
    );
    assert_eq!(
        scaffold.tests_dir,
        Some(task.dir.join("steps/scaffold/tests"))
    );
    assert_eq!(
        scaffold.test_script,
        task.dir.join("steps/scaffold/tests/test.sh")
    );
    assert_eq!(
        scaffold.solution_dir,
        Some(task.dir.join("steps/scaffold/solution"))
    );
    assert_eq!(
        scaffold.setup_script,
        Some(task.dir.join("steps/scaffold/workdir/setup.sh"))
    );
    assert_eq!(scaffold.min_reward, Some(MinReward::Reward(1.0)));

    let implement = &task.steps[1];
    assert_eq!(implement.agent.timeout_sec, 120.0, "falls back to [agent]");
    assert_eq!(implement.agent.user.as_deref(), Some("agent"));
    assert_eq!(
        implement.verifier.timeout_sec, 600.0,
        "Harbor's step default"
    );
    assert_eq!(implement.verifier.env["MODE"], "strict");
    assert_eq!(implement.tests_dir, None);
    assert_eq!(implement.test_script, task.dir.join("tests/test.sh"));
    assert_eq!(implement.workdir_dir, None);
    assert_eq!(
        implement.min_reward,
        Some(MinReward::PerKey(BTreeMap::from([
            ("reward".to_string(), 0.5),
            ("style".to_string(), 1.0),
        ])))
    );
    let health = implement.healthcheck.as_ref().expect("step healthcheck");
    assert_eq!(health.command, "test -f /app/hello.txt");
    assert_eq!((health.interval_sec, health.retries), (0.0, 1));
    assert_eq!(health.timeout_sec, 30.0);
    assert_eq!(implement.artifacts, vec!["/app/notes.md"]);
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);
}

#[test]
fn compose_task_has_typed_services_and_its_main_service() {
    let task = load_fixture("compose-sidecar");
    let env = &task.environment;
    assert_eq!(
        env.source,
        ImageSource::Build {
            context: task.dir.join("environment"),
            dockerfile: task.dir.join("environment/Dockerfile"),
        },
        "main is built from ${{CONTEXT_DIR}}"
    );
    let compose = env.compose.as_ref().expect("compose");
    assert_eq!(
        compose.file,
        task.dir.join("environment/docker-compose.yaml")
    );
    assert_eq!(compose.main, "main");
    assert_eq!(compose.start_order(), ["api", "db", "main"]);
    let sidecars: Vec<&str> = compose.sidecars().map(|(n, _)| n.as_str()).collect();
    assert_eq!(sidecars, ["api", "db"]);

    let main = compose.main_service().expect("main");
    assert_eq!(
        main.image, None,
        "Harbor's ${{MAIN_IMAGE_NAME}} placeholder"
    );
    assert_eq!(
        main.command.as_deref(),
        Some(
            &[
                "sh".to_string(),
                "-c".to_string(),
                "sleep infinity".to_string()
            ][..]
        )
    );
    assert_eq!(
        main.environment,
        BTreeMap::from([
            (
                "API_URL".to_string(),
                Some("http://127.0.0.1:8080".to_string())
            ),
            ("HOST_TOKEN".to_string(), None),
        ])
    );
    assert_eq!(
        main.depends_on,
        vec![
            Dependency {
                service: "api".into(),
                condition: DependsCondition::Healthy
            },
            Dependency {
                service: "db".into(),
                condition: DependsCondition::Started
            },
        ]
    );

    let api = &compose.services["api"];
    let build = api.build.as_ref().expect("api build");
    assert_eq!(build.context, task.dir.join("environment/api"));
    assert_eq!(
        build.dockerfile,
        task.dir.join("environment/api/Dockerfile")
    );
    assert_eq!(api.environment["TZ"].as_deref(), Some("UTC"), "merge key");
    assert_eq!(api.environment["PORT"].as_deref(), Some("8080"));
    let health = api.healthcheck.as_ref().expect("api healthcheck");
    assert!(matches!(&health.test, HealthTest::Shell(cmd) if cmd.starts_with("python3 -c")));
    assert_eq!(
        (
            health.interval_sec,
            health.timeout_sec,
            health.retries,
            health.start_period_sec
        ),
        (Some(2.0), Some(5.0), Some(10), Some(90.0))
    );

    // The main service's environment is the task container's env.
    assert_eq!(
        task.environment.env.get("API_URL").map(String::as_str),
        Some("http://127.0.0.1:8080")
    );
    // A bare `HOST_TOKEN` passes arbiter's variable through when it is set (compose); it is
    // not set here, so the container does not get it.
    assert_eq!(task.environment.env.get("HOST_TOKEN"), None);

    let db = &compose.services["db"];
    assert_eq!(db.image.as_deref(), Some("arbiter/debian:bookworm"));
    assert_eq!(
        db.entrypoint.as_deref(),
        Some(&["/bin/sh".to_string(), "-c".to_string()][..])
    );
    assert_eq!(
        db.command.as_deref(),
        Some(&["sleep infinity".to_string()][..])
    );
    assert_eq!(db.working_dir.as_deref(), Some("/var/lib/db"));

    assert_eq!(
        warnings(&task),
        vec![
            "harbor-tasks/compose-sidecar/environment/docker-compose.yaml:services.main.volumes: host and named volumes are not supported by arbiter, ignored",
            "harbor-tasks/compose-sidecar/environment/docker-compose.yaml:services.api.ports: not published: sidecars share the trial's network scope and reach each other on 127.0.0.1 (SPEC §2.1), ignored",
        ]
    );
}

#[test]
fn env_tables_are_carried_unresolved() {
    let task = load_fixture("env-tables");
    let env = &task.environment.env;
    assert_eq!(env["TOOL_HOME"], "/opt/tool");
    assert_eq!(env["PATH"], "/opt/tool/bin:/usr/local/bin:/usr/bin:/bin");
    assert_eq!(env["LOG_LEVEL"], "${ARBITER_FIXTURE_LOG_LEVEL:-info}");
    assert_eq!(task.solution_env["ANSWER"], "42");
    let resolved = crate::agent::resolve_env(env).expect("defaults resolve");
    assert!(resolved.contains(&("LOG_LEVEL".to_string(), "info".to_string())));
    assert_eq!(task.environment.network, NetworkMode::NoNetwork);
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);
}

#[test]
fn allowlist_and_gpus_are_in_the_model() {
    let task = load_fixture("allowlist");
    let env = &task.environment;
    assert_eq!(env.network, NetworkMode::Allowlist, "[agent] allowed_hosts");
    assert_eq!(env.allowed_hosts, ["pypi.org", "files.pythonhosted.org"]);
    assert_eq!(task.verifier.network, NetworkMode::Allowlist);
    assert_eq!(
        task.verifier.allowed_hosts,
        ["*.githubusercontent.com", "203.0.113.0/24"]
    );
    assert_eq!(env.gpus, 1);
    assert_eq!(env.gpu_types, ["H100", "A100"]);
    // Served by arbiter's egress proxy: nothing to warn about.
    assert!(warnings(&task).is_empty(), "{:?}", warnings(&task));
}

#[test]
fn infrabench_extra_keys_are_kept_with_warnings() {
    let task = load_fixture("infrabench-extras");
    assert_eq!(task.metadata["environment"]["nodes"], 3);
    assert_eq!(task.metadata["environment"]["base_image"], "ubuntu:22.04");
    assert_eq!(
        task.metadata["environment"]["node_config"]["role"],
        "worker"
    );
    assert_eq!(task.metadata["agent"]["network"], "cluster");
    assert_eq!(task.environment.cpus, 2.0);
    assert_eq!(
        warnings(&task),
        vec![
            "harbor-tasks/infrabench-extras/task.toml:agent.network: unknown key, kept as metadata",
            "harbor-tasks/infrabench-extras/task.toml:environment.base_image: unknown key, kept as metadata",
            "harbor-tasks/infrabench-extras/task.toml:environment.node_config: unknown key, kept as metadata",
            "harbor-tasks/infrabench-extras/task.toml:environment.nodes: unknown key, kept as metadata",
        ]
    );
    let dockerfile = std::fs::read_to_string(task.dir.join("environment/Dockerfile")).unwrap();
    assert_eq!(dockerfile_base_images(&dockerfile), ["ubuntu:22.04"]);
}

#[test]
fn dataset_dirs_expand_to_their_tasks() {
    let root = fixtures();
    let mini = root.join("dataset-mini");
    assert_eq!(
        expand_task_dirs(std::slice::from_ref(&mini)).unwrap(),
        vec![mini.join("task-10"), mini.join("task-2")],
        "dataset.toml order"
    );
    // The fixtures directory itself is a dataset without a manifest: natural
    // order, subdirectories without task.toml (dataset-mini) skipped.
    let all = expand_task_dirs(std::slice::from_ref(&root)).unwrap();
    let names: Vec<String> = all
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "allowlist",
            "compose-sidecar",
            "env-tables",
            "infrabench-extras",
            "multi-step"
        ]
    );
    let tasks = load_all(&all).expect("every fixture loads");
    assert_eq!(tasks.len(), 5);
    // A task directory stays as given.
    let one = root.join("env-tables");
    assert_eq!(
        expand_task_dirs(std::slice::from_ref(&one)).unwrap(),
        vec![one]
    );
}
