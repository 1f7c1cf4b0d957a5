//! Harbor parity, table-driven: every new key and every new error.

use std::fs;

use super::*;

/// A two-step task: `steps/one` and `steps/two` with instructions; the
/// shared `tests/test.sh` of the fixture serves both.
fn two_steps(extra: &str) -> Fixture {
    let f = Fixture::new(&format!(
        "[[steps]]\nname = \"one\"\n[[steps]]\nname = \"two\"\n{extra}"
    ));
    f.write("steps/one/instruction.md", "First.\n");
    f.write("steps/two/instruction.md", "Second.\n");
    f
}

#[test]
fn new_keys_give_exact_one_line_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "[environment]\nos = \"windows\"\nworkdir = 'C:\\app'\n",
            "tasks/foo/task.toml:environment.os: \"windows\" is not supported (arbiter runs Linux containers only)",
        ),
        (
            "[environment]\nworkdir = 'C:\\app'\nos = \"Windows\"\n",
            "tasks/foo/task.toml:environment.os: \"Windows\" is not supported (arbiter runs Linux containers only)",
        ),
        (
            "[environment]\ngpus = -1\n",
            "tasks/foo/task.toml:environment.gpus: must be between 0 and 1024 (got -1)",
        ),
        (
            "[environment]\ngpus = \"1\"\n",
            "tasks/foo/task.toml:environment.gpus: expected an integer, found string",
        ),
        (
            "[environment]\ngpu_types = \"H100\"\n",
            "tasks/foo/task.toml:environment.gpu_types: expected an array, found string",
        ),
        (
            "[environment]\ngpus = 1\ngpu_types = [\"\"]\n",
            "tasks/foo/task.toml:environment.gpu_types[0]: must not be empty",
        ),
        (
            "[environment]\nallowed_hosts = [\"https://pypi.org\"]\n",
            "tasks/foo/task.toml:environment.allowed_hosts[0]: must be a host name, IP address or CIDR range, not a URL (got \"https://pypi.org\")",
        ),
        (
            "[agent]\nnetwork_mode = \"public\"\nallowed_hosts = [\"pypi.org\"]\n",
            "tasks/foo/task.toml:agent.allowed_hosts: only used with network_mode = \"allowlist\" (network_mode is \"bridge\")",
        ),
        (
            "[verifier]\nallowed_hosts = [\"pypi.org:443\"]\n",
            "tasks/foo/task.toml:verifier.allowed_hosts[0]: must be a host name or IP address, without a port (got \"pypi.org:443\")",
        ),
        (
            "[environment]\nallow_internet = false\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n",
            "tasks/foo/task.toml:environment.allow_internet: conflicts with network_mode = \"allowlist\" (allow_internet = false means no-network; remove one of them)",
        ),
        (
            "[environment.healthcheck]\ninterval_sec = 1\n",
            "tasks/foo/task.toml:environment.healthcheck.command: missing (a healthcheck needs the shell command to run)",
        ),
        (
            "[environment.healthcheck]\ncommand = \"true\"\ninterval_sec = -1\n",
            "tasks/foo/task.toml:environment.healthcheck.interval_sec: must be a number of seconds >= 0 (got -1)",
        ),
        (
            "[environment.healthcheck]\ncommand = \"true\"\nretries = -2\n",
            "tasks/foo/task.toml:environment.healthcheck.retries: must not be negative (got -2)",
        ),
        (
            "[environment]\nbuild_timeout_secs = 5\n",
            "tasks/foo/task.toml:environment.build_timeout_secs: unknown key (did you mean build_timeout_sec?)",
        ),
        (
            "[completion]\nfrobnicate = 1\n",
            "tasks/foo/task.toml:completion.frobnicate: unknown key (expected one of: mode, deliverables, validation)",
        ),
        (
            "multi_step_reward_strategy = \"median\"\n",
            "tasks/foo/task.toml:multi_step_reward_strategy: unknown value \"median\" (expected one of: mean, final)",
        ),
        (
            "steps = \"one\"\n",
            "tasks/foo/task.toml:steps: expected an array, found string",
        ),
        (
            "[[steps]]\nmin_reward = 1\n",
            "tasks/foo/task.toml:steps[0].name: missing (every step needs a name: its directory under steps/)",
        ),
        (
            "[[steps]]\nname = \"a/b\"\n",
            "tasks/foo/task.toml:steps[0].name: invalid character \"/\" in \"a/b\" (a step name is one directory name)",
        ),
        (
            "[[steps]]\nname = \"..\"\n",
            "tasks/foo/task.toml:steps[0].name: must not be \".\" or \"..\" or end with a dot or space (got \"..\")",
        ),
        (
            "[[steps]]\nname = \"com1\"\n",
            "tasks/foo/task.toml:steps[0].name: \"com1\" is a reserved device name",
        ),
        (
            "[[steps]]\nname = \"a\u{20ac}\"\n[[steps]]\nname = \"LPT1.txt\"\n",
            "tasks/foo/task.toml:steps[1].name: \"LPT1.txt\" is a reserved device name",
        ),
        (
            "[[steps]]\nname = \"One\"\n[[steps]]\nname = \"one\"\n",
            "tasks/foo/task.toml:steps[1].name: duplicate step name \"one\" (names must differ in more than case)",
        ),
        (
            "[[steps]]\nname = \"one\"\nmin_reward = \"high\"\n",
            "tasks/foo/task.toml:steps[0].min_reward: expected a number or a table of numbers, found string",
        ),
        (
            "[[steps]]\nname = \"one\"\nmin_reward = { reward = nan }\n",
            "tasks/foo/task.toml:steps[0].min_reward.reward: must be a finite number (got nan)",
        ),
        (
            "[[steps]]\nname = \"one\"\n[steps.agent]\ntimeout_sec = 0\n",
            "tasks/foo/task.toml:steps[0].agent.timeout_sec: must be greater than 0 (got 0)",
        ),
        (
            "[[steps]]\nname = \"one\"\n[steps.agent]\ntimeout_secs = 5\n",
            "tasks/foo/task.toml:steps[0].agent.timeout_secs: unknown key (did you mean timeout_sec?)",
        ),
        (
            "[[steps]]\nname = \"one\"\n[steps.verifier]\nenvironment_mode = \"live\"\n[steps.verifier.environment]\ncpus = 2\n",
            "tasks/foo/task.toml:steps[0].verifier.environment: only used with environment_mode = \"separate\" (environment_mode is \"live\")",
        ),
        (
            "[[steps]]\nname = \"one\"\nartifacts = [\"rel\"]\n",
            "tasks/foo/task.toml:steps[0].artifacts[0]: must be an absolute path inside the container (got \"rel\")",
        ),
        (
            "[[steps]]\nname = \"one\"\n",
            "tasks/foo/steps/one/instruction.md:file: missing (step \"one\" of task.toml needs the prompt given to the agent for that step)",
        ),
    ];
    for (toml, expected) in cases {
        assert_eq!(&error_for(toml), expected, "for task.toml:\n{toml}");
    }
}

#[test]
fn step_files_are_checked_and_steps_need_no_task_instruction_or_tests() {
    let f = two_steps("");
    f.remove("instruction.md");
    f.remove("tests/test.sh");
    assert_eq!(
        f.error(),
        "tasks/foo/steps/one/tests/test.sh:file: missing (step \"one\" has no verifier entry point; add it, or tests/test.sh for every step)"
    );
    f.write(
        "steps/one/tests/test.sh",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    f.write(
        "steps/two/tests/test.sh",
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let task = f.load();
    assert_eq!(task.instruction, "");
    assert_eq!(task.steps.len(), 2);
    assert_eq!(task.steps[1].instruction, "Second.\n");
    assert_eq!(task.multi_step_reward, MultiStepReward::Mean);

    f.write("steps/two/instruction.md", " \n");
    assert_eq!(
        f.error(),
        "tasks/foo/steps/two/instruction.md:file: empty (step \"two\" of task.toml needs the prompt given to the agent for that step)"
    );
    f.write("steps/two/instruction.md", "Second.\n");
    f.write("steps/two/solution/notes.md", "x");
    assert_eq!(
        f.error(),
        "tasks/foo/steps/two/solution/solve.sh:file: missing (steps/two/solution/ exists, so the oracle agent needs it)"
    );
}

#[test]
fn steps_fall_back_to_the_task_tables() {
    let f = two_steps(
        "[[steps]]\nname = \"three\"\n[steps.agent]\nnetwork_mode = \"host\"\nuser = \"root\"\n[steps.verifier]\nenvironment_mode = \"separate\"\ntimeout_sec = 5\nuser = \"judge\"\n[steps.verifier.env]\nK = \"step\"\n\
         [agent]\ntimeout_sec = 77\nuser = \"agent\"\n[verifier]\nuser = \"root\"\nnetwork_mode = \"bridge\"\n[verifier.env]\nK = \"task\"\nJ = \"task\"\n[environment]\nnetwork_mode = \"public\"\n",
    );
    f.write("steps/three/instruction.md", "Third.\n");
    f.write("steps/three/tests/Dockerfile", "FROM python:3.12\n");
    let task = f.load();
    let one = &task.steps[0];
    assert_eq!(one.agent, task.agent);
    assert_eq!(one.network, NetworkMode::Bridge);
    assert_eq!(one.verifier.mode, VerifierMode::Snapshot);
    assert_eq!(one.verifier.user.as_deref(), Some("root"));
    assert_eq!(one.verifier.network, NetworkMode::Bridge);
    assert_eq!(one.verifier.env["K"], "task");
    assert_eq!(one.verifier.environment, None);

    let three = &task.steps[2];
    assert_eq!(three.agent.timeout_sec, 77.0);
    assert_eq!(three.agent.user.as_deref(), Some("root"));
    assert_eq!(three.network, NetworkMode::Host);
    assert_eq!(three.verifier.timeout_sec, 5.0);
    assert_eq!(three.verifier.user.as_deref(), Some("judge"));
    assert_eq!(
        (
            three.verifier.env["K"].as_str(),
            three.verifier.env["J"].as_str()
        ),
        ("step", "task")
    );
    assert_eq!(three.verifier.mode, VerifierMode::Separate);
    let env = three.verifier.environment.as_ref().expect("separate");
    assert_eq!(
        env.source,
        ImageSource::Build {
            context: task.dir.join("steps/three/tests"),
            dockerfile: task.dir.join("steps/three/tests/Dockerfile"),
        }
    );
    assert_eq!(env.network, NetworkMode::Bridge);
}

#[test]
fn checksum_covers_step_files() {
    let f = two_steps("");
    let first = f.load().checksum;
    f.write("steps/two/instruction.md", "Second, edited.\n");
    assert_ne!(f.load().checksum, first);
}

#[cfg(unix)]
#[test]
fn step_symlinks_must_stay_inside() {
    let f = two_steps("");
    std::os::unix::fs::symlink("/etc/hostname", f.dir.join("steps/one/leak")).unwrap();
    assert_eq!(
        f.error(),
        "tasks/foo/steps/one/leak:symlink: points outside the task directory (target: /etc/hostname)"
    );
}

#[test]
fn harbor_keys_are_parsed_into_the_model() {
    let task = Fixture::new(
        "[environment]\ngpus = 2\ngpu_types = [\"H100\"]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"PyPI.org\", \"pypi.org\"]\n\
         [environment.env]\nA = \"${HOME:-/root}\"\n\
         [environment.healthcheck]\ncommand = \"test -f /ready\"\nstart_period_sec = 2\n\
         [verifier]\nnetwork_mode = \"no-network\"\n",
    )
    .load();
    let env = &task.environment;
    assert_eq!(
        (env.gpus, env.gpu_types.as_slice()),
        (2, &["H100".to_string()][..])
    );
    assert_eq!(env.network, NetworkMode::Allowlist);
    assert_eq!(env.allowed_hosts, ["pypi.org"], "normalized, deduplicated");
    assert_eq!(env.env["A"], "${HOME:-/root}");
    assert_eq!(
        env.healthcheck,
        Some(Healthcheck {
            command: "test -f /ready".into(),
            interval_sec: 5.0,
            timeout_sec: 30.0,
            start_period_sec: 2.0,
            start_interval_sec: 5.0,
            retries: 3,
        })
    );
    assert_eq!(task.verifier.network, NetworkMode::NoNetwork);
    assert!(task.verifier.allowed_hosts.is_empty());

    // An allowlist with nothing allowed, and GPU types without GPUs: loud.
    let f = Fixture::new(
        "[agent]\nnetwork_mode = \"allowlist\"\n[environment]\ngpu_types = [\"T4\"]\n",
    );
    let task = f.load();
    let shown: Vec<String> = task.warnings.iter().map(|w| f.shown_text(w)).collect();
    assert_eq!(
        shown,
        vec![
            "tasks/foo/task.toml:agent.network_mode: \"allowlist\" with no allowed_hosts: no host is reachable",
            "tasks/foo/task.toml:environment.gpu_types: has no effect with gpus = 0 (no GPU is requested)",
        ]
    );
}

#[test]
fn unknown_keys_in_harbor_tables_warn_and_are_kept() {
    let f = Fixture::new(
        "[task]\nname = \"x\"\nlicense = \"MIT\"\n[agent]\nnetwork = \"cluster\"\n[environment]\nfrobnicate = true\nnodes = 3\n\
         [solution]\nhints = [\"a\"]\n[verifier]\nseed = 7\n[[artifacts]]\nsource = \"/app/x\"\nmode = \"copy\"\n",
    );
    let task = f.load();
    let shown: Vec<String> = task.warnings.iter().map(|w| f.shown_text(w)).collect();
    assert_eq!(
        shown,
        vec![
            "tasks/foo/task.toml:task.license: unknown key, kept as metadata",
            "tasks/foo/task.toml:agent.network: unknown key, kept as metadata",
            "tasks/foo/task.toml:environment.frobnicate: unknown key, kept as metadata",
            "tasks/foo/task.toml:environment.nodes: unknown key, kept as metadata",
            "tasks/foo/task.toml:verifier.seed: unknown key, kept as metadata",
            "tasks/foo/task.toml:solution.hints: unknown key, kept as metadata",
            "tasks/foo/task.toml:artifacts[0].mode: unknown key, kept as metadata",
        ]
    );
    assert_eq!(task.metadata["task"]["license"], "MIT");
    assert_eq!(task.metadata["agent"]["network"], "cluster");
    assert_eq!(task.metadata["environment"]["frobnicate"], true);
    assert_eq!(task.metadata["environment"]["nodes"], 3);
    assert_eq!(task.metadata["verifier"]["seed"], 7);
    assert_eq!(task.metadata["solution"]["hints"][0], "a");
}

/// A compose task: `environment/docker-compose.yaml` with `yaml`.
fn compose(yaml: &str) -> Fixture {
    let f = Fixture::new("");
    f.write("environment/docker-compose.yaml", yaml);
    f
}

#[test]
fn compose_files_give_exact_one_line_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "services: [main]\n",
            "tasks/foo/environment/docker-compose.yaml:services: expected a mapping, found list",
        ),
        (
            "version: '3'\n",
            "tasks/foo/environment/docker-compose.yaml:services: missing (a compose file needs services:)",
        ),
        (
            "services:\n  db: {}\n",
            "tasks/foo/environment/docker-compose.yaml:services.db: a sidecar service needs build or image",
        ),
        (
            "services:\n  \"bad name\":\n    image: x\n",
            "tasks/foo/environment/docker-compose.yaml:services.bad name: invalid service name \"bad name\" (start with a letter or digit; then letters, digits, _ . -)",
        ),
        (
            "services:\n  main:\n    depends_on: [cache]\n",
            "tasks/foo/environment/docker-compose.yaml:services.main.depends_on[0]: unknown service \"cache\"",
        ),
        (
            "services:\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n",
            "tasks/foo/environment/docker-compose.yaml:services: depends_on has a cycle among: a, b",
        ),
        (
            "services:\n  main:\n    depends_on:\n      db:\n        condition: service_ready\n  db:\n    image: x\n",
            "tasks/foo/environment/docker-compose.yaml:services.main.depends_on.db.condition: unknown value \"service_ready\" (expected one of: service_started, service_healthy, service_completed_successfully)",
        ),
        (
            "services:\n  db:\n    image: x\n    healthcheck:\n      test: [\"CMD\"]\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.healthcheck.test: must be [\"CMD\", prog, args...], [\"CMD-SHELL\", command], [\"NONE\"] or a command string",
        ),
        (
            "services:\n  db:\n    image: x\n    healthcheck:\n      test: pg_isready\n      interval: soon\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.healthcheck.interval: not a duration like \"5s\" or \"1m30s\" (got \"soon\")",
        ),
        (
            "services:\n  db:\n    image: x\n    healthcheck:\n      interval: 5s\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.healthcheck.test: missing (a healthcheck needs a test)",
        ),
        (
            "services:\n  db:\n    image: x\n    command: \"echo 'open\"\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.command: unterminated quote in \"echo 'open\"",
        ),
        (
            "services:\n  db:\n    build: ../../outside\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.build.context: must stay inside the task directory (got \"../../outside\")",
        ),
        (
            "services:\n  db:\n    build:\n      context: .\n      dockerfile: Dockerfile.db\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.build.dockerfile: \"Dockerfile.db\" does not exist in the build context \".\"",
        ),
        (
            "services:\n  db:\n    build: https://example.com/repo.git\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.build.context: must be a directory inside the task (got \"https://example.com/repo.git\"; only ${CONTEXT_DIR} is resolved)",
        ),
        (
            "services:\n  db:\n    image: x\n    environment: 5\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.environment: expected a list or a mapping, found number",
        ),
        (
            "services:\n  db:\n    image: x\n    working_dir: data\n",
            "tasks/foo/environment/docker-compose.yaml:services.db.working_dir: must be an absolute path inside the container (got \"data\")",
        ),
        (
            "services:\n  main:\n    image: [x]\n",
            "tasks/foo/environment/docker-compose.yaml:services.main.image: expected a string, found list",
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(&compose(yaml).error(), expected, "for compose:\n{yaml}");
    }
    let e = compose("services: {\n").error();
    assert!(
        e.starts_with("tasks/foo/environment/docker-compose.yaml: invalid YAML: "),
        "{e}"
    );
}

#[test]
fn compose_main_service_and_warnings() {
    // No `main` in the file: Harbor's base defines it from environment/.
    let f = compose(
        "services:\n  cache:\n    image: redis:7\n    ports: [\"6379:6379\"]\n    restart: always\nnetworks:\n  default: {}\nx-note: 1\n",
    );
    let task = f.load();
    let c = task.environment.compose.as_ref().expect("compose");
    assert_eq!(c.main_service(), Some(&Service::default()));
    assert_eq!(c.start_order(), ["cache", "main"]);
    assert!(matches!(task.environment.source, ImageSource::Build { .. }));
    let shown: Vec<String> = task.warnings.iter().map(|w| f.shown_text(w)).collect();
    assert_eq!(
        shown,
        vec![
            "tasks/foo/environment/docker-compose.yaml:networks: ignored: services share the trial's network scope (SPEC §2.1)",
            "tasks/foo/environment/docker-compose.yaml:services.cache.ports: not published: sidecars share the trial's network scope and reach each other on 127.0.0.1 (SPEC §2.1), ignored",
            "tasks/foo/environment/docker-compose.yaml:services.cache.restart: not supported by arbiter, ignored",
        ]
    );

    // `main` with its own image replaces the Dockerfile (compose wins, as in Harbor).
    let f = compose("services:\n  main:\n    image: python:3.12-slim\n");
    f.remove("environment/Dockerfile");
    let task = f.load();
    assert_eq!(
        task.environment.source,
        ImageSource::Image("python:3.12-slim".into())
    );
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);

    // A sidecar's healthcheck can be disabled.
    let f = compose("services:\n  db:\n    image: x\n    healthcheck:\n      disable: true\n");
    let task = f.load();
    let c = task.environment.compose.as_ref().expect("compose");
    assert_eq!(
        c.services["db"].healthcheck.as_ref().map(|h| &h.test),
        Some(&HealthTest::Disabled)
    );
}

#[test]
fn dataset_expansion_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let shown = |e: TaskError| e.to_string().replace(&root.display().to_string(), "d");
    let task = |dir: &std::path::Path| {
        fs::create_dir_all(dir.join("tests")).unwrap();
        fs::write(dir.join("task.toml"), "").unwrap();
    };

    let empty = root.join("empty");
    fs::create_dir_all(empty.join("notes")).unwrap();
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&empty)).unwrap_err()),
        "d/empty: not a task directory (no task.toml, and no subdirectory holds one)"
    );
    assert_eq!(
        shown(expand_task_dirs(&[root.join("nope")]).unwrap_err()),
        "d/nope: not a task directory (no task.toml)"
    );

    let ds = root.join("ds");
    task(&ds.join("t1"));
    fs::write(ds.join("dataset.toml"), "[[tasks]]\nname = \"org/t9\"\n").unwrap();
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&ds)).unwrap_err()),
        "d/ds/dataset.toml:tasks[0].name: no task directory here is \"org/t9\" (by [task] name or directory name)"
    );
    fs::write(ds.join("dataset.toml"), "[dataset]\nname = \"org/ds\"\n").unwrap();
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&ds)).unwrap_err()),
        "d/ds/dataset.toml:tasks: missing (a dataset.toml lists its [[tasks]])"
    );

    let reg = root.join("reg");
    task(&reg.join("tasks/b"));
    task(&reg.join("tasks/a"));
    let registry = |json: &str| fs::write(reg.join("registry.json"), json).unwrap();
    registry(
        r#"[{"name": "mini", "version": "1.0", "description": "", "tasks": [
            {"name": "b", "path": "tasks/b"}, {"name": "a", "path": "tasks/a"}]}]"#,
    );
    assert_eq!(
        expand_task_dirs(std::slice::from_ref(&reg)).unwrap(),
        vec![reg.join("tasks/b"), reg.join("tasks/a")]
    );
    registry(
        r#"[{"name": "mini", "version": "1.0", "tasks": [{"name": "c", "path": "tasks/c", "git_url": "https://example.com/x.git"}]}]"#,
    );
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&reg)).unwrap_err()),
        "d/reg/registry.json:[0].tasks[0].path: \"tasks/c\" is not here (its source is https://example.com/x.git; fetch the dataset first)"
    );
    registry(r#"[{"name": "mini", "tasks": [{"name": "x", "path": "../x"}]}]"#);
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&reg)).unwrap_err()),
        "d/reg/registry.json:[0].tasks[0].path: must be a relative path inside the dataset (got \"../x\")"
    );
    registry(r#"[{"name": "a", "version": "1", "tasks": []}, {"name": "b", "tasks": []}]"#);
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&reg)).unwrap_err()),
        "d/reg/registry.json:registry: lists 2 datasets (a@1, b); give the directory of one dataset's tasks instead"
    );
    registry("{}");
    assert_eq!(
        shown(expand_task_dirs(std::slice::from_ref(&reg)).unwrap_err()),
        "d/reg/registry.json:registry: expected a list of datasets, found object"
    );
}

#[test]
fn a_steps_own_network_is_warned_about_because_the_steps_share_one_container() {
    let f = two_steps("[steps.agent]\nnetwork_mode = \"host\"\n");
    let task = f.load();
    let shown: Vec<String> = task.warnings.iter().map(|w| f.shown_text(w)).collect();
    assert_eq!(
        shown,
        vec![
            "tasks/foo/task.toml:steps[1].agent.network_mode: not applied: the steps share one container, which keeps the task's agent network (bridge)"
        ]
    );
    assert!(two_steps("").load().warnings.is_empty());
}
