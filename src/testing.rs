//! Helpers for unit tests: small task directories and job specs that run on the
//! [`crate::sandbox::FakeSandbox`].

use std::path::{Path, PathBuf};

use crate::job::{JobSpec, RunArgs, resolve};

/// Write a task dir named `name` under `root` (image `fake/image`, a solution, a test.sh);
/// `extra_toml` is appended to task.toml.
pub(crate) fn task_dir(root: &Path, name: &str, extra_toml: &str) -> PathBuf {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tests")).expect("tests dir");
    std::fs::create_dir_all(dir.join("solution")).expect("solution dir");
    std::fs::write(
        dir.join("task.toml"),
        format!("[environment]\ndocker_image = \"fake/image\"\n{extra_toml}"),
    )
    .expect("task.toml");
    std::fs::write(dir.join("instruction.md"), "Write /app/out.txt.\n").expect("instruction");
    std::fs::write(
        dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    .expect("test.sh");
    std::fs::write(dir.join("solution/solve.sh"), "echo hi > /app/out.txt\n").expect("solve.sh");
    dir
}

/// A resolved job over `tasks` with `agents`, its job dir under `root`.
pub(crate) fn job_spec(root: &Path, tasks: &[PathBuf], agents: &[&str], attempts: u32) -> JobSpec {
    let args = RunArgs {
        tasks: tasks.iter().map(|t| t.display().to_string()).collect(),
        agents: agents.iter().map(|a| a.to_string()).collect(),
        attempts: Some(attempts),
        job_dir: Some(root.join("job")),
        ..RunArgs::default()
    };
    resolve(&args).expect("job resolves")
}
