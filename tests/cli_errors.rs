//! Bad input is refused before anything starts: one line naming the file and field, exit 2,
//! no job directory created. These run the real binary and need no Docker engine.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::*;

/// A valid task in `root/name`, then `mutate` breaks it.
fn task(root: &Path, name: &str, mutate: impl FnOnce(&Path)) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(dir.join("tests")).expect("mkdir");
    fs::create_dir_all(dir.join("solution")).expect("mkdir");
    fs::write(
        dir.join("task.toml"),
        "[environment]\nnetwork_mode = \"no-network\"\ndocker_image = \"arbiter/busybox:latest\"\n",
    )
    .expect("write");
    fs::write(dir.join("instruction.md"), "Do the thing.\n").expect("write");
    fs::write(
        dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    .expect("write");
    fs::write(dir.join("solution/solve.sh"), "true\n").expect("write");
    mutate(&dir);
    dir
}

/// Run `arbiter run <args> --job-dir <tmp>/job` and check: exit 2, exactly `expected` on
/// stderr (one line), and no job dir.
fn refused(root: &Path, args: &[&str], expected: &str) {
    let job = root.join("job");
    let mut all: Vec<&str> = vec!["run"];
    all.extend_from_slice(args);
    let job_s = job.to_string_lossy().into_owned();
    all.extend(["--job-dir", &job_s]);
    let out = arbiter(&all);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.trim_end(), expected);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(!job.exists(), "nothing may be started");
}

fn write(dir: &Path, file: &str, text: &str) {
    fs::write(dir.join(file), text).expect("write");
}

#[test]
fn malformed_tasks_are_refused_with_one_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let shown = |d: &PathBuf| d.to_string_lossy().into_owned();
    let cases: Vec<(PathBuf, String)> = vec![
        {
            let d = task(root, "bad-toml", |d| {
                write(d, "task.toml", "[agent\ntimeout_sec = 1\n")
            });
            let s = shown(&d);
            (
                d,
                format!("error: {s}/task.toml:1:7: invalid TOML: unclosed table, expected `]`"),
            )
        },
        {
            let d = task(root, "bad-mode", |d| {
                write(
                    d,
                    "task.toml",
                    "[verifier]\nenvironment_mode = \"sandbox\"\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/task.toml:verifier.environment_mode: unknown value \"sandbox\" (expected one of: snapshot, live, separate, clean)"
                ),
            )
        },
        {
            let d = task(root, "bad-type", |d| {
                write(
                    d,
                    "task.toml",
                    "[agent]\ntimeout_sec = \"long\"\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!("error: {s}/task.toml:agent.timeout_sec: expected a number, found string"),
            )
        },
        {
            let d = task(root, "negative", |d| {
                write(
                    d,
                    "task.toml",
                    "[agent]\ntimeout_sec = -5\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!("error: {s}/task.toml:agent.timeout_sec: must be greater than 0 (got -5)"),
            )
        },
        {
            let d = task(root, "no-instruction", |d| {
                fs::remove_file(d.join("instruction.md")).expect("rm")
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/instruction.md:file: missing (every task needs the prompt given to the agent)"
                ),
            )
        },
        {
            let d = task(root, "no-test", |d| {
                fs::remove_file(d.join("tests/test.sh")).expect("rm")
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/tests/test.sh:file: missing (the verifier entry point; it writes /logs/verifier/reward.txt or reward.json)"
                ),
            )
        },
        {
            let d = task(root, "escape", |d| {
                std::os::unix::fs::symlink("../../../etc/passwd", d.join("tests/data"))
                    .expect("symlink")
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/tests/data:symlink: points outside the task directory (target: ../../../etc/passwd)"
                ),
            )
        },
        {
            let d = task(root, "relative-artifact", |d| {
                write(
                    d,
                    "task.toml",
                    "artifacts = [\"out.txt\"]\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/task.toml:artifacts[0]: must be an absolute path inside the container (got \"out.txt\")"
                ),
            )
        },
        {
            let d = task(root, "typo", |d| {
                write(
                    d,
                    "task.toml",
                    "[agent]\ntimeout_secs = 5\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/task.toml:agent.timeout_secs: unknown key (did you mean timeout_sec?)"
                ),
            )
        },
        {
            let d = task(root, "step-no-instruction", |d| {
                write(
                    d,
                    "task.toml",
                    "[[steps]]\nname = \"one\"\n[environment]\ndocker_image = \"x\"\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/steps/one/instruction.md:file: missing (step \"one\" of task.toml needs the prompt given to the agent for that step)"
                ),
            )
        },
        {
            let d = task(root, "compose-unknown-service", |d| {
                fs::create_dir_all(d.join("environment")).expect("mkdir");
                write(
                    d,
                    "environment/docker-compose.yaml",
                    "services:\n  main:\n    depends_on: [cache]\n",
                )
            });
            let s = shown(&d);
            (
                d,
                format!(
                    "error: {s}/environment/docker-compose.yaml:services.main.depends_on[0]: unknown service \"cache\""
                ),
            )
        },
    ];
    for (dir, expected) in &cases {
        refused(
            root,
            &[dir.to_str().expect("utf8"), "--agent", "nop"],
            expected,
        );
    }
}

#[test]
fn bad_run_arguments_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let ok = task(root, "ok", |_| {});
    let ok_s = ok.to_string_lossy().into_owned();
    refused(
        root,
        &[&ok_s, "--agent", "gpt9"],
        "error: --agent:gpt9: unknown agent (built-in: oracle, nop; or define it under agents: in job.yaml)",
    );
    refused(
        root,
        &[&ok_s],
        "error: arguments:agents: no agents given (pass --agent NAME; built-in: oracle, nop)",
    );
    refused(
        root,
        &[&ok_s, "--agent", "nop", "-n", "0"],
        "error: -n:concurrency: must be at least 1",
    );
    let missing = root.join("nope").to_string_lossy().into_owned();
    refused(
        root,
        &[&missing, "--agent", "nop"],
        &format!("error: {missing}:path: no such task directory"),
    );
    let nosol = task(root, "nosol", |d| {
        fs::remove_dir_all(d.join("solution")).expect("rm")
    });
    let nosol_s = nosol.to_string_lossy().into_owned();
    refused(
        root,
        &[&nosol_s, "--agent", "oracle"],
        &format!(
            "error: {nosol_s}/solution:solve.sh: missing: the oracle agent needs a reference solution"
        ),
    );
}

#[test]
fn bad_job_configs_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    task(root, "ok", |_| {});
    let config = root.join("job.yaml");
    let c = config.to_string_lossy().into_owned();
    let cases = [
        (
            "tasks: [ok]\nagents: [nop]\nattempt: 2\n",
            format!(
                "error: {c}:yaml: unknown field `attempt`, expected one of `name`, `tasks`, `agents`, `attempts`, `concurrency`, `pass_threshold`, `job_dir`, `log_cap_mb`, `change_content_cap_mb`, `variants`, `timeouts`, `retries`, `models`, `integrity`, `network`, `backend`, `otlp` at line 3 column 1"
            ),
        ),
        (
            "tasks: [ok]\nmodels:\n  - {name: p, api: openai}\nagents:\n  - {name: x, kind: command, run: [echo], model: {provider: q, name: m}}\n",
            format!(
                "error: {c}:agents[0].model.provider: unknown provider \"q\" (expected one of p)"
            ),
        ),
        (
            "tasks: [ok]\nagents:\n  - {name: x, kind: command, run: [echo], budget: {max_requests: 3}}\n",
            format!(
                "error: {c}:agents[0].budget: needs a model: (budgets limit the calls made through arbiter's gateway)"
            ),
        ),
        (
            "tasks: [ok]\nmodels:\n  - {name: p, api: scripted}\nagents: [nop]\n",
            format!("error: {c}:models[0].script: required when api is scripted"),
        ),
        (
            "tasks: [ok]\nagents:\n  - name: x\n    kind: command\n    run: []\n",
            format!("error: {c}:agents[0].run: must name a command (a non-empty list)"),
        ),
        (
            "tasks: [ok]\nagents:\n  - name: x\n    kind: command\n    run: [echo]\n    env: {K: '${ARBITER_TEST_UNSET_VAR}'}\n",
            format!(
                "error: {c}:agents[0].env.K: ${{ARBITER_TEST_UNSET_VAR}} is not set in arbiter's environment"
            ),
        ),
        (
            "tasks: ['nothing-*']\nagents: [nop]\n",
            format!("error: {c}:tasks[0]: nothing-* matches no task directory"),
        ),
        (
            "tasks: [ok]\nagents: [nop]\nattempts: 0\n",
            format!("error: {c}:attempts: must be at least 1"),
        ),
    ];
    for (yaml, expected) in cases {
        fs::write(&config, yaml).expect("write");
        refused(root, &["-c", &c], &expected);
    }
}

#[test]
fn bad_agent_definition_names_its_problem() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    task(root, "ok", |_| {});
    let config = root.join("job.yaml");
    let c = config.to_string_lossy().into_owned();
    fs::write(
        &config,
        "tasks: [ok]\nagents:\n  - name: x\n    kind: comand\n    run: [echo]\n",
    )
    .expect("write");
    refused(
        root,
        &["-c", &c],
        &format!(
            "error: {c}:agents: unknown variant `comand`, expected one of `oracle`, `nop`, `command`, `aworld`, `claude-code`, `codex`, `mini-swe-agent`, `aider` at line 3 column 3"
        ),
    );
}

#[test]
fn bad_continuations_are_refused() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    task(root, "ok", |_| {});
    let steps = repo().join("tests/fixtures/harbor-tasks/multi-step");
    let config = root.join("job.yaml");
    let c = config.to_string_lossy().into_owned();
    let cases = [
        (
            "tasks: [ok]\nagents:\n  - {name: x, kind: command, run: [echo], continuation: {max_attempts: 0}}\n".to_string(),
            format!("error: {c}:agents[0].continuation.max_attempts: max_attempts must be between 1 and 100 (got 0)"),
        ),
        (
            "tasks: [ok]\nagents: [nop]\nvariants:\n  - {name: long, continuation: {max_attempts: 101}}\n".to_string(),
            format!("error: {c}:variants[0].continuation.max_attempts: max_attempts must be between 1 and 100 (got 101)"),
        ),
        (
            format!("tasks: [{}]\nagents: [oracle]\nvariants:\n  - {{name: goal, continuation: {{max_attempts: 2}}}}\n", steps.display()),
            format!("error: {c}:variants.goal.continuation: task arbiter-fixtures/multi-step is a multi-step task ([[steps]]); goal continuation runs single-step tasks only"),
        ),
    ];
    for (yaml, expected) in cases {
        fs::write(&config, yaml).expect("write");
        refused(root, &["-c", &c], &expected);
    }
    // An unknown key inside `continuation:` is named.
    fs::write(
        &config,
        "tasks: [ok]\nagents: [nop]\nvariants:\n  - {name: v, continuation: {max_tries: 2}}\n",
    )
    .expect("write");
    let out = arbiter(&[
        "run",
        "-c",
        &c,
        "--job-dir",
        &root.join("job").to_string_lossy(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unknown field `max_tries`"),
        "{}",
        stderr(&out)
    );
}
