//! Job resolution of Harbor task features: datasets expand to their tasks, and the task's
//! env tables are checked before anything starts.

use std::path::{Path, PathBuf};

use super::{RunArgs, resolve};
use crate::testing::task_dir;

fn harbor_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/harbor-tasks")
        .join(name)
}

fn args(root: &Path, tasks: &[String], agents: &[&str]) -> RunArgs {
    RunArgs {
        tasks: tasks.to_vec(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
        job_dir: Some(root.join("job")),
        ..RunArgs::default()
    }
}

fn names(root: &Path, tasks: &[String]) -> Vec<String> {
    let spec = resolve(&args(root, tasks, &["nop"])).expect("job resolves");
    spec.tasks.iter().map(|t| t.name.clone()).collect()
}

#[test]
fn a_dataset_dir_expands_to_its_tasks_in_manifest_order() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dataset = harbor_fixture("dataset-mini");
    let shown = dataset.display().to_string();
    // dataset.toml lists task-10 before "second" (task-2's [task] name).
    let want = ["task-10", "arbiter-fixtures/second"];
    assert_eq!(names(tmp.path(), std::slice::from_ref(&shown)), want);
    assert_eq!(names(tmp.path(), &[format!("{shown}/")]), want);
    // A glob may name datasets too.
    let glob = harbor_fixture("dataset-m*").display().to_string();
    assert_eq!(names(tmp.path(), &[glob]), want);
    // A task given again, inside its dataset and on its own, runs once.
    let again = dataset.join("task-10").display().to_string();
    assert_eq!(names(tmp.path(), &[shown, again]), want);
}

#[test]
fn a_directory_without_tasks_is_refused_with_one_line() {
    let tmp = tempfile::tempdir().expect("tmp");
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("notes")).expect("mkdir");
    let err = resolve(&args(tmp.path(), &[empty.display().to_string()], &["nop"]))
        .expect_err("no tasks")
        .to_string();
    assert!(
        err.contains("no task.toml, and no subdirectory holds one"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn unresolvable_env_references_in_task_tables_are_refused_naming_the_table() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path();
    let cases = [
        (
            "env",
            "env = { TOOL = \"${ARBITER_HARBOR_SURELY_UNSET}\" }\n",
            &["nop"][..],
            "environment.env.TOOL",
        ),
        (
            "solution",
            "[solution.env]\nANSWER = \"${ARBITER_HARBOR_SURELY_UNSET}\"\n",
            &["nop", "oracle"][..],
            "solution.env.ANSWER",
        ),
    ];
    for (name, toml, agents, key) in cases {
        let dir = task_dir(root, name, toml);
        let err = resolve(&args(root, &[dir.display().to_string()], agents))
            .expect_err("unset reference")
            .to_string();
        assert_eq!(
            err,
            format!(
                "{}:{key}: ${{ARBITER_HARBOR_SURELY_UNSET}} is not set in arbiter's environment",
                dir.join("task.toml").display()
            )
        );
    }
    // The solution env is the oracle's: without the oracle it is not needed.
    let dir = root.join("solution");
    resolve(&args(root, &[dir.display().to_string()], &["nop"]))
        .expect("nop needs no solution env");
    // Defaults resolve.
    let dir = task_dir(
        root,
        "defaults",
        "env = { LEVEL = \"${ARBITER_HARBOR_SURELY_UNSET:-info}\" }\n",
    );
    resolve(&args(root, &[dir.display().to_string()], &["oracle"])).expect("a default resolves");
}
