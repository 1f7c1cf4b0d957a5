//! Unit tests of task loading against real directories in temp dirs.
//!
//! Over 600 lines on purpose: one table of pinned one-line errors per area of
//! `task.toml`; the Harbor-parity tables are in `tests/harbor.rs` and the
//! fixture tasks in `tests/fixtures.rs`.

use std::fs;
use std::path::PathBuf;

use tempfile::TempDir;

use super::*;

mod compose;
mod fixtures;
mod harbor;

/// `shared/fixtures/harbor/tb21-task.toml`: a real Terminal-Bench 2.1 task.toml.
const TB21_TASK_TOML: &str = r#"version = "2.0"

[metadata]
author_name = "anonymous"
author_email = "anonymous"
difficulty = "hard"
category = "system-administration"
subcategories = []
number_of_milestones = 0
codebase_size = "small"
languages = ["bash", "python"]
tags = ["rsync", "filter-rules", "preview-engine", "delete-risk", "path-policy", "system-administration", "bash-cli"]
expert_time_estimate_min = 480
junior_time_estimate_min = 960

[agent]
timeout_sec = 1800.0

[verifier]
timeout_sec = 900.0

[environment]
allow_internet = false
build_timeout_sec = 900.0
cpus = 2
memory_mb = 4096
storage_mb = 10240
workdir = "/app"
"#;

/// A temp dir holding one complete task at `<tmp>/foo`.
struct Fixture {
    _tmp: TempDir,
    dir: PathBuf,
}

impl Fixture {
    fn new(task_toml: &str) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("foo");
        let f = Fixture { _tmp: tmp, dir };
        f.write("task.toml", task_toml);
        f.write("instruction.md", "Print hello.\n");
        f.write("environment/Dockerfile", "FROM busybox\n");
        f.write(
            "tests/test.sh",
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n",
        );
        f
    }

    fn write(&self, rel: &str, content: &str) {
        let path = self.dir.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, content).expect("write");
    }

    fn remove(&self, rel: &str) {
        fs::remove_file(self.dir.join(rel)).expect("remove");
    }

    fn load(&self) -> Task {
        match load(&self.dir) {
            Ok(task) => task,
            Err(e) => panic!("load failed: {e}"),
        }
    }

    /// The load error with the temp directory shown as `tasks/foo`.
    fn error(&self) -> String {
        match load(&self.dir) {
            Ok(_) => panic!("expected an error"),
            Err(e) => self.shown(&e),
        }
    }

    fn shown(&self, e: &TaskError) -> String {
        let text = e.to_string();
        assert!(!text.contains('\n'), "multi-line error: {text:?}");
        self.shown_text(&text)
    }

    /// A message or warning with the temp directory shown as `tasks/foo`.
    fn shown_text(&self, text: &str) -> String {
        text.replace(&self.dir.display().to_string(), "tasks/foo")
    }
}

fn error_for(task_toml: &str) -> String {
    Fixture::new(task_toml).error()
}

#[test]
fn tb21_fixture_loads_with_legacy_keys() {
    let f = Fixture::new(TB21_TASK_TOML);
    let task = f.load();
    assert_eq!(task.name, "foo");
    assert_eq!(task.dir, fs::canonicalize(&f.dir).unwrap());
    assert_eq!(task.instruction, "Print hello.\n");
    assert_eq!(task.agent.timeout_sec, 1800.0);
    assert_eq!(task.verifier.timeout_sec, 900.0);
    assert_eq!(task.verifier.mode, VerifierMode::Snapshot);
    assert_eq!(task.verifier.network, NetworkMode::NoNetwork);
    let env = &task.environment;
    assert_eq!(env.network, NetworkMode::NoNetwork);
    assert_eq!(env.build_timeout_sec, 900.0);
    assert_eq!(env.cpus, 2.0);
    assert_eq!(env.memory_mb, 4096);
    assert_eq!(env.pids_limit, 1024);
    assert_eq!(env.storage_mb, Some(10240));
    assert_eq!(env.workdir.as_deref(), Some("/app"));
    assert_eq!(
        env.source,
        ImageSource::Build {
            context: task.dir.join("environment"),
            dockerfile: task.dir.join("environment/Dockerfile"),
        }
    );
    assert_eq!(task.metadata["version"], "2.0");
    assert_eq!(task.metadata["metadata"]["junior_time_estimate_min"], 960);
    assert_eq!(task.difficulty(), Some("hard"));
    assert_eq!(task.category(), Some("system-administration"));
    assert_eq!(task.tags().len(), 7);
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);
    assert!(task.checksum.starts_with("sha256:") && task.checksum.len() == 7 + 64);
}

#[test]
fn empty_task_toml_gets_every_default() {
    let f = Fixture::new("");
    let task = f.load();
    assert_eq!(task.name, "foo");
    assert_eq!(task.agent, AgentSection::default());
    assert_eq!(task.agent.timeout_sec, 1800.0);
    assert_eq!(task.verifier, VerifierSection::default());
    assert_eq!(task.verifier.timeout_sec, 600.0);
    let env = &task.environment;
    assert_eq!(
        (
            env.build_timeout_sec,
            env.cpus,
            env.memory_mb,
            env.pids_limit
        ),
        (600.0, 1.0, 2048, 1024)
    );
    assert_eq!(env.network, NetworkMode::Bridge, "Harbor's default: public");
    assert_eq!((env.workdir.clone(), env.storage_mb), (None, None));
    assert_eq!(task.tests_dir, task.dir.join("tests"));
    assert_eq!(task.solution_dir, None);
    assert!(task.artifacts.is_empty());
    assert_eq!(task.completion, None);
    assert_eq!(task.metadata, serde_json::json!({}));
    assert!(task.warnings.is_empty());
}

#[test]
fn checksum_is_stable_and_tracks_content_names_and_files() {
    let f = Fixture::new("");
    let first = f.load().checksum;
    assert_eq!(f.load().checksum, first, "two loads agree");

    f.write(
        "tests/test.sh",
        "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n",
    );
    let edited = f.load().checksum;
    assert_ne!(edited, first, "content edit");

    f.write("tests/data.txt", "x");
    let added = f.load().checksum;
    assert_ne!(added, edited, "new file");

    fs::rename(f.dir.join("tests/data.txt"), f.dir.join("tests/data2.txt")).unwrap();
    let renamed = f.load().checksum;
    assert_ne!(renamed, added, "rename");

    // Moving bytes between a name and the content must not collide.
    f.remove("tests/data2.txt");
    f.write("tests/data", "2.txtx");
    assert_ne!(f.load().checksum, renamed);
    f.remove("tests/data");
    assert_eq!(f.load().checksum, edited, "back to the same tree");

    // An empty directory is not a file: no change.
    fs::create_dir(f.dir.join("tests/empty")).unwrap();
    assert_eq!(f.load().checksum, edited);
}

#[cfg(unix)]
#[test]
fn checksum_hashes_symlinks_by_target_text() {
    use std::os::unix::fs::symlink;
    let f = Fixture::new("");
    f.write("tests/a.txt", "same");
    f.write("tests/b.txt", "same");
    symlink("a.txt", f.dir.join("tests/link")).unwrap();
    let to_a = f.load().checksum;
    fs::remove_file(f.dir.join("tests/link")).unwrap();
    symlink("b.txt", f.dir.join("tests/link")).unwrap();
    let task = f.load();
    assert_ne!(task.checksum, to_a);
    assert!(task.warnings.is_empty());
}

#[test]
fn malformed_inputs_give_exact_one_line_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "[agent]\ntimeout_sec = 10\n[verifier\n",
            "tasks/foo/task.toml:3:10: invalid TOML: unclosed table, expected `]`",
        ),
        (
            "[verifier]\nenvironment_mode = \"sandbox\"\n",
            "tasks/foo/task.toml:verifier.environment_mode: unknown value \"sandbox\" (expected one of: snapshot, live, separate, clean)",
        ),
        (
            "[agent]\ntimeout_sec = \"30m\"\n",
            "tasks/foo/task.toml:agent.timeout_sec: expected a number, found string",
        ),
        (
            "[agent]\ntimeout_sec = -5\n",
            "tasks/foo/task.toml:agent.timeout_sec: must be greater than 0 (got -5)",
        ),
        (
            "[verifier]\ntimeout_sec = nan\n",
            "tasks/foo/task.toml:verifier.timeout_sec: must be a number of seconds (got nan)",
        ),
        (
            "[environment]\ncpus = 0\n",
            "tasks/foo/task.toml:environment.cpus: must be greater than 0 (got 0)",
        ),
        (
            "[environment]\nmemory_mb = 4\n",
            "tasks/foo/task.toml:environment.memory_mb: must be at least 6 (Docker's minimum; got 4)",
        ),
        (
            "[environment]\npids_limit = -1\n",
            "tasks/foo/task.toml:environment.pids_limit: must be greater than 0 (got -1)",
        ),
        (
            "[environment]\nmax_files = 0\n",
            "tasks/foo/task.toml:environment.max_files: must be greater than 0 (got 0)",
        ),
        (
            "[environment]\nmax_files = \"1M\"\n",
            "tasks/foo/task.toml:environment.max_files: expected an integer, found string",
        ),
        (
            "[environment]\nmemory_mb = 1.5\n",
            "tasks/foo/task.toml:environment.memory_mb: expected an integer, found float",
        ),
        (
            "artifacts = [\"/app/ok.txt\", \"out.txt\"]\n",
            "tasks/foo/task.toml:artifacts[1]: must be an absolute path inside the container (got \"out.txt\")",
        ),
        (
            "artifacts = [\"/app/../etc/passwd\"]\n",
            "tasks/foo/task.toml:artifacts[0]: must not contain \"..\" components (got \"/app/../etc/passwd\")",
        ),
        (
            "[agent]\ntimeout_secs = 60\n",
            "tasks/foo/task.toml:agent.timeout_secs: unknown key (did you mean timeout_sec?)",
        ),
        (
            "[environment]\ncpu = 2\n",
            "tasks/foo/task.toml:environment.cpu: unknown key (did you mean cpus?)",
        ),
        (
            "[environment]\nallow_internet = false\nnetwork_mode = \"bridge\"\n",
            "tasks/foo/task.toml:environment.allow_internet: conflicts with network_mode = \"bridge\" (allow_internet = false means no-network; remove one of them)",
        ),
        (
            "[environment]\nnetwork_mode = \"none\"\n",
            "tasks/foo/task.toml:environment.network_mode: unknown value \"none\" (expected one of: no-network, host, bridge, allowlist)",
        ),
        (
            "[environment]\nnetwork_mode = \"bridge\"\nallowed_hosts = [\"pypi.org\"]\n",
            "tasks/foo/task.toml:environment.allowed_hosts: only used with network_mode = \"allowlist\" (network_mode is \"bridge\")",
        ),
        (
            "[task]\nname = \"../escape\"\n",
            "tasks/foo/task.toml:task.name: must not contain \"..\" (got \"../escape\")",
        ),
        (
            "[task]\nname = \"/abs\"\n",
            "tasks/foo/task.toml:task.name: must not start with \"/\" (got \"/abs\")",
        ),
        (
            "[task]\nname = \"two words\"\n",
            "tasks/foo/task.toml:task.name: invalid character \" \" in \"two words\" (allowed: a-z A-Z 0-9 . _ / -)",
        ),
        (
            "[verifier.env]\nTOKEN = 5\n",
            "tasks/foo/task.toml:verifier.env.TOKEN: expected a string, found integer",
        ),
        (
            "[verifier]\nenvironment_mode = \"live\"\n[verifier.environment]\ncpus = 2\n",
            "tasks/foo/task.toml:verifier.environment: only used with environment_mode = \"separate\" (environment_mode is \"live\")",
        ),
        (
            "[environment]\nmemory = \"4G\"\nmemory_mb = 2048\n",
            "tasks/foo/task.toml:environment.memory: conflicts with memory_mb = 2048 (memory means 4096 MB; remove one of them)",
        ),
        (
            "[environment]\nos = \"windows\"\n",
            "tasks/foo/task.toml:environment.os: \"windows\" is not supported (arbiter runs Linux containers only)",
        ),
        (
            "agent = 3\n",
            "tasks/foo/task.toml:agent: expected a table, found integer",
        ),
        (
            "[completion]\nmode = \"strict\"\n",
            "tasks/foo/task.toml:completion.mode: unknown value \"strict\" (expected one of: off, observe, enforce)",
        ),
        (
            "[[completion.validation]]\nid = \"unit\"\nargv = [\"pytest\"]\nshell = \"pytest\"\n",
            "tasks/foo/task.toml:completion.validation[0]: set exactly one of argv or shell (both are set)",
        ),
        (
            "[[completion.validation]]\nid = \"unit\"\nargs = [\"pytest\"]\n",
            "tasks/foo/task.toml:completion.validation[0].args: unknown key (did you mean argv?)",
        ),
        (
            "[[completion.deliverables]]\npath = \"out.md\"\n",
            "tasks/foo/task.toml:completion.deliverables[0].path: must be an absolute path inside the container (got \"out.md\")",
        ),
        (
            "[[completion.deliverables]]\npath = \"/app/out.md\"\nsha256 = \"abc\"\n",
            "tasks/foo/task.toml:completion.deliverables[0].sha256: must be 64 hex digits (got \"abc\")",
        ),
        (
            "[verifier]\nenvironment_mode = \"shared\"\n[verifier.environment]\ncpus = 2\n",
            "tasks/foo/task.toml:verifier.environment: only used with environment_mode = \"separate\" (environment_mode is \"shared\")",
        ),
        (
            "artifacts = \"/app/out.txt\"\n",
            "tasks/foo/task.toml:artifacts: expected an array, found string",
        ),
        (
            "[[artifacts]]\ndestination = \"out\"\n",
            "tasks/foo/task.toml:artifacts[0].source: missing (an artifact table needs the container path to collect)",
        ),
        (
            "[verifier.env]\n\"MY VAR\" = 1\n",
            "tasks/foo/task.toml:verifier.env.\"MY VAR\": expected a string, found integer",
        ),
        (
            "[[completion.validation]]\nid = \"unit\"\n",
            "tasks/foo/task.toml:completion.validation[0]: set exactly one of argv or shell (neither is set)",
        ),
        (
            "[[completion.validation]]\nid = \"a\"\nshell = \"true\"\n[[completion.validation]]\nid = \"a\"\nshell = \"false\"\n",
            "tasks/foo/task.toml:completion.validation[1].id: duplicate of completion.validation[0].id (\"a\")",
        ),
        (
            "[agent]\ntimeout_sec = 1e12\n",
            "tasks/foo/task.toml:agent.timeout_sec: must be at most 10000000 seconds (got 1000000000000.0)",
        ),
        (
            "[agent]\nuser = -1\n",
            "tasks/foo/task.toml:agent.user: must not be negative (got -1)",
        ),
        (
            "[environment]\nworkdir = \"app\"\n",
            "tasks/foo/task.toml:environment.workdir: must be an absolute path inside the container (got \"app\")",
        ),
        (
            "[agent]\ntimeout_sec = 1\ntimeout_sec = 2\n",
            "tasks/foo/task.toml:3:1: invalid TOML: duplicate key",
        ),
    ];
    for (toml, expected) in cases {
        assert_eq!(&error_for(toml), expected, "for task.toml:\n{toml}");
    }
}

#[test]
fn missing_and_empty_files_are_named() {
    let f = Fixture::new("");
    f.remove("instruction.md");
    assert_eq!(
        f.error(),
        "tasks/foo/instruction.md:file: missing (every task needs the prompt given to the agent)"
    );

    let f = Fixture::new("");
    f.write("instruction.md", "  \n\t\n");
    assert_eq!(
        f.error(),
        "tasks/foo/instruction.md:file: empty (every task needs the prompt given to the agent)"
    );

    let f = Fixture::new("");
    fs::write(f.dir.join("instruction.md"), b"caf\xe9").unwrap();
    assert_eq!(
        f.error(),
        "tasks/foo/instruction.md:file: not valid UTF-8 (at byte 3)"
    );

    let f = Fixture::new("");
    f.remove("tests/test.sh");
    assert_eq!(
        f.error(),
        "tasks/foo/tests/test.sh:file: missing (the verifier entry point; it writes /logs/verifier/reward.txt or reward.json)"
    );

    let f = Fixture::new("");
    f.remove("environment/Dockerfile");
    assert_eq!(
        f.error(),
        "tasks/foo/environment/Dockerfile:file: missing (the task image is built from it; or set [environment] docker_image in task.toml)"
    );
    f.write("environment/docker-compose.yaml", "services: {}\n");
    assert_eq!(
        f.error(),
        "tasks/foo/environment/Dockerfile:file: missing (the main service of environment/docker-compose.yaml names no build or image, so it is built from environment/Dockerfile; or set [environment] docker_image in task.toml)"
    );

    let f = Fixture::new("");
    f.write("solution/notes.md", "hint");
    assert_eq!(
        f.error(),
        "tasks/foo/solution/solve.sh:file: missing (solution/ exists, so the oracle agent needs solution/solve.sh)"
    );
    f.write("solution/solve.sh", "#!/bin/bash\n");
    let task = f.load();
    assert_eq!(task.solution_dir, Some(task.dir.join("solution")));

    let f = Fixture::new("");
    fs::write(f.dir.join("task.toml"), b"name = \"\xff\"").unwrap();
    assert_eq!(
        f.error(),
        "tasks/foo/task.toml:file: not valid UTF-8 (at byte 8)"
    );
}

#[test]
fn not_a_task_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let shown = |e: TaskError| {
        e.to_string()
            .replace(&tmp.path().display().to_string(), "tasks")
    };
    assert_eq!(
        shown(load(&missing).unwrap_err()),
        "tasks/nope: not a task directory (no task.toml)"
    );
    fs::create_dir(&missing).unwrap();
    let e = load(&missing).unwrap_err();
    assert_eq!(e.kind(), TaskErrorKind::NotATaskDir);
    assert_eq!(shown(e), "tasks/nope: not a task directory (no task.toml)");
    fs::write(tmp.path().join("file"), "").unwrap();
    assert_eq!(
        shown(load(&tmp.path().join("file")).unwrap_err()),
        "tasks/file: not a task directory (not a directory)"
    );
}

#[test]
fn errors_show_the_path_as_given_not_canonicalized() {
    let f = Fixture::new("[agent]\ntimeout_sec = 0\n");
    let odd = f.dir.join("..").join("foo");
    let e = load(&odd).unwrap_err();
    assert_eq!(e.file(), format!("{}/task.toml", odd.display()));
    assert_eq!(e.field(), Some("agent.timeout_sec"));
    assert_eq!(e.message(), "must be greater than 0 (got 0)");
    assert_eq!(e.kind(), TaskErrorKind::Value);
}

#[cfg(unix)]
#[test]
fn symlinks_must_stay_inside_the_task_directory() {
    use std::os::unix::fs::symlink;
    let f = Fixture::new("");
    f.write("tests/helper.py", "print(1)");
    symlink("helper.py", f.dir.join("tests/inside")).unwrap();
    symlink("../instruction.md", f.dir.join("tests/up_but_inside")).unwrap();
    assert!(f.load().warnings.is_empty());

    symlink("../../outside.txt", f.dir.join("tests/x")).unwrap();
    assert_eq!(
        f.error(),
        "tasks/foo/tests/x:symlink: points outside the task directory (target: ../../outside.txt)"
    );
    fs::remove_file(f.dir.join("tests/x")).unwrap();

    symlink("/etc/hostname", f.dir.join("environment/host")).unwrap();
    let e = load(&f.dir).unwrap_err();
    assert_eq!(e.kind(), TaskErrorKind::Path);
    assert_eq!(
        f.shown(&e),
        "tasks/foo/environment/host:symlink: points outside the task directory (target: /etc/hostname)"
    );
    fs::remove_file(f.dir.join("environment/host")).unwrap();

    // A dangling link that stays inside is a warning, not an error.
    symlink("gone.txt", f.dir.join("tests/dangling")).unwrap();
    let task = f.load();
    assert_eq!(task.warnings.len(), 1, "{:?}", task.warnings);
    assert!(task.warnings[0].ends_with("tests/dangling:symlink: target gone.txt does not exist"));
}

#[test]
fn invalid_directory_name_needs_a_task_name() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Fixture {
        dir: tmp.path().join("my task"),
        _tmp: tmp,
    };
    for (rel, content) in [
        ("task.toml", ""),
        ("instruction.md", "x"),
        ("environment/Dockerfile", "FROM x"),
        ("tests/test.sh", "exit 0"),
    ] {
        f.write(rel, content);
    }
    assert_eq!(
        f.error(),
        "tasks/foo/task.toml:task.name: the directory name \"my task\" is not a valid task name (allowed: a-z A-Z 0-9 . _ / -); set [task] name"
    );
    f.write("task.toml", "[task]\nname = \"org/my-task\"\n");
    assert_eq!(f.load().name, "org/my-task");
}

#[test]
fn harbor_keys_load_unmodified() {
    let f = Fixture::new(
        r#"schema_version = "1.4"
source = "terminal-bench"

[task]
name = "harbor/hello-world"
description = "says hello"
keywords = ["demo"]

[agent]
timeout_sec = 120
user = 1000

[verifier]
timeout_sec = 60
environment_mode = "shared"
user = "root"

[verifier.env]
MODEL = "${JUDGE_MODEL}"

[environment]
docker_image = "ghcr.io/example/hello:1"
network_mode = "public"
memory = "1G"
storage = "512M"
gpus = 0
gpu_types = []
os = "Linux"
mcp_servers = []

[environment.env]
FOO = "bar"

[solution.env]
HINT = "yes"
"#,
    );
    let task = f.load();
    assert_eq!(task.name, "harbor/hello-world");
    assert_eq!(task.agent.user.as_deref(), Some("1000"));
    assert_eq!(task.agent.timeout_sec, 120.0);
    assert_eq!(task.verifier.mode, VerifierMode::Snapshot);
    assert_eq!(task.verifier.user.as_deref(), Some("root"));
    assert_eq!(task.verifier.env["MODEL"], "${JUDGE_MODEL}");
    // Harbor: a verifier that sets no network gets the task's baseline, `public` here.
    assert_eq!(task.verifier.network, NetworkMode::Bridge);
    assert_eq!(
        task.environment.source,
        ImageSource::Image("ghcr.io/example/hello:1".into())
    );
    assert_eq!(task.environment.network, NetworkMode::Bridge);
    assert_eq!(task.environment.memory_mb, 1024);
    assert_eq!(task.environment.storage_mb, Some(512));
    assert_eq!(task.environment.env["FOO"], "bar");
    assert_eq!(task.solution_env["HINT"], "yes");
    assert_eq!(task.metadata["schema_version"], "1.4");
    assert_eq!(task.metadata["source"], "terminal-bench");
    assert_eq!(task.metadata["task"]["description"], "says hello");
    assert_eq!(task.environment.gpus, 0);
    assert!(task.warnings.is_empty(), "{:?}", task.warnings);
}

#[test]
fn docker_image_makes_the_dockerfile_optional() {
    let f = Fixture::new("[environment]\ndocker_image = \"python:3.12-slim\"\n");
    f.remove("environment/Dockerfile");
    let task = f.load();
    assert_eq!(
        task.environment.source,
        ImageSource::Image("python:3.12-slim".into())
    );
}

#[test]
fn unusable_harbor_features_and_unknown_tables_warn() {
    let f = Fixture::new(
        "[enviroment]\ncpus = 4\n\n[custom]\nx = 1\n\n[environment]\ngpus = 1\n[environment.healthcheck]\ncommand = \"true\"\n",
    );
    let task = f.load();
    let warnings: Vec<String> = task
        .warnings
        .iter()
        .map(|w| w.replace(&f.dir.display().to_string(), "tasks/foo"))
        .collect();
    assert_eq!(
        warnings,
        vec![
            "tasks/foo/task.toml:custom: unknown table [custom], kept as metadata",
            "tasks/foo/task.toml:enviroment: unknown table [enviroment], kept as metadata (did you mean environment?)",
        ]
    );
    assert_eq!(task.metadata["enviroment"]["cpus"], 4);
    assert_eq!(task.metadata["custom"]["x"], 1);
    // The trial runs `[environment.healthcheck]`: no warning, and it is in the model.
    assert_eq!(
        task.environment
            .healthcheck
            .as_ref()
            .map(|h| h.command.as_str()),
        Some("true")
    );
}

#[test]
fn agent_network_mode_overrides_the_environment_for_the_agent_phase() {
    let f = Fixture::new(
        "[agent]\nnetwork_mode = \"host\"\n[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = \"bridge\"\n",
    );
    let task = f.load();
    assert_eq!(task.environment.network, NetworkMode::Host);
    assert_eq!(task.verifier.network, NetworkMode::Bridge);

    let task = Fixture::new("[environment]\nallow_internet = true\n").load();
    assert_eq!(task.environment.network, NetworkMode::Bridge);
    assert_eq!(task.verifier.network, NetworkMode::Bridge);
    // The verifier follows the task's baseline (Harbor), not the agent's own override.
    let task =
        Fixture::new("[agent]\nnetwork_mode = \"host\"\n[environment]\nallow_internet = false\n")
            .load();
    assert_eq!(task.environment.network, NetworkMode::Host);
    assert_eq!(task.verifier.network, NetworkMode::NoNetwork);
    // Saying nothing is Harbor's `public` for both phases.
    let task = Fixture::new("").load();
    assert_eq!(task.environment.network, NetworkMode::Bridge);
    assert_eq!(task.verifier.network, NetworkMode::Bridge);
}

#[test]
fn separate_verifier_gets_its_own_environment() {
    let f = Fixture::new(
        "[verifier]\nnetwork_mode = \"bridge\"\n[verifier.environment]\ndocker_image = \"judge:1\"\ncpus = 4\ngpus = 0\n",
    );
    let task = f.load();
    assert_eq!(task.verifier.mode, VerifierMode::Separate);
    let env = task.verifier.environment.expect("verifier environment");
    assert_eq!(env.source, ImageSource::Image("judge:1".into()));
    assert_eq!(env.cpus, 4.0);
    assert_eq!(env.network, NetworkMode::Bridge);
    assert_eq!(env.gpus, 0);

    let f = Fixture::new("[verifier]\nenvironment_mode = \"separate\"\n");
    f.write("tests/Dockerfile", "FROM python:3.12\n");
    let task = f.load();
    let env = task.verifier.environment.expect("verifier environment");
    assert_eq!(
        env.source,
        ImageSource::Build {
            context: task.dir.join("tests"),
            dockerfile: task.dir.join("tests/Dockerfile"),
        }
    );
    assert_eq!(
        env.network,
        NetworkMode::Bridge,
        "the task's baseline, Harbor's public"
    );

    // The task's own docker_image does not win over tests/Dockerfile (Harbor's custom
    // verifier image); without either, the verifier gets a fresh copy of the task's image.
    let f = Fixture::new(
        "[environment]\ndocker_image = \"task:1\"\n[verifier]\nenvironment_mode = \"separate\"\n",
    );
    let task = f.load();
    let env = task
        .verifier
        .environment
        .clone()
        .expect("verifier environment");
    assert_eq!(env.source, task.environment.source);
    f.write("tests/Dockerfile", "FROM python:3.12\n");
    let env = f.load().verifier.environment.expect("verifier environment");
    assert!(
        matches!(env.source, ImageSource::Build { .. }),
        "{:?}",
        env.source
    );

    let task = Fixture::new("").load();
    assert_eq!(task.verifier.environment, None);
}

#[test]
fn completion_table_parses() {
    let f = Fixture::new(
        r#"artifacts = ["/app/out.txt", { source = "/app/report.json" }]

[completion]
mode = "enforce"
deliverables = [ { path = "/app/out.md", goal = "Markdown from a browser crawl" } ]
validation = [
  { id = "unit", argv = ["pytest", "-q"], cwd = "/app", timeout_sec = 30 },
  { id = "lint", shell = "ruff check . | tee /tmp/lint.txt" },
]
"#,
    );
    let task = f.load();
    assert_eq!(task.artifacts, vec!["/app/out.txt", "/app/report.json"]);
    let c = task.completion.expect("completion");
    assert_eq!(c.mode, CompletionMode::Enforce);
    assert_eq!(
        c.deliverables,
        vec![Deliverable {
            path: "/app/out.md".into(),
            goal: Some("Markdown from a browser crawl".into()),
            non_empty: true,
            sha256: None,
        }]
    );
    assert_eq!(c.validation[0].exec_argv(), vec!["pytest", "-q"]);
    assert_eq!(c.validation[0].cwd.as_deref(), Some("/app"));
    assert_eq!(c.validation[0].timeout_sec, 30.0);
    assert_eq!(c.validation[1].timeout_sec, 120.0);
    assert_eq!(
        c.validation[1].exec_argv(),
        vec![
            "bash",
            "-o",
            "pipefail",
            "-c",
            "ruff check . | tee /tmp/lint.txt"
        ]
    );

    let task = Fixture::new("[completion]\n").load();
    assert_eq!(task.completion, Some(Completion::default()));
}

#[test]
fn load_all_rejects_duplicate_names() {
    let a = Fixture::new("[task]\nname = \"same\"\n");
    let b = Fixture::new("[task]\nname = \"same\"\n");
    let tasks = load_all(std::slice::from_ref(&a.dir)).unwrap();
    assert_eq!(tasks.len(), 1);

    let e = load_all(&[a.dir.clone(), b.dir.clone()]).unwrap_err();
    assert_eq!(e.kind(), TaskErrorKind::Duplicate);
    assert_eq!(
        e.to_string(),
        format!(
            "{}/task.toml:task.name: duplicate task name \"same\" (also used by {})",
            b.dir.display(),
            a.dir.display()
        )
    );

    let e = load_all(&[a.dir.clone(), a.dir.join(".")]).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}/./task.toml:task.name: the same task directory as {} (given twice)",
            a.dir.display(),
            a.dir.display()
        )
    );

    // Stops at the first error.
    let broken = Fixture::new("[agent]\ntimeout_sec = 0\n");
    let e = load_all(&[broken.dir.clone(), b.dir.clone()]).unwrap_err();
    assert_eq!(e.field(), Some("agent.timeout_sec"));
}

#[test]
fn the_compose_main_services_working_dir_and_user_apply_unless_task_toml_says() {
    let f = Fixture::new("");
    f.write(
        "environment/docker-compose.yaml",
        "services:\n  main:\n    build: .\n    working_dir: /srv/app\n    user: \"1000\"\n",
    );
    let task = f.load();
    assert_eq!(task.environment.workdir.as_deref(), Some("/srv/app"));
    assert_eq!(task.agent.user.as_deref(), Some("1000"));
    assert_eq!(task.verifier.user.as_deref(), Some("1000"));

    let f = Fixture::new("[agent]\nuser = \"agent\"\n[environment]\nworkdir = \"/app\"\n");
    f.write(
        "environment/docker-compose.yaml",
        "services:\n  main:\n    build: .\n    working_dir: /srv/app\n    user: \"1000\"\n",
    );
    let task = f.load();
    assert_eq!(task.environment.workdir.as_deref(), Some("/app"));
    assert_eq!(task.agent.user.as_deref(), Some("agent"));
}
