//! Compose as Harbor's Docker runtime reads it, on fixtures shaped like the public tasks:
//! only `environment/docker-compose.yaml` is a compose file; compose's interpolation (an unset
//! `${VAR}` is empty, with one warning naming the file and key); host devices and privileges
//! refused; the healthcheck messages.

use super::*;

/// A variable no test environment sets.
const UNSET: &str = "ARBITER_COMPOSE_TEST_SURELY_UNSET";

fn shown_warnings(f: &Fixture, task: &Task) -> Vec<String> {
    task.warnings.iter().map(|w| f.shown_text(w)).collect()
}

#[test]
fn a_docker_compose_yml_is_task_data_never_read() {
    // TermiGen ships broken compose files for the agent to fix, and JSON under the name.
    let broken = "version: '3.8'\nservices:\n  web:\n    image: nginx:latest\n    environment:\n      - APP_DEBUG=${DEBUG_MODE\n      - API_URL=${API_ENDPOINT:-http://localhost\n";
    for (name, content) in [
        ("docker-compose.yml", broken),
        (
            "docker-compose.yml",
            "{\"api_gateway\": {\"interval\": \"30s\"}}\n",
        ),
        ("compose.yaml", "services:\n  db:\n    image: postgres:16\n"),
        ("compose.yml", "services: [not, a, mapping]\n"),
    ] {
        let f = Fixture::new("");
        f.write(&format!("environment/{name}"), content);
        let task = f.load();
        assert_eq!(task.environment.compose, None, "{name}");
        assert!(task.warnings.is_empty(), "{name}: {:?}", task.warnings);
    }
    // Beside the real one, it is still data: only `.yaml` is read.
    let f = Fixture::new("");
    f.write("environment/docker-compose.yml", broken);
    f.write(
        "environment/docker-compose.yaml",
        "services:\n  cache:\n    image: redis:7\n",
    );
    let task = f.load();
    let c = task.environment.compose.as_ref().expect("compose");
    assert!(c.file.ends_with("environment/docker-compose.yaml"));
    assert_eq!(
        c.sidecars().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["cache"]
    );
}

#[test]
fn an_unset_variable_in_the_main_environment_is_empty_with_one_warning() {
    // SkillsBench's gh-repo-analytics: a token from the host, no env table in task.toml.
    let f = Fixture::new("[environment]\nallow_internet = true\n");
    f.write(
        "environment/docker-compose.yaml",
        &format!(
            "services:\n  main:\n    build:\n      context: ${{CONTEXT_DIR}}\n    image: ${{MAIN_IMAGE_NAME}}\n    command: [ \"sh\", \"-c\", \"sleep infinity\" ]\n    environment:\n      - GH_TOKEN=${{{UNSET}}}\n      - SEARCH=${{{UNSET}_Q:-stars:>100}}\n      - PLAIN=${UNSET}_suffix\n      - TESTS=${{TEST_DIR}}\n"
        ),
    );
    let task = f.load();
    let env = &task.environment.env;
    assert_eq!(env["GH_TOKEN"], "");
    assert_eq!(env["SEARCH"], "stars:>100");
    assert_eq!(env["PLAIN"], "", "`$NAME_suffix` names one variable");
    assert_eq!(env["TESTS"], "/tests", "Harbor's TEST_DIR");
    assert_eq!(
        shown_warnings(&f, &task),
        [
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.main.environment.GH_TOKEN: ${{{UNSET}}} is not set; using an empty string"
            ),
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.main.environment.PLAIN: ${{{UNSET}_suffix}} is not set; using an empty string"
            ),
        ]
    );
    // The job's check of task env references passes: nothing unresolvable is left.
    assert_eq!(
        crate::agent::resolve_env(env).map(|v| v.len()),
        Ok(env.len())
    );
}

#[test]
fn host_values_stay_references_so_no_secret_is_written() {
    let path = std::env::var("PATH").expect("PATH is set for tests");
    assert!(path.len() >= 4);
    let f = compose(&format!(
        "services:\n  main:\n    environment:\n      API_TOKEN: ${{PATH}}\n      MIXED: \"pre-${{PATH:-x}}-post\"\n      DEFAULTED: ${{{UNSET}:-fallback}}\n      HARD: ${{{UNSET}-hard}}\n      ALT: ${{PATH:+on}}\n      COST: \"$$5\"\n      PATH:\n      {UNSET}:\n"
    ));
    let task = f.load();
    let env = &task.environment.env;
    assert_eq!(env["API_TOKEN"], "${PATH}");
    assert_eq!(env["MIXED"], "pre-${PATH}-post");
    assert_eq!(env["DEFAULTED"], "fallback");
    assert_eq!(env["HARD"], "hard");
    assert_eq!(env["ALT"], "on");
    assert_eq!(env["COST"], "$5");
    assert_eq!(
        env["PATH"], "${PATH}",
        "a bare name passes the host's through"
    );
    assert!(!env.contains_key(UNSET), "a bare unset name is left out");
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);
    // Neither the task (written into job records) nor the redacted env holds the value.
    let json = serde_json::to_string(&task).expect("json");
    assert!(
        !json.contains(&path),
        "the host's PATH leaked into the task"
    );
    let redacted = crate::agent::redact_env(env);
    assert!(redacted.values().all(|v| !v.contains(&path)));
    // Resolved when the trial runs, and then a secret to scrub.
    let resolved = crate::agent::resolve_env(env).expect("resolves");
    assert!(resolved.contains(&("API_TOKEN".to_string(), path.clone())));
    assert!(crate::agent::secret_values(env, &resolved).contains(&path));
}

#[test]
fn required_and_malformed_references_refuse_the_task_naming_the_compose_file() {
    let cases: &[(String, String)] = &[
        (
            format!(
                "services:\n  main:\n    environment:\n      - KEY=${{{UNSET}:?set {UNSET} first}}\n"
            ),
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.main.environment.KEY: required variable {UNSET} is missing a value: set {UNSET} first"
            ),
        ),
        (
            format!("services:\n  db:\n    image: \"postgres:${{{UNSET}?a tag}}\"\n"),
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.db.image: required variable {UNSET} is missing a value: a tag"
            ),
        ),
        (
            "services:\n  main:\n    environment:\n      - APP_DEBUG=${DEBUG_MODE\n".to_string(),
            "tasks/foo/environment/docker-compose.yaml:services.main.environment.APP_DEBUG: invalid interpolation format in \"${DEBUG_MODE\": no closing \"}\"".to_string(),
        ),
        (
            "services:\n  main:\n    environment:\n      - LITERAL=$${HOME}\n".to_string(),
            "tasks/foo/environment/docker-compose.yaml:services.main.environment.LITERAL: \"$${HOME}\" leaves a literal \"${\" in the value, which arbiter's [environment] env cannot hold".to_string(),
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(&compose(yaml).error(), expected, "for compose:\n{yaml}");
    }
}

#[test]
fn sidecar_values_warn_once_per_key_and_keep_harbors_variables() {
    // The cookbook's simulated-user recipe: a sidecar that reads the host's API key.
    let f = compose(&format!(
        "services:\n  main:\n    depends_on:\n      user-server:\n        condition: service_healthy\n  user-server:\n    image: ${{MAIN_IMAGE_NAME}}\n    command: [\"serve\", \"--cpus=${{CPUS}}\", \"--key=${{{UNSET}}}\", \"${{{UNSET}}}\"]\n    environment:\n      - ANTHROPIC_API_KEY=${{{UNSET}_KEY}}\n      - SIM_USER_MODEL=${{{UNSET}_MODEL:-}}\n      - LOGS=${{HOST_AGENT_LOGS_PATH}}\n    healthcheck:\n      test: [\"CMD-SHELL\", \"pg_isready -U $$POSTGRES_USER\"]\n"
    ));
    let task = f.load();
    assert_eq!(
        shown_warnings(&f, &task),
        [
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.user-server.environment.ANTHROPIC_API_KEY: ${{{UNSET}_KEY}} is not set; using an empty string"
            ),
            "tasks/foo/environment/docker-compose.yaml:services.user-server.environment.LOGS: ${HOST_AGENT_LOGS_PATH} is Harbor's, with no value in arbiter here; using an empty string".to_string(),
            format!(
                "tasks/foo/environment/docker-compose.yaml:services.user-server.command: ${{{UNSET}}} is not set; using an empty string"
            ),
        ]
    );
    // Kept as written: the trial interpolates them when it starts the sidecar.
    let c = task.environment.compose.as_ref().expect("compose");
    assert_eq!(
        c.services["user-server"].environment["ANTHROPIC_API_KEY"].as_deref(),
        Some(format!("${{{UNSET}_KEY}}").as_str())
    );
    // A sidecar's environment is not the task container's.
    assert!(!task.environment.env.contains_key("ANTHROPIC_API_KEY"));
}

#[test]
fn gpu_passthrough_and_privileges_are_refused_naming_the_key() {
    // InfraBench's main service: an AMD GPU passed through with devices, group_add, ipc and
    // cap_add; the first of them is named.
    let infrabench = "services:\n  main:\n    devices:\n      - \"/dev/kfd\"\n      - \"/dev/dri\"\n    group_add:\n      - \"video\"\n    security_opt:\n      - \"seccomp=unconfined\"\n    cap_add:\n      - \"SYS_PTRACE\"\n    ipc: host\n    environment:\n      INFRABENCH_GPU_POOL: /gpu_pool\n      INFRABENCH_GPU_COUNT: \"${INFRABENCH_GPU_COUNT:-8}\"\n    volumes:\n      - \"${INFRABENCH_GPU_POOL_HOST:-/tmp/infrabench_gpu_pool}:/gpu_pool\"\n    command: [\"/infrabench/claim_gpu.sh\"]\n";
    let f = Fixture::new("[environment]\ncpus = 4\nmemory_mb = 16384\ngpus = 0\n");
    f.write("environment/docker-compose.yaml", infrabench);
    assert_eq!(
        f.error(),
        "tasks/foo/environment/docker-compose.yaml:services.main.devices: asks for host devices in the container (GPU passthrough such as /dev/kfd, /dev/dri), which arbiter does not grant; the task is refused rather than run without it"
    );
    let cases: &[(&str, &str)] = &[
        (
            "services:\n  main:\n    group_add: [video]\n",
            "services.main.group_add: asks for supplementary groups for the container's processes (device access)",
        ),
        (
            "services:\n  main:\n    ipc: host\n",
            "services.main.ipc: asks for an IPC namespace other than the container's own",
        ),
        (
            "services:\n  db:\n    image: x\n    cap_add: [SYS_PTRACE]\n",
            "services.db.cap_add: asks for added Linux capabilities",
        ),
        (
            "services:\n  db:\n    image: x\n    privileged: true\n",
            "services.db.privileged: asks for a privileged container",
        ),
    ];
    for (yaml, expected) in cases {
        let e = compose(yaml).error();
        assert!(
            e.starts_with(&format!(
                "tasks/foo/environment/docker-compose.yaml:{expected}"
            )),
            "{e}"
        );
    }
    // Compose's defaults ask for nothing.
    for yaml in [
        "services:\n  main:\n    ipc: private\n",
        "services:\n  main:\n    privileged: false\n",
        "services:\n  main:\n    cap_add: []\n",
    ] {
        compose(yaml).load();
    }
}

#[test]
fn the_healthcheck_messages_say_what_arbiter_runs() {
    let f = Fixture::new(
        "[environment.healthcheck]\ncommand = \"curl -fs http://127.0.0.1:8000/health\"\nretries = 5\n[verifier]\nenvironment_mode = \"separate\"\n[verifier.environment.healthcheck]\ncommand = \"true\"\n",
    );
    f.write(
        "environment/docker-compose.yaml",
        "services:\n  main:\n    healthcheck:\n      test: [\"CMD\", \"true\"]\n",
    );
    let task = f.load();
    assert_eq!(
        task.environment.healthcheck.as_ref().map(|h| h.retries),
        Some(5)
    );
    assert_eq!(
        shown_warnings(&f, &task),
        [
            "tasks/foo/task.toml:verifier.environment.healthcheck: not run by arbiter, ignored: only [environment.healthcheck] is run (in the agent's container, before the agent)",
            "tasks/foo/environment/docker-compose.yaml:services.main.healthcheck: not run by arbiter, ignored: the agent's container is checked by task.toml's [environment.healthcheck], which arbiter runs in it before the agent starts",
        ]
    );
}

/// A compose task: `environment/docker-compose.yaml` with `yaml`.
fn compose(yaml: &str) -> Fixture {
    let f = Fixture::new("");
    f.write("environment/docker-compose.yaml", yaml);
    f
}
